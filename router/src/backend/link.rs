//! One router → node link: a single gRPC channel carrying one long-lived `Execute` stream, shared
//! by every client connection of this router. One concept: one stream's life (its queue, the
//! writer that batches, the reader that matches replies, the reconnects) shares one in-flight
//! book and one set of counters, so it stays one file.
//!
//! ```text
//!  client conns ──try_send(ops, waiter)──► queue ──► writer: wait for work and for one of the
//!                                                    MAX_UNANSWERED batch slots, then drain
//!                                                    whatever is queued *right now* into one
//!                                                    Batch (no timer)
//!                                                         │ inflight: batches + waiters, in order
//!  client conns ◄──reply via oneshot── reader ◄──BatchReply messages (in order)──┘
//! ```
//! This is group commit: under light load a batch holds one op and leaves at once (no added
//! latency); under load, ops that arrive while the earlier batch is being answered wait for the
//! next free slot and go out together, so batches grow with the load and the per-batch cost
//! (HTTP/2 frames, syscalls, wake-ups on both sides) is shared.
//!
//! Large items never travel whole (`shoal_wire::pieces`): an op larger than a piece becomes a
//! *transfer*, whose pieces ride along in successive batches (at most [`TRANSFER_BYTES_PER_BATCH`]
//! each) next to other clients' ops, so one big SET neither holds the stream for its whole
//! transfer nor makes any message large. Replies come back in messages of bounded size, large ones
//! in pieces; the reader puts them together and hands each waiter its replies in order.
//!
//! Failure handling: a call waits at most one deadline without the stream making progress (the
//! client gets an error, never a hang). When the stream breaks, every in-flight call fails at
//! once (`InFlight`: the node may have run it; calls not sent yet fail `Unavailable`), the link
//! is marked down (new calls fail immediately instead of waiting out the deadline) and the
//! manager reconnects with exponential backoff. A topology that makes a down node a primary
//! ([`NodePort::reconnect_now`]: a replica that restarted a moment ago and was just handed the
//! shard) ends the backoff: the link retries at once and, for one deadline, calls wait for the
//! connection instead of failing with the error of an attempt made before the node was back. A
//! full queue (node far slower than its clients) rejects calls instead of growing.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use prost::Message;
use shoal_wire::Topology;
use shoal_wire::auth::Credentials;
use shoal_wire::client::{self, ClientOptions};
use shoal_wire::pieces::{self, ReplyAssembler};
use shoal_wire::proto::{
    Batch, BatchReply, BlockRequest, GetTopologyRequest, NodeSettings, NodeStats, Op, PingRequest, Reply,
    SnapshotInfo, SnapshotRequest, StatsRequest, TopologyDoc, reply,
};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::time::Instant;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::BoxStream;

use super::BackendError;
use super::port::{BoxFuture, LinkMetrics, NodeCall, NodeIdent, NodePort, Progress};

/// A batch is closed at this many ops ...
const MAX_BATCH_OPS: usize = 4096;
/// ... or this many payload bytes.
const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;
/// Pieces of a transfer that one batch carries, at most.
const TRANSFER_BYTES_PER_BATCH: usize = 2 * pieces::PIECE_BYTES;
/// Batches handed to the HTTP/2 stream but not yet written.
const BATCHES_AHEAD: usize = 4;
/// Batches sent but not yet answered, per node. Small on purpose: while they are out, new ops
/// collect in the queue and leave together in the next batch.
const MAX_UNANSWERED: usize = 1;
const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Snapshots of large nodes take a while; a SAVE waits this long at most.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(600);

/// Settings shared by all links of a router.
#[derive(Debug, Clone)]
pub struct LinkOptions {
    /// How long a call may wait without progress before the client gets an error.
    pub deadline: Duration,
    /// Calls queued per node before new ones are refused.
    pub queue_capacity: usize,
    /// The cluster secret every call to the nodes carries.
    pub credentials: Credentials,
}

impl Default for LinkOptions {
    fn default() -> Self {
        LinkOptions {
            deadline: Duration::from_secs(1),
            queue_capacity: 65_536,
            credentials: Credentials::default(),
        }
    }
}

/// Who gets the replies of a queued request: a single op's caller, or a multi-key command's
/// per-node group (its ops travel in one batch and are answered together).
enum Waiter {
    One(oneshot::Sender<Result<Reply, BackendError>>),
    Group { need: usize, got: Vec<Reply>, tx: oneshot::Sender<Result<Vec<Reply>, BackendError>> },
}

impl Waiter {
    fn fail(self, e: BackendError) {
        match self {
            Waiter::One(tx) => drop(tx.send(Err(e))),
            Waiter::Group { tx, .. } => drop(tx.send(Err(e))),
        }
    }

    /// Hands over one reply; returns the waiter if it wants more.
    fn give(self, r: Reply) -> Option<Waiter> {
        match self {
            Waiter::One(tx) => {
                let _ = tx.send(Ok(r));
                None
            }
            Waiter::Group { need, mut got, tx } => {
                got.push(r);
                if got.len() == need {
                    let _ = tx.send(Ok(got));
                    None
                } else {
                    Some(Waiter::Group { need, got, tx })
                }
            }
        }
    }
}

struct Request {
    ops: Vec<Op>,
    waiter: Waiter,
    /// The topology version these ops were routed by.
    version: u64,
    /// The ops' size, bounded from above (`pieces::op_len_bound`): measured once here, where the
    /// writer asks for it as the request is queued, batched and sized.
    bytes: usize,
}

impl Request {
    fn new(ops: Vec<Op>, waiter: Waiter, version: u64) -> Request {
        let bytes = ops.iter().map(pieces::op_len_bound).sum();
        Request { ops, waiter, version, bytes }
    }

    /// A single op too large for one message: it travels as a transfer. (Only an op whose bound
    /// passes a piece is measured exactly.)
    fn is_transfer(&self) -> bool {
        self.ops.len() == 1 && self.bytes > pieces::PIECE_BYTES && pieces::op_is_large(&self.ops[0])
    }
}

/// An op on its way in pieces: the pieces not sent yet, then its waiter.
struct Transfer {
    ops: VecDeque<Op>,
    waiter: Option<Waiter>,
    version: u64,
}

/// State shared by the link handle and its background tasks.
struct Shared {
    ident: Arc<NodeIdent>,
    metrics: LinkMetrics,
    up: AtomicBool,
    /// Set by [`NodeLink::close`] at shutdown: a stream that ends then is expected, not lost.
    closing: AtomicBool,
    /// Whether the link ever connected. Until it has (a node just added to the topology, or a
    /// router just started), calls wait in the queue for the connection, within their deadline,
    /// instead of failing at once.
    connected_once: AtomicBool,
    /// Until when calls wait for a reconnect instead of failing fast (set by
    /// [`NodePort::reconnect_now`]), and the signal that ends the manager's backoff.
    awaited_until: Mutex<Option<Instant>>,
    retry_now: Notify,
    last_error: Mutex<String>,
    client: Mutex<Option<client::Client>>,
    /// When the node's stream last delivered a message: calls measure their deadline from it.
    progress: Arc<Progress>,
    /// The connected stream's in-flight book and the signal that ends its writer, for
    /// [`NodePort::abandon_if_silent`]; None while not connected.
    stream: Mutex<Option<StreamHandle>>,
    /// The link's round trip (a smoothed Ping time, microseconds; 0: not measured since the
    /// last connect), for `--read-from nearest`; and which connection the pinger belongs to.
    rtt_us: AtomicU64,
    connection: AtomicU64,
    credentials: Credentials,
}

/// A connected stream's in-flight book and the signal that ends its writer.
type StreamHandle = (Arc<Mutex<Inflight>>, Arc<Notify>);

impl Shared {
    /// Whether calls made while the link is down should wait for it: before its first
    /// connection, and for a while after [`NodePort::reconnect_now`].
    fn worth_waiting(&self) -> bool {
        !self.connected_once.load(Ordering::Acquire)
            || self.awaited_until.lock().is_some_and(|until| Instant::now() < until)
    }

    fn unavailable(&self) -> BackendError {
        self.ident.unavailable(self.last_error.lock().clone())
    }

    fn fail(&self, waiter: Waiter) {
        self.metrics.failed_calls.inc();
        waiter.fail(self.unavailable());
    }

    /// Fails a call whose ops were sent: the node may have run them.
    fn fail_in_flight(&self, waiter: Waiter) {
        self.metrics.failed_calls.inc();
        waiter.fail(self.ident.in_flight(self.last_error.lock().clone()));
    }
}

pub struct NodeLink {
    shared: Arc<Shared>,
    queue: mpsc::Sender<Request>,
}

impl std::fmt::Debug for NodeLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeLink").field("ident", &self.shared.ident).field("up", &self.is_up()).finish()
    }
}

impl NodeLink {
    /// Creates the link and starts connecting in the background. Must run inside a Tokio runtime.
    pub fn spawn(id: u32, addr: String, options: &LinkOptions) -> Arc<NodeLink> {
        let (queue, queue_rx) = mpsc::channel(options.queue_capacity.max(1));
        let shared = Arc::new(Shared {
            ident: Arc::new(NodeIdent { id, addr, deadline: options.deadline }),
            metrics: LinkMetrics::default(),
            up: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            connected_once: AtomicBool::new(false),
            awaited_until: Mutex::new(None),
            retry_now: Notify::new(),
            last_error: Mutex::new("not connected yet".into()),
            client: Mutex::new(None),
            progress: Arc::new(Progress::new()),
            stream: Mutex::new(None),
            rtt_us: AtomicU64::new(0),
            connection: AtomicU64::new(0),
            credentials: options.credentials.clone(),
        });
        tokio::spawn(manage(shared.clone(), queue_rx));
        Arc::new(NodeLink { shared, queue })
    }

    fn enqueue<T>(
        &self,
        req: Request,
        rx: oneshot::Receiver<Result<T, BackendError>>,
        deadline: Instant,
    ) -> NodeCall<T> {
        let s = &self.shared;
        let refused = |e: BackendError| {
            s.metrics.failed_calls.inc();
            NodeCall::done(Err(e), s.ident.clone())
        };
        if !self.is_up() && !s.worth_waiting() {
            return refused(s.unavailable());
        }
        // An op travelling in pieces is assembled, decoded and stored in single steps that take
        // time in proportion to its size: allow 10 ns a byte (100 MB/s) for them.
        let grace = if req.is_transfer() {
            Duration::from_nanos(req.ops[0].encoded_len() as u64 * 10)
        } else {
            Duration::ZERO
        };
        match self.queue.try_send(req) {
            Ok(()) => {
                NodeCall::waiting(rx, s.ident.clone(), deadline, Some(s.progress.clone())).with_grace(grace)
            }
            Err(mpsc::error::TrySendError::Full(_)) => refused(s.ident.overloaded()),
            Err(mpsc::error::TrySendError::Closed(_)) => refused(s.unavailable()),
        }
    }

    fn client(&self) -> Result<client::Client, BackendError> {
        self.shared.client.lock().clone().ok_or_else(|| self.shared.unavailable())
    }

    /// A unary call within `timeout`, its failure as a [`BackendError`].
    async fn unary<T>(
        &self,
        timeout: Duration,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, BackendError> {
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(resp)) => Ok(resp.into_inner()),
            Ok(Err(status)) => Err(self.shared.ident.unavailable(status.message())),
            Err(_) => Err(self.shared.ident.timeout()),
        }
    }
}

impl NodePort for NodeLink {
    fn ident(&self) -> &Arc<NodeIdent> {
        &self.shared.ident
    }

    fn is_up(&self) -> bool {
        self.shared.up.load(Ordering::Acquire)
    }

    fn last_error(&self) -> String {
        self.shared.last_error.lock().clone()
    }

    fn rtt(&self) -> Option<Duration> {
        let us = self.shared.rtt_us.load(Ordering::Relaxed);
        (us > 0 && self.is_up()).then(|| Duration::from_micros(us))
    }

    fn call(&self, op: Op, version: u64, deadline: Instant) -> NodeCall<Reply> {
        let (tx, rx) = oneshot::channel();
        self.enqueue(Request::new(vec![op], Waiter::One(tx), version), rx, deadline)
    }

    fn call_group(&self, ops: Vec<Op>, version: u64, deadline: Instant) -> NodeCall<Vec<Reply>> {
        debug_assert!(ops.len() == 1 || !ops.iter().any(pieces::op_is_large), "no large op in a group");
        if ops.is_empty() {
            return NodeCall::done(Ok(Vec::new()), self.shared.ident.clone());
        }
        let (tx, rx) = oneshot::channel();
        let waiter = Waiter::Group { need: ops.len(), got: Vec::with_capacity(ops.len()), tx };
        self.enqueue(Request::new(ops, waiter, version), rx, deadline)
    }

    fn get_topology(&self) -> BoxFuture<'_, Result<Option<Topology>, BackendError>> {
        Box::pin(async move {
            let mut client = self.client()?;
            match tokio::time::timeout(self.shared.ident.deadline, client.get_topology(GetTopologyRequest {}))
                .await
            {
                Ok(Ok(doc)) => Topology::from_json(&doc.into_inner().json)
                    .map(Some)
                    .map_err(|e| BackendError::BadReply(format!("node topology: {e}"))),
                Ok(Err(status)) if status.code() == tonic::Code::NotFound => Ok(None),
                Ok(Err(status)) => Err(self.shared.ident.unavailable(status.message())),
                Err(_) => Err(self.shared.ident.timeout()),
            }
        })
    }

    fn offer_topology(&self, t: Arc<Topology>) -> BoxFuture<'_, Result<u64, BackendError>> {
        Box::pin(async move {
            let mut client = self.client()?;
            let doc = TopologyDoc { json: t.to_json() };
            let ack = self.unary(self.shared.ident.deadline, client.update_topology(doc)).await?;
            Ok(ack.version)
        })
    }

    fn stats(&self) -> BoxFuture<'_, Result<NodeStats, BackendError>> {
        Box::pin(async move {
            let mut client = self.client()?;
            self.unary(self.shared.ident.deadline, client.stats(StatsRequest::default())).await
        })
    }

    fn configure(&self, change: NodeSettings) -> BoxFuture<'_, Result<NodeSettings, BackendError>> {
        Box::pin(async move {
            let mut client = self.client()?;
            self.unary(self.shared.ident.deadline, client.configure(change)).await
        })
    }

    fn snapshot(&self) -> BoxFuture<'_, Result<SnapshotInfo, BackendError>> {
        Box::pin(async move {
            let mut client = self.client()?;
            self.unary(SNAPSHOT_TIMEOUT, client.snapshot(SnapshotRequest {})).await
        })
    }

    fn block(&self, req: BlockRequest) -> BoxFuture<'_, Result<Reply, BackendError>> {
        Box::pin(async move {
            let mut client = self.client()?;
            if req.timeout_ms == 0 {
                // For ever: only the node (served, moved, shutting down) or a broken link ends it.
                return match client.block(req).await {
                    Ok(resp) => Ok(resp.into_inner()),
                    Err(status) => Err(self.shared.ident.unavailable(status.message())),
                };
            }
            let limit = Duration::from_millis(req.timeout_ms) + self.shared.ident.deadline;
            self.unary(limit, client.block(req)).await
        })
    }

    fn prepare(
        &self,
        req: shoal_wire::proto::PrepareRequest,
        wait: Duration,
    ) -> BoxFuture<'_, Result<Reply, BackendError>> {
        Box::pin(async move {
            let mut client = self.client()?;
            self.unary(wait + self.shared.ident.deadline, client.prepare(req)).await
        })
    }

    fn decide(&self, req: shoal_wire::proto::DecideRequest) -> BoxFuture<'_, Result<Reply, BackendError>> {
        Box::pin(async move {
            let mut client = self.client()?;
            self.unary(self.shared.ident.deadline, client.decide(req)).await
        })
    }

    fn kill_script(
        &self,
        function: bool,
    ) -> BoxFuture<'_, Result<shoal_wire::proto::KillScriptReply, BackendError>> {
        Box::pin(async move {
            let mut client = self.client()?;
            self.unary(
                self.shared.ident.deadline,
                client.kill_script(shoal_wire::proto::KillScriptRequest { function }),
            )
            .await
        })
    }

    fn wait_replicas(&self, numreplicas: u32, timeout_ms: u64) -> BoxFuture<'_, Result<u32, BackendError>> {
        Box::pin(async move {
            let mut client = self.client()?;
            let req = shoal_wire::proto::WaitRequest { numreplicas, timeout_ms };
            let call = client.wait_replicas(req);
            let reply = if timeout_ms == 0 {
                call.await.map_err(|s| self.shared.ident.unavailable(s.message()))?.into_inner()
            } else {
                self.unary(Duration::from_millis(timeout_ms) + self.shared.ident.deadline, call).await?
            };
            Ok(reply.replicas)
        })
    }

    fn hand_over(
        &self,
        replica: String,
        timeout_ms: u64,
    ) -> BoxFuture<'_, Result<(u64, String), BackendError>> {
        Box::pin(async move {
            let mut client = self.client()?;
            let req = shoal_wire::proto::HandoverRequest { replica, timeout_ms };
            // The node bounds the hand-over by `timeout_ms` itself; this only bounds the call.
            let limit = Duration::from_millis(timeout_ms) + self.shared.ident.deadline;
            match tokio::time::timeout(limit, client.handover(req)).await {
                Ok(Ok(r)) => {
                    let r = r.into_inner();
                    Ok((r.version, r.primary))
                }
                Ok(Err(s))
                    if matches!(
                        s.code(),
                        tonic::Code::FailedPrecondition | tonic::Code::DeadlineExceeded
                    ) =>
                {
                    Err(BackendError::BadReply(s.message().to_string()))
                }
                Ok(Err(s)) => Err(self.shared.ident.unavailable(s.message())),
                Err(_) => Err(self.shared.ident.timeout()),
            }
        })
    }

    fn close(&self) {
        self.shared.closing.store(true, Ordering::Release);
    }

    fn reconnect_now(&self) {
        let s = &self.shared;
        if self.is_up() {
            return;
        }
        *s.awaited_until.lock() = Some(Instant::now() + s.ident.deadline);
        s.retry_now.notify_one();
    }

    fn abandon_if_silent(&self, quiet: Duration) {
        let s = &self.shared;
        if s.progress.last().elapsed() < quiet {
            return;
        }
        let Some((inflight, broken)) = s.stream.lock().clone() else { return };
        let orphans = {
            let mut inf = inflight.lock();
            if inf.closed || (inf.waiters.is_empty() && inf.deferred.is_empty()) {
                return;
            }
            inf.close()
        };
        tracing::warn!(node = s.ident.id, addr = %s.ident.addr, calls = orphans.len(), "replaced as primary while silent: its calls fail (reads are routed again)");
        *s.last_error.lock() =
            format!("replaced as primary after {:?} without an answer", s.progress.last().elapsed());
        orphans.into_iter().for_each(|w| s.fail_in_flight(w));
        broken.notify_one();
    }

    fn metrics(&self) -> &LinkMetrics {
        &self.shared.metrics
    }
}

/// What is on the wire and not yet fully answered, in send order.
#[derive(Default)]
struct Inflight {
    /// Each unanswered batch: its id, the replies it owes, and the slot it holds (freed when its
    /// last reply message arrives).
    batches: VecDeque<(u64, usize, OwnedSemaphorePermit)>,
    /// Who gets the coming replies, in the order their ops were sent.
    waiters: VecDeque<Waiter>,
    /// Set by whichever side notices the stream is gone; nothing may be added after.
    closed: bool,
    /// Callers whose replies the node deferred (a script past busy-reply-threshold), by id.
    deferred: std::collections::HashMap<u64, Waiter>,
}

impl Inflight {
    /// Hands the next reply to the caller first in line (a deferred one waits by its id: a
    /// script's real reply comes later). `Err`: nobody was waiting for it.
    fn deliver(&mut self, r: Reply) -> Result<(), String> {
        match (self.waiters.pop_front(), &r.kind) {
            (Some(w @ Waiter::One(_)), Some(reply::Kind::Deferred(d))) => {
                let d = *d;
                self.deferred.insert(d, w);
            }
            (Some(w), _) => {
                if let Some(w) = w.give(r) {
                    self.waiters.push_front(w);
                }
            }
            (None, _) => return Err("more replies than requests".to_string()),
        }
        Ok(())
    }

    /// Marks the stream gone and returns everyone still waiting.
    fn close(&mut self) -> VecDeque<Waiter> {
        self.closed = true;
        self.batches.clear();
        let mut waiting = std::mem::take(&mut self.waiters);
        waiting.extend(self.deferred.drain().map(|(_, w)| w));
        waiting
    }
}

/// The background half of a link: connects, runs the writer, spawns the reader, reconnects.
async fn manage(s: Arc<Shared>, mut queue: mpsc::Receiver<Request>) {
    let mut backoff = MIN_BACKOFF;
    // A call taken off the queue while down, just as a reconnect became awaited: it goes first
    // on the next connection (or fails if that attempt fails and the wait is over).
    let mut held: Option<Request> = None;
    loop {
        match connect(&s.ident.addr, s.credentials.clone()).await {
            Ok((client, batches, replies)) => {
                backoff = MIN_BACKOFF;
                s.metrics.connects.inc();
                *s.client.lock() = Some(client.clone());
                s.up.store(true, Ordering::Release);
                // The awaited reconnect happened: a later loss fails calls fast again.
                *s.awaited_until.lock() = None;
                let connection = s.connection.fetch_add(1, Ordering::AcqRel) + 1;
                tokio::spawn(ping(s.clone(), client, connection));
                s.connected_once.store(true, Ordering::Release);
                tracing::info!(node = s.ident.id, addr = %s.ident.addr, "connected to node");
                let reason = Writer::new(&s).run(held.take(), &mut queue, batches, replies).await;
                s.up.store(false, Ordering::Release);
                *s.client.lock() = None;
                if s.closing.load(Ordering::Acquire) {
                    tracing::debug!(node = s.ident.id, addr = %s.ident.addr, %reason, "node stream closed");
                    *s.last_error.lock() = "the router is shutting down".into();
                    return;
                }
                tracing::warn!(node = s.ident.id, addr = %s.ident.addr, %reason, "lost node stream");
                *s.last_error.lock() = reason;
            }
            Err(reason) => {
                tracing::debug!(node = s.ident.id, addr = %s.ident.addr, %reason, "node connect failed");
                *s.last_error.lock() = reason;
            }
        }
        // While down, calls fail fast at `call()`; anything that was queued before the link went
        // down is failed here rather than left to time out. Before the first connection, or while
        // a reconnect is awaited (`reconnect_now`), queued calls wait for it instead (each until
        // its own deadline) and attempts follow each other quickly.
        let retry_at = Instant::now() + backoff;
        if s.worth_waiting() {
            tokio::select! {
                _ = tokio::time::sleep_until(retry_at) => {}
                _ = s.retry_now.notified() => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF / 4);
            continue;
        }
        if let Some(req) = held.take() {
            s.fail(req.waiter);
        }
        let woken = loop {
            tokio::select! {
                biased;
                _ = s.retry_now.notified() => break true,
                req = queue.recv() => match req {
                    // Queued after `reconnect_now`, before its signal was seen here.
                    Some(req) if s.worth_waiting() => {
                        held = Some(req);
                        break true;
                    }
                    Some(req) => s.fail(req.waiter),
                    None => return, // every sender is gone: the router dropped this link
                },
                _ = tokio::time::sleep_until(retry_at) => break false,
            }
        };
        backoff = if woken { MIN_BACKOFF } else { (backoff * 2).min(MAX_BACKOFF) };
    }
}

/// How often a connected link measures its round trip.
const PING_EVERY: Duration = Duration::from_secs(1);

/// Times a Ping on the link's channel now and every [`PING_EVERY`] while connection
/// `connection` lasts, into `rtt_us` (smoothed: a quarter of each new sample). A ping that fails
/// or takes longer than the call deadline forgets the estimate (unknown counts as farthest).
async fn ping(s: Arc<Shared>, mut client: client::Client, connection: u64) {
    s.rtt_us.store(0, Ordering::Relaxed);
    let current =
        |s: &Shared| s.connection.load(Ordering::Acquire) == connection && s.up.load(Ordering::Acquire);
    while current(&s) {
        let sent = Instant::now();
        let answered = tokio::time::timeout(s.ident.deadline, client.ping(PingRequest {})).await;
        if !current(&s) {
            break;
        }
        match answered {
            Ok(Ok(_)) => {
                let sample = (sent.elapsed().as_micros() as u64).max(1);
                let old = s.rtt_us.load(Ordering::Relaxed);
                let new = if old == 0 { sample } else { (old * 3 + sample) / 4 };
                s.rtt_us.store(new.max(1), Ordering::Relaxed);
            }
            _ => s.rtt_us.store(0, Ordering::Relaxed),
        }
        tokio::time::sleep(PING_EVERY).await;
    }
}

type Connected = (client::Client, mpsc::Sender<Batch>, BoxStream<BatchReply>);

/// The node's client (admin calls, pings) and its `Execute` stream: over gRPC, or, to a node of
/// this process, in-process (`shoal_wire::local::open_execute`: the same stream's messages,
/// without encoding them or framing them in HTTP/2).
async fn connect(addr: &str, credentials: Credentials) -> Result<Connected, String> {
    let options = ClientOptions::default().with_credentials(credentials);
    let mut client = client::connect(addr, &options).await.map_err(|e| e.to_string())?;
    let (batches, batch_rx) = mpsc::channel(BATCHES_AHEAD);
    let refused = |status: tonic::Status| format!("stream refused: {}", status.message());
    if let Some(open) = shoal_wire::local::open_execute(addr, &options.credentials) {
        let replies = open.map_err(refused)?(Box::pin(ReceiverStream::new(batch_rx).map(Ok)));
        return Ok((client, batches, replies));
    }
    let response =
        tokio::time::timeout(options.connect_timeout, client.execute(ReceiverStream::new(batch_rx)))
            .await
            .map_err(|_| "timed out opening the stream".to_string())?
            .map_err(refused)?;
    Ok((client, batches, Box::pin(response.into_inner())))
}

/// The writer of one connected stream.
struct Writer<'a> {
    s: &'a Arc<Shared>,
    inflight: Arc<Mutex<Inflight>>,
    /// The op being sent in pieces, and the ones waiting their turn.
    transfer: Option<Transfer>,
    waiting_transfers: VecDeque<Request>,
    next_batch: u64,
}

/// A batch being built, with its waiters in the order of their reply-bearing ops.
#[derive(Default)]
struct Building {
    ops: Vec<Op>,
    waiters: Vec<Waiter>,
    replies: usize,
    bytes: usize,
    version: u64,
}

impl Building {
    fn push(&mut self, req: Request) {
        self.bytes += req.bytes;
        self.replies += req.ops.len();
        if self.ops.is_empty() {
            // The first request's ops start the batch as they are (under load a batch is often
            // one lane's group, or a few): no copy of them, no growing from nothing.
            self.version = req.version;
            self.ops = req.ops;
        } else {
            self.version = self.version.min(req.version);
            self.ops.extend(req.ops);
        }
        self.waiters.push(req.waiter);
    }

    fn full(&self) -> bool {
        self.ops.len() >= MAX_BATCH_OPS || self.bytes >= MAX_BATCH_BYTES
    }
}

impl<'a> Writer<'a> {
    fn new(s: &'a Arc<Shared>) -> Writer<'a> {
        Writer {
            s,
            inflight: Arc::default(),
            transfer: None,
            waiting_transfers: VecDeque::new(),
            next_batch: 1,
        }
    }

    /// Runs one connected stream until it breaks; returns why.
    async fn run(
        mut self,
        mut held: Option<Request>,
        queue: &mut mpsc::Receiver<Request>,
        batches: mpsc::Sender<Batch>,
        replies: BoxStream<BatchReply>,
    ) -> String {
        let broken = Arc::new(Notify::new());
        *self.s.stream.lock() = Some((self.inflight.clone(), broken.clone()));
        let slots = Arc::new(Semaphore::new(MAX_UNANSWERED));
        let reader =
            tokio::spawn(read_replies(replies, self.inflight.clone(), broken.clone(), self.s.clone()));
        // The selects below are biased, the work first: `broken` is looked at (a waiter put on
        // its list and taken off again, the larger part of a lone request's cost here) only when
        // the work has to wait. A broken stream is still seen: the reader closes `inflight`
        // (checked before each batch is recorded) and leaves a permit in `broken`.
        let reason = loop {
            // Work to do: a transfer under way, or a queued request.
            let first = if self.transfer.is_some() || !self.waiting_transfers.is_empty() {
                None
            } else if let Some(req) = held.take() {
                Some(req)
            } else {
                tokio::select! {
                    biased;
                    req = queue.recv() => match req {
                        Some(req) => Some(req),
                        None => break "router shutting down".to_string(),
                    },
                    _ = broken.notified() => break "stream closed".to_string(),
                }
            };
            let slot = tokio::select! {
                biased;
                s = slots.clone().acquire_owned() => s.expect("never closed"),
                _ = broken.notified() => {
                    first.into_iter().for_each(|r| self.s.fail(r.waiter));
                    break "stream closed".to_string();
                }
            };
            let permit = tokio::select! {
                biased;
                p = batches.reserve() => match p {
                    Ok(p) => p,
                    Err(_) => {
                        first.into_iter().for_each(|r| self.s.fail(r.waiter));
                        break "stream closed".to_string();
                    }
                },
                _ = broken.notified() => {
                    first.into_iter().for_each(|r| self.s.fail(r.waiter));
                    break "stream closed".to_string();
                }
            };
            let batch = self.build(first, queue);
            let id = self.next_batch;
            self.next_batch += 1;
            let n = batch.ops.len();
            {
                let mut inf = self.inflight.lock();
                if inf.closed {
                    drop(inf);
                    batch.waiters.into_iter().for_each(|w| self.s.fail(w));
                    break "stream closed".to_string();
                }
                inf.batches.push_back((id, batch.replies, slot));
                inf.waiters.extend(batch.waiters);
            }
            self.s.metrics.batches.inc();
            self.s.metrics.ops.add(n as u64);
            self.s.metrics.batch_ops.observe(n as f64);
            permit.send(Batch { id, ops: batch.ops, topology_version: batch.version });
        };
        drop(batches);
        reader.abort();
        *self.s.stream.lock() = None;
        let orphans = self.inflight.lock().close();
        orphans.into_iter().for_each(|w| self.s.fail_in_flight(w));
        if let Some(t) = self.transfer.take() {
            t.waiter.into_iter().for_each(|w| self.s.fail_in_flight(w));
        }
        self.waiting_transfers.drain(..).for_each(|r| self.s.fail(r.waiter));
        reason
    }

    /// The next batch: the transfer under way (a few of its pieces), then `first` and whatever
    /// else is queued right now, up to the batch limits. A batch says the oldest version its ops
    /// were routed by: a node then refuses whatever that version would have routed wrongly, and
    /// the router retries those ops alone.
    fn build(&mut self, first: Option<Request>, queue: &mut mpsc::Receiver<Request>) -> Building {
        let mut b = Building::default();
        self.add_transfer_pieces(&mut b);
        let mut next = first;
        loop {
            let req = match next.take() {
                Some(r) => r,
                None if b.full() => break,
                None => match queue.try_recv() {
                    Ok(r) => r,
                    Err(_) => break,
                },
            };
            if req.is_transfer() {
                self.s.metrics.transfers.inc();
                self.waiting_transfers.push_back(req);
                if self.transfer.is_none() {
                    self.add_transfer_pieces(&mut b);
                }
            } else {
                b.push(req);
            }
        }
        b
    }

    /// Adds up to [`TRANSFER_BYTES_PER_BATCH`] of the current transfer (starting the next one if
    /// none is under way); the transfer's final op brings its waiter into the batch.
    fn add_transfer_pieces(&mut self, b: &mut Building) {
        if self.transfer.is_none() {
            let Some(req) = self.waiting_transfers.pop_front() else { return };
            let Request { mut ops, waiter, version, .. } = req;
            self.transfer = Some(Transfer {
                ops: pieces::op_in_pieces(&ops.pop().expect("one op")).into(),
                waiter: Some(waiter),
                version,
            });
        }
        let t = self.transfer.as_mut().expect("a transfer");
        let mut sent = 0;
        b.version = if b.ops.is_empty() { t.version } else { b.version.min(t.version) };
        while sent < TRANSFER_BYTES_PER_BATCH {
            let Some(op) = t.ops.pop_front() else { break };
            sent += op.encoded_len();
            b.ops.push(op);
        }
        b.bytes += sent;
        if t.ops.is_empty() {
            // The `assembled` op went out last: its reply is the transfer's.
            b.replies += 1;
            b.waiters.extend(t.waiter.take());
            self.transfer = None;
        }
    }
}

/// Routes replies back to their callers, in order, putting pieces together; on any mismatch or
/// error the stream is declared broken (the writer then fails what is left and reconnects).
async fn read_replies(
    mut replies: BoxStream<BatchReply>,
    inflight: Arc<Mutex<Inflight>>,
    broken: Arc<Notify>,
    s: Arc<Shared>,
) {
    let mut assembler = ReplyAssembler::default();
    // Replies received so far for the batch at the front.
    let mut received = 0;
    let why = loop {
        let message = match replies.next().await {
            Some(Ok(m)) => m,
            None => break "node closed the stream".to_string(),
            Some(Err(status)) => {
                tracing::debug!(node = s.ident.id, %status, "node stream error");
                break format!("node stream failed: {}", status.message());
            }
        };
        s.progress.mark();
        let mut inf = inflight.lock();
        // The stream's own messages (keep-alives, deferred replies) belong to no batch.
        if message.id == 0 {
            for d in message.deferred {
                match (inf.deferred.remove(&d.id), d.reply) {
                    (Some(w), Some(r)) => {
                        let _ = w.give(r);
                    }
                    (None, _) => {
                        tracing::warn!(node = s.ident.id, id = d.id, "a deferred reply nobody waits for")
                    }
                    (Some(w), None) => w.fail(s.ident.unavailable("an empty deferred reply")),
                }
            }
            continue;
        }
        let Some(&(id, owed, _)) = inf.batches.front() else {
            tracing::error!(node = s.ident.id, "reply for a batch that was never sent");
            break "reply for a batch that was never sent".to_string();
        };
        if id != message.id {
            tracing::error!(node = s.ident.id, want = id, got = message.id, "node replies out of step");
            break "node replies out of step".to_string();
        }
        let mut failure = None;
        for r in message.replies {
            match assembler.feed(r) {
                Ok(None) => {}
                Ok(Some(r)) => {
                    received += 1;
                    failure = failure.or(inf.deliver(r).err());
                }
                Err(e) if e.fails_the_stream() => failure = Some(format!("bad reply pieces: {e}")),
                // One reply that could not be put together: its caller gets the error, the
                // stream and everyone else's replies go on.
                Err(e) => {
                    received += 1;
                    let text = format!("ERR the node's reply could not be received: {e}");
                    let error = Reply { kind: Some(reply::Kind::Error(text)), ..Default::default() };
                    failure = failure.or(inf.deliver(error).err());
                }
            }
        }
        if failure.is_none() && !message.more {
            if received != owed {
                failure = Some(format!("batch {id}: {received} replies for {owed} ops"));
            } else {
                inf.batches.pop_front(); // frees its slot
                received = 0;
            }
        }
        if let Some(f) = failure {
            tracing::error!(node = s.ident.id, error = %f, "node replies out of step");
            break f;
        }
    };
    let orphans = inflight.lock().close();
    for waiter in orphans {
        s.metrics.failed_calls.inc();
        waiter.fail(s.ident.in_flight(why.clone()));
    }
    broken.notify_one();
}
