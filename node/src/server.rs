//! Runs a node: the gRPC server (data API + standard health service), the active expiry task and
//! the optional ops HTTP endpoint, until a shutdown signal.
//!
//! Shutdown order: a primary with replicas hands its shard over, health flips to NOT_SERVING, the
//! listener stops accepting, every `Execute` stream answers the batch in hand and ends, hyper
//! drains the connections, the expiry task stops. The drain deadline (`drain_timeout` from the
//! signal) bounds all of it together; only the final snapshot comes after it.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shoal_wire::auth::{Check, ClusterSecret, Credentials};
use shoal_wire::client::{CONNECTION_WINDOW_BYTES, MAX_MESSAGE_BYTES, STREAM_WINDOW_BYTES};
use shoal_wire::local::{ExecuteOpener, LinkIo, LocalExecute, LocalListener};
use shoal_wire::proto::node_server::NodeServer;
use shoal_wire::tls::LinkTls;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

use crate::membership::Membership;
use crate::persistence::Persistence;
use crate::service::NodeService;
use crate::state::NodeState;
use crate::store::Store;

/// Default pull rate for migrations into a node: 8 MiB/s keeps client p99 within 3x of steady
/// state on a small machine (docs/benchmarks.md).
pub const DEFAULT_MIGRATE_RATE: u64 = 8 << 20;
/// Keys each shard may expire per active-expiry pass.
const EXPIRE_BUDGET_PER_SHARD: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// Below the failover writer's default down-after (1 s): a primary stopped long enough to be
/// replaced has fenced itself by the time it runs again.
pub const DEFAULT_STALL_FENCE: Duration = Duration::from_millis(500);
/// Routers on a topology file see a switch within its 200 ms poll; the rest learn it from the
/// `moved` replies sent meanwhile.
pub const DEFAULT_HANDOVER_LINGER: Duration = Duration::from_millis(1000);

#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// How often the active expiry task runs.
    pub expire_interval: Duration,
    /// After a shutdown signal, how long to wait for connections to drain.
    pub drain_timeout: Duration,
    /// Where snapshots live; `None` turns persistence off.
    pub data_dir: Option<PathBuf>,
    /// Write a snapshot this often (`None`: only on demand and at shutdown).
    pub snapshot_interval: Option<Duration>,
    /// Snapshots kept in the data directory.
    pub snapshot_keep: usize,
    /// This node's id in topologies.
    pub node_id: Option<u32>,
    /// A topology file to watch.
    pub topology_file: Option<PathBuf>,
    /// Most bytes per second pulled for migrations (0: unlimited).
    pub migrate_rate: u64,
    /// Scripts: the Lua VM's memory limit and Redis's busy-reply-threshold (ms).
    pub lua_memory_limit: usize,
    pub busy_reply_threshold: u64,
    /// A primary with replicas that did not run for this long fences itself until the failover
    /// writer confirms it (`Membership::check_stall`; zero: never).
    pub stall_fence: Duration,
    /// After handing its shard over on SIGTERM, how long a primary keeps answering (`moved`)
    /// before it stops.
    pub handover_linger: Duration,
    /// Calls without this secret are refused (`shoal_wire::auth`); None: none is asked for
    /// (in-process tests; the `shoal-node` binary asks for one unless told `--no-auth`).
    pub cluster_secret: Option<ClusterSecret>,
    /// Mutual TLS on this node's port and on its calls to other nodes (`--link-tls-*`).
    pub link_tls: Option<LinkTls>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            expire_interval: Duration::from_millis(100),
            drain_timeout: Duration::from_secs(10),
            data_dir: None,
            snapshot_interval: None,
            snapshot_keep: 2,
            node_id: None,
            topology_file: None,
            migrate_rate: DEFAULT_MIGRATE_RATE,
            lua_memory_limit: crate::script::DEFAULT_MEMORY_LIMIT,
            busy_reply_threshold: crate::script::DEFAULT_BUSY_MS,
            stall_fence: DEFAULT_STALL_FENCE,
            handover_linger: DEFAULT_HANDOVER_LINGER,
            cluster_secret: None,
            link_tls: None,
        }
    }
}

/// Serves `state` on `listener` until `shutdown` resolves; returns once drained.
///
/// Without node-link TLS, clients in this process reach it through in-memory pipes instead
/// (`shoal_wire::local`): its address is registered here, before the returned future first
/// runs, so that a client dialling as soon as [`NodeHandle::start`] returns takes a pipe too.
pub fn run(
    listener: TcpListener,
    state: Arc<NodeState>,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> impl Future<Output = Result<(), NodeError>> + Send {
    let (stop_tx, stop_rx) = watch::channel(false);
    let check = Check::new(options.cluster_secret.clone(), state.metrics.unauthenticated.clone());
    let pipes = match (&options.link_tls, listener.local_addr()) {
        (None, Ok(addr)) => {
            // This process's routers also open the data path's stream without the wire.
            let (state, stopping) = (state.clone(), stop_rx.clone());
            let open: ExecuteOpener =
                Arc::new(move |batches| crate::execute::open(state.clone(), batches, stopping.clone()));
            let execute = LocalExecute { open, check: check.clone() };
            Pipes(Some(LocalListener::bind(&addr.to_string(), Some(execute))))
        }
        _ => Pipes(None),
    };
    serve(listener, pipes, state, options, check, (stop_tx, stop_rx), shutdown)
}

async fn serve(
    listener: TcpListener,
    pipes: Pipes,
    state: Arc<NodeState>,
    options: ServeOptions,
    check: Check,
    (stop_tx, stop_rx): (watch::Sender<bool>, watch::Receiver<bool>),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), NodeError> {
    let addr = listener.local_addr()?;
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<NodeServer<NodeService>>().await;
    let service = NodeServer::new(NodeService::new(state.clone(), stop_rx.clone()))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    // Every RPC is checked (the gRPC health service is not: it tells nothing and probes use it).
    let service = InterceptedService::new(service, check);
    let expiry = tokio::spawn(active_expiry(state.store.clone(), options.expire_interval, stop_rx.clone()));
    spawn_background(&state, &options, &stop_rx);
    let membership = state.membership.clone();
    let linger = options.handover_linger;
    // When draining must end: the drain time from the shutdown signal, for the hand-over, the
    // gRPC server's connections and the in-process streams together.
    let drained_by = Arc::new(std::sync::OnceLock::new());
    let drain_start = drained_by.clone();
    let drain_timeout = options.drain_timeout;
    // The signal is awaited by a task of ours, not by the gRPC server: the server polls its
    // shutdown future only while it accepts, and the steps before the stop must run (and be
    // bounded) whatever the server is doing. The server only watches `stop`.
    let graceful = tokio::spawn(async move {
        shutdown.await;
        let by = *drain_start.get_or_init(|| tokio::time::Instant::now() + drain_timeout);
        // A primary with replicas hands its shard over first (lossless, no client error), within
        // the drain time; the outer bound only guards a step that would not end by itself.
        let handover = crate::replication::handover::before_exit(&membership, linger, by);
        if tokio::time::timeout_at(by, handover).await.is_err() {
            tracing::warn!("the hand-over did not end within the drain time; exiting without it");
        }
        tracing::info!(%addr, "node shutting down: finishing in-flight batches");
        health.set_not_serving::<NodeServer<NodeService>>().await;
        let _ = stop_tx.send(true);
    });
    let signal = stopped(&stop_rx);
    tracing::info!(%addr, shards = state.store.shard_count(), "node serving gRPC");
    let router = Server::builder()
        // Large windows so one router stream can carry big batches without stalling on
        // flow-control round trips.
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
        .http2_keepalive_interval(Some(Duration::from_secs(10)))
        .add_service(health_service)
        .add_service(service);
    let link_tls = options.link_tls.clone();
    let links_stop = stop_rx.clone();
    let refused = state.metrics.link_tls_refused.clone();
    let served = async move {
        match &link_tls {
            None => {
                // Clients in this process (an embedded cluster's router and nodes) come through
                // the pipes registered in `run`, the others over TCP.
                let tcp = TcpIncoming::from(listener).with_nodelay(Some(true)).map(|c| c.map(LinkIo::Tcp));
                router.serve_with_incoming_shutdown(tcp.merge(pipes), signal).await
            }
            Some(tls) => {
                tokio::spawn(tls.server.clone().watch("node links", stopped(&links_stop)));
                let incoming = crate::link_tls::incoming(listener, tls.server.clone(), refused, links_stop);
                router.serve_with_incoming_shutdown(incoming, signal).await
            }
        }
    };
    // The drain deadline starts with the shutdown signal, not with the server.
    let mut stopping = stop_rx;
    let deadline = drained_by.clone();
    let drain_deadline = async move {
        let _ = stopping.wait_for(|s| *s).await;
        tokio::time::sleep_until(*deadline.get_or_init(|| tokio::time::Instant::now() + drain_timeout)).await;
    };
    let result = tokio::select! {
        r = served => r.map_err(NodeError::from),
        _ = drain_deadline => {
            tracing::warn!("connections did not drain in time; exiting anyway");
            Ok(())
        }
    };
    // (Without a shutdown signal, the server failed: the full drain time.)
    let drained_by = *drained_by.get_or_init(|| tokio::time::Instant::now() + options.drain_timeout);
    graceful.abort();
    drain_local_streams(&state, drained_by).await;
    expiry.abort();
    finish(&state).await;
    tracing::info!(%addr, "node stopped");
    result
}

/// Resolves once `stop` says stop.
fn stopped(stop: &watch::Receiver<bool>) -> impl Future<Output = ()> + Send + 'static {
    let mut stop = stop.clone();
    async move {
        let _ = stop.wait_for(|s| *s).await;
    }
}

/// The node's background work until `stop`: reclaiming dropped slots, telling routers of busy
/// scripts, the stall ticker, the topology file's watch and periodic snapshots.
fn spawn_background(state: &Arc<NodeState>, options: &ServeOptions, stop: &watch::Receiver<bool>) {
    let until_stopped = || {
        let mut stop = stop.clone();
        async move {
            let _ = stop.wait_for(|s| *s).await;
        }
    };
    tokio::spawn(state.membership.clone().run_purger(until_stopped()));
    // Routers hear when a script here passes busy-reply-threshold and when it ends
    // (`Delivery.busy`), for `--busy-reply-scope cluster`.
    let busy = state.clone();
    let stopped = until_stopped();
    tokio::spawn(async move { busy.scripts.busy_changes(|now| busy.pubsub.set_busy(now), stopped).await });
    tokio::spawn(state.membership.clone().run_ticker(options.stall_fence, until_stopped()));
    if let Some(path) = options.topology_file.clone() {
        let every = Duration::from_millis(200);
        tokio::spawn(state.membership.clone().watch_file(path, every, until_stopped()));
    }
    if let (Some(every), true) = (options.snapshot_interval, state.persistence.enabled()) {
        tokio::spawn(state.persistence.clone().run_periodic(every, until_stopped()));
    }
}

/// Streams opened in-process (`shoal_wire::local::open_execute`) are not the gRPC server's to
/// drain: each ends after its batch in hand once its router reads on (or drops it). Waits for
/// them too, until `drained_by`, so that the final snapshot holds what they applied.
async fn drain_local_streams(state: &NodeState, drained_by: tokio::time::Instant) {
    while state.metrics.streams.get() > 0 && tokio::time::Instant::now() < drained_by {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Once every stream is done: stops following a primary and writes the final snapshot.
async fn finish(state: &NodeState) {
    // A replica stops following (in-process nodes outlive their server: embedded mode, tests).
    state.membership.replication.stop_following();
    // Every batch has been answered and no stream is open: the store is quiet, so this snapshot
    // holds every acknowledged write.
    if state.persistence.enabled()
        && let Err(e) = state.persistence.final_snapshot().await
    {
        tracing::error!(error = %e, "final snapshot failed");
    }
}

/// The pipes dialled to this node from its own process, as connections to serve (none with
/// node-link TLS).
struct Pipes(Option<LocalListener>);

impl tokio_stream::Stream for Pipes {
    type Item = std::io::Result<LinkIo>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        match &mut self.0 {
            Some(listener) => listener.poll_accept(cx).map(|pipe| pipe.map(|p| Ok(LinkIo::Pipe(p)))),
            None => std::task::Poll::Ready(None),
        }
    }
}

/// Active expiry: every `interval`, each shard drops up to a budget of expired keys; passes repeat
/// while they keep finding a lot (over a quarter of the budget), for at most a quarter of the
/// interval, so a mass expiry is reclaimed quickly without starving requests.
async fn active_expiry(store: Arc<Store>, interval: Duration, mut stop: watch::Receiver<bool>) {
    if store.base().is_some() {
        let s = store.clone();
        let scheduled = tokio::task::spawn_blocking(move || s.index_base_expiry()).await.unwrap_or(0);
        tracing::debug!(scheduled, "snapshot keys with a TTL scheduled for active expiry");
    }
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let full_pass = EXPIRE_BUDGET_PER_SHARD * store.shard_count();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        store.note_peak();
        if !store.active_expire.load(std::sync::atomic::Ordering::Relaxed) {
            continue;
        }
        let deadline = Instant::now() + interval / 4;
        loop {
            let started = Instant::now();
            let removed = store.purge_expired(EXPIRE_BUDGET_PER_SHARD);
            // Redis's `expire-cycle` latency event: one pass of active expiry (a large value's
            // removal is most of it).
            store.latency.add_if_needed("expire-cycle", started.elapsed().as_millis() as u64, store.now_ms());
            if removed * 4 < full_pass || Instant::now() >= deadline {
                break;
            }
            tokio::task::yield_now().await;
        }
    }
}

/// A node running in this process (the router's embedded mode, and tests).
pub struct NodeHandle {
    pub addr: SocketAddr,
    pub state: Arc<NodeState>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), NodeError>>,
}

impl std::fmt::Debug for NodeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeHandle").field("addr", &self.addr).finish_non_exhaustive()
    }
}

/// The state of a node over the empty `store`: the newest snapshot in `options.data_dir` loaded
/// under it, and the topology in `options.topology_file` if it already holds a usable one (else
/// the node waits for the file). `advertised` is the address topologies know this node by.
pub fn open_state(
    store: Arc<Store>,
    advertised: String,
    options: &ServeOptions,
) -> Result<Arc<NodeState>, NodeError> {
    let persistence = Persistence::open(store.clone(), options.data_dir.clone(), options.snapshot_keep)?;
    let membership = Membership::new(
        options.node_id,
        Some(advertised),
        store.clone(),
        options.data_dir.clone(),
        Credentials {
            secret: options.cluster_secret.clone(),
            tls: options.link_tls.as_ref().map(|t| t.client.clone()),
        },
    );
    membership.set_migrate_rate(options.migrate_rate);
    if let Some(path) = &options.topology_file {
        match shoal_wire::topology_file::read(path) {
            Ok(Some(t)) => {
                membership.adopt(t);
            }
            Ok(None) => tracing::info!(file = %path.display(), "no topology yet; watching the file"),
            Err(e) => tracing::warn!(error = %e, "no usable topology yet; watching the file"),
        }
    }
    let state = NodeState::new(store, persistence, membership);
    state.scripts.set_limits(options.lua_memory_limit, options.busy_reply_threshold);
    Ok(Arc::new(state))
}

impl NodeHandle {
    /// Loads the newest snapshot from `options.data_dir` (if any) under the empty `store`, binds
    /// `addr` (port 0 picks a free port) and starts serving.
    pub async fn start(
        addr: SocketAddr,
        store: Arc<Store>,
        options: ServeOptions,
    ) -> Result<NodeHandle, NodeError> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let state = open_state(store, addr.to_string(), &options)?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(run(listener, state.clone(), options, async move {
            let _ = stopped.await;
        }));
        Ok(NodeHandle { addr, state, stop: Some(stop), task })
    }

    /// Graceful shutdown without handing the shard over first (the whole cluster is stopping,
    /// or the shard has left the topology).
    pub async fn shutdown_without_handover(self) -> Result<(), NodeError> {
        self.state.membership.replication.set_exiting();
        self.shutdown().await
    }

    /// Graceful shutdown, as on SIGTERM.
    pub async fn shutdown(mut self) -> Result<(), NodeError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.unwrap_or(Ok(()))
    }
}
