//! A transaction over keys of several nodes (MULTI/EXEC, WATCH), in two phases: the router's
//! half of the protocol whose node half is `node/src/twophase.rs` (the argument, step by step with
//! what a death at each step leaves, is in docs/architecture.md, "Transactions over several
//! nodes").
//!
//! 1. Place: each op goes to its keys' owner by the routing's table (an op whose own keys spread
//!    over nodes: CROSSSLOT; an op without keys keeps the node its handler chose), each watched key
//!    to its owner. Parts are taken in the order of their node positions.
//! 2. Prepare the parts one at a time in that order. A prepared node holds its store's gate: no
//!    other op runs there until the decision, so no client sees part of the transaction, and
//!    the one global order means two transactions never wait for each other in a circle. The
//!    first node prepared is the coordinator; the others are told its address.
//! 3. A refusal (`moved`, `try_again`, a watched key changed, BUSY, OOM, a node down) aborts the
//!    parts prepared so far; `moved` and `try_again` go round the settle loop like a one-node
//!    unit, the others are the EXEC's answer.
//! 4. Commit the coordinator: its record is the decision (one that refuses, its lease having run
//!    out on a slow prepare, applied nothing: the whole transaction goes again). Then commit the
//!    others. A router that dies before the coordinator's commit leaves every node to abort at its
//!    lease; one that dies after it leaves the participants to learn "committed" from the
//!    coordinator and apply.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use shoal_wire::proto::{self, DecideRequest, Op, PrepareRequest, Reply, reply};
use tokio::time::Instant;

use super::port::{BoxFuture, NodePort};
use super::settle::Outcome;
use super::{AtomicError, Backend, BackendError, Routing, futures_join};

/// How long a prepared node holds its gate without a decision before it aborts (the coordinator)
/// or asks the coordinator (a participant): the cost to that node's other clients of a router
/// dying mid-transaction.
pub const LEASE: Duration = Duration::from_millis(1000);

/// What a transaction over several nodes came to.
#[derive(Debug)]
pub enum SpreadOutcome {
    /// Applied on every node: one reply per op, in the ops' order.
    Replies(Vec<Reply>),
    /// Applied nowhere: a node's refusal (`aborted`: a watched key changed; BUSY, OOM, an error).
    Refused(Reply),
}

/// One node's part.
#[derive(Default)]
struct Part {
    /// The positions of its ops in the transaction.
    at: Vec<usize>,
    t: proto::Transaction,
}

enum Placed {
    Parts(BTreeMap<usize, Part>),
    /// An op's own keys are on several nodes.
    Spread,
    /// The number of nodes changed under an op without keys (it was made for the old count).
    Changed,
}

fn place(routing: &Routing, ops: &[(usize, Op)], watches: &[proto::Watched], nodes_then: usize) -> Placed {
    let mut parts: BTreeMap<usize, Part> = BTreeMap::new();
    for (i, (recorded, op)) in ops.iter().enumerate() {
        let keys = shoal_wire::ops::keys_of(op);
        let pos = match keys.split_first() {
            None if routing.len() != nodes_then => return Placed::Changed,
            None => *recorded,
            Some((first, rest)) => {
                let pos = routing.locate(first).0;
                if rest.iter().any(|k| routing.locate(k).0 != pos) {
                    return Placed::Spread;
                }
                pos
            }
        };
        let part = parts.entry(pos).or_default();
        part.at.push(i);
        part.t.ops.push(op.clone());
    }
    for w in watches {
        parts.entry(routing.locate(&w.key).0).or_default().t.watches.push(w.clone());
    }
    Placed::Parts(parts)
}

fn is(r: &Reply, ok: fn(&reply::Kind) -> bool) -> bool {
    r.kind.as_ref().is_some_and(ok)
}

impl Backend {
    /// Runs `ops` (each with the node position its handler chose, used for an op without keys)
    /// with `watches` as one transaction over the nodes that own their keys (see the module doc).
    /// [`AtomicError::Spread`]: an op's own keys are on several nodes (CROSSSLOT).
    pub async fn spread_transaction(
        self: &Arc<Self>,
        routing: &Arc<Routing>,
        ops: Vec<(usize, Op)>,
        watches: Vec<proto::Watched>,
        deadline: Instant,
    ) -> Result<SpreadOutcome, AtomicError> {
        let nodes_then = routing.len();
        let (ops, watches) = (&ops, &watches);
        let first = self.spread_attempt(routing.clone(), ops, watches, nodes_then, deadline);
        let again = |routing: Arc<Routing>| {
            self.metrics.transaction_retries.inc();
            self.spread_attempt(routing, ops, watches, nodes_then, deadline)
        };
        let result = match self.settle(first, again, deadline).await {
            Ok(Attempt::Done(outcome)) => Ok(outcome),
            Ok(Attempt::Spread) => Err(AtomicError::Spread),
            Err(e) => Err(AtomicError::Backend(e)),
        };
        let m = &self.metrics;
        match &result {
            Ok(SpreadOutcome::Replies(_)) => m.spread_committed.inc(),
            Err(AtomicError::Backend(BackendError::Undecided { .. })) => m.spread_undecided.inc(),
            Ok(SpreadOutcome::Refused(_)) | Err(_) => m.spread_refused.inc(),
        }
        result
    }

    async fn spread_attempt(
        self: &Arc<Self>,
        routing: Arc<Routing>,
        ops: &[(usize, Op)],
        watches: &[proto::Watched],
        nodes_then: usize,
        deadline: Instant,
    ) -> Result<Outcome<Attempt>, BackendError> {
        let parts = match place(&routing, ops, watches, nodes_then) {
            Placed::Parts(parts) => parts,
            Placed::Spread => return Ok(Outcome::Done(Attempt::Spread)),
            Placed::Changed => return Err(BackendError::Unsettled),
        };
        // This router's transactions take turns at their nodes, in order of arrival
        // (`crate::keylocks`): the nodes' gates would serve them in no order.
        let addrs: Vec<&str> = parts.keys().map(|&pos| &routing.nodes[pos].ident().addr[..]).collect();
        let Some(_turns) = self.node_turns.lock(&addrs, deadline).await else {
            return Err(BackendError::Contended);
        };
        let txid = Bytes::copy_from_slice(&fastrand::u128(..).to_be_bytes());
        let mut prepared: Vec<(Arc<dyn NodePort>, Vec<usize>)> = Vec::with_capacity(parts.len());
        let mut coordinator = String::new();
        for (pos, part) in parts {
            let port = routing.nodes[pos].clone();
            let req = PrepareRequest {
                txid: txid.clone(),
                topology_version: routing.version(),
                transaction: Some(part.t),
                coordinator: coordinator.clone(),
                lease_ms: LEASE.as_millis() as u64,
            };
            let refused = match port.prepare(req, LEASE).await {
                Ok(r) if is(&r, |k| matches!(k, reply::Kind::Ok(_))) => {
                    if coordinator.is_empty() {
                        coordinator = port.ident().addr.clone();
                    }
                    prepared.push((port, part.at));
                    continue;
                }
                Ok(Reply { kind: Some(reply::Kind::Moved(v)), .. }) => Ok(Outcome::Moved(port.clone(), v)),
                Ok(Reply { kind: Some(reply::Kind::TryAgain(_)), .. }) => Ok(Outcome::TryAgain),
                Ok(r) => Ok(Outcome::Done(Attempt::Done(SpreadOutcome::Refused(r)))),
                Err(e) => {
                    // It may have prepared before the link failed: it is told to let go too.
                    prepared.push((port.clone(), Vec::new()));
                    // Routed again only if the call never reached a node that has left since
                    // (the settle loop's rule for a write; the part is let go of either way).
                    let never_sent = matches!(e, BackendError::Unavailable { .. });
                    let again = never_sent && self.has_left(&*port, &routing);
                    if again { Ok(Outcome::Stale) } else { Err(e) }
                }
            };
            let_go(&txid, prepared.into_iter().map(|(p, _)| p).collect()).await;
            return refused;
        }
        let mut prepared = prepared.into_iter();
        let (coordinator, coordinator_at) = prepared.next().expect("a transaction has a part");
        let commit = DecideRequest { txid: txid.clone(), commit: true };
        let first = match coordinator.decide(commit.clone()).await {
            Ok(r) if is(&r, |k| matches!(k, reply::Kind::Replies(_))) => r,
            // Not committed (its lease ran out before the commit came, or it restarted): nothing
            // was applied anywhere, so the whole transaction goes again (until the deadline).
            Ok(r) => {
                tracing::debug!(reply = ?r.kind, "a coordinator refused its commit; the transaction goes again");
                let_go(&txid, prepared.map(|(p, _)| p).collect()).await;
                return Ok(Outcome::TryAgain);
            }
            // Committed or not, the coordinator knows and the participants will ask it: nothing
            // more is sent (an abort now could undo a part of a committed transaction).
            Err(e) => return Err(undecided(&*coordinator, e)),
        };
        let rest: Vec<_> = prepared.collect();
        let calls: Vec<BoxFuture<'_, _>> = rest.iter().map(|(p, _)| p.decide(commit.clone())).collect();
        let mut replies: Vec<Option<Reply>> = vec![None; ops.len()];
        let mut fill = |at: &[usize], r: Reply| -> Result<(), BackendError> {
            let Some(reply::Kind::Replies(r)) = r.kind else {
                return Err(BackendError::BadReply(format!("a committed part answered {:?}", r.kind)));
            };
            if r.replies.len() != at.len() {
                return Err(BackendError::BadReply("a committed part answered a reply per op".into()));
            }
            for (&i, reply) in at.iter().zip(r.replies) {
                replies[i] = Some(reply);
            }
            Ok(())
        };
        fill(&coordinator_at, first)?;
        for ((port, at), result) in rest.iter().zip(futures_join(calls).await) {
            match result {
                Ok(r) => fill(at, r)?,
                // Committed (the coordinator decided); this part is applied by its node, which
                // asks the coordinator once its lease runs out, but its replies are lost.
                Err(e) => return Err(undecided(&**port, e)),
            }
        }
        Ok(Outcome::Done(Attempt::Done(SpreadOutcome::Replies(
            replies.into_iter().map(Option::unwrap_or_default).collect(),
        ))))
    }
}

fn undecided(port: &dyn NodePort, e: BackendError) -> BackendError {
    let ident = port.ident();
    BackendError::Undecided { node: ident.id, addr: ident.addr.clone(), reason: e.to_string() }
}

/// One attempt's end, as the settle loop carries it.
enum Attempt {
    Done(SpreadOutcome),
    Spread,
}

/// Aborts the parts prepared so far and waits for the nodes to let go (a node that does not
/// answer lets go at its lease).
async fn let_go(txid: &Bytes, ports: Vec<Arc<dyn NodePort>>) {
    let abort = DecideRequest { txid: txid.clone(), commit: false };
    let calls: Vec<BoxFuture<'_, _>> = ports.iter().map(|p| p.decide(abort.clone())).collect();
    futures_join(calls).await;
}
