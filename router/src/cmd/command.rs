//! COMMAND and its subcommands: what redis-cli and client libraries ask about commands.

use shoal_wire::acl::commands;

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

pub const COMMAND: CommandSpec = CommandSpec {
    decl: &redis::COMMAND,
    run: all,
    subcommands: &[&COMMAND_COUNT, &COMMAND_DOCS, &COMMAND_INFO, &COMMAND_LIST, &COMMAND_HELP],
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
    Reply::Array(vec![
        Reply::bulk(c.name()),
        Reply::Int(i64::from(c.arity())),
        set(c.decl.flags, &commands::FLAGS, ""),
        Reply::Int(i64::from(keys.first)),
        Reply::Int(i64::from(keys.last)),
        Reply::Int(i64::from(keys.step)),
        set(c.categories(), &commands::CATEGORIES, "@"),
        Reply::Array(vec![]),
        Reply::Array(vec![]),
        Reply::Array(c.subcommands.iter().map(|s| info_entry(s)).collect()),
    ])
}

fn docs_entry(c: &CommandSpec) -> Reply {
    let d = c.decl;
    let mut fields = vec![
        (Reply::bulk("summary"), Reply::bulk(d.summary)),
        (Reply::bulk("since"), Reply::bulk(d.since)),
        (Reply::bulk("group"), Reply::bulk(d.group)),
        (Reply::bulk("complexity"), Reply::bulk(d.complexity)),
    ];
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
    Reply::Array(args[2..].iter().map(|n| registry.lookup(n).map_or(Reply::Nil, info_entry)).collect()).into()
}

/// `COMMAND DOCS [name ...]`: a map of name to documentation; unknown names are left out.
pub fn docs(args: &Args, ctx: &mut Ctx) -> Pending {
    let registry = ctx.registry;
    let pairs: Vec<(Reply, Reply)> = if args.len() == 2 {
        registry.commands.iter().map(|c| (Reply::bulk(c.name()), docs_entry(c))).collect()
    } else {
        args[2..]
            .iter()
            .filter_map(|n| registry.lookup(n))
            .map(|c| (Reply::bulk(c.name()), docs_entry(c)))
            .collect()
    };
    Reply::Map(pairs).into()
}

pub fn list(args: &Args, ctx: &mut Ctx) -> Pending {
    if args.len() > 2 {
        return syntax_error().into();
    }
    Reply::Array(ctx.registry.commands.iter().map(|c| Reply::bulk(c.name())).collect()).into()
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
        "DOCS [<command-name> ...]",
        "    Return documentation details about multiple Redis commands.",
        "HELP",
        "    Print this help.",
    ];
    super::help_reply(&lines)
}
