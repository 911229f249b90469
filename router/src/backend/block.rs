//! Blocking waits (BLPOP, BLMOVE, BZPOPMIN, ...): a `Block` call to the node that holds every
//! key, on an HTTP/2 stream of its own. The node runs the command's attempt at once, or queues
//! the client behind the others waiting on its keys and runs it right after the write that makes
//! a key ready. A slot that moves while a client waits answers `moved`: the router catches up
//! and blocks again on the new owner for the time left; a node that went away (a scale-down
//! stops nodes once their slots have moved) is left for where the keys are now. A node that keeps
//! answering `moved` (the topology is changing) is given the command deadline to settle, as any
//! other call is. Dropping the wait withdraws it from the node's queue.

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
        mut routing: Arc<Routing>,
        keys: Vec<Bytes>,
        op: Op,
        until: Option<Instant>,
        settle: Duration,
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
                timeout_ms: wait.as_millis().max(1) as u64,
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
                Err(e) => {
                    let current = self.routing();
                    let moved_on = current.version() != routing.version();
                    if !moved_on || moved_since.get_or_insert_with(Instant::now).elapsed() > settle {
                        return Err(e.into());
                    }
                    routing = current;
                }
            }
        }
    }
}
