//! The first stage of a reconcile: what is there. The published topology, the node
//! StatefulSets and pods, the move that ended since the last look, and (with replicas) what
//! every member of the topology says about itself. Reads only, apart from collecting the ended
//! move's task.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use shoal_coordinator::Registry;
use shoal_wire::Topology;
use shoal_wire::auth::ClusterSecret;
use shoal_wire::proto::NodeStats;

use super::api::Error;
use super::moves::{self, Ended};
use super::spec::Wanted;
use crate::context::Context;
use crate::crd::CacheCluster;
use crate::health::{self, ShardHealth};
use crate::members::{self, PodView};
use crate::registry::ConfigMapRegistry;
use crate::resources;

/// What one reconcile saw.
#[derive(Default)]
pub(super) struct Seen {
    /// The published topology, if any.
    pub topology: Option<Topology>,
    /// Whether the cluster runs with replicas (or should: see [`members::replica_mode`]).
    pub replica_mode: bool,
    /// The node StatefulSets, by member index.
    pub sets: BTreeMap<u32, StatefulSet>,
    pub pods: Vec<PodView>,
    /// The move that ended since the last look.
    pub ended: Option<Ended>,
    /// Whether a move still runs.
    pub moving: bool,
    /// With replicas: what every member of the topology that answered says about itself ...
    pub stats: Option<BTreeMap<String, NodeStats>>,
    /// ... and what that makes of each shard.
    pub shards: Option<Vec<ShardHealth>>,
}

pub(super) async fn cluster(
    ctx: &Context,
    cc: &CacheCluster,
    wanted: &Wanted,
    store: &ConfigMapRegistry,
    secret: &ClusterSecret,
) -> Result<Seen, Error> {
    let topology = store.load().await?;
    let replica_mode = members::replica_mode(wanted.replicas, topology.as_ref());
    let node_labels = ListParams::default().labels(&resources::node_selector_string(cc));
    let sets: BTreeMap<u32, StatefulSet> = Api::<StatefulSet>::namespaced(ctx.client.clone(), &wanted.ns)
        .list(&node_labels)
        .await?
        .items
        .into_iter()
        .filter_map(|s| Some((resources::statefulset_member(cc, s.metadata.name.as_deref()?)?, s)))
        .collect();
    let update_revisions: BTreeMap<u32, String> =
        sets.iter().filter_map(|(m, s)| Some((*m, s.status.as_ref()?.update_revision.clone()?))).collect();
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), &wanted.ns).list(&node_labels).await?.items;
    let pods = members::pod_views(cc, &pods, ctx.settings.node_addresses, &update_revisions);
    let ended = moves::ended(ctx, &wanted.key).await;
    let moving = ctx.moves.lock().contains_key(&wanted.key);
    let stats = match (&topology, replica_mode) {
        (Some(t), true) => Some(health::probe(t, secret).await),
        _ => None,
    };
    let shards = stats.as_ref().zip(topology.as_ref()).map(|(stats, t)| health::shards(t, stats));
    tracing::debug!(cluster = %wanted.name, answered = stats.as_ref().map(|s| s.len()), "members probed");
    Ok(Seen { topology, replica_mode, sets, pods, ended, moving, stats, shards })
}
