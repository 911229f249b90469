//! Units: an op a node applies as one whole over its keys, with no other op in between (a
//! transaction's ops, a script, MSETNX, a cross-key command whose keys share a node). A unit is
//! queued on its node when it is made, so it keeps its place among the connection's other ops.
//! The node refuses it whole if any key is not its own at the routing's version (`moved`) or is
//! in a slot moving between nodes (`try_again`); the settle loop then catches up, or gives the
//! move a moment, and sends the same unit again by the current topology, until the deadline. So
//! a unit is applied whole, once, or not at all: a call that failed otherwise (a timeout, a
//! broken link) is never sent twice, as the node may have run it.
//!
//! Where a unit goes is its [`Placement`]: a transaction or a script goes to its keys' owner by
//! the routing's table and waits out a move there ([`Backend::unit`]); a command that has another
//! way for keys in motion asks for a node whose slots are all settled, and learns at once when
//! there is none ([`Backend::atomic`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use shoal_wire::proto::{Op, Reply};
use tokio::time::Instant;

use super::port::{NodeCall, NodePort};
use super::settle::{Outcome, outcome};
use super::{AtomicError, Backend, Routing};

/// Where a unit goes.
#[derive(Debug, Clone, Copy)]
enum Placement {
    /// The keys' one owner by the table (a slot in motion is waited out: the node answers
    /// `try_again`); a unit without keys goes to this position (else the first node).
    Owner(Option<usize>),
    /// The keys' one node, only while none of their slots is moving (else `Spread`).
    Settled,
    /// A script over keys of several nodes: the first of their owners by position, which holds
    /// the others while it runs (`node/src/script/reach.rs`); the first node of all when `all`
    /// (it holds every node).
    Spanning { all: bool },
}

impl Placement {
    fn node(self, routing: &Routing, keys: &[Bytes]) -> Option<usize> {
        match self {
            Placement::Owner(at) if keys.is_empty() => Some(at.unwrap_or(0) % routing.len().max(1)),
            Placement::Owner(_) => routing.one_owner(keys),
            Placement::Spanning { all: true } => Some(0),
            Placement::Spanning { all: false } => keys.iter().map(|k| routing.locate(k).0).min().or(Some(0)),
            Placement::Settled => {
                let mut node = None;
                for key in keys {
                    match routing.locate(key) {
                        (pos, None) if node.is_none_or(|n| n == pos) => node = Some(pos),
                        _ => return None,
                    }
                }
                node
            }
        }
    }
}

impl Backend {
    /// A transaction's or a script's `op` as a unit over `keys` (see the module docs); `at`: the
    /// node position of a unit without keys (or, for the first attempt, the position the caller
    /// already found).
    pub fn unit(
        self: &Arc<Self>,
        routing: &Arc<Routing>,
        keys: Vec<Bytes>,
        at: Option<usize>,
        op: Op,
        deadline: Instant,
    ) -> UnitCall {
        let first = at.or_else(|| Placement::Owner(None).node(routing, &keys));
        self.send_unit(routing, keys, Placement::Owner(at), first, op, deadline)
    }

    /// A script's `op` over `keys` that may live on several nodes (see [`Placement::Spanning`]);
    /// sent again, like any unit, when the node answers `moved` or `try_again`.
    pub fn spanning_unit(
        self: &Arc<Self>,
        routing: &Arc<Routing>,
        keys: Vec<Bytes>,
        all: bool,
        op: Op,
        deadline: Instant,
    ) -> UnitCall {
        let placement = Placement::Spanning { all };
        let first = placement.node(routing, &keys);
        self.send_unit(routing, keys, placement, first, op, deadline)
    }

    /// `op` about `keys`, all of which must live on one node whose slots are settled: when they
    /// do not (now, or after a topology change) the call ends with [`AtomicError::Spread`]
    /// without running, for the caller to take another way.
    pub fn atomic(
        self: &Arc<Self>,
        routing: &Arc<Routing>,
        keys: Vec<Bytes>,
        op: Op,
        deadline: Instant,
    ) -> UnitCall {
        self.before_send(&op);
        let first = Placement::Settled.node(routing, &keys);
        self.send_unit(routing, keys, Placement::Settled, first, op, deadline)
    }

    fn send_unit(
        self: &Arc<Self>,
        routing: &Arc<Routing>,
        keys: Vec<Bytes>,
        placement: Placement,
        first: Option<usize>,
        op: Op,
        deadline: Instant,
    ) -> UnitCall {
        let first = first.map(|pos| {
            let port = routing.nodes[pos % routing.len()].clone();
            let call = port.call(op.clone(), routing.version(), deadline);
            (port, call)
        });
        UnitCall { backend: self.clone(), routing: routing.clone(), keys, placement, op, deadline, first }
    }
}

/// A unit in flight.
pub struct UnitCall {
    backend: Arc<Backend>,
    routing: Arc<Routing>,
    keys: Vec<Bytes>,
    placement: Placement,
    op: Op,
    deadline: Instant,
    /// The first attempt (`None`: the keys do not share a node).
    first: Option<(Arc<dyn NodePort>, NodeCall<Reply>)>,
}

impl UnitCall {
    /// The node's reply once it ran the unit (or refused it for its own reasons);
    /// [`AtomicError::Spread`] when the keys do not share a node (now, or after a topology
    /// change): Redis Cluster's CROSSSLOT.
    pub async fn wait(self) -> Result<Reply, AtomicError> {
        let UnitCall { backend, routing, keys, placement, op, deadline, first } = self;
        let Some((port, call)) = first else { return Err(AtomicError::Spread) };
        let spread = AtomicBool::new(false);
        let first = async { outcome(&backend, &port, &routing, &op, call.wait().await) };
        let again = |routing: Arc<Routing>| {
            let (backend, keys, op, spread) = (&backend, &keys, &op, &spread);
            async move {
                if let Placement::Owner(_) | Placement::Spanning { .. } = placement {
                    backend.metrics.transaction_retries.inc();
                }
                let Some(pos) = placement.node(&routing, keys) else {
                    // Done, as far as settling goes: the caller learns the keys spread.
                    spread.store(true, Ordering::Relaxed);
                    return Ok(Outcome::Done(Reply::default()));
                };
                let port = &routing.nodes[pos];
                let result = port.call(op.clone(), routing.version(), deadline).wait().await;
                outcome(backend, port, &routing, op, result)
            }
        };
        let reply = backend.settle(first, again, deadline).await?;
        if spread.load(Ordering::Relaxed) {
            return Err(AtomicError::Spread);
        }
        Ok(reply)
    }
}
