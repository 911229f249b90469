//! Whether an op may run here: its keys' slots checked against the view at the version the router
//! routed by (`moved` otherwise), a group's keys checked together (`try_again` while one of them
//! is moving), and which ops only read (a replica may serve those).

use shoal_wire::ops::{OpClass, class_of, key_of, keys_of};
use shoal_wire::proto::{Op, Reply, op::Kind};

use super::reply::moved;
use crate::membership::view::NodeView;

pub(super) fn check(view: &NodeView, batch_version: u64, op: &Op) -> Result<(), u64> {
    if let Some(key) = key_of(op) {
        return view.check(shoal_wire::key_slot(key), batch_version);
    }
    match &op.kind {
        Some(Kind::MsetNx(o)) => {
            for k in &o.keys {
                view.check(shoal_wire::key_slot(k), batch_version)?;
            }
        }
        Some(Kind::Command(o)) => {
            for k in &o.keys {
                view.check(shoal_wire::key_slot(k), batch_version)?;
            }
        }
        // A release goes wherever the key is now; a node that has no such watch ignores it.
        Some(Kind::Watch(o)) if !o.release => {
            for k in &o.keys {
                view.check(shoal_wire::key_slot(k), batch_version)?;
            }
        }
        Some(Kind::Import(o)) => {
            for e in &o.entries {
                view.check_import(shoal_wire::key_slot(&e.key), batch_version)?;
            }
        }
        // Whole-keyspace ops must see every node at one version (a router that missed a new node
        // would leave its keys out of DBSIZE, KEYS or FLUSHALL).
        Some(
            Kind::Scan(_)
            | Kind::Keys(_)
            | Kind::RandomKey(_)
            | Kind::DbSize(_)
            | Kind::Flush(_)
            | Kind::SlotStats(_),
        ) => {
            view.check_version(batch_version)?;
        }
        _ => {}
    }
    Ok(())
}

/// The checks of an op group that must run on one node as a whole (a transaction, a script):
/// every key's slot served here at `version` (else `moved` for the whole group) and none of them
/// moving (else `try_again`: the router sends the group again once the move is done, rather than
/// run it while the keys may be on either node).
pub(crate) fn check_group<'a>(
    view: &NodeView,
    version: u64,
    keys: impl IntoIterator<Item = &'a [u8]>,
) -> Result<(), Reply> {
    for key in keys {
        let slot = shoal_wire::key_slot(key);
        if let Err(v) = view.check(slot, version) {
            return Err(moved(v));
        }
        if view.is_moving(slot) {
            return Err(super::reply::try_again());
        }
    }
    Ok(())
}

/// Whether waiter `id`'s command may still wait here: its keys' slots are served at its version
/// by the current view (`Err`: the version to answer `moved` with).
pub fn still_served(view: &NodeView, version: u64, op: &Op) -> Result<(), u64> {
    check(view, version, op)
}

/// Whether `op` only reads (a replica may serve it for replica reads): the single-key reads
/// (`class_of`), the whole-keyspace ones, and typed commands the router flags read-only when the
/// node's own table (the script table's flags) agrees, so no router mistake writes a replica.
pub(crate) fn reads_only(op: &Op) -> bool {
    match &op.kind {
        Some(Kind::Scan(_) | Kind::Keys(_) | Kind::RandomKey(_) | Kind::DbSize(_)) => true,
        Some(Kind::Command(c)) => {
            c.readonly
                && c.args
                    .first()
                    .and_then(|name| crate::script::table::lookup(name))
                    .is_some_and(|cmd| !cmd.writes() && cmd.flags & crate::script::table::NOSCRIPT == 0)
        }
        _ => class_of(op) == OpClass::Read,
    }
}

pub(super) fn owned_keys(op: &Op) -> Vec<bytes::Bytes> {
    keys_of(op).into_iter().map(bytes::Bytes::copy_from_slice).collect()
}
