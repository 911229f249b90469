//! The embedded cluster with real nodes (the `embedded` feature).
//!
//! Node ids are 0..n-1 at start; growing adds the next ids, shrinking removes the highest (as a
//! StatefulSet does). The coordinator publishes into a [`MemoryRegistry`] that this router routes by;
//! with `--data-dir` every published topology is also kept in `DIR/topology.json` and each node
//! keeps its snapshots in `DIR/node-<id>`, so a restart comes back with the same nodes and data.

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
    nodes: tokio::sync::Mutex<BTreeMap<u32, NodeHandle>>,
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
        let EmbeddedOptions { nodes: n, maxmemory, policy, data_dir, snapshot_interval } = options;
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
            infos.push(cluster.start_node(id).await.map_err(|e| EmbeddedError::Node(e.to_string()))?);
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
        Ok(cluster)
    }

    async fn start_node(&self, id: u32) -> Result<NodeInfo, NodeError> {
        let store = Arc::new(Store::new(self.config.lock().clone(), Arc::new(SystemClock)));
        let options = ServeOptions {
            data_dir: self.data_dir.as_ref().map(|d| d.join(format!("node-{id}"))),
            snapshot_interval: self.snapshot_interval,
            node_id: Some(id),
            ..ServeOptions::default()
        };
        let localhost: SocketAddr = "127.0.0.1:0".parse().expect("valid address");
        let handle = NodeHandle::start(localhost, store, options).await?;
        let info = NodeInfo::new(id, handle.addr.to_string());
        self.nodes.lock().await.insert(id, handle);
        Ok(info)
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
        self.nodes.lock().await.values().map(|h| h.state.clone()).collect()
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
        while target.len() < n {
            target.push(self.start_node(next_id).await.map_err(|e| e.to_string())?);
            next_id += 1;
        }
        target.sort_by_key(|n| n.id);
        let status = self.status.clone();
        let coordinator = &self.coordinator;
        let report = move |p: &Progress| status.lock().progress = p.clone();
        let done = coordinator.reshard_with(&target, &report).await.map_err(|e| e.to_string())?;
        // Nodes that left have handed everything over: stop them.
        let gone: Vec<u32> =
            self.nodes.lock().await.keys().copied().filter(|id| done.node(*id).is_none()).collect();
        for id in gone {
            if let Some(h) = self.nodes.lock().await.remove(&id) {
                let _ = h.shutdown().await;
            }
        }
        Ok(())
    }

    /// Graceful shutdown of every node.
    pub async fn shutdown(&self) {
        let nodes = std::mem::take(&mut *self.nodes.lock().await);
        for (_, node) in nodes {
            if let Err(e) = node.shutdown().await {
                tracing::warn!(error = %e, "embedded node did not stop cleanly");
            }
        }
    }
}
