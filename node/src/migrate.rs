//! Pulling a migration's slots from their old owner.
//!
//! The new owner asks the old one for the range with `ExportSlots` and stores each chunk with
//! receiver-wins semantics (an arriving entry never replaces a value written here since, nor a
//! delete recorded here). The stream is bounded on both sides (the exporter produces a few chunks
//! ahead, the importer stores one at a time), so a fast sender cannot swamp a slow receiver.
//! Progress (slots complete, keys, bytes) is reported for the coordinator. If the old owner is
//! unreachable or the stream breaks, the pull resumes from the first slot not yet complete, with
//! backoff; entries received twice are simply skipped the second time.
//!
//! A pull reports done only once a replica of this shard (if the topology lists any) holds what
//! it pulled: the coordinator then ends the move and the old owner drops the slots, so a primary
//! lost right after must not take the only copy with it (found by the chaos run's resharding).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use shoal_wire::Migration;
use shoal_wire::auth::Credentials;
use shoal_wire::client::{self, ClientOptions};
use shoal_wire::pieces::EntryAssembler;
use shoal_wire::proto::{ExportRequest, TopologyDoc};

use crate::membership::pulls::Pulls;
use crate::membership::served::Served;
use crate::replication::Replication;
use crate::store::Store;

const CHUNK_BYTES: u32 = 256 << 10;

/// What a pull needs of its node: the store it fills, the view in force (a pull ends once
/// another version is served, and imports only into slots moving in), the board it reports
/// progress on and the rate limit it keeps, and the credentials its calls to the old owner carry.
/// The membership, which starts pulls, hands these over; the puller never sees the membership.
pub struct Puller {
    pub store: Arc<Store>,
    pub served: Arc<Served>,
    pub pulls: Arc<Pulls>,
    pub credentials: Credentials,
    /// This node's replication, to wait until a replica holds what was pulled.
    pub replication: Arc<Replication>,
}

/// Pulls `m` (started by topology `version`) from the node at `from` until done, or until the
/// node moves on to another version.
pub async fn pull(puller: Puller, m: Migration, version: u64, from: String) {
    let started = Instant::now();
    let mut resume = m.start;
    let mut backoff = Duration::from_millis(50);
    tracing::info!(start = m.start, end = m.end, from = m.from, version, "pulling slots");
    loop {
        if puller.served.version() != version {
            return; // superseded: the coordinator moved on (it only does once we are done)
        }
        // (Once every slot is in, a retry only waits for the replicas again.)
        let stored =
            if resume > m.end { Ok(()) } else { pull_once(&puller, m, version, &from, &mut resume).await };
        let pulled = match stored {
            Ok(()) => replicated(&puller, m, version).await,
            Err(e) => Err(e),
        };
        match pulled {
            Ok(()) => {
                puller.pulls.report(m, version, |p| {
                    p.done = true;
                    p.slots_done = m.len() as u32;
                    p.error.clear();
                });
                tracing::info!(
                    start = m.start,
                    end = m.end,
                    ms = started.elapsed().as_millis() as u64,
                    "slots pulled"
                );
                return;
            }
            Err(e) => {
                tracing::warn!(start = m.start, end = m.end, from = %from, error = %e, "pull interrupted; retrying");
                puller.pulls.report(m, version, |p| p.error = e.clone());
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// Waits until one of the replicas the topology lists for this shard has acknowledged every
/// change made so far (the pulled entries among them), as `WAIT 1` would; Ok at once when none is
/// listed, or when a newer version is served (the pull's report is then for a version nobody
/// waits on, and that version's pulls start afresh). An error after a while, so the pull's
/// report says what it waits for; it is then asked again.
async fn replicated(puller: &Puller, m: Migration, version: u64) -> Result<(), String> {
    let view = puller.served.view();
    let listed = match view.topology.as_ref() {
        Some(t) if t.version == version => t.node(m.to).map(|n| n.replicas.clone()).unwrap_or_default(),
        _ => return Ok(()), // superseded: the caller sees the new version and stops
    };
    if listed.is_empty() {
        return Ok(());
    }
    let acked =
        crate::replication::feed::wait(&puller.store, &puller.replication, &listed, 1, Some(STALL)).await;
    if acked >= 1 { Ok(()) } else { Err(format!("pulled; waiting for a replica of {listed:?} to hold it")) }
}

/// How long the old owner may take to answer a call of a pull, or to send the next chunk of its
/// export, before the pull gives up and starts again (it resumes where it got to): a live but
/// stuck peer must not hold a slot move until HTTP/2 keep-alive notices.
const STALL: Duration = Duration::from_secs(10);

/// `call`'s result, or an error once `limit` has passed.
async fn within<T>(
    limit: Duration,
    call: impl Future<Output = Result<T, tonic::Status>>,
) -> Result<T, String> {
    match tokio::time::timeout(limit, call).await {
        Ok(r) => r.map_err(|s| s.message().to_string()),
        Err(_) => Err(format!("the old owner did not answer within {limit:?}")),
    }
}

async fn pull_once(
    puller: &Puller,
    m: Migration,
    version: u64,
    from: &str,
    resume: &mut u16,
) -> Result<(), String> {
    let options = ClientOptions::default().with_credentials(puller.credentials.clone());
    let mut client = client::connect(from, &options).await.map_err(|e| e.to_string())?;
    // A batch checked against the view from before the move (a FLUSHALL, say) must not run over
    // entries this pull stores.
    if !puller.served.wait_for_retired_views(Duration::from_secs(5)).await {
        return Err("batches from before the move are still running".into());
    }
    // The old owner may not have heard of the move yet (the coordinator offers topologies to
    // nodes one by one); it only exports once it has, so tell it.
    if let Some(t) = puller.served.view().topology.as_ref().filter(|t| t.version == version) {
        let doc = TopologyDoc { json: t.to_json() };
        within(STALL, client.update_topology(doc)).await?;
    }
    // With a rate limit, chunks are small enough to pace smoothly (about 256 a second): storing a
    // big chunk is a burst of CPU that client requests queue behind.
    let rate = puller.pulls.migrate_rate();
    let chunk_bytes =
        if rate == 0 { CHUNK_BYTES } else { (rate / 256).clamp(4096, CHUNK_BYTES.into()) as u32 };
    let req = ExportRequest {
        first_slot: (*resume).into(),
        last_slot: m.end.into(),
        max_chunk_bytes: chunk_bytes,
        topology_version: version,
    };
    let mut first = true;
    let mut stream = within(STALL, client.export_slots(req)).await?.into_inner();
    // Large values arrive as partial entries, possibly over several chunks.
    let mut assembler = EntryAssembler::default();
    loop {
        let chunk = match within(STALL, stream.message()).await? {
            Some(c) => c,
            None => break,
        };
        if puller.served.version() != version {
            return Ok(()); // superseded mid-stream
        }
        if !chunk.functions.is_empty() {
            // The old owner's libraries join this node's (a library of the same name is
            // replaced): FCALLs on the keys moving here must find their functions.
            let mut payload = puller.store.libraries.lock();
            let merged = crate::script::registry::merge(&payload.bytes, &chunk.functions);
            if merged[..] != payload.bytes[..] {
                payload.bytes = merged.into();
                payload.generation += 1;
            }
        }
        let view = puller.served.view();
        let complete_below = chunk.complete_below;
        let chunk_estimate = chunk.keys_estimate;
        let bytes: usize = chunk.entries.iter().map(|e| e.key.len() + e.value.len()).sum();
        let mut whole = Vec::with_capacity(chunk.entries.len());
        for e in chunk.entries {
            if let Some(e) = assembler.feed(e).map_err(|e| e.to_string())? {
                whole.push(e);
            }
        }
        let keys = whole.len();
        let store = puller.store.clone();
        // Storing a chunk takes shard locks entry by entry; off the async threads.
        tokio::task::spawn_blocking(move || {
            let welcome: Vec<_> = whole.into_iter().filter(|e| view.accepts_import(e.slot as u16)).collect();
            store.import(welcome.iter().map(|e| (&e.key[..], &e.value[..], e.expire_at_ms, e.value_type)));
            // This node's replicas get what it pulled (as any write: after it is stored).
            store.events.changes.keys(welcome.into_iter().map(|e| e.key).collect());
        })
        .await
        .map_err(|e| e.to_string())?;
        puller.pulls.keys_in.fetch_add(keys as u64, Ordering::Relaxed);
        puller.pulls.bytes_in.fetch_add(bytes as u64, Ordering::Relaxed);
        *resume = (complete_below.min(u32::from(m.end) + 1) as u16).max(*resume);
        let slots_done = (complete_below.saturating_sub(u32::from(m.start))).min(m.len() as u32);
        let estimate = std::mem::take(&mut first).then_some(chunk_estimate);
        puller.pulls.report(m, version, |p| {
            if let Some(e) = estimate {
                // What this (possibly resumed) pull has left to move, on top of what it moved.
                p.keys_estimate = p.keys + e;
            }
            p.keys += keys as u64;
            p.bytes += bytes as u64;
            p.slots_done = slots_done;
        });
        if complete_below > u32::from(m.end) {
            return Ok(());
        }
        puller.pulls.pace(bytes as u64).await;
    }
    Ok(())
}
