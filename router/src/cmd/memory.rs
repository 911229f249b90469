//! MEMORY: USAGE asks the key's node (`node/src/commands/object.rs`); STATS, DOCTOR,
//! MALLOC-STATS and PURGE answer for the cluster from the nodes' stats (what INFO memory reads):
//! Redis 7.0's fields and texts, filled with what Shoal measures. The nodes account each key's
//! entry, index and value together, so the dataset is everything they hold (no separate overhead),
//! no peak is kept (the peak is the current total), and no allocator statistics are gathered
//! (routers and nodes allocate with jemalloc, but a cluster's arenas are not one report):
//! MALLOC-STATS and PURGE answer as a Redis built without jemalloc.

use std::sync::Arc;

use shoal_wire::proto::NodeStats;

use super::spec::*;
use super::typed::read_second;
use super::{Args, Ctx, Pending};
use crate::resp::Reply;

pub const MEMORY_USAGE: CommandSpec =
    CommandSpec { decl: &redis::MEMORY_USAGE, run: read_second, ..CommandSpec::DEFAULT };

pub const MEMORY_STATS: CommandSpec =
    CommandSpec { decl: &redis::MEMORY_STATS, run: stats, ..CommandSpec::DEFAULT };

pub const MEMORY_DOCTOR: CommandSpec =
    CommandSpec { decl: &redis::MEMORY_DOCTOR, run: doctor, ..CommandSpec::DEFAULT };

pub const MEMORY_MALLOC_STATS: CommandSpec =
    CommandSpec { decl: &redis::MEMORY_MALLOC_STATS, run: malloc_stats, ..CommandSpec::DEFAULT };

pub const MEMORY_PURGE: CommandSpec =
    CommandSpec { decl: &redis::MEMORY_PURGE, run: purge, ..CommandSpec::DEFAULT };

pub const MEMORY_HELP: CommandSpec =
    CommandSpec { decl: &redis::MEMORY_HELP, run: memory_help, ..CommandSpec::DEFAULT };

pub const MEMORY: CommandSpec = CommandSpec {
    decl: &redis::MEMORY,
    run: memory_help,
    subcommands: &[
        &MEMORY_USAGE,
        &MEMORY_STATS,
        &MEMORY_DOCTOR,
        &MEMORY_MALLOC_STATS,
        &MEMORY_PURGE,
        &MEMORY_HELP,
    ],
    lane: LaneClass::No,
};

/// The cluster's memory as the nodes that answered report it.
struct Usage {
    /// Bytes the nodes account for (entries, keys, values, indexes).
    total: u64,
    /// Resident set size: of this process in embedded mode, else the nodes' summed.
    rss: u64,
    keys: u64,
}

fn gather(ctx: &mut Ctx, answer: impl FnOnce(Usage) -> Reply + Send + 'static) -> Pending {
    let routing = Arc::clone(ctx.routing);
    let embedded = ctx.state.embedded.is_some();
    Pending::later(async move {
        let nodes: Vec<NodeStats> = routing.stats_all().await.into_iter().flatten().collect();
        let total = nodes.iter().map(|n| n.used_memory).sum();
        let keys = nodes.iter().map(|n| n.keys).sum();
        answer(Usage { total, rss: super::info::resident_bytes(embedded, &nodes), keys })
    })
}

fn ratio(a: u64, b: u64) -> Reply {
    let r = if b == 0 { 0.0 } else { a as f64 / b as f64 };
    Reply::Double(format!("{r}").into())
}

/// `MEMORY STATS`: Redis 7.0's 27 fields and `db.0`, in its order.
pub fn stats(_args: &Args, ctx: &mut Ctx) -> Pending {
    gather(ctx, |u| {
        let int = |n: u64| Reply::Int(n.min(i64::MAX as u64) as i64);
        let mut m: Vec<(Reply, Reply)> = Vec::new();
        let mut put = |name: &'static str, v: Reply| m.push((Reply::bulk(name), v));
        put("peak.allocated", int(u.total));
        put("total.allocated", int(u.total));
        for name in [
            "startup.allocated",
            "replication.backlog",
            "clients.slaves",
            "clients.normal",
            "cluster.links",
            "aof.buffer",
            "lua.caches",
            "functions.caches",
        ] {
            put(name, int(0));
        }
        if u.keys > 0 {
            let zeros =
                ["overhead.hashtable.main", "overhead.hashtable.expires", "overhead.hashtable.slot-to-keys"];
            put("db.0", Reply::Map(zeros.iter().map(|n| (Reply::bulk(*n), int(0))).collect()));
        }
        put("overhead.total", int(0));
        put("keys.count", int(u.keys));
        put("keys.bytes-per-key", int(u.total.checked_div(u.keys).unwrap_or(0)));
        put("dataset.bytes", int(u.total));
        put("dataset.percentage", ratio(100 * u.total, u.total.max(1)));
        put("peak.percentage", ratio(100 * u.total, u.total.max(1)));
        put("allocator.allocated", int(u.total));
        put("allocator.active", int(u.total));
        put("allocator.resident", int(u.rss));
        put("allocator-fragmentation.ratio", ratio(1, 1));
        put("allocator-fragmentation.bytes", int(0));
        put("allocator-rss.ratio", ratio(u.rss, u.total));
        put("allocator-rss.bytes", Reply::Int(u.rss as i64 - u.total as i64));
        put("rss-overhead.ratio", ratio(1, 1));
        put("rss-overhead.bytes", int(0));
        put("fragmentation", ratio(u.rss, u.total));
        put("fragmentation.bytes", Reply::Int(u.rss as i64 - u.total as i64));
        Reply::Map(m)
    })
}

/// `MEMORY DOCTOR`: Redis's report for what Shoal can tell (an almost empty cluster, a resident
/// size over 1.4 times the data and 10 MB more).
pub fn doctor(_args: &Args, ctx: &mut Ctx) -> Pending {
    gather(ctx, |u| {
        let text = if u.total < 5 << 20 {
            "Hi Sam, this instance is empty or is using very little memory, my issues detector can't be used in \
             these conditions. Please, leave for your mission on Earth and fill it with some data. The new Sam and \
             I will be back to our programming as soon as I finished rebooting.\n"
                .to_string()
        } else if u.rss as f64 / u.total as f64 > 1.4 && u.rss.saturating_sub(u.total) > 10 << 20 {
            "Sam, I detected a few issues in this Redis instance memory implants:\n\n * High total RSS: This \
             instance has a memory fragmentation and RSS overhead greater than 1.4 (this means that the Resident \
             Set Size of the Redis process is much larger than the sum of the logical allocations Redis \
             performed). This problem is usually due either to a large peak memory (check if there is a peak \
             memory entry above in the report) or may result from a workload that causes the allocator to fragment \
             memory a lot. If the problem is a large peak memory, then there is no issue. Otherwise, make sure you \
             are using the Jemalloc allocator and not the default libc malloc. Note: The currently used allocator \
             is \"libc\".\n\nI'm here to keep you safe, Sam. I want to help you.\n"
                .to_string()
        } else {
            "Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this \
             base.\n"
                .to_string()
        };
        Reply::Verbatim(text.into())
    })
}

/// `MEMORY MALLOC-STATS`: Redis's answer without jemalloc (no allocator report is gathered).
pub fn malloc_stats(_args: &Args, _ctx: &mut Ctx) -> Pending {
    Reply::Verbatim("Stats not supported for the current allocator".into()).into()
}

/// `MEMORY PURGE`: OK, as Redis without jemalloc (jemalloc here returns dirty pages by its own
/// decay; nothing asks it to purge at once).
pub fn purge(_args: &Args, _ctx: &mut Ctx) -> Pending {
    Reply::OK.into()
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
