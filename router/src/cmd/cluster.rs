//! CLUSTER and ASKING: Redis Cluster's view of Shoal, for cluster-mode clients (redis-py
//! `RedisCluster`, ioredis `Cluster`, go-redis `ClusterClient`, Jedis, Lettuce), with
//! `--cluster-mode emulated`.
//!
//! Such a client starts by asking CLUSTER SLOTS (or SHARDS, or NODES) and then sends each
//! command to the node that owns its key's slot. Emulated, the router answers as a one-node
//! cluster whose node is itself, owning all 16384 slots: the client sends everything here and
//! the router routes it to Shoal's nodes as usual, so no MOVED or ASK ever reaches the client.
//! The address it announces is `--cluster-announce-host/-port` when set, else the address the
//! client reached (the connection's local address), so every router of a cluster is a valid
//! seed and answers for itself. Cluster clients refuse cross-slot commands on their own side,
//! which plain mode accepts; that is the clients' rule, not Shoal's.
//!
//! With the mode off (the default), every CLUSTER subcommand and ASKING answers Redis's
//! standalone error ("This instance has cluster support disabled"). Subcommands that change a
//! real cluster's layout (ADDSLOTS, MEET, SETSLOT, FAILOVER, ...) are refused in both modes:
//! slots move with SHOAL SCALE or the operator.

use std::sync::Arc;

use bytes::Bytes;
use shoal_wire::proto::{self, op::Kind, reply};
use shoal_wire::{SLOT_COUNT, key_slot};

use super::spec::*;
use super::{Args, Ctx, Pending, int_arg, op, plain};
use crate::resp::Reply;
use crate::state::ClusterMode;

/// Redis's reply to CLUSTER and ASKING on a server without cluster support.
const DISABLED: &str = "ERR This instance has cluster support disabled";

const fn sub(decl: &'static RedisCommand, run: fn(&Args, &mut Ctx) -> Pending) -> CommandSpec {
    CommandSpec { decl, run, ..CommandSpec::DEFAULT }
}

pub const ASKING: CommandSpec = sub(&redis::ASKING, asking);

pub const CLUSTER: CommandSpec = CommandSpec {
    decl: &redis::CLUSTER,
    run: help,
    subcommands: &[
        &sub(&redis::CLUSTER_INFO, info),
        &sub(&redis::CLUSTER_NODES, nodes),
        &sub(&redis::CLUSTER_SLOTS, slots),
        &sub(&redis::CLUSTER_SHARDS, shards),
        &sub(&redis::CLUSTER_MYID, myid),
        &sub(&redis::CLUSTER_KEYSLOT, keyslot),
        &sub(&redis::CLUSTER_COUNTKEYSINSLOT, countkeysinslot),
        &sub(&redis::CLUSTER_GETKEYSINSLOT, getkeysinslot),
        &sub(&redis::CLUSTER_LINKS, links),
        &sub(&redis::CLUSTER_REPLICAS, replicas),
        &sub(&redis::CLUSTER_SLAVES, replicas),
        &sub(&redis::CLUSTER_COUNT_FAILURE_REPORTS, failure_reports),
        &sub(&redis::CLUSTER_HELP, help),
        &sub(&redis::CLUSTER_ADDSLOTS, layout),
        &sub(&redis::CLUSTER_ADDSLOTSRANGE, layout),
        &sub(&redis::CLUSTER_BUMPEPOCH, layout),
        &sub(&redis::CLUSTER_DELSLOTS, layout),
        &sub(&redis::CLUSTER_DELSLOTSRANGE, layout),
        &sub(&redis::CLUSTER_FAILOVER, layout),
        &sub(&redis::CLUSTER_FLUSHSLOTS, layout),
        &sub(&redis::CLUSTER_FORGET, layout),
        &sub(&redis::CLUSTER_MEET, layout),
        &sub(&redis::CLUSTER_REPLICATE, layout),
        &sub(&redis::CLUSTER_RESET, layout),
        &sub(&redis::CLUSTER_SAVECONFIG, layout),
        &sub(&redis::CLUSTER_SET_CONFIG_EPOCH, layout),
        &sub(&redis::CLUSTER_SETSLOT, layout),
    ],
    lane: LaneClass::No,
};

/// Runs `answer` in emulated mode; Redis's standalone error otherwise.
fn emulated(ctx: &mut Ctx, answer: impl FnOnce(&mut Ctx) -> Pending) -> Pending {
    match ctx.state.settings.cluster.mode {
        ClusterMode::Emulated => answer(ctx),
        ClusterMode::Off => Reply::error(DISABLED).into(),
    }
}

/// This router as a cluster node: its id and the address it announces to this client.
struct Me {
    id: String,
    ip: String,
    port: u16,
}

fn me(ctx: &Ctx) -> Me {
    let c = &ctx.state.settings.cluster;
    // The address this client reached (a Unix-socket client reached no TCP address: the RESP
    // port on loopback).
    let reached: Option<std::net::SocketAddr> = ctx.session.client.local.parse().ok();
    let ip = c
        .announce_host
        .clone()
        .unwrap_or_else(|| reached.map_or_else(|| "127.0.0.1".into(), |a| a.ip().to_string()));
    let port = c.announce_port.unwrap_or_else(|| reached.map_or(ctx.state.settings.tcp_port, |a| a.port()));
    Me { id: c.id.clone(), ip, port }
}

fn asking(_args: &Args, ctx: &mut Ctx) -> Pending {
    emulated(ctx, |_| Reply::OK.into())
}

/// `CLUSTER INFO`: one node, every slot served, never a failure.
fn info(_args: &Args, ctx: &mut Ctx) -> Pending {
    emulated(ctx, |_| {
        let text = [
            "cluster_state:ok",
            "cluster_slots_assigned:16384",
            "cluster_slots_ok:16384",
            "cluster_slots_pfail:0",
            "cluster_slots_fail:0",
            "cluster_known_nodes:1",
            "cluster_size:1",
            "cluster_current_epoch:0",
            "cluster_my_epoch:0",
            "cluster_stats_messages_sent:0",
            "cluster_stats_messages_received:0",
            "total_cluster_links_buffer_limit_exceeded:0",
        ]
        .map(|l| format!("{l}\r\n"))
        .concat();
        Reply::Verbatim(text.into()).into()
    })
}

/// `CLUSTER NODES`: this router, master of every slot (Redis 7.0's line; the bus port is the
/// client port + 10000, as Redis derives it, though nothing listens there).
fn nodes(_args: &Args, ctx: &mut Ctx) -> Pending {
    emulated(ctx, |ctx| {
        let m = me(ctx);
        let bus = u32::from(m.port) + 10_000;
        let line = format!(
            "{} {}:{}@{bus} myself,master - 0 0 0 connected 0-{}\n",
            m.id,
            host(&m.ip),
            m.port,
            SLOT_COUNT - 1
        );
        Reply::Verbatim(line.into()).into()
    })
}

/// An IPv6 address in brackets where Redis writes `ip:port`.
fn host(ip: &str) -> String {
    if ip.contains(':') { format!("[{ip}]") } else { ip.to_string() }
}

/// `CLUSTER SLOTS`: one range, all slots, this node (ip, port, id and an empty map of other
/// endpoints, as Redis 7.0 with no hostname configured).
fn slots(_args: &Args, ctx: &mut Ctx) -> Pending {
    emulated(ctx, |ctx| {
        let m = me(ctx);
        let node = Reply::Array(vec![
            Reply::bulk(m.ip),
            Reply::Int(i64::from(m.port)),
            Reply::bulk(m.id),
            Reply::Map(Vec::new()),
        ]);
        Reply::Array(vec![Reply::Array(vec![Reply::Int(0), Reply::Int(SLOT_COUNT as i64 - 1), node])]).into()
    })
}

/// `CLUSTER SHARDS` (Redis 7.0): one shard of every slot, this node its online master.
fn shards(_args: &Args, ctx: &mut Ctx) -> Pending {
    emulated(ctx, |ctx| {
        let m = me(ctx);
        let field = |k: &'static str, v: Reply| (Reply::bulk(k), v);
        let node = Reply::Map(vec![
            field("id", Reply::bulk(m.id)),
            field("port", Reply::Int(i64::from(m.port))),
            field("ip", Reply::bulk(m.ip.clone())),
            field("endpoint", Reply::bulk(m.ip)),
            field("role", Reply::bulk("master")),
            field("replication-offset", Reply::Int(0)),
            field("health", Reply::bulk("online")),
        ]);
        let shard = Reply::Map(vec![
            field("slots", Reply::Array(vec![Reply::Int(0), Reply::Int(SLOT_COUNT as i64 - 1)])),
            field("nodes", Reply::Array(vec![node])),
        ]);
        Reply::Array(vec![shard]).into()
    })
}

fn myid(_args: &Args, ctx: &mut Ctx) -> Pending {
    emulated(ctx, |ctx| Reply::bulk(me(ctx).id).into())
}

fn keyslot(args: &Args, ctx: &mut Ctx) -> Pending {
    emulated(ctx, |_| Reply::Int(i64::from(key_slot(&args[2]))).into())
}

/// A slot argument as Redis reads it: an integer (its error otherwise), then in range.
fn slot_arg(b: &[u8]) -> Result<Option<u16>, Reply> {
    let n = int_arg(b)?;
    Ok(u16::try_from(n).ok().filter(|&s| usize::from(s) < SLOT_COUNT))
}

/// `CLUSTER COUNTKEYSINSLOT slot`: the keys of the slot on every node (its owner's, and both
/// sides' while it moves), as SHOAL SLOT-STATS counts them.
fn countkeysinslot(args: &Args, ctx: &mut Ctx) -> Pending {
    let slot = match slot_arg(&args[2]) {
        Ok(Some(slot)) => u32::from(slot),
        Ok(None) => return emulated(ctx, |_| Reply::error("ERR Invalid slot").into()),
        Err(e) => return emulated(ctx, |_| e.into()),
    };
    emulated(ctx, |ctx| {
        let calls = ctx.call_all(move || {
            op(Kind::SlotStats(proto::SlotStats { first_slot: slot, last_slot: slot, reset: false }))
        });
        Pending::later(async move {
            let replies = match calls.gather().await {
                Ok(r) => r,
                Err(e) => return e.into(),
            };
            let keys: u64 = replies
                .into_iter()
                .filter_map(|r| match r.kind {
                    Some(reply::Kind::SlotStats(s)) => Some(s.slots.iter().map(|s| s.keys).sum::<u64>()),
                    _ => None,
                })
                .sum();
            Reply::Int(keys.min(i64::MAX as u64) as i64)
        })
    })
}

/// `CLUSTER GETKEYSINSLOT slot count`: up to `count` keys of the slot, read from its owner by
/// SCAN (O(keys on that node), where Redis keeps a per-slot index: meant for tools, as in Redis,
/// not for a request path).
fn getkeysinslot(args: &Args, ctx: &mut Ctx) -> Pending {
    let (slot, count) = match (slot_arg(&args[2]), int_arg(&args[3])) {
        (Err(e), _) | (_, Err(e)) => return emulated(ctx, |_| e.into()),
        (Ok(Some(slot)), Ok(count)) if count >= 0 => (slot, count as usize),
        _ => return emulated(ctx, |_| Reply::error("ERR Invalid slot or number of keys").into()),
    };
    emulated(ctx, |ctx| {
        let (backend, routing, deadline) =
            (Arc::clone(&ctx.state.backend), Arc::clone(ctx.routing), ctx.deadline);
        let pos = routing.node_of_slot(slot);
        Pending::later(async move {
            let mut keys = Vec::new();
            let mut cursor = 0;
            while keys.len() < count {
                let page = op(Kind::Scan(proto::Scan { cursor, count: 1000, ..Default::default() }));
                let page = match backend.at(&routing, pos, page, deadline).wait().await {
                    Ok(proto::Reply { kind: Some(reply::Kind::Scan(page)), .. }) => page,
                    Ok(other) => return plain(other),
                    Err(e) => return e.into(),
                };
                let room = count - keys.len();
                keys.extend(
                    page.keys.into_iter().filter(|k| key_slot(k) == slot).take(room).map(Reply::Bulk),
                );
                if page.cursor == 0 {
                    break;
                }
                cursor = page.cursor;
            }
            Reply::Array(keys)
        })
    })
}

fn links(_args: &Args, ctx: &mut Ctx) -> Pending {
    emulated(ctx, |_| Reply::Array(Vec::new()).into())
}

/// Redis's answer for a node id it does not know.
fn unknown_node(id: &Bytes) -> Pending {
    Reply::error_fmt(format!("ERR Unknown node {}", String::from_utf8_lossy(id))).into()
}

/// `CLUSTER REPLICAS|SLAVES id`: this node has none.
fn replicas(args: &Args, ctx: &mut Ctx) -> Pending {
    emulated(ctx, |ctx| {
        if args[2] != me(ctx).id.as_bytes() {
            return unknown_node(&args[2]);
        }
        Reply::Array(Vec::new()).into()
    })
}

fn failure_reports(args: &Args, ctx: &mut Ctx) -> Pending {
    emulated(ctx, |ctx| {
        if args[2] != me(ctx).id.as_bytes() {
            return unknown_node(&args[2]);
        }
        Reply::Int(0).into()
    })
}

/// A subcommand that changes a real cluster's layout: the emulated cluster has none to change.
fn layout(args: &Args, ctx: &mut Ctx) -> Pending {
    emulated(ctx, |_| {
        let name = String::from_utf8_lossy(&args[1]).to_uppercase();
        Reply::error_fmt(format!(
            "ERR CLUSTER {name} is not offered by Shoal's emulated cluster: slots move with SHOAL SCALE or the operator"
        ))
        .into()
    })
}

/// `CLUSTER HELP`: Redis 7.0's text.
fn help(_args: &Args, ctx: &mut Ctx) -> Pending {
    emulated(ctx, |_| {
        super::help_reply(&[
            "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "ADDSLOTS <slot> [<slot> ...]",
            "    Assign slots to current node.",
            "ADDSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]",
            "    Assign slots which are between <start-slot> and <end-slot> to current node.",
            "BUMPEPOCH",
            "    Advance the cluster config epoch.",
            "COUNT-FAILURE-REPORTS <node-id>",
            "    Return number of failure reports for <node-id>.",
            "COUNTKEYSINSLOT <slot>",
            "    Return the number of keys in <slot>.",
            "DELSLOTS <slot> [<slot> ...]",
            "    Delete slots information from current node.",
            "DELSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]",
            "    Delete slots information which are between <start-slot> and <end-slot> from current node.",
            "FAILOVER [FORCE|TAKEOVER]",
            "    Promote current replica node to being a master.",
            "FORGET <node-id>",
            "    Remove a node from the cluster.",
            "GETKEYSINSLOT <slot> <count>",
            "    Return key names stored by current node in a slot.",
            "FLUSHSLOTS",
            "    Delete current node own slots information.",
            "INFO",
            "    Return information about the cluster.",
            "KEYSLOT <key>",
            "    Return the hash slot for <key>.",
            "MEET <ip> <port> [<bus-port>]",
            "    Connect nodes into a working cluster.",
            "MYID",
            "    Return the node id.",
            "NODES",
            "    Return cluster configuration seen by node. Output format:",
            "    <id> <ip:port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
            "REPLICATE <node-id>",
            "    Configure current node as replica to <node-id>.",
            "RESET [HARD|SOFT]",
            "    Reset current node (default: soft).",
            "SET-CONFIG-EPOCH <epoch>",
            "    Set config epoch of current node.",
            "SETSLOT <slot> (IMPORTING <node-id>|MIGRATING <node-id>|STABLE|NODE <node-id>)",
            "    Set slot state.",
            "REPLICAS <node-id>",
            "    Return <node-id> replicas.",
            "SAVECONFIG",
            "    Force saving cluster configuration on disk.",
            "SLOTS",
            "    Return information about slots range mappings. Each range is made of:",
            "    start, end, master and replicas IP addresses, ports and ids",
            "SHARDS",
            "    Return information about slot range mappings and the nodes associated with them.",
            "LINKS",
            "    Return information about all network links between this node and its peers.",
            "    Output format is an array where each array element is a map containing attributes of a link",
            "HELP",
            "    Prints this help.",
        ])
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn node_ids_are_40_hex_digits_and_differ() {
        let (a, b) = (crate::state::new_node_id(), crate::state::new_node_id());
        assert_eq!(a.len(), 40);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_ne!(a, b);
    }
}
