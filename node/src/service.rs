//! The `shoal.v1.Node` gRPC service.
//!
//! Each router holds one `Execute` stream per node. A task per stream reads batches, applies each
//! batch to the store in order and sends the replies back. On shutdown the task stops taking new
//! batches once the one in hand is answered, then ends the stream so the router fails over
//! promptly instead of waiting for a deadline.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use shoal_wire::proto::{self, Batch, BatchReply, NodeStats, StatsRequest, node_server::Node};
use tokio::sync::{mpsc, watch};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::metrics::NodeMetrics;
use crate::ops;
use crate::store::Store;

/// Batches answered but not yet written to the network, per stream. Small: it only needs to
/// cover the time the HTTP/2 writer takes to pick a reply up.
const REPLY_QUEUE: usize = 16;

/// What the service needs: the store, counters, and when it started.
#[derive(Debug)]
pub struct NodeState {
    pub store: Arc<Store>,
    pub metrics: NodeMetrics,
    pub started: Instant,
}

impl NodeState {
    pub fn new(store: Arc<Store>) -> NodeState {
        NodeState { store, metrics: NodeMetrics::default(), started: Instant::now() }
    }

    /// Applies one batch and records it.
    pub fn execute(&self, batch: Batch) -> BatchReply {
        let n = batch.ops.len();
        let replies = ops::apply_batch(&self.store, batch.ops);
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

#[tonic::async_trait]
impl Node for NodeService {
    type ExecuteStream = ReplyStream;

    async fn execute(&self, request: Request<Streaming<Batch>>) -> Result<Response<ReplyStream>, Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(REPLY_QUEUE);
        let state = self.state.clone();
        let mut stopping = self.stopping.clone();
        state.metrics.streams.add(1);
        tokio::spawn(async move {
            loop {
                if *stopping.borrow_and_update() {
                    break;
                }
                let batch = tokio::select! {
                    biased;
                    _ = stopping.changed() => break,
                    msg = inbound.message() => msg,
                };
                match batch {
                    Ok(Some(batch)) => {
                        if tx.send(Ok(state.execute(batch))).await.is_err() {
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(status) => {
                        tracing::debug!(%status, "execute stream ended by the client");
                        break;
                    }
                }
            }
            state.metrics.streams.add(-1);
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn stats(&self, _request: Request<StatsRequest>) -> Result<Response<proto::NodeStats>, Status> {
        Ok(Response::new(self.state.stats()))
    }
}
