//! Running an admitted op where everything that follows the data sees it: keyspace notifications
//! (`crate::notify`), slot stats, WATCH versions, routers' near caches (tracking) and the change
//! log replicas read.

use prost::Message as _;
use shoal_wire::ops::{OpClass, class_of, key_of, keys_of};
use shoal_wire::proto::{Op, Reply, op::Kind};

use super::apply::apply_op;
use super::check::owned_keys;
use crate::membership::view::NodeView;
use crate::store::Store;

/// Runs one op that [`check`] admitted, raising its keyspace notifications (`notify.rs`).
pub(super) fn apply(store: &Store, view: &NodeView, op: Op) -> Reply {
    // Per-slot traffic (SHOAL SLOT-STATS), counted here where every op a client caused runs
    // (batches, transactions, scripts' calls). A one-key op costs a CRC16 and a few relaxed adds;
    // only ops naming several keys gather them.
    let Some(counted) = Counted::of(store, &op) else {
        return apply_uncounted(store, view, op);
    };
    let reply = apply_uncounted(store, view, op);
    counted.record(store, reply.encoded_len() as u64);
    reply
}

/// [`apply`] without the slot stats.
pub(super) fn apply_uncounted(store: &Store, view: &NodeView, op: Op) -> Reply {
    // CLIENT NO-TOUCH: the keys it reads keep their access times (`Shard::touch`).
    if op.no_touch {
        return crate::store::without_touching(|| {
            crate::notify::op(store, op, |op| apply_op(store, view, op))
        });
    }
    crate::notify::op(store, op, |op| apply_op(store, view, op))
}

/// What [`apply`] counts of an op before running it: its keys' slots, read or write, its size.
pub(super) enum Counted {
    One { slot: u16, write: bool, bytes_in: u64 },
    Many { slots: Vec<u16>, write: bool, bytes_in: u64 },
}

impl Counted {
    /// `None` when counting is off (`cluster-slot-stats-enabled`) or `op` is not client traffic.
    pub(super) fn of(store: &Store, op: &Op) -> Option<Counted> {
        if !store.slot_traffic.enabled() {
            return None;
        }
        let write = class_of(op) != OpClass::Read;
        if let Some(key) = key_of(op) {
            // WATCH is bookkeeping, and FETCH a slot migration's copy of the key: neither is
            // client traffic on it.
            if matches!(op.kind, Some(Kind::Watch(_) | Kind::Fetch(_))) {
                return None;
            }
            return Some(Counted::One {
                slot: shoal_wire::key_slot(key),
                write,
                bytes_in: op.encoded_len() as u64,
            });
        }
        // Migration plumbing and watches are not client traffic; a transaction's ops are counted
        // one by one as they run.
        let slots: Vec<u16> = match &op.kind {
            Some(Kind::MsetNx(_) | Kind::Command(_)) => {
                keys_of(op).into_iter().map(shoal_wire::key_slot).collect()
            }
            _ => return None,
        };
        (!slots.is_empty()).then(|| Counted::Many { slots, write, bytes_in: op.encoded_len() as u64 })
    }

    pub(super) fn record(self, store: &Store, bytes_out: u64) {
        match self {
            Counted::One { slot, write, bytes_in } => {
                store.slot_traffic.record(slot, write, bytes_in, bytes_out)
            }
            Counted::Many { slots, write, bytes_in } => {
                let n = slots.len() as u64;
                for slot in slots {
                    store.slot_traffic.record(slot, write, bytes_in / n, bytes_out / n);
                }
            }
        }
    }
}

/// Applies `op`, which [`check`] admitted, where watchers and replicas see it: a write touches
/// its watched keys first (under the gate, no EXEC runs between the two) and is recorded in the
/// change log after it ran (replicas read the keys' state as the write left it). A FLUSHALL
/// records itself (`Store::flush`), and so does a SET, value and all, under its shard lock
/// (`Store::set`; see store/changes.rs).
pub(super) fn apply_seen(store: &Store, view: &NodeView, op: Op, write: bool) -> Reply {
    apply_seen_with(store, view, op, write, true)
}

/// Counts a write op in the node's changes (INFO's `rdb_changes_since_last_save`). A SET
/// counts itself where it records its value, a FLUSHALL where it records itself.
#[inline]
pub(super) fn count_change(store: &Store, op: &Op) {
    if matches!(class_of(op), OpClass::Write | OpClass::Delete | OpClass::ReadModifyWrite)
        && !matches!(op.kind, Some(Kind::Set(_) | Kind::SetIfEqual(_)))
    {
        store.events.changes.count();
    }
}

/// [`apply_seen`], counted in the slot stats or not (`count`).
pub(super) fn apply_seen_with(store: &Store, view: &NodeView, op: Op, write: bool, count: bool) -> Reply {
    if write && store.watches.active() {
        touch_keys(store, &op);
    }
    // A SET records its own change, value and all, under its shard lock (store/changes.rs).
    count_change(store, &op);
    let log = write
        && store.events.changes.active()
        && !matches!(op.kind, Some(Kind::Set(_) | Kind::SetIfEqual(_)));
    let written = (log || (write && store.watches.tracking.active())).then(|| owned_keys(&op));
    let reply = if count { apply(store, view, op) } else { apply_uncounted(store, view, op) };
    if let Some(keys) = written {
        tell_written(store, keys, log);
    }
    reply
}

/// After a write applied: routers caching `keys` hear of it now, before its reply leaves (see
/// store/tracking.rs for why after), and with `log` replicas read the keys' state as it left them.
fn tell_written(store: &Store, keys: Vec<bytes::Bytes>, log: bool) {
    if store.watches.tracking.active() {
        keys.iter().for_each(|k| store.watches.tracking.touch(k));
    }
    if log {
        store.events.changes.keys(keys);
    }
}

/// For an op applied unseen (a blocked command's attempt, which writes only when it found
/// something): tells watchers, tracking routers and replicas that it wrote its keys, after it
/// ran, as [`apply_seen`] does for a write (touching a watch after the write rather than before
/// is the safe side: a WATCH in between sees its EXEC aborted).
pub(super) fn seen_written(store: &Store, op: &Op) {
    if store.watches.active() {
        touch_keys(store, op);
    }
    count_change(store, op);
    let log = store.events.changes.active();
    if log || store.watches.tracking.active() {
        tell_written(store, owned_keys(op), log);
    }
}

/// Tells the watches that `op` writes its keys.
pub(super) fn touch_keys(store: &Store, op: &Op) {
    match &op.kind {
        // A flush touches the watched keys that exist itself (`Store::flush`).
        Some(Kind::Flush(_) | Kind::Watch(_) | Kind::Fetch(_)) => {}
        _ => keys_of(op).into_iter().for_each(|k| store.watches.touch_watched(k)),
    }
}
