//! CONFIG GET/SET/RESETSTAT/REWRITE/HELP for the parameters Shoal has.
//!
//! The router's own parameters (the slow log's) can be changed; the nodes' (maxmemory, the
//! policy, the encoding thresholds) are read from the nodes and set when a node starts (its
//! command line), so CONFIG SET answers for them as Redis does for an immutable parameter.
//! Parameters Shoal does not have are not listed (CONFIG GET of them is empty, as in Redis for
//! an unknown name).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use shoal_wire::glob::glob_match;

use super::spec::*;
use super::{Args, Ctx, Pending};
use crate::resp::Reply;

pub const CONFIG_GET: CommandSpec = CommandSpec {
    name: "config|get",
    arity: -3,
    flags: &["admin", "noscript", "loading", "stale"],
    keys: KeySpec::NONE,
    acl: &["@admin", "@slow", "@dangerous"],
    group: "server",
    since: "2.0.0",
    summary: "Get the values of configuration parameters",
    complexity: "O(N) when N is the number of configuration parameters provided",
    run: get,
    ..CommandSpec::DEFAULT
};

pub const CONFIG_SET: CommandSpec = CommandSpec {
    name: "config|set",
    arity: -4,
    flags: &["admin", "noscript", "loading", "stale"],
    keys: KeySpec::NONE,
    acl: &["@admin", "@slow", "@dangerous"],
    group: "server",
    since: "2.0.0",
    summary: "Set configuration parameters to the given values",
    complexity: "O(N) when N is the number of configuration parameters provided",
    run: set,
    ..CommandSpec::DEFAULT
};

pub const CONFIG_RESETSTAT: CommandSpec = CommandSpec {
    name: "config|resetstat",
    arity: 2,
    flags: &["admin", "noscript", "loading", "stale"],
    keys: KeySpec::NONE,
    acl: &["@admin", "@slow", "@dangerous"],
    group: "server",
    since: "2.0.0",
    summary: "Reset the stats returned by INFO",
    complexity: "O(1)",
    run: resetstat,
    ..CommandSpec::DEFAULT
};

pub const CONFIG_REWRITE: CommandSpec = CommandSpec {
    name: "config|rewrite",
    arity: 2,
    flags: &["admin", "noscript", "loading", "stale"],
    keys: KeySpec::NONE,
    acl: &["@admin", "@slow", "@dangerous"],
    group: "server",
    since: "2.8.0",
    summary: "Rewrite the configuration file with the in memory configuration",
    complexity: "O(1)",
    run: rewrite,
    ..CommandSpec::DEFAULT
};

pub const CONFIG_HELP: CommandSpec = CommandSpec {
    name: "config|help",
    arity: 2,
    flags: &["loading", "stale"],
    keys: KeySpec::NONE,
    acl: &["@slow"],
    group: "server",
    since: "5.0.0",
    summary: "Show helpful text about the different subcommands",
    complexity: "O(1)",
    run: help,
    ..CommandSpec::DEFAULT
};

pub const CONFIG: CommandSpec = CommandSpec {
    name: "config",
    arity: -2,
    flags: &[],
    keys: KeySpec::NONE,
    acl: &["@slow"],
    group: "server",
    since: "2.0.0",
    summary: "A container for server configuration commands",
    complexity: "Depends on subcommand.",
    run: help,
    subcommands: &[&CONFIG_GET, &CONFIG_SET, &CONFIG_RESETSTAT, &CONFIG_REWRITE, &CONFIG_HELP],
};

/// What a parameter is and where its value comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Param {
    SlowerThan,
    SlowlogMaxLen,
    /// Fixed in Shoal: the value Shoal behaves by.
    Fixed(&'static str),
    Maxclients,
    Port,
    Maxmemory,
    Policy,
}

/// Parameter names in the order CONFIG GET lists them (Redis's aliases included).
const PARAMS: &[(&str, Param)] = &[
    ("slowlog-log-slower-than", Param::SlowerThan),
    ("slowlog-max-len", Param::SlowlogMaxLen),
    ("maxmemory", Param::Maxmemory),
    ("maxmemory-policy", Param::Policy),
    ("maxclients", Param::Maxclients),
    ("port", Param::Port),
    ("databases", Param::Fixed("1")),
    ("timeout", Param::Fixed("0")),
    ("save", Param::Fixed("")),
    ("appendonly", Param::Fixed("no")),
    ("hash-max-listpack-entries", Param::Fixed("512")),
    ("hash-max-ziplist-entries", Param::Fixed("512")),
    ("hash-max-listpack-value", Param::Fixed("64")),
    ("hash-max-ziplist-value", Param::Fixed("64")),
    ("set-max-intset-entries", Param::Fixed("512")),
    ("zset-max-listpack-entries", Param::Fixed("128")),
    ("zset-max-ziplist-entries", Param::Fixed("128")),
    ("zset-max-listpack-value", Param::Fixed("64")),
    ("zset-max-ziplist-value", Param::Fixed("64")),
    ("list-max-listpack-size", Param::Fixed("-2")),
    ("list-max-ziplist-size", Param::Fixed("-2")),
    ("list-compress-depth", Param::Fixed("0")),
    ("hll-sparse-max-bytes", Param::Fixed("3000")),
];

pub fn get(args: &Args, ctx: &mut Ctx) -> Pending {
    let mut wanted: Vec<(&'static str, Param)> = Vec::new();
    for pattern in &args[2..] {
        let lower = pattern.to_ascii_lowercase();
        for &(name, p) in PARAMS {
            if glob_match(&lower, name.as_bytes()) && !wanted.iter().any(|(n, _)| *n == name) {
                wanted.push((name, p));
            }
        }
    }
    let needs_nodes = wanted.iter().any(|(_, p)| matches!(p, Param::Maxmemory | Param::Policy));
    let (state, routing) = (Arc::clone(ctx.state), Arc::clone(ctx.routing));
    let slower = super::slowlog::threshold(ctx);
    Pending::later(async move {
        let stats =
            if needs_nodes { routing.stats_all().await.into_iter().flatten().collect() } else { Vec::new() };
        let first = stats.first();
        let pairs = wanted
            .into_iter()
            .map(|(name, p)| {
                let value = match p {
                    Param::SlowerThan => slower.to_string(),
                    Param::SlowlogMaxLen => state.stats.slowlog_max_len.load(Ordering::Relaxed).to_string(),
                    Param::Fixed(v) => v.to_string(),
                    Param::Maxclients => state.settings.maxclients.to_string(),
                    Param::Port => state.settings.tcp_port.to_string(),
                    Param::Maxmemory => first.map_or(0, |n| n.maxmemory).to_string(),
                    Param::Policy => {
                        first.map_or_else(|| "noeviction".into(), |n| n.maxmemory_policy.clone())
                    }
                };
                (Reply::bulk(name), Reply::Bulk(Bytes::from(value)))
            })
            .collect();
        Reply::Map(pairs)
    })
}

pub fn set(args: &Args, ctx: &mut Ctx) -> Pending {
    if !args.len().is_multiple_of(2) {
        return super::syntax_error().into();
    }
    // Check every pair before changing anything, as Redis does.
    let mut changes = Vec::new();
    for pair in args[2..].chunks(2) {
        let name = pair[0].to_ascii_lowercase();
        let Some(&(name, p)) = PARAMS.iter().find(|(n, _)| n.as_bytes() == name) else {
            return Reply::error_fmt(format!(
                "ERR Unknown option or number of arguments for CONFIG SET - '{}'",
                String::from_utf8_lossy(&pair[0])
            ))
            .into();
        };
        let failed = |why: &str| {
            Reply::error_fmt(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"))
        };
        match p {
            Param::SlowerThan | Param::SlowlogMaxLen => match shoal_wire::num::parse_i64(&pair[1]) {
                Some(n) if p == Param::SlowerThan && n >= -1 => changes.push((p, n)),
                Some(n) if p == Param::SlowlogMaxLen && n >= 0 => changes.push((p, n)),
                Some(_) => {
                    return failed("argument must be between -1 and 9223372036854775807 inclusive").into();
                }
                None => return failed("argument couldn't be parsed into an integer").into(),
            },
            _ => return failed("can't set immutable config").into(),
        }
    }
    for (p, n) in changes {
        match p {
            Param::SlowerThan => ctx.state.stats.slower_than_us.store(n, Ordering::Relaxed),
            _ => {
                ctx.state.stats.slowlog_max_len.store(n as usize, Ordering::Relaxed);
                ctx.state.stats.slowlog_trim();
            }
        }
    }
    Reply::OK.into()
}

pub fn resetstat(_args: &Args, ctx: &mut Ctx) -> Pending {
    ctx.state.stats.reset();
    Reply::OK.into()
}

pub fn rewrite(_args: &Args, _ctx: &mut Ctx) -> Pending {
    Reply::error("ERR The server is running without a config file").into()
}

pub fn help(_args: &Args, _ctx: &mut Ctx) -> Pending {
    let lines = [
        "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "GET <pattern>",
        "    Return parameters matching the glob-like <pattern> and their values.",
        "SET <directive> <value>",
        "    Set the configuration <directive> to <value>.",
        "RESETSTAT",
        "    Reset statistics reported by the INFO command.",
        "REWRITE",
        "    Rewrite the configuration file.",
        "HELP",
        "    Prints this help.",
    ];
    super::help_reply(&lines)
}
