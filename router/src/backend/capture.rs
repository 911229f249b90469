//! Capturing a transaction's ops (MULTI/EXEC): the queued commands run through their ordinary
//! handlers against a [`Routing`] whose ports record ops instead of sending them. EXEC then sends
//! the recorded ops to their node as one `Transaction` op and hands each handler the reply of its
//! own ops, so every command keeps its own reply conversion, unchanged.
//!
//! The capture routing has no slot moving (the owner gets every op as is; it refuses the
//! transaction with TRYAGAIN while a slot moves, and EXEC tries again). A handler that makes a
//! call after the ops have been sent (a command that needs a second step once it has seen the first
//! reply) gets [`BackendError::NotTransactional`]: that command's reply in the EXEC array says so,
//! rather than the step running outside the transaction.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use shoal_wire::Topology;
use shoal_wire::proto::{NodeSettings, NodeStats, Op, Reply, SnapshotInfo, op::Kind};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::port::LinkMetrics;
use super::port::{BoxFuture, NodeCall, NodeIdent, NodePort};
use super::{BackendError, Routing};

type Sender<T> = oneshot::Sender<Result<T, BackendError>>;

enum Waiter {
    One(Sender<Reply>),
    Group(usize, Sender<Vec<Reply>>),
}

#[derive(Default)]
struct State {
    /// Recorded ops with the position of the node they were for.
    ops: Vec<(usize, Op)>,
    waiters: Vec<Waiter>,
    sealed: bool,
}

/// The ops a transaction's commands made, and who waits for their replies.
#[derive(Default)]
pub struct Capture {
    state: Mutex<State>,
}

impl Capture {
    pub fn new() -> Arc<Capture> {
        Arc::new(Capture::default())
    }

    /// Node positions the recorded ops are for. A script without keys (EVAL ... 0) runs on any
    /// node, and a PUBLISH is for no node in particular (any node delivers it): they go wherever
    /// the rest of the transaction goes and count for none.
    pub fn positions(&self) -> BTreeSet<usize> {
        let floating = |op: &Op| match &op.kind {
            Some(Kind::Script(s)) => s.keys.is_empty(),
            Some(Kind::Publish(_)) => true,
            _ => false,
        };
        self.state.lock().ops.iter().filter(|(_, op)| !floating(op)).map(|(pos, _)| *pos).collect()
    }

    /// Where a transaction of only floating ops (keyless scripts, PUBLISH) goes: the node the
    /// first one picked.
    pub fn any_position(&self) -> Option<usize> {
        self.state.lock().ops.first().map(|(pos, _)| *pos)
    }

    /// Takes the recorded ops, in order; later calls fail (see the module doc).
    pub fn seal(&self) -> Vec<Op> {
        let mut state = self.state.lock();
        state.sealed = true;
        std::mem::take(&mut state.ops).into_iter().map(|(_, op)| op).collect()
    }

    /// Takes the recorded ops with the node position each was made for, in order; later calls
    /// fail (a transaction over several nodes: `super::spread`).
    pub fn seal_placed(&self) -> Vec<(usize, Op)> {
        let mut state = self.state.lock();
        state.sealed = true;
        std::mem::take(&mut state.ops)
    }

    /// Hands out the transaction's replies (one per sealed op, in order).
    pub fn deliver(&self, replies: Vec<Reply>) {
        let waiters = std::mem::take(&mut self.state.lock().waiters);
        let mut replies = replies.into_iter();
        for waiter in waiters {
            match waiter {
                Waiter::One(tx) => {
                    let r = replies.next().ok_or_else(too_few);
                    let _ = tx.send(r);
                }
                Waiter::Group(n, tx) => {
                    let group: Vec<Reply> = replies.by_ref().take(n).collect();
                    let r = if group.len() == n { Ok(group) } else { Err(too_few()) };
                    let _ = tx.send(r);
                }
            }
        }
    }

    /// Fails every waiter with `e` (the transaction did not run).
    pub fn fail(&self, e: BackendError) {
        let mut state = self.state.lock();
        state.sealed = true;
        for waiter in std::mem::take(&mut state.waiters) {
            match waiter {
                Waiter::One(tx) => drop(tx.send(Err(e.clone()))),
                Waiter::Group(_, tx) => drop(tx.send(Err(e.clone()))),
            }
        }
    }
}

fn too_few() -> BackendError {
    BackendError::BadReply("a transaction answered fewer replies than it had ops".into())
}

/// A node port that records (see [`Capture`]); administrative calls go to the real port.
#[derive(Debug)]
struct CapturePort {
    pos: usize,
    real: Arc<dyn NodePort>,
    capture: Arc<Capture>,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture").finish_non_exhaustive()
    }
}

impl NodePort for CapturePort {
    fn ident(&self) -> &Arc<NodeIdent> {
        self.real.ident()
    }

    fn is_up(&self) -> bool {
        self.real.is_up()
    }

    fn last_error(&self) -> String {
        self.real.last_error()
    }

    fn rtt(&self) -> Option<Duration> {
        self.real.rtt()
    }

    fn call(&self, op: Op, _version: u64, deadline: Instant) -> NodeCall<Reply> {
        let mut state = self.capture.state.lock();
        if state.sealed {
            return NodeCall::done(Err(BackendError::NotTransactional), self.ident().clone());
        }
        let (tx, rx) = oneshot::channel();
        state.ops.push((self.pos, op));
        state.waiters.push(Waiter::One(tx));
        NodeCall::waiting(rx, self.ident().clone(), deadline, None)
    }

    fn call_group(&self, ops: Vec<Op>, _version: u64, deadline: Instant) -> NodeCall<Vec<Reply>> {
        let mut state = self.capture.state.lock();
        if state.sealed {
            return NodeCall::done(Err(BackendError::NotTransactional), self.ident().clone());
        }
        let (tx, rx) = oneshot::channel();
        let n = ops.len();
        state.ops.extend(ops.into_iter().map(|op| (self.pos, op)));
        state.waiters.push(Waiter::Group(n, tx));
        NodeCall::waiting(rx, self.ident().clone(), deadline, None)
    }

    fn get_topology(&self) -> BoxFuture<'_, Result<Option<Topology>, BackendError>> {
        self.real.get_topology()
    }

    fn offer_topology(&self, t: Arc<Topology>) -> BoxFuture<'_, Result<u64, BackendError>> {
        self.real.offer_topology(t)
    }

    fn stats(&self) -> BoxFuture<'_, Result<NodeStats, BackendError>> {
        self.real.stats()
    }

    fn configure(&self, change: NodeSettings) -> BoxFuture<'_, Result<NodeSettings, BackendError>> {
        self.real.configure(change)
    }

    fn snapshot(&self) -> BoxFuture<'_, Result<SnapshotInfo, BackendError>> {
        self.real.snapshot()
    }

    fn close(&self) {}

    fn metrics(&self) -> &LinkMetrics {
        self.real.metrics()
    }
}

impl Routing {
    /// This routing with ports that record into `capture`, and no slot moving.
    pub fn capture(&self, capture: &Arc<Capture>) -> Routing {
        let nodes = self
            .nodes
            .iter()
            .enumerate()
            .map(|(pos, real)| {
                Arc::new(CapturePort { pos, real: real.clone(), capture: capture.clone() })
                    as Arc<dyn NodePort>
            })
            .collect();
        Routing {
            topology: self.topology.clone(),
            table: self.table.settled(),
            nodes,
            // Transactions run on primaries only.
            replicas: Vec::new(),
            managed: self.managed,
            capturing: true,
        }
    }
}
