//! The replica's side of replication: follow the shard's primary.
//!
//! The follower opens `Replicate` on the primary, naming the primary run id and offset it has
//! applied up to (so a short disconnection continues from the backlog instead of copying
//! everything again), applies every chunk in order (a `full_start` drops everything it held
//! first: its copy is only ever the primary's) and acks the offset each chunk brings it to once
//! its full sync is done. A broken stream is reopened with backoff; the follower stops when the
//! topology gives it another primary or makes it one (a new generation).
//!
//! A cut (the chunks up to one without `more`) is applied as one unit, under the store's gate
//! held exclusively: replica reads never see part of one, and a primary that dies mid-cut
//! leaves nothing of it here (see `feed.rs`: a transaction's or script's keys travel in one cut).
//!
//! Entries are stored as they are on the primary: value, type and absolute expiry time. Storing
//! them never evicts (the replica's own maxmemory is not applied to what its primary sends: the
//! primary's limit already bounds it), and an expired key goes when the primary sends its removal
//! or when the replica's own expiry reaches the same absolute time.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use shoal_wire::auth::Credentials;
use shoal_wire::client::{self, ClientOptions};
use shoal_wire::pieces::EntryAssembler;
use shoal_wire::proto::{ExportEntry, ReplicaAck, ReplicationChunk};
use tokio::sync::mpsc;

use super::state::Replication;
use crate::store::object::ValueType;
use crate::store::{Restore, Store};

/// How long the primary may say nothing (an idle one sends a heartbeat every
/// [`super::feed::HEARTBEAT`]) or take to answer the `Replicate` call before the follower gives
/// up on that stream and opens another: a live but stuck primary (stopped, or its link) must not
/// hold the follower until HTTP/2 keep-alive notices.
const STALL: Duration = Duration::from_secs(3);

/// Follows `primary` as generation `generation` until that generation ends; calls carry `secret`.
pub async fn run(
    store: Arc<Store>,
    repl: Arc<Replication>,
    me: String,
    primary: String,
    generation: u64,
    credentials: Credentials,
) {
    let mut backoff = Duration::from_millis(20);
    tracing::info!(primary = %primary, "following a primary");
    while repl.current(generation) {
        match follow_once(&store, &repl, &me, &primary, generation, &credentials).await {
            Ok(()) => backoff = Duration::from_millis(20),
            Err(e) => {
                tracing::debug!(primary = %primary, error = %e, "replication link down; retrying");
            }
        }
        // What arrived of an unfinished cut went with `follow_once`'s state, unapplied.
        if repl.mid_cut.swap(false, Ordering::Relaxed) {
            repl.partial_cuts_dropped.fetch_add(1, Ordering::Relaxed);
            tracing::info!(primary = %primary, "the stream ended mid-cut; nothing of that cut was applied");
        }
        repl.link_up.store(false, Ordering::Relaxed);
        if !repl.current(generation) {
            break;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(500));
    }
    tracing::info!(primary = %primary, "stopped following");
}

async fn follow_once(
    store: &Arc<Store>,
    repl: &Arc<Replication>,
    me: &str,
    primary: &str,
    generation: u64,
    credentials: &Credentials,
) -> Result<(), String> {
    let (acks, mut stream) = open(repl, me, primary, credentials).await?;
    let mut assembler = EntryAssembler::default();
    let mut in_full_sync = false;
    // The cut being received: its chunks are applied together once the last one is in.
    let mut pending = ReplicationChunk::default();
    // A full sync is done and the first cut after it has not been applied yet.
    let mut awaiting_cut = false;
    let mut heard = tokio::time::Instant::now();
    loop {
        let mut chunk = tokio::select! {
            next = stream.message() => match next {
                Ok(Some(c)) => c,
                Ok(None) => return Err("the primary closed the stream".into()),
                Err(s) => return Err(s.message().to_string()),
            },
            // A new generation ends this follower even while the primary is silent; a primary
            // silent past its heartbeats is stuck (alive, or the link is): follow anew.
            _ = tokio::time::sleep(Duration::from_millis(100)) => {
                if !repl.current(generation) {
                    return Ok(());
                }
                if heard.elapsed() > STALL {
                    return Err(format!("nothing from the primary for {STALL:?}"));
                }
                continue;
            }
        };
        heard = tokio::time::Instant::now();
        if !repl.current(generation) {
            return Ok(());
        }
        repl.link_up.store(true, Ordering::Relaxed);
        if take_libraries(store, &chunk) {
            continue;
        }
        if chunk.full_start {
            in_full_sync = true;
            assembler = EntryAssembler::default();
            if !start_full_sync(store, repl, generation, std::mem::take(&mut chunk.dropped_slots)).await? {
                return Ok(());
            }
        }
        let (offset, chunk_run_id, more, full_done) =
            (chunk.offset, chunk.run_id.clone(), chunk.more, chunk.full_done);
        gather(&mut pending, chunk);
        if more {
            repl.mid_cut.store(true, Ordering::Relaxed);
            continue;
        }
        repl.mid_cut.store(false, Ordering::Relaxed);
        match apply(store, repl, generation, &mut assembler, std::mem::take(&mut pending)).await {
            Ok(true) => {}
            Ok(false) => return Ok(()),
            // Not stored: this copy is no longer its primary's. It stops counting (no ack, not
            // synced: WAIT and failover pass it over) and asks for a full sync when it reopens.
            Err(e) => {
                repl.while_current(generation, || repl.unsync());
                tracing::error!(primary = %primary, error = %e, "a replicated cut could not be stored; resyncing");
                return Err(e);
            }
        }
        // What the replica reports (its primary's run, synced, its offset) is written under the
        // same rule as the store: never for a generation that has ended, or a follower finishing
        // late could mark a replica synced that its next follower has just begun to refill.
        let ack = repl.while_current(generation, || {
            if full_done {
                in_full_sync = false;
                *repl.primary_run_id.lock() = chunk_run_id;
                // Not synced yet: the export may hold part of a transaction or script that ran
                // while it was read; the first cut after it (or an idle primary's heartbeat, when
                // nothing ran) brings every such unit whole.
                awaiting_cut = true;
            } else if awaiting_cut && !in_full_sync {
                awaiting_cut = false;
                repl.synced.store(true, Ordering::Relaxed);
            }
            let ack = !in_full_sync && repl.synced();
            if ack {
                repl.offset.store(offset, Ordering::Relaxed);
            }
            ack
        });
        match ack {
            None => return Ok(()),
            Some(true) => {
                let ack = ReplicaAck { offset, ..Default::default() };
                acks.send(ack).await.map_err(|e| e.to_string())?;
            }
            Some(false) => {}
        }
    }
}

/// Adds what `chunk` carries to the cut being received.
fn gather(pending: &mut ReplicationChunk, chunk: ReplicationChunk) {
    pending.entries.extend(chunk.entries);
    pending.deleted.extend(chunk.deleted);
    pending.dropped_slots.extend(chunk.dropped_slots);
    pending.kept_slots.extend(chunk.kept_slots);
}

/// Takes the primary's libraries from `chunk` if it carries them (at a full sync and on each
/// change). True if that is all it carries: no cut, nothing to ack (it must not stand for the
/// cut a full sync waits for before the replica counts as synced).
fn take_libraries(store: &Store, chunk: &ReplicationChunk) -> bool {
    if chunk.functions.is_empty() {
        return false;
    }
    let none = crate::script::registry::payload_of(&[]);
    let bytes = if chunk.functions[..] == none[..] { Bytes::new() } else { chunk.functions.clone() };
    if store.libraries.get().bytes != bytes {
        store.libraries.set(bytes);
    }
    !chunk.full_start
        && chunk.entries.is_empty()
        && chunk.deleted.is_empty()
        && chunk.dropped_slots.is_empty()
        && chunk.kept_slots.is_empty()
        && !chunk.more
}

/// The slot numbers a chunk lists (any out of range dropped: a peer's bug must not index past
/// the slot table).
fn slots_of(slots: Vec<u32>) -> Vec<u16> {
    slots
        .into_iter()
        .filter_map(|s| u16::try_from(s).ok().filter(|&s| usize::from(s) < shoal_wire::SLOT_COUNT))
        .collect()
}

/// Opens the `Replicate` stream on `primary`, saying who this replica is and how far it got
/// (the primary's run and the offset applied, when synced: the primary may then continue from
/// its backlog). Returns the ack sender and the stream of chunks.
async fn open(
    repl: &Replication,
    me: &str,
    primary: &str,
    credentials: &Credentials,
) -> Result<(mpsc::Sender<ReplicaAck>, tonic::Streaming<ReplicationChunk>), String> {
    let options = ClientOptions {
        connect_timeout: Duration::from_millis(500),
        credentials: credentials.clone(),
        ..ClientOptions::default()
    };
    let mut client = client::connect(primary, &options).await.map_err(|e| e.to_string())?;
    let (acks, rx) = mpsc::channel(64);
    let run_id = if repl.synced() { repl.primary_run_id.lock().clone() } else { String::new() };
    let hello = ReplicaAck { replica: me.to_string(), run_id, offset: repl.offset.load(Ordering::Relaxed) };
    acks.send(hello).await.map_err(|e| e.to_string())?;
    let call = client.replicate(tokio_stream::wrappers::ReceiverStream::new(rx));
    let stream = tokio::time::timeout(STALL, call)
        .await
        .map_err(|_| format!("the primary did not answer within {STALL:?}"))?
        .map_err(|s| s.message().to_string())?
        .into_inner();
    Ok((acks, stream))
}

/// A full sync begins: the replica is not synced any more and drops everything it held (under
/// the store's exclusive gate); the slots it counts as given away become its primary's
/// (`dropped`). `Ok(false)`: generation `generation` had ended, nothing changed.
async fn start_full_sync(
    store: &Arc<Store>,
    repl: &Arc<Replication>,
    generation: u64,
    dropped: Vec<u32>,
) -> Result<bool, String> {
    let (s, r, dropped) = (store.clone(), repl.clone(), slots_of(dropped));
    let flushed = tokio::task::spawn_blocking(move || {
        r.while_current(generation, || {
            r.unsync();
            let _exclusive = s.gate.write();
            s.flush();
            s.set_dropped_slots(&dropped);
        })
    });
    Ok(flushed.await.map_err(|e| e.to_string())?.is_some())
}

/// Stores a chunk's entries (replacing what the keys held) and removes its deleted keys, unless
/// generation `generation` has ended (`Ok(false)`: nothing changed).
async fn apply(
    store: &Arc<Store>,
    repl: &Arc<Replication>,
    generation: u64,
    assembler: &mut EntryAssembler,
    chunk: ReplicationChunk,
) -> Result<bool, String> {
    let mut whole = Vec::with_capacity(chunk.entries.len());
    for e in chunk.entries {
        if let Some(e) = assembler.feed(e).map_err(|e| e.to_string())? {
            whole.push(e);
        }
    }
    let slots = Slots { dropped: slots_of(chunk.dropped_slots), kept: slots_of(chunk.kept_slots) };
    if whole.is_empty() && chunk.deleted.is_empty() && slots.dropped.is_empty() && slots.kept.is_empty() {
        return Ok(repl.current(generation));
    }
    let (store, repl) = (store.clone(), repl.clone());
    let deleted = chunk.deleted;
    let applied = tokio::task::spawn_blocking(move || {
        let applied = repl.while_current(generation, || apply_now(&store, &whole, &deleted, &slots));
        // Given away (marked by the cut just applied): their memory is reclaimed here, outside
        // the gate, so replica reads do not wait for it.
        if matches!(applied, Some(Ok(()))) && !slots.dropped.is_empty() {
            store.purge_slots(&slots.dropped);
        }
        applied
    })
    .await
    .map_err(|e| e.to_string())?;
    match applied {
        None => Ok(false),
        Some(Ok(())) => Ok(true),
        Some(Err(e)) => Err(e),
    }
}

/// What a cut says of slots (see [`Change::Slots`](crate::store::changes::Change::Slots)): its
/// primary gave them away, or took them back.
#[derive(Debug, Default)]
struct Slots {
    dropped: Vec<u16>,
    kept: Vec<u16>,
}

/// [`apply`]'s change, under the store's gate held exclusively: the whole cut, or (a value that
/// cannot be stored here: a type this node does not know, a value over its limits) nothing of it.
/// Slots given away or taken back come in a cut of their own, at their place in the stream: the
/// replica's copy of a slot follows its primary's, whatever order topologies reach it in (issue
/// 38's chaos runs lost a moved slot's keys when a replica dropped or purged slots by its view).
fn apply_now(store: &Store, whole: &[ExportEntry], deleted: &[Bytes], slots: &Slots) -> Result<(), String> {
    let _exclusive = store.gate.write();
    slots.dropped.iter().for_each(|&s| store.drop_slot(s));
    let (back, removed) = store.take_back_slots(slots.kept.iter().copied());
    if !back.is_empty() {
        tracing::debug!(slots = back.len(), removed, "the primary took slots back: leftovers reclaimed");
    }
    let mut entries = Vec::with_capacity(whole.len());
    for e in whole {
        let Some(value_type) = ValueType::from_u32(e.value_type) else {
            let key = String::from_utf8_lossy(&e.key);
            return Err(format!("a replicated value of unknown type {} (key {key})", e.value_type));
        };
        entries.push(Restore { key: &e.key, value: &e.value, value_type, expire_at: e.expire_at_ms });
    }
    if let Some((key, err)) = store.restore_all(&entries).into_iter().next() {
        return Err(format!(
            "could not store the replicated value of {}: {err}",
            String::from_utf8_lossy(key)
        ));
    }
    for key in deleted {
        let key: &[u8] = key;
        store.with_keys(&[key], |l| l.delete(key));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use shoal_wire::proto::ExportEntry;

    use super::Slots;
    use crate::store::slots::DROPPING;
    use crate::store::{ManualClock, SetOptions, Store, StoreConfig};

    fn entry(key: &str, value: &str) -> ExportEntry {
        ExportEntry {
            slot: u32::from(shoal_wire::key_slot(key.as_bytes())),
            key: Bytes::copy_from_slice(key.as_bytes()),
            value: Bytes::copy_from_slice(value.as_bytes()),
            expire_at_ms: 0,
            partial: false,
            value_type: 0,
        }
    }

    /// A replica follows its primary's slots in stream order: a slot given away is marked for
    /// reclaiming (out of listings), one taken back loses the earlier stay's leftovers
    /// before the primary's new entries land, and they stay through the purge.
    #[test]
    fn a_slot_given_away_and_taken_back_follows_the_stream() {
        let store = Store::new(StoreConfig::default(), Arc::new(ManualClock::new(1_000_000)));
        let slot = shoal_wire::key_slot(b"{a}x");
        let (drop, keep) = (
            Slots { dropped: vec![slot], ..Default::default() },
            Slots { kept: vec![slot], ..Default::default() },
        );
        store.set(b"{a}stale", b"earlier stay", SetOptions::default()).unwrap();
        super::apply_now(&store, &[], &[], &drop).unwrap();
        assert!(store.slot_flags().has(slot, DROPPING), "given away: out of listings, to be reclaimed");
        super::apply_now(&store, &[], &[], &keep).unwrap();
        assert!(!store.slot_flags().has(slot, DROPPING), "the slot is served again");
        assert_eq!(store.get(b"{a}stale"), None, "what the earlier stay left went first");
        super::apply_now(&store, &[entry("{a}x", "pulled by the primary")], &[], &Slots::default()).unwrap();
        store.purge();
        assert_eq!(store.get(b"{a}x").as_deref(), Some(&b"pulled by the primary"[..]));
        assert_eq!(store.get(b"{a}stale"), None, "the earlier stay's leftovers are gone");
    }

    /// A full sync's opening makes the slots the replica counts as given away its primary's.
    #[test]
    fn a_full_sync_takes_the_primarys_slots_given_away() {
        let store = Store::new(StoreConfig::default(), Arc::new(ManualClock::new(1_000_000)));
        store.drop_slot(7);
        store.set_dropped_slots(&[9, 11]);
        assert_eq!(store.dropped_slots(), vec![9, 11]);
        assert_eq!(super::slots_of(vec![3, 16383, 16384, u32::MAX]), vec![3, 16383], "out of range: ignored");
    }
}
