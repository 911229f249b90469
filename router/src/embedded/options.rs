//! What the embedded cluster is started with, why it may not start, and how a `SHOAL SCALE`
//! stands.

use std::path::PathBuf;
use std::time::Duration;

use shoal_coordinator::Progress;
use shoal_wire::auth::ClusterSecret;

/// How to run the embedded cluster (from the router's command line).
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    pub nodes: usize,
    /// Replicas per shard (each a node of its own); with any, the failover writer runs too.
    pub replicas: u32,
    /// Memory limit of each node (0: none).
    pub maxmemory: usize,
    /// Eviction policy of each node (Redis's names).
    pub policy: String,
    pub data_dir: Option<PathBuf>,
    pub snapshot_interval: Option<Duration>,
    /// The secret the nodes require and every call among them (and from the router) carries.
    pub secret: ClusterSecret,
}

/// Why the embedded cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error("{0}")]
    Config(String),
    #[error("starting embedded nodes: {0}")]
    Node(String),
    #[error(
        "this shoal-router was built without the embedded cluster (cargo feature `embedded`): give --nodes or --topology-file"
    )]
    NotBuilt,
}

/// State of the last or current `SHOAL SCALE`.
#[derive(Debug, Clone, Default)]
pub struct ScaleStatus {
    pub running: bool,
    pub target: usize,
    pub progress: Progress,
    pub error: Option<String>,
}
