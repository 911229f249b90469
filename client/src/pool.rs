//! The pool: N connections, each kept alive by a supervisor task that reconnects with backoff.
//!
//! Each slot publishes its state in a `watch` channel: `Up(conn)` while a connection serves,
//! `Connecting` while its supervisor redials. A request takes the least-loaded live connection
//! (scanning from a rotating start, so equal loads spread round-robin); if none is live it waits
//! for one slot to come back, within the request's own deadline, and fails with
//! [`Error::Timeout`] if it does not (or with the last dial's error when that error is one that
//! retrying will not fix: a refused password, a router without the fast path).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::conn::{Conn, Protocol, Reply};
use crate::connect::{Config, connect};
use crate::error::{Error, Result};

#[derive(Clone)]
enum SlotState {
    Up(Arc<Conn>),
    Connecting { last_error: Option<Error> },
}

struct Inner {
    config: Config,
    slots: Vec<watch::Receiver<SlotState>>,
    next: AtomicUsize,
    supervisors: Vec<JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The supervisors hold the connections; ending them closes every socket.
        for s in &self.supervisors {
            s.abort();
        }
    }
}

/// A pooled, pipelined, reconnecting client. Cheap to clone: clones share the pool, and the
/// connections close when the last clone is dropped.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

impl Client {
    /// Opens every connection of the pool now, so that a wrong address, a refused password or a
    /// router without the fast path is an error here rather than on the first request.
    pub async fn connect(config: Config) -> Result<Client> {
        let mut conns = Vec::with_capacity(config.connections);
        for _ in 0..config.connections.max(1) {
            conns.push(connect(&config).await?);
        }
        let states = conns.into_iter().map(|c| SlotState::Up(Arc::new(c))).collect();
        Ok(Client::with_states(config, states))
    }

    /// Returns at once and connects in the background (a sidecar's app may start before its
    /// router): requests wait for a connection within their deadline.
    pub fn lazy(config: Config) -> Client {
        let states =
            (0..config.connections.max(1)).map(|_| SlotState::Connecting { last_error: None }).collect();
        Client::with_states(config, states)
    }

    fn with_states(config: Config, states: Vec<SlotState>) -> Client {
        let mut slots = Vec::new();
        let mut supervisors = Vec::new();
        for state in states {
            let (tx, rx) = watch::channel(state);
            supervisors.push(tokio::spawn(supervise(config.clone(), tx)));
            slots.push(rx);
        }
        Client { inner: Arc::new(Inner { config, slots, next: AtomicUsize::new(0), supervisors }) }
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub fn protocol(&self) -> Protocol {
        self.inner.config.protocol
    }

    /// How many connections of the pool are live now.
    pub fn live_connections(&self) -> usize {
        self.inner.slots.iter().filter(|s| matches!(&*s.borrow(), SlotState::Up(c) if !c.is_closed())).count()
    }

    /// Sends an encoded request on a pooled connection and waits for its reply.
    pub(crate) async fn call(&self, frame: BytesMut) -> Result<Reply> {
        let deadline = Instant::now() + self.inner.config.timeout;
        let conn = self.pick(deadline).await?;
        debug_assert_eq!(conn.protocol(), self.protocol());
        conn.call(frame, deadline).await
    }

    async fn pick(&self, deadline: Instant) -> Result<Arc<Conn>> {
        let slots = &self.inner.slots;
        let start = self.inner.next.fetch_add(1, Ordering::Relaxed) % slots.len();
        let mut best: Option<(usize, Arc<Conn>)> = None;
        for i in 0..slots.len() {
            let SlotState::Up(c) = &*slots[(start + i) % slots.len()].borrow() else { continue };
            if c.is_closed() {
                continue;
            }
            let load = c.load();
            if best.as_ref().is_none_or(|(l, _)| load < *l) {
                best = Some((load, c.clone()));
            }
            if load == 0 {
                break;
            }
        }
        if let Some((_, c)) = best {
            return Ok(c);
        }
        // None is live: wait for one to come back.
        let mut rx = slots[start].clone();
        let up = |s: &SlotState| matches!(s, SlotState::Up(c) if !c.is_closed());
        let waited = tokio::time::timeout_at(deadline, rx.wait_for(up)).await.map(|r| {
            r.map(|s| match &*s {
                SlotState::Up(c) => c.clone(),
                SlotState::Connecting { .. } => unreachable!("waited for Up"),
            })
        });
        match waited {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(_)) => Err(Error::Closed),
            Err(_) => match &*rx.borrow() {
                SlotState::Connecting { last_error: Some(e @ (Error::Server(_) | Error::Protocol(_))) } => {
                    Err(e.clone())
                }
                _ => Err(Error::Timeout),
            },
        }
    }
}

/// Keeps one slot connected: waits for its connection to close, then redials with exponential
/// backoff until one succeeds. Ends when the pool is dropped.
async fn supervise(config: Config, tx: watch::Sender<SlotState>) {
    let mut backoff = config.backoff_min;
    loop {
        let current = match &*tx.borrow() {
            SlotState::Up(c) => Some(c.clone()),
            SlotState::Connecting { .. } => None,
        };
        if let Some(conn) = current {
            conn.closed().await;
            tracing::warn!(endpoint = %config.endpoint, "connection to the router closed; reconnecting");
            tx.send_replace(SlotState::Connecting { last_error: None });
            drop(conn);
        }
        match connect(&config).await {
            Ok(conn) => {
                tracing::info!(endpoint = %config.endpoint, "connected to the router");
                backoff = config.backoff_min;
                tx.send_replace(SlotState::Up(Arc::new(conn)));
            }
            Err(e) => {
                tracing::debug!(endpoint = %config.endpoint, error = %e, "reconnect failed");
                tx.send_replace(SlotState::Connecting { last_error: Some(e) });
                tokio::time::sleep(jittered(backoff)).await;
                backoff = (backoff * 2).min(config.backoff_max);
            }
        }
    }
}

/// `d` less up to a quarter, so that many clients of a restarted router do not redial in step.
fn jittered(d: Duration) -> Duration {
    // The clock's nanoseconds are random enough for spreading redials; no RNG dependency.
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    let quarter = d.as_nanos() as u64 / 4;
    d - Duration::from_nanos(if quarter == 0 { 0 } else { nanos as u64 % quarter })
}
