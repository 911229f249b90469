//! COMMAND and its subcommands: what redis-cli and client libraries ask about commands. Redis's
//! own descriptions (tips, key specs, the docs with arguments and history) come from
//! `shoal_wire::acl::docs`; the commands listed are the ones this router serves.

use bytes::Bytes;
use shoal_wire::acl::commands;
use shoal_wire::acl::docs::{self, Node};

use super::spec::CommandSpec;
use super::spec::*;
use super::{Args, Ctx, Pending, syntax_error};
use crate::resp::Reply;

pub const COMMAND_COUNT: CommandSpec =
    CommandSpec { decl: &redis::COMMAND_COUNT, run: count, ..CommandSpec::DEFAULT };

pub const COMMAND_DOCS: CommandSpec =
    CommandSpec { decl: &redis::COMMAND_DOCS, run: docs, ..CommandSpec::DEFAULT };

pub const COMMAND_INFO: CommandSpec =
    CommandSpec { decl: &redis::COMMAND_INFO, run: info, ..CommandSpec::DEFAULT };

pub const COMMAND_LIST: CommandSpec =
    CommandSpec { decl: &redis::COMMAND_LIST, run: list, ..CommandSpec::DEFAULT };

pub const COMMAND_HELP: CommandSpec =
    CommandSpec { decl: &redis::COMMAND_HELP, run: help, ..CommandSpec::DEFAULT };

pub const COMMAND_GETKEYS: CommandSpec =
    CommandSpec { decl: &redis::COMMAND_GETKEYS, run: |a, c| getkeys(a, c, false), ..CommandSpec::DEFAULT };

pub const COMMAND_GETKEYSANDFLAGS: CommandSpec = CommandSpec {
    decl: &redis::COMMAND_GETKEYSANDFLAGS,
    run: |a, c| getkeys(a, c, true),
    ..CommandSpec::DEFAULT
};

pub const COMMAND: CommandSpec = CommandSpec {
    decl: &redis::COMMAND,
    run: all,
    subcommands: &[
        &COMMAND_COUNT,
        &COMMAND_DOCS,
        &COMMAND_INFO,
        &COMMAND_LIST,
        &COMMAND_GETKEYS,
        &COMMAND_GETKEYSANDFLAGS,
        &COMMAND_HELP,
    ],
    lane: LaneClass::No,
};

fn info_entry(c: &CommandSpec) -> Reply {
    // Flags and categories in Redis's order (their bits' order), categories as `@read`.
    fn set<const N: usize>(mask: u32, names: &'static [&'static str; N], prefix: &str) -> Reply {
        let name = |n: &'static str| {
            Reply::Simple(if prefix.is_empty() { n.into() } else { format!("{prefix}{n}").into() })
        };
        Reply::Set(commands::names(mask, names).map(name).collect())
    }
    let keys = c.key_range();
    // Redis's tips and key specs for its commands; none for Shoal's own.
    let described = docs::docs(c.name());
    let (tips, key_specs) = match described {
        Some(d) => (reply_of(&d.tips), reply_of(&d.key_specs)),
        None => (Reply::Set(vec![]), Reply::Set(vec![])),
    };
    Reply::Array(vec![
        Reply::bulk(c.name()),
        Reply::Int(i64::from(c.arity())),
        set(c.decl.flags, &commands::FLAGS, ""),
        Reply::Int(i64::from(keys.first)),
        Reply::Int(i64::from(keys.last)),
        Reply::Int(i64::from(keys.step)),
        set(c.categories(), &commands::CATEGORIES, "@"),
        tips,
        key_specs,
        Reply::Set(c.subcommands.iter().map(|s| info_entry(s)).collect()),
    ])
}

/// A node of Redis's descriptions as a reply.
fn reply_of(n: &Node) -> Reply {
    match n {
        Node::Map(pairs) => Reply::Map(pairs.iter().map(|(k, v)| (reply_of(k), reply_of(v))).collect()),
        Node::Array(items) => Reply::Array(items.iter().map(reply_of).collect()),
        Node::Set(items) => Reply::Set(items.iter().map(reply_of).collect()),
        Node::Simple(s) => Reply::Simple((*s).into()),
        Node::Bulk(b) => Reply::Bulk(Bytes::from_static(b)),
        Node::Int(i) => Reply::Int(*i),
    }
}

fn docs_entry(c: &CommandSpec) -> Reply {
    let d = c.decl;
    let mut fields = match docs::docs(c.name()) {
        // Redis's entry (with arguments, history, deprecation) for its commands.
        Some(described) => match reply_of(&described.docs) {
            Reply::Map(fields) => fields,
            _ => vec![],
        },
        None => vec![
            (Reply::bulk("summary"), Reply::bulk(d.summary)),
            (Reply::bulk("since"), Reply::bulk(d.since)),
            (Reply::bulk("group"), Reply::bulk(d.group)),
            (Reply::bulk("complexity"), Reply::bulk(d.complexity)),
        ],
    };
    if !c.subcommands.is_empty() {
        let subs = c.subcommands.iter().map(|s| (Reply::bulk(s.name()), docs_entry(s))).collect();
        fields.push((Reply::bulk("subcommands"), Reply::Map(subs)));
    }
    Reply::Map(fields)
}

/// `COMMAND`: details of every command.
pub fn all(_args: &Args, ctx: &mut Ctx) -> Pending {
    Reply::Array(ctx.registry.commands.iter().map(|c| info_entry(c)).collect()).into()
}

pub fn count(_args: &Args, ctx: &mut Ctx) -> Pending {
    Reply::Int(ctx.registry.commands.len() as i64).into()
}

/// `COMMAND INFO [name ...]`: nil for unknown names.
pub fn info(args: &Args, ctx: &mut Ctx) -> Pending {
    if args.len() == 2 {
        return all(args, ctx);
    }
    let registry = ctx.registry;
    Reply::Array(args[2..].iter().map(|n| named(registry, n).map_or(Reply::Nil, info_entry)).collect()).into()
}

/// A command by the name COMMAND INFO and DOCS take: `name`, or `parent|sub` for a subcommand.
fn named(registry: &Registry, name: &[u8]) -> Option<&'static CommandSpec> {
    let Some(bar) = name.iter().position(|&b| b == b'|') else { return registry.lookup(name) };
    subcommand(registry.lookup(&name[..bar])?, &name[bar + 1..])
}

/// `COMMAND DOCS [name ...]`: a map of name to documentation; unknown names are left out.
pub fn docs(args: &Args, ctx: &mut Ctx) -> Pending {
    let registry = ctx.registry;
    let pairs: Vec<(Reply, Reply)> = if args.len() == 2 {
        registry.commands.iter().map(|c| (Reply::bulk(c.name()), docs_entry(c))).collect()
    } else {
        args[2..]
            .iter()
            .filter_map(|n| named(registry, n))
            .map(|c| (Reply::bulk(c.name()), docs_entry(c)))
            .collect()
    };
    Reply::Map(pairs).into()
}

/// `COMMAND LIST [FILTERBY MODULE name|ACLCAT category|PATTERN pattern]`: every command and
/// subcommand (`client|list`), in the registry's order, or those the filter keeps (no modules;
/// an unknown category keeps none; patterns match full names ignoring case).
pub fn list(args: &Args, ctx: &mut Ctx) -> Pending {
    let keep: Box<dyn Fn(&CommandSpec) -> bool> = match &args[2..] {
        [] => Box::new(|_| true),
        [by, kind, arg] if by.eq_ignore_ascii_case(b"filterby") => match &kind.to_ascii_lowercase()[..] {
            b"module" => Box::new(|_| false),
            b"aclcat" => {
                let cat = commands::category(&String::from_utf8_lossy(arg)).unwrap_or(0);
                Box::new(move |c| c.decl.categories & cat != 0)
            }
            b"pattern" => {
                let pattern = arg.to_ascii_lowercase();
                Box::new(move |c| shoal_wire::glob::glob_match(&pattern, c.name().as_bytes()))
            }
            _ => return syntax_error().into(),
        },
        _ => return syntax_error().into(),
    };
    let mut names = Vec::new();
    for c in ctx.registry.commands {
        for spec in std::iter::once(*c).chain(c.subcommands.iter().copied()) {
            if keep(spec) {
                names.push(Reply::bulk(spec.name()));
            }
        }
    }
    Reply::Array(names).into()
}

pub fn help(_args: &Args, _ctx: &mut Ctx) -> Pending {
    let lines = [
        "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "(no subcommand)",
        "    Return details about all Redis commands.",
        "COUNT",
        "    Return the total number of commands in this Redis server.",
        "LIST",
        "    Return a list of all commands in this Redis server.",
        "INFO [<command-name> ...]",
        "    Return details about multiple Redis commands.",
        "    If no command names are given, documentation details for all",
        "    commands are returned.",
        "DOCS [<command-name> ...]",
        "    Return documentation details about multiple Redis commands.",
        "    If no command names are given, documentation details for all",
        "    commands are returned.",
        "GETKEYS <full-command>",
        "    Return the keys from a full Redis command.",
        "GETKEYSANDFLAGS <full-command>",
        "    Return the keys and the access flags from a full Redis command.",
        "HELP",
        "    Prints this help.",
    ];
    super::help_reply(&lines)
}

/// `COMMAND GETKEYS|GETKEYSANDFLAGS <command> [args...]`: the keys a command's arguments name (by
/// Redis's key specs, as Redis finds them), with each key's flags when asked.
fn getkeys(args: &Args, ctx: &mut Ctx, with_flags: bool) -> Pending {
    let argv = &args[2..];
    let Some(c) = resolve(ctx, argv) else {
        return Reply::error("ERR Invalid command specified").into();
    };
    if !c.decl.keys.iter().any(|k| !k.not_key) {
        return Reply::error("ERR The command has no key arguments").into();
    }
    if !c.arity_ok(argv.len()) {
        return Reply::error("ERR Invalid number of arguments specified for command").into();
    }
    let keys = match c.name() {
        // Incomplete key specs: Redis asks the command's own key finder.
        "sort" | "sort_ro" => commands::sort_keys(argv, c.name() == "sort_ro"),
        "migrate" => commands::migrate_keys(argv),
        // A command newer than 7.0's table (DELIFEQ) by its own declaration's specs.
        _ if c.decl.id.is_none_or(|id| commands::specs_accept(id, argv)) => commands::keys_of(c.decl, argv),
        _ => Vec::new(),
    };
    if keys.is_empty() {
        return if c.has_flag(commands::flag::NO_MANDATORY_KEYS) {
            Reply::Array(vec![]).into()
        } else {
            Reply::error("ERR Invalid arguments specified for command").into()
        };
    }
    let items = keys.iter().map(|k| {
        let key = Reply::Bulk(argv[k.index].clone());
        if !with_flags {
            return key;
        }
        let flags = key_flags(c, k);
        Reply::Array(vec![key, Reply::Set(flags.into_iter().map(|f| Reply::Simple(f.into())).collect())])
    });
    Reply::Array(items.collect()).into()
}

/// The command `argv` names, as Redis's `lookupCommand` finds it: a container's subcommand when
/// one is given (none if it has no such subcommand), else the command itself.
fn resolve(ctx: &Ctx, argv: &[Bytes]) -> Option<&'static CommandSpec> {
    let c = ctx.registry.lookup(argv.first()?)?;
    if c.subcommands.is_empty() || argv.len() < 2 {
        return Some(c);
    }
    subcommand(c, &argv[1])
}

/// A container's subcommand by its own name (`kill` of CLIENT), any case.
fn subcommand(parent: &'static CommandSpec, sub: &[u8]) -> Option<&'static CommandSpec> {
    let full = format!("{}|{}", parent.name(), String::from_utf8_lossy(sub).to_ascii_lowercase());
    parent.subcommands.iter().copied().find(|s| s.name() == full)
}

/// A key's flags as COMMAND GETKEYSANDFLAGS names them: its key spec's, except where the flags
/// depend on the arguments (SET with or without GET, BITFIELD reading or writing), which Redis's
/// own key finders for those commands decide.
fn key_flags(c: &CommandSpec, k: &commands::KeyUse) -> Vec<&'static str> {
    let variable = c.decl.keys.get(k.spec).is_some_and(|s| s.variable);
    match (variable, c.name()) {
        (true, "set") if k.read => vec!["RW", "access", "update"],
        (true, "set") => vec!["OW", "update"],
        (true, "bitfield") if k.write => vec!["RW", "access", "update"],
        (true, "bitfield") => vec!["RO", "access"],
        // SORT's STORE destination (its second, incomplete spec).
        (_, "sort") if k.write => vec!["OW", "update"],
        _ => docs::key_spec_flags(c.name(), k.spec),
    }
}
