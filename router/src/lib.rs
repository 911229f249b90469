//! Shoal router: clients speak RESP (TCP, Unix socket) or HTTP; each key is routed by its slot to
//! the node that owns it, over one batched gRPC stream per node.
//!
//! Data flow for a RESP request:
//! [`server`] accepts (protected mode, maxclients) → [`connection`] reads and parses with
//! [`resp::parse`] → [`cmd::dispatch`] checks name, arity, auth and runs the command from
//! `cmd/<name>.rs`, which routes keys through [`backend::Routing`] and queues ops on the node's
//! [`backend::link::NodeLink`] → the link batches ops from all connections onto the node's stream →
//! replies come back in order and are encoded by [`resp::reply`].
//! The HTTP API ([`http`]) builds the same command arguments and uses the same dispatch.
//!
//! - [`config`]: the command line. [`state`]: settings and shared state. [`session`]: per client.
//! - [`embedded`]: in-process nodes and coordinator for the one-command local cluster.
//! - [`reshard`]: the `shoal-router reshard` command (the coordinator for separate processes).
//! - [`check`]: the `shoal-router check` command (a client-side end-to-end check; `helm test`).
//! - [`metrics`]: the `/metrics` text.

pub mod backend;
pub mod check;
pub mod cmd;
pub mod config;
pub mod connection;
pub mod embedded;
pub mod http;
pub mod metrics;
pub mod reshard;
pub mod resp;
pub mod server;
pub mod session;
pub mod state;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use shoal_node::store::StoreConfig;
use shoal_wire::Topology;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::backend::{Cluster, LinkOptions};
use crate::config::RouterArgs;
use crate::embedded::EmbeddedCluster;
use crate::state::{RouterState, Settings};

/// A running router (and its embedded nodes, if any).
pub struct Router {
    pub resp_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub unix_socket: Option<PathBuf>,
    pub state: Arc<RouterState>,
    pub embedded: Option<Arc<EmbeddedCluster>>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("resp_addr", &self.resp_addr)
            .field("http_addr", &self.http_addr)
            .finish()
    }
}

/// Reads the topology file, waiting for it to appear: in Kubernetes the operator publishes the
/// first topology only once the nodes are up, and a router may start before that.
async fn wait_for_topology(path: &std::path::Path) -> anyhow::Result<shoal_wire::Topology> {
    let mut waited = Duration::ZERO;
    loop {
        if let Some(t) = shoal_coordinator::FileStore::read(path)? {
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

impl Router {
    /// Binds every listener and starts serving; returns once clients can connect.
    pub async fn start(args: &RouterArgs) -> anyhow::Result<Router> {
        let (stop, stopped) = watch::channel(false);
        let mut watchers = Vec::new();
        let (embedded, topology, managed) = match (args.embedded(), &args.topology_file) {
            (Some(n), _) => {
                let config = StoreConfig {
                    maxmemory: args.embedded_maxmemory as usize,
                    policy: args.embedded_maxmemory_policy.parse().map_err(anyhow::Error::msg)?,
                    ..StoreConfig::default()
                };
                let interval =
                    (args.snapshot_interval > 0).then(|| Duration::from_secs(args.snapshot_interval));
                let cluster = EmbeddedCluster::start(n, config, args.data_dir.clone(), interval)
                    .await
                    .context("starting embedded nodes")?;
                let topology = cluster.store().subscribe().borrow().clone().context("no topology")?;
                tracing::info!(nodes = ?topology.nodes, "embedded nodes running");
                (Some(cluster), topology, true)
            }
            (None, Some(path)) => (None, wait_for_topology(path).await?, true),
            (None, None) => {
                let topology = Topology::even(&args.nodes);
                topology.validate().context("invalid node list")?;
                (None, topology, false)
            }
        };

        let resp =
            TcpListener::bind(args.resp).await.with_context(|| format!("cannot listen on {}", args.resp))?;
        let http =
            TcpListener::bind(args.http).await.with_context(|| format!("cannot listen on {}", args.http))?;
        let unix = match &args.unix_socket {
            Some(path) => Some(
                server::bind_unix(path, args.unix_socket_perm)
                    .with_context(|| format!("cannot listen on {}", path.display()))?,
            ),
            None => None,
        };
        let resp_addr = server::bound(&resp);
        let http_addr = server::bound(&http);

        let settings = Settings {
            requirepass: args.requirepass.clone().filter(|p| !p.is_empty()),
            protected_mode: args.protected_mode,
            deadline: args.deadline(),
            maxclients: args.maxclients,
            proto_max_bulk_len: args.proto_max_bulk_len as usize,
            max_args: args.max_args,
            query_buffer_limit: args.client_query_buffer_limit as usize,
            output_buffer_limit: args.client_output_buffer_limit as usize,
            http_max_body: args.http_max_body as usize,
            tcp_port: resp_addr.port(),
        };
        let links = LinkOptions { deadline: settings.deadline, ..LinkOptions::default() };
        let nodes = topology.nodes.len();
        let state = RouterState::new(settings, Cluster::new(topology, links, managed), embedded.clone());
        // Follow the topology source: the embedded coordinator's store, or the file.
        if let Some(cluster) = &embedded {
            let mut rx = cluster.store().subscribe();
            let (state, mut stop) = (state.clone(), stopped.clone());
            watchers.push(tokio::spawn(async move {
                loop {
                    tokio::select! {
                        changed = rx.changed() => if changed.is_err() { return },
                        _ = stop.changed() => return,
                    }
                    let t = rx.borrow_and_update().clone();
                    if let Some(t) = t {
                        state.cluster.adopt(t);
                    }
                }
            }));
        } else if let Some(path) = args.topology_file.clone() {
            let (state, mut stop) = (state.clone(), stopped.clone());
            watchers.push(tokio::spawn(async move {
                let mut last = None;
                loop {
                    let mtime = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
                    if mtime.is_some() && mtime != last {
                        last = mtime;
                        match shoal_coordinator::FileStore::read(&path) {
                            Ok(Some(t)) => {
                                state.cluster.adopt(t);
                            }
                            Ok(None) => {}
                            Err(e) => tracing::warn!(error = %e, "cannot read the topology file"),
                        }
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                        _ = stop.changed() => return,
                    }
                }
            }));
        }
        let mut tasks = vec![tokio::spawn(server::serve_tcp(resp, state.clone(), stopped.clone()))];
        tasks.extend(watchers);
        if let Some(unix) = unix {
            tasks.push(tokio::spawn(server::serve_unix(unix, state.clone(), stopped.clone())));
        }
        let http_state = state.clone();
        let mut http_stop = stopped.clone();
        tasks.push(tokio::spawn(shoal_telemetry::http::serve(
            http,
            move |req, peer| http::handle(req, peer, http_state.clone()),
            async move {
                let _ = http_stop.wait_for(|s| *s).await;
            },
            Duration::from_secs(5),
        )));
        tracing::info!(%resp_addr, %http_addr, unix = ?args.unix_socket, nodes, "router serving");
        Ok(Router {
            resp_addr,
            http_addr,
            unix_socket: args.unix_socket.clone(),
            state,
            embedded,
            stop,
            tasks,
        })
    }

    /// The state of every embedded node (tests, introspection).
    pub async fn node_states(&self) -> Vec<Arc<shoal_node::service::NodeState>> {
        match &self.embedded {
            Some(e) => e.node_states().await,
            None => Vec::new(),
        }
    }

    /// Graceful shutdown: stop accepting, let connections finish the request in hand, then stop
    /// the embedded nodes.
    pub async fn shutdown(self) {
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
        self.state.cluster.close();
        if let Some(nodes) = self.embedded {
            nodes.shutdown().await;
        }
        if let Some(path) = self.unix_socket {
            let _ = std::fs::remove_file(path);
        }
        tracing::info!("router stopped");
    }
}
