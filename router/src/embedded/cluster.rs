//! The embedded cluster with real nodes (the `embedded` feature).
//!
//! Node ids are 0..n-1 at start; growing adds the next ids, shrinking removes the highest (as a
//! StatefulSet does). The coordinator publishes into a [`MemoryRegistry`] that this router routes by;
//! with `--data-dir` every published topology is also kept in `DIR/topology.json` and each node
//! keeps its snapshots in `DIR/node-<id>`, so a restart comes back with the same nodes and data.
//!
//! With `--replicas R`, each shard is a group of 1 + R nodes (replicas keep no snapshots: they
//! sync from their primary) and the failover writer (`shoal_coordinator::failover`) watches the
//! same registry: it confirms the primaries at start, promotes a replica of a primary that stops
//! answering, and finishes `SHOAL FAILOVER` hand-overs. It does not run while `SHOAL SCALE` moves
//! slots (the coordinator then owns the topology), and stops first at shutdown, so stopping the
//! cluster promotes nobody.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use shoal_coordinator::{Coordinator, MemoryRegistry, Progress, Registry, RegistryError};
use shoal_node::server::{NodeError, NodeHandle, ServeOptions};
use shoal_node::service::NodeState;
use shoal_node::store::{Store, StoreConfig, SystemClock};
use shoal_wire::proto::NodeSettings;
use shoal_wire::{NodeInfo, Topology};

use super::{EmbeddedError, EmbeddedOptions, ScaleStatus};

/// The topology registry of an embedded cluster: memory, mirrored to a file with `--data-dir`.
#[derive(Debug)]
pub struct EmbeddedRegistry {
    memory: MemoryRegistry,
    file: Option<PathBuf>,
}

impl Registry for EmbeddedRegistry {
    async fn load(&self) -> Result<Option<Topology>, RegistryError> {
        self.memory.load().await
    }

    async fn publish(&self, t: &Topology) -> Result<(), RegistryError> {
        self.memory.publish(t).await?;
        if let Some(path) = &self.file {
            shoal_coordinator::FileRegistry::write(path, t)?;
        }
        Ok(())
    }
}

impl EmbeddedRegistry {
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<Option<Topology>> {
        self.memory.subscribe()
    }
}

pub struct EmbeddedCluster {
    /// Each shard's nodes by shard id: the one started as its primary first, then its replicas
    /// (after a failover another member is primary; the group stays the same).
    nodes: tokio::sync::Mutex<BTreeMap<u32, Vec<NodeHandle>>>,
    replicas: u32,
    /// Stops the failover writer (None: not running).
    failover: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    coordinator: Coordinator<Arc<EmbeddedRegistry>>,
    store: Arc<EmbeddedRegistry>,
    /// What nodes it starts are configured with: the command line's, with CONFIG SET's changes.
    config: Mutex<StoreConfig>,
    data_dir: Option<PathBuf>,
    snapshot_interval: Option<Duration>,
    status: Arc<Mutex<ScaleStatus>>,
    scale_lock: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for EmbeddedCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedCluster").finish_non_exhaustive()
    }
}

impl EmbeddedCluster {
    /// Starts `n` nodes (or, with a data directory holding a topology from an earlier run, the
    /// nodes it names) and publishes a topology they all serve.
    pub async fn start(options: EmbeddedOptions) -> Result<Arc<EmbeddedCluster>, EmbeddedError> {
        let EmbeddedOptions { nodes: n, replicas, maxmemory, policy, data_dir, snapshot_interval } = options;
        let policy = policy.parse().map_err(EmbeddedError::Config)?;
        let config = StoreConfig { maxmemory, policy, ..StoreConfig::default() };
        let saved = data_dir
            .as_ref()
            .and_then(|d| shoal_coordinator::FileRegistry::read(&d.join("topology.json")).ok().flatten());
        let ids: Vec<u32> = match &saved {
            Some(t) => t.nodes.iter().map(|n| n.id).collect(),
            None => (0..n.max(1) as u32).collect(),
        };
        let file = data_dir.as_ref().map(|d| d.join("topology.json"));
        let store = Arc::new(EmbeddedRegistry { memory: MemoryRegistry::new(None), file });
        let cluster = Arc::new(EmbeddedCluster {
            nodes: tokio::sync::Mutex::new(BTreeMap::new()),
            replicas,
            failover: Mutex::default(),
            coordinator: Coordinator::new(store.clone()),
            store,
            config: Mutex::new(config),
            data_dir,
            snapshot_interval,
            status: Arc::default(),
            scale_lock: tokio::sync::Mutex::new(()),
        });
        let mut infos = Vec::new();
        for id in ids {
            infos.push(cluster.start_shard(id).await.map_err(|e| EmbeddedError::Node(e.to_string()))?);
        }
        let topology = match saved {
            // Same nodes and slots as last time, at their new ports, as a newer version.
            Some(mut t) => {
                t.version += 1;
                t.nodes = infos;
                t.migrations.clear();
                t
            }
            None => {
                let mut t = Topology::even(&infos.iter().map(|n| n.addr.clone()).collect::<Vec<_>>());
                t.nodes = infos;
                t
            }
        };
        cluster.store.publish(&topology).await.map_err(|e| EmbeddedError::Node(e.to_string()))?;
        // Make sure every node serves it before clients arrive.
        cluster.coordinator.resume().await.map_err(|e| EmbeddedError::Node(e.to_string()))?;
        if replicas > 0 {
            // Primaries with replicas start fenced: the writer confirms them (a newer version).
            cluster.start_failover();
            let mut versions = cluster.subscribe();
            let confirmed = tokio::time::timeout(
                Duration::from_secs(10),
                versions.wait_for(|t| t.as_ref().is_some_and(|t| t.version > topology.version)),
            )
            .await;
            if !matches!(confirmed, Ok(Ok(_))) {
                return Err(EmbeddedError::Node("the failover writer did not confirm the primaries".into()));
            }
            // And the replicas have their copies before clients arrive (WAIT counts them).
            let start = std::time::Instant::now();
            while !cluster.replicas_synced().await {
                if start.elapsed() > Duration::from_secs(10) {
                    tracing::warn!("embedded replicas still syncing; serving anyway");
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(cluster)
    }

    /// Whether every node started as a replica has its full sync done.
    async fn replicas_synced(&self) -> bool {
        self.nodes
            .lock()
            .await
            .values()
            .flat_map(|g| g.iter().skip(1))
            .all(|h| h.state.membership.replication.synced())
    }

    /// Starts the failover writer on the cluster's registry (once).
    fn start_failover(&self) {
        let mut slot = self.failover.lock();
        if slot.is_some() {
            return;
        }
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let registry = self.store.clone();
        tokio::spawn(async move {
            let options = shoal_coordinator::failover::FailoverOptions::default();
            let log = |d: &shoal_coordinator::failover::Decision| {
                tracing::warn!(version = d.topology.version, shard = d.shard, reason = %d.reason, "embedded failover");
            };
            shoal_coordinator::failover::watch(&registry, options, log, async move {
                let _ = stopped.await;
            })
            .await;
        });
        *slot = Some(stop);
    }

    fn stop_failover(&self) {
        if let Some(stop) = self.failover.lock().take() {
            let _ = stop.send(());
        }
    }

    /// Starts shard `id`: its primary, then its replicas (which keep no snapshots: they sync).
    async fn start_shard(&self, id: u32) -> Result<NodeInfo, NodeError> {
        let mut group = Vec::new();
        let mut info = None;
        for member in 0..=self.replicas {
            let store = Arc::new(Store::new(self.config.lock().clone(), Arc::new(SystemClock)));
            let primary = member == 0;
            let options = ServeOptions {
                data_dir: self.data_dir.as_ref().filter(|_| primary).map(|d| d.join(format!("node-{id}"))),
                snapshot_interval: self.snapshot_interval,
                // Replicas find their place by address.
                node_id: primary.then_some(id),
                ..ServeOptions::default()
            };
            let localhost: SocketAddr = "127.0.0.1:0".parse().expect("valid address");
            let handle = match NodeHandle::start(localhost, store, options).await {
                Ok(h) => h,
                Err(e) => {
                    for h in group {
                        let _ = NodeHandle::shutdown(h).await;
                    }
                    return Err(e);
                }
            };
            let addr = handle.addr.to_string();
            match &mut info {
                None => info = Some(NodeInfo::new(id, addr)),
                Some(i) => i.replicas.push(addr),
            }
            group.push(handle);
        }
        self.nodes.lock().await.insert(id, group);
        Ok(info.expect("a shard has a primary"))
    }

    /// Remembers settings CONFIG SET gave the running nodes, so nodes started later (SHOAL SCALE)
    /// get them too.
    pub fn remember_settings(&self, change: &NodeSettings) {
        if let Err(e) = shoal_node::service::apply_settings(&mut self.config.lock(), change) {
            tracing::warn!(error = %e, "embedded nodes' settings not remembered");
        }
    }

    pub fn store(&self) -> &Arc<EmbeddedRegistry> {
        &self.store
    }

    /// Every topology the embedded coordinator publishes.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<Option<Topology>> {
        self.store.subscribe()
    }

    pub fn status(&self) -> ScaleStatus {
        self.status.lock().clone()
    }

    /// The running nodes' state (for tests and introspection).
    pub async fn node_states(&self) -> Vec<Arc<NodeState>> {
        self.nodes.lock().await.values().flatten().map(|h| h.state.clone()).collect()
    }

    /// Moves the cluster to `n` nodes: starts the new ones, runs the coordinator (data moves while
    /// traffic continues), then stops the nodes that left. Refuses while another scale runs.
    pub async fn scale(self: Arc<Self>, n: usize) -> Result<(), String> {
        let Ok(_turn) = self.scale_lock.try_lock() else {
            return Err("a scaling operation is already running".into());
        };
        *self.status.lock() = ScaleStatus { running: true, target: n, ..Default::default() };
        let result = self.scale_inner(n.max(1)).await;
        let mut st = self.status.lock();
        st.running = false;
        st.error = result.as_ref().err().cloned();
        result
    }

    async fn scale_inner(&self, n: usize) -> Result<(), String> {
        let current = self.store.load().await.map_err(|e| e.to_string())?.ok_or("no topology")?;
        let mut ids: Vec<u32> = current.nodes.iter().map(|n| n.id).collect();
        ids.sort_unstable();
        // Keep the `n` lowest ids (a StatefulSet removes its highest ordinals first).
        let keep: Vec<u32> = ids.iter().copied().take(n).collect();
        let mut target: Vec<NodeInfo> =
            current.nodes.iter().filter(|node| keep.contains(&node.id)).cloned().collect();
        let mut next_id = ids.last().map_or(0, |m| m + 1);
        // New shards join without their replicas listed: a primary that starts with replicas
        // is fenced until the failover writer confirms it, and the writer is off during the move.
        // Their replicas (started, idle) are listed once the move is done.
        let mut joining = Vec::new();
        while target.len() < n {
            let mut info = self.start_shard(next_id).await.map_err(|e| e.to_string())?;
            joining.push((info.id, std::mem::take(&mut info.replicas)));
            target.push(info);
            next_id += 1;
        }
        target.sort_by_key(|n| n.id);
        let status = self.status.clone();
        let coordinator = &self.coordinator;
        let report = move |p: &Progress| status.lock().progress = p.clone();
        // The coordinator owns the topology while slots move: no failover publishes meanwhile
        // (it would publish over the plan, or the plan over it).
        let watching = self.failover.lock().is_some();
        self.stop_failover();
        let moved = async {
            let mut done = coordinator.reshard_with(&target, &report).await.map_err(|e| e.to_string())?;
            if joining.iter().any(|(_, r)| !r.is_empty()) {
                for (id, replicas) in joining {
                    if let Some(node) = done.nodes.iter_mut().find(|n| n.id == id) {
                        node.replicas = replicas;
                    }
                }
                done.version += 1;
                self.store.publish(&done).await.map_err(|e| e.to_string())?;
                // Primaries now; the failover writer offers it to the replicas (members behind).
                coordinator.resume().await.map_err(|e| e.to_string())?;
            }
            Ok::<_, String>(done)
        }
        .await;
        if watching {
            self.start_failover();
        }
        let done = moved?;
        // Shards that left have handed everything over: stop their nodes.
        let gone: Vec<u32> =
            self.nodes.lock().await.keys().copied().filter(|id| done.node(*id).is_none()).collect();
        for id in gone {
            if let Some(group) = self.nodes.lock().await.remove(&id) {
                stop_nodes(group).await;
            }
        }
        Ok(())
    }

    /// Graceful shutdown of every node.
    pub async fn shutdown(&self) {
        // The whole cluster stops: nobody is promoted, no shard is handed over.
        self.stop_failover();
        let nodes = std::mem::take(&mut *self.nodes.lock().await);
        stop_nodes(nodes.into_values().flatten().collect()).await;
    }
}

/// Stops `nodes` without hand-overs, replicas first: a primary's graceful stop waits for its
/// connections to end, and a replica's stream from it is one.
async fn stop_nodes(nodes: Vec<NodeHandle>) {
    let (replicas, primaries): (Vec<NodeHandle>, Vec<NodeHandle>) =
        nodes.into_iter().partition(|h| !h.state.membership.replication.link().primary_addr.is_empty());
    for node in replicas.into_iter().chain(primaries) {
        if let Err(e) = node.shutdown_without_handover().await {
            tracing::warn!(error = %e, "embedded node did not stop cleanly");
        }
    }
}
