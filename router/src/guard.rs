//! The connection guard: what every client connection (RESP and the binary fast path; an HTTP
//! request takes its budget share) is held to, whatever it speaks, in one place:
//!
//! - the kill switch: CLIENT KILL (or a pub/sub client past its output limit) wakes the
//!   connection wherever it waits (reading, writing, held by a pause) and it closes;
//! - the auth deadline: with a password required, a client that has not authenticated within
//!   `--auth-timeout-ms` of connecting is disconnected, whatever it sends meanwhile; the clock
//!   also covers writing to a client that does not read its replies;
//! - the buffer budget: a read buffer growing past a small allowance draws from the
//!   process-wide [`crate::state::BufferBudget`], and a client it cannot cover is told so and
//!   disconnected; and the output limit (`--output-buffer-limit`);
//! - shutdown: the router stopping.
//!
//! The protocols keep only their framing: they ask the guard to write ([`Guard::flush`]), to
//! wait ([`Guard::hold`], [`Guard::wait`]) and to close ([`Guard::close_with`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use crate::clients::ClientHandle;
use crate::resp::Out;
use crate::session::Session;
use crate::state::{BufferHold, QUERY_BUFFER_ALLOWANCE, RouterState};

/// What ended a wait other than the thing waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// CLIENT KILL.
    Killed,
    /// The router is shutting down.
    Shutdown,
    /// The client did not authenticate in time (counted; the caller says why and closes).
    AuthTimeout,
}

/// One connection's guard (see the module docs).
pub struct Guard<'s> {
    pub state: &'s Arc<RouterState>,
    pub client: Arc<ClientHandle>,
    /// The connection's one waiter on its kill switch: registering a new one at every read would
    /// take the switch's lock twice per round.
    killed: Pin<Box<dyn Future<Output = ()> + Send>>,
    auth_deadline: Option<tokio::time::Instant>,
    shutdown: watch::Receiver<bool>,
    /// This connection's read buffer's share of the budget.
    pub buffered: BufferHold<'s>,
}

impl<'s> Guard<'s> {
    pub fn new(state: &'s Arc<RouterState>, session: &Session, shutdown: watch::Receiver<bool>) -> Guard<'s> {
        let client = session.client.clone();
        let waiter = client.clone();
        Guard {
            state,
            client,
            killed: Box::pin(async move { waiter.killed().await }),
            auth_deadline: None,
            shutdown,
            buffered: state.buffers.hold(QUERY_BUFFER_ALLOWANCE),
        }
    }

    #[inline]
    pub fn is_killed(&self) -> bool {
        self.client.is_killed()
    }

    /// Tracks the session's authentication: while it must authenticate, the clock runs from the
    /// connection on (the first call), whatever the client sends meanwhile; once it has, none.
    #[inline]
    pub fn note_auth(&mut self, authenticated: bool) {
        if authenticated {
            self.auth_deadline = None;
        } else if let Some(limit) = self.state.settings.auth_timeout {
            self.auth_deadline.get_or_insert_with(|| tokio::time::Instant::now() + limit);
        }
    }

    /// Waits for `wait`, unless the connection is killed, the router shuts down or the auth
    /// deadline passes first.
    pub async fn hold<R>(&mut self, wait: impl Future<Output = R>) -> Result<R, Ended> {
        let auth_expired = expiry(self.auth_deadline);
        tokio::select! {
            r = wait => Ok(r),
            _ = &mut self.killed => Err(Ended::Killed),
            _ = self.shutdown.changed() => Err(Ended::Shutdown),
            _ = auth_expired => {
                self.state.metrics.auth_timeouts.inc();
                Err(Ended::AuthTimeout)
            }
        }
    }

    /// [`hold`](Self::hold) with the kill switch and the auth deadline looked at first (the
    /// client's own bytes after them): a client that keeps sending is still closed.
    pub async fn wait<R>(&mut self, wait: impl Future<Output = R>) -> Result<R, Ended> {
        let auth_expired = expiry(self.auth_deadline);
        tokio::select! {
            biased;
            _ = auth_expired => {
                self.state.metrics.auth_timeouts.inc();
                Err(Ended::AuthTimeout)
            }
            _ = &mut self.killed => Err(Ended::Killed),
            r = wait => Ok(r),
            _ = self.shutdown.changed() => Err(Ended::Shutdown),
        }
    }

    /// The kill switch's waiter and the shutdown signal, for a wait of a protocol's own that
    /// has to tell them apart (the fast path answers what is in flight before it closes).
    pub fn signals(&mut self) -> (&mut Pin<Box<dyn Future<Output = ()> + Send>>, &mut watch::Receiver<bool>) {
        (&mut self.killed, &mut self.shutdown)
    }

    /// The auth deadline's expiry (never, without one).
    pub fn auth_expiry(&self) -> impl Future<Output = ()> + use<> {
        expiry(self.auth_deadline)
    }

    /// Writes what `out` holds; false when the connection must close (the write failed, the
    /// client was killed meanwhile (CLIENT KILL, or a pub/sub client past its output limit that
    /// does not read), or a client that has not authenticated ran out of time while not reading
    /// its replies).
    pub async fn flush<S: AsyncWrite + Unpin>(
        &mut self,
        out: &mut Out,
        stream: &mut S,
        session: &Session,
    ) -> bool {
        let deadline = self.auth_deadline;
        self.flush_until(out, stream, session, deadline).await
    }

    /// [`flush`](Self::flush) bounded by `deadline` instead of the auth deadline.
    pub async fn flush_until<S: AsyncWrite + Unpin>(
        &mut self,
        out: &mut Out,
        stream: &mut S,
        session: &Session,
        deadline: Option<tokio::time::Instant>,
    ) -> bool {
        let killed = &mut self.killed;
        let write = async {
            // Biased: no random draw per write; the kill switch is looked at whenever the
            // write has to wait.
            tokio::select! {
                biased;
                r = out.write_to(stream) => Some(r),
                _ = killed => None,
            }
        };
        let written = match deadline {
            Some(at) => tokio::time::timeout_at(at, write).await.ok(),
            None => Some(write.await),
        };
        match written {
            Some(Some(Ok(()))) => true,
            Some(Some(Err(_)) | None) => false,
            None => {
                self.state.metrics.auth_timeouts.inc();
                tracing::info!(peer = %session.peer, "no AUTH within the auth timeout (replies unread); closing");
                false
            }
        }
    }

    /// Whether `bytes` of replies waiting to be written are within the output limit (else the
    /// connection must close; logged).
    #[inline]
    pub fn output_ok(&self, bytes: usize, session: &Session) -> bool {
        if bytes > self.state.settings.output_buffer_limit {
            tracing::warn!(peer = %session.peer, bytes, "client output buffer limit reached; closing");
            return false;
        }
        true
    }

    /// Makes the read buffer's share cover `len` bytes in `capacity` growing by `additional`;
    /// false (counted) when the process-wide budget cannot.
    pub fn reserve(&mut self, len: usize, capacity: usize, additional: usize) -> bool {
        if self.buffered.reserve(len, capacity, additional) {
            return true;
        }
        self.state.metrics.buffer_refusals.inc();
        false
    }
}

/// Completes at `deadline`; never without one.
pub async fn expiry(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Tells the client why it is being disconnected (bounded: it may not be reading) and closes.
pub async fn close_with<S: AsyncWrite + Unpin>(stream: &mut S, message: &[u8]) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(message).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

/// Why a RESP client is disconnected when the budget cannot cover its read buffer.
pub const BUDGET_EXHAUSTED: &str = "ERR request buffer budget exhausted: the router holds too much unprocessed \
request data from all clients (--request-buffer-budget); closing the connection, try again later";
/// Why a RESP client is disconnected at its auth deadline.
pub const AUTH_TIMEOUT: &str =
    "ERR authentication timeout: no successful AUTH within --auth-timeout-ms; closing the connection";
