//! The routing state shared by all connections of a router ([`Backend`]): the current topology
//! and one [`NodePort`] per node, adopting newer topologies from the topology source or from a
//! node that answered `moved`; and the snapshot a connection routes by ([`Routing`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};
use shoal_telemetry::metrics::Counter;
use shoal_wire::auth::Credentials;
use shoal_wire::proto::NodeStats;
use shoal_wire::{SlotTable, Topology, key_slot};

use super::error::BackendError;
use super::link::{LinkOptions, NodeLink};
use super::port::{self, NodePort};

/// `--read-from`: who serves read-only commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ReadFrom {
    /// The shard's primary (clients that send READONLY read from replicas all the same).
    #[default]
    Primary,
    /// A replica whose link is up, else the primary: reads may miss the latest writes.
    ReplicaPreferred,
    /// The member (primary or replica) with the shortest measured round trip from this router
    /// (each link pings its node every second): for routers placed near some members, e.g. in
    /// the same zone. Replica reads may miss the latest writes.
    Nearest,
}

/// Makes the port for a node (real links; fakes in tests).
pub type PortFactory = Box<dyn Fn(u32, &str) -> Arc<dyn NodePort> + Send + Sync>;

/// A topology with its ports: everything needed to route a key.
#[derive(Debug)]
pub struct Routing {
    pub topology: Arc<Topology>,
    pub(super) table: SlotTable,
    /// Ports in `topology.nodes` order.
    pub nodes: Vec<Arc<dyn NodePort>>,
    /// Each shard's replicas' ports, in the same order (replica reads: READONLY, --read-from).
    pub replicas: Vec<Vec<Arc<dyn NodePort>>>,
    /// Whether nodes check ownership (a topology source is in use), so `moved` replies can happen.
    pub managed: bool,
    /// A transaction's capturing routing (`capture.rs`): commands run as inside EXEC (a
    /// blocking command does not block).
    pub capturing: bool,
}

impl Routing {
    /// The position of the node that owns `key` and, if its slot is moving, of the old owner:
    /// one CRC16 for both.
    #[inline]
    pub fn locate(&self, key: &[u8]) -> (usize, Option<usize>) {
        let slot = key_slot(key);
        (self.table.node_of(slot), self.table.moving_from(slot))
    }

    /// The position of the node that owns `slot` (a slot moving counts as its new owner's).
    pub fn node_of_slot(&self, slot: u16) -> usize {
        self.table.node_of(slot)
    }

    /// The one node position that owns every one of `keys` by the table (a slot moving counts as
    /// its new owner's; no keys: the first node); `None` when they are spread (where a unit or a
    /// blocking command answers CROSSSLOT).
    pub fn one_owner(&self, keys: &[bytes::Bytes]) -> Option<usize> {
        let mut positions = keys.iter().map(|k| self.locate(k).0);
        let first = positions.next().unwrap_or(0);
        positions.all(|p| p == first).then_some(first)
    }

    /// The version batches are stamped with: the topology's, or 0 with static routing (`--nodes`:
    /// nodes follow no topology and serve version-0 routers only).
    pub fn version(&self) -> u64 {
        if self.managed { self.topology.version } else { 0 }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Whether `port` is one of this routing's nodes.
    fn contains(&self, port: &dyn NodePort) -> bool {
        let id = port.ident();
        self.nodes.iter().any(|n| n.ident().id == id.id && n.ident().addr == id.addr)
    }

    /// Every node's counters, asked concurrently, each within the call deadline.
    pub async fn stats_all(&self) -> Vec<Result<NodeStats, BackendError>> {
        let mut out = Vec::with_capacity(self.nodes.len());
        let calls: Vec<_> = self.nodes.iter().map(|n| n.stats()).collect();
        for result in futures_join(calls).await {
            out.push(result);
        }
        out
    }
}

/// Whether some shard of `old` has another primary in `new` (by the shard's id and its primary's
/// address): the primary that acknowledged a write may not be the one whose replicas WAIT asks.
fn primaries_differ(old: &Topology, new: &Topology) -> bool {
    old.nodes.iter().any(|o| new.nodes.iter().any(|n| n.id == o.id && n.addr != o.addr))
}

/// Per slot: whether its owner (node id and address) differs between two routings, or it is
/// moving in the new one (a key's near-cache entry must then go).
fn owner_changes(old: &Routing, new: &Routing) -> Vec<bool> {
    let owner = |r: &Routing, slot: u16| {
        let n = r.topology.nodes.get(r.table.node_of(slot));
        n.map(|n| (n.id, n.addr.clone()))
    };
    (0..shoal_wire::SLOT_COUNT as u16)
        .map(|slot| {
            old.nodes.is_empty()
                || new.table.moving_from(slot).is_some()
                || old.table.moving_from(slot).is_some()
                || owner(old, slot) != owner(new, slot)
        })
        .collect()
}

#[cold]
fn near_write(near: &crate::nearcache::NearCache, op: &shoal_wire::proto::Op) {
    use shoal_wire::ops::{OpClass, class_of, keys_of};
    use shoal_wire::proto::op::Kind;
    match (&op.kind, class_of(op)) {
        (Some(Kind::Flush(_)), _) => near.flush(),
        (_, OpClass::Read) => {}
        _ => keys_of(op).into_iter().for_each(|k| near.invalidate(k)),
    }
}

/// Awaits every future concurrently, keeping their order.
pub async fn futures_join<T>(futures: Vec<port::BoxFuture<'_, T>>) -> Vec<T> {
    let mut slots: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    let mut pending: Vec<(usize, port::BoxFuture<'_, T>)> = futures.into_iter().enumerate().collect();
    std::future::poll_fn(|cx| {
        pending.retain_mut(|(i, f)| match f.as_mut().poll(cx) {
            std::task::Poll::Ready(v) => {
                slots[*i] = Some(v);
                false
            }
            std::task::Poll::Pending => true,
        });
        if pending.is_empty() { std::task::Poll::Ready(()) } else { std::task::Poll::Pending }
    })
    .await;
    slots.into_iter().map(|s| s.expect("every future finished")).collect()
}

/// Counters about topology changes seen by this router.
#[derive(Debug, Default)]
pub struct BackendMetrics {
    /// Reads that missed on a slot's new owner and asked the old one.
    pub fallback_reads: Counter,
    /// Ops routed again after a node answered `moved`.
    pub moved_retries: Counter,
    /// Ops routed again because the node they were sent to had left the cluster.
    pub stale_retries: Counter,
    /// Keys copied to their new owner before a read-modify-write.
    pub keys_copied: Counter,
    /// Units (EXEC, scripts) sent again: a slot of theirs was moving, a node answered `moved`, or
    /// the node had left.
    pub transaction_retries: Counter,
    /// Transactions over several nodes (`spread.rs`) by how they ended: applied on every node,
    /// refused (nothing applied: a watched key changed, BUSY, OOM, a node down), or undecided (a
    /// commit unanswered: the nodes finish it among themselves).
    pub spread_committed: Counter,
    pub spread_refused: Counter,
    pub spread_undecided: Counter,
    /// Topologies adopted.
    pub topology_changes: Counter,
}

/// The routing state shared by all connections of a router.
pub struct Backend {
    routing: RwLock<Arc<Routing>>,
    version: AtomicU64,
    ports: Mutex<HashMap<(u32, String), Arc<dyn NodePort>>>,
    factory: PortFactory,
    managed: bool,
    pub metrics: BackendMetrics,
    /// The version routed by, for whoever follows topology changes (the pub/sub hub).
    versions: tokio::sync::watch::Sender<u64>,
    /// The cluster secret the links send (the pub/sub links take it from here).
    credentials: Credentials,
    /// The near cache, whose entries writes sent through here drop first (`--near-cache`).
    pub(crate) near: std::sync::OnceLock<Arc<crate::nearcache::NearCache>>,
    /// The latest version routed by in which some shard has another primary than in the routing
    /// it replaced (a failover or a hand-over): WAIT counts no replica for writes made before
    /// it (see `cmd/blocking.rs`, `wait`).
    primaries_changed: AtomicU64,
    /// This router's transactions over several nodes queue here for their nodes
    /// (`crate::keylocks`), rather than at the nodes' gates.
    pub(super) node_turns: crate::keylocks::KeyLocks,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend").field("version", &self.version()).finish_non_exhaustive()
    }
}

impl Backend {
    /// Starts links to every node of `topology` (which must be valid). `managed` says whether the
    /// topology comes from a source that nodes follow too (so they may answer `moved`). Needs a
    /// Tokio runtime.
    pub fn new(topology: Topology, options: LinkOptions, managed: bool) -> Arc<Backend> {
        let credentials = options.credentials.clone();
        let factory: PortFactory =
            Box::new(move |id, addr| NodeLink::spawn(id, addr.to_string(), &options) as Arc<dyn NodePort>);
        Backend::build(topology, managed, factory, credentials)
    }

    /// The cluster secret calls to the nodes carry.
    pub fn credentials(&self) -> Credentials {
        self.credentials.clone()
    }

    /// Like [`new`](Self::new), with ports made by `factory`.
    pub fn with_ports(topology: Topology, managed: bool, factory: PortFactory) -> Arc<Backend> {
        Backend::build(topology, managed, factory, Credentials::default())
    }

    fn build(
        topology: Topology,
        managed: bool,
        factory: PortFactory,
        credentials: Credentials,
    ) -> Arc<Backend> {
        let backend = Backend {
            routing: RwLock::new(Arc::new(Routing {
                table: SlotTable::new(&topology),
                topology: Arc::new(topology.clone()),
                nodes: Vec::new(),
                replicas: Vec::new(),
                managed,
                capturing: false,
            })),
            version: AtomicU64::new(0),
            ports: Mutex::default(),
            factory,
            managed,
            metrics: BackendMetrics::default(),
            versions: tokio::sync::watch::channel(0).0,
            credentials,
            near: std::sync::OnceLock::new(),
            primaries_changed: AtomicU64::new(0),
            node_turns: crate::keylocks::KeyLocks::nodes(),
        };
        backend.install(topology);
        Arc::new(backend)
    }

    /// Turns on the near cache's write hook (once, at start).
    pub fn set_near_cache(&self, near: Arc<crate::nearcache::NearCache>) {
        let _ = self.near.set(near);
    }

    /// Before `op` is sent: a write drops what the near cache holds of its keys, so this
    /// router's clients read their own writes (the node's invalidation comes later, on another
    /// stream). Off, one branch.
    #[inline]
    pub(crate) fn before_send(&self, op: &shoal_wire::proto::Op) {
        if let Some(near) = self.near.get() {
            near_write(near, op);
        }
    }

    pub fn routing(&self) -> Arc<Routing> {
        self.routing.read().clone()
    }

    /// The topology version currently routed by.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The latest version routed by whose shards' primaries are not all those of the version
    /// before it (0: none since this router started).
    pub fn primaries_changed_at(&self) -> u64 {
        self.primaries_changed.load(Ordering::Acquire)
    }

    /// Follows the version routed by (it changes after the new routing is in place).
    pub fn watch_version(&self) -> tokio::sync::watch::Receiver<u64> {
        self.versions.subscribe()
    }

    /// Shutdown: every link stops when its node's stream ends, without reconnecting.
    pub fn close(&self) {
        for port in self.ports.lock().values() {
            port.close();
        }
    }

    /// Whether every node's stream is up.
    pub fn all_up(&self) -> bool {
        self.routing().nodes.iter().all(|n| n.is_up())
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
        /// How long a replaced primary must have said nothing for its calls to be routed again
        /// (a hand-over's old primary answers within milliseconds, with `moved`).
        const SILENT_BEFORE_ABANDON: std::time::Duration = std::time::Duration::from_millis(500);
        let mut ports = self.ports.lock();
        let mut routing = self.routing.write();
        if self.version() >= topology.version && !routing.nodes.is_empty() {
            return false;
        }
        let nodes: Vec<Arc<dyn NodePort>> = topology
            .nodes
            .iter()
            .map(|n| {
                ports.entry((n.id, n.addr.clone())).or_insert_with(|| (self.factory)(n.id, &n.addr)).clone()
            })
            .collect();
        let replicas: Vec<Vec<Arc<dyn NodePort>>> = topology
            .nodes
            .iter()
            .map(|n| {
                n.replicas
                    .iter()
                    .map(|r| {
                        ports.entry((n.id, r.clone())).or_insert_with(|| (self.factory)(n.id, r)).clone()
                    })
                    .collect()
            })
            .collect();
        // Links to nodes that left are dropped (their tasks end once the last user lets go).
        ports.retain(|(id, addr), _| {
            topology.nodes.iter().any(|n| n.id == *id && (&n.addr == addr || n.replicas.contains(addr)))
        });
        let version = topology.version;
        let previous = routing.clone();
        tracing::info!(
            version,
            nodes = topology.nodes.len(),
            migrations = topology.migrations.len(),
            "routing by topology"
        );
        *routing = Arc::new(Routing {
            table: SlotTable::new(&topology),
            topology: Arc::new(topology),
            nodes,
            replicas,
            managed: self.managed,
            capturing: false,
        });
        if !previous.nodes.is_empty() && primaries_differ(&previous.topology, &routing.topology) {
            self.primaries_changed.store(version, Ordering::Release);
        }
        self.version.store(version, Ordering::Release);
        self.metrics.topology_changes.inc();
        let current = routing.clone();
        drop(routing);
        drop(ports);
        // A node that just became a primary may have been away a moment ago (a replica that
        // restarted, then was handed the shard): its link stops backing off.
        // (Not at the first topology: its links are new and wait for their first connection.)
        if !previous.nodes.is_empty() {
            current.nodes.iter().filter(|p| !previous.contains(&***p)).for_each(|new| new.reconnect_now());
        }
        // A primary replaced while it does not answer (frozen, cut off): the calls waiting on it
        // are routed again now, by this topology, rather than waiting out their deadline.
        for old in previous.nodes.iter().filter(|p| !current.contains(&***p)) {
            old.abandon_if_silent(SILENT_BEFORE_ABANDON);
        }
        // The near cache keeps what it holds of slots whose owner did not change (outside the
        // routing locks: it walks every entry).
        if let Some(near) = self.near.get() {
            near.adopted(previous.version(), current.version(), &owner_changes(&previous, &current));
        }
        self.versions.send_replace(version);
        true
    }

    /// After a `moved` reply from `node` (at `node_version`): catches up with the node, or lets
    /// the node catch up with us.
    pub(crate) async fn reconcile(&self, node: &dyn NodePort, node_version: u64) {
        let mine = self.version();
        if node_version > mine {
            match node.get_topology().await {
                Ok(Some(t)) => {
                    self.adopt(t);
                }
                Ok(None) => {}
                Err(e) => tracing::debug!(error = %e, "could not fetch a node's topology"),
            }
        } else if node_version < mine {
            if let Err(e) = node.offer_topology(self.routing().topology.clone()).await {
                tracing::debug!(error = %e, "could not offer a node our topology");
            }
        } else {
            // Same version, yet refused: we routed by an older snapshot. Let the retry re-route.
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    /// Whether `port`, which failed a call routed by `routing`, has left the cluster since: the
    /// op can then be routed again by the newer topology. (A node leaves only after handing its
    /// slots over and stops gracefully, answering every batch it took, so an op it did not
    /// answer was not applied.)
    pub(super) fn has_left(&self, port: &dyn NodePort, routing: &Routing) -> bool {
        if self.version() <= routing.topology.version {
            return false;
        }
        !self.routing().contains(port)
    }
}
