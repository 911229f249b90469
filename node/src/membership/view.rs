//! The topology as this node sees it ([`NodeView`]): its role for every slot, and the checks
//! every op, import and export is put through. Plain data built from a topology, never changed,
//! but for one mark: [`supersede`](NodeView::supersede), set once a newer view (or, for a
//! replica's read view, a full sync) replaces it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use shoal_wire::{SLOT_COUNT, SlotRole, Topology};

pub(super) const NONE: u8 = 0;
pub(super) const OWNER: u8 = 1;
pub(super) const INCOMING: u8 = 2;
pub(super) const OUTGOING: u8 = 3;

/// The topology as this node sees it, with its role for every slot.
#[derive(Debug)]
pub struct NodeView {
    pub topology: Option<Arc<Topology>>,
    roles: Box<[u8]>,
    /// False for a replica (its shard's ops go to the primary) and for a fenced primary (one
    /// that restarted, until the failover writer confirms it): every op gets `moved`. The roles
    /// above are still the shard's, so the data kept is the shard's.
    serving: bool,
    /// A replica's view for replica reads (READONLY): only read-only ops, only settled slots.
    reads_only: bool,
    /// 0 while in force; then the version of what replaced it. Ops check it under the store's
    /// gate, op by op: a batch checked against this view when it started may still be applying
    /// when a demotion's full-sync flush (or a replica's own) takes the store, and its later
    /// ops must not run on what the flush left (issue 38, item 2).
    superseded: AtomicU64,
}

impl NodeView {
    /// No topology: the node serves whatever it is sent (routers with a static `--nodes` list).
    pub fn unmanaged() -> NodeView {
        NodeView {
            topology: None,
            roles: vec![OWNER; SLOT_COUNT].into_boxed_slice(),
            serving: true,
            reads_only: false,
            superseded: AtomicU64::new(0),
        }
    }

    /// The view of the primary of shard `id` (serving) or of one of its replicas.
    pub fn new(id: u32, topology: Arc<Topology>) -> NodeView {
        Self::with_serving(id, topology, true)
    }

    pub fn with_serving(id: u32, topology: Arc<Topology>, serving: bool) -> NodeView {
        let roles = (0..SLOT_COUNT as u16)
            .map(|slot| match topology.role(slot, id) {
                SlotRole::Owner => OWNER,
                SlotRole::Incoming { .. } => INCOMING,
                SlotRole::Outgoing { .. } => OUTGOING,
                SlotRole::None => NONE,
            })
            .collect();
        NodeView {
            topology: Some(topology),
            roles,
            serving,
            reads_only: false,
            superseded: AtomicU64::new(0),
        }
    }

    /// A replica of shard `id`: the view replica reads are checked against. It serves the
    /// shard's settled slots (a slot moving in or out is read from the primary, which knows where
    /// each key is) and, through [`reads_only`](Self::reads_only), read-only ops only.
    pub fn replica_reads(id: u32, topology: Arc<Topology>) -> NodeView {
        let mut view = Self::with_serving(id, topology, true);
        for role in view.roles.iter_mut() {
            if *role != OWNER {
                *role = NONE;
            }
        }
        view.reads_only = true;
        view
    }

    /// Marks this view replaced (by `version`, or by a full sync at the same version): every op
    /// checked against it from now on gets `moved`, and the router routes it again.
    pub fn supersede(&self, version: u64) {
        self.superseded.store(version.max(1), Ordering::Release);
    }

    /// The version of what replaced this view, if something did.
    #[inline]
    fn superseded_by(&self) -> Option<u64> {
        match self.superseded.load(Ordering::Acquire) {
            0 => None,
            v => Some(v),
        }
    }

    /// A copy in force (the mark cleared): a replica's read view again after a full sync.
    pub fn renewed(&self) -> NodeView {
        NodeView {
            topology: self.topology.clone(),
            roles: self.roles.clone(),
            serving: self.serving,
            reads_only: self.reads_only,
            superseded: AtomicU64::new(0),
        }
    }

    /// Whether only read-only ops may run by this view (a replica's, for replica reads).
    pub fn reads_only(&self) -> bool {
        self.reads_only
    }

    /// Whether ops are served (see `serving`).
    pub fn serving(&self) -> bool {
        self.serving
    }

    pub fn version(&self) -> u64 {
        self.topology.as_ref().map_or(0, |t| t.version)
    }

    /// Whether this node serves `slot` for a router that routed by `batch_version`; `Err` carries
    /// this node's version for the `moved` reply. Owners (moving in or not) serve everyone. An old
    /// owner whose slot is moving out serves only routers that know about the move (they send it
    /// fallback reads and deletes, never writes); a router from before the move must learn it
    /// first, or its writes would land where they are about to be left behind.
    ///
    /// A router *ahead* of this node is refused too, whatever the slot: the node may still be
    /// serving writes (from routers that have not caught up either) for a slot the router already
    /// treats as moving. The `moved` reply then carries the lower version and the router offers
    /// its topology to the node before retrying.
    ///
    /// A node without a topology serves routers without one (static `--nodes` routing, version 0)
    /// and refuses the others until it has been given theirs: a node that just started knows
    /// nothing yet of slots moving in, so it would neither keep a delete as a tombstone nor
    /// refuse a write for a slot it is about to hand over.
    #[inline]
    pub fn check(&self, slot: u16, batch_version: u64) -> Result<(), u64> {
        if let Some(newer) = self.superseded_by() {
            return Err(newer);
        }
        let Some(t) = &self.topology else { return Self::unmanaged_check(batch_version) };
        if batch_version > t.version || !self.serving {
            return Err(t.version);
        }
        match self.roles[usize::from(slot) & (SLOT_COUNT - 1)] {
            OWNER | INCOMING => Ok(()),
            OUTGOING if batch_version >= t.version => Ok(()),
            _ => Err(t.version),
        }
    }

    /// Whether this node owns `slot` (moving in or settled): the node that answers for it in
    /// SHOAL SLOT-STATS.
    pub fn owns(&self, slot: u16) -> bool {
        matches!(self.roles[usize::from(slot) & (SLOT_COUNT - 1)], OWNER | INCOMING)
    }

    /// For ops about the whole keyspace: the router must route by exactly this node's version.
    pub fn check_version(&self, batch_version: u64) -> Result<(), u64> {
        if let Some(newer) = self.superseded_by() {
            return Err(newer);
        }
        match &self.topology {
            Some(t) if t.version != batch_version || !self.serving => Err(t.version),
            Some(_) => Ok(()),
            None => Self::unmanaged_check(batch_version),
        }
    }

    /// Without a topology: only routers without one are served (see [`check`](Self::check)).
    fn unmanaged_check(batch_version: u64) -> Result<(), u64> {
        if batch_version == 0 { Ok(()) } else { Err(0) }
    }

    /// Whether a router (at `batch_version`) may copy an entry for `slot` here: only while the
    /// slot is moving in. Once a move has settled, a copy from the old owner could only be stale
    /// (or bring back a key deleted here since, as settled slots keep no tombstones).
    pub fn check_import(&self, slot: u16, batch_version: u64) -> Result<(), u64> {
        let Some(t) = &self.topology else { return Self::unmanaged_check(batch_version) };
        if batch_version > t.version || !self.serving || !self.accepts_import(slot) {
            return Err(t.version);
        }
        Ok(())
    }

    /// Whether entries for `slot` pulled from an old owner are welcome here (it is moving in).
    pub fn accepts_import(&self, slot: u16) -> bool {
        self.topology.is_none() || self.roles[usize::from(slot) & (SLOT_COUNT - 1)] == INCOMING
    }

    /// Whether this node may export `slots` for a migration started by topology `version`: it must
    /// serve by that very topology (so it refuses writes to them from routers that do not know
    /// the move) and be their old owner.
    pub fn check_export(&self, first: u16, last: u16, version: u64) -> Result<(), String> {
        let mine = self.version();
        if !self.serving {
            return Err("this node does not serve its shard (a replica, or fenced)".into());
        }
        if mine != version {
            return Err(format!("exporter serves topology version {mine}, the migration is at {version}"));
        }
        match (first..=last).find(|&s| self.roles[usize::from(s) & (SLOT_COUNT - 1)] != OUTGOING) {
            Some(slot) => Err(format!("slot {slot} is not moving out of this node at version {version}")),
            None => Ok(()),
        }
    }

    /// Whether this node serves `slot` as its settled owner (not moving either way): the only
    /// case where a router may cache what it reads here (`Get.track`).
    pub fn owns_outright(&self, slot: u16) -> bool {
        self.serving && (self.topology.is_none() || self.roles[usize::from(slot) & (SLOT_COUNT - 1)] == OWNER)
    }

    /// Whether `slot` is moving into or out of this node (a transaction waits until it is not).
    pub fn is_moving(&self, slot: u16) -> bool {
        self.topology.is_some()
            && matches!(self.roles[usize::from(slot) & (SLOT_COUNT - 1)], INCOMING | OUTGOING)
    }

    /// This node's role for `slot` (one of the constants above).
    pub(super) fn role(&self, slot: u16) -> u8 {
        self.roles[usize::from(slot)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_wire::{Migration, SlotRange};

    fn moving() -> Topology {
        // Node 1 takes slots 0-99 from node 0.
        let mut t = Topology::even(&["127.0.0.1:1".into(), "127.0.0.1:2".into()]);
        t.slots[0].start = 100;
        t.slots.push(SlotRange { start: 0, end: 99, node: 1 });
        t.migrations.push(Migration { start: 0, end: 99, from: 0, to: 1 });
        t.version = 5;
        t
    }

    #[test]
    fn checks_follow_roles_and_router_versions() {
        let t = Arc::new(moving());
        let old_owner = NodeView::new(0, t.clone());
        let new_owner = NodeView::new(1, t.clone());
        assert_eq!(old_owner.check(50, 5), Ok(()), "a router that knows the move may read the old owner");
        assert_eq!(old_owner.check(50, 4), Err(5), "a router from before the move must catch up first");
        assert_eq!(old_owner.check(500, 1), Ok(()), "owned slots serve any router");
        assert_eq!(new_owner.check(50, 4), Ok(()));
        assert_eq!(new_owner.check(500, 5), Err(5), "not its slot");
        assert!(new_owner.accepts_import(50) && !old_owner.accepts_import(50));
        assert_eq!(NodeView::unmanaged().check(1, 0), Ok(()), "static routing (version 0) is served");
        assert_eq!(
            NodeView::unmanaged().check(1, 3),
            Err(0),
            "a node without a topology makes a router that has one offer it first"
        );
        assert_eq!(NodeView::unmanaged().check_import(1, 3), Err(0));
        assert_eq!(old_owner.check(500, 6), Err(5), "a router ahead of the node makes it catch up first");
        assert_eq!(new_owner.check_import(50, 5), Ok(()));
        assert_eq!(new_owner.check_import(50, 6), Err(5), "router ahead");
        assert_eq!(new_owner.check_import(8000, 5), Err(5), "settled slots take no copies");
        assert!(old_owner.check_export(0, 99, 5).is_ok());
        assert!(old_owner.check_export(0, 100, 5).is_err(), "slot 100 is not moving");
        assert!(old_owner.check_export(0, 99, 6).is_err(), "the exporter must serve the move's version");
        assert!(new_owner.check_export(0, 99, 5).is_err());
        assert_eq!(old_owner.check_version(5), Ok(()), "whole-keyspace ops need the same version");
        assert_eq!(old_owner.check_version(4), Err(5));
        assert_eq!(old_owner.check_version(6), Err(5));
        assert_eq!(NodeView::unmanaged().check_version(0), Ok(()));
        assert_eq!(NodeView::unmanaged().check_version(9), Err(0));
    }
}
