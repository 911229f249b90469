//! Routing under resharding against scripted fake nodes: each fake applies ops with the node's
//! own code (`shoal_node::ops` over a real store and view), answers at once, and can be told to
//! lag, refuse, go down or let "another client" act between two steps of a call. One test per
//! rule of docs/architecture.md's "Rules that make it lossless" that the router enforces.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use shoal_node::membership::NodeView;
use shoal_node::store::{Store, StoreConfig, SystemClock};
use shoal_wire::proto::{self, NodeSettings, NodeStats, Op, Reply, SnapshotInfo, op::Kind, reply};
use shoal_wire::{Migration, SlotRange, Topology, key_slot};
use tokio::time::Instant;

use super::port::LinkMetrics;
use super::port::{BoxFuture, NodeCall, NodeIdent, NodePort};
use super::*;

/// What a fake does with its next calls instead of applying them.
#[derive(Debug, Clone, Copy)]
enum Scripted {
    /// Answer `moved` with this version.
    Moved(u64),
    /// Fail as if the node had gone away.
    Down,
    /// Do what the node does (to script a later call).
    Serve,
    /// Answer an error line (a coordinator whose lease ran out refuses its commit so).
    Refuse,
}

type Hook = Box<dyn FnMut(&Op, &Store) + Send>;

struct FakeNode {
    ident: Arc<NodeIdent>,
    metrics: LinkMetrics,
    store: Store,
    view: Mutex<Arc<NodeView>>,
    script: Mutex<VecDeque<Scripted>>,
    /// Runs before each op is applied (another client acting between a call's steps).
    hook: Mutex<Option<Hook>>,
    /// Ops received: `(kind, batch version)`.
    log: Mutex<Vec<(String, u64)>>,
    /// The round trip the link reports (`--read-from nearest`).
    rtt: Mutex<Option<Duration>>,
    /// Transactions over several nodes prepared here (`spread.rs`), with their versions.
    prepared: Mutex<HashMap<Bytes, (proto::Transaction, u64)>>,
}

impl std::fmt::Debug for FakeNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeNode").field("id", &self.ident.id).finish()
    }
}

fn kind_name(op: &Op) -> String {
    let debug = format!("{:?}", op.kind);
    debug.trim_start_matches("Some(").split('(').next().unwrap_or_default().to_string()
}

impl FakeNode {
    fn new(id: u32, t: &Topology) -> Arc<FakeNode> {
        let node = Arc::new(FakeNode {
            ident: Arc::new(NodeIdent {
                id,
                addr: format!("fake:{id}"),
                deadline: Duration::from_millis(200),
            }),
            metrics: LinkMetrics::default(),
            store: Store::new(StoreConfig { shards: 8, ..StoreConfig::default() }, Arc::new(SystemClock)),
            view: Mutex::new(Arc::new(NodeView::unmanaged())),
            script: Mutex::default(),
            hook: Mutex::default(),
            log: Mutex::default(),
            rtt: Mutex::default(),
            prepared: Mutex::default(),
        });
        node.adopt(t);
        node
    }

    /// Serves `t` from now on (flagging slots moving in, as a node does).
    fn adopt(&self, t: &Topology) -> u64 {
        let mut view = self.view.lock();
        if view.version() >= t.version {
            return view.version();
        }
        *view = Arc::new(NodeView::new(self.ident.id, Arc::new(t.clone())));
        for slot in 0..shoal_wire::SLOT_COUNT as u16 {
            let incoming = matches!(t.role(slot, self.ident.id), shoal_wire::SlotRole::Incoming { .. });
            self.store.set_incoming(slot, incoming);
        }
        t.version
    }

    fn version(&self) -> u64 {
        self.view.lock().version()
    }

    fn apply(&self, op: Op, version: u64) -> Result<Reply, BackendError> {
        if let Some(answer) = self.scripted(&kind_name(&op), version) {
            return answer;
        }
        if let Some(hook) = self.hook.lock().as_mut() {
            hook(&op, &self.store);
        }
        let view = self.view.lock().clone();
        Ok(shoal_node::ops::apply_checked(&self.store, &view, version, op))
    }

    /// Logs the call (`what` at `version`) and takes the next scripted answer (`None`: serve).
    fn scripted(&self, what: &str, version: u64) -> Option<Result<Reply, BackendError>> {
        self.log.lock().push((what.to_string(), version));
        match self.script.lock().pop_front() {
            Some(Scripted::Moved(v)) => {
                Some(Ok(Reply { kind: Some(reply::Kind::Moved(v)), ..Default::default() }))
            }
            Some(Scripted::Down) => Some(Err(self.ident.unavailable("scripted outage"))),
            Some(Scripted::Refuse) => Some(Ok(refusal())),
            Some(Scripted::Serve) | None => None,
        }
    }

    fn ops_of(&self, kind: &str) -> usize {
        self.log.lock().iter().filter(|(k, _)| k == kind).count()
    }
}

impl NodePort for FakeNode {
    fn ident(&self) -> &Arc<NodeIdent> {
        &self.ident
    }
    fn is_up(&self) -> bool {
        true
    }
    fn last_error(&self) -> String {
        String::new()
    }
    fn rtt(&self) -> Option<Duration> {
        *self.rtt.lock()
    }
    fn call(&self, op: Op, version: u64, _deadline: Instant) -> NodeCall<Reply> {
        NodeCall::done(self.apply(op, version), self.ident.clone())
    }
    fn call_group(&self, ops: Vec<Op>, version: u64, _deadline: Instant) -> NodeCall<Vec<Reply>> {
        let replies: Result<Vec<Reply>, BackendError> =
            ops.into_iter().map(|op| self.apply(op, version)).collect();
        NodeCall::done(replies, self.ident.clone())
    }
    fn get_topology(&self) -> BoxFuture<'_, Result<Option<Topology>, BackendError>> {
        let t = self.view.lock().topology.as_deref().cloned();
        Box::pin(async move { Ok(t) })
    }
    fn offer_topology(&self, t: Arc<Topology>) -> BoxFuture<'_, Result<u64, BackendError>> {
        let v = self.adopt(&t);
        Box::pin(async move { Ok(v) })
    }
    fn stats(&self) -> BoxFuture<'_, Result<NodeStats, BackendError>> {
        let keys = self.store.len() as u64;
        Box::pin(async move { Ok(NodeStats { keys, ..Default::default() }) })
    }
    fn configure(&self, change: NodeSettings) -> BoxFuture<'_, Result<NodeSettings, BackendError>> {
        Box::pin(async move { Ok(change) })
    }
    fn snapshot(&self) -> BoxFuture<'_, Result<SnapshotInfo, BackendError>> {
        Box::pin(async { Ok(SnapshotInfo::default()) })
    }
    /// Records the part (the real node also takes its gate and checks it now; the fake checks
    /// it when it commits).
    fn prepare(
        &self,
        req: proto::PrepareRequest,
        _wait: Duration,
    ) -> BoxFuture<'_, Result<Reply, BackendError>> {
        let answer = self.scripted("Prepare", req.topology_version).unwrap_or_else(|| {
            let t = req.transaction.unwrap_or_default();
            self.prepared.lock().insert(req.txid, (t, req.topology_version));
            Ok(Reply { kind: Some(reply::Kind::Ok(proto::Empty {})), ..Default::default() })
        });
        Box::pin(async move { answer })
    }
    fn decide(&self, req: proto::DecideRequest) -> BoxFuture<'_, Result<Reply, BackendError>> {
        let what = if req.commit { "Commit" } else { "Abort" };
        let answer = self.scripted(what, 0).unwrap_or_else(|| {
            let part = self.prepared.lock().remove(&req.txid);
            Ok(match (part, req.commit) {
                (Some((t, version)), true) => {
                    let view = self.view.lock().clone();
                    shoal_node::ops::apply_checked(&self.store, &view, version, op(Kind::Transaction(t)))
                }
                (None, true) => Reply {
                    kind: Some(reply::Kind::Error("ERR no such transaction".into())),
                    ..Default::default()
                },
                (_, false) => Reply { kind: Some(reply::Kind::Ok(proto::Empty {})), ..Default::default() },
            })
        });
        Box::pin(async move { answer })
    }
    fn close(&self) {}
    fn metrics(&self) -> &LinkMetrics {
        &self.metrics
    }
}

fn refusal() -> Reply {
    let line = "ERR the transaction was aborted: no decision came within its lease";
    Reply { kind: Some(reply::Kind::Error(line.into())), ..Default::default() }
}

/// Fake nodes and a backend routing over them.
struct Fakes {
    nodes: Vec<Arc<FakeNode>>,
    backend: Arc<Backend>,
}

/// Version 1 over `n` nodes with even slot ranges.
fn even(n: usize) -> Topology {
    Topology::even(&(0..n).map(|i| format!("fake:{i}")).collect::<Vec<_>>())
}

/// `t`'s next version, with `slots` moving from node `from` to node `to`.
fn moving(t: &Topology, slots: (u16, u16), from: u32, to: u32) -> Topology {
    let mut next = t.clone();
    next.version += 1;
    let (start, end) = slots;
    let mut ranges = Vec::new();
    for r in &t.slots {
        if r.end < start || r.start > end {
            ranges.push(*r);
            continue;
        }
        if r.start < start {
            ranges.push(SlotRange { start: r.start, end: start - 1, node: r.node });
        }
        if r.end > end {
            ranges.push(SlotRange { start: end + 1, end: r.end, node: r.node });
        }
    }
    ranges.push(SlotRange { start, end, node: to });
    ranges.sort_by_key(|r| r.start);
    next.slots = ranges;
    next.migrations = vec![Migration { start, end, from, to }];
    next.validate().unwrap();
    next
}

/// `t`'s next version with no migrations (the move is done).
fn settled(t: &Topology) -> Topology {
    let mut next = t.clone();
    next.version += 1;
    next.migrations.clear();
    next
}

impl Fakes {
    /// Nodes serving `t`; the router routes by `router` (`t` if `None`).
    fn new(t: &Topology, router: Option<&Topology>) -> Fakes {
        let nodes: Vec<Arc<FakeNode>> = t.nodes.iter().map(|n| FakeNode::new(n.id, t)).collect();
        let by_addr: HashMap<String, Arc<FakeNode>> =
            nodes.iter().map(|n| (n.ident.addr.clone(), n.clone())).collect();
        let factory: PortFactory = Box::new(move |_, addr| by_addr[addr].clone() as Arc<dyn NodePort>);
        let backend = Backend::with_ports(router.unwrap_or(t).clone(), true, factory);
        Fakes { nodes, backend }
    }

    fn routing(&self) -> Arc<Routing> {
        self.backend.routing()
    }

    fn deadline(&self) -> Instant {
        Instant::now() + Duration::from_millis(300)
    }

    async fn run(&self, key: &str, op: Op) -> Result<Reply, BackendError> {
        self.backend.key(&self.routing(), Bytes::from(key.to_string()), op, self.deadline()).wait().await
    }
}

/// A key whose slot is in `start..=end`.
fn key_in(start: u16, end: u16) -> String {
    (0..).map(|i| format!("key:{i}")).find(|k| (start..=end).contains(&key_slot(k.as_bytes()))).unwrap()
}

fn op(kind: Kind) -> Op {
    Op { kind: Some(kind), ..Default::default() }
}
fn get(key: &str) -> Op {
    op(Kind::Get(proto::Get { key: Bytes::from(key.to_string()), ..Default::default() }))
}
fn set(key: &str, value: &str) -> Op {
    op(Kind::Set(proto::Set {
        key: Bytes::from(key.to_string()),
        value: Bytes::from(value.to_string()),
        ..Default::default()
    }))
}
fn del(key: &str) -> Op {
    op(Kind::Del(proto::Del { key: Bytes::from(key.to_string()) }))
}
fn incr(key: &str) -> Op {
    op(Kind::IncrBy(proto::IncrBy { key: Bytes::from(key.to_string()), delta: 1 }))
}
fn value(r: &Reply) -> Option<&[u8]> {
    match &r.kind {
        Some(reply::Kind::Value(v)) => Some(v),
        _ => None,
    }
}
fn int(r: &Reply) -> i64 {
    match r.kind {
        Some(reply::Kind::Int(n)) => n,
        ref other => panic!("not an integer: {other:?}"),
    }
}

/// Slots 0-99 of node 0 move to node 1 (two nodes).
fn two_nodes_moving() -> (Topology, Topology) {
    let t1 = even(2);
    let t2 = moving(&t1, (0, 99), 0, 1);
    (t1, t2)
}

#[tokio::test]
async fn reads_of_a_moving_key_fall_back_to_the_old_owner_until_it_has_arrived() {
    let (t1, t2) = two_nodes_moving();
    let f = Fakes::new(&t1, None);
    let key = key_in(0, 99);
    f.nodes[0].store.set(key.as_bytes(), b"old", Default::default()).unwrap();
    f.nodes.iter().for_each(|n| {
        n.adopt(&t2);
    });
    f.backend.adopt(t2);
    let r = f.run(&key, get(&key)).await.unwrap();
    assert_eq!(value(&r), Some(&b"old"[..]));
    assert_eq!(f.backend.metrics.fallback_reads.get(), 1);
    // Once the copy arrives (the puller imports it), the new owner answers alone.
    f.nodes[1].store.import([(key.as_bytes(), &b"old"[..], 0, 0)]);
    let gets_on_old = f.nodes[0].ops_of("Get");
    assert_eq!(value(&f.run(&key, get(&key)).await.unwrap()), Some(&b"old"[..]));
    assert_eq!(f.nodes[0].ops_of("Get"), gets_on_old, "no fallback once the new owner has it");
}

#[tokio::test]
async fn writes_go_to_the_new_owner_only_and_deletes_to_both() {
    let (_, t2) = two_nodes_moving();
    let f = Fakes::new(&t2, None);
    let key = key_in(0, 99);
    f.nodes[0].store.set(key.as_bytes(), b"old", Default::default()).unwrap();
    f.run(&key, set(&key, "new")).await.unwrap();
    assert_eq!(f.nodes[1].store.get(key.as_bytes()).as_deref(), Some(&b"new"[..]));
    assert_eq!(
        f.nodes[0].store.get(key.as_bytes()).as_deref(),
        Some(&b"old"[..]),
        "the old owner is not written"
    );
    let r = f.run(&key, del(&key)).await.unwrap();
    assert_eq!(int(&r), 1, "deleted on either side counts once");
    assert_eq!(f.nodes[0].store.get(key.as_bytes()), None, "deleted on the old owner too");
    assert_eq!(f.nodes[1].store.get(key.as_bytes()), None);
    // A later copy of the old value (a pull still on its way) cannot bring it back.
    assert_eq!(f.nodes[1].store.import([(key.as_bytes(), &b"old"[..], 0, 0)]), 0);
    assert_eq!(f.run(&key, get(&key)).await.unwrap().kind, Some(reply::Kind::Nil(proto::Empty {})));
}

#[tokio::test]
async fn a_read_that_meets_a_tombstone_does_not_fall_back() {
    let (_, t2) = two_nodes_moving();
    let f = Fakes::new(&t2, None);
    let key = key_in(0, 99);
    f.nodes[0].store.set(key.as_bytes(), b"old", Default::default()).unwrap();
    // The delete reached the new owner (a tombstone) but the old owner still holds the value.
    f.nodes[1].store.del(key.as_bytes());
    let r = f.run(&key, get(&key)).await.unwrap();
    assert_eq!(r.kind, Some(reply::Kind::Nil(proto::Empty {})), "the tombstone answers, not the old copy");
    assert_eq!(f.nodes[0].ops_of("Get"), 0);
}

#[tokio::test]
async fn a_delete_counts_when_the_old_owner_lags_and_answers_moved() {
    let (t1, t2) = two_nodes_moving();
    let f = Fakes::new(&t1, Some(&t2));
    let key = key_in(0, 99);
    f.nodes[0].store.set(key.as_bytes(), b"old", Default::default()).unwrap();
    f.nodes[1].adopt(&t2); // the new owner knows the move, the old one does not yet
    let r = f.run(&key, del(&key)).await.unwrap();
    assert_eq!(int(&r), 1, "the key existed: DEL answers 1 once the old owner caught up and deleted it");
    assert_eq!(f.nodes[0].version(), t2.version, "the router brought the old owner up to date");
    assert_eq!(f.nodes[0].store.get(key.as_bytes()), None);
}

#[tokio::test]
async fn a_delete_counts_when_the_move_settles_while_the_old_owner_refuses() {
    let (_, t2) = two_nodes_moving();
    let t3 = settled(&t2);
    let f = Fakes::new(&t2, None);
    let key = key_in(0, 99);
    f.nodes[0].store.set(key.as_bytes(), b"old", Default::default()).unwrap();
    // As the DEL reaches the old owner, the move finishes: the puller copies the key into the new
    // owner, both nodes adopt the settled version and the old owner refuses the router's op.
    let (old, new, k, next) = (Arc::downgrade(&f.nodes[0]), f.nodes[1].clone(), key.clone(), t3.clone());
    let mut fired = false;
    *f.nodes[0].hook.lock() = Some(Box::new(move |op, _| {
        if matches!(op.kind, Some(Kind::Del(_))) && !std::mem::replace(&mut fired, true) {
            new.store.import([(k.as_bytes(), &b"old"[..], 0, 0)]);
            new.adopt(&next);
            old.upgrade().unwrap().adopt(&next);
        }
    }));
    let r = f.run(&key, del(&key)).await.unwrap();
    assert_eq!(int(&r), 1, "the key existed until this DEL: it answers 1");
    assert_eq!(f.nodes[1].store.get(key.as_bytes()), None, "and it is gone");
    assert_eq!(f.backend.version(), t3.version);
}

#[tokio::test]
async fn read_modify_writes_copy_the_key_to_the_new_owner_first() {
    let (_, t2) = two_nodes_moving();
    let f = Fakes::new(&t2, None);
    let key = key_in(0, 99);
    f.nodes[0].store.set(key.as_bytes(), b"41", Default::default()).unwrap();
    assert_eq!(int(&f.run(&key, incr(&key)).await.unwrap()), 42);
    assert_eq!(f.nodes[1].store.get(key.as_bytes()).as_deref(), Some(&b"42"[..]));
    assert_eq!(f.backend.metrics.keys_copied.get(), 1);
}

#[tokio::test]
async fn a_copy_racing_a_delete_never_brings_the_key_back() {
    let (_, t2) = two_nodes_moving();
    let f = Fakes::new(&t2, None);
    let key = key_in(0, 99);
    f.nodes[0].store.set(key.as_bytes(), b"41", Default::default()).unwrap();
    // Between the router's Fetch (old owner) and Import (new owner), another client deletes it.
    let k = key.clone();
    *f.nodes[1].hook.lock() = Some(Box::new(move |op, store| {
        if matches!(op.kind, Some(Kind::Import(_))) {
            store.del(k.as_bytes());
        }
    }));
    assert_eq!(
        int(&f.run(&key, incr(&key)).await.unwrap()),
        1,
        "the INCR starts from nothing: receiver wins"
    );
}

#[tokio::test]
async fn a_stale_router_catches_up_from_the_node_that_refused_it() {
    let (t1, t2) = two_nodes_moving();
    let f = Fakes::new(&t2, Some(&t1));
    let key = key_in(0, 99);
    f.nodes[0].store.set(key.as_bytes(), b"old", Default::default()).unwrap();
    // The router still thinks node 0 owns the slot; node 0 knows it is moving out.
    let r = f.run(&key, get(&key)).await.unwrap();
    assert_eq!(value(&r), Some(&b"old"[..]));
    assert_eq!(f.backend.version(), t2.version, "adopted the node's newer topology");
    assert!(f.backend.metrics.moved_retries.get() >= 1);
}

#[tokio::test]
async fn a_node_without_the_routers_topology_is_given_it_before_it_serves() {
    let (t1, t2) = two_nodes_moving();
    let f = Fakes::new(&t1, Some(&t2));
    let key = key_in(0, 99);
    f.nodes[0].adopt(&t2);
    f.nodes[0].store.set(key.as_bytes(), b"old", Default::default()).unwrap();
    // The new owner lags: it would not know to keep the delete as a tombstone.
    f.run(&key, del(&key)).await.unwrap();
    assert_eq!(f.nodes[1].version(), t2.version, "offered the router's topology");
    assert_eq!(
        f.nodes[1].store.import([(key.as_bytes(), &b"old"[..], 0, 0)]),
        0,
        "the delete left a tombstone"
    );
}

#[tokio::test]
async fn a_moved_storm_ends_in_a_clear_error_at_the_deadline() {
    let t = even(2);
    let f = Fakes::new(&t, None);
    let key = key_in(0, 99);
    f.nodes[0].script.lock().extend(std::iter::repeat_n(Scripted::Moved(t.version), 10_000));
    let start = Instant::now();
    let deadline = Instant::now() + Duration::from_millis(50);
    let r = f.backend.key(&f.routing(), Bytes::from(key.clone()), get(&key), deadline).wait().await;
    assert_eq!(r, Err(BackendError::Unsettled));
    assert!(start.elapsed() < Duration::from_secs(2));
    assert!(f.backend.metrics.moved_retries.get() > 1);
}

#[tokio::test]
async fn a_node_that_left_is_routed_around() {
    // Node 2 leaves: its slots went to node 0 and the router already routes by the new version,
    // but a connection still holds the old routing.
    let t1 = even(3);
    let mut t2 = settled(&t1);
    for r in &mut t2.slots {
        if r.node == 2 {
            r.node = 0;
        }
    }
    t2.nodes.retain(|n| n.id != 2);
    t2.validate().unwrap();
    let f = Fakes::new(&t1, None);
    let old_routing = f.routing();
    f.nodes.iter().for_each(|n| {
        n.adopt(&t2);
    });
    f.backend.adopt(t2);
    f.nodes[2].script.lock().push_back(Scripted::Down);
    let key = key_in(t1.slots[2].start, t1.slots[2].end);
    let call = f.backend.key(&old_routing, Bytes::from(key.clone()), set(&key, "v"), f.deadline());
    assert_eq!(call.wait().await.unwrap().kind, Some(reply::Kind::Ok(proto::Empty {})));
    assert_eq!(f.nodes[0].store.get(key.as_bytes()).as_deref(), Some(&b"v"[..]));
    assert_eq!(f.backend.metrics.stale_retries.get(), 1);
    // A node still in the topology that is down is an error, not a silent re-route.
    f.nodes[1].script.lock().push_back(Scripted::Down);
    let other = key_in(t1.slots[1].start, t1.slots[1].end);
    assert!(matches!(f.run(&other, get(&other)).await, Err(BackendError::Unavailable { .. })));
}

#[tokio::test]
async fn multi_key_calls_settle_only_the_refused_ops_and_keep_argument_order() {
    let t = even(2);
    let f = Fakes::new(&t, None);
    let keys: Vec<String> = vec![key_in(0, 100), key_in(9000, 9100), key_in(200, 300)];
    for k in &keys {
        f.run(k, set(k, k)).await.unwrap();
    }
    f.nodes[1].script.lock().push_back(Scripted::Moved(t.version));
    let items = keys.iter().map(|k| (Bytes::from(k.clone()), get(k)));
    let replies = f.backend.keys(&f.routing(), items, f.deadline()).gather().await.unwrap();
    let got: Vec<_> =
        replies.iter().map(|r| value(r).map(|v| String::from_utf8_lossy(v).into_owned())).collect();
    assert_eq!(got, keys.iter().map(|k| Some(k.clone())).collect::<Vec<_>>());
    assert_eq!(f.nodes[0].ops_of("Get"), 2, "node 0's group was not sent again");
}

#[tokio::test]
async fn whole_keyspace_calls_run_again_on_one_version() {
    let t1 = even(2);
    let t2 = settled(&t1);
    let f = Fakes::new(&t2, Some(&t1));
    f.nodes[0].store.set(b"a", b"1", Default::default()).unwrap();
    f.nodes[1].store.set(b"b", b"1", Default::default()).unwrap();
    let dbsize = || op(Kind::DbSize(proto::DbSize {}));
    let replies = f.backend.all(&f.routing(), dbsize, f.deadline()).gather().await.unwrap();
    assert_eq!(replies.iter().map(int).sum::<i64>(), 2);
    assert_eq!(f.backend.version(), t2.version);
    assert_eq!(f.nodes[0].ops_of("DbSize"), 2, "the whole round ran again at the nodes' version");
}

#[tokio::test]
async fn copies_go_only_into_slots_still_moving_in() {
    // The move has settled; a router that still thinks it is moving must not copy the old
    // owner's stale entry over the new owner's state.
    let (_, t2) = two_nodes_moving();
    let t3 = settled(&t2);
    let f = Fakes::new(&t3, Some(&t2));
    let key = key_in(0, 99);
    f.nodes[1].store.set(key.as_bytes(), b"10", Default::default()).unwrap();
    f.nodes[1].store.del(key.as_bytes()); // deleted after the move settled: no tombstone
    assert_eq!(int(&f.run(&key, incr(&key)).await.unwrap()), 1);
    assert_eq!(f.backend.version(), t3.version);
}

#[tokio::test]
async fn atomic_calls_run_only_where_every_key_shares_a_settled_node() {
    let (t1, t2) = two_nodes_moving();
    let f = Fakes::new(&t1, None);
    let same: Vec<Bytes> = vec!["{tag}a".into(), "{tag}b".into()];
    let nx = |keys: &[Bytes]| op(Kind::MsetNx(proto::MSetNx { keys: keys.to_vec(), values: keys.to_vec() }));
    let r = f.backend.atomic(&f.routing(), same.clone(), nx(&same), f.deadline()).wait().await.unwrap();
    assert_eq!(int(&r), 1);
    let spread: Vec<Bytes> = vec![key_in(0, 99).into(), key_in(9000, 9100).into()];
    let r = f.backend.atomic(&f.routing(), spread.clone(), nx(&spread), f.deadline()).wait().await;
    assert_eq!(r, Err(AtomicError::Spread));
    // Keys that shared node 0 until a move started: refused as a whole, then found spread.
    let pair: Vec<Bytes> = vec![key_in(0, 99).into(), key_in(200, 300).into()];
    f.nodes.iter().for_each(|n| {
        n.adopt(&t2);
    });
    let r = f.backend.atomic(&f.routing(), pair.clone(), nx(&pair), f.deadline()).wait().await;
    assert_eq!(r, Err(AtomicError::Spread));
    assert!(
        f.nodes.iter().all(|n| pair.iter().all(|k| n.store.get(k).is_none())),
        "nothing was half applied"
    );
}

#[test]
fn nearest_reads_from_the_replica_with_the_shortest_round_trip_if_the_primary_is_farther() {
    let t = Topology::even(&["fake:0".into()]);
    let (primary, a, b) = (FakeNode::new(0, &t), FakeNode::new(1, &t), FakeNode::new(2, &t));
    let primary: Arc<dyn NodePort> = primary.clone();
    let replicas: Vec<Arc<dyn NodePort>> = vec![a.clone(), b.clone()];
    let ms = Duration::from_millis;
    let pick = |p: &Arc<dyn NodePort>| super::calls::nearest(p, &replicas).map(|r| r.ident().id);
    // Nothing measured yet: the primary.
    assert_eq!(pick(&primary), None);
    // A measured replica beats an unmeasured primary; the shorter of two wins.
    *a.rtt.lock() = Some(ms(3));
    assert_eq!(pick(&primary), Some(1));
    *b.rtt.lock() = Some(ms(1));
    assert_eq!(pick(&primary), Some(2));
    // A primary nearer than every replica (or as near) serves the read itself.
    let near = FakeNode::new(0, &t);
    *near.rtt.lock() = Some(ms(1));
    let near: Arc<dyn NodePort> = near;
    assert_eq!(pick(&near), None);
}

/// Keys of node 0 and node 1 of `even(2)`, and the ops of a transfer between them.
fn transfer_over_two_nodes() -> (String, String, Vec<(usize, Op)>) {
    let (a, b) = (key_in(0, 8191), key_in(8192, 16383));
    let ops = vec![(0, set(&a, "1")), (1, incr(&b)), (0, get(&a))];
    (a, b, ops)
}

impl Fakes {
    async fn spread(&self, ops: Vec<(usize, Op)>) -> Result<SpreadOutcome, AtomicError> {
        self.backend.spread_transaction(&self.routing(), ops, Vec::new(), self.deadline()).await
    }

    /// `key`'s value, read through the backend.
    async fn value_of(&self, key: &str) -> Option<Vec<u8>> {
        value(&self.run(key, get(key)).await.unwrap()).map(<[u8]>::to_vec)
    }
}

fn steps(f: &Fakes) -> Vec<Vec<String>> {
    f.nodes.iter().map(|n| n.log.lock().iter().map(|(k, _)| k.clone()).collect()).collect()
}

#[tokio::test]
async fn a_spread_transaction_prepares_in_order_then_commits_the_coordinator_first() {
    let f = Fakes::new(&even(2), None);
    let (a, b, ops) = transfer_over_two_nodes();
    let outcome = f.spread(ops).await.unwrap();
    let SpreadOutcome::Replies(replies) = outcome else { panic!("{outcome:?}") };
    // One reply per op, in the ops' order although they ran on two nodes.
    assert!(matches!(replies[0].kind, Some(reply::Kind::Ok(_))), "{replies:?}");
    assert_eq!(int(&replies[1]), 1);
    assert_eq!(value(&replies[2]), Some(&b"1"[..]));
    assert_eq!(steps(&f), [vec!["Prepare", "Commit"], vec!["Prepare", "Commit"]]);
    assert_eq!(f.backend.metrics.spread_committed.get(), 1);
    assert_eq!(f.value_of(&a).await.as_deref(), Some(&b"1"[..]));
    assert_eq!(f.value_of(&b).await.as_deref(), Some(&b"1"[..]));
}

#[tokio::test]
async fn a_refused_prepare_lets_go_of_every_part_and_applies_nothing() {
    let f = Fakes::new(&even(2), None);
    let (a, b, ops) = transfer_over_two_nodes();
    f.nodes[1].script.lock().push_back(Scripted::Down);
    let err = f.spread(ops).await.unwrap_err();
    assert!(matches!(err, AtomicError::Backend(BackendError::Unavailable { .. })), "{err:?}");
    // Node 1 may have prepared before its link failed: it is told to let go too.
    assert_eq!(steps(&f), [vec!["Prepare", "Abort"], vec!["Prepare", "Abort"]]);
    assert_eq!(f.backend.metrics.spread_refused.get(), 1);
    assert!(f.nodes.iter().all(|n| n.prepared.lock().is_empty()));
    assert_eq!(f.value_of(&a).await, None);
    assert_eq!(f.value_of(&b).await, None);
}

#[tokio::test]
async fn a_coordinator_silent_at_its_commit_leaves_the_others_to_ask_it() {
    let f = Fakes::new(&even(2), None);
    let (_, _, ops) = transfer_over_two_nodes();
    f.nodes[0].script.lock().extend([Scripted::Serve, Scripted::Down]);
    let err = f.spread(ops).await.unwrap_err();
    assert!(matches!(err, AtomicError::Backend(BackendError::Undecided { node: 0, .. })), "{err:?}");
    // No abort goes to the participant: the coordinator may have committed, and it decides.
    assert_eq!(steps(&f), [vec!["Prepare", "Commit"], vec!["Prepare"]]);
    assert_eq!(f.backend.metrics.spread_undecided.get(), 1);
}

#[tokio::test]
async fn a_spread_transaction_told_moved_lets_go_and_goes_again_by_the_new_topology() {
    let t1 = even(2);
    let t2 = settled(&t1);
    let f = Fakes::new(&t1, None);
    let (a, b, ops) = transfer_over_two_nodes();
    // Node 1 has moved on to version 2: the router catches up and prepares both again.
    f.nodes.iter().for_each(|n| {
        n.adopt(&t2);
    });
    f.nodes[1].script.lock().push_back(Scripted::Moved(t2.version));
    let outcome = f.spread(ops).await.unwrap();
    assert!(matches!(outcome, SpreadOutcome::Replies(_)), "{outcome:?}");
    assert_eq!(steps(&f)[0], ["Prepare", "Abort", "Prepare", "Commit"]);
    assert_eq!(f.backend.metrics.transaction_retries.get(), 1);
    assert_eq!(f.value_of(&a).await.as_deref(), Some(&b"1"[..]));
    assert_eq!(f.value_of(&b).await.as_deref(), Some(&b"1"[..]));
}

#[tokio::test]
async fn a_coordinator_that_refuses_its_commit_has_the_whole_transaction_go_again() {
    let f = Fakes::new(&even(2), None);
    let (_, b, ops) = transfer_over_two_nodes();
    f.nodes[0].script.lock().extend([Scripted::Serve, Scripted::Refuse]);
    let outcome = f.spread(ops).await.unwrap();
    assert!(matches!(outcome, SpreadOutcome::Replies(_)), "{outcome:?}");
    // Nothing was applied the first time (the participant was told to let go), once the second.
    assert_eq!(
        steps(&f),
        [vec!["Prepare", "Commit", "Prepare", "Commit"], vec!["Prepare", "Abort", "Prepare", "Commit"]]
    );
    assert_eq!(f.value_of(&b).await.as_deref(), Some(&b"1"[..]), "the increment applied once");
}
