//! LATENCY and MEMORY USAGE.
//!
//! LATENCY HISTOGRAM reports each command's latency distribution from the router's stats
//! (`crate::stats`: power-of-two microsecond buckets, end to end as clients see it). The latency
//! *monitor* (LATEST, HISTORY, GRAPH, DOCTOR) records events above `latency-monitor-threshold`,
//! which is 0 (off) in Redis by default and is not offered by Shoal: those answer as a Redis with
//! the monitor off does. MEMORY USAGE asks the key's node (`node/src/commands/object.rs`).

use bytes::Bytes;

use super::spec::*;
use super::typed::read_second;
use super::{Args, Ctx, Pending};
use crate::resp::Reply;
use crate::stats::BUCKETS;

pub const LATENCY_LATEST: CommandSpec =
    CommandSpec { decl: &redis::LATENCY_LATEST, run: latest, ..CommandSpec::DEFAULT };

pub const LATENCY_HISTORY: CommandSpec =
    CommandSpec { decl: &redis::LATENCY_HISTORY, run: history, ..CommandSpec::DEFAULT };

pub const LATENCY_RESET: CommandSpec =
    CommandSpec { decl: &redis::LATENCY_RESET, run: reset, ..CommandSpec::DEFAULT };

pub const LATENCY_DOCTOR: CommandSpec =
    CommandSpec { decl: &redis::LATENCY_DOCTOR, run: doctor, ..CommandSpec::DEFAULT };

pub const LATENCY_GRAPH: CommandSpec =
    CommandSpec { decl: &redis::LATENCY_GRAPH, run: graph, ..CommandSpec::DEFAULT };

pub const LATENCY_HISTOGRAM: CommandSpec =
    CommandSpec { decl: &redis::LATENCY_HISTOGRAM, run: histogram, ..CommandSpec::DEFAULT };

pub const LATENCY_HELP: CommandSpec =
    CommandSpec { decl: &redis::LATENCY_HELP, run: help, ..CommandSpec::DEFAULT };

pub const LATENCY: CommandSpec = CommandSpec {
    decl: &redis::LATENCY,
    run: help,
    subcommands: &[
        &LATENCY_LATEST,
        &LATENCY_HISTORY,
        &LATENCY_RESET,
        &LATENCY_DOCTOR,
        &LATENCY_GRAPH,
        &LATENCY_HISTOGRAM,
        &LATENCY_HELP,
    ],
    lane: LaneClass::No,
};

pub const MEMORY_USAGE: CommandSpec =
    CommandSpec { decl: &redis::MEMORY_USAGE, run: read_second, ..CommandSpec::DEFAULT };

pub const MEMORY_HELP: CommandSpec =
    CommandSpec { decl: &redis::MEMORY_HELP, run: memory_help, ..CommandSpec::DEFAULT };

pub const MEMORY: CommandSpec = CommandSpec {
    decl: &redis::MEMORY,
    run: memory_help,
    subcommands: &[&MEMORY_USAGE, &MEMORY_HELP],
    lane: LaneClass::No,
};

pub fn latest(_args: &Args, _ctx: &mut Ctx) -> Pending {
    Reply::Array(Vec::new()).into()
}

pub fn history(_args: &Args, _ctx: &mut Ctx) -> Pending {
    Reply::Array(Vec::new()).into()
}

pub fn reset(_args: &Args, _ctx: &mut Ctx) -> Pending {
    Reply::Int(0).into()
}

pub fn graph(args: &Args, _ctx: &mut Ctx) -> Pending {
    Reply::error_fmt(format!("ERR No samples available for event '{}'", String::from_utf8_lossy(&args[2])))
        .into()
}

pub fn doctor(_args: &Args, _ctx: &mut Ctx) -> Pending {
    Reply::Verbatim(Bytes::from_static(
        b"I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. You may \
          use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. If we weren't in \
          a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n",
    ))
    .into()
}

/// `LATENCY HISTOGRAM [command ...]`: per command, its calls and the cumulative count of calls
/// at or below each power-of-two microsecond bound (Redis's shape).
pub fn histogram(args: &Args, ctx: &mut Ctx) -> Pending {
    let wanted: Vec<Vec<u8>> = args[2..].iter().map(|a| a.to_ascii_lowercase()).collect();
    let entries = ctx
        .state
        .stats
        .snapshot(|s| ctx.registry.name_of(s))
        .into_iter()
        .filter(|n| wanted.is_empty() || wanted.iter().any(|w| w == n.name.as_bytes()))
        .map(|n| {
            let mut cumulative = 0;
            let mut points = Vec::new();
            for k in 0..BUCKETS {
                if n.buckets[k] == 0 {
                    continue;
                }
                cumulative += n.buckets[k];
                points.push((Reply::Int(1i64 << k), Reply::Int(cumulative as i64)));
            }
            let body = vec![
                (Reply::bulk("calls"), Reply::Int(n.calls as i64)),
                (Reply::bulk("histogram_usec"), Reply::Map(points)),
            ];
            (Reply::bulk(n.name), Reply::Map(body))
        })
        .collect();
    Reply::Map(entries).into()
}

pub fn help(_args: &Args, _ctx: &mut Ctx) -> Pending {
    let lines = [
        "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "DOCTOR",
        "    Return a human readable latency analysis report.",
        "GRAPH <event>",
        "    Return an ASCII latency graph for the <event> class.",
        "HISTORY <event>",
        "    Return time-latency samples for the <event> class.",
        "LATEST",
        "    Return the latest latency samples for all events.",
        "RESET [<event> ...]",
        "    Reset latency data of one or more <event> classes.",
        "    (default: reset all data for all event classes)",
        "HISTOGRAM [COMMAND ...]",
        "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
        "    If no commands are specified then all histograms are replied.",
        "HELP",
        "    Prints this help.",
    ];
    super::help_reply(&lines)
}

pub fn memory_help(_args: &Args, _ctx: &mut Ctx) -> Pending {
    let lines = [
        "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "DOCTOR",
        "    Return memory problems reports.",
        "MALLOC-STATS",
        "    Return internal statistics report from the memory allocator.",
        "PURGE",
        "    Attempt to purge dirty pages for reclamation by the allocator.",
        "STATS",
        "    Return information about the memory usage of the server.",
        "USAGE <key> [SAMPLES <count>]",
        "    Return memory in bytes used by <key> and its value. Nested values are",
        "    sampled up to <count> times (default: 5, 0 means sample all).",
        "HELP",
        "    Prints this help.",
    ];
    super::help_reply(&lines)
}
