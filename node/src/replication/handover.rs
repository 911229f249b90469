//! A lossless hand-over of a shard from its primary to a replica (`SHOAL FAILOVER`, and a
//! primary's SIGTERM, so a rolling restart shows clients nothing).
//!
//! 1. The primary stops serving (`Membership::pause`): every op gets `moved` with the version
//!    it already serves, which routers answer by retrying after a moment; waiting, not failing.
//! 2. Batches let in before the pause finish (`wait_for_retired_views`); the change log's end is
//!    then every write acknowledged.
//! 3. It waits until a synced replica (the one asked for, else the most advanced) has acked that
//!    end. Until then nothing is decided: at the deadline it serves again and reports the error.
//! 4. Commit: stats show `handover_to` = that replica. From now on this process never serves
//!    this version again: the failover writer promotes that replica (a new topology version),
//!    and no path leads back (a writer that read the commit publishes the promotion whatever
//!    this process does next).
//! 5. The promotion arrives (offered by the writer, or from the topology file): this process is
//!    a replica; routers that still send here get `moved` with the newer version, fetch it and
//!    retry on the new primary.
//!    If the replica dies between 4 and 5, the writer promotes another replica that holds as
//!    much, or confirms this primary: a newer version naming it primary ends the hand-over
//!    (`Membership::unfenced`) and it serves again, with every write.
//!
//! Nothing acknowledged is lost: every acknowledged write is in the log before step 3's end, the
//! replica promoted has acked it, and no write is acknowledged between the pause and the switch.
//! A hand-over needs a failover writer watching (its probes mark the process), since only the
//! writer can publish the switch; without one it is refused at once and nothing pauses.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::membership::Membership;

/// How long a hand-over waits for a replica to catch up and for the switch, unless told.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HandoverError {
    #[error("this node is not the primary of a shard with replicas")]
    NotPrimary,
    #[error("this node does not serve its shard now (fenced, or already handing over)")]
    NotServing,
    #[error("no failover writer is watching this node (run `shoal-router failover` or the operator)")]
    NoWriter,
    #[error("{0} is not a replica of this shard in the topology served")]
    NotListed(String),
    #[error("no replica caught up within {0} ms; the primary serves again")]
    NotCaughtUp(u64),
    #[error(
        "replica {0} caught up but became unreachable; the failover writer kept this primary, which serves again"
    )]
    Confirmed(String),
    #[error("replica {0} caught up, but the failover writer did not switch within {1} ms (it will)")]
    NotSwitched(String, u64),
}

/// The switch: the topology version that made `primary` the shard's primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Switched {
    pub version: u64,
    pub primary: String,
}

/// Hands this primary's shard over to `replica` (None: the most advanced synced one); see the
/// module comment. Returns once this process serves the topology that promoted it.
pub async fn run(
    membership: &Arc<Membership>,
    replica: Option<&str>,
    timeout: Duration,
) -> Result<Switched, HandoverError> {
    let repl = membership.replication.clone();
    let Some((version, shard, true)) = membership.primary_of() else { return Err(HandoverError::NotPrimary) };
    if !repl.writer_watching() {
        return Err(HandoverError::NoWriter);
    }
    // Only a replica the topology lists can be promoted (the writer ignores any other): a
    // replica still connected but dropped from the shard is no candidate.
    let listed = membership.listed_replicas();
    if let Some(r) = replica
        && !listed.iter().any(|l| l == r)
    {
        return Err(HandoverError::NotListed(r.to_string()));
    }
    if repl.handing_over.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return Err(HandoverError::NotServing);
    }
    if membership.pause().is_none() {
        repl.end_handover();
        return Err(HandoverError::NotServing);
    }
    let until = Instant::now() + timeout;
    let ms = timeout.as_millis() as u64;
    tracing::info!(version, shard, replica = replica.unwrap_or("(most advanced)"), "handing over: paused");
    let give_up = || {
        repl.end_handover();
        membership.resume_after_handover();
        tracing::warn!(version, shard, "hand-over abandoned: no replica caught up; serving again");
        Err(HandoverError::NotCaughtUp(ms))
    };
    if !membership.wait_for_retired_views(timeout).await {
        return give_up();
    }
    let end = membership.store.events.changes.end();
    // Feeds send what they gathered at once while this waits.
    let flush = super::feed::Waiting::start(&repl);
    let target = loop {
        let acked = repl.acked.notified();
        if let Some(addr) = repl.caught_up(end, replica, &listed) {
            break addr;
        }
        tokio::select! {
            _ = acked => {}
            // Replicas ack on their heartbeats too; this only bounds a lost wake-up.
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            _ = tokio::time::sleep_until(until) => return give_up(),
        }
    };
    drop(flush);
    *repl.handover_to.lock() = target.clone();
    tracing::info!(version, shard, replica = %target, offset = end, "handing over: replica caught up; committed");
    let mut versions = membership.watch_version();
    loop {
        // Adopting the promotion installs the view (this process a replica now) before it says
        // so to watchers and ends the hand-over state: the view is what to look at.
        if membership.version() > version && membership.primary_of().is_none() {
            let view = membership.view();
            let primary = view
                .topology
                .as_ref()
                .and_then(|t| t.node(shard))
                .map(|n| n.addr.clone())
                .unwrap_or_default();
            tracing::info!(version = view.version(), %primary, "handed over");
            return Ok(Switched { version: view.version(), primary });
        }
        if membership.version() > version && !repl.handing_over() {
            // A newer version still made this process primary: the writer confirmed it instead.
            return Err(HandoverError::Confirmed(target));
        }
        tokio::select! {
            r = versions.changed() => if r.is_err() { break },
            // A bound on any wake-up missed between the check and the wait.
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            _ = tokio::time::sleep_until(until) => break,
        }
    }
    Err(HandoverError::NotSwitched(target, ms))
}

/// On SIGTERM: hands over first if this process is the primary of a shard with replicas and a
/// failover writer is watching; then waits `linger` (routers that still send here learn of the
/// switch from the `moved` replies, not from a closed connection). Logs what it did. All of it
/// ends by `by` (the node's drain deadline: graceful shutdown is bounded as a whole, so a replica
/// that cannot catch up or a writer that never switches cannot hold the exit); a hand-over cut
/// short gives up as at its own timeout (the primary serves again until it stops).
pub async fn before_exit(membership: &Arc<Membership>, linger: Duration, by: Instant) {
    let repl = &membership.replication;
    // Already exiting: whoever stops this process said no hand-over (`shutdown_without_handover`).
    if repl.exiting() || !matches!(membership.primary_of(), Some((_, _, true))) {
        repl.set_exiting();
        return;
    }
    repl.set_exiting();
    for attempt in 1.. {
        let timeout = DEFAULT_TIMEOUT.min(by.saturating_duration_since(Instant::now()));
        match run(membership, None, timeout).await {
            Ok(s) => {
                tracing::info!(version = s.version, primary = %s.primary, linger_ms = linger.as_millis() as u64, "handed over before exiting");
                tokio::time::sleep_until(by.min(Instant::now() + linger)).await;
                return;
            }
            Err(e) => match again_after(&e, attempt, Instant::now(), by) {
                Some(pause) => {
                    tracing::warn!(error = %e, attempt, "hand-over not done; trying again before exiting");
                    tokio::time::sleep(pause).await;
                }
                None => {
                    tracing::warn!(error = %e, "exiting without a hand-over");
                    return;
                }
            },
        }
    }
}

/// How many times an exiting primary tries to hand over.
const EXIT_ATTEMPTS: u32 = 20;
/// The pause between two tries.
const EXIT_RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Whether an exiting primary whose hand-over failed with `e` (try number `attempt`) tries
/// again, and after what pause: only when this process serves again (the writer kept it, or no
/// replica caught up) and the drain deadline `by` leaves a second for another try. A writer that
/// could not reach the replica at that moment (a pod restarted a moment ago, its new address not
/// yet in every DNS cache) usually can a moment later; exiting instead turns a planned hand-over
/// into a failover, with clients' errors until the writer's down-after.
fn again_after(e: &HandoverError, attempt: u32, now: Instant, by: Instant) -> Option<Duration> {
    let serving_again = matches!(e, HandoverError::Confirmed(_) | HandoverError::NotCaughtUp(_));
    (serving_again && attempt < EXIT_ATTEMPTS && now + EXIT_RETRY_PAUSE + Duration::from_secs(1) <= by)
        .then_some(EXIT_RETRY_PAUSE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exiting_primary_tries_again_only_while_it_serves_and_time_remains() {
        let now = Instant::now();
        let by = now + Duration::from_secs(30);
        let confirmed = HandoverError::Confirmed("r:1".into());
        assert_eq!(again_after(&confirmed, 1, now, by), Some(EXIT_RETRY_PAUSE));
        assert_eq!(again_after(&HandoverError::NotCaughtUp(10_000), 2, now, by), Some(EXIT_RETRY_PAUSE));
        // Committed (the writer will switch): never serves this version again, so never again.
        assert_eq!(again_after(&HandoverError::NotSwitched("r:1".into(), 10_000), 1, now, by), None);
        for e in [HandoverError::NoWriter, HandoverError::NotPrimary, HandoverError::NotServing] {
            assert_eq!(again_after(&e, 1, now, by), None, "{e}");
        }
        // Bounded in tries and by the drain deadline.
        assert_eq!(again_after(&confirmed, EXIT_ATTEMPTS, now, by), None);
        assert_eq!(again_after(&confirmed, 1, now, now + Duration::from_millis(1200)), None);
    }
}
