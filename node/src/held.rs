//! The `Hold` stream, this node's half of a script over keys of several nodes (the script's half
//! is `script/reach.rs`; the argument is in docs/architecture.md, "Scripts over several nodes").
//!
//! The node running a script opens one `Hold` stream to each other node whose keys the script
//! touches. The first message asks for the hold: a holder thread takes the store's gate
//! exclusively (as a prepared transaction does: no other op runs here meanwhile), checks the
//! script's declared keys that live here against its view, and answers `ok`. Each op that
//! follows is checked (its keys must be served here and not moving) and applied under the gate,
//! and answered in order. When the stream ends (the script finished, or its node died and the
//! connection closed) the holder wakes the clients blocked on the keys written and lets go.
//! A hold that hears nothing for [`IDLE`] lets go too, so a silent peer cannot hold a node for
//! ever. Writes applied here stand whatever the script does next, as a script's writes do on a
//! single Redis (a script is never rolled back).

use std::sync::Arc;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use shoal_wire::proto::{self, HeldOp, HoldRequest, HoldStart, Reply, hold_request, op::Kind};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use crate::script::reach::{MOVING, NON_LOCAL};
use crate::state::NodeState;

/// The longest wait for the gate a script's node may ask for.
const MAX_WAIT: Duration = Duration::from_secs(10);
/// A hold that receives no op for this long lets go (its script's node went silent).
pub const IDLE: Duration = Duration::from_secs(30);

pub type HeldStream = ReceiverStream<Result<Reply, Status>>;

/// Serves one `Hold` stream (see the module doc).
pub fn open(state: Arc<NodeState>, mut inbound: Streaming<HoldRequest>) -> HeldStream {
    let (out, replies) = mpsc::channel(4);
    tokio::spawn(async move {
        let start = match inbound.message().await {
            Ok(Some(HoldRequest { kind: Some(hold_request::Kind::Start(s)) })) => s,
            Ok(_) => {
                let _ = out.send(Ok(crate::ops::error("ERR a hold starts with its start message"))).await;
                return;
            }
            Err(_) => return,
        };
        if state.scripts.busy() {
            let _ = out.send(Ok(crate::ops::busy(state.scripts.busy_text()))).await;
            return;
        }
        let (to_holder, ops) = std::sync::mpsc::channel::<HeldOp>();
        let holder = {
            let (state, out) = (state.clone(), out.clone());
            move || hold(&state, start, ops, out)
        };
        if let Err(refused) = crate::twophase::spawn_holder(&state, "shoal-held", holder) {
            let _ = out.send(Ok(refused)).await;
            return;
        }
        // Forward the ops to the holder; the stream's end (or a broken link) lets it go.
        while let Ok(Some(HoldRequest { kind: Some(hold_request::Kind::Op(op)) })) = inbound.message().await {
            if to_holder.send(op).is_err() {
                break;
            }
        }
    });
    ReceiverStream::new(replies)
}

/// The holder thread: the gate, the start's checks, then the ops until the stream ends.
fn hold(
    state: &NodeState,
    start: HoldStart,
    ops: std::sync::mpsc::Receiver<HeldOp>,
    out: mpsc::Sender<Result<Reply, Status>>,
) {
    let answer = |r: Reply| out.blocking_send(Ok(r)).is_ok();
    let store = &state.store;
    let wait = Duration::from_millis(start.wait_ms).min(MAX_WAIT);
    let Some(_gate) = crate::twophase::take_gate(state, wait, start.after_write) else {
        let busy = state.scripts.busy();
        answer(if busy { crate::ops::busy(state.scripts.busy_text()) } else { crate::ops::try_again() });
        return;
    };
    let view = state.membership.view();
    if view.reads_only() {
        answer(crate::ops::moved(view.version()));
        return;
    }
    if let Err(refused) =
        crate::ops::check_group(&view, start.topology_version, start.keys.iter().map(|k| &k[..]))
    {
        answer(refused);
        return;
    }
    if !start.watches.is_empty() {
        let watches = proto::Transaction { watches: start.watches.clone(), ..Default::default() };
        if let Err(refused) = crate::ops::admit(store, &view, start.topology_version, watches) {
            answer(refused);
            return;
        }
    }
    // Replicas get what the script wrote here as one unit (dropped before the gate is).
    let _unit = store.events.changes.unit();
    // Past busy-reply-threshold, the ops held here meanwhile are answered BUSY (dropped before
    // the gate is).
    let _busy = state.scripts.held_for_script(start.function);
    if !answer(crate::ops::ok()) {
        return;
    }
    state.metrics.script_holds.inc();
    let mut written = Vec::new();
    loop {
        let HeldOp { op, write } = match ops.recv_timeout(IDLE) {
            Ok(op) => op,
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                tracing::warn!("a script's node held this node for {IDLE:?} without a word: let go");
                break;
            }
        };
        let reply = match op.as_ref().map(|op| checked(&view, start.topology_version, op)) {
            Some(Ok(())) => {
                let op = op.expect("checked above");
                if write {
                    written
                        .extend(shoal_wire::ops::keys_of(&op).into_iter().map(bytes::Bytes::copy_from_slice));
                }
                crate::ops::apply_for_script(store, &view, op, write)
            }
            Some(Err(refused)) => refused,
            None => crate::ops::error("ERR a held op without an op"),
        };
        if !answer(reply) {
            break;
        }
    }
    crate::ops::serve_blocked_after(store, &view, written);
}

/// An op a script sends here: one plain command (no script, transaction or admin op) whose keys
/// this node serves at the script's version and are not moving.
fn checked(view: &crate::membership::view::NodeView, version: u64, op: &proto::Op) -> Result<(), Reply> {
    if matches!(op.kind, None | Some(Kind::Script(_) | Kind::Transaction(_) | Kind::ScriptAdmin(_))) {
        return Err(crate::ops::error("ERR only a script's single commands are applied under a hold"));
    }
    for key in shoal_wire::ops::keys_of(op) {
        let slot = shoal_wire::key_slot(key);
        if view.check(slot, version).is_err() {
            return Err(crate::ops::error(NON_LOCAL));
        }
        if view.is_moving(slot) {
            return Err(crate::ops::error(MOVING));
        }
    }
    Ok(())
}
