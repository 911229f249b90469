//! Transactions over keys of several nodes, this node's half (the router's half is
//! `router/src/cmd/transaction.rs`; the argument is in docs/architecture.md, "Transactions over
//! several nodes").
//!
//! `Prepare` starts a thread that takes the store's gate exclusively (as a one-node transaction
//! or a script does: no other op runs here meanwhile), makes the transaction's checks
//! ([`crate::ops::admit`]) and, if they pass, answers "prepared" and keeps the gate until it is
//! told to commit (it applies the ops and answers their replies) or abort. The router prepares
//! the nodes one at a time in the order of their positions (two transactions never wait for each
//! other in a circle), then commits the first node prepared, the coordinator, and then the rest.
//! The coordinator's record ([`crate::decisions`]) is the decision: a participant whose lease runs
//! out without an order (the router died) asks the coordinator, whose answer is final (one not
//! yet decided is aborted by the question), and applies or lets go accordingly. So a router dying
//! at any step leaves every node applied or none.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use shoal_wire::client::{self, ClientOptions};
use shoal_wire::proto::{self, DecideRequest, DecisionQuery, PrepareRequest, Reply, op::Kind};

use crate::decisions::{Decided, Order};
use crate::state::NodeState;

/// The shortest and longest lease a router may ask for.
const LEASE_BOUNDS: (u64, u64) = (10, 60_000);
/// The longest a prepare waits for the gate before answering `try_again` (the router lets go of
/// what it prepared and goes again after a pause): shorter than a request's deadline, so that
/// a prepare waiting in a circle with a script that reaches a node mid-run (`script/reach.rs`)
/// breaks the circle in time for the retry to succeed.
const PREPARE_WAIT: Duration = Duration::from_millis(250);
/// How long a question to the coordinator may take, and the pause before asking again.
const QUESTION_TIMEOUT: Duration = Duration::from_secs(2);
const QUESTION_RETRY: Duration = Duration::from_millis(200);
/// At most this many holder threads at once: a burst of cross-node transactions beyond it is
/// answered `try_again` (the router goes again after a pause) rather than given a thread each.
const MAX_HOLDERS: usize = 256;
/// A participant that cannot reach its coordinator for this long lets go of its part (aborts),
/// so one dead node cannot hold another for ever (the double failure of docs/architecture.md).
const GIVE_UP: Duration = Duration::from_secs(30);

fn error(text: &str) -> Reply {
    crate::ops::error(text)
}

/// The `Prepare` RPC: answers once the transaction is prepared (held) or refused.
pub async fn prepare(state: &Arc<NodeState>, req: PrepareRequest) -> Reply {
    if state.scripts.busy() {
        return crate::ops::busy(state.scripts.busy_text());
    }
    if req.txid.is_empty() || req.transaction.is_none() {
        return error("ERR a prepare needs a transaction id and a transaction");
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let holder = {
        let state = state.clone();
        let rt = tokio::runtime::Handle::current();
        move || hold(&state, &rt, req, tx)
    };
    if let Err(refused) = spawn_holder(state, "shoal-2pc", holder) {
        return refused;
    }
    rx.await.unwrap_or_else(|_| error("ERR the transaction's holder is gone"))
}

/// The store's gate, exclusively, waited for up to `wait`. One that has written nothing
/// (`patient` false: a prepare, a hold for a script that has not written) gives up at once when
/// this node's own script has written and waits for another node (its gate may be what that
/// node's holder waits for: a circle only giving up can break).
pub(crate) fn take_gate(
    state: &NodeState,
    wait: Duration,
    patient: bool,
) -> Option<parking_lot::RwLockWriteGuard<'_, ()>> {
    const STEP: Duration = Duration::from_millis(5);
    let until = Instant::now() + wait;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if let Some(gate) = state.store.gate.try_write_for(left.min(STEP)) {
            return Some(gate);
        }
        if left.is_zero() || (!patient && state.scripts.stuck_after_write()) {
            return None;
        }
    }
}

/// Starts a thread that will hold the store's gate (a prepared transaction's part, or a script's
/// hold from another node: `crate::held`), counted among the node's holders while it lives;
/// beyond [`MAX_HOLDERS`] the answer is `try_again` (the caller goes again after a pause).
pub(crate) fn spawn_holder(
    state: &Arc<NodeState>,
    name: &str,
    holder: impl FnOnce() + Send + 'static,
) -> Result<(), Reply> {
    let holders = &state.decisions.holders;
    if holders.fetch_add(1, Ordering::AcqRel) >= MAX_HOLDERS {
        holders.fetch_sub(1, Ordering::AcqRel);
        return Err(crate::ops::try_again());
    }
    let counted = state.clone();
    let run = move || {
        // Counted out however the holder ends (a panic included).
        struct Alive<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for Alive<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let _alive = Alive(&counted.decisions.holders);
        holder();
    };
    if let Err(e) = std::thread::Builder::new().name(name.into()).spawn(run) {
        holders.fetch_sub(1, Ordering::AcqRel);
        return Err(error(&format!("ERR cannot start a holder thread: {e}")));
    }
    Ok(())
}

/// The `Decide` RPC.
pub async fn decide(state: &NodeState, req: DecideRequest) -> Reply {
    match state.decisions.decide(&req.txid, req.commit) {
        Decided::Now(r) => r,
        Decided::Later(rx) => rx.await.unwrap_or_else(|_| error("ERR the transaction's holder is gone")),
    }
}

/// The holder thread: prepare, then wait for the decision (see the module doc).
fn hold(
    state: &NodeState,
    rt: &tokio::runtime::Handle,
    req: PrepareRequest,
    answer: tokio::sync::oneshot::Sender<Reply>,
) {
    let store = &state.store;
    let lease = Duration::from_millis(req.lease_ms.clamp(LEASE_BOUNDS.0, LEASE_BOUNDS.1));
    // Another transaction (or a script) may hold the gate: wait for it a while, then ask the
    // router to try again (it lets go of what it prepared first).
    let Some(gate) = take_gate(state, lease.min(PREPARE_WAIT), false) else {
        let refusal = if state.scripts.busy() {
            crate::ops::busy(state.scripts.busy_text())
        } else {
            crate::ops::try_again()
        };
        let _ = answer.send(refusal);
        return;
    };
    let view = state.membership.view();
    if view.reads_only() {
        let _ = answer.send(crate::ops::moved(view.version()));
        return;
    }
    let t = req.transaction.expect("checked by prepare");
    if t.ops.iter().any(|op| matches!(op.kind, Some(Kind::Script(_)))) {
        let _ = answer.send(error("ERR a script inside a transaction over several nodes is not supported"));
        return;
    }
    let t = match crate::ops::admit(store, &view, req.topology_version, t) {
        Ok(t) => t,
        Err(refused) => {
            let _ = answer.send(refused);
            return;
        }
    };
    let txid = req.txid;
    let (to_holder, orders) = std::sync::mpsc::channel();
    if !state.decisions.hold(txid.clone(), to_holder) {
        let _ = answer.send(error("ERR the transaction was already decided here"));
        return;
    }
    state.metrics.transactions_prepared.inc();
    // The router gave up waiting: nobody will commit what it does not know is prepared.
    let mut next =
        if answer.send(crate::ops::ok()).is_err() { Instant::now() } else { Instant::now() + lease };
    let give_up = Instant::now() + GIVE_UP.max(lease * 4);
    let commit = loop {
        match orders.recv_timeout(next.saturating_duration_since(Instant::now())) {
            Ok(Order::Commit(reply_to)) => break Some(reply_to),
            Ok(Order::Abort) | Err(RecvTimeoutError::Disconnected) => break None,
            Err(RecvTimeoutError::Timeout) if req.coordinator.is_empty() => {
                // The coordinator's lease ran out: abort, unless a commit order just came.
                if state.decisions.lapse(&txid) {
                    tracing::info!(
                        "a transaction over several nodes had no decision within its lease: aborted"
                    );
                    break None;
                }
                next = Instant::now() + lease;
            }
            Err(RecvTimeoutError::Timeout) => match rt.block_on(ask(state, &req.coordinator, &txid)) {
                Some(committed) => {
                    if !state.decisions.learned(&txid, committed) {
                        // A router's order came meanwhile: it is in the channel.
                        next = Instant::now() + lease;
                        continue;
                    }
                    tracing::info!(committed, "a transaction over several nodes decided by its coordinator");
                    if !committed {
                        break None;
                    }
                    let reply = commit_now(state, &view, t, gate);
                    state.decisions.committed(&txid, Some(reply));
                    return;
                }
                None if Instant::now() >= give_up => {
                    if state.decisions.lapse(&txid) {
                        tracing::error!(
                            coordinator = %req.coordinator,
                            "a transaction's coordinator did not answer for {GIVE_UP:?}: this node's part is let go"
                        );
                        break None;
                    }
                    next = Instant::now() + lease;
                }
                None => next = Instant::now() + QUESTION_RETRY,
            },
        }
    };
    match commit {
        Some(reply_to) => {
            let reply = commit_now(state, &view, t, gate);
            state.decisions.committed(&txid, None);
            let _ = reply_to.send(reply);
        }
        None => state.metrics.transactions_aborted.inc(),
    }
}

/// Applies the prepared transaction and lets go of the gate.
fn commit_now(
    state: &NodeState,
    view: &crate::membership::view::NodeView,
    t: proto::Transaction,
    gate: parking_lot::RwLockWriteGuard<'_, ()>,
) -> Reply {
    let reply = crate::ops::run_admitted(&state.store, view, t, &mut |_| {
        error("ERR a script inside a transaction over several nodes is not supported")
    });
    drop(gate);
    state.metrics.transactions_committed.inc();
    reply
}

/// The coordinator's decision (None: it did not answer).
async fn ask(state: &NodeState, coordinator: &str, txid: &[u8]) -> Option<bool> {
    let options = ClientOptions::default().with_credentials(state.membership.credentials.clone());
    let question = async {
        let mut c = client::connect(coordinator, &options).await.ok()?;
        let r = c.decision(DecisionQuery { txid: txid.to_vec().into() }).await.ok()?;
        Some(r.into_inner().committed)
    };
    tokio::time::timeout(QUESTION_TIMEOUT, question).await.ok().flatten()
}
