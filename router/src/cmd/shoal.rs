//! SHOAL: cluster administration. Replies are text in INFO-like `field=value` form, one record
//! per line, so shell scripts can parse them (`redis-cli SHOAL NODES | grep reachable=no`).

use std::fmt::Write as _;
use std::sync::Arc;

use shoal_wire::key_slot;

use super::spec::*;
use super::{Args, Ctx, Pending};
use crate::embedded::ScaleStatus;
use crate::resp::Reply;

/// Shoal's own declaration (SHOAL is Shoal's: Redis has no `shoal|topology`).
const SHOAL_TOPOLOGY_DECL: RedisCommand = RedisCommand {
    name: "shoal|topology",
    arity: 2,
    flags: flag::LOADING | flag::STALE,
    key_range: KeyRange::NONE,
    categories: cat::SLOW,
    container: false,
    summary: "Show the topology: version, nodes, slot ranges",
    since: "0.1.0",
    group: "shoal",
    complexity: "O(N) where N is the number of nodes",
    ..SHOAL_OWN
};

pub const SHOAL_TOPOLOGY: CommandSpec =
    CommandSpec { decl: &SHOAL_TOPOLOGY_DECL, run: topology, ..CommandSpec::DEFAULT };

/// Shoal's own declaration (SHOAL is Shoal's: Redis has no `shoal|nodes`).
const SHOAL_NODES_DECL: RedisCommand = RedisCommand {
    name: "shoal|nodes",
    arity: 2,
    flags: flag::LOADING | flag::STALE,
    key_range: KeyRange::NONE,
    categories: cat::SLOW,
    container: false,
    summary: "One line per node: id, address, slots, keys, reachability",
    since: "0.1.0",
    group: "shoal",
    complexity: "O(N) where N is the number of nodes",
    ..SHOAL_OWN
};

pub const SHOAL_NODES: CommandSpec =
    CommandSpec { decl: &SHOAL_NODES_DECL, run: nodes, ..CommandSpec::DEFAULT };

/// Shoal's own declaration (SHOAL is Shoal's: Redis has no `shoal|keyslot`).
const SHOAL_KEYSLOT_DECL: RedisCommand = RedisCommand {
    name: "shoal|keyslot",
    arity: 3,
    flags: flag::LOADING | flag::STALE | flag::FAST,
    key_range: KeyRange::NONE,
    categories: cat::FAST,
    container: false,
    summary: "The hash slot of a key",
    since: "0.1.0",
    group: "shoal",
    complexity: "O(N) where N is the key length",
    ..SHOAL_OWN
};

pub const SHOAL_KEYSLOT: CommandSpec =
    CommandSpec { decl: &SHOAL_KEYSLOT_DECL, run: keyslot, ..CommandSpec::DEFAULT };

/// Shoal's own declaration (SHOAL is Shoal's: Redis has no `shoal|scale`).
const SHOAL_SCALE_DECL: RedisCommand = RedisCommand {
    name: "shoal|scale",
    arity: 3,
    flags: flag::ADMIN,
    key_range: KeyRange::NONE,
    categories: cat::ADMIN | cat::SLOW,
    container: false,
    summary: "Grow or shrink the embedded cluster to n nodes, moving data online",
    since: "0.1.0",
    group: "shoal",
    complexity: "O(N) where N is the number of keys that move",
    ..SHOAL_OWN
};

pub const SHOAL_SCALE: CommandSpec =
    CommandSpec { decl: &SHOAL_SCALE_DECL, run: scale, ..CommandSpec::DEFAULT };

/// Shoal's own declaration (SHOAL is Shoal's: Redis has no `shoal|failover`).
const SHOAL_FAILOVER_DECL: RedisCommand = RedisCommand {
    name: "shoal|failover",
    arity: -3,
    flags: flag::ADMIN,
    key_range: KeyRange::NONE,
    categories: cat::ADMIN | cat::SLOW | cat::DANGEROUS,
    container: false,
    summary: "Hand a shard over from its primary to a replica without losing a write",
    since: "0.1.0",
    group: "shoal",
    complexity: "O(1)",
    ..SHOAL_OWN
};

pub const SHOAL_FAILOVER: CommandSpec =
    CommandSpec { decl: &SHOAL_FAILOVER_DECL, run: failover, ..CommandSpec::DEFAULT };

/// Shoal's own declaration (SHOAL is Shoal's: Redis has no `shoal|hotkeys`).
const SHOAL_HOTKEYS_DECL: RedisCommand = RedisCommand {
    name: "shoal|hotkeys",
    arity: -2,
    flags: flag::LOADING | flag::STALE,
    key_range: KeyRange::NONE,
    categories: cat::SLOW,
    container: false,
    summary: "The keys this router's clients use most, by commands or by bytes",
    since: "0.1.0",
    group: "shoal",
    complexity: "O(C log C) where C is --hotkeys-capacity",
    ..SHOAL_OWN
};

pub const SHOAL_HOTKEYS: CommandSpec =
    CommandSpec { decl: &SHOAL_HOTKEYS_DECL, run: hotkeys, ..CommandSpec::DEFAULT };

/// Shoal's own declaration (SHOAL is Shoal's: Redis has no `shoal|help`).
const SHOAL_HELP_DECL: RedisCommand = RedisCommand {
    name: "shoal|help",
    arity: 2,
    flags: flag::LOADING | flag::STALE,
    key_range: KeyRange::NONE,
    categories: cat::SLOW,
    container: false,
    summary: "Show helpful text about the different subcommands",
    since: "0.1.0",
    group: "shoal",
    complexity: "O(1)",
    ..SHOAL_OWN
};

pub const SHOAL_HELP: CommandSpec = CommandSpec { decl: &SHOAL_HELP_DECL, run: help, ..CommandSpec::DEFAULT };

/// Shoal's own declaration (SHOAL is Shoal's: Redis has no `shoal`).
const SHOAL_DECL: RedisCommand = RedisCommand {
    name: "shoal",
    arity: -2,
    flags: 0,
    key_range: KeyRange::NONE,
    categories: cat::SLOW,
    container: true,
    summary: "Shoal cluster administration (TOPOLOGY, NODES, KEYSLOT, HOTKEYS, ...)",
    since: "0.1.0",
    group: "shoal",
    complexity: "Depends on subcommand.",
    ..SHOAL_OWN
};

pub const SHOAL: CommandSpec = CommandSpec {
    decl: &SHOAL_DECL,
    run: container,
    subcommands: &[
        &SHOAL_TOPOLOGY,
        &SHOAL_NODES,
        &SHOAL_KEYSLOT,
        &super::persistence::SHOAL_SNAPSHOT,
        &SHOAL_SCALE,
        &SHOAL_FAILOVER,
        &SHOAL_HOTKEYS,
        &super::slotstats::SHOAL_SLOT_STATS,
        &SHOAL_HELP,
    ],
    lane: LaneClass::No,
};

pub fn container(args: &Args, ctx: &mut Ctx) -> Pending {
    help(args, ctx)
}

/// `SHOAL TOPOLOGY`: a summary line (version, nodes, migrations with progress), then one line per
/// node with its slot ranges, then one line per migration in flight.
pub fn topology(_args: &Args, ctx: &mut Ctx) -> Pending {
    let routing = Arc::clone(ctx.routing);
    let scaling = ctx.state.embedded.as_ref().map(|e| e.status());
    Pending::later(async move {
        let t = &routing.topology;
        // Progress as the receiving nodes report it.
        let mut progress = std::collections::HashMap::new();
        if !t.migrations.is_empty() {
            for s in routing.stats_all().await.into_iter().flatten() {
                for p in s.migrations.into_iter().filter(|p| p.version == t.version) {
                    progress.insert((p.start, p.end, p.from, p.to), p);
                }
            }
        }
        let get =
            |m: &shoal_wire::Migration| progress.get(&(u32::from(m.start), u32::from(m.end), m.from, m.to));
        let slots_done: u64 =
            t.migrations.iter().filter_map(|m| get(m).map(|p| u64::from(p.slots_done))).sum();
        let keys_moved: u64 = t.migrations.iter().filter_map(|m| get(m).map(|p| p.keys)).sum();
        let keys_estimate: u64 = t.migrations.iter().filter_map(|m| get(m).map(|p| p.keys_estimate)).sum();
        let mut out = format!(
            "version={} nodes={} migrations={} slots_moving={} slots_done={} keys_moved={} keys_estimate={} \
             scaling={}\n",
            t.version,
            t.nodes.len(),
            t.migrations.len(),
            t.migrating_slots(),
            slots_done,
            keys_moved,
            keys_estimate,
            match &scaling {
                Some(s) if s.running => format!("to-{}", s.target),
                Some(ScaleStatus { error: Some(e), .. }) => format!("failed:{}", e.replace(' ', "_")),
                _ => "no".into(),
            }
        );
        for n in &t.nodes {
            let _ = write!(out, "id={} addr={} slots={}", n.id, n.addr, t.ranges_of(n.id));
            if !n.replicas.is_empty() {
                let _ = write!(out, " replicas={}", n.replicas.join(","));
            }
            out.push('\n');
        }
        for m in &t.migrations {
            let p = get(m);
            let _ = writeln!(
                out,
                "migration={}-{} from={} to={} slots_done={} keys={} keys_estimate={} elapsed_ms={} done={}",
                m.start,
                m.end,
                m.from,
                m.to,
                p.map_or(0, |p| p.slots_done),
                p.map_or(0, |p| p.keys),
                p.map_or(0, |p| p.keys_estimate),
                p.map_or(0, |p| p.elapsed_ms),
                if p.is_some_and(|p| p.done) { "yes" } else { "no" }
            );
        }
        Reply::bulk(out)
    })
}

/// `SHOAL SCALE n`: grow or shrink the embedded cluster to `n` nodes, online. Answers at once;
/// `SHOAL TOPOLOGY` shows the progress.
pub fn scale(args: &Args, ctx: &mut Ctx) -> Pending {
    let Some(embedded) = ctx.state.embedded.clone() else {
        return Reply::error(
            "ERR SHOAL SCALE drives the embedded cluster; for separate nodes use `shoal-router reshard` or the operator",
        )
        .into();
    };
    let n = match super::int_arg(&args[2]) {
        Ok(n) if (1..=256).contains(&n) => n as usize,
        Ok(_) => return Reply::error("ERR the node count must be between 1 and 256").into(),
        Err(e) => return e.into(),
    };
    if embedded.status().running {
        return Reply::error("ERR a scaling operation is already running").into();
    }
    tokio::spawn(async move {
        if let Err(e) = embedded.scale(n).await {
            tracing::error!(error = %e, "scaling failed");
        }
    });
    Reply::OK.into()
}

/// How long SHOAL FAILOVER lets the node wait for a replica to catch up and for the switch.
const HANDOVER_TIMEOUT_MS: u64 = 10_000;

/// `SHOAL FAILOVER <shard> [<replica>]`: a lossless hand-over (`node/src/replication/handover.rs`):
/// the shard's primary pauses, a replica catches up, the failover writer promotes it. Answers +OK
/// once the new primary serves (this router routes by the new topology by then).
pub fn failover(args: &Args, ctx: &mut Ctx) -> Pending {
    if args.len() > 4 {
        return Reply::error("ERR syntax error").into();
    }
    let shard = match super::int_arg(&args[2]) {
        Ok(n) if (0..=i64::from(u32::MAX)).contains(&n) => n as u32,
        Ok(_) => return Reply::error("ERR invalid shard id").into(),
        Err(e) => return e.into(),
    };
    let replica = args.get(3).map(|a| String::from_utf8_lossy(a).into_owned());
    let routing = Arc::clone(ctx.routing);
    let backend = ctx.state.backend.clone();
    Pending::later(async move {
        let Some(pos) = routing.topology.nodes.iter().position(|n| n.id == shard) else {
            return Reply::error(format!(
                "ERR no shard {shard} in topology version {}",
                routing.topology.version
            ));
        };
        let node = &routing.topology.nodes[pos];
        if node.replicas.is_empty() {
            return Reply::error(format!("ERR shard {shard} has no replicas"));
        }
        if let Some(r) = &replica
            && !node.replicas.contains(r)
        {
            return Reply::error(format!("ERR {r} is not a replica of shard {shard}"));
        }
        let port = &routing.nodes[pos];
        match port.hand_over(replica.unwrap_or_default(), HANDOVER_TIMEOUT_MS).await {
            Ok((version, _)) => {
                backend.reconcile(&**port, version).await;
                Reply::OK
            }
            Err(crate::backend::BackendError::BadReply(why)) => Reply::error(format!("ERR {why}")),
            Err(e) => Reply::error(format!("ERR {e}")),
        }
    })
}

/// `SHOAL NODES`: one line per node with its slot count, key count and reachability.
pub fn nodes(_args: &Args, ctx: &mut Ctx) -> Pending {
    let routing = Arc::clone(ctx.routing);
    Pending::later(async move {
        let stats = routing.stats_all().await;
        let counts = routing.topology.slot_counts();
        let mut out = String::new();
        for ((node, stat), slots) in routing.topology.nodes.iter().zip(stats).zip(counts) {
            let (keys, reachable) = match &stat {
                Ok(s) => (s.keys, "yes"),
                Err(_) => (0, "no"),
            };
            let _ = writeln!(
                out,
                "id={} addr={} slots={slots} keys={keys} reachable={reachable}",
                node.id, node.addr
            );
        }
        Reply::bulk(out)
    })
}

/// `SHOAL HOTKEYS [COUNT n] [BY OPS|BYTES]`: this router's heaviest keys, heaviest first, each
/// as `[key, count, error]` (the true, decayed weight is within `count - error ..= count`).
pub fn hotkeys(args: &Args, ctx: &mut Ctx) -> Pending {
    use crate::hotkeys::By;
    let hot = &ctx.state.hotkeys;
    if !hot.enabled() {
        return Reply::error("ERR hot-key tracking is off (--hotkeys-capacity 0)").into();
    }
    let (mut count, mut by) = (10usize, By::Ops);
    let mut rest = args[2..].iter();
    while let Some(word) = rest.next() {
        let Some(value) = rest.next() else { return super::syntax_error().into() };
        if word.eq_ignore_ascii_case(b"count") {
            count = match super::int_arg(value) {
                Ok(n) if n >= 1 => (n as usize).min(hot.capacity()),
                Ok(_) => return Reply::error("ERR COUNT must be positive").into(),
                Err(e) => return e.into(),
            };
        } else if word.eq_ignore_ascii_case(b"by") {
            by = if value.eq_ignore_ascii_case(b"ops") {
                By::Ops
            } else if value.eq_ignore_ascii_case(b"bytes") {
                By::Bytes
            } else {
                return super::syntax_error().into();
            };
        } else {
            return super::syntax_error().into();
        }
    }
    let rows = hot
        .top(by, count)
        .into_iter()
        .map(|k| {
            Reply::Array(vec![Reply::Bulk(k.key), Reply::Int(k.count as i64), Reply::Int(k.error as i64)])
        })
        .collect();
    Reply::Array(rows).into()
}

pub fn keyslot(args: &Args, _ctx: &mut Ctx) -> Pending {
    Reply::Int(i64::from(key_slot(&args[2]))).into()
}

pub fn help(_args: &Args, _ctx: &mut Ctx) -> Pending {
    let lines = [
        "SHOAL <subcommand> [<arg> ...]. Subcommands are:",
        "TOPOLOGY",
        "    Topology version, then one line per node: id, address, slot ranges.",
        "NODES",
        "    One line per node: id, address, slot count, key count, reachable=yes|no.",
        "KEYSLOT <key>",
        "    The hash slot of <key> (CRC16 with {hashtag}, as Redis Cluster).",
        "SNAPSHOT",
        "    Write a snapshot on every node and wait; one line per node.",
        "SCALE <n>",
        "    Grow or shrink the embedded cluster to <n> nodes, moving data online.",
        "FAILOVER <shard> [<replica>]",
        "    Hand <shard> over from its primary to <replica> (default: the most advanced one)",
        "    without losing a write: the primary pauses, the replica catches up, the failover",
        "    writer promotes it. Needs `shoal-router failover` or the operator watching.",
        "HOTKEYS [COUNT <n>] [BY OPS|BYTES]",
        "    This router's <n> (default 10) heaviest keys by commands (default) or by request and",
        "    reply bytes, each as [key, count, error]: the true count is between count-error and",
        "    count. Counts halve every --hotkeys-decay-secs.",
        "SLOT-STATS [SLOTSRANGE <first> <last> | ORDERBY <metric> [LIMIT <n>] [ASC|DESC]]",
        "    Per slot, from the node that owns it: key-count, reads, writes, network-bytes-in,",
        "    network-bytes-out (as Redis 8's CLUSTER SLOT-STATS; <metric> is one of those, or",
        "    bytes for in+out). Default: every slot.",
        "HELP",
        "    Print this help.",
    ];
    super::help_reply(&lines)
}
