//! The embedded cluster: N nodes running inside the router process, each a real gRPC server on
//! its own loopback port, so one command starts a working cluster without Kubernetes.

use std::net::SocketAddr;
use std::sync::Arc;

use shoal_node::server::{NodeError, NodeHandle, ServeOptions};
use shoal_node::store::{Store, StoreConfig, SystemClock};

#[derive(Debug)]
pub struct EmbeddedNodes {
    pub nodes: Vec<NodeHandle>,
}

impl EmbeddedNodes {
    /// Starts `n` nodes on free loopback ports.
    pub async fn start(n: usize, config: StoreConfig) -> Result<EmbeddedNodes, NodeError> {
        let mut nodes = Vec::with_capacity(n);
        let localhost: SocketAddr = "127.0.0.1:0".parse().expect("valid address");
        for _ in 0..n {
            let store = Arc::new(Store::new(config.clone(), Arc::new(SystemClock)));
            nodes.push(NodeHandle::start(localhost, store, ServeOptions::default()).await?);
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
