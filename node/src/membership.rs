//! The node's place in the cluster: which topology it serves by, what it is for each slot, and
//! what it must do when a new topology arrives.
//!
//! Topologies arrive from a watched file (`--topology-file`), from the coordinator or routers
//! (`UpdateTopology`), and from the copy kept in the data directory; the highest version wins and
//! nothing older is ever adopted. Adopting a version:
//! - slots now moving in are flagged (deletes leave tombstones) and a puller starts per migration
//!   (`migrate.rs`);
//! - slots this node no longer has anything to do with are dropped: their base snapshot entries are
//!   masked and their memory entries reclaimed in the background;
//! - slots whose migration finished stop being flagged, and tombstones that hide nothing are
//!   reclaimed.
//!
//! Every op is checked against the view with the topology version the router routed it by (see
//! [`NodeView::check`]); an op for a slot this node does not serve gets a `moved` reply carrying
//! the node's version, and the router catches up and retries.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use shoal_wire::auth::Credentials;
use shoal_wire::proto::MigrationProgress;
use shoal_wire::{Member, Migration, SLOT_COUNT, SlotRole, Topology};
use tokio::sync::Notify;

use crate::store::Store;

const NONE: u8 = 0;
const OWNER: u8 = 1;
const INCOMING: u8 = 2;
const OUTGOING: u8 = 3;

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
}

impl NodeView {
    /// No topology: the node serves whatever it is sent (routers with a static `--nodes` list).
    pub fn unmanaged() -> NodeView {
        NodeView {
            topology: None,
            roles: vec![OWNER; SLOT_COUNT].into_boxed_slice(),
            serving: true,
            reads_only: false,
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
        NodeView { topology: Some(topology), roles, serving, reads_only: false }
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

    fn role(&self, slot: u16) -> u8 {
        self.roles[usize::from(slot)]
    }
}

/// Progress of pulling one migration's slots (and when it started), keyed by migration and
/// topology version.
type Board = HashMap<(Migration, u64), (MigrationProgress, std::time::Instant)>;

#[derive(Debug)]
pub struct Membership {
    id: Option<u32>,
    listen: Option<String>,
    pub store: Arc<Store>,
    view: RwLock<Arc<NodeView>>,
    data_dir: Option<PathBuf>,
    board: Mutex<Board>,
    pub keys_in: AtomicU64,
    pub bytes_in: AtomicU64,
    pub slots_dropped: AtomicU64,
    /// Slots whose pull into this node finished.
    pub slots_in: AtomicU64,
    /// How long pulls into this node took.
    pub pull_seconds: shoal_telemetry::metrics::Histogram,
    /// Pull rate limit in bytes per second (0: none), and when the bucket is next free.
    migrate_rate: AtomicU64,
    pace_next: Mutex<tokio::time::Instant>,
    purge: Notify,
    /// Serializes adoptions.
    adopting: Mutex<()>,
    /// Views replaced by newer ones; a batch checked against one may still be applying.
    retired: Mutex<Vec<Weak<NodeView>>>,
    /// The version served, for whoever tells routers about changes (the pub/sub streams).
    versions: tokio::sync::watch::Sender<u64>,
    /// Replication: this process's run id, its replicas, its link to its primary.
    pub replication: Arc<crate::replication::Replication>,
    /// A replica's view for replica reads at the version served (None: not a replica).
    replica_reads: RwLock<Option<Arc<NodeView>>>,
    /// Fencing of a primary that (re)started: `BOOT` until the first topology that names it a
    /// primary with replicas; then the version it must see exceeded before it serves (the
    /// failover writer's confirmation, or a promotion of a replica instead); 0 once serving.
    fence_through: AtomicU64,
    /// Stall detection (`check_stall`): whether this process is a primary with replicas (the
    /// only kind a stall can fence, so the others skip the clock read per batch), when the ticker
    /// last ran (ms since `started`), and how long a gap fences (0: never).
    guarded: AtomicBool,
    started: std::time::Instant,
    last_tick: AtomicU64,
    stall_fence_ms: AtomicU64,
    /// What this node's own calls to other nodes carry (replication, slot pulls): the cluster
    /// secret, and the node-link client certificate when links use TLS.
    pub credentials: Credentials,
}

/// `fence_through` before any topology: the process has just started.
const BOOT: u64 = u64::MAX;

/// Name of the topology copy kept in the data directory.
const TOPOLOGY_COPY: &str = "topology.json";

impl Membership {
    /// `id` names this node in topologies (else it is found by its `listen` address). The copy of
    /// the topology in `data_dir`, if any, is adopted at once. `secret` goes on every call this
    /// node makes to others.
    pub fn new(
        id: Option<u32>,
        listen: Option<String>,
        store: Arc<Store>,
        data_dir: Option<PathBuf>,
        credentials: Credentials,
    ) -> Arc<Membership> {
        let membership = Arc::new(Membership {
            id,
            listen,
            store,
            view: RwLock::new(Arc::new(NodeView::unmanaged())),
            data_dir,
            board: Mutex::default(),
            keys_in: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            slots_dropped: AtomicU64::new(0),
            slots_in: AtomicU64::new(0),
            pull_seconds: shoal_telemetry::metrics::Histogram::new(shoal_telemetry::metrics::LONG_BUCKETS),
            migrate_rate: AtomicU64::new(0),
            pace_next: Mutex::new(tokio::time::Instant::now()),
            purge: Notify::new(),
            adopting: Mutex::new(()),
            retired: Mutex::default(),
            versions: tokio::sync::watch::channel(0).0,
            replication: Arc::default(),
            replica_reads: RwLock::new(None),
            fence_through: AtomicU64::new(BOOT),
            guarded: AtomicBool::new(false),
            started: std::time::Instant::now(),
            last_tick: AtomicU64::new(0),
            stall_fence_ms: AtomicU64::new(0),
            credentials,
        });
        if let Some(copy) = membership.data_dir.as_ref().map(|d| d.join(TOPOLOGY_COPY)) {
            match shoal_wire::topology_file::read(&copy) {
                Ok(Some(t)) => {
                    membership.adopt(t);
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "ignoring a bad topology copy"),
            }
        }
        membership
    }

    /// Limits how fast migrations pull into this node (bytes per second, 0: no limit).
    pub fn set_migrate_rate(&self, bytes_per_sec: u64) {
        self.migrate_rate.store(bytes_per_sec, Ordering::Relaxed);
    }

    pub fn migrate_rate(&self) -> u64 {
        self.migrate_rate.load(Ordering::Relaxed)
    }

    /// Waits as long as pulling `bytes` more takes at the rate limit, shared by all the pulls
    /// into this node (a token bucket without burst: each chunk books the next free interval).
    pub async fn pace(&self, bytes: u64) {
        let rate = self.migrate_rate();
        if rate == 0 {
            return;
        }
        let due = {
            let mut next = self.pace_next.lock();
            let start = (*next).max(tokio::time::Instant::now());
            *next = start + Duration::from_secs_f64(bytes as f64 / rate as f64);
            *next
        };
        tokio::time::sleep_until(due).await;
    }

    pub fn view(&self) -> Arc<NodeView> {
        self.view.read().clone()
    }

    /// Follows the version served (changes after the new view is in place).
    pub fn watch_version(&self) -> tokio::sync::watch::Receiver<u64> {
        self.versions.subscribe()
    }

    pub fn version(&self) -> u64 {
        self.view.read().version()
    }

    /// Where this process sits in `t`: its shard, and whether it is that shard's primary. Found
    /// by its address (primaries and replicas alike), else by `--node-id` (a primary).
    fn place(&self, t: &Topology) -> Option<(u32, bool)> {
        if let Some(m) = self.listen.as_deref().and_then(|a| t.member(a)) {
            return Some(match m {
                Member::Primary { shard } => (shard, true),
                Member::Replica { shard } => (shard, false),
            });
        }
        self.id.map(|id| (id, true))
    }

    /// Whether this node, primary of a shard with replicas in topology `version`, serves ops.
    /// A process that starts as such a primary may hold stale data (an old snapshot, or none):
    /// serving it would lose writes acknowledged since, and its replicas would copy the loss. So
    /// it waits, fenced, for a newer version: the failover writer either promotes a replica
    /// (this node then follows it) or confirms this node. A replica promoted serves at once.
    fn unfenced(&self, version: u64, has_replicas: bool, primary: bool) -> bool {
        if !primary {
            self.fence_through.store(0, Ordering::SeqCst);
            return false;
        }
        if self.replication.handing_over() {
            if self.replication.handover_to().is_empty() {
                // Paused, waiting for a replica to catch up: the hand-over commits or resumes.
                return false;
            }
            // Committed, and the newer version still names this process primary: the failover
            // writer did not switch (the replica committed to is gone, see `failover::decide`),
            // so the hand-over is over and this process, which holds every write, serves again.
            self.replication.end_handover();
            tracing::warn!(version, "hand-over not taken: the failover writer confirmed this primary");
        }
        if !has_replicas {
            self.fence_through.store(0, Ordering::SeqCst);
            return true;
        }
        let through = self.fence_through.load(Ordering::SeqCst);
        if through == BOOT {
            self.fence_through.store(version, Ordering::SeqCst);
            tracing::warn!(
                version,
                "started as a primary with replicas: fenced until the failover writer confirms it"
            );
            return false;
        }
        self.fence_lifted(version)
    }

    /// Whether `version` is past the fence (`fence_through`: 0 none, `BOOT` until confirmed).
    fn fence_lifted(&self, version: u64) -> bool {
        version > self.fence_through.load(Ordering::SeqCst)
    }

    /// The view a batch of replica reads routed by `version` runs by: this process is a replica
    /// at exactly that version (a router that routed by another one has another idea of who is
    /// what) and holds a full copy of its primary (its first sync is done).
    pub fn replica_read_view(&self, version: u64) -> Option<Arc<NodeView>> {
        let view = self.replica_reads.read().clone()?;
        (view.version() == version && self.replication.synced()).then_some(view)
    }

    /// Whether this node is a primary refusing ops until confirmed (see `unfenced`).
    pub fn fenced(&self) -> bool {
        let view = self.view();
        let Some(t) = &view.topology else { return false };
        !view.serving() && self.place(t).is_some_and(|(_, primary)| primary)
    }

    /// Adopts `t` if it is newer than the topology in use; returns the version in use afterwards.
    pub fn adopt(self: &Arc<Self>, t: Topology) -> u64 {
        if let Err(e) = t.validate() {
            tracing::warn!(version = t.version, error = %e, "refusing an invalid topology");
            return self.version();
        }
        let Some((id, primary)) = self.place(&t) else {
            tracing::error!(version = t.version, "this node is not in the topology (set --node-id)");
            return self.version();
        };
        // One adoption at a time: each prepares the store for its view before installing it.
        let _serial = self.adopting.lock();
        let old = self.view();
        if old.version() >= t.version {
            return old.version();
        }
        let t = Arc::new(t);
        let has_replicas = t.node(id).is_some_and(|n| !n.replicas.is_empty());
        // A primary that served (or paused to hand over) holds the shard's data: if it is made
        // a replica, it says so (see `Replication::keep_own_copy`).
        let was_primary = old.topology.as_ref().and_then(|o| self.place(o)).is_some_and(|(_, p)| p);
        let held_the_shard = was_primary && (old.serving() || self.replication.handing_over());
        let serving = self.unfenced(t.version, has_replicas, primary);
        self.guarded.store(primary && has_replicas, Ordering::Relaxed);
        let new = Arc::new(NodeView::with_serving(id, t.clone(), serving));
        // Before the new view lets any op in: a slot coming back to this node must not show what
        // it held on an earlier stay (entries given away but not reclaimed yet are stale), and a
        // slot moving in must record deletes as tombstones from its first op on.
        let flags = self.store.slot_flags();
        let returning: Vec<u16> = (0..SLOT_COUNT as u16)
            .filter(|&s| {
                matches!(new.role(s), INCOMING | OWNER) && flags.has(s, crate::store::slots::DROPPING)
            })
            .collect();
        if !returning.is_empty() {
            let removed = self.store.purge_slots(&returning);
            tracing::debug!(slots = returning.len(), removed, "reclaimed leftovers of slots coming back");
        }
        let mut settled = false;
        for slot in 0..SLOT_COUNT as u16 {
            match new.role(slot) {
                INCOMING => self.store.set_incoming(slot, true),
                OWNER => self.store.keep_slot(slot),
                _ => {}
            }
        }
        // A replica promoted: its follower stops, and a change of its in progress lands, before
        // the new view lets a write in (see `Replication::end_generation`).
        if primary {
            self.replication.stop_following();
        }
        *self.replica_reads.write() = (!primary).then(|| Arc::new(NodeView::replica_reads(id, t.clone())));
        *self.view.write() = new.clone();
        // Routers caching keys of slots this node no longer owns outright (moving out, given
        // away, demoted) must stop: writes to them may now land on another node, which never
        // heard of these registrations.
        if self.store.watches.tracking.active() {
            let left: Vec<u16> =
                (0..SLOT_COUNT as u16).filter(|&s| old.owns_outright(s) && !new.owns_outright(s)).collect();
            self.store.watches.tracking.slots_left(&left);
        }
        self.versions.send_replace(t.version);
        if old.topology.is_some() {
            self.retired.lock().push(Arc::downgrade(&old));
        }
        // After the swap: slots given away or settled (no op by the new view reaches them).
        let mut dropped = 0;
        for slot in 0..SLOT_COUNT as u16 {
            let (was, now) = (if old.topology.is_some() { old.role(slot) } else { NONE }, new.role(slot));
            match now {
                OWNER if was == INCOMING => {
                    self.store.set_incoming(slot, false);
                    settled = true;
                }
                INCOMING | OWNER | OUTGOING => {}
                _ => {
                    if was != NONE || old.topology.is_none() {
                        self.store.drop_slot(slot);
                        dropped += 1;
                    }
                }
            }
        }
        if old.topology.is_some() {
            self.slots_dropped.fetch_add(dropped, Ordering::Relaxed);
        }
        tracing::info!(
            version = t.version,
            node = id,
            migrations_in = t.migrations.iter().filter(|m| m.to == id).count(),
            migrations_out = t.migrations.iter().filter(|m| m.from == id).count(),
            dropped,
            "serving a new topology"
        );
        self.save_copy(&t);
        if primary {
            self.start_pulls(id, &t);
        } else {
            // A replica now: a hand-over in progress is done (its switch), and a process on its
            // way out follows nobody. A demoted primary's feeds end first, before its follower
            // (below) replaces its store.
            if was_primary {
                self.replication.end_generation();
            }
            self.replication.end_handover();
            if held_the_shard {
                self.replication.keep_own_copy(self.store.events.changes.end());
            }
            if self.replication.exiting() {
                self.replication.stop_following();
            } else {
                self.follow_primary(id, &t);
            }
        }
        if dropped > 0 || settled {
            self.purge.notify_one();
        }
        t.version
    }

    /// A replica of shard `id` in `t`: follows its primary (a new follower if the primary changed).
    fn follow_primary(&self, id: u32, t: &Topology) {
        if let (Some(me), Some(p)) = (self.listen.clone(), t.node(id).map(|n| n.addr.clone()))
            && let Some(generation) = self.replication.follow(&p)
        {
            // A replica's data arrives from its primary (imports included), never from pulls.
            tokio::spawn(crate::replication::follow::run(
                self.store.clone(),
                self.replication.clone(),
                me,
                p,
                generation,
                self.credentials.clone(),
            ));
        }
    }

    /// This process's shard in the topology served, if it is its primary: (version, shard, whether
    /// the shard has replicas).
    pub fn primary_of(&self) -> Option<(u64, u32, bool)> {
        let view = self.view();
        let t = view.topology.as_ref()?;
        match self.place(t)? {
            (id, true) => Some((t.version, id, t.node(id).is_some_and(|n| !n.replicas.is_empty()))),
            _ => None,
        }
    }

    /// Installs the topology served again with `serving` set (a pause or a resume at the same
    /// version, if `at_version` is still the one served), this process being its shard's primary;
    /// returns the version, or None if nothing was installed. Batches checked against the view
    /// replaced may still be applying: [`wait_for_retired_views`](Self::wait_for_retired_views).
    fn reserve(&self, serving: bool, at_version: Option<u64>) -> Option<u64> {
        let _serial = self.adopting.lock();
        let old = self.view();
        let t = old.topology.clone()?;
        if at_version.is_some_and(|v| v != t.version) || old.serving() == serving {
            return None;
        }
        let (id, true) = self.place(&t)? else { return None };
        *self.view.write() = Arc::new(NodeView::with_serving(id, t.clone(), serving));
        if !serving {
            // Handing the shard over: the next writes happen on another process, which tracks
            // nothing for the routers caching from this one.
            self.store.watches.tracking.touch_all();
        }
        self.retired.lock().push(Arc::downgrade(&old));
        Some(t.version)
    }

    /// Stops serving ops (they get `moved` with the same version; routers retry) for a hand-over.
    pub fn pause(&self) -> Option<u64> {
        self.reserve(false, None)
    }

    /// Serves again after a pause, if the topology is still `version`.
    pub fn resume(&self, version: u64) -> bool {
        self.reserve(true, Some(version)).is_some()
    }

    /// Serves again after a hand-over that did not commit, at the version served now (a newer
    /// one may have arrived meanwhile), unless a fence (a restart, a stall) holds since.
    pub fn resume_after_handover(&self) -> bool {
        let version = self.version();
        self.fence_lifted(version) && self.resume(version)
    }

    /// Fences a primary with replicas after a stall: `stall_fence` long without the ticker
    /// running means the process was stopped (SIGSTOP, a frozen VM) or starved, long enough that
    /// the failover writer may have promoted a replica meanwhile. Routers that have not heard of
    /// that yet would still send writes here, which the resync to the new primary would then
    /// undo; so, as after a restart, the writer must confirm this node (or have replaced it)
    /// before it serves again. Called before each batch takes its view, and by the ticker, so
    /// whichever runs first after the gap fences.
    pub fn check_stall(&self) {
        if !self.guarded.load(Ordering::Relaxed) {
            return;
        }
        let limit = self.stall_fence_ms.load(Ordering::Relaxed);
        let last = self.last_tick.load(Ordering::SeqCst);
        if limit == 0 || last == 0 {
            return;
        }
        let now = self.started.elapsed().as_millis() as u64;
        let gap = now.saturating_sub(last);
        if gap <= limit {
            return;
        }
        // Fence first, then move the tick on: every caller that saw the gap returns only once the
        // fenced view is in place (installs are serialized), so no batch takes the old view.
        if let Some((version, _, true)) = self.primary_of()
            && self.reserve(false, Some(version)).is_some()
        {
            self.fence_through.store(version, Ordering::SeqCst);
            tracing::warn!(
                gap_ms = gap,
                version,
                "this process did not run for a while: fenced until the failover writer confirms it"
            );
        }
        self.last_tick.fetch_max(now, Ordering::SeqCst);
    }

    /// Runs the stall ticker (see [`check_stall`](Self::check_stall)) until `stop` resolves;
    /// `limit` 0 turns stall fencing off.
    pub async fn run_ticker(self: Arc<Self>, limit: Duration, stop: impl std::future::Future<Output = ()>) {
        if limit.is_zero() {
            return;
        }
        self.stall_fence_ms.store(limit.as_millis() as u64, Ordering::Relaxed);
        let mut tick = tokio::time::interval((limit / 10).max(Duration::from_millis(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = &mut stop => return,
            }
            self.check_stall();
            self.last_tick.fetch_max(self.started.elapsed().as_millis().max(1) as u64, Ordering::SeqCst);
        }
    }

    fn save_copy(&self, t: &Topology) {
        if let Some(dir) = &self.data_dir
            && let Err(e) = shoal_wire::topology_file::write(&dir.join(TOPOLOGY_COPY), t)
        {
            tracing::warn!(error = %e, "could not keep a copy of the topology");
        }
    }

    fn start_pulls(self: &Arc<Self>, id: u32, t: &Arc<Topology>) {
        let mut board = self.board.lock();
        board.retain(|(_, v), _| *v == t.version);
        for m in t.migrations.iter().filter(|m| m.to == id) {
            let key = (*m, t.version);
            if board.contains_key(&key) {
                continue;
            }
            let progress = MigrationProgress {
                start: m.start.into(),
                end: m.end.into(),
                from: m.from,
                to: m.to,
                version: t.version,
                ..Default::default()
            };
            board.insert(key, (progress, std::time::Instant::now()));
            let Some(from) = t.node(m.from).map(|n| n.addr.clone()) else { continue };
            tokio::spawn(crate::migrate::pull(self.clone(), *m, t.version, from));
        }
    }

    /// Waits until no batch checked against a view older than the current one is still applying,
    /// so that nothing those views let in can land after this returns; false on `timeout`.
    /// Exports call this first: from then on, the slots moving out take no more writes.
    pub async fn wait_for_retired_views(&self, timeout: Duration) -> bool {
        let until = tokio::time::Instant::now() + timeout;
        loop {
            let busy = {
                let mut retired = self.retired.lock();
                retired.retain(|v| v.strong_count() > 0);
                !retired.is_empty()
            };
            if !busy {
                return true;
            }
            if tokio::time::Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Updates one migration's progress (called by the puller).
    pub fn report(&self, m: Migration, version: u64, f: impl FnOnce(&mut MigrationProgress)) {
        if let Some((p, started)) = self.board.lock().get_mut(&(m, version)) {
            let was_done = p.done;
            f(p);
            if !was_done {
                p.elapsed_ms = started.elapsed().as_millis() as u64;
            }
            if p.done && !was_done {
                self.slots_in.fetch_add(m.len() as u64, Ordering::Relaxed);
                self.pull_seconds.observe(started.elapsed().as_secs_f64());
            }
        }
    }

    /// Progress of the migrations into this node at the version in use.
    pub fn progress(&self) -> Vec<MigrationProgress> {
        let version = self.version();
        let mut out: Vec<MigrationProgress> = self
            .board
            .lock()
            .iter()
            .filter(|((_, v), _)| *v == version)
            .map(|(_, (p, started))| {
                let mut p = p.clone();
                if !p.done {
                    p.elapsed_ms = started.elapsed().as_millis() as u64;
                }
                p
            })
            .collect();
        out.sort_by_key(|p| p.start);
        out
    }

    /// Re-reads `path` every `every` and adopts newer topologies, until `stop` resolves.
    pub async fn watch_file(
        self: Arc<Self>,
        path: PathBuf,
        every: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) {
        shoal_wire::topology_file::watch(
            path,
            every,
            |t| {
                self.adopt(t);
            },
            stop,
        )
        .await
    }

    /// Reclaims memory of dropped slots (and stale tombstones) whenever adoption asks for it.
    pub async fn run_purger(self: Arc<Self>, stop: impl std::future::Future<Output = ()>) {
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = self.purge.notified() => {}
                _ = &mut stop => return,
            }
            let store = self.store.clone();
            let removed = tokio::task::spawn_blocking(move || store.purge()).await.unwrap_or(0);
            if removed > 0 {
                tracing::info!(removed, "reclaimed the memory of slots given away");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_wire::SlotRange;

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

    #[tokio::test]
    async fn a_slot_coming_back_shows_nothing_from_its_earlier_stay() {
        use crate::store::{StoreConfig, SystemClock};
        let store = Arc::new(Store::new(StoreConfig::default(), Arc::new(SystemClock)));
        let node = Membership::new(Some(0), None, store.clone(), None, Credentials::default());
        let mut t = moving();
        let (moving_out, mut back) = (t.clone(), t.clone());
        t.slots = Topology::even(&["127.0.0.1:1".into(), "127.0.0.1:2".into()]).slots;
        t.migrations.clear();
        t.version = 4;
        assert_eq!(node.adopt(t), 4);
        let key = (0..).map(|i| format!("k{i}")).find(|k| shoal_wire::key_slot(k.as_bytes()) < 100).unwrap();
        store.set(key.as_bytes(), b"old", Default::default()).unwrap();
        assert_eq!(node.adopt(moving_out.clone()), 5);
        let mut settled = moving_out;
        settled.migrations.clear();
        settled.version = 6;
        assert_eq!(node.adopt(settled), 6);
        // No purger runs here: the entry is still in memory, hidden. Now the slot moves back.
        back.slots.last_mut().unwrap().node = 0;
        back.migrations = vec![Migration { start: 0, end: 99, from: 1, to: 0 }];
        back.version = 7;
        assert_eq!(node.adopt(back), 7);
        assert_eq!(store.get(key.as_bytes()), None, "the stale value must not come back");
        assert_eq!(store.import([(key.as_bytes(), &b"new"[..], 0, 0)]), 1, "the pulled copy is taken");
        assert_eq!(store.get(key.as_bytes()).as_deref(), Some(&b"new"[..]));
    }

    #[tokio::test]
    async fn a_primary_with_replicas_fences_itself_after_a_stall_until_a_newer_version() {
        use crate::store::{StoreConfig, SystemClock};
        let store = Arc::new(Store::new(StoreConfig::default(), Arc::new(SystemClock)));
        let node = Membership::new(None, Some("127.0.0.1:1".into()), store, None, Credentials::default());
        let mut t = Topology::even(&["127.0.0.1:1".into()]);
        t.nodes[0].replicas = vec!["127.0.0.1:2".into()];
        t.version = 1;
        node.adopt(t.clone());
        assert!(node.fenced(), "started as a primary with replicas");
        t.version = 2;
        node.adopt(t.clone());
        assert!(node.view().serving(), "confirmed");
        node.stall_fence_ms.store(100, Ordering::Relaxed);
        let tick = |node: &Membership| {
            node.last_tick.store(node.started.elapsed().as_millis() as u64 + 1, Ordering::SeqCst)
        };
        tick(&node);
        node.check_stall();
        assert!(node.view().serving(), "no gap yet");
        tokio::time::sleep(Duration::from_millis(150)).await;
        node.check_stall();
        assert!(!node.view().serving() && node.fenced(), "a gap over the limit fences");
        assert_eq!(node.view().check(0, 2), Err(2), "ops get `moved` at the same version");
        node.check_stall();
        assert!(node.fenced(), "still fenced: only a newer version ends it");
        t.version = 3;
        node.adopt(t.clone());
        assert!(node.view().serving(), "the failover writer's confirmation");

        // Without replicas there is nothing to fear from a stall: no fence.
        t.nodes[0].replicas.clear();
        t.version = 4;
        node.adopt(t);
        tick(&node);
        tokio::time::sleep(Duration::from_millis(150)).await;
        node.check_stall();
        assert!(node.view().serving());
    }
}
