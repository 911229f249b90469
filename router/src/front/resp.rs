//! One RESP client connection (TCP, TLS or Unix socket): RESP framing around the request
//! pipeline ([`crate::pipeline`]), inside the connection guard ([`crate::guard`]).
//!
//! Each round parses every complete request in the read buffer and takes them all up before
//! awaiting any reply, so a pipeline's ops reach the node queues together and share batches.
//! Replies are then awaited and encoded in request order and written with vectored writes (a
//! large value is written where it lies, not copied), as soon as a few hundred KiB are ready, so
//! a long pipeline of large replies flows out while later ones arrive. The connection reads again
//! only after replying (back-pressure: a client that does not read its replies stops being read
//! from). A round takes up fewer commands when this client's replies have been large, so the
//! replies one connection can have in flight stay near [`ROUND_REPLY_BUDGET`].
//!
//! Limits: unparsed input per client (1 MiB before AUTH), reply bytes per round (the output
//! buffer limit), and commands per round; the guard's budget, auth deadline and kill switch. A
//! protocol error is answered with `-ERR Protocol error: ...` after the replies of the commands
//! before it, then the connection closes. A request that starts with `POST` or `Host:` is an
//! HTTP client (or a cross-protocol attack) and is dropped without a reply, as Redis does.
//!
//! A connection whose first byte is 0xF5 speaks the binary fast path instead: [`crate::front::fast`].
//!
//! CLIENT PAUSE: a command the pause covers is held (after the replies of the commands before
//! it are written), and the connection reads nothing more until the pause lets it run. A blocking
//! command's reply is awaited while the connection keeps reading, so that a client that goes away
//! ends the wait.

use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use shoal_wire::pieces::PIECE_BYTES;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use crate::cmd::{self, CommandSpec, Pending};
use crate::guard::{self, Ended, Guard};
use crate::pipeline::record::{self, Runs, Timing};
use crate::pipeline::{Pipeline, Step};
use crate::resp::{Out, Protocol, Reply, RequestParser};
use crate::session::Session;
use crate::state::RouterState;

/// Commands taken up per round before replies are written.
const MAX_COMMANDS_PER_ROUND: usize = 1024;
/// About how many reply bytes one round may have in flight, judged by this connection's largest
/// recent replies (a first round of unknown size may overshoot it once).
const ROUND_REPLY_BUDGET: usize = 64 << 20;
/// Encoded replies are written once this many bytes are ready.
const WRITE_AT: usize = 256 * 1024;
const READ_CHUNK: usize = 16 * 1024;
/// Buffers larger than this are released after use instead of kept for the next round.
const KEEP_BUFFER: usize = 256 * 1024;
/// How much a blocked client may send before the router stops reading it until its reply.
const MAX_READ_WHILE_BLOCKED: usize = 1 << 20;
/// Batches of queued pub/sub messages written before a connection reads its next commands.
const PUSH_ROUNDS: usize = 8;

pub async fn serve<S>(stream: S, state: Arc<RouterState>, session: Session, shutdown: watch::Receiver<bool>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let _listed = state.clients.register(session.client.clone());
    let _unwatch = cmd::transaction::ReleaseOnDrop { state: state.clone(), list: session.watched.clone() };
    let mut conn = Conn {
        guard: Guard::new(&state, &session, shutdown),
        pipeline: Pipeline::new(&state),
        stream,
        session,
        input: BytesMut::with_capacity(READ_CHUNK),
        output: Out::new(),
        parser: RequestParser::new(),
        reply_size: 0,
        pending: Vec::new(),
        held: None,
        negotiated: false,
    };
    loop {
        match conn.round().await {
            Go::On => {}
            Go::Stop => return,
            Go::Fast => {
                let Conn { stream, input, session, guard, .. } = conn;
                return super::fast::serve(stream, input, session, guard).await;
            }
        }
    }
}

/// A request of this round, until its reply is written: the reply (`None`: in a lane, not in
/// yet), the protocol to encode it in, and what recording it needs.
struct Request {
    reply: Option<Pending>,
    protocol: Protocol,
    /// Written to the client (CLIENT REPLY OFF or SKIP silence it; it still runs and counts).
    written: bool,
    started: Instant,
    slot: Option<usize>,
    args: Vec<Bytes>,
}

struct Conn<'s, S> {
    guard: Guard<'s>,
    pipeline: Pipeline<usize>,
    stream: S,
    session: Session,
    input: BytesMut,
    output: Out,
    parser: RequestParser,
    /// The largest reply of the last round: sizes the next round (see ROUND_REPLY_BUDGET).
    reply_size: usize,
    pending: Vec<Request>,
    /// A command CLIENT PAUSE holds, admitted and waiting to run.
    held: Option<(&'static CommandSpec, Vec<Bytes>)>,
    /// Whether the first bytes have arrived (RESP or the binary fast path).
    negotiated: bool,
}

/// What a round leads to.
enum Go {
    On,
    Stop,
    /// The first byte was 0xF5, which cannot start a RESP request (nor an inline command): this
    /// client speaks the fast path (docs/fast-path.md), on a connection admitted like any other.
    Fast,
}

/// How a round's taking up ended.
#[derive(Default)]
struct TakenUp {
    /// Write the replies, then close (QUIT, a protocol error).
    close: bool,
    /// More is buffered (or held): take it up without reading first.
    more: bool,
    /// A request large enough to leave a large read buffer behind.
    large: bool,
    /// Close at once, writing nothing (an HTTP request on the RESP port).
    drop: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<'_, S> {
    /// One round: the held command's pause, pub/sub messages, every buffered request taken up,
    /// replied to, then the next read.
    async fn round(&mut self) -> Go {
        if self.guard.is_killed() || !self.wait_held().await || !self.write_pushes().await {
            return Go::Stop;
        }
        self.pipeline.round();
        let mut taken = self.take_up();
        if taken.drop {
            return Go::Stop;
        }
        if self.pending.len() >= self.round_limit() {
            taken.more = true;
        }
        self.pipeline.send(&mut self.session);
        self.guard.note_auth(self.session.authenticated);
        if !self.answer().await {
            return Go::Stop;
        }
        // A large request leaves a large read buffer behind: let it go rather than keep it for
        // an idle connection.
        if taken.large && self.input.is_empty() {
            self.input = BytesMut::with_capacity(READ_CHUNK);
        }
        if taken.close {
            let _ = self.stream.flush().await;
            let _ = self.stream.shutdown().await;
            return Go::Stop;
        }
        if taken.more {
            return Go::On;
        }
        self.read().await
    }

    fn round_limit(&self) -> usize {
        (ROUND_REPLY_BUDGET / self.reply_size.max(1)).clamp(1, MAX_COMMANDS_PER_ROUND)
    }

    /// Waits while CLIENT PAUSE holds the command taken up last round; false: close.
    async fn wait_held(&mut self) -> bool {
        let Some((spec, _)) = &self.held else { return true };
        self.guard.client.set_held(true);
        let waited = self.guard.hold(self.guard.state.pause.wait(*spec)).await;
        self.guard.client.set_held(false);
        match waited {
            Ok(()) => true,
            Err(Ended::AuthTimeout) => {
                guard::close_with(&mut self.stream, error_line(guard::AUTH_TIMEOUT).as_bytes()).await;
                false
            }
            Err(_) => false,
        }
    }

    /// Takes up every complete request in the read buffer (up to the round's limit): each goes
    /// down the pipeline; their replies are awaited afterwards, in order. The requests of one
    /// buffer are taken up at one time (one clock read, as on the fast path), so a pipelined run
    /// of one command's replies is counted once (`record::Runs`).
    fn take_up(&mut self) -> TakenUp {
        let mut taken = TakenUp::default();
        let limit = self.round_limit();
        let taken_at = Instant::now();
        while self.pending.len() < limit {
            let limits = self.guard.state.settings.limits(self.session.authenticated);
            let (step, args) = match self.held.take() {
                Some((spec, args)) => {
                    (self.pipeline.resume(&mut self.session, spec, &args, self.pending.len()), args)
                }
                None => match self.parser.next(&mut self.input, &limits) {
                    Ok(Some(args)) if is_http(&args[0]) => {
                        tracing::warn!(peer = %self.session.peer, "possible cross-protocol attack: HTTP request on the RESP port; closing");
                        taken.drop = true;
                        return taken;
                    }
                    Ok(Some(args)) => {
                        let at = self.pending.len();
                        let step =
                            self.pipeline.take(&mut self.session, &args, None, taken_at, |_, _| Some(at));
                        (step, args)
                    }
                    Ok(None) => return taken,
                    Err(e) => {
                        self.guard.state.metrics.protocol_errors.inc();
                        tracing::debug!(peer = %self.session.peer, error = %e, "protocol error; closing");
                        self.push(
                            Some(Reply::error_fmt(format!("ERR {e}")).into()),
                            Instant::now(),
                            None,
                            Vec::new(),
                        );
                        taken.close = true;
                        return taken;
                    }
                },
            };
            let reply = match step {
                Step::Joined => None,
                Step::Done(_, pending) => Some(pending),
                Step::Held(_, spec) => {
                    // Reply to the commands before it, then wait (next round).
                    self.held = Some((spec, args));
                    taken.more = true;
                    return taken;
                }
                Step::NotHere(_) => unreachable!("RESP carries every command"),
            };
            // A command this large sends an op in pieces, over several batches: later
            // commands wait for it, so none of their ops can overtake it.
            let large = args.iter().map(|a| a.len()).sum::<usize>() > PIECE_BYTES;
            taken.large |= large;
            let barrier = large || matches!(reply, Some(Pending::Barrier(_) | Pending::Blocking(..)));
            taken.close = matches!(reply, Some(Pending::Close(_)));
            let (started, slot) = (self.session.last_command, self.session.last_command_slot);
            self.push(reply, started, slot, args);
            if taken.close {
                return taken;
            }
            if barrier {
                // Later commands must not overtake this one's steps: reply first.
                taken.more = true;
                return taken;
            }
        }
        taken
    }

    fn push(&mut self, reply: Option<Pending>, started: Instant, slot: Option<usize>, args: Vec<Bytes>) {
        let protocol = self.session.protocol();
        let written = self.session.reply.take();
        self.pending.push(Request { reply, protocol, written, started, slot, args });
    }

    /// Awaits, records and encodes the round's replies in order, writing as they pile up; false:
    /// close.
    async fn answer(&mut self) -> bool {
        self.reply_size = 0;
        // Replies in hand together (a lane's, those ready at take-up) are timed by one clock read
        // and counted as runs; the clock is read again after anything that waited.
        let mut runs = Runs::default();
        let answered = self.answer_each(&mut runs).await;
        runs.end(self.guard.state);
        if !answered {
            return false;
        }
        self.pending.clear();
        self.output.is_empty() || self.flush().await
    }

    /// [`Self::answer`]'s loop over the round's requests; false: close.
    async fn answer_each(&mut self, runs: &mut Runs) -> bool {
        let mut known_at: Option<Instant> = None;
        for i in 0..self.pending.len() {
            if self.pending[i].reply.is_none() {
                // The first request of the next lane: all of its replies are in together.
                let call = self.pipeline.next_sent().expect("a lane for every joined request");
                for (at, reply) in call.wait().await {
                    self.pending[at].reply = Some(Pending::Ready(reply));
                }
                known_at = None;
            }
            let reply = match self.pending[i].reply.take().expect("filled above") {
                Pending::Ready(reply) => reply,
                Pending::Blocking(wait, on_unblock) => {
                    known_at = None;
                    // Counted before a wait that may be long, so INFO shows them meanwhile.
                    runs.end(self.guard.state);
                    match self.blocked(wait, on_unblock).await {
                        Some(reply) => reply,
                        // Gone, killed or shutting down: dropping the wait withdraws it.
                        None => return false,
                    }
                }
                other => {
                    known_at = None;
                    other.resolve().await
                }
            };
            let now = *known_at.get_or_insert_with(Instant::now);
            let request = &mut self.pending[i];
            let args = std::mem::take(&mut request.args);
            let failed = record::count_errors(self.guard.state, request.slot, &reply);
            let timing = Timing { started: request.started, slot: request.slot, failed };
            let (protocol, written) = (request.protocol, request.written);
            record::answered_in(runs, self.guard.state, &self.session, timing, now, &args);
            let before = self.output.len();
            if written || reply.is_push() {
                reply.encode(protocol, &mut self.output);
            }
            let bytes = self.output.len() - before;
            self.reply_size = self.reply_size.max(bytes);
            if record::counts_hot_keys(self.guard.state, &self.session)
                && let Some(spec) = timing.slot.and_then(crate::cmd::spec_at)
            {
                record::hot_command(&self.guard.state.hotkeys, spec, &args, bytes);
            }
            if !self.guard.output_ok(self.output.len(), &self.session) {
                return false;
            }
            if self.output.len() >= WRITE_AT && !self.flush().await {
                return false;
            }
        }
        true
    }

    async fn flush(&mut self) -> bool {
        self.guard.flush(&mut self.output, &mut self.stream, &self.session).await
    }

    /// Awaits a blocking command's reply while reading from the client: further requests are
    /// kept in `input` (taken up after the reply, in order), and a client that closes the
    /// connection, a CLIENT KILL or a shutdown end the wait (`None`). A client that keeps
    /// sending while blocked is bounded by the query buffer limit like any other.
    async fn blocked(&mut self, wait: cmd::BoxReply, on_unblock: Reply) -> Option<Reply> {
        // The replies before it go out first: the client may be waiting for them.
        if !self.output.is_empty() && !self.flush().await {
            return None;
        }
        let client = self.guard.client.clone();
        client.set_blocked(true);
        let (stream, input) = (&mut self.stream, &mut self.input);
        let waited = self
            .guard
            .hold(async {
                tokio::pin!(wait);
                let mut reading = true;
                loop {
                    if input.capacity() - input.len() < READ_CHUNK {
                        input.reserve(READ_CHUNK);
                    }
                    tokio::select! {
                        reply = &mut wait => return Some(reply),
                        // CLIENT UNBLOCK: dropping the wait withdraws it from the node.
                        error = client.unblocked() => return Some(if error {
                            Reply::error("UNBLOCKED client unblocked via CLIENT UNBLOCK")
                        } else {
                            on_unblock
                        }),
                        read = stream.read_buf(input), if reading => match read {
                            Ok(0) | Err(_) => return None,
                            // Enough buffered: stop reading until the reply is in (the limit
                            // applies later).
                            Ok(_) if input.len() > MAX_READ_WHILE_BLOCKED => reading = false,
                            Ok(_) => {}
                        },
                    }
                }
            })
            .await;
        client.set_blocked(false);
        waited.ok().flatten()
    }

    /// Waits for the client's next bytes (or a pub/sub message to write); `Stop` when the
    /// connection must close.
    async fn read(&mut self) -> Go {
        let authenticated = self.session.authenticated;
        if self.input.len() > self.guard.state.settings.query_buffer_limit(authenticated) {
            tracing::warn!(peer = %self.session.peer, bytes = self.input.len(), "client query buffer limit reached; closing");
            return Go::Stop;
        }
        // Room for the next read: the rest of a large argument when one is being received
        // (capped, so a length header alone never allocates), else a normal chunk.
        let want = self
            .parser
            .wanted()
            .map_or(READ_CHUNK, |w| w.saturating_sub(self.input.len()).clamp(READ_CHUNK, 1 << 20));
        if self.input.capacity() - self.input.len() < want / 2 {
            if !self.guard.reserve(self.input.len(), self.input.capacity(), want) {
                tracing::warn!(peer = %self.session.peer, bytes = self.input.len(), "request buffer budget exhausted; closing");
                guard::close_with(&mut self.stream, error_line(guard::BUDGET_EXHAUSTED).as_bytes()).await;
                return Go::Stop;
            }
            self.input.reserve(want);
        }
        self.guard.buffered.set(self.input.capacity());
        // `timeout` (CONFIG SET): a client idle between requests is closed, unless it is
        // subscribed (as Redis exempts pub/sub clients). A request half read counts as activity
        // only once its bytes arrive, as in Redis.
        let idle = if self.session.subscribed() { None } else { self.guard.state.idle_deadline() };
        let (stream, input, session) = (&mut self.stream, &mut self.input, &self.session);
        let read = self
            .guard
            .wait(async {
                // Biased: no random draw per read; a message waiting behind a busy reader is
                // still written at the top of every round.
                tokio::select! {
                    biased;
                    read = stream.read_buf(input) => Some(matches!(read, Ok(n) if n > 0)),
                    // A pub/sub message: written at the top of the next round.
                    _ = pushed(session) => Some(true),
                    _ = guard::expiry(idle) => None,
                }
            })
            .await;
        match read {
            Ok(Some(true)) => {}
            Ok(None) => {
                tracing::debug!(peer = %self.session.peer, "idle past `timeout`; closing");
                return Go::Stop;
            }
            // Closed by the client; killed; idle at a request boundary (or mid-request,
            // abandoned) at shutdown.
            Ok(Some(false)) | Err(Ended::Killed | Ended::Shutdown) => return Go::Stop,
            Err(Ended::AuthTimeout) => {
                tracing::info!(peer = %self.session.peer, "no AUTH within the auth timeout; closing");
                guard::close_with(&mut self.stream, error_line(guard::AUTH_TIMEOUT).as_bytes()).await;
                return Go::Stop;
            }
        }
        if !self.negotiated && !self.input.is_empty() {
            self.negotiated = true;
            if self.input[0] == shoal_wire::fast::MAGIC[0] {
                return Go::Fast;
            }
        }
        if self.input.is_empty() && self.input.capacity() > KEEP_BUFFER {
            self.input = BytesMut::with_capacity(READ_CHUNK);
            self.guard.buffered.set(self.input.capacity());
        }
        Go::On
    }

    /// Writes the client's queued pub/sub messages (a few hundred KiB at a time, at most
    /// [`PUSH_ROUNDS`] times, so a flood of messages cannot keep the client's own commands, an
    /// UNSUBSCRIBE say, from being read), before this round's replies (a message queued before
    /// an UNSUBSCRIBE goes out before its reply); false when the connection must close.
    async fn write_pushes(&mut self) -> bool {
        let Some(sub) = self.session.pushes().cloned() else { return true };
        for _ in 0..PUSH_ROUNDS {
            let batch = sub.take(WRITE_AT, &self.guard.state.pubsub.limits);
            if batch.is_empty() {
                return true;
            }
            let protocol = self.session.protocol();
            for m in &batch {
                m.encode(protocol, &mut self.output);
            }
            if !self.flush().await {
                return false;
            }
        }
        // More may be waiting: the next idle wait returns at once for them (see `pushed`).
        true
    }
}

/// A RESP error line.
fn error_line(text: &str) -> String {
    format!("-{text}\r\n")
}

/// Completes when a pub/sub message is queued for this client (never if it never subscribed).
async fn pushed(session: &Session) {
    match session.pushes() {
        // Some left from the last round's writing: at once. (A push after this check leaves its
        // wake-up behind for `ready`.)
        Some(sub) if sub.has_messages() => {}
        Some(sub) => sub.ready().await,
        None => std::future::pending().await,
    }
}

/// An HTTP request line or header where a RESP command should be (`POST /...`, `Host: ...`).
fn is_http(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"post") || name.eq_ignore_ascii_case(b"host:")
}
