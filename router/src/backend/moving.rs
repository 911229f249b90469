//! The migration-aware path: one attempt at an op on a key whose slot is moving from the node at
//! position `old` to the node at `pos` (its owner in the topology). Clients never see the move:
//!
//! - reads ask the new owner with `fallback` set and, if it has nothing at all for the key (no
//!   value and no recorded delete: it answers `absent`), the old owner;
//! - plain writes (SET without conditions) go to the new owner only;
//! - deletes go to the old owner, then (unless it refused) to the new owner, which records a
//!   tombstone even for a key it has not received, so a copy still on its way cannot bring it
//!   back; a delete counts if either side deleted, in any attempt;
//! - read-modify-writes (INCR, APPEND, SET NX/XX/GET/KEEPTTL, EXPIRE, ...) first copy the key
//!   from the old owner to the new one (`Fetch`, then `Import`, which never replaces anything the
//!   new owner has), then run on the new owner.
//!
//! Every `moved` answer from either side ends the attempt as [`Outcome::Moved`]: the settle loop
//! catches up and routes again. The rules, and why each is needed, are in docs/architecture.md
//! ("Rules that make it lossless").

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use shoal_wire::ops::{OpClass, class_of};
use shoal_wire::proto::{self, Op, Reply, op::Kind, reply};
use tokio::time::Instant;

use super::settle::{Outcome, outcome};
use super::{Backend, BackendError, Routing};

#[allow(clippy::too_many_arguments)]
pub(super) async fn attempt(
    backend: &Backend,
    routing: &Arc<Routing>,
    pos: usize,
    old: usize,
    key: &Bytes,
    op: &Op,
    deadline: Instant,
    deleted: &AtomicBool,
) -> Result<Outcome<Reply>, BackendError> {
    let v = routing.version();
    let (owner, from) = (&routing.nodes[pos], &routing.nodes[old]);
    match class_of(op) {
        OpClass::Write => {
            outcome(backend, owner, routing, op, owner.call(op.clone(), v, deadline).wait().await)
        }
        OpClass::Read => {
            let mut first = op.clone();
            first.fallback = true;
            let r = owner.call(first, v, deadline).wait().await;
            match outcome(backend, owner, routing, op, r)? {
                Outcome::Done(Reply { kind: Some(reply::Kind::Absent(_)), .. }) => {
                    backend.metrics.fallback_reads.inc();
                    // The old owner answers `moved` once the move has finished: catch up, re-read.
                    outcome(backend, from, routing, op, from.call(op.clone(), v, deadline).wait().await)
                }
                other => Ok(other),
            }
        }
        OpClass::Delete => {
            let one = |o: &Outcome<Reply>| {
                matches!(o, Outcome::Done(Reply { kind: Some(reply::Kind::Int(1)), .. }))
            };
            // The old owner first. If it refuses (it lags, or the move has settled meanwhile), the
            // new owner is not touched: a tombstone there would keep the old owner's copy out
            // while the old owner's answer was lost, and once the move settles (tombstones go, the
            // old copy is purged) nobody could tell the retry that the key existed: DEL would
            // answer 0 for a key it deleted. Down, the old owner is no reason to fail the delete:
            // the new owner's tombstone keeps its copy from coming back.
            match outcome(backend, from, routing, op, from.call(op.clone(), v, deadline).wait().await) {
                Ok(o) if one(&o) => deleted.store(true, Ordering::Relaxed),
                Ok(refused @ (Outcome::Moved(..) | Outcome::Stale)) => return Ok(refused),
                _ => {}
            }
            let new_r =
                outcome(backend, owner, routing, op, owner.call(op.clone(), v, deadline).wait().await)?;
            if one(&new_r) {
                deleted.store(true, Ordering::Relaxed);
            }
            Ok(match new_r {
                Outcome::Done(Reply { kind: Some(reply::Kind::Int(_)), .. }) => Outcome::Done(Reply {
                    kind: Some(reply::Kind::Int(deleted.load(Ordering::Relaxed).into())),
                    ..Default::default()
                }),
                other => other,
            })
        }
        OpClass::ReadModifyWrite | OpClass::NoKey => {
            if let Some(refused) = copy_key(backend, routing, pos, old, key, deadline).await? {
                return Ok(refused);
            }
            outcome(backend, owner, routing, op, owner.call(op.clone(), v, deadline).wait().await)
        }
    }
}

/// Copies `key` from the slot's old owner to its new owner unless the new owner already has
/// anything for it (`Import` never replaces). Returns the outcome that ends the attempt if a node
/// showed the routing is stale.
async fn copy_key(
    backend: &Backend,
    routing: &Arc<Routing>,
    pos: usize,
    old: usize,
    key: &Bytes,
    deadline: Instant,
) -> Result<Option<Outcome<Reply>>, BackendError> {
    let v = routing.version();
    let (owner, from) = (&routing.nodes[pos], &routing.nodes[old]);
    let fetch = Op { kind: Some(Kind::Fetch(proto::Fetch { key: key.clone() })), ..Default::default() };
    let entry =
        match outcome(backend, from, routing, &fetch, from.call(fetch.clone(), v, deadline).wait().await)? {
            Outcome::Done(Reply { kind: Some(reply::Kind::Entry(entry)), .. }) => entry,
            // Nil: the old owner has nothing; the new owner's state stands.
            Outcome::Done(_) => return Ok(None),
            refused => return Ok(Some(refused)),
        };
    let import =
        Op { kind: Some(Kind::Import(proto::Import { entries: vec![*entry] })), ..Default::default() };
    match outcome(backend, owner, routing, &import, owner.call(import.clone(), v, deadline).wait().await)? {
        Outcome::Done(Reply { kind: Some(reply::Kind::Int(1)), .. }) => backend.metrics.keys_copied.inc(),
        Outcome::Done(_) => {}
        refused => return Ok(Some(refused)),
    }
    Ok(None)
}
