//! This process's replication state ([`Replication`]): its run id, the replicas connected to it
//! as a primary, its link to its primary as a replica, the follower generation, and the
//! hand-over flags. Below the feed, the follower and the hand-over, which all change it, and
//! below the membership, which holds it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use std::sync::Arc;

use crate::membership::view::NodeView;
use shoal_wire::proto::ReplicaInfo;

/// Under load a feed takes at most one cut per this long: changes made meanwhile go together in
/// the next one, so what each cut costs the primary (a wake-up, a frame each way, the replica's
/// ack to read) is shared by many writes. A feed that has sent nothing for this long sends at
/// once (an idle primary's changes leave at once), and a WAIT waiting for an ack ends the gap.
/// (Measured: at 1 ms each cut's fixed cost was about a tenth of what feeding a replica cost a
/// primary under redis-benchmark's SET load; docs/benchmarks.md.)
pub const CHUNK_GAP: Duration = Duration::from_millis(4);

/// A writer that probed within this long is watching (it probes every 100 ms by default).
pub const WRITER_FRESH: Duration = Duration::from_secs(2);

/// The most bytes of keys and values one transaction's or script's writes may bring a cut. A unit
/// travels whole in one cut, held whole by the feed while it is sent and by the replica until its
/// last message is in (so it is never half applied); past this the replica gets a full sync
/// instead, which travels in bounded chunks and ends with the unit applied (`feed::take_cut`).
/// Redis's counterpart is the replica output buffer's hard limit (`client-output-buffer-limit
/// replica 256mb`), which also ends in a full sync.
pub const UNIT_BYTES: usize = 256 << 20;

/// A replica connected to this primary.
#[derive(Debug, Clone)]
struct Connected {
    addr: String,
    acked: u64,
    synced: bool,
    /// Since when it has been behind the log's end (None: caught up at its last ack).
    behind_since: Option<Instant>,
}

#[derive(Debug)]
pub struct Replication {
    /// This process's run id (INFO's `master_replid` / `run_id`).
    pub run_id: String,
    /// Primary side: connected replicas by stream id.
    replicas: Mutex<HashMap<u64, Connected>>,
    next_stream: AtomicU64,
    /// Wakes WAITs when a replica acks.
    pub(super) acked: tokio::sync::Notify,
    /// WAITs waiting for acks now, and the wake-up a feed gets when one starts: a feed does not
    /// wait out its batching gap while anyone waits (see [`CHUNK_GAP`]).
    pub(super) waiting: AtomicUsize,
    pub(super) wait_started: tokio::sync::Notify,
    /// The feeds' batching gap, in microseconds.
    chunk_gap_us: AtomicU64,
    /// Replica side: the primary followed (empty: none) and the follower's generation (a new
    /// primary, or none, ends the previous follower).
    primary_addr: Mutex<String>,
    generation: AtomicU64,
    pub(super) primary_run_id: Mutex<String>,
    pub(super) offset: AtomicU64,
    pub(super) synced: AtomicBool,
    pub(super) link_up: AtomicBool,
    /// Hand-over (`handover.rs`): paused and waiting for a replica; then the replica committed
    /// to (empty: not committed); when a failover writer last probed this process.
    pub(super) handing_over: AtomicBool,
    pub(super) handover_to: Mutex<String>,
    writer_seen: Mutex<Option<Instant>>,
    /// The process is stopping: a topology that makes it a replica starts no follower.
    exiting: AtomicBool,
    /// Replica side: the follower holds the first messages of a cut (not applied until its last).
    pub(super) mid_cut: AtomicBool,
    /// Held by a follower while it changes the store (see [`while_current`](Self::while_current)).
    applying: Mutex<()>,
    /// Cuts dropped because the stream ended mid-cut (stats: `partial_cuts_dropped`).
    pub(super) partial_cuts_dropped: AtomicU64,
    /// Primary side: full syncs sent (stats: `full_syncs`).
    pub(super) full_syncs: AtomicU64,
    /// Primary side: the most bytes of keys and values one transaction's or script's writes may
    /// bring a cut (see [`UNIT_BYTES`]).
    unit_limit: AtomicUsize,
    /// Replica side: the view replica reads are checked against at the version served (None:
    /// not a replica). Kept here, beside `synced`, because a full sync supersedes it.
    replica_reads: parking_lot::RwLock<Option<Arc<NodeView>>>,
}

impl Default for Replication {
    fn default() -> Self {
        Replication {
            run_id: format!("{:016x}{:016x}{:08x}", fastrand::u64(..), fastrand::u64(..), fastrand::u32(..)),
            replicas: Mutex::default(),
            next_stream: AtomicU64::new(1),
            acked: tokio::sync::Notify::new(),
            waiting: AtomicUsize::new(0),
            wait_started: tokio::sync::Notify::new(),
            chunk_gap_us: AtomicU64::new(CHUNK_GAP.as_micros() as u64),
            primary_addr: Mutex::default(),
            generation: AtomicU64::new(0),
            primary_run_id: Mutex::default(),
            offset: AtomicU64::new(0),
            synced: AtomicBool::new(false),
            link_up: AtomicBool::new(false),
            handing_over: AtomicBool::new(false),
            handover_to: Mutex::default(),
            writer_seen: Mutex::default(),
            exiting: AtomicBool::new(false),
            mid_cut: AtomicBool::new(false),
            applying: Mutex::new(()),
            partial_cuts_dropped: AtomicU64::new(0),
            full_syncs: AtomicU64::new(0),
            unit_limit: AtomicUsize::new(UNIT_BYTES),
            replica_reads: parking_lot::RwLock::new(None),
        }
    }
}

impl Replication {
    /// How long a feed under load gathers changes before it sends them.
    pub fn chunk_gap(&self) -> Duration {
        Duration::from_micros(self.chunk_gap_us.load(Ordering::Relaxed))
    }

    pub fn set_chunk_gap(&self, gap: Duration) {
        self.chunk_gap_us.store(gap.as_micros() as u64, Ordering::Relaxed);
    }

    /// Follows `primary` from now on (a new generation), unless it already does; returns the
    /// generation a new follower must run as, if one must start. Once it returns, the previous
    /// generation's follower changes the store no more, and this process's feeds (it was a
    /// primary) send nothing more: see [`end_generation`](Self::end_generation).
    pub fn follow(&self, primary: &str) -> Option<u64> {
        // The address and the generation change together (a concurrent `stop_following` either
        // precedes both or ends this generation too); the wait comes after.
        let generation = {
            let mut current = self.primary_addr.lock();
            if *current == primary {
                return None;
            }
            *current = primary.to_string();
            self.next_generation()
        };
        self.wait_for_changes();
        Some(generation)
    }

    /// Stops following (this process is a primary now, or in no shard); as [`follow`](Self::follow),
    /// the follower that ends changes the store no more once this returns.
    pub fn stop_following(&self) {
        {
            let mut current = self.primary_addr.lock();
            if current.is_empty() {
                return;
            }
            current.clear();
            self.next_generation();
        }
        self.wait_for_changes();
    }

    /// Ends the generation: the follower of the last one and every feed that started under it
    /// stop. Waits for a follower's change to the store in progress, so that none of the old
    /// generation lands after this returns. Without that wait, a replica promoted while its
    /// follower was between its generation check and its change would serve, as primary, a store
    /// its old primary then changed, and a demoted primary's full sync (its first step is to
    /// empty the store) could reach a replica through a feed still open.
    ///
    /// The wait blocks the caller (topology adoption, which is synchronous) for at most one
    /// change: a cut (bounded by `feed::CUT_BYTES`) or a full sync's flush. A replica the writer
    /// promotes is synced, so it is applying cuts, not starting a full sync, and its cuts are
    /// what its primary wrote in the last moments: the wait is that short in practice.
    pub fn end_generation(&self) -> u64 {
        let generation = self.next_generation();
        self.wait_for_changes();
        generation
    }

    fn next_generation(&self) -> u64 {
        self.link_up.store(false, Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Returns once no follower is changing the store under a generation checked before now.
    fn wait_for_changes(&self) {
        drop(self.applying.lock());
    }

    /// Whether a follower (or a feed) of generation `generation` should keep going.
    pub fn current(&self, generation: u64) -> bool {
        self.generation.load(Ordering::SeqCst) == generation
    }

    /// The generation now: a feed starts under it and ends with it (this process stopped being
    /// a primary).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Runs `f`, a follower's change to the store, if generation `generation` is still current;
    /// the generation cannot end while `f` runs (see [`end_generation`](Self::end_generation)).
    /// `None`: it had ended, nothing ran.
    pub fn while_current<R>(&self, generation: u64, f: impl FnOnce() -> R) -> Option<R> {
        let _applying = self.applying.lock();
        self.current(generation).then(f)
    }

    /// A primary that held its shard's data is made a replica: until its new primary's full
    /// sync replaces it, it reports a synced copy of its own run up to `offset` (the end of its
    /// change log). The failover writer can then promote it back if the new primary dies or
    /// restarts empty before any other replica copied it (without this, a demoted primary would
    /// look like an empty replica and the empty restart would be confirmed).
    pub fn keep_own_copy(&self, offset: u64) {
        *self.primary_run_id.lock() = self.run_id.clone();
        self.offset.store(offset, Ordering::Relaxed);
        self.synced.store(true, Ordering::Relaxed);
    }

    /// Whether this replica holds a full copy of its primary as of some offset (a failover
    /// writer only promotes such a replica).
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Relaxed)
    }

    /// The view replica reads are checked against (see the field).
    pub fn replica_reads(&self) -> Option<Arc<NodeView>> {
        self.replica_reads.read().clone()
    }

    /// A new topology's replica read view (None: a primary now); the one it replaces is
    /// superseded, so that a batch of replica reads still applying stops at its next op.
    pub fn set_replica_reads(&self, view: Option<Arc<NodeView>>) {
        let version = view.as_ref().map_or(0, |v| v.version());
        if let Some(old) = std::mem::replace(&mut *self.replica_reads.write(), view) {
            old.supersede(version.max(old.version()));
        }
    }

    /// A full sync begins: replica reads stop (`synced` false) and the read view in force is
    /// superseded by a copy, so that a batch of replica reads that started while synced does
    /// not read, op by op, what the full sync's flush leaves (issue 38, item 2). Called before
    /// the flush takes the store's gate: an op that takes the gate after it sees the mark.
    pub(crate) fn unsync(&self) {
        self.synced.store(false, Ordering::Relaxed);
        let mut reads = self.replica_reads.write();
        if let Some(old) = reads.take() {
            old.supersede(old.version());
            *reads = Some(Arc::new(old.renewed()));
        }
    }

    pub(super) fn register(&self, addr: String) -> u64 {
        let id = self.next_stream.fetch_add(1, Ordering::Relaxed);
        self.replicas.lock().insert(id, Connected { addr, acked: 0, synced: false, behind_since: None });
        id
    }

    pub(super) fn unregister(&self, id: u64) {
        self.replicas.lock().remove(&id);
        self.acked.notify_waiters();
    }

    pub(super) fn ack(&self, id: u64, offset: u64, end: u64) {
        if let Some(r) = self.replicas.lock().get_mut(&id) {
            r.acked = r.acked.max(offset);
            r.synced = true;
            if r.acked >= end {
                r.behind_since = None;
            } else if r.behind_since.is_none() {
                r.behind_since = Some(Instant::now());
            }
        }
        self.acked.notify_waiters();
    }

    /// The synced replica among `listed` (`only` it, if given) that has acked `offset`, the most
    /// advanced first.
    pub(super) fn caught_up(&self, offset: u64, only: Option<&str>, listed: &[String]) -> Option<String> {
        self.replicas
            .lock()
            .values()
            .filter(|r| r.synced && r.acked >= offset && only.is_none_or(|a| r.addr == a))
            .filter(|r| listed.contains(&r.addr))
            .max_by(|a, b| a.acked.cmp(&b.acked).then_with(|| b.addr.cmp(&a.addr)))
            .map(|r| r.addr.clone())
    }

    /// A failover writer probed this process just now.
    pub fn saw_writer(&self) {
        *self.writer_seen.lock() = Some(Instant::now());
    }

    /// Whether a failover writer probed this process lately (it probes every 100 ms by default).
    pub fn writer_watching(&self) -> bool {
        self.writer_seen.lock().is_some_and(|at| at.elapsed() < WRITER_FRESH)
    }

    /// Whether a hand-over has paused this primary.
    pub fn handing_over(&self) -> bool {
        self.handing_over.load(Ordering::SeqCst)
    }

    /// The replica a hand-over committed to (empty: none).
    pub fn handover_to(&self) -> String {
        self.handover_to.lock().clone()
    }

    /// Ends the hand-over state (the switch happened, or the hand-over gave up before committing).
    pub fn end_handover(&self) {
        self.handover_to.lock().clear();
        self.handing_over.store(false, Ordering::SeqCst);
    }

    /// Marks the process as stopping (no follower starts from now on).
    pub fn set_exiting(&self) {
        self.exiting.store(true, Ordering::SeqCst);
    }

    pub fn exiting(&self) -> bool {
        self.exiting.load(Ordering::SeqCst)
    }

    /// How many connected replicas among `listed` (the topology's replicas of this shard) have
    /// acked `offset`: a stream opened by anything else (a replica dropped from the shard, a
    /// client naming itself anything) counts for nothing.
    pub(super) fn count_acked(&self, offset: u64, listed: &[String]) -> u32 {
        let replicas = self.replicas.lock();
        replicas.values().filter(|r| r.synced && r.acked >= offset && listed.contains(&r.addr)).count() as u32
    }

    /// The connected replicas, for stats.
    pub fn replicas(&self) -> Vec<ReplicaInfo> {
        let mut out: Vec<ReplicaInfo> = self
            .replicas
            .lock()
            .values()
            .map(|r| ReplicaInfo {
                addr: r.addr.clone(),
                acked_offset: r.acked,
                lag_ms: r.behind_since.map_or(0, |t| t.elapsed().as_millis() as u64),
                synced: r.synced,
            })
            .collect();
        out.sort_by(|a, b| a.addr.cmp(&b.addr));
        out
    }

    /// Cuts a broken stream left half-received (none of each was applied).
    pub fn partial_cuts_dropped(&self) -> u64 {
        self.partial_cuts_dropped.load(Ordering::Relaxed)
    }

    /// Full syncs this primary has sent.
    pub fn full_syncs(&self) -> u64 {
        self.full_syncs.load(Ordering::Relaxed)
    }

    /// The most bytes one unit may bring a cut before the replica gets a full sync instead
    /// ([`UNIT_BYTES`] unless changed; tests lower it).
    pub fn unit_limit(&self) -> usize {
        self.unit_limit.load(Ordering::Relaxed)
    }

    pub fn set_unit_limit(&self, bytes: usize) {
        self.unit_limit.store(bytes.max(1), Ordering::Relaxed);
    }

    /// Replica side, for stats.
    pub fn link(&self) -> Link {
        Link {
            primary_addr: self.primary_addr.lock().clone(),
            primary_run_id: self.primary_run_id.lock().clone(),
            offset: self.offset.load(Ordering::Relaxed),
            synced: self.synced(),
            up: self.link_up.load(Ordering::Relaxed),
        }
    }
}

/// A replica's link to its primary, as stats show it.
#[derive(Debug, Clone, Default)]
pub struct Link {
    /// Empty: this process follows no primary.
    pub primary_addr: String,
    pub primary_run_id: String,
    /// The offset applied up to.
    pub offset: u64,
    pub synced: bool,
    pub up: bool,
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::Replication;

    #[test]
    fn a_generation_ends_only_after_its_followers_change_in_progress() {
        let repl = Arc::new(Replication::default());
        let old = repl.follow("p").expect("a first primary");
        let (started, wait_started) = std::sync::mpsc::channel();
        let (finish, wait_finish) = std::sync::mpsc::channel::<()>();
        let applier = {
            let repl = repl.clone();
            std::thread::spawn(move || {
                repl.while_current(old, || {
                    started.send(()).unwrap();
                    wait_finish.recv().unwrap();
                    "applied"
                })
            })
        };
        wait_started.recv().unwrap();
        let switch = {
            let repl = repl.clone();
            std::thread::spawn(move || repl.follow("q"))
        };
        std::thread::sleep(Duration::from_millis(100));
        assert!(!switch.is_finished(), "the generation ended while its follower was changing the store");
        finish.send(()).unwrap();
        assert_eq!(applier.join().unwrap(), Some("applied"));
        let new = switch.join().unwrap().expect("a new primary, a new generation");
        assert_eq!(repl.while_current(old, || ()), None, "the old generation changes nothing more");
        assert_eq!(repl.while_current(new, || 1), Some(1));
        repl.stop_following();
        assert!(!repl.current(new));
        assert_eq!(repl.follow("q"), Some(repl.generation()), "following again starts a generation");
    }
}
