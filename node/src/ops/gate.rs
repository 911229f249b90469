//! An op's way in: the store's gate (shared for an op, exclusive for a transaction), the checks
//! against the view, then the op run where watchers, blocked clients and replicas see it. The
//! entry points of the ops layer.

use shoal_wire::ops::{OpClass, class_of};
use shoal_wire::proto::{Op, Reply, op::Kind};

use super::blocked::serve_blocked;
use super::check::{check, owned_keys};
use super::reply::moved;
use super::run::{apply, apply_seen, count_change};
use super::transaction::transaction;
use crate::membership::view::NodeView;
use crate::store::Store;

/// Applies every op of a batch in order, returning one reply per op (tests and tools; the
/// service applies ops one at a time with [`apply_checked`] so that large replies can leave in
/// pieces before later ops run).
pub fn apply_batch(store: &Store, view: &NodeView, batch_version: u64, ops: Vec<Op>) -> Vec<Reply> {
    ops.into_iter().map(|op| apply_checked(store, view, batch_version, op)).collect()
}

/// Applies one op routed by `batch_version`: ops for slots this node does not serve at that
/// version get a `moved` reply instead (see `membership/view.rs`).
pub fn apply_checked(store: &Store, view: &NodeView, batch_version: u64, op: Op) -> Reply {
    if let Some(Kind::Transaction(t)) = op.kind {
        return transaction(store, view, batch_version, store.gate.write(), t);
    }
    let shared = store.gate.read();
    apply_gated(store, view, batch_version, op, shared)
}

/// Like [`apply_checked`], but without waiting for the store's gate: `Err(op)` when something
/// holds it exclusively (a script, or a transaction), so that the caller can wait for it without
/// holding a thread (a script may hold the gate for seconds).
pub fn try_apply_checked(store: &Store, view: &NodeView, batch_version: u64, op: Op) -> Result<Reply, Op> {
    if let Some(Kind::Transaction(_)) = &op.kind {
        let Some(exclusive) = store.gate.try_write() else { return Err(op) };
        let Some(Kind::Transaction(t)) = op.kind else { unreachable!("matched above") };
        return Ok(transaction(store, view, batch_version, exclusive, t));
    }
    match store.gate.try_read() {
        Some(shared) => Ok(apply_gated(store, view, batch_version, op, shared)),
        None => Err(op),
    }
}

pub(super) fn apply_gated(
    store: &Store,
    view: &NodeView,
    batch_version: u64,
    op: Op,
    _shared: parking_lot::RwLockReadGuard<'_, ()>,
) -> Reply {
    match check(view, batch_version, &op) {
        // The common case: nobody watches, nobody is blocked and no replica follows this node.
        Ok(())
            if !store.watches.active()
                && !store.blocked.active()
                && !store.events.changes.active()
                && !store.watches.tracking.active() =>
        {
            count_change(store, &op);
            let reply = apply(store, view, op);
            serve_arrived(store, view);
            reply
        }
        Ok(()) => {
            // WATCH registers its keys but writes none of them: no blocked client to look at,
            // nothing for replicas or tracking routers to hear.
            let write = class_of(&op) != OpClass::Read && !matches!(op.kind, Some(Kind::Watch(_)));
            // Clients blocked on a key this op writes run right after it (as Redis serves them
            // after the command that made their key ready).
            let ready = (write && store.blocked.active()).then(|| match &op.kind {
                // Every key went: Redis 7.0 ends the XREADGROUPs blocked on any of them.
                Some(Kind::Flush(_)) => store.blocked.lock().queues.keys(),
                _ => owned_keys(&op),
            });
            let reply = apply_seen(store, view, op, write);
            match ready {
                Some(keys) => serve_blocked(store, view, keys),
                None if write => serve_arrived(store, view),
                None => {}
            }
            reply
        }
        Err(version) => moved(version),
    }
}

/// After an op that found nobody blocked before it applied: a client that began its first
/// attempt meanwhile (`Blocked::arriving`) may have missed what a write added, so if anybody
/// waits or arrives now, every queued key is looked at (rare: the op and a blocking command on
/// the node at the same moment). Neither the op's keys nor whether it wrote are worked out
/// first, to keep the common path as it was: a read's serve finds nothing new to serve.
fn serve_arrived(store: &Store, view: &NodeView) {
    if store.blocked.active() {
        let keys = store.blocked.lock().queues.keys();
        serve_blocked(store, view, keys);
    }
}

/// An op from a running script, which holds the gate: seen by watchers and replicas as any op.
pub(crate) fn apply_for_script(store: &Store, view: &NodeView, op: Op, write: bool) -> Reply {
    apply_seen(store, view, op, write)
}
