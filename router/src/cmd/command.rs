//! COMMAND and its subcommands: what redis-cli and client libraries ask about commands.

use super::spec::CommandSpec;
use super::spec::*;
use super::{Args, Ctx, Pending, syntax_error};
use crate::resp::Reply;

pub const COMMAND_COUNT: CommandSpec = CommandSpec {
    name: "command|count",
    arity: 2,
    flags: &["loading", "stale"],
    keys: KeySpec::NONE,
    acl: SLOW_CONN,
    group: "server",
    since: "2.8.13",
    summary: "Get total number of Redis commands",
    complexity: "O(1)",
    run: count,
    ..CommandSpec::DEFAULT
};

pub const COMMAND_DOCS: CommandSpec = CommandSpec {
    name: "command|docs",
    arity: -2,
    flags: &["loading", "stale"],
    keys: KeySpec::NONE,
    acl: SLOW_CONN,
    group: "server",
    since: "7.0.0",
    summary: "Get array of specific Redis command documentation",
    complexity: "O(N) where N is the number of commands to look up",
    run: docs,
    ..CommandSpec::DEFAULT
};

pub const COMMAND_INFO: CommandSpec = CommandSpec {
    name: "command|info",
    arity: -2,
    flags: &["loading", "stale"],
    keys: KeySpec::NONE,
    acl: SLOW_CONN,
    group: "server",
    since: "2.8.13",
    summary: "Get array of specific Redis command details, or all when no argument is given.",
    complexity: "O(N) where N is the number of commands to look up",
    run: info,
    ..CommandSpec::DEFAULT
};

pub const COMMAND_LIST: CommandSpec = CommandSpec {
    name: "command|list",
    arity: -2,
    flags: &["loading", "stale"],
    keys: KeySpec::NONE,
    acl: SLOW_CONN,
    group: "server",
    since: "7.0.0",
    summary: "Get an array of Redis command names",
    complexity: "O(N) where N is the total number of Redis commands",
    run: list,
    ..CommandSpec::DEFAULT
};

pub const COMMAND_HELP: CommandSpec = CommandSpec {
    name: "command|help",
    arity: 2,
    flags: &["loading", "stale"],
    keys: KeySpec::NONE,
    acl: SLOW_CONN,
    group: "server",
    since: "5.0.0",
    summary: "Show helpful text about the different subcommands",
    complexity: "O(1)",
    run: help,
    ..CommandSpec::DEFAULT
};

pub const COMMAND: CommandSpec = CommandSpec {
    name: "command",
    arity: -1,
    flags: &["loading", "stale"],
    keys: KeySpec::NONE,
    acl: SLOW_CONN,
    group: "server",
    since: "2.8.13",
    summary: "Get array of Redis command details",
    complexity: "O(N) where N is the total number of Redis commands",
    run: all,
    subcommands: &[&COMMAND_COUNT, &COMMAND_DOCS, &COMMAND_INFO, &COMMAND_LIST, &COMMAND_HELP],
    lane: LaneClass::No,
};

fn info_entry(c: &CommandSpec) -> Reply {
    fn set(items: &'static [&'static str]) -> Reply {
        Reply::Set(items.iter().map(|s| Reply::simple(s)).collect())
    }
    Reply::Array(vec![
        Reply::bulk(c.name),
        Reply::Int(i64::from(c.arity)),
        set(c.flags),
        Reply::Int(i64::from(c.keys.first)),
        Reply::Int(i64::from(c.keys.last)),
        Reply::Int(i64::from(c.keys.step)),
        set(c.acl),
        Reply::Array(vec![]),
        Reply::Array(vec![]),
        Reply::Array(c.subcommands.iter().map(|s| info_entry(s)).collect()),
    ])
}

fn docs_entry(c: &CommandSpec) -> Reply {
    let mut fields = vec![
        (Reply::bulk("summary"), Reply::bulk(c.summary)),
        (Reply::bulk("since"), Reply::bulk(c.since)),
        (Reply::bulk("group"), Reply::bulk(c.group)),
        (Reply::bulk("complexity"), Reply::bulk(c.complexity)),
    ];
    if !c.subcommands.is_empty() {
        let subs = c.subcommands.iter().map(|s| (Reply::bulk(s.name), docs_entry(s))).collect();
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
        registry.commands.iter().map(|c| (Reply::bulk(c.name), docs_entry(c))).collect()
    } else {
        args[2..]
            .iter()
            .filter_map(|n| registry.lookup(n))
            .map(|c| (Reply::bulk(c.name), docs_entry(c)))
            .collect()
    };
    Reply::Map(pairs).into()
}

pub fn list(args: &Args, ctx: &mut Ctx) -> Pending {
    if args.len() > 2 {
        return syntax_error().into();
    }
    Reply::Array(ctx.registry.commands.iter().map(|c| Reply::bulk(c.name)).collect()).into()
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
