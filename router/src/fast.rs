//! The binary fast path, server side (spec: docs/fast-path.md; frames: [`shoal_wire::fast`]).
//!
//! [`crate::connection`] hands a connection here when its first byte is [`fast::MAGIC`]`[0]`
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
//!    into one reused vector, numbers written into a shared arena rather than a `String`), goes
//!    through [`cmd::admit`] / [`cmd::run`] (ACL, CLIENT PAUSE, errors and texts as on RESP), and
//!    its reply is mapped to a status ([`put_reply`]).
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
//! Near-cache hits take a shorter way: a plain GET (a key, no flags, value or argument:
//! [`fast::plain_get`]) of a session whose GETs no check would look at ([`plain_reads`]: an
//! unrestricted ACL user, no CLIENT PAUSE of reads, no hot-key counting, primary reads, ...) is
//! looked up straight from the read buffer, and a hit's reply written from the cache entry,
//! with the session and the stats updated as admission and the lane would have; a miss, or any
//! other session, goes the usual way. Skipping those steps took a hit from 0.44 to 0.27 µs
//! (docs/benchmarks.md).
//!
//! Costs per request beyond dispatch's own: none for a reply that is ready at once; a reply still
//! on its way takes one task slot in the connection's `FuturesUnordered` (an allocation).
//!
//! Not done here: the slow log (commands are timed and counted per command in INFO, but
//! SLOWLOG does not list fast-path requests).

use std::sync::{Arc, LazyLock};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use futures_util::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use shoal_wire::fast::{self, FrameError, Limits, Op, Preamble, Request, Status, set_flags};
use shoal_wire::pieces::PIECE_BYTES;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use crate::backend::Routing;
use crate::cmd::lane::{Lane, LaneCall, Replies};
use crate::cmd::{self, CommandSpec, Ctx, Pending};
use crate::connection::{expiry, flush};
use crate::nearcache::{COPY_OUT, NearValue};
use crate::resp::{Out, Protocol, Reply};
use crate::session::Session;
use crate::state::{QUERY_BUFFER_ALLOWANCE, ReadFrom, RouterState};

/// `--fast-max-in-flight`'s default: requests one connection may have running at once (RESP's
/// pipeline round is 1024 commands too).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1024;

const READ_CHUNK: usize = 64 * 1024;
/// Ready replies are written once this many bytes wait (else when no more are ready).
const WRITE_AT: usize = 256 * 1024;
/// A read buffer larger than this is let go once empty rather than kept for an idle client.
const KEEP_BUFFER: usize = 256 * 1024;

/// Why a request is answered with `Status::Err` before reaching a command. The text is the
/// reply's body (error code first, as Redis's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("ERR {0}")]
    Frame(#[from] FrameError),
    #[error("ERR Protocol error: flags 0x{0:02x} are not defined for this op")]
    Flags(u8),
    #[error("ERR Protocol error: this op takes no key")]
    UnexpectedKey,
    #[error("ERR Protocol error: this op takes no value")]
    UnexpectedValue,
    #[error("ERR Protocol error: this op takes no arg (it must be 0)")]
    UnexpectedArg,
    #[error("ERR Protocol error: CMD needs at least a command name")]
    EmptyCommand,
    #[error("NOAUTH HELLO must succeed before any other fast-path request")]
    NoHello,
    #[error(
        "ERR '{0}' is not available over the fast path (it blocks or changes the connection's protocol state); use RESP"
    )]
    NotOverFastPath(&'static str),
    #[error("ERR reply too large for one fast-path frame")]
    ReplyTooLarge,
    #[error(
        "ERR request buffer budget exhausted: the router holds too much unprocessed request data from all clients (--request-buffer-budget); closing the connection, try again later"
    )]
    BudgetExhausted,
    #[error(
        "ERR authentication timeout: no successful HELLO within --auth-timeout-ms; closing the connection"
    )]
    AuthTimeout,
}

/// Commands CMD refuses (besides every `@blocking` one): see the module docs.
const NOT_OVER_FAST_PATH: &[&str] = &[
    "multi",
    "exec",
    "discard",
    "watch",
    "unwatch",
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
    "ssubscribe",
    "sunsubscribe",
    "auth",
    "hello",
    "reset",
    "quit",
    "monitor",
    "client|reply",
    "client|tracking",
];

fn refused_over_cmd(spec: &CommandSpec) -> Option<&'static str> {
    let refused = NOT_OVER_FAST_PATH.contains(&spec.name) || spec.acl.contains(&"@blocking");
    refused.then_some(spec.name)
}

/// How a request's reply is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// A typed op: the reply maps to a status.
    Typed,
    /// HELLO: as a typed op, and a success opens the connection.
    Hello,
    /// CMD: the reply's RESP encoding in this version.
    Cmd(Protocol),
}

/// Fixed argument words, shared rather than allocated per request.
mod word {
    use bytes::Bytes;
    pub const AUTH: Bytes = Bytes::from_static(b"AUTH");
    pub const DEFAULT: Bytes = Bytes::from_static(b"default");
    pub const PING: Bytes = Bytes::from_static(b"PING");
    pub const GET: Bytes = Bytes::from_static(b"GET");
    pub const SET: Bytes = Bytes::from_static(b"SET");
    pub const PX: Bytes = Bytes::from_static(b"PX");
    pub const NX: Bytes = Bytes::from_static(b"NX");
    pub const XX: Bytes = Bytes::from_static(b"XX");
    pub const KEEPTTL: Bytes = Bytes::from_static(b"KEEPTTL");
    pub const DEL: Bytes = Bytes::from_static(b"DEL");
    pub const INCRBY: Bytes = Bytes::from_static(b"INCRBY");
    pub const PEXPIRE: Bytes = Bytes::from_static(b"PEXPIRE");
    pub const MGET: Bytes = Bytes::from_static(b"MGET");
    pub const MSET: Bytes = Bytes::from_static(b"MSET");
}

/// The command word a typed op's arguments start with ([`build_args`]); `None` for CMD, whose
/// command is the client's.
fn command_word(op: Op) -> Option<Bytes> {
    Some(match op {
        Op::Hello => word::AUTH,
        Op::Ping => word::PING,
        Op::Get => word::GET,
        Op::Set => word::SET,
        Op::Del => word::DEL,
        Op::IncrBy => word::INCRBY,
        Op::Expire => word::PEXPIRE,
        Op::MGet => word::MGET,
        Op::MSet => word::MSET,
        Op::Cmd => return None,
    })
}

/// The command a typed op's request runs (the one [`command_word`] names), looked up in the
/// registry once per op code: a request then skips the lookup by name, a few percent of a
/// near-cache hit's cost.
fn command_of(op: Op) -> Option<&'static CommandSpec> {
    static BY_CODE: LazyLock<[Option<&'static CommandSpec>; 256]> = LazyLock::new(|| {
        std::array::from_fn(|code| {
            let word = Op::from_u8(code as u8).and_then(command_word)?;
            Some(cmd::lookup(&word).expect("a typed op names a registered command"))
        })
    });
    BY_CODE[op as usize]
}

/// Decimal text of `n` as a `Bytes` cut from `arena` (one allocation per few hundred numbers,
/// not one per request).
fn number(arena: &mut BytesMut, n: i64) -> Bytes {
    shoal_wire::chunk::cut(arena, shoal_wire::num::IntText::new(n).as_bytes(), 4096)
}

/// Builds the command arguments of `req` into `args` (cleared first): what RESP would carry.
fn build_args(
    req: &Request,
    args: &mut Vec<Bytes>,
    arena: &mut BytesMut,
    max_items: usize,
) -> Result<Shape, Refusal> {
    args.clear();
    let op = req.op.map_err(FrameError::UnknownOp)?;
    let allowed = match op {
        Op::Set => set_flags::NX | set_flags::XX | set_flags::KEEPTTL | set_flags::GET,
        Op::Cmd => fast::cmd_flags::RESP3,
        _ => 0,
    };
    if req.flags & !allowed != 0 {
        return Err(Refusal::Flags(req.flags & !allowed));
    }
    if op.needs_key() && req.key.is_empty() {
        return Err(FrameError::MissingKey.into());
    }
    if !op.needs_key() && op != Op::Hello && !req.key.is_empty() {
        return Err(Refusal::UnexpectedKey);
    }
    let takes_value = matches!(op, Op::Hello | Op::Set) || op.has_items();
    if !takes_value && !req.value.is_empty() {
        return Err(Refusal::UnexpectedValue);
    }
    let takes_arg = matches!(op, Op::Set | Op::IncrBy | Op::Expire) || op.has_items();
    if !takes_arg && req.arg != 0 {
        return Err(Refusal::UnexpectedArg);
    }
    let key = || req.key.clone();
    args.extend(command_word(op));
    match op {
        Op::Hello => {
            let user = if req.key.is_empty() { word::DEFAULT } else { key() };
            args.extend([user, req.value.clone()]);
            return Ok(Shape::Hello);
        }
        Op::Cmd => {
            fast::split_items_into(&req.value, req.arg, max_items, args)?;
            if args.is_empty() {
                return Err(Refusal::EmptyCommand);
            }
            let resp3 = req.flags & fast::cmd_flags::RESP3 != 0;
            return Ok(Shape::Cmd(if resp3 { Protocol::Resp3 } else { Protocol::Resp2 }));
        }
        Op::Ping => {}
        Op::Get | Op::Del => args.push(key()),
        Op::Set => {
            args.extend([key(), req.value.clone()]);
            // 0 is "no TTL"; a negative one reaches SET, which answers Redis's own error.
            if req.arg != 0 {
                args.extend([word::PX, number(arena, req.arg)]);
            }
            for (bit, w) in [
                (set_flags::NX, word::NX),
                (set_flags::XX, word::XX),
                (set_flags::KEEPTTL, word::KEEPTTL),
                (set_flags::GET, word::GET),
            ] {
                if req.flags & bit != 0 {
                    args.push(w);
                }
            }
        }
        Op::IncrBy | Op::Expire => args.extend([key(), number(arena, req.arg)]),
        Op::MGet | Op::MSet => fast::split_items_into(&req.value, req.arg, max_items, args)?,
    }
    Ok(Shape::Typed)
}

fn header(out: &mut Out, status: Status, id: u32, body_len: usize, int: i64) {
    let body_len = u32::try_from(body_len).expect("checked by the caller");
    out.put_slice(&fast::ReplyHeader { status, id, body_len, int }.encode());
}

/// Appends an `Err` reply.
fn put_error(out: &mut Out, id: u32, text: &str) {
    // Error texts are short; one longer than a frame can say is cut (never the case in practice).
    let text = &text.as_bytes()[..text.len().min(u32::MAX as usize)];
    header(out, Status::Err, id, text.len(), 0);
    out.put_slice(text);
}

/// Appends the reply for request `id`; true if it is an error.
fn put_reply(out: &mut Out, id: u32, shape: Shape, reply: Reply) -> bool {
    const MAX: usize = u32::MAX as usize;
    if let Shape::Cmd(protocol) = shape {
        let failed = reply.is_error();
        let mut body = Out::new();
        reply.encode(protocol, &mut body);
        if body.len() > MAX {
            put_error(out, id, &Refusal::ReplyTooLarge.to_string());
            return true;
        }
        header(out, Status::Resp, id, body.len(), 0);
        out.append(body);
        return failed;
    }
    match reply {
        Reply::Simple(_) => header(out, Status::Ok, id, 0, 0),
        Reply::Bulk(v) => {
            header(out, Status::Value, id, v.len(), 0);
            out.put_bytes(&v);
        }
        Reply::Nil | Reply::NilArray => header(out, Status::Nil, id, 0, 0),
        Reply::Int(n) => header(out, Status::Int, id, 0, n),
        Reply::Error(text) => {
            put_error(out, id, &text);
            return true;
        }
        Reply::Failure(e) => {
            put_error(out, id, &format!("ERR {e}"));
            return true;
        }
        Reply::Array(items) if items.iter().all(|i| matches!(i, Reply::Bulk(_) | Reply::Nil)) => {
            let len: usize = items
                .iter()
                .map(|i| match i {
                    Reply::Bulk(v) => 4 + v.len(),
                    _ => 4,
                })
                .sum();
            if len > MAX {
                put_error(out, id, &Refusal::ReplyTooLarge.to_string());
                return true;
            }
            header(out, Status::Array, id, len, items.len() as i64);
            for item in &items {
                match item {
                    Reply::Bulk(v) => {
                        out.put_slice(&(v.len() as u32).to_le_bytes());
                        out.put_bytes(v);
                    }
                    _ => out.put_slice(&fast::NIL_ITEM.to_le_bytes()),
                }
            }
        }
        // No typed op answers anything else; were one to, the client still gets it whole.
        other => return put_reply(out, id, Shape::Cmd(Protocol::Resp2), other),
    }
    false
}

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

/// Work in flight: one request run as usual, or a lane of one-key commands sent together.
enum Job {
    One { meta: Meta, barrier: bool, pending: Pending },
    Lane(LaneCall<Meta>),
}

/// A job's replies.
enum Finished {
    One { meta: Meta, barrier: bool, reply: Reply },
    Lane(Replies<Meta>),
}

impl Finished {
    /// Requests it answers.
    fn len(&self) -> usize {
        match self {
            Finished::One { .. } => 1,
            Finished::Lane(replies) => replies.len(),
        }
    }

    fn barrier(&self) -> bool {
        matches!(self, Finished::One { barrier: true, .. })
    }
}

/// Sends what joined `lane`, if anything, as one job; returns how many requests it carries.
fn send_lane<F>(
    lane: &mut Lane<Meta>,
    ctx: &Ctx,
    in_flight: &mut FuturesUnordered<F>,
    track: impl FnOnce(Job) -> F,
) -> usize {
    lane.send(ctx).map_or(0, |call| {
        let n = call.len();
        in_flight.push(track(Job::Lane(call)));
        n
    })
}

async fn track(job: Job) -> Finished {
    match job {
        Job::One { meta, barrier, pending } => {
            Finished::One { meta, barrier, reply: pending.resolve().await }
        }
        Job::Lane(call) => Finished::Lane(call.wait().await),
    }
}

/// Counts the request in the command stats and appends its reply.
fn finish(state: &RouterState, out: &mut Out, meta: Meta, reply: Reply, now: Instant) {
    let timing = answer(state, out, meta, reply);
    timing.record(state, now);
}

/// Appends the reply (counting its key's bytes and its error); the request's timing is left to
/// the caller.
fn answer(state: &RouterState, out: &mut Out, meta: Meta, reply: Reply) -> Timing {
    let before = out.len();
    let failed = put_reply(out, meta.id, meta.shape, reply);
    if let Some(hot) = meta.hot {
        let (key, request) = *hot;
        state.hotkeys.record(&key, (request + out.len() - before) as u64);
    }
    if failed {
        state.metrics.fast_errors.inc();
    }
    Timing { started: meta.started, slot: meta.slot, failed }
}

/// What the command stats need of an answered request: when it was taken up, its command, and
/// whether it failed.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Timing {
    started: Instant,
    slot: Option<usize>,
    failed: bool,
}

impl Timing {
    fn record(self, state: &RouterState, now: Instant) {
        self.record_n(state, now, 1);
    }

    /// `n` requests of this timing, recorded at the cost of one.
    fn record_n(self, state: &RouterState, now: Instant, n: u64) {
        let took = now.saturating_duration_since(self.started);
        state.metrics.command_seconds.observe_n(took.as_secs_f64(), n);
        if let Some(slot) = self.slot {
            state.stats.record_n(slot, took, self.failed, n);
        }
    }
}

/// Requests answered while a read buffer is taken up (near-cache hits, refusals, replies ready
/// at once), timed together by one clock read before the connection next writes or waits: a
/// clock read per request was 5% of a near-cache hit's cost. Their time then runs until their
/// replies go out. Requests of one buffer were taken up at one time, so a run of the same
/// command's answers is one timing with a count: recorded once, not once per request (the
/// stats' atomic adds per hit were another 5%).
#[derive(Default)]
struct Untimed(Vec<(Timing, u64)>);

impl Untimed {
    fn push(&mut self, timing: Timing) {
        match self.0.last_mut() {
            Some((last, n)) if *last == timing => *n += 1,
            _ => self.0.push((timing, 1)),
        }
    }

    fn settle(&mut self, state: &RouterState) {
        if self.0.is_empty() {
            return;
        }
        let now = Instant::now();
        for (timing, n) in self.0.drain(..) {
            timing.record_n(state, now, n);
        }
    }
}

/// Appends every reply of a finished job.
/// Appends every reply of a finished job (timed by one clock read: a lane's replies arrive
/// together).
fn finish_all(state: &RouterState, out: &mut Out, done: Finished) {
    let now = Instant::now();
    match done {
        Finished::One { meta, reply, .. } => finish(state, out, meta, reply, now),
        Finished::Lane(replies) => {
            for (meta, reply) in replies {
                finish(state, out, meta, reply, now);
            }
        }
    }
}

/// Whether a plain GET of `key` by this session would pass admission and join the lane with no
/// check looking at anything but the key's presence in the near cache, so that a hit may be
/// answered without building, admitting and joining it (the hit path in [`serve`]): signed in
/// as a user [`acl::check`](cmd::acl::check) lets through unlooked, not subscribed, no CLIENT
/// PAUSE holding reads, no hot-key counting, and a read the lane takes
/// ([`lane::may_join`](cmd::lane::may_join): primary reads, no MULTI, capture or client
/// tracking, a key that does not travel in pieces). Anything else runs the request as usual
/// (whose near-cache lookup then serves hits too).
fn plain_reads(state: &RouterState, session: &Session, routing: &Routing, key: &[u8]) -> bool {
    session.authenticated
        && cmd::acl::lets_all_through(state, session)
        && session.subscriber.is_none()
        && !state.hotkeys.enabled()
        && cmd::lane::may_join(state, session, routing, true, word::GET.len() + key.len())
        && !command_of(Op::Get).is_some_and(|get| state.pause.holds(get))
}

fn ctx<'a>(
    state: &'a Arc<RouterState>,
    session: &'a mut Session,
    routing: &'a Arc<Routing>,
    deadline: tokio::time::Instant,
) -> Ctx<'a> {
    Ctx { state, session, routing, deadline, read_from: ReadFrom::Primary }
}

/// Serves a fast-path connection whose first bytes (the preamble's start) are in `input`.
/// `auth_deadline`: the RESP side's (with a password required), so that, as on RESP, the clock
/// runs from the connection until HELLO, not from the client's first bytes.
pub async fn serve<S>(
    mut stream: S,
    mut input: BytesMut,
    state: Arc<RouterState>,
    mut session: Session,
    mut auth_deadline: Option<tokio::time::Instant>,
    mut shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    state.metrics.fast_connections.inc();
    let client = session.client.clone();
    let killed = client.killed();
    tokio::pin!(killed);
    let mut buffered = state.buffers.hold(QUERY_BUFFER_ALLOWANCE);
    let mut out = Out::new();

    // The preamble: 8 bytes, so no buffer limit is needed while waiting for it.
    loop {
        match Preamble::decode(&mut input) {
            Ok(Some(theirs)) => {
                out.put_slice(&Preamble { version: fast::VERSION }.encode());
                if !flush(&mut out, &mut stream, auth_deadline, &state, &session, &mut killed).await {
                    return;
                }
                if theirs.version != fast::VERSION {
                    tracing::debug!(peer = %session.peer, version = theirs.version, "fast path: unsupported version; closing");
                    state.metrics.fast_errors.inc();
                    let _ = stream.shutdown().await;
                    return;
                }
                break;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(peer = %session.peer, error = %e, "fast path: bad preamble; closing");
                state.metrics.protocol_errors.inc();
                state.metrics.fast_errors.inc();
                return;
            }
        }
        tokio::select! {
            biased;
            _ = &mut killed => return,
            _ = expiry(auth_deadline) => {
                state.metrics.auth_timeouts.inc();
                return;
            }
            read = stream.read_buf(&mut input) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = shutdown.changed() => return,
        }
    }

    let max_in_flight = state.settings.fast_max_in_flight.max(1);
    let mut routing = state.backend.routing();
    let mut args: Vec<Bytes> = Vec::new();
    let mut arena = BytesMut::new();
    let mut hello = false;
    let mut in_flight = Unfinished(FuturesUnordered::new());
    // Requests in flight (a lane's count each), and one-key commands joined and not yet sent.
    let mut waiting = 0usize;
    let mut lane: Lane<Meta> = Lane::default();
    // Requests in flight that later ones must not overtake (see the module docs).
    let mut barriers = 0usize;
    // The client closed its sending side: answer what it sent, then close.
    let mut eof = false;
    // Shutting down: answer what is in flight, read nothing more.
    let mut stopping = false;
    // A frame that cannot be delimited or a request that ends the connection: its id and error,
    // written after the replies in flight.
    let mut fatal: Option<(u32, Refusal)> = None;
    let mut untimed = Untimed::default();
    let get_slot = crate::stats::slot_of(command_of(Op::Get).expect("GET is registered"));
    loop {
        if client.is_killed() {
            return;
        }
        if routing.topology.version != state.backend.version() {
            routing = state.backend.routing();
        }
        let mut taken_up = Instant::now();
        let mut deadline = tokio::time::Instant::from_std(taken_up) + state.settings.deadline;
        if hello && let Some(near) = &state.near {
            // The buffer's GETs looked up together first (see `NearCache::warm`).
            near.warm(fast::get_keys(&input, max_in_flight.saturating_sub(waiting)));
        }
        // Whether the frames in `input` ran out (as opposed to a limit stopping the loop).
        let mut starved = false;
        while fatal.is_none() && !stopping && barriers == 0 && waiting + lane.len() < max_in_flight {
            let limits = Limits {
                authenticated: hello,
                max_bulk: state.settings.proto_max_bulk_len,
                max_items: state.settings.max_args,
            };
            // The frame's whole size is checked against the limits (once: the frame is then cut
            // out unchecked) and held against the process-wide budget before room is reserved
            // for it.
            let total = match fast::request_len(&input, &limits) {
                Err(e) => {
                    state.metrics.protocol_errors.inc();
                    fatal = Some((fast::peek_id(&input), e.into()));
                    break;
                }
                Ok(None) => {
                    starved = true;
                    break;
                }
                Ok(Some(total)) if total > input.len() => {
                    let max = state.settings.query_buffer_limit(hello);
                    if total > max {
                        let e = FrameError::TooLarge { what: "frame", len: total as u64, max: max as u64 };
                        fatal = Some((fast::peek_id(&input), e.into()));
                        break;
                    }
                    if !buffered.reserve(input.len(), input.capacity(), total - input.len()) {
                        state.metrics.buffer_refusals.inc();
                        fatal = Some((fast::peek_id(&input), Refusal::BudgetExhausted));
                        break;
                    }
                    input.reserve(total - input.len());
                    starved = true;
                    break;
                }
                Ok(Some(total)) => total,
            };
            let plain = match &state.near {
                Some(near) if hello => fast::plain_get(&input, total)
                    .filter(|&(_, key)| plain_reads(&state, &session, &routing, key))
                    .map(|(id, key)| (near, id, key)),
                _ => None,
            };
            if let Some((near, id, key)) = plain {
                // Room for a copied value first: the copy runs with the cache's shard locked.
                out.reserve(fast::HEADER_LEN + COPY_OUT);
                let hit = near.hit_at(key, routing.version(), taken_up, |value| {
                    header(&mut out, Status::Value, id, value.len(), 0);
                    match value {
                        NearValue::Short(v) => out.put_slice(v),
                        NearValue::Shared(v) => out.put_bytes(&v),
                    }
                });
                if hit.is_some() {
                    // A near-cache hit answered from the read buffer: what admitting it and the
                    // lane would have done to the session and the stats, without building its
                    // arguments (see `plain_reads`).
                    bytes::Buf::advance(&mut input, total);
                    state.metrics.fast_requests.inc();
                    state.metrics.commands.inc();
                    session.start_command_at(taken_up);
                    session.last_command_slot = get_slot;
                    session.client.set_command(get_slot);
                    untimed.push(Timing { started: taken_up, slot: get_slot, failed: false });
                    if out.len() >= WRITE_AT {
                        // Written below the loop (the lane sent first), then the rest taken up
                        // anew.
                        break;
                    }
                    continue;
                }
            }
            let req = fast::take_request(&mut input, total);
            state.metrics.fast_requests.inc();
            let id = req.id;
            let shape = match build_args(&req, &mut args, &mut arena, limits.max_items) {
                Ok(shape) => shape,
                Err(refusal) => {
                    state.metrics.fast_errors.inc();
                    put_error(&mut out, id, &refusal.to_string());
                    continue;
                }
            };
            if !hello && shape != Shape::Hello {
                fatal = Some((id, Refusal::NoHello));
                break;
            }
            if let Shape::Cmd(protocol) = shape
                && session.protocol() != protocol
            {
                // A node encodes some replies (scripts') for the session's protocol.
                session.set_protocol(protocol);
            }
            // One clock read per read buffer: its requests were all taken up together.
            session.start_command_at(taken_up);
            let known = req.op.ok().and_then(command_of);
            let admitted = cmd::admit_as(known, &args, &mut ctx(&state, &mut session, &routing, deadline));
            let spec = match admitted {
                Ok(spec) => spec,
                Err(reply) => {
                    let meta = Meta { id, shape, started: session.last_command, slot: None, hot: None };
                    untimed.push(answer(&state, &mut out, meta, reply));
                    continue;
                }
            };
            if matches!(shape, Shape::Cmd(_))
                && let Some(name) = refused_over_cmd(spec)
            {
                state.metrics.fast_errors.inc();
                put_error(&mut out, id, &Refusal::NotOverFastPath(name).to_string());
                continue;
            }
            // Hot keys, as RESP counts them (authenticated requests; request and reply bytes).
            let hot = if state.hotkeys.enabled() && session.authenticated {
                match req.op {
                    Ok(Op::Get | Op::Set | Op::Del | Op::IncrBy | Op::Expire) => {
                        Some(Box::new((req.key.clone(), req.key.len() + req.value.len())))
                    }
                    _ => {
                        state.hotkeys.record_command(spec, &args, 0);
                        None
                    }
                }
            } else {
                None
            };
            let meta =
                Meta { id, shape, started: session.last_command, slot: session.last_command_slot, hot };
            let held = state.pause.holds(spec);
            let meta = if held || shape == Shape::Hello {
                meta
            } else {
                match lane.join(spec, &args, &mut ctx(&state, &mut session, &routing, deadline), meta) {
                    Ok(None) => continue,
                    Ok(Some((meta, reply))) => {
                        // Answered at once (a near-cache hit): once enough wait, the loop ends and
                        // they are written below it, the lane sent first so nothing waits behind
                        // the write; later requests are taken up after it.
                        untimed.push(answer(&state, &mut out, meta, reply));
                        if out.len() >= WRITE_AT {
                            break;
                        }
                        continue;
                    }
                    Err(meta) => meta,
                }
            };
            // Run as usual: what joined the lane goes first, so that ops keep their order on
            // every node queue.
            waiting +=
                send_lane(&mut lane, &ctx(&state, &mut session, &routing, deadline), &mut in_flight, track);
            if held {
                // CLIENT PAUSE: the replies so far go out, then this connection waits (reading
                // nothing more), as a RESP connection does.
                untimed.settle(&state);
                if !out.is_empty()
                    && !flush(&mut out, &mut stream, auth_deadline, &state, &session, &mut killed).await
                {
                    return;
                }
                client.set_held(true);
                tokio::select! {
                    _ = state.pause.wait(spec) => {}
                    _ = &mut killed => return,
                    _ = shutdown.changed() => return,
                }
                client.set_held(false);
                // The command's time starts now, not before the pause (its duration includes
                // the hold, as on RESP); later requests were taken up now too.
                deadline = tokio::time::Instant::now() + state.settings.deadline;
                taken_up = Instant::now();
            }
            let pending = cmd::run(spec, &args, &mut ctx(&state, &mut session, &routing, deadline));
            if let Pending::Blocking(..) = pending {
                // A blocking command outside `@blocking` (WAIT): dropping its wait withdraws it.
                drop(pending);
                state.metrics.fast_errors.inc();
                put_error(&mut out, id, &Refusal::NotOverFastPath(spec.name).to_string());
                continue;
            }
            match pending {
                Pending::Ready(reply) | Pending::Close(reply) => {
                    if shape == Shape::Hello && matches!(reply, Reply::Simple(_)) {
                        hello = true;
                        auth_deadline = None;
                    }
                    untimed.push(answer(&state, &mut out, meta, reply));
                }
                pending => {
                    // Sent in pieces, or in dependent steps: later requests must not overtake it.
                    let large = args.iter().map(|a| a.len()).sum::<usize>() > PIECE_BYTES;
                    let barrier = large || matches!(pending, Pending::Barrier(_));
                    barriers += barrier as usize;
                    waiting += 1;
                    in_flight.push(track(Job::One { meta, barrier, pending }));
                }
            }
            if out.len() >= WRITE_AT {
                untimed.settle(&state);
                if !flush(&mut out, &mut stream, auth_deadline, &state, &session, &mut killed).await {
                    return;
                }
                taken_up = Instant::now();
            }
        }
        // What joined the lane goes now, before anything is awaited.
        waiting +=
            send_lane(&mut lane, &ctx(&state, &mut session, &routing, deadline), &mut in_flight, track);
        // Every reply already in, without waiting: written together below.
        while let Some(Some(done)) = in_flight.next().now_or_never() {
            barriers -= done.barrier() as usize;
            waiting -= done.len();
            finish_all(&state, &mut out, done);
            if out.len() > state.settings.output_buffer_limit {
                tracing::warn!(peer = %session.peer, bytes = out.len(), "client output buffer limit reached; closing");
                return;
            }
        }
        untimed.settle(&state);
        if !out.is_empty()
            && !flush(&mut out, &mut stream, auth_deadline, &state, &session, &mut killed).await
        {
            return;
        }
        // Every job in flight answers at least one request, and the lane was sent above.
        debug_assert_eq!(in_flight.is_empty(), waiting == 0);
        debug_assert_eq!(lane.len(), 0);
        let round = Round { waiting, barriers, starved, eof, stopping, fatal: fatal.is_some() };
        let reading = match next(round, max_in_flight) {
            Next::TakeUp => continue,
            Next::Wait { reading } => reading,
            Next::Close => {
                if let Some((id, refusal)) = fatal.take() {
                    tracing::debug!(peer = %session.peer, error = %refusal, "fast path: closing");
                    state.metrics.fast_errors.inc();
                    put_error(&mut out, id, &refusal.to_string());
                    // Bounded on its own (the auth deadline may be what passed): the client may not read.
                    let last = flush(&mut out, &mut stream, None, &state, &session, &mut killed);
                    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), last).await;
                }
                let _ = tokio::time::timeout(std::time::Duration::from_secs(1), stream.shutdown()).await;
                return;
            }
        };
        if reading {
            if input.is_empty() && input.capacity() > KEEP_BUFFER {
                input = BytesMut::new();
            }
            if input.capacity() - input.len() < READ_CHUNK / 2 {
                if !buffered.reserve(input.len(), input.capacity(), READ_CHUNK) {
                    state.metrics.buffer_refusals.inc();
                    fatal = Some((0, Refusal::BudgetExhausted));
                    continue;
                }
                input.reserve(READ_CHUNK);
            }
            buffered.set(input.capacity());
        }
        tokio::select! {
            biased;
            _ = &mut killed => return,
            _ = expiry(auth_deadline) => {
                state.metrics.auth_timeouts.inc();
                tracing::info!(peer = %session.peer, "fast path: no HELLO within the auth timeout; closing");
                fatal = Some((0, Refusal::AuthTimeout));
                // In-flight HELLOs are not waited for: the time is up.
                in_flight.clear();
                barriers = 0;
                waiting = 0;
            }
            done = in_flight.next(), if !in_flight.is_empty() => {
                if let Some(done) = done {
                    barriers -= done.barrier() as usize;
                    waiting -= done.len();
                    finish_all(&state, &mut out, done);
                }
            }
            read = stream.read_buf(&mut input), if reading => match read {
                Ok(0) | Err(_) => eof = true,
                Ok(_) => {}
            },
            changed = shutdown.changed(), if !stopping => {
                if changed.is_err() || *shutdown.borrow() {
                    stopping = true;
                }
            }
        }
    }
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

/// The requests in flight. When the connection ends with some still running (CLIENT KILL, a
/// failed write, the output limit), they are finished in a task of their own and their replies
/// dropped: a command of several dependent steps (a cross-node MSETNX or script, a value sent in
/// pieces) cut off between two steps would leave its write half-applied. (RESP gets the same by
/// resolving a round's commands before it closes.) Each is bounded by the backend deadline.
struct Unfinished<F: std::future::Future + Send + 'static>(FuturesUnordered<F>)
where
    F::Output: Send;

impl<F: std::future::Future + Send + 'static> std::ops::Deref for Unfinished<F>
where
    F::Output: Send,
{
    type Target = FuturesUnordered<F>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<F: std::future::Future + Send + 'static> std::ops::DerefMut for Unfinished<F>
where
    F::Output: Send,
{
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl<F: std::future::Future + Send + 'static> Drop for Unfinished<F>
where
    F::Output: Send,
{
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let mut rest = std::mem::take(&mut self.0);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { while rest.next().await.is_some() {} });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_in_flight_when_the_connection_ends_still_finish() {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = done.clone();
        let in_flight = Unfinished(FuturesUnordered::new());
        in_flight.push(async move {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        drop(in_flight);
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(done.load(std::sync::atomic::Ordering::SeqCst), "the dropped request ran to its end");
    }

    fn req(op: Op, flags: u8, key: &[u8], value: &[u8], arg: i64) -> Request {
        let mut buf = BytesMut::new();
        fast::put_request(&mut buf, op, flags, 1, key, value, arg);
        let limits = Limits { authenticated: true, max_bulk: 1 << 20, max_items: 100 };
        fast::decode_request(&mut buf, &limits).unwrap().unwrap()
    }

    fn built(r: &Request) -> Result<(Shape, Vec<String>), Refusal> {
        let (mut args, mut arena) = (Vec::new(), BytesMut::new());
        let shape = build_args(r, &mut args, &mut arena, 100)?;
        Ok((shape, args.iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect()))
    }

    #[test]
    fn ops_become_the_arguments_resp_would_carry() {
        let set = req(Op::Set, set_flags::NX | set_flags::GET, b"k", b"v", 1500);
        assert_eq!(
            built(&set).unwrap(),
            (
                Shape::Typed,
                vec!["SET", "k", "v", "PX", "1500", "NX", "GET"].into_iter().map(String::from).collect()
            )
        );
        let hello = req(Op::Hello, 0, b"", b"pw", 0);
        assert_eq!(built(&hello).unwrap().1, vec!["AUTH", "default", "pw"]);
        assert_eq!(built(&req(Op::IncrBy, 0, b"n", b"", -3)).unwrap().1, vec!["INCRBY", "n", "-3"]);
        assert_eq!(built(&req(Op::Expire, 0, b"n", b"", 10)).unwrap().1, vec!["PEXPIRE", "n", "10"]);
        let mut items = BytesMut::new();
        fast::put_items(&mut items, &[&b"HSET"[..], b"h", b"f", b"v"]);
        let cmd = req(Op::Cmd, fast::cmd_flags::RESP3, b"", &items, 4);
        assert_eq!(
            built(&cmd).unwrap(),
            (
                Shape::Cmd(Protocol::Resp3),
                vec!["HSET", "h", "f", "v"].into_iter().map(String::from).collect()
            )
        );
    }

    #[test]
    fn a_typed_op_is_admitted_as_the_command_its_arguments_name() {
        let mut items = BytesMut::new();
        fast::put_items(&mut items, &[&b"k"[..], b"v"]);
        for (op, value, arg) in [
            (Op::Hello, &b"pw"[..], 0),
            (Op::Ping, b"", 0),
            (Op::Get, b"", 0),
            (Op::Set, b"v", 0),
            (Op::Del, b"", 0),
            (Op::IncrBy, b"", 1),
            (Op::Expire, b"", 1),
            (Op::MGet, &items[..], 2),
            (Op::MSet, &items[..], 2),
        ] {
            let key: &[u8] = if op.needs_key() || op == Op::Hello { b"k" } else { b"" };
            let (_, args) = built(&req(op, 0, key, value, arg)).unwrap();
            let named = cmd::lookup(args[0].as_bytes()).unwrap();
            let known = command_of(op).unwrap_or_else(|| panic!("{op:?} has no command"));
            assert_eq!(known.name, named.name, "{op:?}");
            assert!(known.subcommands.is_empty(), "{op:?}: admit_as skips subcommand lookup");
        }
        assert!(command_of(Op::Cmd).is_none());
    }

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

    #[test]
    fn malformed_requests_are_refused_by_id() {
        assert_eq!(built(&req(Op::Get, 0, b"", b"", 0)), Err(Refusal::Frame(FrameError::MissingKey)));
        assert_eq!(built(&req(Op::Get, 0, b"k", b"x", 0)), Err(Refusal::UnexpectedValue));
        assert_eq!(built(&req(Op::Del, 0, b"k", b"", 1)), Err(Refusal::UnexpectedArg));
        assert_eq!(built(&req(Op::Ping, 0, b"k", b"", 0)), Err(Refusal::UnexpectedKey));
        assert_eq!(built(&req(Op::Get, 0x80, b"k", b"", 0)), Err(Refusal::Flags(0x80)));
        assert_eq!(built(&req(Op::Cmd, 0, b"", b"", 0)), Err(Refusal::EmptyCommand));
        assert_eq!(
            built(&req(Op::MGet, 0, b"", b"\x01\0\0\0", 1)),
            Err(Refusal::Frame(FrameError::BadItems))
        );
        let mut unknown = req(Op::Ping, 0, b"", b"", 0);
        unknown.op = Err(0x7f);
        assert_eq!(built(&unknown).unwrap_err().to_string(), "ERR Protocol error: unknown op 0x7f");
    }

    #[test]
    fn replies_map_to_statuses() {
        let decode = |out: Out| {
            let mut buf = BytesMut::from(&out.into_bytes()[..]);
            fast::decode_reply(&mut buf, 1 << 20).unwrap().unwrap()
        };
        let mut out = Out::new();
        put_reply(&mut out, 7, Shape::Typed, Reply::Array(vec![Reply::bulk("a"), Reply::Nil]));
        let r = decode(out);
        assert_eq!((r.status, r.id, r.int), (Status::Array, 7, 2));
        assert_eq!(r.items().unwrap(), vec![Some(Bytes::from("a")), None]);
        let mut out = Out::new();
        assert!(put_reply(&mut out, 8, Shape::Typed, Reply::error("WRONGTYPE x")));
        let r = decode(out);
        assert_eq!((r.status, &r.body[..]), (Status::Err, &b"WRONGTYPE x"[..]));
        let mut out = Out::new();
        put_reply(&mut out, 9, Shape::Cmd(Protocol::Resp2), Reply::Int(3));
        let r = decode(out);
        assert_eq!((r.status, &r.body[..]), (Status::Resp, &b":3\r\n"[..]));
        let big = Bytes::from(vec![b'x'; 100_000]);
        let mut out = Out::new();
        put_reply(&mut out, 10, Shape::Typed, Reply::Bulk(big.clone()));
        let r = decode(out);
        assert_eq!((r.status, r.body.len()), (Status::Value, big.len()));
    }
}
