//! SLOWLOG GET/LEN/RESET/HELP over the router's slow log (`crate::stats`): commands whose reply
//! took at least `slowlog-log-slower-than` microseconds, end to end as the client saw them.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::spec::*;
use super::{Args, Ctx, Pending};
use crate::resp::Reply;

pub const SLOWLOG_GET: CommandSpec =
    CommandSpec { decl: &redis::SLOWLOG_GET, run: get, ..CommandSpec::DEFAULT };

pub const SLOWLOG_LEN: CommandSpec =
    CommandSpec { decl: &redis::SLOWLOG_LEN, run: len, ..CommandSpec::DEFAULT };

pub const SLOWLOG_RESET: CommandSpec =
    CommandSpec { decl: &redis::SLOWLOG_RESET, run: reset, ..CommandSpec::DEFAULT };

pub const SLOWLOG_HELP: CommandSpec =
    CommandSpec { decl: &redis::SLOWLOG_HELP, run: help, ..CommandSpec::DEFAULT };

pub const SLOWLOG: CommandSpec = CommandSpec {
    decl: &redis::SLOWLOG,
    run: help,
    subcommands: &[&SLOWLOG_GET, &SLOWLOG_LEN, &SLOWLOG_RESET, &SLOWLOG_HELP],
    lane: LaneClass::No,
};

pub fn get(args: &Args, ctx: &mut Ctx) -> Pending {
    let n = match args.get(2) {
        None => 10,
        Some(a) => match shoal_wire::num::parse_i64(a) {
            Some(-1) => usize::MAX,
            Some(n) if n >= 0 => n as usize,
            _ => return Reply::error("ERR count should be greater than or equal to -1").into(),
        },
    };
    let entries = ctx.state.stats.slowlog(n);
    Reply::Array(
        entries
            .into_iter()
            .map(|e| {
                Reply::Array(vec![
                    Reply::Int(e.id as i64),
                    Reply::Int(e.at as i64),
                    Reply::Int(e.usec as i64),
                    Reply::Array(e.args.into_iter().map(Reply::Bulk).collect()),
                    Reply::Bulk(Bytes::from(e.peer)),
                    Reply::Bulk(Bytes::from(e.name)),
                ])
            })
            .collect(),
    )
    .into()
}

pub fn len(_args: &Args, ctx: &mut Ctx) -> Pending {
    Reply::Int(ctx.state.stats.slowlog_len() as i64).into()
}

pub fn reset(_args: &Args, ctx: &mut Ctx) -> Pending {
    ctx.state.stats.slowlog_reset();
    Reply::OK.into()
}

pub fn help(_args: &Args, _ctx: &mut Ctx) -> Pending {
    let lines = [
        "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "GET [<count>]",
        "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
        "    Entries are made of:",
        "    id, timestamp, time in microseconds, arguments array, client IP and port,",
        "    client name",
        "LEN",
        "    Return the length of the slowlog.",
        "RESET",
        "    Reset the slowlog.",
        "HELP",
        "    Prints this help.",
    ];
    super::help_reply(&lines)
}

/// The threshold, for CONFIG.
pub fn threshold(ctx: &Ctx) -> i64 {
    ctx.state.stats.slower_than_us.load(Ordering::Relaxed)
}
