//! CONFIG GET/SET/RESETSTAT/REWRITE/HELP for the parameters Shoal has.
//!
//! The router's own parameters (the slow log's) are changed here. The nodes' (maxmemory, the
//! policy, the encoding thresholds; `shoal_wire::settings`) are read from the first node that
//! answers and set on every node of the current topology (the `Configure` call), after every
//! pair has been checked with Redis's texts. A node that joins later starts with its own flags.
//! Parameters Shoal does not have are not listed (CONFIG GET of them is empty, as in Redis for
//! an unknown name).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use shoal_wire::glob::glob_match;
use shoal_wire::proto::NodeSettings;
use shoal_wire::settings::{self, Setting};

use super::spec::*;
use super::{Args, Ctx, Pending};
use crate::backend::{BackendError, Routing, futures_join};
use crate::resp::Reply;
use crate::state::RouterState;

pub const CONFIG_GET: CommandSpec =
    CommandSpec { decl: &redis::CONFIG_GET, run: get, ..CommandSpec::DEFAULT };

pub const CONFIG_SET: CommandSpec =
    CommandSpec { decl: &redis::CONFIG_SET, run: set, ..CommandSpec::DEFAULT };

pub const CONFIG_RESETSTAT: CommandSpec =
    CommandSpec { decl: &redis::CONFIG_RESETSTAT, run: resetstat, ..CommandSpec::DEFAULT };

pub const CONFIG_REWRITE: CommandSpec =
    CommandSpec { decl: &redis::CONFIG_REWRITE, run: rewrite, ..CommandSpec::DEFAULT };

pub const CONFIG_HELP: CommandSpec =
    CommandSpec { decl: &redis::CONFIG_HELP, run: help, ..CommandSpec::DEFAULT };

pub const CONFIG: CommandSpec = CommandSpec {
    decl: &redis::CONFIG,
    run: help,
    subcommands: &[&CONFIG_GET, &CONFIG_SET, &CONFIG_RESETSTAT, &CONFIG_REWRITE, &CONFIG_HELP],
    lane: LaneClass::No,
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
    /// `enable-debug-command`: this router's `--enable-debug-command` (immutable, as in Redis).
    DebugCommand,
    /// `cluster-colocate` (Shoal's): the `--colocate` rules, set at start on every process.
    Colocate,
    /// Owned by the nodes: read from them, set on every node of the current topology.
    Node(Setting),
    /// `client-output-buffer-limit`: the `pubsub` class is enforced by this router's pub/sub hub;
    /// `normal` and `replica` are kept and shown (Shoal's per-round reply limit is
    /// `--client-output-buffer-limit`, and it has no replicas yet).
    OutputLimit,
    /// `tracking-table-max-keys`: CLIENT TRACKING's table in this router (crate::pubsub::tracking).
    TrackingMaxKeys,
    /// `timeout`: this router closes RESP clients idle for that many seconds (0: never).
    IdleTimeout,
    /// `requirepass`: the `default` ACL user's password on this router (empty: `nopass`), as
    /// Redis's CONFIG SET requirepass sets it; shown as last set (or `--requirepass`).
    Requirepass,
    /// Mutable in Redis, without effect in Shoal: checked as Redis checks it, kept by this router
    /// and shown back (a harness that sets `save ""` or `appendonly no` before its tests, as
    /// Valkey's does, must not be refused). What each means here is in docs/compatibility.md.
    Accepted(&'static str, Accepts),
}

/// How an accepted parameter's value is checked (Redis's rules and texts).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Accepts {
    /// `save`: pairs of `<seconds> <changes>`, or nothing.
    SavePoints,
    YesNo,
    OneOf(&'static [&'static str]),
    /// An integer from 0 to i32::MAX.
    Count,
}

impl Accepts {
    /// The value as CONFIG GET shows it, or Redis's reason for refusing it.
    fn check(self, value: &[u8]) -> Result<String, String> {
        let text = String::from_utf8_lossy(value).into_owned();
        match self {
            Accepts::SavePoints => {
                let words: Vec<&str> = text.split_whitespace().collect();
                let numbers =
                    words.iter().all(|w| shoal_wire::num::parse_i64(w.as_bytes()).is_some_and(|n| n >= 0));
                if !words.len().is_multiple_of(2) || !numbers {
                    return Err("Invalid save parameters".into());
                }
                Ok(words.join(" "))
            }
            Accepts::YesNo => match text.to_ascii_lowercase().as_str() {
                v @ ("yes" | "no") => Ok(v.to_string()),
                _ => Err("argument must be 'yes' or 'no'".into()),
            },
            Accepts::OneOf(allowed) => {
                let v = text.to_ascii_lowercase();
                if allowed.contains(&v.as_str()) {
                    Ok(v)
                } else {
                    Err(format!("argument(s) must be one of the following: {}", allowed.join(", ")))
                }
            }
            Accepts::Count => match shoal_wire::num::parse_i64(value) {
                Some(n) if (0..=i64::from(i32::MAX)).contains(&n) => Ok(n.to_string()),
                Some(_) => Err("argument must be between 0 and 2147483647 inclusive".into()),
                None => Err(settings::NOT_INTEGER.into()),
            },
        }
    }
}

/// Parameter names in the order CONFIG GET lists them (Redis's aliases included).
const PARAMS: &[(&str, Param)] = &[
    ("slowlog-log-slower-than", Param::SlowerThan),
    ("slowlog-max-len", Param::SlowlogMaxLen),
    ("maxmemory", Param::Node(Setting::Maxmemory)),
    ("maxmemory-policy", Param::Node(Setting::MaxmemoryPolicy)),
    // (redis-server lists `lfu-*` in its seeded hash table's order, which varies per start.)
    ("lfu-decay-time", Param::Node(Setting::LfuDecayTime)),
    ("lfu-log-factor", Param::Node(Setting::LfuLogFactor)),
    ("latency-monitor-threshold", Param::Node(Setting::LatencyMonitorThreshold)),
    ("maxclients", Param::Maxclients),
    ("port", Param::Port),
    ("enable-debug-command", Param::DebugCommand),
    ("databases", Param::Fixed("1")),
    ("timeout", Param::IdleTimeout),
    ("requirepass", Param::Requirepass),
    ("save", Param::Accepted("", Accepts::SavePoints)),
    ("appendonly", Param::Accepted("no", Accepts::YesNo)),
    // Shoal frees values where it removes them (no background freeing): accepted, kept, shown.
    ("lazyfree-lazy-eviction", Param::Accepted("no", Accepts::YesNo)),
    ("lazyfree-lazy-expire", Param::Accepted("no", Accepts::YesNo)),
    ("lazyfree-lazy-server-del", Param::Accepted("no", Accepts::YesNo)),
    ("lazyfree-lazy-user-del", Param::Accepted("no", Accepts::YesNo)),
    ("lazyfree-lazy-user-flush", Param::Accepted("no", Accepts::YesNo)),
    ("appendfsync", Param::Accepted("everysec", Accepts::OneOf(&["everysec", "always", "no"]))),
    ("hash-max-listpack-entries", Param::Node(Setting::HashMaxListpackEntries)),
    ("hash-max-ziplist-entries", Param::Node(Setting::HashMaxListpackEntries)),
    ("hash-max-listpack-value", Param::Node(Setting::HashMaxListpackValue)),
    ("hash-max-ziplist-value", Param::Node(Setting::HashMaxListpackValue)),
    ("set-max-intset-entries", Param::Node(Setting::SetMaxIntsetEntries)),
    // Redis 7.2's (small sets as listpacks; Valkey's suite sets them): accepted and shown, while
    // Shoal's sets keep 7.0's encodings (intset, then hashtable).
    ("set-max-listpack-entries", Param::Accepted("128", Accepts::Count)),
    ("set-max-listpack-value", Param::Accepted("64", Accepts::Count)),
    ("zset-max-listpack-entries", Param::Node(Setting::ZsetMaxListpackEntries)),
    ("zset-max-ziplist-entries", Param::Node(Setting::ZsetMaxListpackEntries)),
    ("zset-max-listpack-value", Param::Node(Setting::ZsetMaxListpackValue)),
    ("zset-max-ziplist-value", Param::Node(Setting::ZsetMaxListpackValue)),
    ("list-max-listpack-size", Param::Node(Setting::ListMaxListpackSize)),
    ("list-max-ziplist-size", Param::Node(Setting::ListMaxListpackSize)),
    ("list-compress-depth", Param::Accepted("0", Accepts::Count)),
    ("stream-node-max-bytes", Param::Node(Setting::StreamNodeMaxBytes)),
    ("stream-node-max-entries", Param::Node(Setting::StreamNodeMaxEntries)),
    ("hll-sparse-max-bytes", Param::Fixed("3000")),
    ("notify-keyspace-events", Param::Node(Setting::NotifyKeyspaceEvents)),
    ("client-output-buffer-limit", Param::OutputLimit),
    ("busy-reply-threshold", Param::Node(Setting::BusyReplyThreshold)),
    ("lua-time-limit", Param::Node(Setting::BusyReplyThreshold)),
    ("tracking-table-max-keys", Param::TrackingMaxKeys),
    // Redis 8's (7.0 has no such parameter): SHOAL SLOT-STATS counts reads, writes and bytes.
    ("cluster-slot-stats-enabled", Param::Node(Setting::ClusterSlotStatsEnabled)),
    // Shoal's: keys sharing a slot by prefix (`--colocate`), immutable (slots hold data).
    ("cluster-colocate", Param::Colocate),
];

/// The nodes' settings, from the first node in topology order that answers (nodes started with
/// different flags are misconfigured; CONFIG SET makes them agree again).
async fn node_settings(routing: &Routing) -> Result<NodeSettings, BackendError> {
    let answers =
        futures_join(routing.nodes.iter().map(|n| n.configure(NodeSettings::default())).collect()).await;
    let mut first_error = None;
    for answer in answers {
        match answer {
            Ok(s) => return Ok(s),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.unwrap_or_else(|| BackendError::BadReply("no nodes".into())))
}

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
    let needs_nodes = wanted.iter().any(|(_, p)| matches!(p, Param::Node(_)));
    let (state, routing) = (Arc::clone(ctx.state), Arc::clone(ctx.routing));
    let slower = super::slowlog::threshold(ctx);
    Pending::later(async move {
        let nodes = if needs_nodes {
            match node_settings(&routing).await {
                Ok(s) => s,
                Err(e) => return e.into(),
            }
        } else {
            NodeSettings::default()
        };
        let pairs = wanted
            .into_iter()
            .map(|(name, p)| {
                let value = match p {
                    Param::SlowerThan => slower.to_string(),
                    Param::SlowlogMaxLen => state.stats.slowlog_max_len.load(Ordering::Relaxed).to_string(),
                    Param::Fixed(v) => v.to_string(),
                    Param::Maxclients => state.settings.maxclients.to_string(),
                    Param::Port => state.settings.tcp_port.to_string(),
                    Param::DebugCommand => state.settings.enable_debug_command.as_str().to_string(),
                    Param::Colocate => shoal_wire::slot::colocation_patterns().join(" "),
                    Param::Node(s) => s.show(&nodes).unwrap_or_default(),
                    Param::OutputLimit => output_limits(&state),
                    Param::TrackingMaxKeys => state.pubsub.tracking.max_keys().to_string(),
                    Param::IdleTimeout => {
                        state.idle_timeout_secs.load(std::sync::atomic::Ordering::Relaxed).to_string()
                    }
                    Param::Requirepass => state
                        .accepted_config
                        .lock()
                        .get(name)
                        .cloned()
                        .unwrap_or_else(|| state.settings.requirepass.clone().unwrap_or_default()),
                    Param::Accepted(default, _) => {
                        state.accepted_config.lock().get(name).cloned().unwrap_or_else(|| default.to_string())
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
    // As Redis: first the names (unknown, immutable, given twice), then every value, before
    // anything changes.
    let parsed = match named(args).and_then(Parsed::values) {
        Ok(p) => p,
        Err(e) => return e.into(),
    };
    if parsed.change == NodeSettings::default() {
        parsed.apply_local(ctx.state);
        return Reply::OK.into();
    }
    let (state, routing) = (Arc::clone(ctx.state), Arc::clone(ctx.routing));
    Pending::later(async move {
        // Primaries and their replicas alike: a replica promoted later serves with the same
        // settings (and replica reads already do).
        let members = routing.nodes.iter().chain(routing.replicas.iter().flatten());
        let answers = futures_join(members.map(|n| n.configure(parsed.change.clone())).collect()).await;
        let failures: Vec<String> =
            answers.iter().filter_map(|a| a.as_ref().err()).map(|e| e.to_string()).collect();
        if !failures.is_empty() {
            // Nodes are not rolled back: those that answered OK keep the new values.
            return Reply::error_fmt(format!(
                "ERR CONFIG SET failed on {} of {} nodes (the others applied it): {}",
                failures.len(),
                answers.len(),
                failures.join("; ")
            ));
        }
        parsed.apply_local(&state);
        if let Some(cluster) = &state.embedded {
            cluster.remember_settings(&parsed.change);
        }
        Reply::OK
    })
}

/// CONFIG SET's refusal of a parameter.
fn failed(name: &str, why: &str) -> Reply {
    Reply::error_fmt(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"))
}

/// The parameters CONFIG SET names, with their values: unknown, immutable or repeated names
/// refused first.
fn named(args: &Args) -> Result<Vec<(&'static str, Param, &Bytes)>, Reply> {
    let mut named: Vec<(&'static str, Param, &Bytes)> = Vec::new();
    for pair in args[2..].chunks(2) {
        let lower = pair[0].to_ascii_lowercase();
        let Some(&(name, p)) = PARAMS.iter().find(|(n, _)| n.as_bytes() == lower) else {
            return Err(Reply::error_fmt(format!(
                "ERR Unknown option or number of arguments for CONFIG SET - '{}'",
                String::from_utf8_lossy(&pair[0])
            )));
        };
        // These two name the parameter as the client wrote it, as Redis does.
        let given = String::from_utf8_lossy(&pair[0]);
        if matches!(
            p,
            Param::Fixed(_) | Param::Maxclients | Param::Port | Param::DebugCommand | Param::Colocate
        ) {
            return Err(failed(&given, "can't set immutable config"));
        }
        if named.iter().any(|(n, _, _)| *n == name) {
            return Err(failed(&given, "duplicate parameter"));
        }
        named.push((name, p, &pair[1]));
    }
    Ok(named)
}

/// CONFIG SET's values, every one checked before anything changes: the router's own, and the
/// nodes' settings.
struct Parsed {
    local: Vec<(Param, i64)>,
    accepted: Vec<(&'static str, String)>,
    limits: Option<Vec<(Class, u64, u64, u64)>>,
    change: NodeSettings,
}

impl Parsed {
    fn values(named: Vec<(&'static str, Param, &Bytes)>) -> Result<Parsed, Reply> {
        let mut parsed =
            Parsed { local: Vec::new(), accepted: Vec::new(), limits: None, change: NodeSettings::default() };
        for (name, p, value) in named {
            match p {
                Param::OutputLimit => {
                    parsed.limits = Some(parse_output_limits(value).map_err(|why| failed(name, why))?)
                }
                Param::SlowerThan | Param::SlowlogMaxLen | Param::TrackingMaxKeys => {
                    let min = if p == Param::SlowerThan { -1 } else { 0 };
                    match shoal_wire::num::parse_i64(value) {
                        Some(n) if n >= min => parsed.local.push((p, n)),
                        Some(_) => {
                            let why =
                                format!("argument must be between {min} and 9223372036854775807 inclusive");
                            return Err(failed(name, &why));
                        }
                        None => return Err(failed(name, settings::NOT_INTEGER)),
                    }
                }
                Param::Node(s) => s.parse_into(value, &mut parsed.change).map_err(|why| failed(name, why))?,
                // Redis's `timeout`: an int config from 0 to INT_MAX.
                Param::IdleTimeout => {
                    let secs = Accepts::Count.check(value).map_err(|why| failed(name, &why))?;
                    parsed.local.push((p, secs.parse().expect("checked")));
                }
                Param::Accepted(_, accepts) => {
                    parsed.accepted.push((name, accepts.check(value).map_err(|why| failed(name, &why))?));
                }
                Param::Requirepass => {
                    parsed.accepted.push((name, String::from_utf8_lossy(value).into_owned()));
                }
                Param::Fixed(_) | Param::Maxclients | Param::Port | Param::DebugCommand | Param::Colocate => {
                    unreachable!("refused by `named`")
                }
            }
        }
        Ok(parsed)
    }

    /// The router's own parameters, set.
    fn apply_local(&self, state: &RouterState) {
        if let Some(bytes) = self.change.maxmemory {
            state.memory_limited.store(bytes != 0, std::sync::atomic::Ordering::Relaxed);
        }
        // The nodes time their own events; this router times commands by the same threshold.
        if let Some(ms) = self.change.latency_monitor_threshold {
            state.latency.monitor.set_threshold(ms);
        }
        let mut accepted = state.accepted_config.lock();
        for (name, value) in &self.accepted {
            accepted.insert(name, value.clone());
            if *name == "requirepass" {
                // Redis's ACLUpdateDefaultUserPassword: an empty password opens the default user.
                let rules = if value.is_empty() {
                    vec!["nopass".to_string()]
                } else {
                    vec!["resetpass".into(), format!(">{value}")]
                };
                state.acl.set_user("default", &rules).expect("the default user takes a password");
            }
        }
        drop(accepted);
        for &(class, hard, soft, seconds) in self.limits.iter().flatten() {
            match class {
                Class::Pubsub => {
                    let l = &state.pubsub.limits;
                    l.hard.store(hard, Ordering::Relaxed);
                    l.soft.store(soft, Ordering::Relaxed);
                    l.soft_seconds.store(seconds, Ordering::Relaxed);
                }
                Class::Normal => state.output_limits.lock()[0] = [hard, soft, seconds],
                Class::Replica => state.output_limits.lock()[1] = [hard, soft, seconds],
            }
        }
        for &(p, n) in &self.local {
            match p {
                Param::SlowerThan => state.stats.slower_than_us.store(n, Ordering::Relaxed),
                Param::TrackingMaxKeys => state.pubsub.tracking.set_max_keys(n as u64),
                Param::IdleTimeout => state.idle_timeout_secs.store(n as u64, Ordering::Relaxed),
                _ => {
                    state.stats.slowlog_max_len.store(n as usize, Ordering::Relaxed);
                    state.stats.slowlog_trim();
                }
            }
        }
    }
}

/// A client class of `client-output-buffer-limit`.
#[derive(Clone, Copy)]
enum Class {
    Normal,
    Replica,
    Pubsub,
}

/// `client-output-buffer-limit` as CONFIG GET shows it (Redis's order and units: bytes).
fn output_limits(state: &RouterState) -> String {
    let [normal, replica] = *state.output_limits.lock();
    let l = &state.pubsub.limits;
    let pubsub = [
        l.hard.load(Ordering::Relaxed),
        l.soft.load(Ordering::Relaxed),
        l.soft_seconds.load(Ordering::Relaxed),
    ];
    let show = |v: [u64; 3]| format!("{} {} {}", v[0], v[1], v[2]);
    format!("normal {} slave {} pubsub {}", show(normal), show(replica), show(pubsub))
}

/// Parses `<class> <hard> <soft> <soft seconds>` groups with Redis's checks and texts
/// (`updateClientOutputBufferLimit`): every group is checked before any applies.
fn parse_output_limits(value: &[u8]) -> Result<Vec<(Class, u64, u64, u64)>, &'static str> {
    let words: Vec<&[u8]> = value.split(|&b| b == b' ').filter(|w| !w.is_empty()).collect();
    if !words.len().is_multiple_of(4) {
        return Err("Wrong number of arguments in buffer limit configuration.");
    }
    let mut out = Vec::new();
    for group in words.chunks(4) {
        let class = match &group[0].to_ascii_lowercase()[..] {
            b"normal" => Class::Normal,
            b"slave" | b"replica" => Class::Replica,
            b"pubsub" => Class::Pubsub,
            _ => return Err("Invalid client class specified in buffer limit configuration."),
        };
        let bad = "Error in hard, soft or soft_seconds setting in buffer limit configuration.";
        let hard = shoal_wire::num::parse_redis_memory(group[1]).ok_or(bad)?;
        let soft = shoal_wire::num::parse_redis_memory(group[2]).ok_or(bad)?;
        let seconds = shoal_wire::num::parse_i64(group[3]).filter(|&s| s >= 0).ok_or(bad)? as u64;
        out.push((class, hard, soft, seconds));
    }
    Ok(out)
}

/// The router's statistics (commandstats, latency, hot keys, INFO's command and connection
/// counts) and every node's slot traffic counters (SHOAL SLOT-STATS) start again from zero.
pub fn resetstat(_args: &Args, ctx: &mut Ctx) -> Pending {
    ctx.state.stats.reset();
    ctx.state.metrics.reset_info();
    ctx.state.hotkeys.reset();
    let calls = ctx.call_all(super::slotstats::reset_op);
    Pending::later(async move {
        match calls.gather().await {
            Ok(replies) => replies
                .into_iter()
                .find_map(|r| match r.kind {
                    Some(shoal_wire::proto::reply::Kind::SlotStats(_)) => None,
                    Some(shoal_wire::proto::reply::Kind::Error(e)) => Some(Reply::error_fmt(e)),
                    other => Some(super::unexpected(other)),
                })
                .unwrap_or(Reply::OK),
            Err(e) => e.into(),
        }
    })
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
