//! Shoal router: clients speak RESP (TCP, TLS, Unix socket), the binary fast path or HTTP; each
//! key is routed by its slot to the node that owns it, over one batched gRPC stream per node.
//!
//! A request's life, top to bottom (docs/architecture.md, "A request's walk", follows one GET and
//! one MULTI through these files):
//!
//! - [`server`] accepts on every listener (maxclients, protected mode, the TLS handshake) and
//!   hands each connection to its protocol in [`front`]: `front::resp` (RESP framing; a
//!   connection whose first byte is 0xF5 goes on to `front::fast`, the binary fast path of
//!   docs/fast-path.md) or `front::http` (the key/value API and the ops endpoints). Each protocol only frames requests and
//!   encodes replies, inside one connection [`guard`] (kill switch, auth deadline, buffer budget,
//!   output limit, shutdown).
//! - [`pipeline`]: one request's life, the same on every protocol: admit (auth, ACL, pause) ->
//!   dispatch (MULTI queueing, the near cache, the command's handler, the lane that batches
//!   one-key ops) -> settle -> record (stats, slow log, hot keys) -> the typed reply.
//! - [`cmd`]: one file per command (its spec beside its handler, listed in `cmd::registry`; a
//!   spec points at Redis's declaration of the command in the table `shoal_wire::acl` generates
//!   from redis-server, and adds only Shoal's own: handler, subcommands, lane class). Handlers
//!   parse arguments with Redis's texts and build ops, or ask the backend for calls.
//! - [`backend`]: the only layer that knows topology versions: calls for one key, many keys,
//!   every node, a unit (transaction, script), a blocking wait; one settle loop for `moved`,
//!   nodes that left and slots in motion; one [`backend::link::NodeLink`] per node batches the
//!   ops of every connection onto its stream.
//!
//! Below them, shared state that imports nothing above it: [`state`] (settings, the buffer
//! budget and [`state::RouterState`], which holds the rest), [`session`] (per connection,
//! MULTI's queue and WATCH list), [`clients`] (CLIENT LIST / KILL), [`pause`] (CLIENT PAUSE),
//! [`keylocks`] (writes over keys of several nodes queue by key),
//! [`acl`] (users and rules; the check is `shoal_wire::acl`, shared with the nodes), [`pubsub`]
//! (this router's subscribers and one `Subscribe` stream per node, and CLIENT TRACKING's
//! table), [`monitor`] (MONITOR's lines, queued like pub/sub messages), [`nearcache`]
//! (`--near-cache`, invalidated by the nodes), [`hotkeys`],
//! [`stats`] (INFO commandstats, SLOWLOG), [`latency`] (the latency monitor), [`metrics`] (counters; [`scrape`] renders `/metrics`)
//! and [`resp`]'s parser and reply encoder.
//!
//! Around them: [`config`] (the command line), [`embedded`] (in-process nodes and coordinator
//! for the one-command local cluster: cargo feature `embedded`, on by default; production builds
//! leave it and the store out), [`reshard`] (`shoal-router reshard`), [`check`] (`shoal-router
//! check`, the chart's `helm test`), [`fuzzing`] (the TLS-wrapped RESP path and the fast path as
//! the fuzz targets drive them).

pub mod acl;
pub mod backend;
pub mod check;
pub mod clients;
pub mod cmd;
pub mod config;
pub mod embedded;
pub mod front;
pub mod fuzzing;
pub mod guard;
pub mod hotkeys;
pub mod keylocks;
pub mod latency;
pub mod metrics;
pub mod monitor;
pub mod nearcache;
pub mod pause;
pub mod pipeline;
pub mod pubsub;
pub mod reshard;
pub mod resp;
pub mod scrape;
pub mod server;
pub mod session;
pub mod state;
pub mod stats;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use shoal_wire::Topology;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::backend::{Backend, LinkOptions};
use crate::config::RouterArgs;
use crate::embedded::{EmbeddedCluster, EmbeddedOptions};
use crate::state::{RouterState, Settings};
use shoal_wire::auth::{ClusterSecret, Credentials};

/// A running router (and its embedded nodes, if any).
pub struct Router {
    /// The plaintext RESP and HTTP listeners (`None`: turned off).
    resp: Option<SocketAddr>,
    http: Option<SocketAddr>,
    /// RESP over TLS (`--tls-port`) and HTTPS (`--https`).
    pub tls_addr: Option<SocketAddr>,
    pub https_addr: Option<SocketAddr>,
    /// `--metrics-addr`: /metrics apart from the API.
    pub metrics_addr: Option<SocketAddr>,
    pub unix_socket: Option<PathBuf>,
    /// The socket file this router created (removed at shutdown only if it is still ours).
    socket_file: Option<server::SocketFile>,
    pub state: Arc<RouterState>,
    pub embedded: Option<Arc<EmbeddedCluster>>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("resp", &self.resp)
            .field("http", &self.http)
            .field("tls", &self.tls_addr)
            .field("https", &self.https_addr)
            .finish()
    }
}

/// Reads the topology file, waiting for it to appear: in Kubernetes the operator publishes the
/// first topology only once the nodes are up, and a router may start before that.
async fn wait_for_topology(path: &std::path::Path) -> anyhow::Result<shoal_wire::Topology> {
    let mut waited = Duration::ZERO;
    loop {
        if let Some(t) = shoal_wire::topology_file::read(path)? {
            return Ok(t);
        }
        if waited.as_secs().is_multiple_of(30) && waited.subsec_millis() == 0 {
            tracing::info!(
                file = %path.display(),
                "waiting for the topology (create it with `shoal-router reshard --topology-file ...`, or let the operator publish it)"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        waited += Duration::from_millis(200);
    }
}

/// Binds a TCP listener if one is asked for.
async fn bind(addr: Option<SocketAddr>) -> anyhow::Result<Option<TcpListener>> {
    match addr {
        Some(a) => Ok(Some(TcpListener::bind(a).await.with_context(|| format!("cannot listen on {a}"))?)),
        None => Ok(None),
    }
}

/// The secret and node-link certificates calls to the nodes carry (and the secret an embedded
/// cluster's nodes require).
fn node_credentials(args: &RouterArgs) -> anyhow::Result<(Option<ClusterSecret>, Credentials)> {
    let given = args.auth.credentials()?;
    // An embedded cluster has a secret of its own unless one is given (its nodes' ports are on
    // loopback, where other local processes could reach them).
    let secret = match (&given.secret, &given.tls, args.embedded()) {
        (None, _, Some(_)) => Some(ClusterSecret::generate()),
        (None, None, None) => {
            tracing::warn!(
                "no cluster secret (SHOAL_CLUSTER_SECRET, --cluster-secret-file) and no node-link certificates (--link-tls-*): nodes that require one will refuse this router"
            );
            None
        }
        _ => given.secret.clone(),
    };
    // Embedded nodes serve plain gRPC on loopback (with their secret); separate nodes get the
    // node-link certificates too.
    let tls = if args.embedded().is_some() { None } else { given.tls.clone() };
    Ok((secret.clone(), Credentials { secret, tls }))
}

/// The nodes to route to: the embedded cluster (started here), the topology file (waited for),
/// or the fixed `--nodes` list; and whether the nodes follow that topology too.
async fn start_cluster(
    args: &RouterArgs,
    secret: Option<ClusterSecret>,
) -> anyhow::Result<(Option<Arc<EmbeddedCluster>>, Topology, bool)> {
    Ok(match (args.embedded(), &args.topology_file) {
        (Some(n), _) => {
            let cluster = EmbeddedCluster::start(EmbeddedOptions {
                nodes: n,
                replicas: args.replicas,
                maxmemory: args.embedded_maxmemory as usize,
                policy: args.embedded_maxmemory_policy.clone(),
                data_dir: args.data_dir.clone(),
                snapshot_interval: (args.snapshot_interval > 0)
                    .then(|| Duration::from_secs(args.snapshot_interval)),
                secret: secret.expect("generated with the credentials"),
            })
            .await?;
            let topology = cluster.subscribe().borrow().clone().context("no topology")?;
            tracing::info!(nodes = ?topology.nodes, "embedded nodes running");
            (Some(cluster), topology, true)
        }
        (None, Some(path)) => (None, wait_for_topology(path).await?, true),
        (None, None) => {
            let topology = Topology::even(&args.nodes);
            topology.validate().context("invalid node list")?;
            (None, topology, false)
        }
    })
}

/// Every listener the command line asks for, bound.
struct Listeners {
    resp: Option<TcpListener>,
    http: Option<TcpListener>,
    tls: Option<TcpListener>,
    https: Option<TcpListener>,
    metrics: Option<TcpListener>,
    unix: Option<server::UnixSocket>,
    socket_file: Option<server::SocketFile>,
}

/// Where the listeners are.
struct Addrs {
    resp: Option<SocketAddr>,
    http: Option<SocketAddr>,
    tls: Option<SocketAddr>,
    https: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
}

impl Listeners {
    async fn bind(args: &RouterArgs) -> anyhow::Result<Listeners> {
        let (unix, socket_file) = match &args.unix_socket {
            Some(path) => {
                let (listener, file) = server::bind_unix(path, args.unix_socket_perm)
                    .with_context(|| format!("cannot listen on {}", path.display()))?;
                (Some(listener), Some(file))
            }
            None => (None, None),
        };
        Ok(Listeners {
            resp: bind(args.resp.0).await?,
            http: bind(args.http.0).await?,
            tls: bind(args.tls.tls_port.map(|p| p.resolve(args.resp))).await?,
            https: bind(args.tls.https.map(|p| p.resolve(args.http))).await?,
            metrics: bind(args.metrics_addr).await?,
            unix,
            socket_file,
        })
    }

    fn addrs(&self) -> Addrs {
        Addrs {
            resp: self.resp.as_ref().map(server::bound),
            http: self.http.as_ref().map(server::bound),
            tls: self.tls.as_ref().map(server::bound),
            https: self.https.as_ref().map(server::bound),
            metrics: self.metrics.as_ref().map(server::bound),
        }
    }
}

/// The settings that shape request handling, from the command line.
fn settings(args: &RouterArgs, listeners: &Listeners) -> Settings {
    let addrs = listeners.addrs();
    Settings {
        requirepass: args.requirepass.clone().filter(|p| !p.is_empty()),
        metrics_token: args.metrics_token.clone().filter(|t| !t.is_empty()),
        protected_mode: args.protected_mode,
        deadline: args.deadline(),
        maxclients: args.maxclients,
        proto_max_bulk_len: args.proto_max_bulk_len as usize,
        max_args: args.max_args,
        query_buffer_limit: args.client_query_buffer_limit as usize,
        output_buffer_limit: args.client_output_buffer_limit as usize,
        http_max_body: args.http_max_body as usize,
        auth_timeout: args.auth_timeout(),
        http_body_timeout: args.http_body_timeout(),
        shutdown_delay: Duration::from_millis(args.shutdown_delay_ms),
        tls_handshake_timeout: args.tls.handshake_timeout(),
        idle_timeout_secs: args.timeout,
        request_buffer_budget: args.request_buffer_budget.resolve(shoal_telemetry::runtime::memory_limit()),
        tcp_port: addrs.resp.or(addrs.tls).map_or(0, |a| a.port()),
        read_from: args.read_from,
        aclfile: args.aclfile.clone(),
        hotkeys_capacity: args.hotkeys_capacity,
        hotkeys_decay: (args.hotkeys_decay_secs > 0).then(|| Duration::from_secs(args.hotkeys_decay_secs)),
        fast_max_in_flight: args.fast_max_in_flight as usize,
        near_cache: args.near_cache as usize,
        near_cache_lease: Duration::from_millis(args.near_cache_lease_ms),
        enable_debug_command: args.enable_debug_command,
        cluster: crate::state::ClusterSettings {
            mode: args.cluster_mode,
            announce_host: args.cluster_announce_host.clone(),
            announce_port: args.cluster_announce_port,
            ..Default::default()
        },
        busy_reply_scope: args.busy_reply_scope,
    }
}

/// The background tasks that keep the router current: the topology source (the embedded
/// coordinator's store, or the file), the ACL file, the hot-key decay clock.
fn follow(
    args: &RouterArgs,
    state: &Arc<RouterState>,
    embedded: Option<&Arc<EmbeddedCluster>>,
    stopped: &watch::Receiver<bool>,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let mut watchers = Vec::new();
    if let Some(cluster) = embedded {
        let mut rx = cluster.subscribe();
        let (state, mut stop) = (state.clone(), stopped.clone());
        watchers.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    changed = rx.changed() => if changed.is_err() { return },
                    _ = stop.changed() => return,
                }
                let t = rx.borrow_and_update().clone();
                if let Some(t) = t {
                    state.backend.adopt(t);
                }
            }
        }));
    } else if let Some(path) = args.topology_file.clone() {
        let state = state.clone();
        let adopt = move |t| {
            state.backend.adopt(t);
        };
        let stopped = until_stopped(stopped.clone());
        watchers.push(tokio::spawn(shoal_wire::topology_file::watch(
            path,
            Duration::from_millis(200),
            adopt,
            stopped,
        )));
    }
    watchers.extend(cmd::acl::follow_file(state, stopped.clone())?);
    if let Some(period) = state.settings.hotkeys_decay.filter(|_| state.hotkeys.enabled()) {
        // The hot-key counts' decay clock: each step halves them (lazily, see hotkeys.rs).
        let (state, mut stop) = (state.clone(), stopped.clone());
        watchers.push(tokio::spawn(async move {
            let mut every = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            loop {
                tokio::select! {
                    _ = every.tick() => state.hotkeys.tick(),
                    _ = stop.changed() => return,
                }
            }
        }));
    }
    Ok(watchers)
}

/// Completes once `stop` says so.
async fn until_stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Serves every bound listener: RESP on TCP, TLS and the Unix socket, the HTTP API (and HTTPS),
/// and the ops endpoints.
fn serve(
    args: &RouterArgs,
    state: &Arc<RouterState>,
    listeners: Listeners,
    stopped: &watch::Receiver<bool>,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let tls_files = args.tls.files().map_err(anyhow::Error::msg)?;
    let tls_config = |alpn| -> anyhow::Result<_> {
        let files = tls_files.as_ref().expect("asked for only with a TLS listener");
        shoal_wire::tls::reloading_server(files, args.tls.tls_auth_clients, alpn).context("client TLS")
    };
    let mut tasks = Vec::new();
    if let Some(resp) = listeners.resp {
        tasks.push(tokio::spawn(server::serve(resp, state.clone(), stopped.clone())));
    }
    if let Some(tcp) = listeners.tls {
        let config = tls_config(&[])?;
        tasks.push(tokio::spawn(config.clone().watch("resp", until_stopped(stopped.clone()))));
        let listener = server::TlsListener { tcp, config };
        tasks.push(tokio::spawn(server::serve(listener, state.clone(), stopped.clone())));
    }
    if let Some(unix) = listeners.unix {
        tasks.push(tokio::spawn(server::serve(unix, state.clone(), stopped.clone())));
    }
    let api = |tls: Option<shoal_telemetry::http::Tls>, listener| {
        let state = state.clone();
        tokio::spawn(shoal_telemetry::http::serve_on(
            listener,
            tls,
            move |peer| {
                let conn = front::http::Conn::new(peer, state.clone());
                move |req| front::http::handle(req, conn.clone())
            },
            until_stopped(stopped.clone()),
            Duration::from_secs(5),
        ))
    };
    if let Some(http) = listeners.http {
        tasks.push(api(None, http));
    }
    if let Some(https) = listeners.https {
        let config = tls_config(&[b"http/1.1"])?;
        tasks.push(tokio::spawn(config.clone().watch("https", until_stopped(stopped.clone()))));
        let tls = shoal_telemetry::http::Tls {
            acceptor: Arc::new(move || config.acceptor()),
            handshake_timeout: state.settings.tls_handshake_timeout,
        };
        tasks.push(api(Some(tls), https));
    }
    if let Some(listener) = listeners.metrics {
        let state = state.clone();
        tasks.push(tokio::spawn(shoal_telemetry::http::serve(
            listener,
            move |req, _peer| front::http::handle_ops(req, state.clone()),
            until_stopped(stopped.clone()),
            Duration::from_secs(2),
        )));
    }
    Ok(tasks)
}

impl Router {
    /// Binds every listener and starts serving; returns once clients can connect.
    pub async fn start(args: &RouterArgs) -> anyhow::Result<Router> {
        // Before anything computes a key's slot (embedded nodes share this process's rules).
        shoal_wire::slot::set_colocation(&args.colocate)?;
        let (stop, stopped) = watch::channel(false);
        let (secret, credentials) = node_credentials(args)?;
        let (embedded, topology, managed) = start_cluster(args, secret).await?;
        let listeners = Listeners::bind(args).await?;
        let settings = settings(args, &listeners);
        if settings.request_buffer_budget != usize::MAX {
            tracing::info!(bytes = settings.request_buffer_budget, "request buffer budget");
        }
        let links = LinkOptions { deadline: settings.deadline, credentials, ..LinkOptions::default() };
        let nodes = topology.nodes.len();
        let state = RouterState::new(settings, Backend::new(topology, links, managed), embedded.clone());
        state.clients.set_command_names(cmd::name_of);
        if embedded.is_some() && args.embedded_maxmemory > 0 {
            state.memory_limited.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let mut tasks = follow(args, &state, embedded.as_ref(), &stopped)?;
        tokio::spawn(state.pubsub.clone().follow(state.backend.clone()));
        let addrs = listeners.addrs();
        let socket_file = listeners.socket_file.clone();
        tasks.extend(serve(args, &state, listeners, &stopped)?);
        tracing::info!(
            resp = ?addrs.resp, http = ?addrs.http, tls = ?addrs.tls, https = ?addrs.https, metrics = ?addrs.metrics,
            unix = ?args.unix_socket, nodes, "router serving"
        );
        Ok(Router {
            resp: addrs.resp,
            http: addrs.http,
            tls_addr: addrs.tls,
            https_addr: addrs.https,
            metrics_addr: addrs.metrics,
            unix_socket: args.unix_socket.clone(),
            socket_file,
            state,
            embedded,
            stop,
            tasks,
        })
    }

    /// The plaintext RESP address (tests and tools; panics if `--resp off`).
    pub fn resp_addr(&self) -> SocketAddr {
        self.resp.expect("the plaintext RESP listener is off (--resp off)")
    }

    /// The plaintext HTTP address (panics if `--http off`).
    pub fn http_addr(&self) -> SocketAddr {
        self.http.expect("the plaintext HTTP listener is off (--http off)")
    }

    /// The state of every embedded node (tests, introspection).
    #[cfg(feature = "embedded")]
    pub async fn node_states(&self) -> Vec<Arc<shoal_node::state::NodeState>> {
        match &self.embedded {
            Some(e) => e.node_states().await,
            None => Vec::new(),
        }
    }

    /// Graceful shutdown: unready at once (`/readyz` 503); serving on for the shutdown delay,
    /// so that the load balancer in front stops sending clients here while those already here
    /// are still answered; then stop accepting, let connections finish the request in hand (an
    /// idle one closes at once), then stop the embedded nodes.
    pub async fn shutdown(self) {
        self.state.start_draining();
        let delay = self.state.settings.shutdown_delay;
        if !delay.is_zero() {
            tracing::info!(
                delay_ms = delay.as_millis() as u64,
                "stopping: /readyz answers 503; serving on for the shutdown delay before closing connections"
            );
            tokio::time::sleep(delay).await;
        }
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
        // Connections mid-request get a moment to write their replies.
        let deadline =
            tokio::time::Instant::now() + self.state.settings.deadline + Duration::from_millis(200);
        while self.state.connected_clients() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.state.backend.close();
        self.state.pubsub.close();
        if let Some(nodes) = self.embedded {
            nodes.shutdown().await;
        }
        if let Some(file) = self.socket_file {
            file.remove_if_ours();
        }
        tracing::info!("router stopped");
    }
}
