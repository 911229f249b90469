//! The calls commands make, each returning settled replies.
//!
//! A call is queued on its node(s) when it is made (so a pipeline's ops reach the node queues
//! together and share batches) and settled when awaited. Settling is one loop for every kind of
//! call ([`Backend::settle`]): an attempt either produces the result, or finds the routing out of
//! date (a node answered `moved`, the node left the cluster, or a unit met a slot in motion);
//! then, until the deadline, the router and that node catch up with each other (or the move is
//! given a moment) and the call is routed again by the current topology. Units (transactions,
//! scripts) are in [`super::unit`], blocking waits in [`super::block`]: the same loop, and the
//! only places `moved` is handled.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use shoal_wire::proto::{Op, Reply, op::Kind, reply};
use tokio::time::Instant;

use super::moving;
use super::port::{NodeCall, NodePort};
use super::settle::{Outcome, may_route_again, outcome};
use super::{Backend, BackendError, ReadFrom, Routing};

impl Backend {
    /// `op` on the node that owns `key`.
    pub fn key(self: &Arc<Self>, routing: &Arc<Routing>, key: Bytes, op: Op, deadline: Instant) -> KeyCall {
        self.before_send(&op);
        let (pos, from) = routing.locate(&key);
        let first = match from {
            None => {
                let port = routing.nodes[pos].clone();
                let call = port.call(op.clone(), routing.version(), deadline);
                First::Sent { port, call }
            }
            // Moving: several dependent steps, run when awaited.
            Some(_) => First::Moving,
        };
        KeyCall { backend: self.clone(), routing: routing.clone(), op, deadline, first }
    }

    /// A read-only `op` on a replica of the shard that owns `key` (the first one whose link is
    /// up; with `ReadFrom::Nearest`, the member with the shortest round trip, which may be the
    /// primary), when the slot is not moving; else as [`key`](Self::key). A replica answers `moved`
    /// unless it serves this very topology version with a full copy (it refuses writes too);
    /// the call is then routed again like any `moved` one, which sends it to the primary.
    pub fn key_on_replica(
        self: &Arc<Self>,
        routing: &Arc<Routing>,
        key: Bytes,
        op: Op,
        policy: ReadFrom,
        deadline: Instant,
    ) -> KeyCall {
        let (pos, from) = routing.locate(&key);
        let replicas = routing.replicas.get(pos).map_or(&[][..], Vec::as_slice);
        let replica = match policy {
            ReadFrom::Nearest => nearest(&routing.nodes[pos], replicas),
            _ => replicas.iter().find(|p| p.is_up()),
        };
        match (from, replica) {
            (None, Some(port)) => {
                let call = port.call(op.clone(), routing.version(), deadline);
                let first = First::Sent { port: port.clone(), call };
                KeyCall { backend: self.clone(), routing: routing.clone(), op, deadline, first }
            }
            _ => self.key(routing, key, op, deadline),
        }
    }

    /// One op per key, grouped per node: each node gets one group (one batch entry, one wake-up)
    /// and the replies come back in the order of `items`.
    pub fn keys(
        self: &Arc<Self>,
        routing: &Arc<Routing>,
        items: impl Iterator<Item = (Bytes, Op)>,
        deadline: Instant,
    ) -> MultiCall {
        // Room for an even share and some, so that the groups rarely grow (each growth moves
        // every item so far, and an item is ~140 bytes).
        let share = items.size_hint().0 / routing.len().max(1);
        let room = share + share / 4 + 4;
        // (Reserved on a node's first item: a node that gets none allocates nothing.)
        let mut per_node: Vec<Vec<(usize, Bytes, Op)>> = (0..routing.len()).map(|_| Vec::new()).collect();
        let mut alone = Vec::new();
        let mut total = 0;
        for (i, (key, op)) in items.enumerate() {
            total = i + 1;
            self.before_send(&op);
            let (pos, from) = routing.locate(&key);
            // Moving keys take their own path; a large op travels on its own (in pieces).
            if from.is_some() || shoal_wire::pieces::op_is_large(&op) {
                alone.push((i, self.key(routing, key, op, deadline)));
            } else {
                let group = &mut per_node[pos];
                if group.capacity() == 0 {
                    group.reserve(room);
                }
                group.push((i, key, op));
            }
        }
        let version = routing.version();
        let groups = per_node
            .into_iter()
            .enumerate()
            .filter(|(_, items)| !items.is_empty())
            .map(|(pos, items)| {
                let port = routing.nodes[pos].clone();
                let ops = items.iter().map(|(_, _, op)| op.clone()).collect();
                let call = port.call_group(ops, version, deadline);
                Group { port, items, call }
            })
            .collect();
        MultiCall { backend: self.clone(), routing: routing.clone(), deadline, total, groups, alone }
    }

    /// The op `make()` builds, on every node at one topology version.
    pub fn all(
        self: &Arc<Self>,
        routing: &Arc<Routing>,
        make: impl Fn() -> Op + Send + Sync + 'static,
        deadline: Instant,
    ) -> AllCall {
        if self.near.get().is_some() {
            self.before_send(&make());
        }
        let calls = send_all(routing, &make, deadline);
        AllCall { backend: self.clone(), routing: routing.clone(), make: Box::new(make), deadline, calls }
    }

    /// `op` on the node at position `pos` (ops about no key in particular: SCAN, RANDOMKEY). If
    /// the routing changes, it goes to the node at that position (modulo the node count) of the
    /// current topology.
    pub fn at(self: &Arc<Self>, routing: &Arc<Routing>, pos: usize, op: Op, deadline: Instant) -> AtCall {
        self.before_send(&op);
        let port = routing.nodes[pos % routing.len()].clone();
        let call = port.call(op.clone(), routing.version(), deadline);
        AtCall { backend: self.clone(), routing: routing.clone(), pos, op, deadline, port, call }
    }
}

/// The replica to read from under `--read-from nearest`: the one with the shortest measured
/// round trip, if it is shorter than the primary's (None: read from the primary). A member not
/// measured yet (just connected, or its last ping failed) counts as farthest.
pub(super) fn nearest<'a>(
    primary: &Arc<dyn NodePort>,
    replicas: &'a [Arc<dyn NodePort>],
) -> Option<&'a Arc<dyn NodePort>> {
    let far = std::time::Duration::MAX;
    let (best, rtt) = replicas
        .iter()
        .filter(|p| p.is_up())
        .map(|p| (p, p.rtt().unwrap_or(far)))
        .min_by_key(|(_, rtt)| *rtt)?;
    (rtt < primary.rtt().unwrap_or(far)).then_some(best)
}

fn send_all(
    routing: &Routing,
    make: &dyn Fn() -> Op,
    deadline: Instant,
) -> Vec<(Arc<dyn NodePort>, NodeCall<Reply>)> {
    let version = routing.version();
    routing.nodes.iter().map(|n| (n.clone(), n.call(make(), version, deadline))).collect()
}

enum First {
    Sent { port: Arc<dyn NodePort>, call: NodeCall<Reply> },
    Moving,
}

/// One key's op in flight (kept small: every pipelined command holds one).
pub struct KeyCall {
    backend: Arc<Backend>,
    routing: Arc<Routing>,
    /// The op again, to route it again; its key is the call's key.
    op: Op,
    deadline: Instant,
    first: First,
}

impl KeyCall {
    pub async fn wait(self) -> Result<Reply, BackendError> {
        let KeyCall { backend, routing, op, deadline, first } = self;
        // The common case stays small: a reply from the node it was sent to. Anything else takes
        // the settle loop, boxed, so its (much larger) state is not part of every call's future.
        let first = match first {
            First::Sent { port, call } => match outcome(&backend, &port, &routing, &op, call.wait().await)? {
                Outcome::Done(r) => return Ok(r),
                other => Some(other),
            },
            First::Moving => None,
        };
        Box::pin(settle_key(backend, routing, op, deadline, first)).await
    }
}

/// A key's op past its first attempt (or in a moving slot): the settle loop.
async fn settle_key(
    backend: Arc<Backend>,
    routing: Arc<Routing>,
    op: Op,
    deadline: Instant,
    first: Option<Outcome<Reply>>,
) -> Result<Reply, BackendError> {
    let key = Bytes::copy_from_slice(shoal_wire::ops::key_of(&op).unwrap_or_default());
    // A DEL during a move may delete on one side in one attempt and find nothing in the next:
    // it counts as one delete all the same.
    let deleted = AtomicBool::new(false);
    let attempt = |routing: Arc<Routing>| key_attempt(&backend, routing, &key, &op, deadline, &deleted);
    let first = async {
        match first {
            Some(outcome) => Ok(outcome),
            None => key_attempt(&backend, routing.clone(), &key, &op, deadline, &deleted).await,
        }
    };
    let reply = backend.settle(first, attempt, deadline).await?;
    Ok(match reply.kind {
        Some(reply::Kind::Int(0))
            if matches!(op.kind, Some(Kind::Del(_))) && deleted.load(Ordering::Relaxed) =>
        {
            Reply { kind: Some(reply::Kind::Int(1)), ..Default::default() }
        }
        _ => reply,
    })
}

/// One attempt at a key's op by `routing`.
async fn key_attempt(
    backend: &Backend,
    routing: Arc<Routing>,
    key: &Bytes,
    op: &Op,
    deadline: Instant,
    deleted: &AtomicBool,
) -> Result<Outcome<Reply>, BackendError> {
    match routing.locate(key) {
        (pos, None) => {
            let port = &routing.nodes[pos];
            let result = port.call(op.clone(), routing.version(), deadline).wait().await;
            outcome(backend, port, &routing, op, result)
        }
        (pos, Some(old)) => moving::attempt(backend, &routing, pos, old, key, op, deadline, deleted).await,
    }
}

/// One node's part of a multi-key call: argument positions with their keys and ops (kept to
/// route them again), and the call.
struct Group {
    port: Arc<dyn NodePort>,
    items: Vec<(usize, Bytes, Op)>,
    call: NodeCall<Vec<Reply>>,
}

/// The calls of a multi-key command, one per node involved (plus one per key that travels alone).
pub struct MultiCall {
    backend: Arc<Backend>,
    routing: Arc<Routing>,
    deadline: Instant,
    total: usize,
    groups: Vec<Group>,
    alone: Vec<(usize, KeyCall)>,
}

impl MultiCall {
    /// Every op's reply, in argument order; the first failure (a node error reply included)
    /// becomes the error. Ops the routing got wrong are settled one by one.
    pub async fn gather(self) -> Result<Vec<Reply>, BackendError> {
        self.each().await.collect()
    }

    /// Every op's own result, in argument order: a node that failed fails only its own ops (the
    /// lane's commands are independent of each other). Ops the routing got wrong are settled
    /// one by one.
    /// (An iterator, not a vector: a lane takes each reply once, as it answers its request.)
    pub async fn each(self) -> Each {
        let MultiCall { backend, routing, deadline, total, groups, alone } = self;
        let mut out: Vec<Option<Result<Reply, BackendError>>> = (0..total).map(|_| None).collect();
        let mut again = Vec::new();
        for Group { port, items, call } in groups {
            match call.wait().await {
                Ok(replies) => {
                    for ((i, key, op), r) in items.into_iter().zip(replies) {
                        match outcome(&backend, &port, &routing, &op, Ok(r)) {
                            Ok(Outcome::Done(r)) => out[i] = Some(Ok(r)),
                            // Refused: this op alone goes through the settle loop.
                            _ => again.push((i, backend.key(&backend.routing(), key, op, deadline))),
                        }
                    }
                }
                Err(e) => {
                    // The node left the cluster: its ops that may go again (see `outcome`) are
                    // routed to the new owners; the others fail.
                    let left = backend.has_left(&*port, &routing);
                    let current = backend.routing();
                    for (i, k, op) in items {
                        if left && may_route_again(&e, &op) {
                            again.push((i, backend.key(&current, k, op, deadline)));
                        } else {
                            out[i] = Some(Err(e.clone()));
                        }
                    }
                }
            }
        }
        for (i, call) in alone.into_iter().chain(again) {
            out[i] = Some(call.wait().await);
        }
        out.into_iter().map(filled as Filled)
    }
}

/// [`MultiCall::each`]'s results, in argument order.
pub type Each = std::iter::Map<std::vec::IntoIter<Option<Result<Reply, BackendError>>>, Filled>;
type Filled = fn(Option<Result<Reply, BackendError>>) -> Result<Reply, BackendError>;

/// Every op's place is filled by the end of [`MultiCall::each`]; an empty reply otherwise.
#[inline]
fn filled(r: Option<Result<Reply, BackendError>>) -> Result<Reply, BackendError> {
    r.unwrap_or_else(|| Ok(Reply::default()))
}

/// One op on every node, all at one topology version.
pub struct AllCall {
    backend: Arc<Backend>,
    routing: Arc<Routing>,
    make: Box<dyn Fn() -> Op + Send + Sync>,
    deadline: Instant,
    calls: Vec<(Arc<dyn NodePort>, NodeCall<Reply>)>,
}

impl AllCall {
    /// Every node's reply, in topology order. If a node serves another topology version, or one
    /// has left, the whole round runs again on the current topology: a fan-out never mixes
    /// versions, so DBSIZE, KEYS and FLUSHALL always cover a node that just joined.
    pub async fn gather(self) -> Result<Vec<Reply>, BackendError> {
        let AllCall { backend, routing, make, deadline, calls } = self;
        // What the op is (a FLUSHALL is not sent again where it may have run; a DBSIZE is).
        let probe = make();
        let round = |routing: Arc<Routing>, calls: Vec<(Arc<dyn NodePort>, NodeCall<Reply>)>| {
            let (backend, probe) = (&backend, &probe);
            async move {
                let mut out = Vec::with_capacity(calls.len());
                let mut retry = None;
                for (port, call) in calls {
                    match outcome(backend, &port, &routing, probe, call.wait().await)? {
                        Outcome::Done(r) => out.push(r),
                        Outcome::Moved(node, v) => retry = retry.or(Some(Outcome::Moved(node, v))),
                        Outcome::Stale => retry = retry.or(Some(Outcome::Stale)),
                        Outcome::TryAgain => retry = retry.or(Some(Outcome::TryAgain)),
                    }
                }
                Ok(retry.unwrap_or(Outcome::Done(out)))
            }
        };
        let again = |routing: Arc<Routing>| {
            let calls = send_all(&routing, &*make, deadline);
            round(routing, calls)
        };
        backend.settle(round(routing.clone(), calls), again, deadline).await
    }
}

/// One op on one node by position.
pub struct AtCall {
    backend: Arc<Backend>,
    routing: Arc<Routing>,
    pos: usize,
    op: Op,
    deadline: Instant,
    port: Arc<dyn NodePort>,
    call: NodeCall<Reply>,
}

impl AtCall {
    pub async fn wait(self) -> Result<Reply, BackendError> {
        let AtCall { backend, routing, pos, op, deadline, port, call } = self;
        let first = async { outcome(&backend, &port, &routing, &op, call.wait().await) };
        let again = |routing: Arc<Routing>| {
            let (backend, op) = (&backend, &op);
            async move {
                let port = routing.nodes[pos % routing.len()].clone();
                let result = port.call(op.clone(), routing.version(), deadline).wait().await;
                outcome(backend, &port, &routing, op, result)
            }
        };
        backend.settle(first, again, deadline).await
    }
}
