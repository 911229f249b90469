//! The `Execute` stream: each router's batched data path to this node.
//!
//! The reply stream pulls the next batch from the request stream, applies its ops in order and
//! yields the replies, so a batch costs no task hop or channel, and a router that stops reading
//! replies stops being read from. Replies leave in messages of about [`REPLY_MESSAGE_BYTES`]: ops
//! are applied only as fast as their replies can be sent, and a large reply goes out in pieces
//! (`shoal_wire::pieces`), so neither a stream's memory nor its messages grow with what one
//! client asks for. On shutdown the stream ends after the batch in hand, so the router fails over
//! promptly instead of waiting for a deadline.
//!
//! Scripts: a script op goes to the node's script thread and the batch waits for its reply
//! without holding a thread; ops meeting a script (or anything else) that holds the store
//! exclusively wait likewise (retrying every [`GATE_RETRY`]; [`wait_for_gate`] for a `Block`
//! call) or are answered BUSY past busy-reply-threshold, and a script past it has
//! its reply deferred so that the ops behind it go on. While anything waits, an empty message
//! every [`KEEPALIVE`] tells the router the node is alive.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use prost::Message;
use shoal_wire::pieces::{self, Fed, OpAssembler};
use shoal_wire::proto::{self, Batch, BatchReply, Op, Reply};
use tokio::sync::{oneshot, watch};
use tokio_stream::Stream;
use tonic::Status;
use tonic::codegen::BoxStream;

use crate::membership::view::NodeView;
use crate::state::NodeState;

/// A reply message is closed once it holds about this many bytes.
pub const REPLY_MESSAGE_BYTES: usize = pieces::PIECE_BYTES;

pub type ReplyStream = Pin<Box<dyn Stream<Item = Result<BatchReply, Status>> + Send>>;

/// The reply side of a router's `Execute` stream, until the router or the node (`stopping`)
/// ends it.
pub fn open(
    state: Arc<NodeState>,
    inbound: BoxStream<Batch>,
    mut stopping: watch::Receiver<bool>,
) -> ReplyStream {
    state.metrics.streams.add(1);
    Box::pin(Replies {
        inbound,
        state,
        stop: Box::pin(async move {
            let _ = stopping.wait_for(|s| *s).await;
        }),
        stopping: false,
        done: false,
        assembler: OpAssembler::default(),
        running: None,
        deferred: Vec::new(),
        next_deferred: 1,
        deferred_alive: None,
    })
}

impl NodeState {
    /// Applies one whole batch and returns its replies in one message (tools and tests; the
    /// `Execute` stream sends them in bounded messages instead). Defined here, with the stream it
    /// stands in for, so that the state imports nothing of the layers that use it.
    pub fn execute(&self, batch: Batch) -> BatchReply {
        whole(self, batch)
    }
}

/// Applies one whole batch and returns its replies in one message (tools and tests).
pub fn whole(state: &NodeState, batch: Batch) -> BatchReply {
    let mut running = Running::start(state, batch);
    let mut replies = Vec::new();
    let mut assembler = OpAssembler::default();
    while let Some(op) = running.ops.pop_front() {
        match running.step(state, &mut assembler, op) {
            Step::Reply(r) => replies.push(r),
            Step::Piece => {}
            // Tools and tests: wait for the script (or the gate) right here.
            Step::Script(rx, _) => replies.push(
                rx.blocking_recv().unwrap_or_else(|_| crate::ops::error("ERR the script engine is gone")),
            ),
            Step::Held(op) => {
                replies.push(crate::ops::apply_checked(&state.store, &running.view, running.version, op))
            }
        }
    }
    BatchReply { id: running.id, replies, more: false, deferred: Vec::new() }
}

/// The reply side of an `Execute` stream: each poll yields the next message of replies, applying
/// ops of the batch in hand (or of the next received batch) until the message is full.
struct Replies {
    /// The router's batches: from gRPC, or in-process (`shoal_wire::local::open_execute`).
    inbound: BoxStream<Batch>,
    state: Arc<NodeState>,
    /// Resolves when the node starts shutting down.
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    stopping: bool,
    done: bool,
    /// Ops that arrive in pieces are put together here (they never span streams).
    assembler: OpAssembler,
    running: Option<Running>,
    /// Scripts past busy-reply-threshold whose replies were deferred, by id.
    deferred: Vec<(u64, oneshot::Receiver<Reply>)>,
    next_deferred: u64,
    /// While replies are deferred: when to send the next keep-alive message.
    deferred_alive: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// A batch being applied.
struct Running {
    id: u64,
    version: u64,
    /// The view the batch is checked against, held until its last op is applied (so an export
    /// waiting for older views also waits for this batch).
    view: Arc<NodeView>,
    ops: VecDeque<Op>,
    /// Replies (or pieces of them) not sent yet.
    outbox: VecDeque<Reply>,
    /// What the next op waits for, if anything.
    waiting: Option<Waiting>,
    /// While ops are held by a script: when the next keep-alive message is due.
    alive_at: Option<tokio::time::Instant>,
}

/// What becomes of one op now.
enum Step {
    Reply(Reply),
    /// A piece of a larger op (its reply comes with the last piece).
    Piece,
    /// A script runs on the script thread (set once it holds the store); its reply will arrive
    /// here.
    Script(oneshot::Receiver<Reply>, Arc<crate::script::Progress>),
    /// A script holds the store: the op waits for it.
    Held(Op),
}

/// Why a batch is paused. Its later ops wait (their order holds); other streams go on.
enum Waiting {
    /// The script's reply, whether the script holds the store yet, and when to tell the router
    /// the stream is alive meanwhile.
    Script(oneshot::Receiver<Reply>, Arc<crate::script::Progress>, Pin<Box<tokio::time::Sleep>>),
    /// Try the held op again after a moment (and keep the router's calls alive meanwhile).
    Gate(Pin<Box<tokio::time::Sleep>>, tokio::time::Instant),
}

/// While a script runs, the stream sends an empty message this often: the router then knows the
/// node is alive, and calls queued behind the script (and the script's own) do not time out.
const KEEPALIVE: Duration = Duration::from_millis(100);

/// How often an op held by a running script tries again (a script that runs this long is rare;
/// one that runs past busy-reply-threshold gets the op answered BUSY instead).
const GATE_RETRY: Duration = Duration::from_millis(1);

/// Whether the store's gate is held for longer than a thread may wait for it: by a script (it
/// marks itself before it takes the gate), or exclusively by anything else (a transaction, a
/// replica storing a large cut or starting a full sync). Waiting for it on a worker thread would
/// stop every task of that thread meanwhile; with one thread (`--threads 1`, or embedded nodes on
/// the router's runtime), SCRIPT KILL too, and a looping script would never end.
fn held_long(state: &NodeState) -> bool {
    state.scripts.holds_store() || state.store.gate.is_locked_exclusive()
}

/// The store's gate, shared, for a `Block` call: waited for without the thread while something
/// holds it long ([`held_long`]); `Err(BUSY)` once a script has held it past
/// busy-reply-threshold (as Redis answers a blocking command then).
pub(crate) async fn wait_for_gate(state: &NodeState) -> Result<parking_lot::RwLockReadGuard<'_, ()>, Reply> {
    loop {
        if let Some(shared) = state.store.gate.try_read() {
            return Ok(shared);
        }
        if state.scripts.busy() {
            return Err(crate::ops::busy(state.scripts.busy_text()));
        }
        if !held_long(state) {
            return Ok(state.store.gate.read());
        }
        tokio::time::sleep(GATE_RETRY).await;
    }
}

impl Running {
    fn start(state: &NodeState, batch: Batch) -> Running {
        state.metrics.record_batch(batch.ops.len());
        // Before the view is taken: a process that was stopped fences itself first.
        state.membership.check_stall();
        let mut view = state.membership.view();
        if !view.serving()
            && let Some(replica) = state.membership.replica_read_view(batch.topology_version)
        {
            // A replica, and the router knows it: replica reads (READONLY, --read-from).
            view = replica;
        }
        if batch.ops.len() > 1 {
            // A pipeline's GETs and SETs: their keys looked up together first (`Store::warm`).
            state.store.warm(batch.ops.iter().filter_map(|op| match &op.kind {
                Some(proto::op::Kind::Get(g)) => Some(&g.key[..]),
                Some(proto::op::Kind::Set(s)) => Some(&s.key[..]),
                _ => None,
            }));
        }
        Running {
            id: batch.id,
            version: batch.topology_version,
            view,
            ops: batch.ops.into(),
            outbox: VecDeque::new(),
            waiting: None,
            alive_at: None,
        }
    }

    /// Takes one received op as far as it can go now.
    fn step(&self, state: &NodeState, assembler: &mut OpAssembler, op: Op) -> Step {
        let op = match assembler.feed(op) {
            Fed::Piece => return Step::Piece,
            Fed::Op(op) => op,
            Fed::Failed(e) => return Step::Reply(crate::ops::error(&format!("ERR {e}"))),
        };
        if self.view.reads_only() && !crate::ops::reads_only(&op) {
            // A write (or a script) sent to a replica: the router routes it again, to the primary.
            return Step::Reply(crate::ops::moved(self.view.version()));
        }
        if crate::script::Scripts::is_script_op(&op) || state.scripts.stats_on_thread(&op) {
            let (rx, started) = state.scripts.submit(op, self.view.clone(), self.version);
            return Step::Script(rx, started);
        }
        if let Some(proto::op::Kind::ScriptAdmin(a)) = &op.kind {
            return Step::Reply(state.scripts.admin(a));
        }
        match crate::ops::try_apply_checked(&state.store, &self.view, self.version, op) {
            Ok(r) => Step::Reply(r),
            // A script holds the store: wait without the thread, or answer BUSY once it has
            // held it past busy-reply-threshold.
            Err(_) if state.scripts.busy() => Step::Reply(crate::ops::busy(state.scripts.busy_text())),
            Err(op) if held_long(state) => Step::Held(op),
            // Other ops hold it shared, or a transaction is about to run: a moment; wait here
            // (reading the time after the wait, not the message's held time).
            Err(op) => Step::Reply(shoal_wire::clock::unheld(|| {
                crate::ops::apply_checked(&state.store, &self.view, self.version, op)
            })),
        }
    }

    /// Queues a reply, in pieces if it is large.
    fn push_reply(&mut self, r: Reply) {
        if r.encoded_len() <= pieces::PIECE_BYTES {
            self.outbox.push_back(r);
        } else {
            pieces::push_reply(r, &mut self.outbox);
        }
    }

    /// The next message: queued replies and replies of further ops, until about
    /// [`REPLY_MESSAGE_BYTES`] are in it or the batch is done.
    fn next_message(&mut self, state: &NodeState, assembler: &mut OpAssembler) -> BatchReply {
        // One clock read for the message's ops (`clock::hold`): they were received together.
        shoal_wire::clock::hold(|| self.fill_message(state, assembler))
    }

    fn fill_message(&mut self, state: &NodeState, assembler: &mut OpAssembler) -> BatchReply {
        let mut replies = Vec::new();
        let mut bytes = 0;
        while bytes < REPLY_MESSAGE_BYTES {
            if let Some(r) = self.outbox.pop_front() {
                bytes += r.encoded_len();
                replies.push(r);
                continue;
            }
            if self.waiting.is_some() {
                break;
            }
            let Some(op) = self.ops.pop_front() else { break };
            let r = match self.step(state, assembler, op) {
                Step::Reply(r) => r,
                Step::Piece => continue,
                Step::Script(rx, started) => {
                    self.waiting =
                        Some(Waiting::Script(rx, started, Box::pin(tokio::time::sleep(KEEPALIVE))));
                    break;
                }
                Step::Held(op) => {
                    self.ops.push_front(op);
                    let alive_at = self.alive_at.unwrap_or_else(|| tokio::time::Instant::now() + KEEPALIVE);
                    self.waiting = Some(Waiting::Gate(Box::pin(tokio::time::sleep(GATE_RETRY)), alive_at));
                    break;
                }
            };
            let size = r.encoded_len();
            if size <= pieces::PIECE_BYTES {
                // The common case: a small reply goes straight into the message.
                bytes += size;
                replies.push(r);
            } else {
                pieces::push_reply(r, &mut self.outbox);
            }
        }
        let more = !(self.ops.is_empty() && self.outbox.is_empty() && self.waiting.is_none());
        BatchReply { id: self.id, replies, more, deferred: Vec::new() }
    }
}

impl Stream for Replies {
    type Item = Result<BatchReply, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        if !self.stopping && self.stop.as_mut().poll(cx).is_ready() {
            self.stopping = true;
        }
        let this = &mut *self;
        if let Some(message) = this.poll_deferred(cx) {
            return Poll::Ready(Some(Ok(message)));
        }
        if this.running.is_none() {
            // Shutting down: the batch in hand (if any) is finished, no new one is taken.
            if this.stopping {
                this.done = true;
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.inbound).poll_next(cx) {
                Poll::Ready(Some(Ok(batch))) => this.running = Some(Running::start(&this.state, batch)),
                Poll::Ready(Some(Err(status))) => {
                    tracing::debug!(%status, "execute stream ended by the client");
                    this.done = true;
                    return Poll::Ready(None);
                }
                Poll::Ready(None) => {
                    this.done = true;
                    return Poll::Ready(None);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
        let running = this.running.as_mut().expect("a batch in hand");
        loop {
            match running.waiting.as_mut() {
                Some(Waiting::Script(rx, started, keepalive)) => match Pin::new(&mut *rx).poll(cx) {
                    Poll::Pending => {
                        if keepalive.as_mut().poll(cx).is_ready() {
                            // Past busy-reply-threshold, the script no longer holds this stream:
                            // its reply is deferred and the ops after it go on (BUSY meanwhile).
                            // Only once it holds the store, so that none of them runs before it.
                            let busy = this.state.scripts.busy();
                            // Still queued behind a busy script: BUSY (and it never runs).
                            if busy && started.cancel() {
                                running.waiting = None;
                                running.push_reply(crate::ops::busy(this.state.scripts.busy_text()));
                                continue;
                            }
                            if started.holds_store() && busy {
                                let Some(Waiting::Script(rx, ..)) = running.waiting.take() else {
                                    unreachable!()
                                };
                                let id = this.next_deferred;
                                this.next_deferred += 1;
                                this.deferred.push((id, rx));
                                running.outbox.push_back(Reply {
                                    kind: Some(proto::reply::Kind::Deferred(id)),
                                    ..Default::default()
                                });
                                continue;
                            }
                            keepalive.as_mut().reset(tokio::time::Instant::now() + KEEPALIVE);
                            let alive = BatchReply { id: running.id, more: true, ..Default::default() };
                            return Poll::Ready(Some(Ok(alive)));
                        }
                        return Poll::Pending;
                    }
                    Poll::Ready(reply) => {
                        running.waiting = None;
                        running.push_reply(
                            reply.unwrap_or_else(|_| crate::ops::error("ERR the script engine is gone")),
                        );
                    }
                },
                Some(Waiting::Gate(sleep, alive_at)) => match sleep.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(()) => {
                        let now = tokio::time::Instant::now();
                        let due = now >= *alive_at;
                        running.alive_at = Some(if due { now + KEEPALIVE } else { *alive_at });
                        running.waiting = None;
                        if due {
                            let alive = BatchReply { id: running.id, more: true, ..Default::default() };
                            return Poll::Ready(Some(Ok(alive)));
                        }
                    }
                },
                None => {}
            }
            let message = running.next_message(&this.state, &mut this.assembler);
            // Nothing to send yet and something to wait for: wait (registering the wake-up).
            if message.replies.is_empty() && running.waiting.is_some() {
                continue;
            }
            if !message.more {
                this.running = None;
            }
            return Poll::Ready(Some(Ok(message)));
        }
    }
}

impl Replies {
    /// A message of deferred replies that have arrived, or a keep-alive while some are still
    /// running (so that the router's calls waiting for them do not time out).
    fn poll_deferred(&mut self, cx: &mut Context<'_>) -> Option<BatchReply> {
        if self.deferred.is_empty() {
            self.deferred_alive = None;
            return None;
        }
        let mut done = Vec::new();
        self.deferred.retain_mut(|(id, rx)| match Pin::new(rx).poll(cx) {
            Poll::Ready(reply) => {
                let reply = reply.unwrap_or_else(|_| crate::ops::error("ERR the script engine is gone"));
                done.push(proto::DeferredReply { id: *id, reply: Some(reply) });
                false
            }
            Poll::Pending => true,
        });
        if !done.is_empty() {
            return Some(BatchReply { id: 0, deferred: done, ..Default::default() });
        }
        let alive = self.deferred_alive.get_or_insert_with(|| Box::pin(tokio::time::sleep(KEEPALIVE)));
        if alive.as_mut().poll(cx).is_ready() {
            alive.as_mut().reset(tokio::time::Instant::now() + KEEPALIVE);
            return Some(BatchReply { id: 0, ..Default::default() });
        }
        None
    }
}

impl Drop for Replies {
    fn drop(&mut self) {
        self.state.metrics.streams.add(-1);
    }
}
