//! The router's view of the nodes: the current topology, one [`link::NodeLink`] per node, and
//! routing from key to link.
//!
//! Connections take a [`Routing`] snapshot (an `Arc`) and refresh it only when the cluster's
//! version moves, so routing a key costs one CRC16 and one array lookup.

pub mod link;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;
use shoal_wire::proto::NodeStats;
use shoal_wire::{SlotTable, Topology, key_slot};

pub use link::{LinkOptions, NodeCall, NodeLink};

/// Why a call to a node produced no reply. `Display` is the client-facing error line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    #[error("ERR node {node} ({addr}) is unavailable: {reason}")]
    Unavailable { node: u32, addr: String, reason: String },
    #[error("ERR node {node} ({addr}) did not answer within {ms} ms")]
    Timeout { node: u32, addr: String, ms: u64 },
    #[error("ERR node {node} ({addr}) is overloaded: too many queued requests")]
    Overloaded { node: u32, addr: String },
    #[error("ERR unexpected reply from node: {0}")]
    BadReply(String),
}

/// A topology with its links: everything needed to route a key.
#[derive(Debug)]
pub struct Routing {
    pub topology: Topology,
    table: SlotTable,
    /// Links in `topology.nodes` order.
    pub links: Vec<Arc<NodeLink>>,
}

impl Routing {
    /// The link that owns `key`.
    #[inline]
    pub fn link_for_key(&self, key: &[u8]) -> (usize, &Arc<NodeLink>) {
        let pos = self.table.node_of(key_slot(key));
        (pos, &self.links[pos])
    }

    pub fn len(&self) -> usize {
        self.links.len()
    }

    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// Every node's counters, asked concurrently, each within the call deadline.
    pub async fn stats_all(&self) -> Vec<Result<NodeStats, BackendError>> {
        let tasks: Vec<_> = self
            .links
            .iter()
            .map(|l| {
                let l = Arc::clone(l);
                tokio::spawn(async move { l.stats().await })
            })
            .collect();
        let mut out = Vec::with_capacity(tasks.len());
        for (task, link) in tasks.into_iter().zip(&self.links) {
            out.push(task.await.unwrap_or_else(|_| {
                Err(BackendError::Unavailable {
                    node: link.ident.id,
                    addr: link.ident.addr.clone(),
                    reason: "stats task failed".into(),
                })
            }));
        }
        out
    }
}

/// The routing state shared by all connections of a router.
#[derive(Debug)]
pub struct Cluster {
    routing: RwLock<Arc<Routing>>,
    version: AtomicU64,
    options: LinkOptions,
}

impl Cluster {
    /// Starts links to every node of `topology` (which must be valid). Needs a Tokio runtime.
    pub fn new(topology: Topology, options: LinkOptions) -> Cluster {
        let links =
            topology.nodes.iter().map(|n| NodeLink::spawn(n.id, n.addr.clone(), options.clone())).collect();
        let version = topology.version;
        let table = SlotTable::new(&topology);
        Cluster {
            routing: RwLock::new(Arc::new(Routing { topology, table, links })),
            version: AtomicU64::new(version),
            options,
        }
    }

    pub fn routing(&self) -> Arc<Routing> {
        self.routing.read().clone()
    }

    /// The topology version currently routed by.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    pub fn options(&self) -> &LinkOptions {
        &self.options
    }

    /// Whether every node's stream is up (`/readyz`).
    pub fn all_up(&self) -> bool {
        self.routing().links.iter().all(|l| l.is_up())
    }
}
