//! The last stage of a reconcile: the status ([`status::compute`], written only when it
//! changed) and when to look again.

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use shoal_wire::Topology;

use super::api::{Error, now_rfc3339};
use super::moves;
use super::observe::Seen;
use super::plan::Plan;
use super::restarts::waited_for;
use super::spec::Wanted;
use crate::context::Context;
use crate::crd::{CacheCluster, PodRestart};
use crate::health::{self, ShardHealth};
use crate::resources;
use crate::scaling::{Observed, Step};
use crate::status;

/// What the act stages leave for the report.
pub(super) struct Acted {
    /// The topology published now (a publish above may have changed members).
    pub published: Option<Topology>,
    /// Set when restarts were looked at: the pod waited for now (`status.restarting`).
    pub restarting: Option<Option<PodRestart>>,
}

pub(super) async fn status(
    ctx: &Context,
    cc: &CacheCluster,
    wanted: &Wanted,
    seen: &Seen,
    plan: Plan,
    acted: Acted,
) -> Result<Action, Error> {
    let running = moves::running(ctx, &wanted.key);
    // The shards of what is published now: those not probed yet count as not synced until the
    // next reconcile probes them.
    let shards = seen.stats.as_ref().zip(acted.published.as_ref()).map(|(stats, t)| health::shards(t, stats));
    let observed = Observed { topology: acted.published, moving: running.moving, ..plan.observed };
    let last_error = ctx.last_errors.lock().get(&wanted.key).cloned();
    let mut new_status = status::compute(&status::Inputs {
        generation: cc.metadata.generation,
        previous: cc.status.as_ref(),
        observed: &observed,
        step: &plan.step,
        progress: running.progress.as_ref(),
        last_error: last_error.as_deref(),
        resharding_task: running.resharding,
        selector: resources::node_selector_string(cc),
        now: now_rfc3339(),
        shards: shards.as_deref(),
        replicas_wanted: wanted.replicas,
        pods: &seen.pods,
    });
    // Restarts not looked at this time: still the pod waited for, by this process's own record
    // first. The object this reconcile read may predate the status write that named the pod, and
    // writing its stale value back would erase the name a new leader needs.
    new_status.restarting = acted.restarting.unwrap_or_else(|| {
        let recorded = cc.status.as_ref().and_then(|s| s.restarting.as_ref());
        waited_for(ctx.restarting.lock().get(&wanted.key), recorded)
    });
    if cc.status.as_ref() != Some(&new_status) {
        let api: Api<CacheCluster> = Api::namespaced(ctx.client.clone(), &wanted.ns);
        let patch = serde_json::json!({ "status": new_status });
        api.patch_status(&wanted.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    let whole = shards.as_ref().is_none_or(|s| s.iter().all(ShardHealth::complete));
    Ok(requeue(&plan.step, observed.moving, seen.replica_mode, whole, ctx.settings.busy_requeue))
}

/// When to look again: soon while anything is under way, and on a settled cluster now and then.
fn requeue(step: &Step, moving: bool, replica_mode: bool, whole: bool, busy: Duration) -> Action {
    match step {
        // A replica copying, or a primary not serving, changes nothing the controller watches:
        // look again soon until every shard is whole.
        Step::Settled if !moving && replica_mode && !whole => Action::requeue(busy),
        // With replicas, look again now and then: lags change without any object changing.
        Step::Settled if !moving && replica_mode => Action::requeue(Duration::from_secs(10)),
        Step::Settled if !moving => Action::requeue(Duration::from_secs(300)),
        _ => Action::requeue(busy),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUSY: Duration = Duration::from_secs(2);

    #[test]
    fn a_settled_cluster_without_replicas_rests() {
        assert_eq!(
            requeue(&Step::Settled, false, false, true, BUSY),
            Action::requeue(Duration::from_secs(300))
        );
    }

    #[test]
    fn with_replicas_a_settled_cluster_looks_again_now_and_then_and_soon_while_a_shard_is_not_whole() {
        assert_eq!(
            requeue(&Step::Settled, false, true, true, BUSY),
            Action::requeue(Duration::from_secs(10))
        );
        assert_eq!(requeue(&Step::Settled, false, true, false, BUSY), Action::requeue(BUSY));
    }

    #[test]
    fn anything_under_way_looks_again_soon() {
        assert_eq!(requeue(&Step::Settled, true, false, true, BUSY), Action::requeue(BUSY), "a move runs");
        for step in [Step::ScaleNodes(3), Step::Wait("waiting".into()), Step::Resume] {
            assert_eq!(requeue(&step, false, false, true, BUSY), Action::requeue(BUSY), "{step:?}");
        }
    }
}
