//! Blocking waits (BLPOP, BLMOVE, BZPOPMIN, ...): a `Block` call to the node that holds every
//! key, on an HTTP/2 stream of its own. The node runs the command's attempt at once, or queues
//! the client behind the others waiting on its keys and runs it right after the write that makes
//! a key ready. A slot that moves while a client waits answers `moved`: the router catches up
//! and blocks again on the new owner for the time left; a node that went away (a scale-down
//! stops nodes once their slots have moved) is left for where the keys are now. A node that keeps
//! answering `moved` (the topology is changing) is given the command deadline to settle, as any
//! other call is. Dropping the wait withdraws it from the node's queue.
//!
//! A pop over keys of several nodes (BLPOP a b 0 with a and b apart: Sidekiq's and Celery's
//! queues) cannot be one node's command. [`Backend::pop_spread`] tries each key in argument
//! order with an ordinary one-key call (the first that holds something is served, as Redis
//! serves the first ready key), and when none does, asks each node to *watch* its keys (a
//! `Block` call with `watch`: the node answers when one holds what the command pops from, and
//! takes nothing). The first watch to answer starts the round again; the others are dropped,
//! which withdraws them. So the only pops are ordinary atomic calls whose reply goes to this
//! client: an element is never taken twice, and never taken and dropped by the router (a router
//! that dies mid-way has popped nothing, or popped with one call whose reply it could not
//! deliver, as a Redis client that disconnects right after its pop). The price is fairness: a
//! watcher that is woken may find the element taken by a client blocked on that node alone, and
//! then waits again behind it.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use shoal_wire::proto::{self, Op, reply};
use tokio::time::Instant;

use super::{AtomicError, Backend, BackendError, Routing};

/// The longest wait asked of a node (a larger timeout waits this long, then again).
const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

/// How a blocking wait ended.
#[derive(Debug)]
pub enum Unblocked {
    /// The command's reply.
    Reply(proto::Reply),
    /// The timeout passed with nothing to serve.
    TimedOut,
}

impl Backend {
    /// Blocks `op` (a blocking command over `keys`) on the keys' node until `until` (`None`:
    /// for ever), by `routing` and then by whatever topology the keys move to.
    pub async fn block(
        self: &Arc<Self>,
        routing: Arc<Routing>,
        keys: Vec<Bytes>,
        op: Op,
        until: Option<Instant>,
        settle: Duration,
    ) -> Result<Unblocked, AtomicError> {
        self.block_on(routing, keys, op, until, settle, false).await
    }

    /// Waits until `key` holds what the blocking command `op` takes from it, without running it
    /// (the node's watch-only block), until `until`: a blocking move whose destination is on
    /// another node then moves with a transaction over both (`cmd/blocking.rs`).
    pub async fn wait_ready(
        self: &Arc<Self>,
        key: Bytes,
        op: Op,
        until: Option<Instant>,
        settle: Duration,
    ) -> Result<Unblocked, AtomicError> {
        self.block_on(self.routing(), vec![key], op, until, settle, true).await
    }

    /// A blocking pop over `keys` that live on several nodes (see the module's notes):
    /// `attempt(key)` is the command's non-blocking form on that key alone, `watch(keys)` the
    /// command over one node's share of them.
    pub async fn pop_spread(
        self: &Arc<Self>,
        keys: Vec<Bytes>,
        attempt: impl Fn(&Bytes) -> Op,
        watch: impl Fn(&[Bytes]) -> Op,
        until: Option<Instant>,
        settle: Duration,
    ) -> Result<Unblocked, AtomicError> {
        // The key a watch said is ready, tried first: Redis serves a woken client from the key
        // that became ready.
        let mut woken: Option<Bytes> = None;
        let mut blocked = false;
        loop {
            for key in woken.take().iter().chain(&keys) {
                let routing = self.routing();
                // A one-key unit: a slot in motion is waited out (`atomic` would answer Spread,
                // which the client would see as CROSSSLOT while the cluster scales).
                let reply = self
                    .unit(&routing, vec![key.clone()], None, attempt(key), Instant::now() + settle)
                    .wait()
                    .await?;
                // Once the client waits, a key of another type serves nobody, as in Redis
                // (WRONGTYPE is the answer only when the command first looks).
                if blocked && reply.error_kind() == proto::ErrorKind::WrongType {
                    continue;
                }
                if !found_nothing(&reply) {
                    return Ok(Unblocked::Reply(reply));
                }
            }
            blocked = true;
            let routing = self.routing();
            let mut shares: Vec<(usize, Vec<Bytes>)> = Vec::new();
            for key in &keys {
                let pos = routing.locate(key).0;
                match shares.iter_mut().find(|(p, _)| *p == pos) {
                    Some((_, share)) => share.push(key.clone()),
                    None => shares.push((pos, vec![key.clone()])),
                }
            }
            let watches: Vec<_> = shares
                .into_iter()
                .map(|(_, share)| {
                    let op = watch(&share);
                    Box::pin(self.block_on(routing.clone(), share, op, until, settle, true))
                })
                .collect();
            // The first watch to answer decides; dropping the rest withdraws them.
            match futures_util::future::select_all(watches).await.0 {
                Ok(Unblocked::TimedOut) => return Ok(Unblocked::TimedOut),
                Ok(Unblocked::Reply(ready)) => woken = ready_key(&ready).filter(|k| keys.contains(k)),
                // A share no longer on one node (a reshard): look again.
                Err(AtomicError::Spread) => {}
                Err(e) => return Err(e),
            }
        }
    }

    async fn block_on(
        self: &Arc<Self>,
        mut routing: Arc<Routing>,
        keys: Vec<Bytes>,
        op: Op,
        until: Option<Instant>,
        settle: Duration,
        watch: bool,
    ) -> Result<Unblocked, AtomicError> {
        let mut moved_since: Option<Instant> = None;
        loop {
            let Some(pos) = routing.one_owner(&keys) else { return Err(AtomicError::Spread) };
            let wait = match until {
                None => MAX_WAIT,
                Some(at) => match at.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left.min(MAX_WAIT),
                    _ => return Ok(Unblocked::TimedOut),
                },
            };
            let port = routing.nodes[pos].clone();
            let req = proto::BlockRequest {
                topology_version: routing.version(),
                op: Some(op.clone()),
                // Rounded up: a node whose wait ended a fraction of a millisecond before `until`
                // would be asked again, and that attempt's answer (a WRONGTYPE, say) is not what
                // a timeout answers.
                timeout_ms: wait.as_micros().div_ceil(1000).max(1) as u64,
                watch,
            };
            match port.block(req).await {
                Ok(proto::Reply { kind: Some(reply::Kind::Moved(v)), .. }) => {
                    if moved_since.get_or_insert_with(Instant::now).elapsed() > settle {
                        return Err(BackendError::Unsettled.into());
                    }
                    self.metrics.moved_retries.inc();
                    self.reconcile(&*port, v).await;
                    routing = self.routing();
                }
                // The node's wait ended with nothing: the timeout (or a MAX_WAIT slice) passed.
                Ok(proto::Reply { kind: Some(reply::Kind::Nil(_)), .. }) => moved_since = None,
                Ok(r) => return Ok(Unblocked::Reply(r)),
                // The node went away: block again where the keys are now, within the settle time.
                // A watch takes nothing, so it may also wait for the topology to catch up (a
                // node retired by a scale-down closes its links as the routers learn of it).
                Err(e) => {
                    let current = self.routing();
                    let moved_on = current.version() != routing.version();
                    if (!moved_on && !watch)
                        || moved_since.get_or_insert_with(Instant::now).elapsed() > settle
                    {
                        return Err(e.into());
                    }
                    if !moved_on {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    routing = self.routing();
                }
            }
        }
    }
}

/// Whether a blocking pop's one attempt found nothing (the node answers a null array, or a
/// null for the moves).
fn found_nothing(reply: &proto::Reply) -> bool {
    use proto::frame::Kind;
    matches!(&reply.kind, Some(reply::Kind::Frame(f)) if matches!(f.kind, Some(Kind::Nil(_) | Kind::NullArray(_))))
}

/// The key a watch answered with (a bulk string).
fn ready_key(reply: &proto::Reply) -> Option<Bytes> {
    match &reply.kind {
        Some(reply::Kind::Frame(proto::Frame { kind: Some(proto::frame::Kind::Bulk(key)) })) => {
            Some(key.clone())
        }
        _ => None,
    }
}
