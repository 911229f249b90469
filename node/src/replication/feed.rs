//! The primary's side of replication: one feed per connected replica, and WAIT.
//!
//! A feed sends, in order:
//! 1. unless the replica can continue (it names this process's run id and an offset still in
//!    the backlog): a full sync: `full_start`, every live entry (the slot export, memory over
//!    the base snapshot), then `full_done` carrying the log offset taken *before* the export
//!    began; changes from there on are sent again after it, so none falls between the two;
//! 2. then, forever, the changes from its offset on: each key the log names, read from the store
//!    as it is now (gone: in `deleted`), several changes of one key sent once. A `Resync` change
//!    (FLUSHALL) or a replica that fell out of the backlog starts a full sync again.
//!
//! Idle, a feed sends an empty chunk every [`HEARTBEAT`] so the replica acks (WAIT sees idle
//! replicas as caught up) and a dead replica's stream is noticed. The stream to the replica is a
//! small channel: a slow replica slows its own feed only; the log keeps what it has not read
//! (up to the backlog, then it resyncs).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use shoal_wire::pieces;
use shoal_wire::proto::{ExportEntry, ReplicaAck, ReplicationChunk};
use tokio::sync::mpsc;
use tonic::Status;

use super::Replication;
use crate::store::Store;
use crate::store::changes::{Behind, Change};

/// How often an idle feed sends an empty chunk.
pub const HEARTBEAT: Duration = Duration::from_millis(500);
/// Changes read from the log per chunk.
const CHANGES_PER_CHUNK: usize = 1024;
/// Chunks are cut at about this many bytes of values.
const CHUNK_BYTES: usize = 1 << 20;
/// Under load a feed sends at most one chunk per this long: changes made meanwhile go together
/// in the next one, so what each chunk costs the primary (a wake-up, a frame each way, the
/// replica's ack to read) is shared by many writes. A feed that has sent nothing for this long
/// sends at once, so an idle primary's WAIT is not slowed.
const CHUNK_GAP: Duration = Duration::from_millis(1);

type Tx = mpsc::Sender<Result<ReplicationChunk, Status>>;

/// Serves one replica until it goes away. `first` is its opening message; `acks` the rest.
pub async fn run(
    store: Arc<Store>,
    repl: Arc<Replication>,
    first: ReplicaAck,
    mut acks: tonic::Streaming<ReplicaAck>,
    tx: Tx,
) {
    // From here on every change is recorded; the full sync below starts after this.
    if store.events.changes.activate() {
        // An op decides whether to record its keys before it applies. Ops that decided "no"
        // just before this may still be applying; every op applies under the store's gate, so
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
    let _ = send_changes(&store, &repl, &first, id, &tx).await;
    acker.abort();
    repl.unregister(id);
    tracing::info!(replica = %first.replica, "replica disconnected");
}

/// The full sync (unless the replica can continue), then the changes, for ever; `Err` once the
/// replica's stream is gone.
async fn send_changes(
    store: &Arc<Store>,
    repl: &Replication,
    first: &ReplicaAck,
    id: u64,
    tx: &Tx,
) -> Result<(), ()> {
    let log = &store.events.changes;
    let mut cursor = if first.run_id == repl.run_id && log.holds(first.offset) {
        repl.ack(id, first.offset, log.end());
        first.offset
    } else {
        full_sync(store, &repl.run_id, tx).await?
    };
    let mut last_sent: Option<tokio::time::Instant> = None;
    loop {
        let appended = log.appended.notified();
        if let Some(due) = last_sent.map(|at| at + CHUNK_GAP)
            && log.end() > cursor
            && tokio::time::Instant::now() < due
        {
            tokio::time::sleep_until(due).await;
        }
        match log.read(cursor, CHANGES_PER_CHUNK) {
            Err(Behind) => {
                tracing::warn!(replica = %first.replica, cursor, "replica fell out of the backlog; full sync");
                cursor = full_sync(store, &repl.run_id, tx).await?;
            }
            Ok((changes, _)) if changes.is_empty() => {
                tokio::select! {
                    _ = appended => {}
                    _ = tokio::time::sleep(HEARTBEAT) => {
                        let beat = ReplicationChunk { run_id: repl.run_id.clone(), offset: cursor, ..Default::default() };
                        tx.send(Ok(beat)).await.map_err(|_| ())?;
                    }
                }
            }
            Ok((changes, next)) => {
                // Keys up to the first Resync; a Resync is a full sync from there.
                let resync = changes.iter().position(|c| *c == Change::Resync);
                let keys: Vec<Bytes> = changes
                    .into_iter()
                    .map_while(|c| match c {
                        Change::Key(k) => Some(k),
                        Change::Resync => None,
                    })
                    .collect();
                let reached = resync.map_or(next, |at| cursor + at as u64);
                send_states(store, &repl.run_id, keys, cursor, reached, tx).await?;
                last_sent = Some(tokio::time::Instant::now());
                cursor = match resync {
                    Some(_) => full_sync(store, &repl.run_id, tx).await?,
                    None => reached,
                };
            }
        }
    }
}

/// Sends everything this node holds; returns the log offset the replica is at once it has it.
async fn full_sync(store: &Arc<Store>, run_id: &str, tx: &Tx) -> Result<u64, ()> {
    let start = store.events.changes.end();
    let started = std::time::Instant::now();
    let begin = ReplicationChunk { run_id: run_id.to_string(), full_start: true, ..Default::default() };
    tx.send(Ok(begin)).await.map_err(|_| ())?;
    let (etx, mut erx) = mpsc::channel(4);
    let export_store = store.clone();
    tokio::task::spawn_blocking(move || {
        crate::service::export(&export_store, 0, (shoal_wire::SLOT_COUNT - 1) as u16, CHUNK_BYTES, etx)
    });
    let mut keys = 0u64;
    while let Some(chunk) = erx.recv().await {
        let Ok(chunk) = chunk else { return Err(()) };
        keys += chunk.entries.iter().filter(|e| !e.partial).count() as u64;
        let c = ReplicationChunk { run_id: run_id.to_string(), entries: chunk.entries, ..Default::default() };
        tx.send(Ok(c)).await.map_err(|_| ())?;
    }
    let done =
        ReplicationChunk { run_id: run_id.to_string(), offset: start, full_done: true, ..Default::default() };
    tx.send(Ok(done)).await.map_err(|_| ())?;
    tracing::info!(keys, ms = started.elapsed().as_millis() as u64, offset = start, "full sync sent");
    Ok(start)
}

/// Sends the current state of `keys` (changes `from..reached`); the last chunk carries `reached`.
async fn send_states(
    store: &Store,
    run_id: &str,
    mut keys: Vec<Bytes>,
    from: u64,
    reached: u64,
    tx: &Tx,
) -> Result<(), ()> {
    keys.sort_unstable();
    keys.dedup();
    let mut chunk = ReplicationChunk { run_id: run_id.to_string(), offset: from, ..Default::default() };
    let mut size = 0;
    let mut parts = Vec::new();
    for key in keys {
        match store.fetch(&key) {
            Some((value, expire_at, value_type)) => {
                let entry = ExportEntry {
                    slot: u32::from(shoal_wire::key_slot(&key)),
                    key,
                    value,
                    expire_at_ms: expire_at,
                    partial: false,
                    value_type: value_type as u32,
                };
                pieces::push_entry(entry, &mut parts);
                for part in parts.drain(..) {
                    size += part.key.len() + part.value.len() + 16;
                    chunk.entries.push(part);
                }
            }
            None => {
                size += key.len() + 8;
                chunk.deleted.push(key);
            }
        }
        if size >= CHUNK_BYTES {
            let full = std::mem::replace(
                &mut chunk,
                ReplicationChunk { run_id: run_id.to_string(), offset: from, ..Default::default() },
            );
            tx.send(Ok(full)).await.map_err(|_| ())?;
            size = 0;
        }
    }
    chunk.offset = reached;
    tx.send(Ok(chunk)).await.map_err(|_| ())
}

/// WAIT: how many replicas have acked every change applied before this call, waiting up to
/// `timeout` (None: no limit) for `wanted` of them.
pub async fn wait(store: &Store, repl: &Replication, wanted: u32, timeout: Option<Duration>) -> u32 {
    let target = store.events.changes.end();
    let until = timeout.map(|t| tokio::time::Instant::now() + t);
    loop {
        let acked = repl.acked.notified();
        let count = repl.count_acked(target);
        if count >= wanted {
            return count;
        }
        match until {
            Some(at) => {
                tokio::select! {
                    _ = acked => {}
                    _ = tokio::time::sleep_until(at) => return repl.count_acked(target),
                }
            }
            None => acked.await,
        }
    }
}
