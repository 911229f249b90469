//! The settle loop, the one place where a call's first attempt meets a topology that moved:
//! an attempt either produces the result, or finds the routing out of date (a node answered
//! `moved`, the node left the cluster, or a unit met a slot in motion); then, until the
//! deadline, the router and that node catch up with each other (or the move is given a moment)
//! and the call is routed again by the current topology.

use std::future::Future;
use std::sync::Arc;

use shoal_wire::proto::{Op, Reply, reply};
use tokio::time::Instant;

use super::port::NodePort;
use super::{Backend, BackendError, Routing};

/// What one attempt at a call came to.
pub(super) enum Outcome<T> {
    Done(T),
    /// `node` serves another topology version (`version`): catch up, then route again.
    Moved(Arc<dyn NodePort>, u64),
    /// The node the call went to has left the cluster: route again by the current topology.
    Stale,
    /// A unit's key is in a slot moving between nodes (`try_again`): again after a pause.
    TryAgain,
}

/// How long a unit that met a slot in motion waits before it is sent again.
pub(super) const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

/// The outcome of a reply from `port` (routed by `routing`) to `op`. A node that left the
/// cluster (a demoted primary) sends the call to the current owner, but a call that was in
/// flight there goes again only if it changes nothing ([`shoal_wire::ops::resendable`]): the
/// old primary may have run a write and passed it to its replica, the new owner, and a second
/// run would apply it twice (an element pushed twice, a counter counted twice).
pub(super) fn outcome(
    backend: &Backend,
    port: &Arc<dyn NodePort>,
    routing: &Routing,
    op: &Op,
    result: Result<Reply, BackendError>,
) -> Result<Outcome<Reply>, BackendError> {
    match result {
        Ok(Reply { kind: Some(reply::Kind::Moved(v)), .. }) => Ok(Outcome::Moved(port.clone(), v)),
        Ok(Reply { kind: Some(reply::Kind::TryAgain(_)), .. }) => Ok(Outcome::TryAgain),
        Ok(r) => Ok(Outcome::Done(r)),
        Err(e) if may_route_again(&e, op) && backend.has_left(&**port, routing) => Ok(Outcome::Stale),
        Err(e) => Err(e),
    }
}

/// Whether an op that failed with `e` at a node that then left the cluster may go to the new
/// owner: if it never reached the node, or if it changes nothing.
pub(super) fn may_route_again(e: &BackendError, op: &Op) -> bool {
    match e {
        BackendError::Unavailable { .. } => true,
        BackendError::InFlight { .. } => shoal_wire::ops::resendable(op),
        _ => false,
    }
}

impl Backend {
    /// The settle loop: runs `first`, then `again` with the current routing after each attempt
    /// that found the routing out of date, until one is done or `deadline` passes.
    pub(super) async fn settle<T, F, G, Fut>(
        &self,
        first: F,
        mut again: G,
        deadline: Instant,
    ) -> Result<T, BackendError>
    where
        F: Future<Output = Result<Outcome<T>, BackendError>>,
        G: FnMut(Arc<Routing>) -> Fut,
        Fut: Future<Output = Result<Outcome<T>, BackendError>>,
    {
        let mut outcome = first.await?;
        loop {
            match outcome {
                Outcome::Done(t) => return Ok(t),
                Outcome::Moved(node, node_version) => {
                    if Instant::now() >= deadline {
                        return Err(BackendError::Unsettled);
                    }
                    self.metrics.moved_retries.inc();
                    self.reconcile(&*node, node_version).await;
                }
                Outcome::Stale => {
                    if Instant::now() >= deadline {
                        return Err(BackendError::Unsettled);
                    }
                    self.metrics.stale_retries.inc();
                }
                Outcome::TryAgain => {
                    if Instant::now() + RETRY_PAUSE >= deadline {
                        return Err(BackendError::TryAgain);
                    }
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
            outcome = again(self.routing()).await?;
        }
    }
}
