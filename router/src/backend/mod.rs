//! The router's view of the nodes: the current topology, one [`link::NodeLink`] per node, and
//! routing from key to link, including while slots move.
//!
//! Connections take a [`Routing`] snapshot (an `Arc`) and refresh it only when the cluster's
//! version moves, so routing a key costs one CRC16 and one array lookup. A newer topology is
//! adopted from the topology source (a watched file, or the embedded coordinator) or from a node
//! that answered `moved` with a higher version; links are reused across versions.
//!
//! Ops on a slot that is moving go through [`route`], which hides the move from clients:
//! - reads ask the new owner and, if it has nothing at all for the key, the old owner;
//! - plain writes (SET without conditions) go to the new owner;
//! - deletes go to both (the new owner records a tombstone even for a key it has not received);
//! - read-modify-writes (INCR, APPEND, SET NX/XX/GET/KEEPTTL, EXPIRE, ...) first copy the key from
//!   the old owner to the new one (`Fetch` then `Import`, which never replaces anything the new
//!   owner has), then run on the new owner.
//!
//! A `moved` reply means a node and this router disagree about the topology: whichever side is
//! behind catches up (fetch the node's topology, or offer it ours) and the op is retried, within
//! the call deadline. Clients never see it.

pub mod link;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use shoal_telemetry::metrics::Counter;
use shoal_wire::proto::{self, NodeStats, Op, op::Kind, reply};
use shoal_wire::{SlotTable, Topology, key_slot};
use tokio::time::Instant;

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
    #[error("ERR the cluster topology is changing; try again")]
    Unsettled,
}

/// A topology with its links: everything needed to route a key.
#[derive(Debug)]
pub struct Routing {
    pub topology: Arc<Topology>,
    table: SlotTable,
    /// Links in `topology.nodes` order.
    pub links: Vec<Arc<NodeLink>>,
    /// Whether nodes check ownership (a topology source is in use), so `moved` replies can happen.
    pub managed: bool,
}

impl Routing {
    /// The link that owns `key`.
    #[inline]
    pub fn link_for_key(&self, key: &[u8]) -> (usize, &Arc<NodeLink>) {
        let pos = self.table.node_of(key_slot(key));
        (pos, &self.links[pos])
    }

    /// The position of the node that owns `key` and, if its slot is moving, of the old owner:
    /// one CRC16 for both.
    #[inline]
    pub fn locate(&self, key: &[u8]) -> (usize, Option<usize>) {
        let slot = key_slot(key);
        (self.table.node_of(slot), self.table.moving_from(slot))
    }

    pub fn version(&self) -> u64 {
        self.topology.version
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

/// Counters about topology changes seen by this router.
#[derive(Debug, Default)]
pub struct ClusterMetrics {
    /// Reads that missed on a slot's new owner and asked the old one.
    pub fallback_reads: Counter,
    /// Ops retried after a `moved` reply.
    pub moved_retries: Counter,
    /// Keys copied to their new owner before a read-modify-write.
    pub keys_copied: Counter,
    /// Topologies adopted.
    pub topology_changes: Counter,
}

/// The routing state shared by all connections of a router.
#[derive(Debug)]
pub struct Cluster {
    routing: RwLock<Arc<Routing>>,
    version: AtomicU64,
    options: LinkOptions,
    links: Mutex<HashMap<(u32, String), Arc<NodeLink>>>,
    managed: bool,
    pub metrics: ClusterMetrics,
}

impl Cluster {
    /// Starts links to every node of `topology` (which must be valid). `managed` says whether the
    /// topology comes from a source that nodes follow too (so they may answer `moved`). Needs a
    /// Tokio runtime.
    pub fn new(topology: Topology, options: LinkOptions, managed: bool) -> Cluster {
        let cluster = Cluster {
            routing: RwLock::new(Arc::new(Routing {
                topology: Arc::new(topology.clone()),
                table: SlotTable::new(&topology),
                links: Vec::new(),
                managed,
            })),
            version: AtomicU64::new(0),
            options,
            links: Mutex::default(),
            managed,
            metrics: ClusterMetrics::default(),
        };
        cluster.install(topology);
        cluster
    }

    pub fn routing(&self) -> Arc<Routing> {
        self.routing.read().clone()
    }

    /// The topology version currently routed by.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Shutdown: every link stops when its node's stream ends, without reconnecting.
    pub fn close(&self) {
        for link in self.links.lock().values() {
            link.close();
        }
    }

    /// Whether every node's stream is up (`/readyz`).
    pub fn all_up(&self) -> bool {
        self.routing().links.iter().all(|l| l.is_up())
    }

    /// Routes by `topology` from now on if it is newer than the current one. Returns whether it
    /// was adopted.
    pub fn adopt(&self, topology: Topology) -> bool {
        if topology.version <= self.version() {
            return false;
        }
        if let Err(e) = topology.validate() {
            tracing::warn!(version = topology.version, error = %e, "ignoring an invalid topology");
            return false;
        }
        self.install(topology)
    }

    fn install(&self, topology: Topology) -> bool {
        let mut links_by_node = self.links.lock();
        let mut routing = self.routing.write();
        if self.version() >= topology.version && !routing.links.is_empty() {
            return false;
        }
        let links: Vec<Arc<NodeLink>> = topology
            .nodes
            .iter()
            .map(|n| {
                links_by_node
                    .entry((n.id, n.addr.clone()))
                    .or_insert_with(|| NodeLink::spawn(n.id, n.addr.clone(), self.options.clone()))
                    .clone()
            })
            .collect();
        // Links to nodes that left are dropped (their tasks end once the last user lets go).
        links_by_node.retain(|(id, addr), _| topology.nodes.iter().any(|n| n.id == *id && &n.addr == addr));
        let version = topology.version;
        tracing::info!(
            version,
            nodes = topology.nodes.len(),
            migrations = topology.migrations.len(),
            "routing by topology"
        );
        *routing = Arc::new(Routing {
            table: SlotTable::new(&topology),
            topology: Arc::new(topology),
            links,
            managed: self.managed,
        });
        self.version.store(version, Ordering::Release);
        self.metrics.topology_changes.inc();
        true
    }

    /// After a `moved` reply from `node` (at `node_version`): catches up with the node, or lets
    /// the node catch up with us.
    pub async fn reconcile(&self, node: &NodeLink, node_version: u64) {
        let mine = self.version();
        let Some(mut client) = node.client() else { return };
        if node_version > mine {
            if let Ok(Ok(doc)) =
                tokio::time::timeout(self.options.deadline, client.get_topology(proto::GetTopologyRequest {}))
                    .await
                && let Ok(t) = Topology::from_json(&doc.into_inner().json)
            {
                self.adopt(t);
            }
        } else if node_version < mine {
            let doc = proto::TopologyDoc { json: self.routing().topology.to_json() };
            let _ = tokio::time::timeout(self.options.deadline, client.update_topology(doc)).await;
        } else {
            // Same version, yet refused: we routed by an older snapshot. Let the retry re-route.
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }
}

/// How an op behaves while its slot moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Read,
    Write,
    Delete,
    ReadModifyWrite,
}

fn class(op: &Op) -> Class {
    match &op.kind {
        Some(Kind::Get(_) | Kind::Exists(_) | Kind::Touch(_) | Kind::TypeOf(_) | Kind::Strlen(_)) => {
            Class::Read
        }
        Some(Kind::GetRange(_) | Kind::Ttl(_)) => Class::Read,
        Some(Kind::Set(s)) if s.condition == 0 && !s.get && !s.keep_ttl => Class::Write,
        Some(Kind::Del(_)) => Class::Delete,
        _ => Class::ReadModifyWrite,
    }
}

fn moved_version(r: &proto::Reply) -> Option<u64> {
    match r.kind {
        Some(reply::Kind::Moved(v)) => Some(v),
        _ => None,
    }
}

/// Runs `op` on `key`'s node(s) by the current topology, hiding moves and `moved` replies (see the
/// module docs). Gives up with an error only at `deadline`.
pub async fn route(
    cluster: &Cluster,
    key: Bytes,
    op: Op,
    deadline: Instant,
) -> Result<proto::Reply, BackendError> {
    for attempt in 0u32.. {
        if attempt > 0 && Instant::now() >= deadline {
            return Err(BackendError::Unsettled);
        }
        let routing = cluster.routing();
        let v = routing.version();
        let (pos, from) = routing.locate(&key);
        let owner = &routing.links[pos];
        let old = from.map(|p| &routing.links[p]);
        let result = match old {
            None => owner.call(op.clone(), v, deadline).wait().await?,
            Some(old) => match class(&op) {
                Class::Write => owner.call(op.clone(), v, deadline).wait().await?,
                Class::Read => {
                    let mut first = op.clone();
                    first.fallback = true;
                    let r = owner.call(first, v, deadline).wait().await?;
                    if matches!(r.kind, Some(reply::Kind::Absent(_))) {
                        cluster.metrics.fallback_reads.inc();
                        let from_old = old.call(op.clone(), v, deadline).wait().await?;
                        if let Some(old_version) = moved_version(&from_old) {
                            // The old owner has moved on (the move finished): catch up and re-read.
                            cluster.reconcile(old, old_version).await;
                            continue;
                        }
                        from_old
                    } else {
                        r
                    }
                }
                Class::Delete => {
                    let on_new = owner.call(op.clone(), v, deadline);
                    let on_old = old.call(op.clone(), v, deadline);
                    let (new_r, old_r) = (on_new.wait().await?, on_old.wait().await);
                    match (&new_r.kind, old_r.map(|r| r.kind)) {
                        // Deleted from either side counts once.
                        (Some(reply::Kind::Int(0)), Ok(Some(reply::Kind::Int(1)))) => {
                            proto::Reply { kind: Some(reply::Kind::Int(1)) }
                        }
                        _ => new_r,
                    }
                }
                Class::ReadModifyWrite => {
                    if !copy_key(cluster, &key, owner, old, v, deadline).await? {
                        continue;
                    }
                    owner.call(op.clone(), v, deadline).wait().await?
                }
            },
        };
        match moved_version(&result) {
            Some(node_version) => {
                cluster.metrics.moved_retries.inc();
                cluster.reconcile(owner, node_version).await;
            }
            None => return Ok(result),
        }
    }
    unreachable!("the attempt counter does not run out before the deadline")
}

/// Copies `key` from the slot's old owner to its new owner unless the new owner already has
/// anything for it (Import never replaces). Returns false when a node's `moved` reply showed the
/// routing is stale and the op must be routed again (after catching up, or after the lagging node
/// caught up with us).
async fn copy_key(
    cluster: &Cluster,
    key: &Bytes,
    owner: &NodeLink,
    old: &NodeLink,
    version: u64,
    deadline: Instant,
) -> Result<bool, BackendError> {
    let fetch = Op { kind: Some(Kind::Fetch(proto::Fetch { key: key.clone() })), ..Default::default() };
    let fetched = old.call(fetch, version, deadline).wait().await?;
    let entry = match fetched.kind {
        Some(reply::Kind::Entry(entry)) => entry,
        Some(reply::Kind::Moved(node_version)) => {
            cluster.metrics.moved_retries.inc();
            cluster.reconcile(old, node_version).await;
            return Ok(false);
        }
        // Nil: the old owner has nothing; the new owner's state stands.
        _ => return Ok(true),
    };
    let import =
        Op { kind: Some(Kind::Import(proto::Import { entries: vec![entry] })), ..Default::default() };
    let stored = owner.call(import, version, deadline).wait().await?;
    match stored.kind {
        Some(reply::Kind::Int(1)) => cluster.metrics.keys_copied.inc(),
        Some(reply::Kind::Moved(node_version)) => {
            cluster.metrics.moved_retries.inc();
            cluster.reconcile(owner, node_version).await;
            return Ok(false);
        }
        _ => {}
    }
    Ok(true)
}
