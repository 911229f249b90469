//! COMMAND and its subcommands: what redis-cli and client libraries ask about commands.

use super::table::{COMMANDS, CommandSpec, lookup};
use super::{Args, Ctx, Pending, syntax_error};
use crate::resp::Reply;

fn info_entry(c: &CommandSpec) -> Reply {
    fn set(items: &'static [&'static str]) -> Reply {
        Reply::Set(items.iter().map(|s| Reply::simple(s)).collect())
    }
    Reply::Array(vec![
        Reply::bulk(c.name),
        Reply::Int(i64::from(c.arity)),
        set(c.flags),
        Reply::Int(i64::from(c.keys.0)),
        Reply::Int(i64::from(c.keys.1)),
        Reply::Int(i64::from(c.keys.2)),
        set(c.acl),
        Reply::Array(vec![]),
        Reply::Array(vec![]),
        Reply::Array(c.subcommands.iter().map(info_entry).collect()),
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
pub fn all(_args: &Args, _ctx: &mut Ctx) -> Pending {
    Reply::Array(COMMANDS.iter().map(info_entry).collect()).into()
}

pub fn count(_args: &Args, _ctx: &mut Ctx) -> Pending {
    Reply::Int(COMMANDS.len() as i64).into()
}

/// `COMMAND INFO [name ...]`: nil for unknown names.
pub fn info(args: &Args, ctx: &mut Ctx) -> Pending {
    if args.len() == 2 {
        return all(args, ctx);
    }
    Reply::Array(args[2..].iter().map(|n| lookup(n).map_or(Reply::Nil, info_entry)).collect()).into()
}

/// `COMMAND DOCS [name ...]`: a map of name to documentation; unknown names are left out.
pub fn docs(args: &Args, _ctx: &mut Ctx) -> Pending {
    let pairs: Vec<(Reply, Reply)> = if args.len() == 2 {
        COMMANDS.iter().map(|c| (Reply::bulk(c.name), docs_entry(c))).collect()
    } else {
        args[2..].iter().filter_map(|n| lookup(n)).map(|c| (Reply::bulk(c.name), docs_entry(c))).collect()
    };
    Reply::Map(pairs).into()
}

pub fn list(args: &Args, _ctx: &mut Ctx) -> Pending {
    if args.len() > 2 {
        return syntax_error().into();
    }
    Reply::Array(COMMANDS.iter().map(|c| Reply::bulk(c.name)).collect()).into()
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
    Reply::Array(lines.iter().map(|l| Reply::simple(l)).collect()).into()
}
