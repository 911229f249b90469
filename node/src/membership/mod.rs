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
//!
//! Below [`Membership`], which adopts topologies and fences: [`view`] (the view itself, plain
//! data that ops are checked against), [`served`] (the view in force and those it replaced) and
//! [`pulls`] (migrations' progress and rate limit). The puller (`crate::migrate`) gets those
//! parts, not the membership, so it sits between the two.

pub mod lease;
pub mod pulls;
pub mod served;
pub mod view;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use shoal_wire::auth::Credentials;
use shoal_wire::proto::MigrationProgress;
use shoal_wire::{Member, SLOT_COUNT, Topology};
use tokio::sync::Notify;

use crate::migrate::Puller;
use crate::replication::Replication;
use crate::store::Store;
use pulls::Pulls;
use served::Served;
pub use view::NodeView;
use view::{INCOMING, NONE, OUTGOING, OWNER};

#[derive(Debug)]
pub struct Membership {
    id: Option<u32>,
    listen: Option<String>,
    pub store: Arc<Store>,
    /// The view in force and the views it replaced.
    served: Arc<Served>,
    data_dir: Option<PathBuf>,
    /// Pulls into this node: progress, counters, rate limit.
    pub pulls: Arc<Pulls>,
    pub slots_dropped: AtomicU64,
    purge: Notify,
    /// Serializes adoptions.
    adopting: Mutex<()>,
    /// Replication: this process's run id, its replicas, its link to its primary.
    pub replication: Arc<Replication>,
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
    /// The failover writer's lease (`lease.rs`): a primary with replicas whose lease ran out
    /// fences itself, as after a stall.
    lease: lease::Lease,
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
            served: Arc::default(),
            data_dir,
            pulls: Arc::default(),
            slots_dropped: AtomicU64::new(0),
            purge: Notify::new(),
            adopting: Mutex::new(()),
            replication: Arc::default(),
            fence_through: AtomicU64::new(BOOT),
            guarded: AtomicBool::new(false),
            started: std::time::Instant::now(),
            last_tick: AtomicU64::new(0),
            lease: lease::Lease::default(),
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
        self.pulls.set_migrate_rate(bytes_per_sec);
    }

    pub fn view(&self) -> Arc<NodeView> {
        self.served.view()
    }

    /// Follows the version served (changes after the new view is in place).
    pub fn watch_version(&self) -> tokio::sync::watch::Receiver<u64> {
        self.served.watch_version()
    }

    pub fn version(&self) -> u64 {
        self.served.version()
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
        let view = self.replication.replica_reads()?;
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
        self.prepare_slots(&new, primary);
        // A replica promoted: its follower stops, and a change of its in progress lands, before
        // the new view lets a write in (see `Replication::end_generation`).
        if primary {
            self.replication.stop_following();
        }
        // A replica's store expires nothing by its own clock; a primary's does (before the new
        // view lets a write in, so a promoted replica's first writes find expired keys gone).
        self.store.set_follower(!primary);
        self.replication
            .set_replica_reads((!primary).then(|| Arc::new(NodeView::replica_reads(id, t.clone()))));
        self.served.install(new.clone());
        // Routers caching keys of slots this node no longer owns outright (moving out, given
        // away, demoted) must stop: writes to them may now land on another node, which never
        // heard of these registrations.
        if self.store.watches.tracking.active() {
            let left: Vec<u16> =
                (0..SLOT_COUNT as u16).filter(|&s| old.owns_outright(s) && !new.owns_outright(s)).collect();
            self.store.watches.tracking.slots_left(&left);
        }
        self.served.announce(t.version);
        if old.topology.is_some() {
            self.served.retire(&old, t.version);
        }
        let (dropped, settled) = self.release_slots(&old, &new, primary);
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
            self.become_replica(id, &t, was_primary, held_the_shard);
        }
        if dropped > 0 || settled {
            self.purge.notify_one();
        }
        t.version
    }

    /// Before `new` lets any op in: a slot coming back to this primary must not show what it held
    /// on an earlier stay (entries given away but not reclaimed yet are stale), and a slot moving
    /// in must record deletes as tombstones from its first op on.
    ///
    /// A replica only marks slots moving in (it may be promoted mid-move). Which slots it holds
    /// as given away or taken back is its primary's to say, in order with the writes it
    /// replicates ([`Change::Slots`](crate::store::changes::Change::Slots)): topologies reach a
    /// replica in no fixed order with that stream, and a replica that dropped or purged a slot
    /// by its own view could lose what its primary had written there since (issue 38).
    fn prepare_slots(&self, new: &NodeView, primary: bool) {
        if primary {
            let held = (0..SLOT_COUNT as u16).filter(|&s| matches!(new.role(s), INCOMING | OWNER));
            let (returning, removed) = self.store.take_back_slots(held);
            if !returning.is_empty() {
                self.store.events.changes.slots(true, &returning);
                tracing::debug!(slots = returning.len(), removed, "reclaimed leftovers of slots coming back");
            }
        }
        for slot in (0..SLOT_COUNT as u16).filter(|&s| new.role(s) == INCOMING) {
            self.store.set_incoming(slot, true);
        }
    }

    /// After the swap from `old` to `new`: slots whose move finished stop being flagged, and a
    /// primary drops the slots it does not hold (given away, or never its own: a replica just
    /// promoted may not have heard of every slot its old primary gave away) and tells its
    /// replicas so (see [`prepare_slots`](Self::prepare_slots)). No op by the new view reaches
    /// either. Returns how many slots were dropped and whether any settled.
    fn release_slots(&self, old: &NodeView, new: &NodeView, primary: bool) -> (u64, bool) {
        let mut settled = false;
        let mut dropped = Vec::new();
        let flags = self.store.slot_flags();
        for slot in 0..SLOT_COUNT as u16 {
            let (was, now) = (if old.topology.is_some() { old.role(slot) } else { NONE }, new.role(slot));
            match now {
                OWNER if was == INCOMING => {
                    self.store.set_incoming(slot, false);
                    settled = true;
                }
                INCOMING | OWNER | OUTGOING => {}
                _ if primary && !flags.has(slot, crate::store::slots::DROPPING) => {
                    self.store.drop_slot(slot);
                    dropped.push(slot);
                }
                _ => {}
            }
        }
        self.store.events.changes.slots(false, &dropped);
        let dropped = dropped.len() as u64;
        if old.topology.is_some() {
            self.slots_dropped.fetch_add(dropped, Ordering::Relaxed);
        }
        (dropped, settled)
    }

    /// A replica now: a hand-over in progress is done (its switch), and a process on its way out
    /// follows nobody. A demoted primary's feeds end first, before its follower replaces its
    /// store.
    fn become_replica(&self, id: u32, t: &Topology, was_primary: bool, held_the_shard: bool) {
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
            self.follow_primary(id, t);
        }
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

    /// The replicas the topology lists for the shard this process is the primary of (none when
    /// it is not one): the only ones WAIT counts and a hand-over may promote.
    pub fn listed_replicas(&self) -> Vec<String> {
        let view = self.view();
        let Some(t) = view.topology.as_ref() else { return Vec::new() };
        match self.place(t) {
            Some((id, true)) => t.node(id).map(|n| n.replicas.clone()).unwrap_or_default(),
            _ => Vec::new(),
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
        self.served.install(Arc::new(NodeView::with_serving(id, t.clone(), serving)));
        if !serving {
            // Handing the shard over: the next writes happen on another process, which tracks
            // nothing for the routers caching from this one.
            self.store.watches.tracking.touch_all();
        }
        self.served.retire(&old, t.version);
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
    /// before it serves again. The same holds when the writer's lease ran out (`lease.rs`): the
    /// writer has not reached this node for long enough that it may have replaced it. Called
    /// before each batch takes its view, and by the ticker, so whichever runs first after the
    /// gap fences.
    pub fn check_stall(&self) {
        if !self.guarded.load(Ordering::Relaxed) {
            return;
        }
        let now = self.now_ms();
        let limit = self.stall_fence_ms.load(Ordering::Relaxed);
        let last = self.last_tick.load(Ordering::SeqCst);
        let gap = now.saturating_sub(last);
        if limit != 0 && last != 0 && gap > limit {
            // Fence first, then move the tick on: every caller that saw the gap returns only once
            // the fenced view is in place (installs are serialized), so no batch takes the old view.
            self.fence_now("this process did not run for a while", gap);
            self.last_tick.fetch_max(now, Ordering::SeqCst);
        } else if let Some(late) = self.lease.lapsed(now) {
            self.fence_now("the failover writer's lease ran out (it may have replaced this primary)", late);
        }
    }

    /// Fences this process if it is a primary with replicas, until the writer confirms it.
    fn fence_now(&self, why: &str, late_ms: u64) {
        if let Some((version, _, true)) = self.primary_of()
            && self.reserve(false, Some(version)).is_some()
        {
            self.fence_through.store(version, Ordering::SeqCst);
            tracing::warn!(late_ms, version, "{why}: fenced until the failover writer confirms it");
        }
    }

    /// Milliseconds since the process started (the clock of stalls and the writer's lease).
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// A failover writer's probe arrived (see `lease.rs`).
    pub fn writer_probed(&self, probe: u64, acked_probe: u64, down_after_ms: u64) {
        self.replication.saw_writer();
        self.lease.probed(self.now_ms(), probe, acked_probe, down_after_ms);
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

    /// Starts a pull for each migration into shard `id` in `t` that is not being pulled yet.
    fn start_pulls(&self, id: u32, t: &Arc<Topology>) {
        for m in self.pulls.begin(t.version, t.migrations.iter().filter(|m| m.to == id)) {
            let Some(from) = t.node(m.from).map(|n| n.addr.clone()) else { continue };
            tokio::spawn(crate::migrate::pull(self.puller(), m, t.version, from));
        }
    }

    /// What a pull needs of this node.
    fn puller(&self) -> Puller {
        Puller {
            store: self.store.clone(),
            served: self.served.clone(),
            pulls: self.pulls.clone(),
            credentials: self.credentials.clone(),
            replication: self.replication.clone(),
        }
    }

    /// Waits until no batch checked against a view older than the current one is still applying
    /// (see [`Served::wait_for_retired_views`]); false on `timeout`.
    pub async fn wait_for_retired_views(&self, timeout: Duration) -> bool {
        self.served.wait_for_retired_views(timeout).await
    }

    /// Progress of the migrations into this node at the version in use.
    pub fn progress(&self) -> Vec<MigrationProgress> {
        self.pulls.progress(self.version())
    }

    /// [`adopt`](Self::adopt) from async code: on a blocking thread, since adopting may wait for
    /// a follower's change to the store to land (`Replication::end_generation`: a cut, up to
    /// `UNIT_BYTES`), and an async worker waiting there would stall every other call on it (with
    /// `--threads 1`, or embedded nodes sharing the router's runtime, all of them).
    pub async fn adopt_off_thread(self: &Arc<Self>, t: Topology) -> u64 {
        let me = self.clone();
        match tokio::task::spawn_blocking(move || me.adopt(t)).await {
            Ok(version) => version,
            Err(_) => self.version(),
        }
    }

    /// Re-reads `path` every `every` and adopts newer topologies, until `stop` resolves.
    pub async fn watch_file(
        self: Arc<Self>,
        path: PathBuf,
        every: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) {
        // The reader hands each new topology to an adopter task (adoption may wait: see
        // `adopt_off_thread`), which takes them in order.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let me = self;
        let adopter = tokio::spawn(async move {
            while let Some(t) = rx.recv().await {
                me.adopt_off_thread(t).await;
            }
        });
        shoal_wire::topology_file::watch(
            path,
            every,
            |t| {
                let _ = tx.send(t);
            },
            stop,
        )
        .await;
        drop(tx);
        let _ = adopter.await;
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

    /// Issue 38 (found by reading, after the chaos runs' finding 5b): a replica learns topologies
    /// in no fixed order with its primary's stream. Its primary gave slots 0-99 away and took
    /// them back, and the replica already holds what the primary wrote there since; adopting the
    /// topology of the give-away only now must not drop it (the replica would then lose
    /// acknowledged writes, and a promotion would serve without them). A primary tells its
    /// replicas what it gives away and takes back in its change log, in order.
    #[tokio::test]
    async fn a_replica_keeps_what_its_primary_wrote_whatever_order_topologies_arrive_in() {
        use crate::store::changes::Change;
        use crate::store::{StoreConfig, SystemClock};
        let shards = ["127.0.0.1:1".to_string(), "127.0.0.1:2".to_string()];
        let mut owned = Topology::even(&shards);
        owned.nodes[0].replicas = vec!["127.0.0.1:3".into()];
        owned.version = 4;
        let mut given_away = moving();
        given_away.nodes[0].replicas = owned.nodes[0].replicas.clone();
        given_away.migrations.clear();
        given_away.version = 5;
        let key = (0..).map(|i| format!("k{i}")).find(|k| shoal_wire::key_slot(k.as_bytes()) < 100).unwrap();

        let store = Arc::new(Store::new(StoreConfig::default(), Arc::new(SystemClock)));
        let replica =
            Membership::new(None, Some("127.0.0.1:3".into()), store.clone(), None, Credentials::default());
        replica.replication.set_exiting(); // (no follower dialing the primary in this test)
        assert_eq!(replica.adopt(owned.clone()), 4);
        store
            .set(key.as_bytes(), b"written after the primary took the slot back", Default::default())
            .unwrap();
        assert_eq!(replica.adopt(given_away.clone()), 5);
        store.purge(); // (as the purger would, had the slot been given away here)
        assert!(store.get(key.as_bytes()).is_some(), "a replica drops nothing by its own view");

        // The primary's side: what it gives away is in its change log.
        let store = Arc::new(Store::new(StoreConfig::default(), Arc::new(SystemClock)));
        let primary =
            Membership::new(None, Some("127.0.0.1:1".into()), store.clone(), None, Credentials::default());
        assert_eq!(primary.adopt(owned), 4);
        store.events.changes.activate();
        assert_eq!(primary.adopt(given_away), 5);
        let (changes, _) = store.events.changes.read(0, 10, usize::MAX).unwrap();
        assert_eq!(changes, vec![Change::Slots { kept: false, slots: (0..100).collect() }]);
    }

    /// Issue 38, item 2: a batch in hand when its view is replaced (here a primary demoted by the
    /// failover writer's topology, whose follower will flush the store for a full sync) applies
    /// none of its later ops: each op, under the store's gate, finds its view superseded and is
    /// answered `moved` with the newer version, so the router routes it again.
    #[tokio::test]
    async fn ops_of_a_batch_whose_view_was_replaced_are_moved_not_applied() {
        use crate::store::{StoreConfig, SystemClock};
        use shoal_wire::proto::{Op, Set, op::Kind, reply};
        let store = Arc::new(Store::new(StoreConfig::default(), Arc::new(SystemClock)));
        let node =
            Membership::new(None, Some("127.0.0.1:1".into()), store.clone(), None, Credentials::default());
        let mut t = Topology::even(&["127.0.0.1:1".into()]);
        t.version = 3;
        assert_eq!(node.adopt(t.clone()), 3);
        let in_hand = node.view();
        let set = |k: &str| Op {
            kind: Some(Kind::Set(Set {
                key: k.as_bytes().to_vec().into(),
                value: b"v".to_vec().into(),
                ..Default::default()
            })),
            ..Default::default()
        };
        let first = crate::ops::apply_checked(&store, &in_hand, 3, set("a"));
        assert!(!matches!(first.kind, Some(reply::Kind::Moved(_))), "{first:?}");
        // Demoted: another process is the shard's primary now.
        let mut demoted = t.clone();
        demoted.version = 4;
        demoted.nodes[0].addr = "127.0.0.1:9".into();
        demoted.nodes[0].replicas = vec!["127.0.0.1:1".into()];
        node.replication.set_exiting(); // (no follower dialing the new primary in this test)
        assert_eq!(node.adopt(demoted), 4);
        let second = crate::ops::apply_checked(&store, &in_hand, 3, set("b"));
        assert_eq!(second.kind, Some(reply::Kind::Moved(4)), "the batch's later op is routed again");
        assert_eq!(store.get(b"b"), None, "and not applied");
    }

    /// Issue 38, item 2: replica reads of a batch that started while the replica was synced stop
    /// when a full sync begins (the flush would otherwise show them an empty store), and the
    /// read view in force afterwards serves again once the replica is synced.
    #[test]
    fn a_full_sync_supersedes_the_replica_read_view_in_hand() {
        let mut t = Topology::even(&["127.0.0.1:1".into()]);
        t.version = 2;
        let repl = crate::replication::Replication::default();
        repl.set_replica_reads(Some(Arc::new(NodeView::replica_reads(0, Arc::new(t)))));
        let in_hand = repl.replica_reads().unwrap();
        assert_eq!(in_hand.check(0, 2), Ok(()));
        repl.unsync();
        assert_eq!(in_hand.check(0, 2), Err(2), "the batch in hand reads no more");
        assert_eq!(repl.replica_reads().unwrap().check(0, 2), Ok(()), "a later batch (once synced) does");
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
