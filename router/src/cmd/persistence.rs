//! SAVE, BGSAVE, LASTSAVE and SHOAL SNAPSHOT: snapshots on every node.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use shoal_wire::proto::SnapshotInfo;

use super::spec::*;
use super::{Args, Ctx, Pending, syntax_error};
use crate::backend::{BackendError, Routing, futures_join};
use crate::resp::Reply;

/// Shoal's own declaration: redis-server 7.0.15 has no `shoal|snapshot`.
const SHOAL_SNAPSHOT_DECL: RedisCommand = RedisCommand {
    name: "shoal|snapshot",
    arity: 2,
    flags: flag::LOADING | flag::STALE,
    key_range: KeyRange::NONE,
    categories: cat::ADMIN | cat::SLOW,
    container: false,
    summary: "Write a snapshot on every node and wait; one line per node",
    since: "0.1.0",
    group: "shoal",
    complexity: "O(N) where N is the number of keys",
    ..SHOAL_OWN
};

pub const SHOAL_SNAPSHOT: CommandSpec =
    CommandSpec { decl: &SHOAL_SNAPSHOT_DECL, run: shoal_snapshot, ..CommandSpec::DEFAULT };

pub const SAVE: CommandSpec = CommandSpec { decl: &redis::SAVE, run: save, ..CommandSpec::DEFAULT };

pub const BGSAVE: CommandSpec = CommandSpec { decl: &redis::BGSAVE, run: bgsave, ..CommandSpec::DEFAULT };

pub const LASTSAVE: CommandSpec =
    CommandSpec { decl: &redis::LASTSAVE, run: lastsave, ..CommandSpec::DEFAULT };

/// Snapshots every node at once and waits for all of them.
async fn snapshot_all(routing: &Routing) -> Vec<Result<SnapshotInfo, BackendError>> {
    futures_join(routing.nodes.iter().map(|n| n.snapshot()).collect()).await
}

/// SAVE: every node writes a snapshot; +OK once all have.
pub fn save(_args: &Args, ctx: &mut Ctx) -> Pending {
    let routing = Arc::clone(ctx.routing);
    Pending::later(async move {
        for result in snapshot_all(&routing).await {
            if let Err(e) = result {
                return e.into();
            }
        }
        Reply::OK
    })
}

/// `BGSAVE [SCHEDULE]`: starts snapshots on every node and answers at once.
pub fn bgsave(args: &Args, ctx: &mut Ctx) -> Pending {
    if args.len() > 2 || (args.len() == 2 && !args[1].eq_ignore_ascii_case(b"schedule")) {
        return syntax_error().into();
    }
    let state = Arc::clone(ctx.state);
    if state.bgsave_running.swap(true, Ordering::AcqRel) {
        return Reply::error("ERR Background save already in progress").into();
    }
    let routing = Arc::clone(ctx.routing);
    tokio::spawn(async move {
        for result in snapshot_all(&routing).await {
            if let Err(e) = result {
                tracing::warn!(error = %e, "BGSAVE: a node's snapshot failed");
            }
        }
        state.bgsave_running.store(false, Ordering::Release);
    });
    Reply::simple("Background saving started").into()
}

/// LASTSAVE: the Unix time of the oldest node's last snapshot (or, for a node that has not
/// written one, its start time, as Redis counts from start).
pub fn lastsave(_args: &Args, ctx: &mut Ctx) -> Pending {
    let routing = Arc::clone(ctx.routing);
    let now_ms = ctx.state.clock.now_ms();
    Pending::later(async move {
        let mut oldest = u64::MAX;
        for stat in routing.stats_all().await {
            match stat {
                Ok(s) => {
                    let last = s.snapshot.as_ref().map_or(0, |i| i.last_created_ms);
                    let t = if last > 0 { last } else { now_ms.saturating_sub(s.uptime_ms) };
                    oldest = oldest.min(t);
                }
                Err(e) => return e.into(),
            }
        }
        Reply::Int((oldest.min(now_ms) / 1000) as i64)
    })
}

/// `SHOAL SNAPSHOT`: snapshots every node, waits, and reports one line per node.
pub fn shoal_snapshot(_args: &Args, ctx: &mut Ctx) -> Pending {
    let routing = Arc::clone(ctx.routing);
    Pending::later(async move {
        let mut out = String::new();
        for (node, result) in routing.topology.nodes.iter().zip(snapshot_all(&routing).await) {
            let _ = match result {
                Ok(i) => writeln!(
                    out,
                    "id={} addr={} ok=yes entries={} bytes={} duration_ms={} file={}",
                    node.id, node.addr, i.last_entries, i.last_bytes, i.last_duration_ms, i.last_file
                ),
                Err(e) => writeln!(
                    out,
                    "id={} addr={} ok=no error={}",
                    node.id,
                    node.addr,
                    e.to_string().replace(' ', "_")
                ),
            };
        }
        Reply::bulk(out)
    })
}
