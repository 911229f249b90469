//! The `shoal.v1.Node` gRPC service.
//!
//! Each router holds one `Execute` stream per node. The reply stream pulls the next batch from the
//! request stream, applies it to the store in order and yields the replies, so a batch costs no
//! task hop or channel, and a router that stops reading replies stops being read from. On shutdown
//! the stream ends after the batch in hand, so the router fails over promptly instead of waiting
//! for a deadline.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use shoal_wire::proto::{
    self, Batch, BatchReply, ExportChunk, ExportEntry, ExportRequest, GetTopologyRequest, NodeStats,
    SnapshotInfo, SnapshotRequest, StatsRequest, TopologyAck, TopologyDoc, node_server::Node,
};
use tokio::sync::watch;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::cluster::NodeCluster;
use crate::metrics::NodeMetrics;
use crate::ops;
use crate::persistence::{PersistError, Persistence};
use crate::store::Store;

/// Export chunks are cut at about this many bytes unless the caller asks otherwise.
const DEFAULT_CHUNK_BYTES: usize = 1 << 20;
/// How long an export waits for batches from before a move to finish.
const EXPORT_QUIESCE: std::time::Duration = std::time::Duration::from_secs(5);

/// What the service needs: the store, its persistence, its place in the cluster, counters, and
/// when it started.
#[derive(Debug)]
pub struct NodeState {
    pub store: Arc<Store>,
    pub persistence: Arc<Persistence>,
    pub cluster: Arc<NodeCluster>,
    pub metrics: NodeMetrics,
    pub started: Instant,
}

impl NodeState {
    pub fn new(store: Arc<Store>, persistence: Arc<Persistence>, cluster: Arc<NodeCluster>) -> NodeState {
        NodeState { store, persistence, cluster, metrics: NodeMetrics::default(), started: Instant::now() }
    }

    /// Applies one batch and records it.
    pub fn execute(&self, batch: Batch) -> BatchReply {
        let n = batch.ops.len();
        let view = self.cluster.view();
        let replies = ops::apply_batch(&self.store, &view, batch.topology_version, batch.ops);
        self.metrics.record_batch(n);
        BatchReply { id: batch.id, replies }
    }

    pub fn stats(&self) -> NodeStats {
        let s = self.store.stats();
        NodeStats {
            keys: s.keys,
            volatile_keys: s.volatile_keys,
            used_memory: s.used_memory,
            maxmemory: self.store.config().maxmemory as u64,
            maxmemory_policy: self.store.config().policy.to_string(),
            expired_keys: s.expired_keys,
            evicted_keys: s.evicted_keys,
            keyspace_hits: s.keyspace_hits,
            keyspace_misses: s.keyspace_misses,
            ops: self.metrics.ops.get(),
            batches: self.metrics.batches.get(),
            shards: self.store.shard_count() as u32,
            uptime_ms: self.started.elapsed().as_millis() as u64,
            rss_bytes: crate::metrics::rss_bytes(),
            snapshot: Some(self.persistence.info()),
            topology_version: self.cluster.version(),
            migrations: self.cluster.progress(),
            keys_migrated_in: self.cluster.keys_in.load(std::sync::atomic::Ordering::Relaxed),
            bytes_migrated_in: self.cluster.bytes_in.load(std::sync::atomic::Ordering::Relaxed),
            slots_dropped: self.cluster.slots_dropped.load(std::sync::atomic::Ordering::Relaxed),
            slots_migrated_in: self.cluster.slots_in.load(std::sync::atomic::Ordering::Relaxed),
        }
    }
}

pub struct NodeService {
    state: Arc<NodeState>,
    stopping: watch::Receiver<bool>,
}

impl NodeService {
    pub fn new(state: Arc<NodeState>, stopping: watch::Receiver<bool>) -> NodeService {
        NodeService { state, stopping }
    }
}

type ReplyStream = Pin<Box<dyn Stream<Item = Result<BatchReply, Status>> + Send>>;

type ExportStream = Pin<Box<dyn Stream<Item = Result<ExportChunk, Status>> + Send>>;

#[tonic::async_trait]
impl Node for NodeService {
    type ExecuteStream = ReplyStream;
    type ExportSlotsStream = ExportStream;

    async fn execute(&self, request: Request<Streaming<Batch>>) -> Result<Response<ReplyStream>, Status> {
        let mut stopping = self.stopping.clone();
        self.state.metrics.streams.add(1);
        Ok(Response::new(Box::pin(Replies {
            inbound: request.into_inner(),
            state: self.state.clone(),
            stop: Box::pin(async move {
                let _ = stopping.wait_for(|s| *s).await;
            }),
            done: false,
        })))
    }

    async fn stats(&self, _request: Request<StatsRequest>) -> Result<Response<proto::NodeStats>, Status> {
        Ok(Response::new(self.state.stats()))
    }

    async fn snapshot(&self, _request: Request<SnapshotRequest>) -> Result<Response<SnapshotInfo>, Status> {
        match self.state.persistence.snapshot().await {
            Ok(_) => Ok(Response::new(self.state.persistence.info())),
            Err(PersistError::Disabled) => Err(Status::failed_precondition("this node has no --data-dir")),
            Err(e) => Err(Status::internal(e.to_string())),
        }
    }

    async fn get_topology(
        &self,
        _request: Request<GetTopologyRequest>,
    ) -> Result<Response<TopologyDoc>, Status> {
        match &self.state.cluster.view().topology {
            Some(t) => Ok(Response::new(TopologyDoc { json: t.to_json() })),
            None => Err(Status::not_found("this node has no topology")),
        }
    }

    async fn update_topology(&self, request: Request<TopologyDoc>) -> Result<Response<TopologyAck>, Status> {
        let t = shoal_wire::Topology::from_json(&request.into_inner().json)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let version = self.state.cluster.adopt(t);
        Ok(Response::new(TopologyAck { version }))
    }

    async fn export_slots(&self, request: Request<ExportRequest>) -> Result<Response<ExportStream>, Status> {
        let req = request.into_inner();
        let (first, last) = (req.first_slot, req.last_slot);
        if first > last || last as usize >= shoal_wire::SLOT_COUNT {
            return Err(Status::invalid_argument(format!("bad slot range {first}-{last}")));
        }
        if req.topology_version != 0 {
            let cluster = &self.state.cluster;
            cluster
                .view()
                .check_export(first as u16, last as u16, req.topology_version)
                .map_err(Status::failed_precondition)?;
            // Batches checked against the view from before the move may still be writing to
            // these slots; the export must see their writes.
            if !cluster.wait_for_retired_views(EXPORT_QUIESCE).await {
                return Err(Status::unavailable("batches from before the move are still running"));
            }
        }
        let chunk_bytes =
            if req.max_chunk_bytes == 0 { DEFAULT_CHUNK_BYTES } else { req.max_chunk_bytes as usize };
        // A small channel: the export runs as fast as the receiver takes chunks, no faster.
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let store = self.state.store.clone();
        tokio::task::spawn_blocking(move || export(&store, first as u16, last as u16, chunk_bytes, tx));
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }
}

/// Streams slots `first..=last` into `tx` in chunks of about `chunk_bytes` (blocking thread).
fn export(
    store: &Store,
    first: u16,
    last: u16,
    chunk_bytes: usize,
    tx: tokio::sync::mpsc::Sender<Result<ExportChunk, Status>>,
) {
    let plan = store.plan(first..=last);
    let keys_estimate = (plan.memory_entries() + store.base_entries_in(first..=last)) as u64;
    let mut chunk = ExportChunk { keys_estimate, ..Default::default() };
    let mut size = 0;
    for slot in first..=last {
        for e in store.slot_entries(slot, &plan) {
            size += e.key.len() + e.value.len() + 16;
            chunk.entries.push(ExportEntry {
                slot: u32::from(slot),
                key: e.key,
                value: e.value,
                expire_at_ms: e.expire_at,
            });
            if size >= chunk_bytes {
                chunk.complete_below = u32::from(slot);
                let full = std::mem::replace(&mut chunk, ExportChunk { keys_estimate, ..Default::default() });
                if tx.blocking_send(Ok(full)).is_err() {
                    return;
                }
                size = 0;
            }
        }
    }
    chunk.complete_below = u32::from(last) + 1;
    let _ = tx.blocking_send(Ok(chunk));
}

/// The reply side of an `Execute` stream: each poll applies the next received batch.
struct Replies {
    inbound: Streaming<Batch>,
    state: Arc<NodeState>,
    /// Resolves when the node starts shutting down.
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    done: bool,
}

impl Stream for Replies {
    type Item = Result<BatchReply, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done || self.stop.as_mut().poll(cx).is_ready() {
            self.done = true;
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inbound).poll_next(cx) {
            Poll::Ready(Some(Ok(batch))) => Poll::Ready(Some(Ok(self.state.execute(batch)))),
            Poll::Ready(Some(Err(status))) => {
                tracing::debug!(%status, "execute stream ended by the client");
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Ready(None) => {
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Replies {
    fn drop(&mut self) {
        self.state.metrics.streams.add(-1);
    }
}
