//! One RESP client connection (TCP or Unix socket): read, parse, dispatch, reply.
//!
//! Each round parses every complete request in the read buffer and dispatches them all before
//! awaiting any reply, so a pipeline's ops reach the node queues together and share batches.
//! Replies are then awaited and encoded in request order, and written with one `write_all`.
//! The connection reads again only after replying (back-pressure: a client that does not read
//! its replies stops being read from).
//!
//! Limits: unparsed input per client (1 MiB before AUTH), reply bytes per round (the output
//! buffer limit), and commands per round. A protocol error is answered with `-ERR Protocol error:
//! ...` after the replies of the commands before it, then the connection closes. A request that
//! starts with `POST` or `Host:` is an HTTP client (or a cross-protocol attack) and is dropped
//! without a reply, as Redis does.

use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use crate::cmd::{self, Ctx, Pending};
use crate::resp::{Protocol, Reply, RequestParser};
use crate::session::Session;
use crate::state::RouterState;

/// Commands dispatched per round before replies are written.
const MAX_COMMANDS_PER_ROUND: usize = 1024;
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
    let mut output = BytesMut::with_capacity(READ_CHUNK);
    let mut parser = RequestParser::new();
    let mut routing = state.cluster.routing();
    let mut pending: Vec<(Pending, Protocol, Instant)> = Vec::new();
    loop {
        if routing.topology.version != state.cluster.version() {
            routing = state.cluster.routing();
        }
        let deadline = tokio::time::Instant::now() + state.settings.deadline;
        let mut close = false;
        let mut more_input = false;
        while pending.len() < MAX_COMMANDS_PER_ROUND {
            let limits = state.settings.limits(session.authenticated);
            match parser.next(&mut input, &limits) {
                Ok(Some(args)) => {
                    if is_http(&args[0]) {
                        tracing::warn!(peer = %session.peer, "possible cross-protocol attack: HTTP request on the RESP port; closing");
                        return;
                    }
                    session.last_command = Instant::now();
                    let mut ctx = Ctx { state: &state, session: &mut session, routing: &routing, deadline };
                    let reply = cmd::dispatch(&args, &mut ctx);
                    let barrier = matches!(reply, Pending::Barrier(_));
                    close = matches!(reply, Pending::Close(_));
                    pending.push((reply, session.protocol, Instant::now()));
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
                        Reply::error_fmt(format!("ERR {e}")).into(),
                        session.protocol,
                        Instant::now(),
                    ));
                    close = true;
                    break;
                }
            }
        }
        if pending.len() >= MAX_COMMANDS_PER_ROUND {
            more_input = true;
        }
        for (reply, protocol, started) in pending.drain(..) {
            let reply = reply.resolve(&state).await;
            state.metrics.command_seconds.observe(started.elapsed().as_secs_f64());
            reply.encode(protocol, &mut output);
            if output.len() > state.settings.output_buffer_limit {
                tracing::warn!(peer = %session.peer, bytes = output.len(), "client output buffer limit reached; closing");
                return;
            }
        }
        if !output.is_empty() {
            if stream.write_all(&output).await.is_err() {
                return;
            }
            output.clear();
            if output.capacity() > KEEP_BUFFER {
                output = BytesMut::with_capacity(READ_CHUNK);
            }
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
            input.reserve(want);
        }
        tokio::select! {
            read = stream.read_buf(&mut input) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = shutdown.changed() => {
                // Idle at a request boundary (or mid-request, abandoned): close.
                return;
            }
        }
        if input.is_empty() && input.capacity() > KEEP_BUFFER {
            input = BytesMut::with_capacity(READ_CHUNK);
        }
    }
}

/// An HTTP request line or header where a RESP command should be (`POST /...`, `Host: ...`).
fn is_http(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"post") || name.eq_ignore_ascii_case(b"host:")
}
