//! What the backend needs from a node, as a small trait: queue ops (answered in order), and the
//! node's administrative calls. [`super::link::NodeLink`] is the real thing (one batched gRPC
//! stream); the tests drive routing against scripted fake nodes through the same trait.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use shoal_wire::Topology;
use shoal_wire::proto::{
    BlockRequest, DecideRequest, KillScriptReply, NodeSettings, NodeStats, Op, PrepareRequest, Reply,
    SnapshotInfo,
};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::BackendError;
use shoal_telemetry::metrics::{Counter, Histogram, SIZE_BUCKETS};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A node as the backend talks to it.
pub trait NodePort: Send + Sync + fmt::Debug {
    fn ident(&self) -> &Arc<NodeIdent>;
    /// Whether the node can be called now (its stream is up).
    fn is_up(&self) -> bool;
    /// Why the node is not up, for errors and `SHOAL NODES`.
    fn last_error(&self) -> String;
    /// The link's measured round trip (None: not measured, or the link is down). Used by
    /// `--read-from nearest`.
    fn rtt(&self) -> Option<Duration> {
        None
    }
    /// Queues `op`, routed by topology `version`. Never blocks.
    fn call(&self, op: Op, version: u64, deadline: Instant) -> NodeCall<Reply>;
    /// Queues `ops` as one group: they reach the node together and are answered together, in
    /// order. (The backend never puts an op that travels in pieces into a group.)
    fn call_group(&self, ops: Vec<Op>, version: u64, deadline: Instant) -> NodeCall<Vec<Reply>>;
    /// The topology the node serves by (`None`: it follows none).
    fn get_topology(&self) -> BoxFuture<'_, Result<Option<Topology>, BackendError>>;
    /// Offers a topology; returns the version the node serves afterwards.
    fn offer_topology(&self, t: Arc<Topology>) -> BoxFuture<'_, Result<u64, BackendError>>;
    fn stats(&self) -> BoxFuture<'_, Result<NodeStats, BackendError>>;
    /// Changes the settings `change` sets (none: only reads them); returns every setting after.
    fn configure(&self, change: NodeSettings) -> BoxFuture<'_, Result<NodeSettings, BackendError>>;
    /// Writes a snapshot now and waits for it.
    fn snapshot(&self) -> BoxFuture<'_, Result<SnapshotInfo, BackendError>>;
    /// A blocking command's wait (BLPOP, BLMOVE, ...; the node's `Block` call, on a stream of its
    /// own): the command's reply, `nil` at its timeout, or `moved`.
    fn block(&self, req: BlockRequest) -> BoxFuture<'_, Result<Reply, BackendError>> {
        let _ = req;
        Box::pin(async { Err(BackendError::BadReply("this node port cannot block".into())) })
    }
    /// SCRIPT KILL (or FUNCTION KILL, `function`) on this node (a call of its own: the stream
    /// is busy with the script).
    fn kill_script(&self, function: bool) -> BoxFuture<'_, Result<KillScriptReply, BackendError>> {
        let _ = function;
        Box::pin(async { Err(BackendError::BadReply("this node port cannot kill scripts".into())) })
    }
    /// WAIT on this node: how many of its replicas acked every change it had applied when the
    /// call arrived, waiting up to `timeout_ms` (0: no limit) for `numreplicas` of them.
    fn wait_replicas(&self, numreplicas: u32, timeout_ms: u64) -> BoxFuture<'_, Result<u32, BackendError>> {
        let _ = (numreplicas, timeout_ms);
        Box::pin(async { Ok(0) })
    }
    /// SHOAL FAILOVER: the node, a primary, hands its shard over to `replica` (empty: its most
    /// advanced one) within `timeout_ms` without losing a write; answers the topology version that switched and the
    /// new primary, or the node's reason why not (`BadReply`).
    fn hand_over(
        &self,
        replica: String,
        timeout_ms: u64,
    ) -> BoxFuture<'_, Result<(u64, String), BackendError>> {
        let _ = (replica, timeout_ms);
        Box::pin(async { Err(BackendError::BadReply("this node port cannot hand over".into())) })
    }
    /// A transaction over several nodes, first phase (the node's `Prepare`): `ok` once the node
    /// holds it, else the node's refusal. `wait` bounds how long the node may wait for its gate.
    fn prepare(&self, req: PrepareRequest, wait: Duration) -> BoxFuture<'_, Result<Reply, BackendError>> {
        let _ = (req, wait);
        Box::pin(async { Err(BackendError::BadReply("this node port cannot prepare".into())) })
    }
    /// The decision on a prepared transaction (the node's `Decide`): a commit answers its replies.
    fn decide(&self, req: DecideRequest) -> BoxFuture<'_, Result<Reply, BackendError>> {
        let _ = req;
        Box::pin(async { Err(BackendError::BadReply("this node port cannot decide".into())) })
    }
    /// Shutdown: when the node's stream ends now, it is expected, not a failure.
    fn close(&self);
    /// The node just became a primary in the routing topology: if its link is down, try again
    /// now (not at the end of a backoff that began while the node was away) and let calls wait
    /// one deadline for the connection.
    fn reconnect_now(&self) {}
    /// The node was replaced as a primary: if its stream has delivered nothing for `quiet`, the
    /// calls waiting on it fail now as if the stream broke, so they are routed again by the new
    /// topology instead of waiting out their deadline on a node that is frozen or cut off. A node
    /// that still answers (a hand-over: it replies `moved`) is left alone.
    fn abandon_if_silent(&self, _quiet: std::time::Duration) {}
    fn metrics(&self) -> &LinkMetrics;
}

/// A node's identity, carried into error messages.
#[derive(Debug)]
pub struct NodeIdent {
    pub id: u32,
    pub addr: String,
    /// How long a call may wait without the node making progress.
    pub deadline: Duration,
}

impl NodeIdent {
    pub fn unavailable(&self, reason: impl Into<String>) -> BackendError {
        BackendError::Unavailable { node: self.id, addr: self.addr.clone(), reason: reason.into() }
    }

    /// The link failed with the call in flight (see [`BackendError::InFlight`]).
    pub fn in_flight(&self, reason: impl Into<String>) -> BackendError {
        BackendError::InFlight { node: self.id, addr: self.addr.clone(), reason: reason.into() }
    }

    pub fn timeout(&self) -> BackendError {
        BackendError::Timeout { node: self.id, addr: self.addr.clone(), ms: self.deadline.as_millis() as u64 }
    }

    pub fn overloaded(&self) -> BackendError {
        BackendError::Overloaded { node: self.id, addr: self.addr.clone() }
    }
}

/// When a node's stream last delivered something.
#[derive(Debug)]
pub struct Progress {
    base: Instant,
    /// Nanoseconds after `base`.
    last: AtomicU64,
}

impl Progress {
    pub fn new() -> Progress {
        Progress { base: Instant::now(), last: AtomicU64::new(0) }
    }

    /// Something arrived just now.
    pub fn mark(&self) {
        self.last.store(self.base.elapsed().as_nanos() as u64, Ordering::Release);
    }

    pub fn last(&self) -> Instant {
        self.base + Duration::from_nanos(self.last.load(Ordering::Acquire))
    }
}

impl Default for Progress {
    fn default() -> Self {
        Progress::new()
    }
}

/// A call in flight: resolves to the node's reply (or replies, for a group) or a
/// [`BackendError`].
///
/// The deadline is about progress, not size: a call fails once the node's stream has delivered
/// nothing for a whole deadline (and the call's own deadline has passed), so a 512 MiB transfer,
/// or a call queued behind one, that keeps moving is not cut short, while a node that stopped
/// answering is noticed within one deadline.
pub struct NodeCall<T> {
    state: CallState<T>,
    ident: Arc<NodeIdent>,
    deadline: Instant,
    /// The node's stream (None: no stream to watch).
    progress: Option<Arc<Progress>>,
    /// Extra quiet time allowed: the node may work on a large op (assemble, copy, store it)
    /// without sending anything.
    grace: Duration,
}

enum CallState<T> {
    Waiting(oneshot::Receiver<Result<T, BackendError>>),
    /// Boxed: rare on the hot path, and it keeps every call (and every future holding one) small.
    Done(Box<Result<T, BackendError>>),
}

impl<T> NodeCall<T> {
    /// A call whose reply arrives on `rx`.
    pub fn waiting(
        rx: oneshot::Receiver<Result<T, BackendError>>,
        ident: Arc<NodeIdent>,
        deadline: Instant,
        progress: Option<Arc<Progress>>,
    ) -> NodeCall<T> {
        NodeCall { state: CallState::Waiting(rx), ident, deadline, progress, grace: Duration::ZERO }
    }

    /// Allows `grace` more time, in the deadline and in every quiet spell of the stream (for an op
    /// whose size makes single steps long).
    pub fn with_grace(mut self, grace: Duration) -> NodeCall<T> {
        self.deadline += grace;
        self.grace = grace;
        self
    }

    /// A call already decided (refused before it was queued, or answered at once).
    pub fn done(result: Result<T, BackendError>, ident: Arc<NodeIdent>) -> NodeCall<T> {
        NodeCall {
            state: CallState::Done(Box::new(result)),
            ident,
            deadline: Instant::now(),
            progress: None,
            grace: Duration::ZERO,
        }
    }

    pub async fn wait(self) -> Result<T, BackendError> {
        let mut rx = match self.state {
            CallState::Done(result) => return *result,
            CallState::Waiting(rx) => rx,
        };
        let mut deadline = self.deadline;
        loop {
            match tokio::time::timeout_at(deadline, &mut rx).await {
                Ok(Ok(result)) => return result,
                Ok(Err(_)) => return Err(self.ident.unavailable("link closed")),
                Err(_) => {
                    // Still moving: wait until a whole deadline has passed without progress.
                    let quiet_until =
                        self.progress.as_ref().map(|p| p.last() + self.ident.deadline + self.grace);
                    match quiet_until {
                        Some(at) if at > Instant::now() => deadline = at,
                        _ => return Err(self.ident.timeout()),
                    }
                }
            }
        }
    }
}

/// Per-link counters, exported on the router's /metrics.
#[derive(Debug)]
pub struct LinkMetrics {
    pub batches: Counter,
    pub ops: Counter,
    pub batch_ops: Histogram,
    pub failed_calls: Counter,
    pub connects: Counter,
    /// Ops sent in pieces (larger than one message piece).
    pub transfers: Counter,
}

impl Default for LinkMetrics {
    fn default() -> Self {
        LinkMetrics {
            batches: Counter::default(),
            ops: Counter::default(),
            batch_ops: Histogram::new(SIZE_BUCKETS),
            failed_calls: Counter::default(),
            connects: Counter::default(),
            transfers: Counter::default(),
        }
    }
}
