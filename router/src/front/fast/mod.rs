//! The binary fast path, server side (spec: docs/fast-path.md; frames: [`shoal_wire::fast`]).
//!
//! [`crate::front::resp`] hands a connection here when its first byte is [`fast::MAGIC`]`[0]`
//! (0xF5, which cannot start RESP), on any RESP listener: the connection was admitted by the same
//! accept loop (maxclients, protected mode, TLS), is listed in CLIENT LIST and has its kill
//! switch. Then:
//!
//! 1. Preambles: the client's is read, this router's (version [`fast::VERSION`]) is written; a
//!    client asking for another version gets ours and the connection closes.
//! 2. `HELLO` (user, password) is checked by dispatching `AUTH user password`, so ACL users,
//!    `--requirepass`, the failure counter and ACL LOG behave exactly as for RESP. Until it
//!    succeeds frames are limited to [`fast::UNAUTH_MAX_BODY`] bytes and any other op is answered
//!    `NOAUTH` and closes the connection; a failed HELLO answers `WRONGPASS` and may be retried.
//!    With a password required, `--auth-timeout-ms` applies until HELLO succeeds.
//! 3. Requests: each op becomes the command arguments RESP would carry (`SET k v PX ms NX`, built
//!    into one reused vector, numbers written into a shared arena rather than a `String`:
//!    [`frames`]), goes down the same pipeline as a RESP request ([`crate::pipeline`]: admission,
//!    ACL, CLIENT PAUSE, dispatch, errors and texts as on RESP), and its reply is mapped to a
//!    status ([`frames::put_reply`]).
//!
//! Requests run concurrently: every complete frame in the read buffer is dispatched before any
//! reply is awaited (so a pipeline's ops reach the node queues together and share batches), up
//! to `--fast-max-in-flight` at once; replies are written as they complete, matched by id, in
//! one vectored write per batch of ready replies ([`Out`]: headers copied into one buffer, large
//! values written where they lie). A request whose command takes several dependent steps (a
//! [`Pending::Barrier`]) or is sent in pieces must not be overtaken: nothing after it is
//! dispatched until it completes, as on RESP. Ops on one key are queued on its node in request
//! order, so a client that pipelines `SET k` then `GET k` reads its write; the *replies* may
//! arrive in any order.
//!
//! Errors: an op the router does not know, bad flags, a key or value where the op takes none,
//! items that do not fill their region: `Status::Err` for that id, and the connection carries
//! on. A frame the decoder refuses (reserved bytes set, a length over the limits): the replies
//! of the requests before it, then `Status::Err` for its id, then the connection closes (nothing
//! after it can be delimited). A bad preamble closes at once without a reply.
//!
//! Through CMD, commands that change the connection's protocol state or block it (MULTI, WATCH,
//! SUBSCRIBE, AUTH, HELLO, RESET, QUIT, MONITOR, CLIENT REPLY/TRACKING, every `@blocking`
//! command and any other that would block, such as WAIT) are refused with
//! [`Refusal::NotOverFastPath`]: with replies out of order and no push channel they cannot mean
//! what they mean on RESP.
//!
//! Near-cache hits take the pipeline's shortest way ([`Pipeline::near_hit`]): a plain GET (a
//! key, no flags, value or argument: [`fast::plain_get`]) of a session whose GETs no stage would
//! look at is looked up straight from the read buffer, and a hit's reply written from the cache
//! entry; a miss, or any other session, goes the usual way. Skipping those steps took a hit
//! from 0.44 to 0.27 µs (docs/benchmarks.md).
//!
//! Costs per request beyond dispatch's own: none for a reply that is ready at once; a reply still
//! on its way takes a slot in the connection's [`InFlight`] (an allocation or two; a lane's
//! requests share one).
//!
//! Not done here: the slow log (commands are timed and counted per command in INFO, but
//! SLOWLOG does not list fast-path requests).

pub mod frames;

use std::time::Instant;

use bytes::{Bytes, BytesMut};
use shoal_wire::fast::{self, FrameError, Limits, Op, Preamble, Status};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::cmd::{CommandSpec, Pending};
use crate::guard::Guard;
use crate::nearcache::{COPY_OUT, NearValue};
use crate::pipeline::record::{self, Runs, Timing, Untimed};
use crate::pipeline::settle::{Finished, InFlight};
use crate::pipeline::{Pipeline, Step};
use crate::resp::{Out, Reply};
use crate::session::Session;
use frames::{Refusal, Shape, build_args, command_of, header, put_error, put_reply, refused_over_cmd};

/// `--fast-max-in-flight`'s default: requests one connection may have running at once (RESP's
/// pipeline round is 1024 commands too).
pub const DEFAULT_MAX_IN_FLIGHT: usize = crate::state::DEFAULT_FAST_MAX_IN_FLIGHT;

const READ_CHUNK: usize = 64 * 1024;
/// Ready replies are written once this many bytes wait (else when no more are ready).
const WRITE_AT: usize = 256 * 1024;
/// A read buffer larger than this is let go once empty rather than kept for an idle client.
const KEEP_BUFFER: usize = 256 * 1024;

/// What a request's reply needs once the command's reply is in.
struct Meta {
    id: u32,
    shape: Shape,
    started: Instant,
    slot: Option<usize>,
    /// A one-key op's key and request bytes, for the hot-key sketch once the reply's size is
    /// known (`None`: hot keys off, or counted at dispatch: ops with several keys). Boxed: a
    /// `Meta` is moved with its request several times, and hot keys are off by default.
    hot: Option<Box<(Bytes, usize)>>,
}

/// Serves a fast-path connection whose first bytes (the preamble's start) are in `input`,
/// handed over by RESP with its guard (its auth clock runs from the connection on, not from the
/// client's first bytes).
pub async fn serve<S>(stream: S, input: BytesMut, session: Session, guard: Guard<'_>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let state = guard.state;
    state.metrics.fast_connections.inc();
    let mut conn = Conn {
        pipeline: Pipeline::new(state),
        max_in_flight: state.settings.fast_max_in_flight.max(1),
        guard,
        stream,
        session,
        input,
        out: Out::new(),
        args: Vec::new(),
        arena: BytesMut::new(),
        hello: false,
        in_flight: InFlight::default(),
        eof: false,
        stopping: false,
        fatal: None,
        untimed: Untimed::default(),
        taken_up: Instant::now(),
    };
    if !conn.preamble().await {
        return;
    }
    while conn.round().await {}
}

struct Conn<'s, S> {
    guard: Guard<'s>,
    pipeline: Pipeline<Meta>,
    max_in_flight: usize,
    stream: S,
    session: Session,
    input: BytesMut,
    out: Out,
    /// A request's arguments, built into one reused vector.
    args: Vec<Bytes>,
    /// Numbers' text, cut from shared chunks.
    arena: BytesMut,
    /// HELLO succeeded.
    hello: bool,
    in_flight: InFlight<Meta>,
    /// The client closed its sending side: answer what it sent, then close.
    eof: bool,
    /// Shutting down: answer what is in flight, read nothing more.
    stopping: bool,
    /// A frame that cannot be delimited or a request that ends the connection: its id and error,
    /// written after the replies in flight.
    fatal: Option<(u32, Refusal)>,
    untimed: Untimed,
    /// When the requests being taken up were read (one clock read per read buffer).
    taken_up: Instant,
}

/// What taking up one frame came to.
enum Took {
    /// On to the next frame.
    Next,
    /// Stop taking up: the buffer ran out (`starved`), or a limit, a write or a fatal frame
    /// stopped it.
    Stop { starved: bool },
    /// CLIENT PAUSE holds this request (its arguments are still in `args`).
    Held(Meta, &'static CommandSpec),
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<'_, S> {
    /// The preamble: 8 bytes, so no buffer limit is needed while waiting for it; false: closed.
    async fn preamble(&mut self) -> bool {
        let state = self.guard.state;
        loop {
            match Preamble::decode(&mut self.input) {
                Ok(Some(theirs)) => {
                    self.out.put_slice(&Preamble { version: fast::VERSION }.encode());
                    if !self.guard.flush(&mut self.out, &mut self.stream, &self.session).await {
                        return false;
                    }
                    if theirs.version != fast::VERSION {
                        tracing::debug!(peer = %self.session.peer, version = theirs.version, "fast path: unsupported version; closing");
                        state.metrics.fast_errors.inc();
                        let _ = self.stream.shutdown().await;
                        return false;
                    }
                    return true;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(peer = %self.session.peer, error = %e, "fast path: bad preamble; closing");
                    state.metrics.protocol_errors.inc();
                    state.metrics.fast_errors.inc();
                    return false;
                }
            }
            let (stream, input) = (&mut self.stream, &mut self.input);
            match self.guard.wait(stream.read_buf(input)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return false,
            }
        }
    }

    /// One round: what the read buffer holds taken up, the ready replies written, then a wait
    /// for replies or bytes; false: closed.
    async fn round(&mut self) -> bool {
        if self.guard.is_killed() {
            return false;
        }
        self.pipeline.round();
        self.taken_up = Instant::now();
        if self.hello
            && let Some(near) = &self.guard.state.near
        {
            // The buffer's GETs looked up together first (see `NearCache::warm`).
            near.warm(fast::get_keys(
                &self.input,
                self.max_in_flight.saturating_sub(self.in_flight.requests()),
            ));
        }
        let mut starved = false;
        while self.fatal.is_none() && !self.stopping && self.in_flight.barriers() == 0 && self.room() {
            let took = match self.take_one() {
                Took::Held(meta, spec) => match self.resume_held(meta, spec).await {
                    Some(took) => took,
                    None => return false,
                },
                took => took,
            };
            match took {
                Took::Next | Took::Held(..) => {}
                Took::Stop { starved: s } => {
                    starved = s;
                    break;
                }
            }
        }
        // What joined the lane goes now, before anything is awaited.
        self.send_lane();
        // Every reply already in, without waiting: written together below.
        while let Some(done) = self.in_flight.ready() {
            if !self.finish(done) {
                return false;
            }
        }
        self.untimed.settle(self.guard.state);
        if !self.out.is_empty() && !self.flush().await {
            return false;
        }
        let round = Round {
            waiting: self.in_flight.requests(),
            barriers: self.in_flight.barriers(),
            starved,
            eof: self.eof,
            stopping: self.stopping,
            fatal: self.fatal.is_some(),
        };
        match next(round, self.max_in_flight) {
            Next::TakeUp => true,
            Next::Wait { reading } => self.wait(reading).await,
            Next::Close => {
                self.close().await;
                false
            }
        }
    }

    /// Whether another request may be taken up (the in-flight bound).
    fn room(&self) -> bool {
        self.in_flight.requests() + self.pipeline.lane_len() < self.max_in_flight
    }

    fn send_lane(&mut self) {
        self.pipeline.send(&mut self.session);
        while let Some(call) = self.pipeline.next_sent() {
            self.in_flight.push_lane(call);
        }
    }

    /// Takes up the next frame of the read buffer.
    fn take_one(&mut self) -> Took {
        let state = self.guard.state;
        let limits = Limits {
            authenticated: self.hello,
            max_bulk: state.settings.proto_max_bulk_len,
            max_items: state.settings.max_args,
        };
        let Some(total) = self.frame_len(&limits) else {
            return Took::Stop { starved: self.fatal.is_none() };
        };
        if total > self.input.len() {
            return Took::Stop { starved: true };
        }
        if self.hello && self.near_hit(total) {
            // Written below the loop (the lane sent first), then the rest taken up anew.
            return if self.out.len() >= WRITE_AT { Took::Stop { starved: false } } else { Took::Next };
        }
        let req = fast::take_request(&mut self.input, total);
        state.metrics.fast_requests.inc();
        let id = req.id;
        let shape = match build_args(&req, &mut self.args, &mut self.arena, limits.max_items) {
            Ok(shape) => shape,
            Err(refusal) => {
                state.metrics.fast_errors.inc();
                put_error(&mut self.out, id, &refusal.to_string());
                return Took::Next;
            }
        };
        if !self.hello && shape != Shape::Hello {
            self.fatal = Some((id, Refusal::NoHello));
            return Took::Stop { starved: false };
        }
        if let Shape::Cmd(protocol) = shape
            && self.session.protocol() != protocol
        {
            // A node encodes some replies (scripts') for the session's protocol.
            self.session.set_protocol(protocol);
        }
        let known = req.op.ok().and_then(command_of);
        // Hot keys, as RESP counts them (authenticated requests; request and reply bytes): a
        // one-key op's key is kept for its reply's size, other commands' keys counted now.
        let one_key = matches!(req.op, Ok(Op::Get | Op::Set | Op::Del | Op::IncrBy | Op::Expire));
        let args = std::mem::take(&mut self.args);
        let step = self.pipeline.take(&mut self.session, &args, known, self.taken_up, |session, spec| {
            let refusal =
                Meta { id, shape, started: session.last_command, slot: session.last_command_slot, hot: None };
            let Some(spec) = spec else { return Some(refusal) };
            if matches!(shape, Shape::Cmd(_)) && refused_over_cmd(spec).is_some() {
                return None;
            }
            let hot = if !record::counts_hot_keys(state, session) {
                None
            } else if one_key {
                Some(Box::new((req.key.clone(), req.key.len() + req.value.len())))
            } else {
                record::hot_command(&state.hotkeys, spec, &args, 0);
                None
            };
            Some(Meta { hot, ..refusal })
        });
        let took = match step {
            // The common case first, by itself: the step is not moved on (a memcpy of a whole
            // op per request).
            Step::Joined => Took::Next,
            Step::NotHere(spec) => {
                state.metrics.fast_errors.inc();
                put_error(&mut self.out, id, &Refusal::NotOverFastPath(spec.name()).to_string());
                Took::Next
            }
            step => self.took(step, &args),
        };
        self.args = args;
        took
    }

    /// The next frame's whole size, checked against the limits (once: the frame is then cut out
    /// unchecked) and held against the process-wide budget before room is reserved for it.
    /// `None`: no complete header yet, or the frame is refused (`fatal` set).
    fn frame_len(&mut self, limits: &Limits) -> Option<usize> {
        let total = match fast::request_len(&self.input, limits) {
            Err(e) => {
                self.guard.state.metrics.protocol_errors.inc();
                self.fatal = Some((fast::peek_id(&self.input), e.into()));
                return None;
            }
            Ok(None) => return None,
            Ok(Some(total)) => total,
        };
        if total > self.input.len() {
            let max = self.guard.state.settings.query_buffer_limit(self.hello);
            if total > max {
                let e = FrameError::TooLarge { what: "frame", len: total as u64, max: max as u64 };
                self.fatal = Some((fast::peek_id(&self.input), e.into()));
                return None;
            }
            if !self.guard.reserve(self.input.len(), self.input.capacity(), total - self.input.len()) {
                self.fatal = Some((fast::peek_id(&self.input), Refusal::BudgetExhausted));
                return None;
            }
            self.input.reserve(total - self.input.len());
        }
        Some(total)
    }

    /// A plain GET answered from the near cache, if it is one and a hit ([`Pipeline::near_hit`]).
    fn near_hit(&mut self, total: usize) -> bool {
        // (Before the frame is looked into: without a near cache, nothing here is a hit.)
        if self.guard.state.near.is_none() {
            return false;
        }
        let Some((id, key)) = fast::plain_get(&self.input, total) else { return false };
        // Room for a copied value first: the copy runs with the cache's shard locked.
        self.out.reserve(fast::HEADER_LEN + COPY_OUT);
        let out = &mut self.out;
        let hit = self.pipeline.near_hit(&mut self.session, key, self.taken_up, |value| {
            header(out, Status::Value, id, value.len(), 0);
            match value {
                NearValue::Short(v) => out.put_slice(v),
                NearValue::Shared(v) => out.put_bytes(&v),
            }
        });
        let Some(timing) = hit else { return false };
        bytes::Buf::advance(&mut self.input, total);
        self.guard.state.metrics.fast_requests.inc();
        self.untimed.push(timing);
        true
    }

    /// What the pipeline made of a request (a refusal by the fast path aside). Synchronous, as is
    /// all of taking a frame up: a request CLIENT PAUSE holds comes back as [`Took::Held`], for
    /// the round to wait on.
    fn took(&mut self, step: Step<Meta>, args: &[Bytes]) -> Took {
        let (meta, pending) = match step {
            Step::Joined | Step::NotHere(_) => return Took::Next,
            Step::Held(meta, spec) => return Took::Held(meta, spec),
            Step::Done(meta, pending) => (meta, pending),
        };
        let state = self.guard.state;
        match pending {
            Pending::Blocking(..) => {
                // A blocking command outside `@blocking` (WAIT): dropping its wait withdraws it.
                drop(pending);
                state.metrics.fast_errors.inc();
                let name = meta.slot.and_then(crate::cmd::spec_at).map_or("?", |s| s.name());
                put_error(&mut self.out, meta.id, &Refusal::NotOverFastPath(name).to_string());
            }
            Pending::Ready(reply) | Pending::Close(reply) => {
                if meta.shape == Shape::Hello && matches!(reply, Reply::Simple(_)) {
                    self.hello = true;
                    self.guard.note_auth(true);
                }
                let timing = answer(state, &mut self.out, meta, reply);
                self.untimed.push(timing);
                if self.out.len() >= WRITE_AT {
                    // Written below the loop (the lane sent first), then the rest taken up anew.
                    return Took::Stop { starved: false };
                }
            }
            pending => {
                // Sent in pieces, or in dependent steps: later requests must not overtake it.
                let large = args.iter().map(|a| a.len()).sum::<usize>() > shoal_wire::pieces::PIECE_BYTES;
                let barrier = large || matches!(pending, Pending::Barrier(_));
                self.in_flight.push(meta, barrier, pending);
            }
        }
        Took::Next
    }

    /// A request CLIENT PAUSE held: waits for the pause, then runs it; `None`: close.
    async fn resume_held(&mut self, meta: Meta, spec: &'static CommandSpec) -> Option<Took> {
        if !self.held(spec).await {
            return None;
        }
        let args = std::mem::take(&mut self.args);
        // (Resumed, a request is dispatched: never held again.)
        let step = self.pipeline.resume(&mut self.session, spec, &args, meta);
        let took = self.took(step, &args);
        self.args = args;
        Some(took)
    }

    /// CLIENT PAUSE holds a request: the replies so far go out, then this connection waits
    /// (reading nothing more), as a RESP connection does; false: close.
    async fn held(&mut self, spec: &'static CommandSpec) -> bool {
        self.send_lane();
        self.untimed.settle(self.guard.state);
        if !self.out.is_empty() && !self.flush().await {
            return false;
        }
        self.guard.client.set_held(true);
        let waited = self.guard.hold(self.guard.state.pause.wait(spec)).await;
        self.guard.client.set_held(false);
        // Later requests were taken up now too.
        self.taken_up = Instant::now();
        waited.is_ok()
    }

    /// Appends a finished job's replies (timed by one clock read: a lane's replies arrive
    /// together); false when the output limit is reached.
    fn finish(&mut self, done: Finished<Meta>) -> bool {
        let (state, out) = (self.guard.state, &mut self.out);
        let now = Instant::now();
        let mut runs = Runs::default();
        done.each(|meta, reply| runs.add(state, now, answer(state, out, meta, reply)));
        runs.end(state);
        self.guard.output_ok(self.out.len(), &self.session)
    }

    async fn flush(&mut self) -> bool {
        self.guard.flush(&mut self.out, &mut self.stream, &self.session).await
    }

    /// Waits for a reply in flight, for the client's bytes (if `reading`), the auth deadline or
    /// shutdown; false: close.
    async fn wait(&mut self, reading: bool) -> bool {
        if reading {
            if self.input.is_empty() && self.input.capacity() > KEEP_BUFFER {
                self.input = BytesMut::new();
            }
            if self.input.capacity() - self.input.len() < READ_CHUNK / 2 {
                if !self.guard.reserve(self.input.len(), self.input.capacity(), READ_CHUNK) {
                    self.fatal = Some((0, Refusal::BudgetExhausted));
                    return true;
                }
                self.input.reserve(READ_CHUNK);
            }
            self.guard.buffered.set(self.input.capacity());
        }
        let auth_expired = self.guard.auth_expiry();
        let (stream, input, in_flight) = (&mut self.stream, &mut self.input, &mut self.in_flight);
        let (killed, shutdown) = self.guard.signals();
        tokio::select! {
            biased;
            _ = killed => return false,
            _ = auth_expired => {
                self.guard.state.metrics.auth_timeouts.inc();
                tracing::info!(peer = %self.session.peer, "fast path: no HELLO within the auth timeout; closing");
                self.fatal = Some((0, Refusal::AuthTimeout));
                // In-flight HELLOs are not waited for: the time is up.
                self.in_flight.abandon();
            }
            done = in_flight.next(), if !in_flight.is_empty() => {
                return self.finish(done);
            }
            read = stream.read_buf(input), if reading => match read {
                Ok(0) | Err(_) => self.eof = true,
                Ok(_) => {}
            },
            changed = shutdown.changed(), if !self.stopping => {
                if changed.is_err() || *shutdown.borrow() {
                    self.stopping = true;
                }
            }
        }
        true
    }

    /// Everything is answered: the fatal frame's error, if any, then close.
    async fn close(&mut self) {
        if let Some((id, refusal)) = self.fatal.take() {
            tracing::debug!(peer = %self.session.peer, error = %refusal, "fast path: closing");
            self.guard.state.metrics.fast_errors.inc();
            put_error(&mut self.out, id, &refusal.to_string());
            // Bounded on its own (the auth deadline may be what passed): the client may not read.
            let last = self.guard.flush_until(&mut self.out, &mut self.stream, &self.session, None);
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), last).await;
        }
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), self.stream.shutdown()).await;
    }
}

/// Appends a request's reply (counting its key's bytes and its error); its timing is left to
/// the caller.
fn answer(state: &crate::state::RouterState, out: &mut Out, meta: Meta, reply: Reply) -> Timing {
    let before = out.len();
    let failed = put_reply(out, meta.id, meta.shape, reply);
    if let Some(hot) = meta.hot {
        let (key, request) = *hot;
        record::hot_key(state, &key, request + out.len() - before);
    }
    if failed {
        state.metrics.fast_errors.inc();
    }
    Timing { started: meta.started, slot: meta.slot, failed }
}

/// Where a connection stands once it took up what it could of its read buffer and wrote the
/// replies that were ready.
#[derive(Debug, Clone, Copy, Default)]
struct Round {
    /// Requests in flight.
    waiting: usize,
    /// Requests in flight that later ones must not overtake.
    barriers: usize,
    /// The buffered frames ran out (rather than a limit stopping the loop: the in-flight bound,
    /// or replies enough to write).
    starved: bool,
    /// The client closed its sending side.
    eof: bool,
    stopping: bool,
    /// A frame that ends the connection is waiting to be answered.
    fatal: bool,
}

/// What the connection does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Everything is answered and nothing more will be read: close.
    Close,
    /// Take up the frames still buffered, now.
    TakeUp,
    /// Wait for a reply in flight, for the client's bytes (if `reading`), the auth deadline or
    /// shutdown.
    Wait { reading: bool },
}

fn next(r: Round, max_in_flight: usize) -> Next {
    if r.waiting == 0 && (r.fatal || r.stopping || (r.eof && r.starved)) {
        return Next::Close;
    }
    let open = !r.fatal && !r.stopping && r.barriers == 0;
    // The loop stopped short of the buffer's end (at the in-flight bound, or with enough
    // replies to write them first) and what was in flight has all finished since: take the
    // frames left up now. (Waiting would wait for the client to
    // send more, while it waits for the replies to what it sent: a hang.)
    if !r.starved && open && r.waiting < max_in_flight {
        return Next::TakeUp;
    }
    Next::Wait { reading: open && !r.eof && r.waiting < max_in_flight }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_a_round_the_connection_takes_up_waits_or_closes() {
        let max = 4;
        let at_bound = Round { waiting: 4, ..Round::default() };
        // At the bound with frames buffered: wait for replies, read nothing more.
        assert_eq!(next(at_bound, max), Next::Wait { reading: false });
        // ... and once everything in flight has finished (6051ba7's hang): take the buffered
        // frames up at once, not wait for the client, which waits for their replies.
        let drained = Round { waiting: 0, ..at_bound };
        assert_eq!(next(drained, max), Next::TakeUp);
        // Some room, frames buffered: take them up too.
        assert_eq!(next(Round { waiting: 3, ..at_bound }, max), Next::TakeUp);
        // Stopped with replies enough to write (answered at once) and frames still buffered,
        // even after the client closed its side: the rest is taken up after the write.
        let written = Round::default();
        assert_eq!(next(written, max), Next::TakeUp);
        assert_eq!(next(Round { eof: true, ..written }, max), Next::TakeUp);
        // The frames ran out: wait for replies and read.
        let starved = Round { starved: true, waiting: 2, ..at_bound };
        assert_eq!(next(starved, max), Next::Wait { reading: true });
        // A barrier in flight: nothing is taken up or read until it is answered.
        assert_eq!(next(Round { barriers: 1, waiting: 1, ..at_bound }, max), Next::Wait { reading: false });
        // The client closed its side: answer what it sent, then close.
        let eof = Round { eof: true, ..starved };
        assert_eq!(next(eof, max), Next::Wait { reading: false });
        assert_eq!(next(Round { waiting: 0, ..eof }, max), Next::Close);
        // A frame that ends the connection, or shutdown: close once nothing is in flight.
        for ending in [Round { fatal: true, ..at_bound }, Round { stopping: true, ..at_bound }] {
            assert_eq!(next(ending, max), Next::Wait { reading: false });
            assert_eq!(next(Round { waiting: 0, ..ending }, max), Next::Close);
        }
    }
}
