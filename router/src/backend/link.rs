//! One router → node link: a single gRPC channel carrying one long-lived `Execute` stream, shared
//! by every client connection of this router.
//!
//! ```text
//!  client conns ──try_send(op, reply tx)──► queue ──► writer: wait for one op and for one of
//!                                                    the MAX_UNANSWERED batch slots, then drain
//!                                                    whatever is queued *right now* into one
//!                                                    Batch (no timer)
//!                                                         │ inflight (FIFO of reply senders)
//!  client conns ◄──reply via oneshot── reader ◄──BatchReply (in order)──┘  (frees the slot)
//! ```
//! This is group commit: under light load a batch holds one op and leaves at once (no added
//! latency); under load, ops that arrive while earlier batches are being answered wait for the
//! next free slot and go out together, so batches grow with the load and the per-batch cost
//! (HTTP/2 frames, syscalls, wake-ups on both sides) is shared. Replies come back in batch order,
//! so the reader matches them to the FIFO of senders.
//!
//! Failure handling: each call has a deadline (the client gets an error, never a hang). When the
//! stream breaks, every in-flight call fails at once, the link is marked down (new calls fail
//! immediately instead of waiting out the deadline) and the manager reconnects with exponential
//! backoff. A full queue (node far slower than its clients) rejects calls instead of growing.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use prost::Message;
use shoal_telemetry::metrics::{Counter, Histogram, SIZE_BUCKETS};
use shoal_wire::proto::{
    self, Batch, BatchReply, NodeStats, Op, SnapshotInfo, SnapshotRequest, StatsRequest,
    node_client::NodeClient,
};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use tonic::transport::{Channel, Endpoint};

use super::BackendError;

/// Largest gRPC message either way (a 512 MiB value plus framing), as on the node.
pub const MAX_MESSAGE_BYTES: usize = 600 * 1024 * 1024;
/// A batch is closed at this many ops ...
const MAX_BATCH_OPS: usize = 4096;
/// ... or this many payload bytes (a single larger op travels alone).
const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;
/// Batches handed to the HTTP/2 stream but not yet written.
const BATCHES_AHEAD: usize = 4;
/// Batches sent but not yet answered, per node. Small on purpose: while they are out, new ops
/// collect in the queue and leave together in the next batch.
const MAX_UNANSWERED: usize = 1;
const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Settings shared by all links of a router.
#[derive(Debug, Clone)]
pub struct LinkOptions {
    /// How long a call may take before the client gets an error.
    pub deadline: Duration,
    /// Calls queued per node before new ones are refused.
    pub queue_capacity: usize,
}

impl Default for LinkOptions {
    fn default() -> Self {
        LinkOptions { deadline: Duration::from_secs(1), queue_capacity: 65_536 }
    }
}

/// Who gets the replies of a queued request: a single op's caller, or a multi-key command's
/// per-node group (all its ops for this node travel in one batch and are answered together).
enum Waiter {
    One(oneshot::Sender<Result<proto::Reply, BackendError>>),
    Group(usize, oneshot::Sender<Result<Vec<proto::Reply>, BackendError>>),
}

impl Waiter {
    fn fail(self, e: BackendError) {
        match self {
            Waiter::One(tx) => drop(tx.send(Err(e))),
            Waiter::Group(_, tx) => drop(tx.send(Err(e))),
        }
    }

    fn ops(&self) -> usize {
        match self {
            Waiter::One(_) => 1,
            Waiter::Group(n, _) => *n,
        }
    }
}

struct Request {
    ops: Vec<Op>,
    waiter: Waiter,
    /// The topology version these ops were routed by.
    version: u64,
}

/// Per-link counters, exported on the router's /metrics.
#[derive(Debug)]
pub struct LinkMetrics {
    pub batches: Counter,
    pub ops: Counter,
    pub batch_ops: Histogram,
    pub failed_calls: Counter,
    pub connects: Counter,
}

impl Default for LinkMetrics {
    fn default() -> Self {
        LinkMetrics {
            batches: Counter::default(),
            ops: Counter::default(),
            batch_ops: Histogram::new(SIZE_BUCKETS),
            failed_calls: Counter::default(),
            connects: Counter::default(),
        }
    }
}

/// The identity of a node, carried into error messages.
#[derive(Debug)]
pub struct NodeIdent {
    pub id: u32,
    pub addr: String,
    /// The call deadline, for timeout messages.
    pub deadline_ms: u64,
}

pub struct NodeLink {
    pub ident: Arc<NodeIdent>,
    pub metrics: Arc<LinkMetrics>,
    queue: mpsc::Sender<Request>,
    up: Arc<AtomicBool>,
    /// Set by [`NodeLink::close`] at shutdown: a stream that ends then is expected, not lost.
    closing: Arc<AtomicBool>,
    /// Whether the link ever connected. Until it has (a node just added to the topology, or a
    /// router just started), calls wait in the queue for the connection, within their deadline,
    /// instead of failing at once.
    connected_once: Arc<AtomicBool>,
    last_error: Arc<Mutex<String>>,
    client: Arc<Mutex<Option<NodeClient<Channel>>>>,
    options: LinkOptions,
    next_batch: Arc<AtomicU64>,
}

impl std::fmt::Debug for NodeLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeLink").field("ident", &self.ident).field("up", &self.is_up()).finish()
    }
}

impl NodeLink {
    /// Creates the link and starts connecting in the background. Must run inside a Tokio runtime.
    pub fn spawn(id: u32, addr: String, options: LinkOptions) -> Arc<NodeLink> {
        let (queue, queue_rx) = mpsc::channel(options.queue_capacity.max(1));
        let link = Arc::new(NodeLink {
            ident: Arc::new(NodeIdent { id, addr, deadline_ms: options.deadline.as_millis() as u64 }),
            metrics: Arc::new(LinkMetrics::default()),
            queue,
            up: Arc::new(AtomicBool::new(false)),
            closing: Arc::new(AtomicBool::new(false)),
            connected_once: Arc::new(AtomicBool::new(false)),
            last_error: Arc::new(Mutex::new("not connected yet".into())),
            client: Arc::new(Mutex::new(None)),
            options,
            next_batch: Arc::new(AtomicU64::new(1)),
        });
        tokio::spawn(manage(Manager {
            ident: link.ident.clone(),
            metrics: link.metrics.clone(),
            up: link.up.clone(),
            closing: link.closing.clone(),
            connected_once: link.connected_once.clone(),
            last_error: link.last_error.clone(),
            client: link.client.clone(),
            next_batch: link.next_batch.clone(),
            queue: queue_rx,
        }));
        link
    }

    /// Marks the link as shutting down (the router is stopping, its embedded nodes next): when
    /// the node's stream ends now, the link stops instead of reporting it lost and reconnecting.
    pub fn close(&self) {
        self.closing.store(true, Ordering::Release);
    }

    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    pub fn last_error(&self) -> String {
        self.last_error.lock().clone()
    }

    /// Queues `op`, routed by topology `version`, for this node. Never blocks: a down or
    /// saturated node fails the call at once.
    pub fn call(&self, op: Op, version: u64, deadline: Instant) -> NodeCall<proto::Reply> {
        let (tx, rx) = oneshot::channel();
        self.enqueue(Request { ops: vec![op], waiter: Waiter::One(tx), version }, rx, deadline)
    }

    /// Queues `ops` as one group: they go out in the same batch and are answered together.
    pub fn call_group(&self, ops: Vec<Op>, version: u64, deadline: Instant) -> NodeCall<Vec<proto::Reply>> {
        let (tx, rx) = oneshot::channel();
        let n = ops.len();
        self.enqueue(Request { ops, waiter: Waiter::Group(n, tx), version }, rx, deadline)
    }

    /// The client for the node's other RPCs (topology, stats), if connected.
    pub fn client(&self) -> Option<NodeClient<Channel>> {
        self.client.lock().clone()
    }

    fn enqueue<T>(
        &self,
        req: Request,
        rx: oneshot::Receiver<Result<T, BackendError>>,
        deadline: Instant,
    ) -> NodeCall<T> {
        // Big requests take longer to move: allow 10 ns per byte (100 MB/s) on top of the deadline.
        let bytes: usize = req.ops.iter().map(Message::encoded_len).sum();
        let deadline = deadline + Duration::from_nanos(bytes as u64 * 10);
        let fail = |e: BackendError| {
            self.metrics.failed_calls.inc();
            NodeCall { state: CallState::Failed(e), deadline, ident: self.ident.clone() }
        };
        if !self.is_up() && self.connected_once.load(Ordering::Acquire) {
            return fail(self.unavailable());
        }
        match self.queue.try_send(req) {
            Ok(()) => NodeCall { state: CallState::Waiting(rx), deadline, ident: self.ident.clone() },
            Err(mpsc::error::TrySendError::Full(_)) => {
                fail(BackendError::Overloaded { node: self.ident.id, addr: self.ident.addr.clone() })
            }
            Err(mpsc::error::TrySendError::Closed(_)) => fail(self.unavailable()),
        }
    }

    fn unavailable(&self) -> BackendError {
        BackendError::Unavailable {
            node: self.ident.id,
            addr: self.ident.addr.clone(),
            reason: self.last_error(),
        }
    }

    /// The node's counters (for `SHOAL NODES`, INFO and /metrics), within the call deadline.
    pub async fn stats(&self) -> Result<NodeStats, BackendError> {
        let client = self.client.lock().clone();
        let Some(mut client) = client else { return Err(self.unavailable()) };
        match tokio::time::timeout(self.options.deadline, client.stats(StatsRequest {})).await {
            Ok(Ok(resp)) => Ok(resp.into_inner()),
            Ok(Err(status)) => Err(BackendError::Unavailable {
                node: self.ident.id,
                addr: self.ident.addr.clone(),
                reason: status.message().to_string(),
            }),
            Err(_) => Err(BackendError::Timeout {
                node: self.ident.id,
                addr: self.ident.addr.clone(),
                ms: self.options.deadline.as_millis() as u64,
            }),
        }
    }
}

/// Snapshots of large nodes take a while; a SAVE waits this long at most.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(600);

impl NodeLink {
    /// Asks the node to write a snapshot now and waits for it.
    pub async fn snapshot(&self) -> Result<SnapshotInfo, BackendError> {
        let client = self.client.lock().clone();
        let Some(mut client) = client else { return Err(self.unavailable()) };
        let unavailable = |reason: String| BackendError::Unavailable {
            node: self.ident.id,
            addr: self.ident.addr.clone(),
            reason,
        };
        match tokio::time::timeout(SNAPSHOT_TIMEOUT, client.snapshot(SnapshotRequest {})).await {
            Ok(Ok(resp)) => Ok(resp.into_inner()),
            Ok(Err(status)) => Err(unavailable(status.message().to_string())),
            Err(_) => Err(unavailable("snapshot did not finish in time".into())),
        }
    }
}

/// A call in flight; resolves to the node's reply (or replies, for a group) or a
/// [`BackendError`] by its deadline.
pub struct NodeCall<T> {
    state: CallState<T>,
    deadline: Instant,
    ident: Arc<NodeIdent>,
}

enum CallState<T> {
    Waiting(oneshot::Receiver<Result<T, BackendError>>),
    Failed(BackendError),
}

impl<T> NodeCall<T> {
    pub async fn wait(self) -> Result<T, BackendError> {
        match self.state {
            CallState::Failed(e) => Err(e),
            CallState::Waiting(rx) => match tokio::time::timeout_at(self.deadline, rx).await {
                Ok(Ok(result)) => result,
                Ok(Err(_)) => Err(BackendError::Unavailable {
                    node: self.ident.id,
                    addr: self.ident.addr.clone(),
                    reason: "link closed".into(),
                }),
                Err(_) => Err(BackendError::Timeout {
                    node: self.ident.id,
                    addr: self.ident.addr.clone(),
                    ms: self.ident.deadline_ms,
                }),
            },
        }
    }
}

/// The background half of a link: connects, runs the writer, spawns the reader, reconnects.
struct Manager {
    ident: Arc<NodeIdent>,
    metrics: Arc<LinkMetrics>,
    up: Arc<AtomicBool>,
    closing: Arc<AtomicBool>,
    connected_once: Arc<AtomicBool>,
    last_error: Arc<Mutex<String>>,
    client: Arc<Mutex<Option<NodeClient<Channel>>>>,
    next_batch: Arc<AtomicU64>,
    queue: mpsc::Receiver<Request>,
}

/// Reply senders of batches written but not yet answered, oldest first.
#[derive(Default)]
struct Inflight {
    /// Each unanswered batch with its waiters and the slot it holds (freed when answered).
    batches: VecDeque<(u64, Vec<Waiter>, Option<OwnedSemaphorePermit>)>,
    /// Set by whichever side notices the stream is gone; no batch may be added after.
    closed: bool,
}

async fn manage(mut m: Manager) {
    let mut backoff = MIN_BACKOFF;
    loop {
        match connect(&m.ident.addr).await {
            Ok((client, batches, replies)) => {
                backoff = MIN_BACKOFF;
                m.metrics.connects.inc();
                *m.client.lock() = Some(client);
                m.up.store(true, Ordering::Release);
                m.connected_once.store(true, Ordering::Release);
                tracing::info!(node = m.ident.id, addr = %m.ident.addr, "connected to node");
                let reason = run_stream(&mut m, batches, replies).await;
                m.up.store(false, Ordering::Release);
                *m.client.lock() = None;
                if m.closing.load(Ordering::Acquire) {
                    tracing::debug!(node = m.ident.id, addr = %m.ident.addr, %reason, "node stream closed");
                    *m.last_error.lock() = "the router is shutting down".into();
                    return;
                }
                tracing::warn!(node = m.ident.id, addr = %m.ident.addr, %reason, "lost node stream");
                *m.last_error.lock() = reason;
            }
            Err(reason) => {
                tracing::debug!(node = m.ident.id, addr = %m.ident.addr, %reason, "node connect failed");
                *m.last_error.lock() = reason;
            }
        }
        // While down, calls fail fast at `call()`; anything that was queued before the link went
        // down is failed here rather than left to time out. Before the first connection, queued
        // calls wait for it instead (each until its own deadline).
        let retry_at = Instant::now() + backoff;
        if !m.connected_once.load(Ordering::Acquire) {
            tokio::time::sleep_until(retry_at).await;
            backoff = (backoff * 2).min(MAX_BACKOFF / 4);
            continue;
        }
        loop {
            tokio::select! {
                req = m.queue.recv() => match req {
                    Some(req) => fail(req.waiter, &m),
                    None => return, // every sender is gone: the router dropped this link
                },
                _ = tokio::time::sleep_until(retry_at) => break,
            }
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

fn fail(waiter: Waiter, m: &Manager) {
    m.metrics.failed_calls.inc();
    waiter.fail(BackendError::Unavailable {
        node: m.ident.id,
        addr: m.ident.addr.clone(),
        reason: m.last_error.lock().clone(),
    });
}

type Connected = (NodeClient<Channel>, mpsc::Sender<Batch>, Streaming<BatchReply>);

async fn connect(addr: &str) -> Result<Connected, String> {
    let timeout = Duration::from_secs(2);
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| format!("bad node address: {e}"))?
        .connect_timeout(timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(5))
        .keep_alive_timeout(Duration::from_secs(5))
        .keep_alive_while_idle(true)
        .initial_stream_window_size(8 * 1024 * 1024)
        .initial_connection_window_size(16 * 1024 * 1024);
    let channel = endpoint.connect().await.map_err(|e| error_chain(&e))?;
    let mut client = NodeClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let (batches, batch_rx) = mpsc::channel(BATCHES_AHEAD);
    let response = tokio::time::timeout(timeout, client.execute(ReceiverStream::new(batch_rx)))
        .await
        .map_err(|_| "timed out opening the stream".to_string())?
        .map_err(|status| format!("stream refused: {}", status.message()))?;
    Ok((client, batches, response.into_inner()))
}

/// The innermost cause of a transport error ("connection refused" rather than "transport error").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// Runs one connected stream until it breaks; returns why.
async fn run_stream(m: &mut Manager, batches: mpsc::Sender<Batch>, replies: Streaming<BatchReply>) -> String {
    let inflight = Arc::new(Mutex::new(Inflight::default()));
    let broken = Arc::new(Notify::new());
    let slots = Arc::new(Semaphore::new(MAX_UNANSWERED));
    let reader = tokio::spawn(read_replies(replies, inflight.clone(), broken.clone(), m.ident.clone()));
    let reason = loop {
        let first = tokio::select! {
            req = m.queue.recv() => match req {
                Some(req) => req,
                None => break "router shutting down".to_string(),
            },
            _ = broken.notified() => break "stream closed".to_string(),
        };
        let slot = tokio::select! {
            s = slots.clone().acquire_owned() => s.expect("never closed"),
            _ = broken.notified() => { fail(first.waiter, m); break "stream closed".to_string() }
        };
        let permit = tokio::select! {
            p = batches.reserve() => match p {
                Ok(p) => p,
                Err(_) => { fail(first.waiter, m); break "stream closed".to_string() }
            },
            _ = broken.notified() => { fail(first.waiter, m); break "stream closed".to_string() }
        };
        let mut bytes: usize = first.ops.iter().map(Message::encoded_len).sum();
        let mut ops = first.ops;
        let mut waiters = vec![first.waiter];
        // A batch says the oldest version its ops were routed by: a node then refuses whatever
        // that version would have routed wrongly, and the router retries those ops alone.
        let mut version = first.version;
        while ops.len() < MAX_BATCH_OPS && bytes < MAX_BATCH_BYTES {
            match m.queue.try_recv() {
                Ok(req) => {
                    bytes += req.ops.iter().map(Message::encoded_len).sum::<usize>();
                    ops.extend(req.ops);
                    waiters.push(req.waiter);
                    version = version.min(req.version);
                }
                Err(_) => break,
            }
        }
        let id = m.next_batch.fetch_add(1, Ordering::Relaxed);
        let n = ops.len();
        {
            let mut inf = inflight.lock();
            if inf.closed {
                drop(inf);
                waiters.into_iter().for_each(|w| fail(w, m));
                break "stream closed".to_string();
            }
            inf.batches.push_back((id, waiters, Some(slot)));
        }
        m.metrics.batches.inc();
        m.metrics.ops.add(n as u64);
        m.metrics.batch_ops.observe(n as f64);
        permit.send(Batch { id, ops, topology_version: version });
    };
    drop(batches);
    reader.abort();
    let orphans = {
        let mut inf = inflight.lock();
        inf.closed = true;
        std::mem::take(&mut inf.batches)
    };
    for (_, waiters, _) in orphans {
        waiters.into_iter().for_each(|w| fail(w, m));
    }
    reason
}

/// Routes replies back to their callers, in order; on any mismatch or error the stream is
/// declared broken (the writer then fails what is left and reconnects).
async fn read_replies(
    mut replies: Streaming<BatchReply>,
    inflight: Arc<Mutex<Inflight>>,
    broken: Arc<Notify>,
    ident: Arc<NodeIdent>,
) {
    loop {
        let reply = match replies.message().await {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(status) => {
                tracing::debug!(node = ident.id, %status, "node stream error");
                break;
            }
        };
        let Some((id, waiters, _slot)) = inflight.lock().batches.pop_front() else {
            tracing::error!(node = ident.id, "reply for a batch that was never sent");
            break;
        };
        let expected: usize = waiters.iter().map(Waiter::ops).sum();
        if id != reply.id || expected != reply.replies.len() {
            tracing::error!(node = ident.id, want = id, got = reply.id, "node replies out of step");
            break;
        }
        let mut replies = reply.replies.into_iter();
        for waiter in waiters {
            match waiter {
                Waiter::One(tx) => drop(tx.send(Ok(replies.next().expect("counted")))),
                Waiter::Group(n, tx) => drop(tx.send(Ok(replies.by_ref().take(n).collect()))),
            }
        }
    }
    let orphans = {
        let mut inf = inflight.lock();
        inf.closed = true;
        std::mem::take(&mut inf.batches)
    };
    for (_, waiters, _) in orphans {
        for waiter in waiters {
            waiter.fail(BackendError::Unavailable {
                node: ident.id,
                addr: ident.addr.clone(),
                reason: "node closed the stream".into(),
            });
        }
    }
    broken.notify_one();
}
