//! The embedded cluster: N nodes running inside the router process, each a real gRPC server on
//! its own loopback port, so one command starts a working cluster without Kubernetes.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use shoal_node::server::{NodeError, NodeHandle, ServeOptions};
use shoal_node::store::{Store, StoreConfig, SystemClock};

#[derive(Debug)]
pub struct EmbeddedNodes {
    pub nodes: Vec<NodeHandle>,
}

impl EmbeddedNodes {
    /// Starts `n` nodes on free loopback ports; with a data directory, node `i` keeps its
    /// snapshots in `data_dir/node-<i>` and starts from the newest one there.
    pub async fn start(
        n: usize,
        config: StoreConfig,
        data_dir: Option<PathBuf>,
        snapshot_interval: Option<Duration>,
    ) -> Result<EmbeddedNodes, NodeError> {
        let mut nodes = Vec::with_capacity(n);
        let localhost: SocketAddr = "127.0.0.1:0".parse().expect("valid address");
        for i in 0..n {
            let store = Arc::new(Store::new(config.clone(), Arc::new(SystemClock)));
            let options = ServeOptions {
                data_dir: data_dir.as_ref().map(|d| d.join(format!("node-{i}"))),
                snapshot_interval,
                ..ServeOptions::default()
            };
            nodes.push(NodeHandle::start(localhost, store, options).await?);
        }
        Ok(EmbeddedNodes { nodes })
    }

    pub fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.addr.to_string()).collect()
    }

    /// Graceful shutdown of every node.
    pub async fn shutdown(self) {
        for node in self.nodes {
            if let Err(e) = node.shutdown().await {
                tracing::warn!(error = %e, "embedded node did not stop cleanly");
            }
        }
    }
}
