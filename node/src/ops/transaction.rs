//! MULTI/EXEC: a transaction's ops applied under the store's exclusive gate, none of another
//! client's in between, its WATCHes checked first; blocked clients served after it.

use shoal_wire::ops::{OpClass, class_of, keys_of};
use shoal_wire::proto::{self, Op, Reply, op::Kind, reply};

use super::blocked::serve_blocked;
use super::check::{check, check_group, owned_keys};
use super::reply::{error, moved};
use super::run::apply_seen;
use crate::membership::view::NodeView;
use crate::store::Store;

/// MULTI/EXEC: every op of `t` applied with no other op in between, or none of them (see the
/// `Transaction` message in the proto for the checks and replies).
pub(super) fn transaction(
    store: &Store,
    view: &NodeView,
    batch_version: u64,
    exclusive: parking_lot::RwLockWriteGuard<'_, ()>,
    t: proto::Transaction,
) -> Reply {
    transaction_with(store, view, batch_version, exclusive, t, &mut |_| {
        error("ERR a transaction with a script runs on the node's script thread")
    })
}

/// Whether `op` is a command Redis flags `denyoom` (it may grow memory).
fn may_grow(op: &Op) -> bool {
    match &op.kind {
        Some(
            Kind::Set(_)
            | Kind::SetIfEqual(_)
            | Kind::Append(_)
            | Kind::SetRange(_)
            | Kind::IncrBy(_)
            | Kind::IncrByFloat(_)
            | Kind::MsetNx(_),
        ) => true,
        Some(Kind::Command(c)) => c
            .args
            .first()
            .and_then(|name| crate::script::table::lookup(name))
            .is_some_and(|c| c.flags & crate::script::table::DENYOOM != 0),
        _ => false,
    }
}

/// Whether a transaction holds a script (it then runs on the script thread, which has the VM).
pub fn holds_script(op: &Op) -> bool {
    matches!(&op.kind, Some(Kind::Transaction(t)) if t.ops.iter().any(|o| matches!(o.kind, Some(Kind::Script(_)))))
}

/// A transaction whose script ops `script` runs (EVAL inside MULTI), under `exclusive`.
pub(crate) fn transaction_with(
    store: &Store,
    view: &NodeView,
    batch_version: u64,
    _exclusive: parking_lot::RwLockWriteGuard<'_, ()>,
    t: proto::Transaction,
    script: &mut dyn FnMut(proto::Script) -> Reply,
) -> Reply {
    match admit(store, view, batch_version, t) {
        Ok(t) => run_admitted(store, view, t, script),
        Err(refused) => refused,
    }
}

/// A transaction's checks, made under the store's exclusive gate before anything of it runs:
/// every op routed here at `batch_version` (`moved`), none of its keys moving (`try_again`), room
/// for a command that may grow memory (OOM), and its WATCHes (`aborted`). `Err` is the reply that
/// refuses it; nothing ran. A cross-node transaction's prepare (`crate::twophase`) makes these
/// checks, then holds the gate until the router decides.
pub(crate) fn admit(
    store: &Store,
    view: &NodeView,
    batch_version: u64,
    t: proto::Transaction,
) -> Result<proto::Transaction, Reply> {
    for op in &t.ops {
        if matches!(op.kind, Some(Kind::Transaction(_) | Kind::Watch(_))) {
            return Err(error("ERR a transaction cannot hold a transaction or a watch"));
        }
        if let Err(version) = check(view, batch_version, op) {
            return Err(moved(version));
        }
    }
    let whole = Op { kind: Some(Kind::Transaction(t)), ..Default::default() };
    check_group(view, batch_version, keys_of(&whole))?;
    let Some(Kind::Transaction(t)) = whole.kind else { unreachable!("built above") };
    // Redis refuses the EXEC itself, before its WATCHes, when memory is full and a queued
    // command may grow it (`denyoom`): nothing runs (the router answers EXECABORT with the reason).
    if t.ops.iter().any(may_grow) && store.make_room().is_err() {
        return Err(Reply {
            error_kind: proto::ErrorKind::OutOfMemory as i32,
            ..error(crate::redis_error::redis_error(&crate::store::StoreError::OutOfMemory))
        });
    }
    for w in &t.watches {
        // A watched key that has expired since counts as changed: expire it now (which touches it).
        store.presence(&w.key);
        if !store.watches.unchanged(&w.key, w.version) {
            return Err(Reply { kind: Some(reply::Kind::Aborted(proto::Empty {})), ..Default::default() });
        }
    }
    Ok(t)
}

/// Runs an admitted transaction's ops in order (the caller holds the exclusive gate): replicas
/// get its keys as one unit, blocked clients are served after the whole of it.
pub(crate) fn run_admitted(
    store: &Store,
    view: &NodeView,
    t: proto::Transaction,
    script: &mut dyn FnMut(proto::Script) -> Reply,
) -> Reply {
    let ready: Vec<bytes::Bytes> = if store.blocked.active() {
        // A script's keys are served by the script thread, after it ran, from what it wrote.
        t.ops
            .iter()
            .filter(|op| class_of(op) != OpClass::Read && !matches!(op.kind, Some(Kind::Script(_))))
            .flat_map(owned_keys)
            .collect()
    } else {
        Vec::new()
    };
    // Replicas get the transaction's keys as one unit (dropped before the gate is).
    let _unit = store.events.changes.unit();
    let replies = t
        .ops
        .into_iter()
        .map(|op| {
            if let Some(Kind::Script(s)) = op.kind {
                return script(*s);
            }
            let write = class_of(&op) != OpClass::Read;
            apply_seen(store, view, op, write)
        })
        .collect();
    // Blocked clients are served after the whole transaction, as in Redis.
    if !ready.is_empty() {
        serve_blocked(store, view, ready);
    }
    Reply { kind: Some(reply::Kind::Replies(proto::Replies { replies })), ..Default::default() }
}
