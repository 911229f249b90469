//! The `Subscribe` RPC: a router's subscription changes in, its deliveries out.
//!
//! Changes are applied by a small task as they arrive. Deliveries leave in batches: each poll
//! of the reply stream takes whatever is queued at that moment (up to about
//! [`BATCH_BYTES`]), so an idle stream sends one message per delivery and a busy one shares each
//! gRPC message among many (the same group commit as the router's `Execute` batches).
//!
//! Shutdown: once the node stops, the stream keeps sending until the `Execute` streams (whose
//! publishes may still queue deliveries) have ended and the queue is empty, then ends; a
//! message a node acknowledged to its publisher is not dropped by a graceful stop.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use std::sync::atomic::Ordering;

use shoal_wire::proto::{Delivery, PubSubBatch, SubscribeRequest, Tracking};
use tokio::sync::{mpsc, watch};
use tokio_stream::Stream;
use tonic::{Status, Streaming};

use super::{Out, Outbox, delivery_size};
use crate::state::NodeState;
use crate::store::Store;

/// A reply message is closed at about this many payload bytes.
const BATCH_BYTES: usize = 1 << 20;
/// While stopping, how often the stream checks whether the `Execute` streams have ended.
const STOP_POLL: Duration = Duration::from_millis(10);

/// The router asks for (or, with token 0, stops) near-cache invalidations on stream `id`.
fn track(store: &Store, id: u64, outbox: &Arc<Outbox>, t: Tracking) {
    let previous = outbox.tracking_token.swap(t.token, Ordering::Relaxed);
    if previous != 0 && previous != t.token {
        store.watches.tracking.disable(previous, id);
    }
    if t.token != 0 {
        let prefixes = t.bcast.then_some(t.prefixes);
        store.watches.tracking.enable(t.token, id, outbox.clone(), prefixes);
    } else if previous != 0 {
        store.watches.tracking.disable(previous, id);
    }
}

/// Stream `id` ended: its router's tracking here ends with it (unless it has a newer stream).
fn untrack(store: &Store, id: u64, outbox: &Outbox) {
    let token = outbox.tracking_token.swap(0, Ordering::Relaxed);
    if token != 0 {
        store.watches.tracking.disable(token, id);
    }
}

pub type DeliveryStream = Pin<Box<dyn Stream<Item = Result<PubSubBatch, Status>> + Send>>;

/// Starts serving one router's `Subscribe` call.
pub fn open(
    state: Arc<NodeState>,
    mut inbound: Streaming<SubscribeRequest>,
    stopping: watch::Receiver<bool>,
) -> DeliveryStream {
    let (id, outbox, rx) = state.pubsub.attach();
    let changes = {
        let (pubsub, store, outbox) = (state.pubsub.clone(), state.store.clone(), outbox.clone());
        tokio::spawn(async move {
            // Ends when the router closes its side (or the call breaks).
            while let Ok(Some(mut req)) = inbound.message().await {
                if req.router != 0 {
                    outbox.router.store(req.router, Ordering::Relaxed);
                }
                if let Some(answer) = req.clients.take() {
                    pubsub.clients.answered(id, answer);
                }
                if req.monitoring != 0 {
                    pubsub.set_monitoring(id, req.monitoring == 1);
                }
                pubsub.monitor_lines(id, std::mem::take(&mut req.monitor_lines));
                if let Some(t) = req.tracking.take() {
                    track(&store, id, &outbox, t);
                }
                // After the tracking change and behind every invalidation queued so far.
                if req.ping != 0 {
                    outbox.push_pong(req.ping);
                }
                pubsub.apply(id, req);
            }
            pubsub.detach(id);
            untrack(&store, id, &outbox);
        })
    };

    // The router learns every topology this node adopts, from the one it serves now on.
    let versions = {
        let (outbox, mut versions) = (outbox.clone(), state.membership.watch_version());
        tokio::spawn(async move {
            loop {
                let v = *versions.borrow_and_update();
                if v != 0 {
                    outbox.push_version(v);
                }
                if versions.changed().await.is_err() {
                    return;
                }
            }
        })
    };
    let mut stop = stopping;
    Box::pin(Deliveries {
        versions,
        state,
        id,
        outbox,
        rx,
        stop: Box::pin(async move {
            let _ = stop.wait_for(|s| *s).await;
        }),
        stopping: false,
        tick: None,
        done: false,
        changes,
    })
}

struct Deliveries {
    versions: tokio::task::JoinHandle<()>,
    state: Arc<NodeState>,
    id: u64,
    outbox: Arc<Outbox>,
    rx: mpsc::UnboundedReceiver<Out>,
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    stopping: bool,
    /// While stopping: when to look again whether the node has gone quiet.
    tick: Option<Pin<Box<tokio::time::Sleep>>>,
    done: bool,
    changes: tokio::task::JoinHandle<()>,
}

impl Stream for Deliveries {
    type Item = Result<PubSubBatch, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        if !this.stopping && this.stop.as_mut().poll(cx).is_ready() {
            this.stopping = true;
        }
        let first = match this.rx.poll_recv(cx) {
            Poll::Ready(Some(out)) => out,
            Poll::Ready(None) => {
                this.done = true;
                return Poll::Ready(None);
            }
            Poll::Pending if this.stopping => {
                // Quiet: end once no Execute stream can publish any more.
                if this.state.metrics.streams.get() <= 0 {
                    this.done = true;
                    return Poll::Ready(None);
                }
                let tick = this.tick.get_or_insert_with(|| Box::pin(tokio::time::sleep(STOP_POLL)));
                if tick.as_mut().poll(cx).is_ready() {
                    this.tick = None;
                    cx.waker().wake_by_ref();
                }
                return Poll::Pending;
            }
            Poll::Pending => return Poll::Pending,
        };
        let mut batch = PubSubBatch::default();
        let mut bytes = 0;
        let mut next = Some(first);
        let outbox = &this.outbox;
        let take = |d: Delivery, batch: &mut PubSubBatch, bytes: &mut usize| {
            outbox.taken(&d);
            *bytes += delivery_size(&d);
            batch.deliveries.push(d);
        };
        while let Some(out) = next.take() {
            match out {
                Out::Delivery(d) => take(d, &mut batch, &mut bytes),
                Out::Group(group) => group.into_iter().for_each(|d| take(d, &mut batch, &mut bytes)),
                Out::Overflow => {
                    this.done = true;
                    this.state.pubsub.overflows.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::warn!(
                        router = this.id,
                        "a router is not reading its pub/sub stream; closing it"
                    );
                    return Poll::Ready(Some(Err(Status::resource_exhausted(
                        "pub/sub messages for this router passed the node's buffer limit (the router is not reading)",
                    ))));
                }
            }
            if bytes < BATCH_BYTES {
                next = this.rx.try_recv().ok();
            }
        }
        Poll::Ready(Some(Ok(batch)))
    }
}

impl Drop for Deliveries {
    fn drop(&mut self) {
        self.changes.abort();
        self.versions.abort();
        self.state.pubsub.detach(self.id);
        untrack(&self.state.store, self.id, &self.outbox);
    }
}
