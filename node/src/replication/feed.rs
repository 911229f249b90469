//! The primary's side of replication: one feed per connected replica, and WAIT.
//!
//! A feed sends, in order:
//! 1. unless the replica can continue (it names this process's run id and an offset still in
//!    the backlog): a full sync: `full_start`, every live entry (the slot export, memory over
//!    the base snapshot), then `full_done` carrying the log offset taken *before* the export
//!    began; changes from there on are sent again after it, so none falls between the two;
//! 2. then, forever, the changes from its offset on, in *cuts*: each key the log names, read from
//!    the store as it is now (gone: in `deleted`), or as a SET recorded it (see [`take_cut`]),
//!    several changes of one key sent once. A cut
//!    is taken under the store's gate held shared, so no transaction or script runs while it
//!    reads the log up to its end and then the keys: a transaction's or script's keys (one
//!    [`Change::Unit`]) are all in it or none, and no unit that ran after the log was read shows
//!    in any key read. The replica applies a cut as one unit (its chunks carry `more` until the
//!    last), so a replica never holds part of a transaction or script, even when its primary
//!    dies mid-cut. (Single-key writes run on during a cut: its keys are each as new as their
//!    own last change, not all of one instant.) A cut is bounded ([`CUT_CHANGES`],
//!    [`CUT_BYTES`]); a replica further behind than that gets the log's changes in cuts that end
//!    before the log does, which keep units whole but may show effects of later units too: it
//!    has not caught up anyway. A `Resync` change (FLUSHALL), a replica that fell out of the
//!    backlog, or a unit whose keys and values exceed [`UNIT_BYTES`](super::state::UNIT_BYTES) starts a full sync again.
//!
//! Under load a feed gathers changes for [`CHUNK_GAP`](super::state::CHUNK_GAP) between cuts, so
//! that what a cut costs (wake-ups on both sides, a write, the replica's ack) is shared by many
//! writes; a WAIT that has to wait for an ack ends the gap at once, so WAIT is never slowed by
//! it. Without a WAIT, a replica under load trails its primary by up to that gap plus the time
//! to send and apply.
//!
//! Idle, a feed sends an empty chunk every [`HEARTBEAT`] so the replica acks (WAIT sees idle
//! replicas as caught up) and a dead replica's stream is noticed. The stream to the replica is a
//! small channel: a slow replica slows its own feed only; the log keeps what it has not read
//! (up to the backlog, then it resyncs).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use shoal_wire::pieces;
use shoal_wire::proto::{ExportEntry, ReplicaAck, ReplicationChunk};
use tokio::sync::mpsc;
use tonic::Status;

use super::state::Replication;
use crate::store::Store;
use crate::store::changes::{Behind, Change, Recorded};
use crate::store::object::ValueType;
use hashbrown::hash_map::Entry;

/// How often an idle feed sends an empty chunk.
pub const HEARTBEAT: Duration = Duration::from_millis(500);
/// Changes one cut takes from the log at most ...
pub const CUT_CHANGES: usize = 16 * 1024;
/// ... and bytes of keys and values (it is held whole on both sides until applied).
pub const CUT_BYTES: usize = 64 << 20;
/// ... and bytes of the log (so the log's lock, which writers wait for, is held briefly).
pub const CUT_LOG_BYTES: usize = 4 << 20;
/// Messages are cut at about this many bytes of values.
const CHUNK_BYTES: usize = 1 << 20;
type Tx = mpsc::Sender<Result<ReplicationChunk, Status>>;

/// Serves one replica until it goes away, or until this process stops being a primary:
/// `generation` is [`Replication::generation`] read before the process was seen serving, and a
/// demotion ends it (a demoted primary's store is about to be replaced by its new primary's, and
/// none of that may reach a replica still listening here). `first` is the replica's opening
/// message; `acks` the rest.
pub async fn run(
    store: Arc<Store>,
    repl: Arc<Replication>,
    generation: u64,
    first: ReplicaAck,
    mut acks: tonic::Streaming<ReplicaAck>,
    tx: Tx,
) {
    // From here on every change is recorded; the full sync below starts after this.
    if store.events.changes.activate() {
        // An op decides whether to record its keys before it applies (a SET when it records,
        // under its shard lock, after). Ops that decided "no" just before this may still be
        // applying; every op applies under the store's gate, so
        // taking it once waits them out, and the full sync sees what they wrote.
        let s = store.clone();
        let _ = tokio::task::spawn_blocking(move || drop(s.gate.write())).await;
    }
    let id = repl.register(first.replica.clone());
    tracing::info!(replica = %first.replica, offset = first.offset, "replica connected");
    let acker = {
        let (repl, store) = (repl.clone(), store.clone());
        tokio::spawn(async move {
            while let Ok(Some(ack)) = acks.message().await {
                repl.ack(id, ack.offset, store.events.changes.end());
            }
        })
    };
    // Ends only when the replica's stream does.
    let _ = send_changes(&store, &repl, generation, &first, id, &tx).await;
    acker.abort();
    repl.unregister(id);
    if repl.current(generation) {
        tracing::info!(replica = %first.replica, "replica disconnected");
    } else {
        tracing::info!(replica = %first.replica, "no longer a primary: replication stream closed");
    }
}

/// The full sync (unless the replica can continue), then the changes, for ever; `Err` once the
/// replica's stream is gone or `generation` has ended.
async fn send_changes(
    store: &Arc<Store>,
    repl: &Arc<Replication>,
    generation: u64,
    first: &ReplicaAck,
    id: u64,
    tx: &Tx,
) -> Result<(), ()> {
    let log = &store.events.changes;
    let mut cursor = if first.run_id == repl.run_id && log.holds(first.offset) {
        repl.ack(id, first.offset, log.end());
        first.offset
    } else {
        full_sync(store, repl, generation, tx).await?
    };
    let mut last_sent: Option<tokio::time::Instant> = None;
    // The libraries' generation the replica has (a full sync sends them; a replica that
    // continues from the backlog gets them once, here).
    let mut libraries_sent = None;
    loop {
        still(repl, generation)?;
        // Never waits: while a FUNCTION command holds the libraries (a load may take up to
        // its timeout), the check waits for the next turn of this loop.
        if let Some(libraries) = store.libraries.try_get()
            && libraries_sent != Some(libraries.generation)
        {
            let functions = sendable(libraries.bytes);
            let chunk = ReplicationChunk {
                run_id: repl.run_id.clone(),
                offset: cursor,
                functions,
                ..Default::default()
            };
            tx.send(Ok(chunk)).await.map_err(|_| ())?;
            libraries_sent = Some(libraries.generation);
        }
        let appended = log.appended.notified();
        if let Some(due) = last_sent.map(|at| at + repl.chunk_gap())
            && log.end() > cursor
            && tokio::time::Instant::now() < due
        {
            // Made before the check: a WAIT that starts after it still ends the gap.
            let wait_started = repl.wait_started.notified();
            if repl.waiting.load(Ordering::SeqCst) == 0 {
                tokio::select! {
                    _ = tokio::time::sleep_until(due) => {}
                    _ = wait_started => {}
                }
            }
        }
        if !log.holds(cursor) {
            tracing::warn!(replica = %first.replica, cursor, "replica fell out of the backlog; full sync");
            cursor = full_sync(store, repl, generation, tx).await?;
            continue;
        }
        if log.end() <= cursor {
            tokio::select! {
                _ = appended => {}
                _ = tokio::time::sleep(HEARTBEAT) => heartbeat(repl, cursor, tx).await?,
            }
            continue;
        }
        // Checked under the gate: a demoted primary's follower empties the store under it
        // exclusively, after the generation ended, so a cut taken here holds none of that.
        let r = repl.clone();
        let taking = under_gate(store, None, move |s, shared| {
            r.current(generation).then(|| take_cut(s, cursor, r.unit_limit(), shared))
        });
        tokio::pin!(taking);
        let taken = loop {
            tokio::select! {
                biased;
                taken = &mut taking => break taken,
                // A script or transaction holds the gate, perhaps for long: the replica keeps
                // hearing from this feed meanwhile, as when it is idle, so it does not give up
                // on a live primary (see `follow.rs`'s STALL).
                _ = tokio::time::sleep(HEARTBEAT) => heartbeat(repl, cursor, tx).await?,
            }
        }
        .flatten()
        .ok_or(())?;
        let Ok(cut) = taken else {
            tracing::warn!(
                replica = %first.replica,
                cursor,
                "replica fell out of the backlog, or a transaction or script wrote more than a cut may hold; full sync"
            );
            cursor = full_sync(store, repl, generation, tx).await?;
            continue;
        };
        let resync = cut.resync;
        let reached = cut.reached;
        send_cut(&repl.run_id, cut, cursor, tx).await?;
        last_sent = Some(tokio::time::Instant::now());
        cursor = if resync { full_sync(store, repl, generation, tx).await? } else { reached };
    }
}

/// The states of the keys the log names from an offset on (see the module docs).
#[derive(Debug, Default)]
pub struct Cut {
    pub entries: Vec<ExportEntry>,
    pub deleted: Vec<Bytes>,
    /// The offset after the changes it covers.
    pub reached: u64,
    /// It ends at a `Resync` (FLUSHALL): a full sync follows.
    pub resync: bool,
    /// It is a [`Change::Slots`] alone: slots given away (`false`) or taken back (`true`).
    pub slots: Option<(bool, Vec<u16>)>,
}

/// Takes the cut from `from` on: under the store's gate held shared (`_shared`: no transaction
/// or script runs meanwhile), the log up to its end (or the bounds), then each named key's state.
///
/// A key's state is what its last change in the cut left: a SET's recorded value
/// ([`Change::Value`]) as it stands, or else the store's state read now. A state read from the
/// store is final for the cut: every change in it applied before the log was read, so none
/// holds anything newer (a SET's recorded value later in the cut is skipped). A recorded value
/// already expired is read from the store instead (it is gone there, or rewritten).
pub fn take_cut(
    store: &Store,
    from: u64,
    unit_limit: usize,
    _shared: parking_lot::RwLockReadGuard<'_, ()>,
) -> Result<Cut, Behind> {
    let (changes, _) = store.events.changes.read(from, CUT_CHANGES, CUT_LOG_BYTES)?;
    let now = store.now_ms();
    let mut cut = Cut { reached: from, ..Default::default() };
    let mut states = States::with_capacity(changes.len());
    for change in changes {
        match change {
            Change::Resync => {
                cut.resync = true;
                break;
            }
            // Slots given away or taken back travel alone, between the cuts of the changes
            // before and after them: the replica applies each in its order.
            Change::Slots { .. } if cut.reached > from => break,
            Change::Slots { kept, slots } => {
                cut.slots = Some((kept, slots));
                cut.reached += 1;
                break;
            }
            Change::Key(k) => states.read(store, k),
            Change::Unit(keys) => {
                let before = states.bytes;
                for k in keys {
                    states.read(store, k);
                    if states.bytes - before > unit_limit {
                        return Err(Behind); // too much to hold whole: a full sync instead
                    }
                }
            }
            Change::Value(v) if v.expire_at != 0 && v.expire_at <= now => states.read(store, v.key),
            Change::Value(v) => states.recorded(v),
        }
        cut.reached += 1;
        if states.bytes >= CUT_BYTES {
            break;
        }
    }
    for s in states.states {
        match s {
            KeyState::Live(e) => cut.entries.push(e),
            KeyState::Gone(k) => cut.deleted.push(k),
        }
    }
    Ok(cut)
}

/// The keys' states a cut gathers, one per key.
struct States {
    states: Vec<KeyState>,
    /// Each key's place in `states`, and whether its state was read from the store (final).
    at: hashbrown::HashMap<Bytes, (usize, bool)>,
    /// What they count against [`CUT_BYTES`].
    bytes: usize,
}

/// A key's state in a cut.
enum KeyState {
    Live(ExportEntry),
    Gone(Bytes),
}

impl States {
    fn with_capacity(n: usize) -> States {
        States { states: Vec::with_capacity(n), at: hashbrown::HashMap::with_capacity(n), bytes: 0 }
    }

    /// The key's state as the store holds it now, unless already read.
    fn read(&mut self, store: &Store, key: Bytes) {
        let fetch = |key: &Bytes| match store.fetch(key) {
            Some((value, expire_at, value_type)) => {
                KeyState::Live(entry(key.clone(), value, expire_at, value_type as u32))
            }
            None => KeyState::Gone(key.clone()),
        };
        match self.at.entry(key) {
            Entry::Occupied(o) if o.get().1 => {}
            Entry::Occupied(mut o) => {
                let state = fetch(o.key());
                self.bytes += state.size();
                self.states[o.get().0] = state;
                o.get_mut().1 = true;
            }
            Entry::Vacant(v) => {
                let state = fetch(v.key());
                self.bytes += state.size();
                v.insert((self.states.len(), true));
                self.states.push(state);
            }
        }
    }

    /// A SET's recorded state, unless the store's was read already (it is at least as new).
    fn recorded(&mut self, v: Recorded) {
        let state =
            |v: Recorded| KeyState::Live(entry(v.key, v.value, v.expire_at, ValueType::String as u32));
        match self.at.entry(v.key.clone()) {
            Entry::Occupied(o) if o.get().1 => {}
            Entry::Occupied(o) => {
                let state = state(v);
                self.bytes += state.size();
                self.states[o.get().0] = state;
            }
            Entry::Vacant(e) => {
                let state = state(v);
                self.bytes += state.size();
                e.insert((self.states.len(), false));
                self.states.push(state);
            }
        }
    }
}

impl KeyState {
    /// What it counts against [`CUT_BYTES`] (a key's later state in the same cut counts again:
    /// the bound only needs to hold, not be tight).
    fn size(&self) -> usize {
        match self {
            KeyState::Live(e) => e.key.len() + e.value.len() + 16,
            KeyState::Gone(k) => k.len() + 8,
        }
    }
}

fn entry(key: Bytes, value: Bytes, expire_at_ms: u64, value_type: u32) -> ExportEntry {
    ExportEntry {
        slot: u32::from(shoal_wire::key_slot(&key)),
        key,
        value,
        expire_at_ms,
        partial: false,
        value_type,
    }
}

/// Sends a cut in messages of about [`CHUNK_BYTES`] (large values in pieces), every one but the
/// last marked `more`; the last carries the offset it reaches.
async fn send_cut(run_id: &str, cut: Cut, from: u64, tx: &Tx) -> Result<(), ()> {
    let fresh =
        || ReplicationChunk { run_id: run_id.to_string(), offset: from, more: true, ..Default::default() };
    let mut chunk = fresh();
    let mut size = 0;
    let mut parts = Vec::new();
    for entry in cut.entries {
        pieces::push_entry(entry, &mut parts);
        for part in parts.drain(..) {
            size += part.key.len() + part.value.len() + 16;
            chunk.entries.push(part);
            if size >= CHUNK_BYTES {
                tx.send(Ok(std::mem::replace(&mut chunk, fresh()))).await.map_err(|_| ())?;
                size = 0;
            }
        }
    }
    chunk.deleted = cut.deleted;
    match cut.slots {
        Some((true, slots)) => chunk.kept_slots = slots.into_iter().map(u32::from).collect(),
        Some((false, slots)) => chunk.dropped_slots = slots.into_iter().map(u32::from).collect(),
        None => {}
    }
    chunk.offset = cut.reached;
    chunk.more = false;
    tx.send(Ok(chunk)).await.map_err(|_| ())
}

/// The libraries as a replication chunk carries them: a payload even when there are none (an
/// empty field means "not sent").
fn libraries_payload(store: &Store) -> Bytes {
    sendable(store.libraries.get().bytes)
}

fn sendable(bytes: Bytes) -> Bytes {
    if bytes.is_empty() { Bytes::from(crate::script::registry::payload_of(&[])) } else { bytes }
}

/// An empty chunk at the replica's offset: this feed is alive (the replica acks it).
async fn heartbeat(repl: &Replication, cursor: u64, tx: &Tx) -> Result<(), ()> {
    let beat = ReplicationChunk { run_id: repl.run_id.clone(), offset: cursor, ..Default::default() };
    tx.send(Ok(beat)).await.map_err(|_| ())
}

/// `Err` once `generation` has ended (this process is no longer a primary): a feed stops.
fn still(repl: &Replication, generation: u64) -> Result<(), ()> {
    if repl.current(generation) { Ok(()) } else { Err(()) }
}

/// Sends everything this node holds; returns the log offset the replica is at once it has it.
/// Stops (`Err`) if `generation` ends meanwhile: what the export reads after that may be a
/// demoted primary's store being emptied, so nothing read after it is sent (each message is
/// checked once read) and the replica never gets `full_done`.
async fn full_sync(store: &Arc<Store>, repl: &Replication, generation: u64, tx: &Tx) -> Result<u64, ()> {
    let run_id = &repl.run_id;
    repl.full_syncs.fetch_add(1, Ordering::Relaxed);
    let start = store.events.changes.end();
    let started = std::time::Instant::now();
    still(repl, generation)?;
    // The libraries go first: the replica's become the primary's (an empty payload says "none"),
    // and so do the slots given away (read after `start`: a change of them since is sent again).
    let functions = libraries_payload(store);
    let dropped_slots = store.dropped_slots().into_iter().map(u32::from).collect();
    let begin = ReplicationChunk {
        run_id: run_id.to_string(),
        full_start: true,
        functions,
        dropped_slots,
        ..Default::default()
    };
    tx.send(Ok(begin)).await.map_err(|_| ())?;
    let (etx, mut erx) = mpsc::channel(4);
    let export_store = store.clone();
    tokio::task::spawn_blocking(move || {
        crate::export::export(&export_store, 0, (shoal_wire::SLOT_COUNT - 1) as u16, CHUNK_BYTES, etx)
    });
    let mut keys = 0u64;
    while let Some(chunk) = erx.recv().await {
        let Ok(chunk) = chunk else { return Err(()) };
        still(repl, generation)?;
        keys += chunk.entries.iter().filter(|e| !e.partial).count() as u64;
        let c = ReplicationChunk { run_id: run_id.to_string(), entries: chunk.entries, ..Default::default() };
        tx.send(Ok(c)).await.map_err(|_| ())?;
    }
    still(repl, generation)?;
    let done =
        ReplicationChunk { run_id: run_id.to_string(), offset: start, full_done: true, ..Default::default() };
    tx.send(Ok(done)).await.map_err(|_| ())?;
    tracing::info!(keys, ms = started.elapsed().as_millis() as u64, offset = start, "full sync sent");
    Ok(start)
}

/// Runs `f` under the store's gate held shared: right here when the gate is free (the common
/// case), else on a blocking thread (a transaction or script holds it, a script possibly for a
/// while), waiting at most `limit` for it. `None` if the gate stayed held that long (or the
/// blocking thread failed).
async fn under_gate<R: Send + 'static>(
    store: &Arc<Store>,
    limit: Option<Duration>,
    f: impl for<'a> FnOnce(&'a Store, parking_lot::RwLockReadGuard<'a, ()>) -> R + Send + 'static,
) -> Option<R> {
    if let Some(shared) = store.gate.try_read() {
        return Some(f(store, shared));
    }
    let store = store.clone();
    tokio::task::spawn_blocking(move || {
        let shared = match limit {
            Some(t) => store.gate.try_read_for(t)?,
            None => store.gate.read(),
        };
        Some(f(&store, shared))
    })
    .await
    .ok()
    .flatten()
}

/// A WAIT (or a hand-over) waiting for acks, counted in [`Replication::waiting`] while it lives:
/// feeds send what they gathered at once instead of at the end of their gap.
pub(super) struct Waiting<'a>(&'a Replication);

impl Waiting<'_> {
    pub(super) fn start(repl: &Replication) -> Waiting<'_> {
        repl.waiting.fetch_add(1, Ordering::SeqCst);
        repl.wait_started.notify_waiters();
        Waiting(repl)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// WAIT: how many replicas have acked every change applied before this call, waiting up to
/// `timeout` (None: no limit) for `wanted` of them.
/// `listed`: the replicas the topology lists for this shard, the only ones counted.
pub async fn wait(
    store: &Arc<Store>,
    repl: &Replication,
    listed: &[String],
    wanted: u32,
    timeout: Option<Duration>,
) -> u32 {
    let until = timeout.map(|t| tokio::time::Instant::now() + t);
    // The log's end is read under the store's gate held shared: a transaction or script (which
    // holds it exclusively) records its unit just before it lets go, and a client blocked on one
    // of its keys may have been served inside it, its reply already sent: that client's WAIT must
    // count the unit. Still held when the timeout runs out (a long script): no replica can be said
    // to hold what the unit running meanwhile wrote, so none is counted.
    let Some(target) = under_gate(store, timeout, |s, _shared| s.events.changes.end()).await else {
        return 0;
    };
    let mut waiting = None;
    loop {
        let acked = repl.acked.notified();
        let count = repl.count_acked(target, listed);
        if count >= wanted {
            return count;
        }
        // Feeds send what they gathered now instead of at the end of their gap.
        waiting.get_or_insert_with(|| Waiting::start(repl));
        match until {
            Some(at) => {
                tokio::select! {
                    _ = acked => {}
                    _ = tokio::time::sleep_until(at) => return repl.count_acked(target, listed),
                }
            }
            None => acked.await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;

    use super::{CUT_CHANGES, Cut, take_cut};
    use crate::store::{ManualClock, SetExpiry, SetOptions, Store, StoreConfig};

    fn cut(store: &Store, from: u64) -> Cut {
        take_cut(store, from, crate::replication::state::UNIT_BYTES, store.gate.read())
            .expect("in the backlog")
    }

    fn state(cut: &Cut, key: &str) -> Option<(String, u64)> {
        let live = cut.entries.iter().find(|e| e.key == key.as_bytes());
        let gone = cut.deleted.iter().any(|k| k == key.as_bytes());
        assert!(live.is_some() != gone, "{key} must be in the cut exactly once");
        live.map(|e| (String::from_utf8_lossy(&e.value).into_owned(), e.expire_at_ms))
    }

    /// Slots given away or taken back travel in a cut of their own, between the cuts of the
    /// changes recorded before and after them.
    #[test]
    fn slots_given_away_or_taken_back_travel_alone_in_stream_order() {
        let store = Store::new(StoreConfig::default(), Arc::new(ManualClock::new(1_000_000)));
        store.events.changes.activate();
        store.set(b"before", b"1", SetOptions::default()).unwrap();
        store.events.changes.slots(false, &[5, 6]);
        store.events.changes.slots(true, &[5]);
        store.set(b"after", b"2", SetOptions::default()).unwrap();
        let first = cut(&store, 0);
        assert_eq!((first.reached, first.slots.as_ref()), (1, None), "ends before the slots");
        assert_eq!(state(&first, "before"), Some(("1".into(), 0)));
        let given = cut(&store, 1);
        assert_eq!(given.reached, 2);
        assert_eq!(given.slots, Some((false, vec![5, 6])));
        assert!(given.entries.is_empty() && given.deleted.is_empty());
        assert_eq!(cut(&store, 2).slots, Some((true, vec![5])));
        let last = cut(&store, 3);
        assert_eq!((last.reached, last.slots.as_ref()), (4, None));
        assert_eq!(state(&last, "after"), Some(("2".into(), 0)));
    }

    #[test]
    fn a_cut_holds_each_keys_last_state() {
        let clock = ManualClock::new(1_000_000);
        let store = Store::new(StoreConfig::default(), Arc::new(clock.clone()));
        store.events.changes.activate();
        let set = |k: &str, v: &str, opts: SetOptions| store.set(k.as_bytes(), v.as_bytes(), opts).unwrap();
        // Later SETs of a key win.
        set("a", "1", SetOptions::default());
        set("a", "2", SetOptions { expiry: SetExpiry::At(5_000_000), ..Default::default() });
        // A write that records only its key (as the ops layer does for an APPEND) after a SET: the
        // store's state.
        set("b", "x", SetOptions::default());
        store.append(b"b", b"y").unwrap();
        store.events.changes.key(b"b");
        // ... and before one.
        store.append(b"c", b"p").unwrap();
        store.events.changes.key(b"c");
        set("c", "q", SetOptions::default());
        // A SET then a DEL: gone.
        set("d", "v", SetOptions::default());
        store.del(b"d");
        store.events.changes.key(b"d");
        // A value recorded with a TTL that has passed by the time the cut is taken: gone.
        set("e", "v", SetOptions { expiry: SetExpiry::At(1_000_100), ..Default::default() });
        // A value too large to record: read from the store.
        let big = "z".repeat(crate::store::changes::RECORDED_VALUE_MAX + 1);
        set("f", &big, SetOptions::default());
        clock.advance(200);
        let end = store.events.changes.end();
        let c = cut(&store, 0);
        assert_eq!(c.reached, end);
        assert_eq!(store.events.changes.end(), end + 1, "reading e expired it, a change of its own");
        assert!(!c.resync);
        assert_eq!(state(&c, "a"), Some(("2".into(), 5_000_000)));
        assert_eq!(state(&c, "b"), Some(("xy".into(), 0)));
        assert_eq!(state(&c, "c"), Some(("q".into(), 0)));
        assert_eq!(state(&c, "d"), None);
        assert_eq!(state(&c, "e"), None);
        assert_eq!(state(&c, "f"), Some((big, 0)));
        assert_eq!(c.entries.len() + c.deleted.len(), 6, "one state per key");
    }

    #[test]
    fn a_cut_sends_a_sets_recorded_value_without_reading_the_store() {
        let store = Store::new(StoreConfig::default(), Arc::new(ManualClock::new(1_000_000)));
        store.events.changes.activate();
        store.set(b"k", b"first", SetOptions::default()).unwrap();
        for i in 0..CUT_CHANGES {
            store.set(format!("other{i}").as_bytes(), b"v", SetOptions::default()).unwrap();
        }
        store.set(b"k", b"second", SetOptions::default()).unwrap();
        // The first cut ends before the second SET of k: it holds k as its first SET left it
        // (reading the store would give "second"; the next cut carries that).
        let first = cut(&store, 0);
        assert_eq!(first.reached, CUT_CHANGES as u64);
        assert_eq!(state(&first, "k"), Some(("first".into(), 0)));
        let next = cut(&store, first.reached);
        assert_eq!(state(&next, "k"), Some(("second".into(), 0)));
        let keys: Vec<Bytes> = next.entries.iter().map(|e| e.key.clone()).collect();
        assert_eq!(keys, [Bytes::from(format!("other{}", CUT_CHANGES - 1)), Bytes::from_static(b"k")]);
    }

    #[test]
    fn a_state_read_from_the_store_is_final_for_the_cut() {
        let store = Store::new(StoreConfig::default(), Arc::new(ManualClock::new(1_000_000)));
        store.events.changes.activate();
        // In the first cut: a write that records only its key (read from the store), then a
        // SET whose value is recorded.
        store.append(b"k", b"a").unwrap();
        store.events.changes.key(b"k");
        store.set(b"k", b"b", SetOptions::default()).unwrap();
        for i in 0..CUT_CHANGES - 2 {
            store.set(format!("other{i}").as_bytes(), b"v", SetOptions::default()).unwrap();
        }
        // After it: another SET of k.
        store.set(b"k", b"c", SetOptions::default()).unwrap();
        let first = cut(&store, 0);
        assert_eq!(first.reached, CUT_CHANGES as u64);
        // The store's state, read at the APPEND's change, already holds the later SET: the
        // recorded "b" is older and is skipped.
        assert_eq!(state(&first, "k"), Some(("c".into(), 0)));
        assert_eq!(state(&cut(&store, first.reached), "k"), Some(("c".into(), 0)));
    }
}
