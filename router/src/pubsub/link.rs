//! One router → node `Subscribe` stream: this router's subscription changes out, the node's
//! deliveries in.
//!
//! On every (re)connect the link first sends the hub's whole state (`replace`), taken under
//! the hub's lock together with the changes queued meanwhile, so the node ends up with exactly
//! the router's registrations whatever happened while the stream was down. A stream that breaks
//! (node restart, the node closing it because this router fell behind) reconnects with
//! exponential backoff (50 ms to 2 s); what the node published in between is lost (documented in
//! docs/compatibility.md). A link whose node has left the topology keeps reading until the node
//! ends the stream (a leaving node stops gracefully, after delivering what it accepted), then
//! stops.
//!
//! The node also says which topology version it serves (when the stream opens and at every
//! change): a router behind it catches up at once, so it links to a new node and registers there
//! long before a move completes and publishes can be routed to that node.
//!
//! The link has a gRPC connection of its own, apart from the `Execute` stream's: deliveries
//! never queue behind large batch replies.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use shoal_wire::Topology;
use shoal_wire::auth::Credentials;
use shoal_wire::client::{self, ClientOptions};
use shoal_wire::proto::{
    ClientsAnswer, ClientsQuery, ClientsReply, Delivery, Frame, GetTopologyRequest, PubSubBatch, PubSubQuery,
    SubscribeRequest, Subscription, Tracking,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::Streaming;

use crate::backend::{Backend, BackendError};
use crate::nearcache::{NearCache, NodeLease};
use crate::pubsub::tracking::ClientTracking;

const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How long a link to a node that left keeps reading if the node does not end the stream.
const RETIRE_GRACE: Duration = Duration::from_secs(30);
/// The most MONITOR line bytes a link holds for its node (queued, not yet taken by the gRPC
/// stream): past it, lines for other routers' monitors are dropped, never queued without bound
/// behind a node that reads slowly.
const LINE_BYTES_LIMIT: usize = 8 << 20;

/// A change to this router's registrations, and who waits for the node to have applied it.
#[derive(Debug, Default)]
pub struct Change {
    pub subs: Vec<Subscription>,
    pub ack: Option<oneshot::Sender<()>>,
    /// Register this router for tracking on the node (the first CLIENT TRACKING ON).
    pub tracking: bool,
    /// Some client of this router monitors now (`Some(true)`), or none does any more.
    pub monitoring: Option<bool>,
    /// MONITOR lines of this router's commands, for the other routers' monitors.
    pub lines: Vec<Bytes>,
}

#[derive(Debug)]
pub struct Link {
    pub id: u32,
    pub addr: String,
    changes: mpsc::UnboundedSender<Change>,
    client: Mutex<Option<client::Client>>,
    up: AtomicBool,
    /// The node says some router monitors (`Delivery.monitors`) on the open stream.
    monitors_elsewhere: AtomicBool,
    /// The node says a script runs there past busy-reply-threshold (`Delivery.busy`): 0 none,
    /// 1 a script (EVAL), 2 a library function (FCALL).
    busy: AtomicU32,
    /// MONITOR line bytes queued for the node and not yet taken by its stream.
    line_bytes: Arc<AtomicUsize>,
    retired: watch::Sender<bool>,
}

impl Link {
    pub fn spawn<H: LinkHub>(
        hub: Arc<H>,
        backend: Arc<Backend>,
        id: u32,
        addr: String,
        stop: watch::Receiver<bool>,
    ) -> Arc<Link> {
        let (changes, rx) = mpsc::unbounded_channel();
        let link = Arc::new(Link {
            id,
            addr,
            changes,
            client: Mutex::new(None),
            up: AtomicBool::new(false),
            monitors_elsewhere: AtomicBool::new(false),
            busy: AtomicU32::new(0),
            line_bytes: Arc::default(),
            retired: watch::channel(false).0,
        });
        tokio::spawn(run(hub, backend, link.clone(), rx, stop));
        link
    }

    /// The node serves topology `version`: if this router is behind, it fetches the topology
    /// from the node and adopts it (in the background).
    fn catch_up(&self, backend: &Arc<Backend>, version: u64) {
        if version <= backend.version() {
            return;
        }
        let Some(mut client) = self.client.lock().clone() else { return };
        let backend = backend.clone();
        tokio::spawn(async move {
            let fetched =
                tokio::time::timeout(Duration::from_secs(5), client.get_topology(GetTopologyRequest {}))
                    .await;
            if let Ok(Ok(doc)) = fetched {
                match Topology::from_json(&doc.into_inner().json) {
                    Ok(t) => {
                        if backend.adopt(t) {
                            tracing::debug!(version, "topology adopted from a node's pub/sub stream");
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "a node sent a topology that does not parse"),
                }
            }
        });
    }

    /// Queues a change for the node; false if the link has stopped.
    pub fn send(&self, change: Change) -> bool {
        self.changes.send(change).is_ok()
    }

    /// Queues a MONITOR line of this router's for the node to relay; dropped when the link
    /// already holds [`LINE_BYTES_LIMIT`] of them.
    pub fn send_line(&self, line: Bytes) {
        let n = line.len();
        if self.line_bytes.fetch_add(n, Ordering::Relaxed) + n > LINE_BYTES_LIMIT
            || !self.send(Change { lines: vec![line], ..Change::default() })
        {
            release(&self.line_bytes, n);
        }
    }

    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    /// Whether this link's node says some router monitors.
    pub fn monitors_elsewhere(&self) -> bool {
        self.monitors_elsewhere.load(Ordering::Acquire)
    }

    /// The node's word on monitoring routers (false also when the stream ends: it no longer
    /// holds).
    fn set_monitors_elsewhere<H: LinkHub>(&self, hub: &H, on: bool) {
        if self.monitors_elsewhere.swap(on, Ordering::AcqRel) != on {
            hub.monitors_elsewhere(on);
        }
    }

    /// What BUSY text this link's node would answer now, if a script runs there past
    /// busy-reply-threshold.
    pub fn busy_text(&self) -> Option<&'static str> {
        match self.busy.load(Ordering::Acquire) {
            1 => Some(shoal_wire::script::BUSY_SCRIPT),
            2 => Some(shoal_wire::script::BUSY_FUNCTION),
            _ => None,
        }
    }

    /// The node's word on a busy script there (`Delivery.busy`; 0 also when the stream ends: a
    /// node that is gone stalls nobody's commands).
    fn set_busy<H: LinkHub>(&self, hub: &H, busy: u32) {
        let busy = if matches!(busy, 1 | 2) { busy } else { 0 };
        let was = self.busy.swap(busy, Ordering::AcqRel);
        if (was != 0) != (busy != 0) {
            hub.busy_nodes(busy != 0);
        }
    }

    /// The node left the topology: stop once its stream ends.
    pub fn retire(&self) {
        let _ = self.retired.send(true);
    }

    /// A PUBSUB question to this node.
    pub async fn query(&self, q: PubSubQuery, timeout: Duration) -> Result<Frame, BackendError> {
        self.call(timeout, |mut client| async move { client.pub_sub_info(q).await }).await
    }

    /// A CLIENT LIST/KILL question about the other routers' clients, relayed by this node.
    pub async fn clients(&self, q: ClientsQuery, timeout: Duration) -> Result<ClientsReply, BackendError> {
        self.call(timeout, |mut client| async move { client.clients(q).await }).await
    }

    /// One unary call on this link's connection, bounded by `timeout`.
    async fn call<T, F: Future<Output = Result<tonic::Response<T>, tonic::Status>>>(
        &self,
        timeout: Duration,
        call: impl FnOnce(client::Client) -> F,
    ) -> Result<T, BackendError> {
        let unavailable = |why: &str| BackendError::Unavailable {
            node: self.id,
            addr: self.addr.clone(),
            reason: why.to_string(),
        };
        let Some(client) = self.client.lock().clone() else { return Err(unavailable("not connected")) };
        match tokio::time::timeout(timeout, call(client)).await {
            Ok(Ok(answer)) => Ok(answer.into_inner()),
            Ok(Err(status)) => Err(unavailable(status.message())),
            Err(_) => Err(BackendError::Timeout {
                node: self.id,
                addr: self.addr.clone(),
                ms: timeout.as_millis() as u64,
            }),
        }
    }
}

/// Applies the near-cache deliveries of a batch (invalidations, pongs) and takes them out, in
/// the order the node sent them (a pong renews the node's lease only after the invalidations
/// queued before it were applied).
fn near_cache(
    near: Option<(&NearCache, &NodeLease)>,
    clients: &ClientTracking,
    deliveries: &mut Vec<Delivery>,
) {
    deliveries.retain(|d| {
        if d.pong != 0 {
            if let Some((near, lease)) = near {
                near.pong(lease, d.pong);
            }
            return false;
        }
        if d.invalidate_all {
            if let Some((near, _)) = near {
                near.metrics.invalidations.inc();
                near.flush();
            }
            clients.flush_all();
            return false;
        }
        if !d.invalidate.is_empty() {
            for key in &d.invalidate {
                if let Some((near, _)) = near {
                    near.metrics.invalidations.inc();
                    near.invalidate(key);
                }
                clients.invalidate(key, 0);
            }
            return false;
        }
        true
    });
}

/// A connected stream: its client, the requests' sender and the node's batches.
type Open = (client::Client, mpsc::UnboundedSender<SubscribeRequest>, Streaming<PubSubBatch>);

/// Takes `n` bytes off a MONITOR line budget (never below 0: a stream's end resets it while
/// lines counted in it may still be on their way).
fn release(budget: &AtomicUsize, n: usize) {
    let _ = budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| Some(b.saturating_sub(n)));
}

fn line_bytes(lines: &[Bytes]) -> usize {
    lines.iter().map(|l| l.len()).sum()
}

async fn connect(addr: &str, credentials: Credentials, budget: Arc<AtomicUsize>) -> Result<Open, String> {
    let options = ClientOptions::default().with_credentials(credentials);
    let mut client = client::connect(addr, &options).await.map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::unbounded_channel();
    // MONITOR lines leave the link's budget once the gRPC stream takes them.
    let requests = UnboundedReceiverStream::new(rx).map(move |req: SubscribeRequest| {
        release(&budget, line_bytes(&req.monitor_lines));
        req
    });
    let response = tokio::time::timeout(options.connect_timeout, client.subscribe(requests))
        .await
        .map_err(|_| "timed out opening the stream".to_string())?
        .map_err(|status| format!("stream refused: {}", status.message()))?;
    Ok((client, tx, response.into_inner()))
}

/// What a link needs of the hub that runs it (the hub implements it, so the link sits below the
/// hub that holds it).
pub trait LinkHub: Send + Sync + 'static {
    /// The whole state a new stream starts with, and the acks of the changes it took up (taken
    /// under the lock changes are made under).
    fn snapshot(
        &self,
        pending: &mut mpsc::UnboundedReceiver<Change>,
    ) -> (Vec<Subscription>, Vec<oneshot::Sender<()>>);
    /// A new ack id.
    fn ack_id(&self) -> u64;
    /// What the stream registers for tracking on its node (`None`: nothing).
    fn tracking_request(&self) -> Option<Tracking>;
    /// Delivers published messages to this router's subscribers.
    fn deliver(&self, deliveries: &[Delivery]);
    /// The near cache whose invalidations the streams carry.
    fn near(&self) -> Option<&Arc<NearCache>>;
    /// CLIENT TRACKING's table, which hears of the same invalidations.
    fn tracking(&self) -> &ClientTracking;
    /// This router's identity on the nodes (`SubscribeRequest.router`).
    fn router_id(&self) -> u64;
    /// Another router's CLIENT LIST/KILL, about this router's clients.
    fn answer_clients(&self, q: &ClientsQuery) -> ClientsAnswer;
    /// Whether some client of this router monitors (registered with every new stream).
    fn monitoring(&self) -> bool;
    /// One link more (`on`) or less whose node says some router monitors.
    fn monitors_elsewhere(&self, on: bool);
    /// One link more (`on`) or less whose node says a script runs there past
    /// busy-reply-threshold.
    fn busy_nodes(&self, on: bool);
    /// MONITOR lines of other routers' commands or scripts' calls, for this router's monitors.
    fn monitor_lines(&self, lines: &[Bytes]);
}

/// The link's task: connect, run the stream until it ends, reconnect with backoff.
async fn run<H: LinkHub>(
    hub: Arc<H>,
    backend: Arc<Backend>,
    link: Arc<Link>,
    mut changes: mpsc::UnboundedReceiver<Change>,
    mut stop: watch::Receiver<bool>,
) {
    let mut retired = link.retired.subscribe();
    let mut backoff = MIN_BACKOFF;
    let mut connected_once = false;
    // Acks waited for before the first connection: answered by the first state sent.
    let mut early: Vec<oneshot::Sender<()>> = Vec::new();
    loop {
        if *stop.borrow() {
            return;
        }
        match connect(&link.addr, backend.credentials(), link.line_bytes.clone()).await {
            Ok(open) => {
                connected_once = true;
                backoff = MIN_BACKOFF;
                let mut stream = Stream { hub: &*hub, backend: &backend, link: &link, acks: HashMap::new() };
                let ended = stream.serve(open, &mut changes, &mut early, &mut stop, &mut retired).await;
                let Some(why) = ended else { return };
                if *retired.borrow() {
                    tracing::debug!(node = link.id, addr = %link.addr, %why, "pub/sub stream of a node that left ended");
                    return;
                }
                tracing::warn!(node = link.id, addr = %link.addr, %why, "lost pub/sub stream; reconnecting");
            }
            Err(why) => tracing::debug!(node = link.id, addr = %link.addr, %why, "pub/sub connect failed"),
        }
        if *retired.borrow() {
            return;
        }
        // Down: changes are in the hub's state, which the next stream starts with. Their waiters
        // are released at once (a node that is down does not hold up SUBSCRIBE), except before
        // the first connection, when the node is probably just starting.
        let until = Instant::now() + backoff;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => break,
                change = changes.recv() => match change {
                    Some(Change { ack: Some(tx), .. }) if !connected_once => early.push(tx),
                    Some(change) => release(&link.line_bytes, line_bytes(&change.lines)),
                    None => return,
                },
                _ = stop.wait_for(|s| *s) => return,
                _ = retired.changed() => if *retired.borrow() { return },
            }
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// An open stream: what it owes acks to.
struct Stream<'a, H> {
    hub: &'a H,
    backend: &'a Arc<Backend>,
    link: &'a Arc<Link>,
    acks: HashMap<u64, Vec<oneshot::Sender<()>>>,
}

impl<H: LinkHub> Stream<'_, H> {
    /// Runs one stream until it ends: why (`None`: the link stops).
    async fn serve(
        &mut self,
        (client, requests, mut replies): Open,
        changes: &mut mpsc::UnboundedReceiver<Change>,
        early: &mut Vec<oneshot::Sender<()>>,
        stop: &mut watch::Receiver<bool>,
        retired: &mut watch::Receiver<bool>,
    ) -> Option<String> {
        let (hub, link) = (self.hub, self.link);
        *link.client.lock() = Some(client);
        let (state, mut waiting) = hub.snapshot(changes);
        waiting.append(early);
        let id = hub.ack_id();
        self.acks.insert(id, waiting);
        // With a near cache, this stream also carries the node's invalidations, and pings whose
        // answers keep the cache's lease on the node alive.
        let lease = hub.near().map(|near| near.lease_of(link.id, &link.addr));
        let ping = hub.near().map_or(0, |near| near.ping());
        let tracking = hub.tracking_request();
        let router = hub.router_id();
        let _ = requests.send(SubscribeRequest {
            changes: state,
            ack: id,
            replace: true,
            tracking,
            ping,
            router,
            monitoring: if hub.monitoring() { 1 } else { 0 },
            ..Default::default()
        });
        let mut pings = tokio::time::interval(crate::nearcache::PING_EVERY);
        pings.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        link.up.store(true, Ordering::Release);
        tracing::debug!(node = link.id, addr = %link.addr, "pub/sub stream open");
        let mut grace: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
        let why = loop {
            if grace.is_none() && *retired.borrow() {
                grace = Some(Box::pin(tokio::time::sleep(RETIRE_GRACE)));
            }
            let expired = async {
                match grace.as_mut() {
                    Some(g) => g.as_mut().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                message = replies.message() => match message {
                    Ok(Some(batch)) => self.delivered(batch, id, lease.as_deref(), &requests),
                    Ok(None) => break "node closed the stream".to_string(),
                    Err(status) => break format!("stream failed: {}", status.message()),
                },
                change = changes.recv() => match change {
                    Some(change) => self.send(&requests, change),
                    None => return None,
                },
                _ = pings.tick(), if hub.near().is_some() => {
                    let ping = hub.near().map_or(0, |near| near.ping());
                    let _ = requests.send(SubscribeRequest { ping, ..Default::default() });
                }
                _ = stop.wait_for(|s| *s) => return None,
                // Retired: keep reading until the node ends the stream (or the grace ends).
                _ = retired.changed() => {}
                _ = expired => break "the node left the topology".to_string(),
            }
        };
        link.up.store(false, Ordering::Release);
        link.set_monitors_elsewhere(hub, false);
        link.set_busy(hub, 0);
        // Lines queued on the stream that ended are gone with it.
        link.line_bytes.store(0, Ordering::Relaxed);
        // Invalidations sent while the stream is down are lost: forget what this node told us,
        // and serve nothing of it until a new stream is tracking.
        if let (Some(near), Some(lease)) = (hub.near(), &lease) {
            near.node_down(lease);
        }
        hub.tracking().flush_all();
        *link.client.lock() = None;
        // Waiters are released (dropped senders): the state is sent again on reconnect.
        self.acks.clear();
        Some(why)
    }

    /// A batch from the node: invalidations, acks, a newer topology, messages to deliver.
    fn delivered(
        &mut self,
        batch: PubSubBatch,
        id: u64,
        lease: Option<&NodeLease>,
        requests: &mpsc::UnboundedSender<SubscribeRequest>,
    ) {
        let (hub, link, backend) = (self.hub, self.link, self.backend);
        let mut deliveries = batch.deliveries;
        near_cache(hub.near().map(|n| &**n).zip(lease), hub.tracking(), &mut deliveries);
        deliveries.retain(|d| {
            if d.monitors != 0 {
                link.set_monitors_elsewhere(hub, d.monitors == 1);
                return false;
            }
            if d.busy != 0 {
                link.set_busy(hub, d.busy);
                return false;
            }
            if !d.monitor_lines.is_empty() {
                hub.monitor_lines(&d.monitor_lines);
                return false;
            }
            if let Some(q) = &d.clients {
                // Another router's CLIENT LIST/KILL: answered at once, on this stream.
                let clients = Some(hub.answer_clients(q));
                let _ = requests.send(SubscribeRequest { clients, ..Default::default() });
                return false;
            }
            if d.topology_version != 0 {
                // A node is ahead: slots may have changed owners, and entries cached by our
                // version may no longer be invalidated by whoever takes the writes. No hits from
                // now until the new topology is adopted.
                if let Some(near) = hub.near() {
                    near.saw_version(d.topology_version);
                }
                link.catch_up(backend, d.topology_version);
                return false;
            }
            if d.ack == 0 {
                return true;
            }
            if d.ack == id {
                // The node tracks for this stream from here on; reads it applied before (while
                // the stream was down or opening) registered nowhere: every tracking client
                // forgets what it cached, as after a FLUSHALL.
                hub.tracking().flush_all();
            }
            for tx in self.acks.remove(&d.ack).unwrap_or_default() {
                let _ = tx.send(());
            }
            false
        });
        hub.deliver(&deliveries);
    }

    /// A change of this router's registrations, sent to the node.
    fn send(&mut self, requests: &mpsc::UnboundedSender<SubscribeRequest>, change: Change) {
        let ack = change.ack.map_or(0, |tx| {
            let id = self.hub.ack_id();
            self.acks.insert(id, vec![tx]);
            id
        });
        let tracking = if change.tracking { self.hub.tracking_request() } else { None };
        let monitoring = match change.monitoring {
            Some(true) => 1,
            Some(false) => 2,
            None => 0,
        };
        let _ = requests.send(SubscribeRequest {
            changes: change.subs,
            ack,
            tracking,
            monitoring,
            monitor_lines: change.lines,
            ..Default::default()
        });
    }
}
