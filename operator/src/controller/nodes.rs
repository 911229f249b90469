//! Acting on the node objects: the member StatefulSets at the planned size (those no longer
//! wanted removed) and the node PodDisruptionBudgets.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::events::EventType;

use super::api::{Error, apply, delete, event};
use super::observe::Seen;
use super::plan::Plan;
use super::spec::Wanted;
use crate::context::Context;
use crate::crd::CacheCluster;
use crate::health::ShardHealth;
use crate::resources::{self, Component, Placement};
use crate::scaling::Step;

pub(super) async fn scale(
    ctx: &Context,
    cc: &CacheCluster,
    wanted: &Wanted,
    seen: &Seen,
    plan: &Plan,
) -> Result<(), Error> {
    let (client, ns) = (&ctx.client, wanted.ns.as_str());
    if let Step::ScaleNodes(n) = plan.step {
        let note = format!("node StatefulSet: {} -> {n} pods", plan.observed.statefulset.unwrap_or(0));
        event(ctx, cc, EventType::Normal, "ScalingNodes", note).await;
    }
    // Placed by address once the cluster has (or should have) replicas: any member may be a
    // shard's primary then.
    let placement = if seen.replica_mode {
        Placement::Advertised(ctx.settings.node_addresses)
    } else {
        Placement::Ordinal
    };
    for member in 0..=plan.keep {
        apply(client, ns, &resources::node_statefulset(cc, member, plan.replicas as i32, placement)).await?;
    }
    for (&member, _) in seen.sets.range(plan.keep + 1..) {
        let sts = resources::member_name(cc, member);
        delete::<StatefulSet>(client, ns, &sts).await?;
        let note = format!("StatefulSet {sts} removed: replicasPerShard is {}", wanted.replicas);
        event(ctx, cc, EventType::Normal, "ScalingNodes", note).await;
    }
    let members = plan.keep + 1;
    node_pdbs(client, cc, ns, seen.replica_mode, plan.replicas, members, seen.shards.as_deref()).await
}

/// The node PodDisruptionBudgets: one for all node pods without replicas, one per shard with
/// them (a pod must match one budget only: the eviction API refuses pods with two) over its
/// `members` pods, open (one may go) while its shard is redundant and closed while it is not;
/// budgets of the other kind, and of shards that are gone, are deleted.
async fn node_pdbs(
    client: &Client,
    cc: &CacheCluster,
    ns: &str,
    replica_mode: bool,
    shards_count: u32,
    members: u32,
    health: Option<&[ShardHealth]>,
) -> Result<(), Error> {
    let mut wanted = Vec::new();
    if replica_mode {
        for shard in 0..shards_count {
            // A shard not in the topology yet holds no data.
            let open =
                health.unwrap_or_default().iter().find(|h| h.id == shard).is_none_or(ShardHealth::redundant);
            wanted.push(resources::shard_pdb(cc, shard, members, open));
        }
    } else {
        wanted.push(resources::pdb(cc, Component::Node));
    }
    for pdb in &wanted {
        apply(client, ns, pdb).await?;
    }
    let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    let existing = api.list(&ListParams::default().labels(&resources::node_selector_string(cc))).await?.items;
    for pdb in existing {
        let Some(name) = pdb.metadata.name.as_deref() else { continue };
        if !wanted.iter().any(|w| w.metadata.name.as_deref() == Some(name)) {
            delete::<PodDisruptionBudget>(client, ns, name).await?;
        }
    }
    Ok(())
}
