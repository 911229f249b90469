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

use shoal_wire::proto::{self, Batch, BatchReply, NodeStats, StatsRequest, node_server::Node};
use tokio::sync::watch;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::metrics::NodeMetrics;
use crate::ops;
use crate::store::Store;

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
