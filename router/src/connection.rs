//! One RESP client connection (TCP or Unix socket): read, parse, dispatch, reply.
//!
//! Each round parses every complete request in the read buffer and dispatches them all before
//! awaiting any reply, so a pipeline's ops reach the node queues together and share batches.
//! Replies are then awaited and encoded in request order and written with vectored writes (a
//! large value is written where it lies, not copied), as soon as a few hundred KiB are ready, so
//! a long pipeline of large replies flows out while later ones arrive. The connection reads again
//! only after replying (back-pressure: a client that does not read its replies stops being read
//! from). A round dispatches fewer commands when this client's replies have been large, so the
//! replies one connection can have in flight stay near [`ROUND_REPLY_BUDGET`].
//!
//! Limits: unparsed input per client (1 MiB before AUTH), reply bytes per round (the output
//! buffer limit), and commands per round. A read buffer growing past a small allowance draws from
//! the process-wide budget ([`crate::state::BufferBudget`]); a client it cannot cover is told so
//! and disconnected. A client that must authenticate and has not within `--auth-timeout-ms` is
//! disconnected. A protocol error is answered with `-ERR Protocol error:
//! ...` after the replies of the commands before it, then the connection closes. A request that
//! starts with `POST` or `Host:` is an HTTP client (or a cross-protocol attack) and is dropped
//! without a reply, as Redis does.
//!
//! A connection whose first byte is 0xF5 speaks the binary fast path instead: [`crate::fast`].
//!
//! CLIENT KILL: the connection's [`crate::clients::ClientHandle`] wakes it wherever it waits
//! (reading, or held by a pause) and it closes; a connection busy with a round closes after it.
//! CLIENT PAUSE: a command the pause covers is held (after the replies of the commands before
//! it are written), and the connection reads nothing more until the pause lets it run.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use shoal_wire::pieces::PIECE_BYTES;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use crate::cmd::lane::{Lane, LaneCall};
use crate::cmd::{self, CommandSpec, Ctx, Pending};
use crate::resp::{Out, Protocol, Reply, RequestParser};
use crate::session::Session;
use crate::state::{QUERY_BUFFER_ALLOWANCE, RouterState};

/// Commands dispatched per round before replies are written.
const MAX_COMMANDS_PER_ROUND: usize = 1024;
/// About how many reply bytes one round may have in flight, judged by this connection's largest
/// recent replies (a first round of unknown size may overshoot it once).
const ROUND_REPLY_BUDGET: usize = 64 << 20;
/// Encoded replies are written once this many bytes are ready.
const WRITE_AT: usize = 256 * 1024;
const READ_CHUNK: usize = 16 * 1024;
/// Buffers larger than this are released after use instead of kept for the next round.
const KEEP_BUFFER: usize = 256 * 1024;

pub async fn serve<S>(
    mut stream: S,
    state: Arc<RouterState>,
    mut session: Session,
    mut shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut input = BytesMut::with_capacity(READ_CHUNK);
    let mut output = Out::new();
    // The largest reply of the last round: sizes the next round (see ROUND_REPLY_BUDGET).
    let mut reply_size = 0usize;
    let mut parser = RequestParser::new();
    let mut routing = state.backend.routing();
    // Each command's reply to come (`None`: in a lane, not in yet), with what its stats and the
    // slow log need: when it started, its stats slot and its arguments.
    type InFlight = (Option<Pending>, Protocol, Instant, Option<usize>, Vec<bytes::Bytes>);
    let mut pending: Vec<InFlight> = Vec::new();
    // One-key commands joined to be sent together (`cmd::lane`; tags: positions in `pending`),
    // and the lanes sent this round, in order.
    let mut lane: Lane<usize> = Lane::default();
    let mut lanes: VecDeque<LaneCall<usize>> = VecDeque::new();
    let mut buffered = state.buffers.hold(QUERY_BUFFER_ALLOWANCE);
    let mut auth_deadline: Option<tokio::time::Instant> = None;
    let client = session.client.clone();
    let _listed = state.clients.register(client.clone());
    let _unwatch =
        crate::cmd::transaction::ReleaseOnDrop { state: state.clone(), list: session.watched.clone() };
    // A command CLIENT PAUSE holds, admitted and waiting to run.
    let mut held: Option<(&'static CommandSpec, Vec<bytes::Bytes>)> = None;
    // One waiter on the kill switch for the connection's life: registering a new one at every
    // read would take the switch's lock twice per round.
    let killed = client.killed();
    tokio::pin!(killed);
    // Until the first bytes arrive: whether they are RESP or the binary fast path.
    let mut negotiated = false;
    loop {
        if client.is_killed() {
            return;
        }
        if let Some((spec, _)) = &held {
            client.set_held(true);
            let auth_expired = expiry(auth_deadline);
            tokio::select! {
                _ = state.pause.wait(spec) => {}
                _ = &mut killed => return,
                _ = shutdown.changed() => return,
                _ = auth_expired => {
                    state.metrics.auth_timeouts.inc();
                    close_with(&mut stream, AUTH_TIMEOUT).await;
                    return;
                }
            }
            client.set_held(false);
        }
        // Pub/sub messages that arrived before this round's commands are written before their
        // replies (a message queued before an UNSUBSCRIBE goes out before its reply).
        if let Some(sub) = session.pushes()
            && !write_pushes(sub, &mut output, &mut stream, auth_deadline, &state, &session, &mut killed)
                .await
        {
            return;
        }
        if routing.topology.version != state.backend.version() {
            routing = state.backend.routing();
        }
        let deadline = tokio::time::Instant::now() + state.settings.deadline;
        let mut close = false;
        let mut more_input = false;
        let round_limit = (ROUND_REPLY_BUDGET / reply_size.max(1)).clamp(1, MAX_COMMANDS_PER_ROUND);
        let mut large_request = false;
        while pending.len() < round_limit {
            let limits = state.settings.limits(session.authenticated);
            let next = match held.take() {
                Some((spec, args)) => Ok(Some((Some(spec), args))),
                None => parser.next(&mut input, &limits).map(|r| r.map(|args| (None, args))),
            };
            match next {
                Ok(Some((admitted, args))) => {
                    if admitted.is_none() && is_http(&args[0]) {
                        tracing::warn!(peer = %session.peer, "possible cross-protocol attack: HTTP request on the RESP port; closing");
                        return;
                    }
                    session.start_command();
                    let mut ctx = Ctx {
                        state: &state,
                        session: &mut session,
                        routing: &routing,
                        deadline,
                        read_from: crate::state::ReadFrom::Primary,
                    };
                    let reply = match admitted.map_or_else(|| cmd::admit(&args, &mut ctx), Ok) {
                        Ok(spec) if admitted.is_none() && state.pause.holds(spec) => {
                            // Reply to the commands before it, then wait (top of the loop).
                            held = Some((spec, args));
                            more_input = true;
                            break;
                        }
                        Ok(spec) => match lane.join(spec, &args, &mut ctx, pending.len()) {
                            Ok(None) => None,
                            Ok(Some((_, reply))) => Some(reply.into()),
                            Err(_) => {
                                // What joined goes first: ops keep their order on every node.
                                lanes.extend(lane.send(&ctx));
                                Some(cmd::run(spec, &args, &mut ctx))
                            }
                        },
                        Err(refused) => Some(refused.into()),
                    };
                    // A command this large sends an op in pieces, over several batches: later
                    // commands wait for it, so none of their ops can overtake it.
                    let large = args.iter().map(|a| a.len()).sum::<usize>() > PIECE_BYTES;
                    large_request |= large;
                    let barrier = large || matches!(reply, Some(Pending::Barrier(_) | Pending::Blocking(..)));
                    close = matches!(reply, Some(Pending::Close(_)));
                    let slot = session.last_command_slot;
                    pending.push((reply, session.protocol(), session.last_command, slot, args));
                    if close {
                        break;
                    }
                    if barrier {
                        // Later commands must not overtake this one's steps: reply first.
                        more_input = true;
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    state.metrics.protocol_errors.inc();
                    tracing::debug!(peer = %session.peer, error = %e, "protocol error; closing");
                    pending.push((
                        Some(Reply::error_fmt(format!("ERR {e}")).into()),
                        session.protocol(),
                        Instant::now(),
                        None,
                        Vec::new(),
                    ));
                    close = true;
                    break;
                }
            }
        }
        if pending.len() >= round_limit {
            more_input = true;
        }
        if !lane.is_empty() {
            let ctx = Ctx {
                state: &state,
                session: &mut session,
                routing: &routing,
                deadline,
                read_from: crate::state::ReadFrom::Primary,
            };
            lanes.extend(lane.send(&ctx));
        }
        // Not authenticated (a password is required): the clock runs from the connection (or
        // RESET) on, whatever the client sends meanwhile, and covers writing to a client that
        // does not read its replies as well as waiting for its next request.
        if session.authenticated {
            auth_deadline = None;
        } else if let Some(limit) = state.settings.auth_timeout {
            auth_deadline.get_or_insert_with(|| tokio::time::Instant::now() + limit);
        }
        reply_size = 0;
        for i in 0..pending.len() {
            if pending[i].0.is_none() {
                // The first command of the next lane: all of its replies are in together.
                let call = lanes.pop_front().expect("a lane for every joined command");
                for (at, reply) in call.wait().await {
                    pending[at].0 = Some(Pending::Ready(reply));
                }
            }
            let entry = &mut pending[i];
            let reply = entry.0.take().expect("filled above");
            let (protocol, started, slot, args) = (entry.1, entry.2, entry.3, std::mem::take(&mut entry.4));
            let reply = match reply {
                Pending::Blocking(wait, on_unblock) => {
                    // The replies before it go out first: the client may be waiting for them.
                    if !output.is_empty()
                        && !flush(&mut output, &mut stream, auth_deadline, &state, &session, &mut killed)
                            .await
                    {
                        return;
                    }
                    client.set_blocked(true);
                    let outcome = blocked_wait(
                        wait,
                        on_unblock,
                        &client,
                        &mut stream,
                        &mut input,
                        &mut killed,
                        &mut shutdown,
                    )
                    .await;
                    client.set_blocked(false);
                    match outcome {
                        Some(reply) => reply,
                        // Gone, killed or shutting down: dropping the wait withdraws it.
                        None => return,
                    }
                }
                other => other.resolve().await,
            };
            let took = started.elapsed();
            state.metrics.command_seconds.observe(took.as_secs_f64());
            if let Some(slot) = slot {
                state.stats.record(slot, took, reply.is_error());
                state.stats.maybe_log(took, &args, || {
                    let name = session.name().map(|n| String::from_utf8_lossy(&n).into_owned());
                    (state.clock.now_ms() / 1000, session.peer.to_string(), name.unwrap_or_default())
                });
            }
            let before = output.len();
            reply.encode(protocol, &mut output);
            reply_size = reply_size.max(output.len() - before);
            // Off (the default), hot keys cost this one branch.
            if state.hotkeys.enabled()
                && session.authenticated
                && let Some(spec) = slot.and_then(crate::stats::spec_at)
            {
                state.hotkeys.record_command(spec, &args, output.len() - before);
            }
            if output.len() > state.settings.output_buffer_limit {
                tracing::warn!(peer = %session.peer, bytes = output.len(), "client output buffer limit reached; closing");
                return;
            }
            if output.len() >= WRITE_AT
                && !flush(&mut output, &mut stream, auth_deadline, &state, &session, &mut killed).await
            {
                return;
            }
        }
        pending.clear();
        if !output.is_empty()
            && !flush(&mut output, &mut stream, auth_deadline, &state, &session, &mut killed).await
        {
            return;
        }
        // A large request leaves a large read buffer behind: let it go rather than keep it for
        // an idle connection.
        if large_request && input.is_empty() {
            input = BytesMut::with_capacity(READ_CHUNK);
        }
        if close {
            let _ = stream.flush().await;
            let _ = stream.shutdown().await;
            return;
        }
        if more_input {
            continue;
        }
        if input.len() > state.settings.query_buffer_limit(session.authenticated) {
            tracing::warn!(peer = %session.peer, bytes = input.len(), "client query buffer limit reached; closing");
            return;
        }
        // Room for the next read: the rest of a large argument when one is being received
        // (capped, so a length header alone never allocates), else a normal chunk.
        let want =
            parser.wanted().map_or(READ_CHUNK, |w| w.saturating_sub(input.len()).clamp(READ_CHUNK, 1 << 20));
        if input.capacity() - input.len() < want / 2 {
            if !buffered.reserve(input.len(), input.capacity(), want) {
                state.metrics.buffer_refusals.inc();
                tracing::warn!(peer = %session.peer, bytes = input.len(), "request buffer budget exhausted; closing");
                close_with(&mut stream, BUDGET_EXHAUSTED).await;
                return;
            }
            input.reserve(want);
        }
        buffered.set(input.capacity());
        let auth_expired = expiry(auth_deadline);
        tokio::select! {
            biased;
            _ = auth_expired => {
                state.metrics.auth_timeouts.inc();
                tracing::info!(peer = %session.peer, "no AUTH within the auth timeout; closing");
                close_with(&mut stream, AUTH_TIMEOUT).await;
                return;
            }
            // CLIENT KILL: before the read, so that a client that keeps sending is closed too.
            _ = &mut killed => return,
            read = stream.read_buf(&mut input) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = shutdown.changed() => {
                // Idle at a request boundary (or mid-request, abandoned): close.
                return;
            }
            // A pub/sub message: written at the top of the next round.
            _ = pushed(&session) => {}
        }
        if !negotiated && !input.is_empty() {
            negotiated = true;
            // 0xF5 cannot start a RESP request (nor an inline command): this client speaks the
            // fast path (docs/fast-path.md), on a connection admitted like any other.
            if input[0] == shoal_wire::fast::MAGIC[0] {
                drop(buffered);
                return crate::fast::serve(stream, input, state.clone(), session, auth_deadline, shutdown)
                    .await;
            }
        }
        if input.is_empty() && input.capacity() > KEEP_BUFFER {
            input = BytesMut::with_capacity(READ_CHUNK);
            buffered.set(input.capacity());
        }
    }
}

const BUDGET_EXHAUSTED: &[u8] =
    b"-ERR request buffer budget exhausted: the router holds too much unprocessed \
request data from all clients (--request-buffer-budget); closing the connection, try again later\r\n";
const AUTH_TIMEOUT: &[u8] =
    b"-ERR authentication timeout: no successful AUTH within --auth-timeout-ms; closing the connection\r\n";

/// Awaits a blocking command's reply while reading from the client: further requests are kept
/// in `input` (processed after the reply, in order), and a client that closes the connection,
/// a CLIENT KILL or a shutdown end the wait (`None`). A client that keeps sending while blocked
/// is bounded by the query buffer limit like any other.
async fn blocked_wait<S, K>(
    wait: cmd::BoxReply,
    on_unblock: Reply,
    client: &crate::clients::ClientHandle,
    stream: &mut S,
    input: &mut BytesMut,
    killed: &mut std::pin::Pin<&mut K>,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Reply>
where
    S: AsyncRead + Unpin,
    K: std::future::Future<Output = ()>,
{
    tokio::pin!(wait);
    let mut reading = true;
    loop {
        if input.capacity() - input.len() < READ_CHUNK {
            input.reserve(READ_CHUNK);
        }
        tokio::select! {
            reply = &mut wait => return Some(reply),
            // CLIENT UNBLOCK: dropping the wait withdraws it from the node.
            error = client.unblocked() => {
                return Some(if error { Reply::error("UNBLOCKED client unblocked via CLIENT UNBLOCK") } else { on_unblock });
            }
            _ = killed.as_mut() => return None,
            _ = shutdown.changed() => return None,
            read = stream.read_buf(input), if reading => match read {
                Ok(0) | Err(_) => return None,
                // Enough buffered: stop reading until the reply is in (the limit applies later).
                Ok(_) if input.len() > MAX_READ_WHILE_BLOCKED => reading = false,
                Ok(_) => {}
            },
        }
    }
}

/// How much a blocked client may send before the router stops reading it until its reply.
const MAX_READ_WHILE_BLOCKED: usize = 1 << 20;

/// Completes at `deadline`; never without one.
pub(crate) async fn expiry(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Tells the client why it is being disconnected (bounded: it may not be reading) and closes.
async fn close_with<S: AsyncWrite + Unpin>(stream: &mut S, message: &[u8]) {
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
        let _ = stream.write_all(message).await;
        let _ = stream.shutdown().await;
    })
    .await;
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

/// Writes the client's queued pub/sub messages (a few hundred KiB at a time, at most
/// [`PUSH_ROUNDS`] times, so a flood of messages cannot keep the client's own commands, an
/// UNSUBSCRIBE say, from being read); false when the connection must close.
async fn write_pushes<S: AsyncWrite + Unpin, K: std::future::Future<Output = ()>>(
    sub: &crate::pubsub::Subscriber,
    output: &mut Out,
    stream: &mut S,
    auth_deadline: Option<tokio::time::Instant>,
    state: &RouterState,
    session: &Session,
    killed: &mut std::pin::Pin<&mut K>,
) -> bool {
    for _ in 0..PUSH_ROUNDS {
        let batch = sub.take(WRITE_AT, &state.pubsub.limits);
        if batch.is_empty() {
            return true;
        }
        let protocol = session.protocol();
        for m in &batch {
            m.encode(protocol, output);
        }
        if !flush(output, stream, auth_deadline, state, session, killed).await {
            return false;
        }
    }
    // More may be waiting: the next idle wait returns at once for them (see `pushed`).
    true
}

/// Batches of queued pub/sub messages written before a connection reads its next commands.
const PUSH_ROUNDS: usize = 8;

/// Writes what `output` holds; false when the connection must close (the write failed, the
/// client was killed meanwhile (CLIENT KILL, or a pub/sub client past its output limit that
/// does not read), or a client that has not authenticated ran out of time while not reading its
/// replies). `killed` is the connection's one waiter on its kill switch (see `serve`).
pub(crate) async fn flush<S: AsyncWrite + Unpin, K: std::future::Future<Output = ()>>(
    output: &mut Out,
    stream: &mut S,
    auth_deadline: Option<tokio::time::Instant>,
    state: &RouterState,
    session: &Session,
    killed: &mut std::pin::Pin<&mut K>,
) -> bool {
    let write = async {
        tokio::select! {
            r = output.write_to(stream) => Some(r),
            _ = killed.as_mut() => None,
        }
    };
    let written = match auth_deadline {
        Some(at) => tokio::time::timeout_at(at, write).await.ok(),
        None => Some(write.await),
    };
    match written {
        Some(Some(Ok(()))) => true,
        Some(Some(Err(_)) | None) => false,
        None => {
            state.metrics.auth_timeouts.inc();
            tracing::info!(peer = %session.peer, "no AUTH within the auth timeout (replies unread); closing");
            false
        }
    }
}

/// An HTTP request line or header where a RESP command should be (`POST /...`, `Host: ...`).
fn is_http(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"post") || name.eq_ignore_ascii_case(b"host:")
}
