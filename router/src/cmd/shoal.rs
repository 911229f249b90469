//! SHOAL: cluster administration. Replies are text in INFO-like `field=value` form, one record
//! per line, so shell scripts can parse them (`redis-cli SHOAL NODES | grep reachable=no`).

use std::fmt::Write as _;
use std::sync::Arc;

use shoal_wire::key_slot;

use super::{Args, Ctx, Pending};
use crate::resp::Reply;

pub fn container(args: &Args, ctx: &mut Ctx) -> Pending {
    help(args, ctx)
}

/// `SHOAL TOPOLOGY`: version and node count, then each node's slot ranges.
pub fn topology(_args: &Args, ctx: &mut Ctx) -> Pending {
    let t = &ctx.routing.topology;
    let mut out = format!("version={} nodes={} migrations=0\n", t.version, t.nodes.len());
    for n in &t.nodes {
        let _ = writeln!(out, "id={} addr={} slots={}", n.id, n.addr, t.ranges_of(n.id));
    }
    Reply::bulk(out).into()
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
        "HELP",
        "    Print this help.",
    ];
    Reply::Array(lines.iter().map(|l| Reply::simple(l)).collect()).into()
}
