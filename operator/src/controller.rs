//! The reconciler: observe a CacheCluster's objects and pods, decide the next step
//! ([`scaling::next_step`], then [`members`] for replicas), act, and report
//! ([`status::compute`], Kubernetes Events).
//!
//! A reconcile never blocks on a data move. Moves run as background tasks (one per cluster, the
//! coordinator library driving the topology in the cluster's ConfigMap); each reconcile looks at
//! the task's progress and, once it ends, takes the next step. Everything a move needs is in the
//! published topology, so an operator restarted (or replaced by another leader) mid-move resumes
//! it from there. With replicas, the cluster's failover writer is a background task too
//! ([`crate::failover`]), and a failover decision stops a running move, which the next reconcile
//! resumes from the topology the decision published.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Client, Resource, ResourceExt};
use parking_lot::Mutex;
use serde::Serialize;
use serde::de::DeserializeOwned;
use shoal_coordinator::{Coordinator, Progress, Registry};
use shoal_wire::Topology;
use shoal_wire::auth::{ClusterSecret, Credentials};
use shoal_wire::client::{self, ClientOptions};
use shoal_wire::proto::{HandoverRequest, NodeStats};

use crate::context::{Context, Move};
use crate::crd::{CacheCluster, MAX_REPLICAS_PER_SHARD, PodRestart};
use crate::health::{self, ShardHealth};
use crate::members::{self, Change, PodView};
use crate::registry::ConfigMapRegistry;
use crate::resources::{self, AddressMode, Component, Placement};
use crate::scaling::{self, Observed, Step};
use crate::{failover, status};

const FIELD_MANAGER: &str = "shoal-operator";

/// How long the operator lets a primary take to hand its shard over (the node's own default).
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one eviction may take, its retries included.
const EVICT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a restarted pod may take to be whole again before the next restart stops waiting
/// for it in particular (it still waits for every shard to be whole).
const RESTART_PATIENCE: Duration = Duration::from_secs(1800);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("topology store: {0}")]
    Store(#[from] shoal_coordinator::RegistryError),
    #[error("{0}")]
    Invalid(String),
}

async fn apply<K>(client: &Client, ns: &str, obj: &K) -> Result<K, Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Serialize
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let name = obj.meta().name.clone().ok_or_else(|| Error::Invalid("object without a name".into()))?;
    Ok(api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(obj)).await?)
}

/// Deletes `name`; gone already is fine.
async fn delete<K>(client: &Client, ns: &str, name: &str) -> Result<(), Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn event(ctx: &Context, cc: &CacheCluster, type_: EventType, reason: &str, note: String) {
    tracing::info!(cluster = %cc.name_any(), reason, %note, "event");
    let ev = Event { type_, reason: reason.into(), note: Some(note), action: reason.into(), secondary: None };
    if let Err(e) = ctx.recorder.publish(&ev, &cc.object_ref(&())).await {
        tracing::warn!(error = %e, "could not record an event");
    }
}

pub async fn reconcile(cc: Arc<CacheCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.metrics.reconciles.inc();
    let ns = cc.namespace().ok_or_else(|| Error::Invalid("a CacheCluster is namespaced".into()))?;
    let name = cc.name_any();
    let key = (ns.clone(), name.clone());
    let client = &ctx.client;
    let mode = ctx.settings.node_addresses;
    if cc.spec.shards < 1 {
        return Err(Error::Invalid(format!("spec.shards is {}; it must be at least 1", cc.spec.shards)));
    }
    if !(0..=MAX_REPLICAS_PER_SHARD).contains(&cc.spec.replicas_per_shard) {
        return Err(Error::Invalid(format!(
            "spec.replicasPerShard is {}; it must be 0 to {MAX_REPLICAS_PER_SHARD}",
            cc.spec.replicas_per_shard
        )));
    }
    let want_replicas = cc.spec.replicas_per_shard as u32;

    // The secret every node of the cluster requires (made once, kept across upgrades).
    let secret = cluster_secret(&ctx, &ns, &cc).await?;
    // Objects whose content does not depend on the scaling state.
    apply(client, &ns, &resources::service_account(&cc, Component::Node)).await?;
    apply(client, &ns, &resources::service_account(&cc, Component::Router)).await?;
    apply(client, &ns, &resources::node_service(&cc)).await?;
    apply(client, &ns, &resources::router_service(&cc)).await?;
    apply(client, &ns, &resources::pdb(&cc, Component::Router)).await?;
    apply(client, &ns, &resources::node_network_policy(&cc)).await?;
    apply(client, &ns, &resources::router_network_policy(&cc)).await?;

    // Observe.
    let store = ConfigMapRegistry::new(Api::<ConfigMap>::namespaced(client.clone(), &ns), &cc);
    let topology = store.load().await?;
    let replica_mode = members::replica_mode(want_replicas, topology.as_ref());
    let placement = if replica_mode { Placement::Advertised(mode) } else { Placement::Ordinal };
    let node_labels = ListParams::default().labels(&resources::node_selector_string(&cc));
    let sets: BTreeMap<u32, StatefulSet> = Api::<StatefulSet>::namespaced(client.clone(), &ns)
        .list(&node_labels)
        .await?
        .items
        .into_iter()
        .filter_map(|s| Some((resources::statefulset_member(&cc, s.metadata.name.as_deref()?)?, s)))
        .collect();
    let sts_replicas = sets.get(&0).and_then(|s| s.spec.as_ref()?.replicas).map(|r| r.max(0) as u32);
    let update_revisions: BTreeMap<u32, String> =
        sets.iter().filter_map(|(m, s)| Some((*m, s.status.as_ref()?.update_revision.clone()?))).collect();
    let pods = Api::<Pod>::namespaced(client.clone(), &ns).list(&node_labels).await?.items;
    let views = members::pod_views(&cc, &pods, mode, &update_revisions);

    // A move that ended since the last look.
    let finished = {
        let mut moves = ctx.moves.lock();
        match moves.get(&key) {
            Some(m) if m.task.is_finished() => moves.remove(&key),
            _ => None,
        }
    };
    if let Some(m) = finished {
        ctx.metrics.moves_running.add(-1);
        match m.task.await {
            Ok(Ok(t)) => {
                ctx.last_errors.lock().remove(&key);
                let note =
                    format!("{}: done, topology version {} with {} shards", m.what, t.version, t.nodes.len());
                event(&ctx, &cc, EventType::Normal, "Resharded", note).await;
            }
            Ok(Err(e)) => {
                ctx.metrics.moves_failed.inc();
                ctx.last_errors.lock().insert(key.clone(), e.clone());
                event(
                    &ctx,
                    &cc,
                    EventType::Warning,
                    "ReshardFailed",
                    format!("{}: {e} (will retry)", m.what),
                )
                .await;
            }
            Err(e) => {
                ctx.metrics.moves_failed.inc();
                ctx.last_errors.lock().insert(key.clone(), e.to_string());
            }
        }
    }
    let moving = ctx.moves.lock().contains_key(&key);
    let observed = Observed {
        desired: cc.spec.shards as u32,
        statefulset: sts_replicas,
        ready: members::ready_primaries(&views, topology.as_ref(), replica_mode),
        topology: topology.clone(),
        moving,
    };
    let step = scaling::next_step(&observed);
    tracing::debug!(cluster = %name, ?step, "next step");
    // With replicas: what every member of the topology says about itself.
    let stats = match (&topology, replica_mode) {
        (Some(t), true) => Some(health::probe(t, &secret).await),
        _ => None,
    };
    let shards: Option<Vec<ShardHealth>> =
        stats.as_ref().zip(topology.as_ref()).map(|(stats, t)| health::shards(t, stats));
    tracing::debug!(cluster = %name, answered = stats.as_ref().map(|s| s.len()), "members probed");

    // Act.
    // Set when restarts were looked at: the pod waited for now (`status.restarting`).
    let mut restarting: Option<Option<PodRestart>> = None;
    let replicas = match &step {
        Step::ScaleNodes(n) => {
            let note = format!("node StatefulSet: {} -> {n} pods", sts_replicas.unwrap_or(0));
            event(&ctx, &cc, EventType::Normal, "ScalingNodes", note).await;
            *n
        }
        _ => sts_replicas.unwrap_or(cc.spec.shards as u32),
    };
    // Member StatefulSets: 0..=replicasPerShard, and any member the topology still names (going
    // down to fewer replicas, it is dropped from the topology first).
    let listed = topology.as_ref().map_or(0, |t| listed_members(t, &views));
    let keep = if replica_mode { want_replicas.max(listed) } else { 0 };
    for member in 0..=keep {
        apply(client, &ns, &resources::node_statefulset(&cc, member, replicas as i32, placement)).await?;
    }
    for (&member, _) in sets.range(keep + 1..) {
        let sts = resources::member_name(&cc, member);
        delete::<StatefulSet>(client, &ns, &sts).await?;
        let note = format!("StatefulSet {sts} removed: replicasPerShard is {want_replicas}");
        event(&ctx, &cc, EventType::Normal, "ScalingNodes", note).await;
    }
    node_pdbs(client, &cc, &ns, replica_mode, replicas, keep + 1, shards.as_deref()).await?;
    match &step {
        Step::Bootstrap(nodes) => {
            // `nodes` are ids 0..n in order, which is how `even` numbers them. Primaries only:
            // replicas are listed in the next version (see `members`).
            let t = Topology::even(&nodes.iter().map(|n| n.addr.clone()).collect::<Vec<_>>());
            store.publish(&t).await?;
            let note = format!("first topology: {} shards, version {}", t.nodes.len(), t.version);
            event(&ctx, &cc, EventType::Normal, "TopologyPublished", note).await;
            // Offer it to every node now rather than waiting for their file to change.
            let what = "publishing the first topology".to_string();
            start_move(&ctx, &cc, store.clone(), &secret, None, what, false);
        }
        Step::Reshard(target) => {
            let from = topology.as_ref().map_or(0, |t| t.nodes.len());
            let what = if from == target.len() {
                "new node addresses".to_string()
            } else {
                format!("resharding {from} -> {} shards", target.len())
            };
            event(&ctx, &cc, EventType::Normal, "ReshardingStarted", what.clone()).await;
            start_move(&ctx, &cc, store.clone(), &secret, Some(target.clone()), what, true);
        }
        Step::Resume => {
            let what = "finishing the move in the published topology".to_string();
            event(&ctx, &cc, EventType::Normal, "ReshardingResumed", what.clone()).await;
            start_move(&ctx, &cc, store.clone(), &secret, None, what, true);
        }
        Step::ScaleNodes(_) | Step::Wait(_) | Step::Settled => {}
    }
    // Replicas: members, hand-overs and restarts, only while scaling has nothing under way.
    let idle = !ctx.moves.lock().contains_key(&key) && matches!(step, Step::Settled | Step::Wait(_));
    if let (true, true, Some(t), Some(stats), Some(health)) = (replica_mode, idle, &topology, &stats, &shards)
        && t.migrations.is_empty()
    {
        let synced = |addr: &str| health::synced(health, addr);
        match members::membership(t, &views, want_replicas, mode == AddressMode::Dns, synced) {
            Some(Change::Publish { topology: next, why }) => match store.publish(&next).await {
                Ok(()) => {
                    ctx.metrics.member_changes.inc();
                    let note = format!("{why} (topology version {})", next.version);
                    event(&ctx, &cc, EventType::Normal, "MembersChanged", note).await;
                }
                // The failover writer (or a move) published first: the compare-and-swap
                // refused this one, and the ConfigMap's change brings the next look.
                Err(shoal_coordinator::RegistryError::Stale { current, .. }) => {
                    tracing::info!(cluster = %name, current, "members change superseded; looking again");
                }
                Err(e) => return Err(e.into()),
            },
            Some(Change::HandOver { shard, from, to }) => {
                let note = format!("shard {shard}: primary {from} hands over to {to} (its member goes)");
                event(&ctx, &cc, EventType::Normal, "HandingOver", note).await;
                if let Err(e) = hand_over(&from, &to, &secret).await {
                    event(&ctx, &cc, EventType::Warning, "HandOverFailed", format!("shard {shard}: {e}"))
                        .await;
                }
            }
            None if step == Step::Settled => {
                restarting = Some(restart_outdated(&ctx, &cc, &views, t, stats, health).await?);
            }
            None => {}
        }
    } else if replica_mode {
        tracing::debug!(cluster = %name, ?step, idle, "members and restarts wait for scaling");
    }
    // Routers start once there is a topology to route by; failover writers run while it has
    // replicas (or should).
    let published = store.load().await?;
    if published.is_some() {
        apply(client, &ns, &resources::router_deployment(&cc)).await?;
    }
    if published.is_some() && members::replica_mode(want_replicas, published.as_ref()) {
        failover::ensure(&ctx, &cc, store.clone(), &secret);
    } else {
        failover::stop(&ctx, &key);
    }

    // Report.
    let (moving, progress, resharding_task) = match ctx.moves.lock().get(&key) {
        Some(m) => (true, m.progress.lock().clone(), m.resharding),
        None => (false, None, false),
    };
    // The shards of what is published now (a publish above may have changed members): those
    // not probed yet count as not synced until the next reconcile probes them.
    let shards = stats.as_ref().zip(published.as_ref()).map(|(stats, t)| health::shards(t, stats));
    let observed = Observed { topology: published, moving, ..observed };
    let last_error = ctx.last_errors.lock().get(&key).cloned();
    let mut new_status = status::compute(&status::Inputs {
        generation: cc.metadata.generation,
        previous: cc.status.as_ref(),
        observed: &observed,
        step: &step,
        progress: progress.as_ref(),
        last_error: last_error.as_deref(),
        resharding_task,
        selector: resources::node_selector_string(&cc),
        now: now_rfc3339(),
        shards: shards.as_deref(),
        replicas_wanted: want_replicas,
        pods: &views,
    });
    // Restarts not looked at this time: still the pod waited for, by this process's own record
    // first. The object this reconcile read may predate the status write that named the pod, and
    // writing its stale value back would erase the name a new leader needs.
    new_status.restarting = restarting.unwrap_or_else(|| {
        waited_for(ctx.restarting.lock().get(&key), cc.status.as_ref().and_then(|s| s.restarting.as_ref()))
    });
    if cc.status.as_ref() != Some(&new_status) {
        let api: Api<CacheCluster> = Api::namespaced(client.clone(), &ns);
        let patch = serde_json::json!({ "status": new_status });
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    // A replica copying, or a primary not serving, changes nothing the controller watches:
    // look again soon until every shard is whole.
    let whole = shards.as_ref().is_none_or(|s| s.iter().all(ShardHealth::complete));
    Ok(match step {
        Step::Settled if !observed.moving && replica_mode && !whole => {
            Action::requeue(ctx.settings.busy_requeue)
        }
        // With replicas, look again now and then: lags change without any object changing.
        Step::Settled if !observed.moving && replica_mode => Action::requeue(Duration::from_secs(10)),
        Step::Settled if !observed.moving => Action::requeue(Duration::from_secs(300)),
        _ => Action::requeue(ctx.settings.busy_requeue),
    })
}

/// With replicas, on a settled cluster: forgets the pod restarted last once it is back (or gone
/// for good, or seen never to have been evicted, or after [`RESTART_PATIENCE`]), then evicts the
/// next outdated pod if one may go now ([`members::next_restart`]). Returns the pod waited for
/// now (for `status.restarting`).
///
/// The restart is recorded in the status *before* the eviction is asked for: an operator that
/// stops between the two leaves its successor waiting for that pod. Had it stopped before the
/// eviction went, the successor sees the pod's process still running from before the record
/// ([`never_evicted`]) and stops waiting; the reverse order would leave a window in which a pod
/// is evicted and no record of it survives the operator.
async fn restart_outdated(
    ctx: &Context,
    cc: &CacheCluster,
    views: &[PodView],
    t: &Topology,
    stats: &BTreeMap<String, NodeStats>,
    shards: &[ShardHealth],
) -> Result<Option<PodRestart>, Error> {
    let ns = cc.namespace().unwrap_or_default();
    let key = (ns.clone(), cc.name_any());
    let all_synced = shards.iter().all(ShardHealth::complete);
    let recorded = cc.status.as_ref().and_then(|s| s.restarting.as_ref());
    let mut waiting = waited_for(ctx.restarting.lock().get(&key), recorded);
    if let Some(r) = &waiting {
        let member = |addr: &str| {
            let s = stats.get(addr)?;
            Some((Duration::from_millis(s.uptime_ms), health::whole(shards, addr)))
        };
        // Also forgotten when the pod is gone for good (scaled away), or after a long while (then
        // every shard being whole is the only rule left).
        let elapsed = r.elapsed();
        let scaled_away = elapsed > Duration::from_secs(60) && !views.iter().any(|p| p.name == r.pod);
        if members::restarted(views, t, &r.pod, elapsed, member)
            || never_evicted(views, stats, &r.pod, elapsed)
            || scaled_away
            || elapsed > RESTART_PATIENCE
        {
            ctx.restarting.lock().remove(&key);
            waiting = None;
        }
    }
    match members::next_restart(views, t, all_synced && waiting.is_none()) {
        Some(pod) => {
            let r = PodRestart { pod: pod.clone(), evicted_at: now_rfc3339() };
            if let Err(e) = record_restart(ctx, cc, &ns, Some(&r)).await {
                tracing::warn!(%pod, error = %e, "restart deferred: could not record it in the status first");
                return Ok(waiting);
            }
            ctx.restarting.lock().insert(key.clone(), r.clone());
            match restart(ctx, cc, &ns, &pod).await? {
                Eviction::Granted | Eviction::Unanswered => waiting = Some(r),
                Eviction::Refused => {
                    // Nothing to wait for: take the record back (if that write fails, the
                    // successor finds the pod never evicted and forgets it all the same).
                    ctx.restarting.lock().remove(&key);
                    if let Err(e) = record_restart(ctx, cc, &ns, None).await {
                        tracing::warn!(%pod, error = %e, "could not clear the restart record");
                    }
                }
            }
        }
        None => {
            let outdated: Vec<&str> = views.iter().filter(|p| p.outdated).map(|p| p.name.as_str()).collect();
            if !outdated.is_empty() {
                let waiting = waiting.as_ref().map(|r| r.pod.as_str());
                tracing::info!(cluster = %key.1, ?outdated, all_synced, ?waiting, "restarts wait for every shard to be whole");
            }
        }
    }
    Ok(waiting)
}

/// How long after a restart's record its pod must show the eviction (a deletion under way, or a
/// new process) before the record is taken for one whose eviction never went: ample for the
/// operator's pod list and the node's stats to catch up with a granted eviction.
const EVICTION_SHOWS_WITHIN: Duration = Duration::from_secs(30);

/// Whether the pod of a restart recorded `elapsed` ago was never evicted: well after the record,
/// it is ready, not being deleted, and its node process has run since before the record (an
/// eviction deletes the pod at once, and its StatefulSet's new pod runs a new process).
fn never_evicted(
    views: &[PodView],
    stats: &BTreeMap<String, NodeStats>,
    pod: &str,
    elapsed: Duration,
) -> bool {
    if elapsed <= EVICTION_SHOWS_WITHIN {
        return false;
    }
    let Some(view) = views.iter().find(|p| p.name == pod && p.ready && !p.terminating) else {
        return false;
    };
    view.addr
        .as_deref()
        .and_then(|a| stats.get(a))
        .is_some_and(|s| Duration::from_millis(s.uptime_ms) > elapsed)
}

/// Writes `status.restarting` (None: clears it) at once, not only with the reconcile's report.
async fn record_restart(
    ctx: &Context,
    cc: &CacheCluster,
    ns: &str,
    r: Option<&PodRestart>,
) -> Result<(), kube::Error> {
    let patch = serde_json::json!({ "status": { "restarting": r } });
    let api: Api<CacheCluster> = Api::namespaced(ctx.client.clone(), ns);
    api.patch_status(&cc.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await.map(drop)
}

/// The restarted pod to wait for: this process's own record (fresher than an object read before
/// its status write landed), else the one in the status (written by an earlier leader).
fn waited_for(own: Option<&PodRestart>, recorded: Option<&PodRestart>) -> Option<PodRestart> {
    own.or(recorded).cloned()
}

/// The highest member index whose pod the topology names (0 if none).
fn listed_members(t: &Topology, pods: &[PodView]) -> u32 {
    pods.iter()
        .filter(|p| p.addr.as_deref().is_some_and(|a| t.member(a).is_some()))
        .map(|p| p.member)
        .max()
        .unwrap_or(0)
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

/// How long a cluster's Secret, once made sure of, is taken to exist: a reconcile does not POST
/// it again before then (a Secret deleted by hand is back within this long).
const SECRET_RECHECK: Duration = Duration::from_secs(600);

/// The cluster's secret, and its Secret made sure of. The value is derived from the operator's
/// key (`resources::derive_cluster_secret`), so the operator never reads a Secret (its RBAC has
/// `create` on Secrets and nothing else); the Secret is created with it for the pods, and a
/// 409 means it is there already (at most every [`SECRET_RECHECK`] per cluster). Never
/// rewritten: nodes and routers read it at start.
async fn cluster_secret(ctx: &Context, ns: &str, cc: &CacheCluster) -> Result<ClusterSecret, Error> {
    let secret = resources::derive_cluster_secret(&ctx.settings.secret_key, cc);
    let uid = cc.metadata.uid.clone().unwrap_or_default();
    if ctx.secrets_made.lock().get(&uid).is_some_and(|at| at.elapsed() < SECRET_RECHECK) {
        return Ok(secret);
    }
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    match api.create(&PostParams::default(), &resources::cluster_secret(cc, secret.expose())).await {
        Ok(_) => {
            let note =
                format!("Secret {}: the secret every node requires", resources::cluster_secret_name(cc));
            event(ctx, cc, EventType::Normal, "SecretCreated", note).await;
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    ctx.secrets_made.lock().insert(uid, std::time::Instant::now());
    Ok(secret)
}

/// Asks the primary at `from` to hand its shard over to `to` (it pauses, waits for `to` to
/// catch up, and the failover writer promotes `to`).
async fn hand_over(from: &str, to: &str, secret: &ClusterSecret) -> Result<(), String> {
    let options = ClientOptions {
        request_timeout: Some(HANDOVER_TIMEOUT * 2),
        credentials: Credentials::secret(Some(secret.clone())),
        ..ClientOptions::admin()
    };
    let req = HandoverRequest { replica: to.to_string(), timeout_ms: HANDOVER_TIMEOUT.as_millis() as u64 };
    // Bounded as a whole (see `health::probe`): a reconcile must never wait on one node forever.
    let call = async {
        let mut c = client::connect(from, &options).await.map_err(|e| e.to_string())?;
        c.handover(req).await.map_err(|s| s.message().to_string())?;
        Ok(())
    };
    tokio::time::timeout(HANDOVER_TIMEOUT * 3, call).await.map_err(|_| format!("{from} did not answer"))?
}

/// What became of an eviction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Eviction {
    Granted,
    /// The budget said not now (or the pod is gone): nothing happened.
    Refused,
    /// No answer in time: it may or may not have gone.
    Unanswered,
}

/// Evicts node pod `pod` so that its StatefulSet recreates it from the current template. An
/// eviction, not a delete: the shard's PodDisruptionBudget has the last word.
async fn restart(ctx: &Context, cc: &CacheCluster, ns: &str, pod: &str) -> Result<Eviction, Error> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    // The client retries a 429 (which here means "the budget says not now") with a backoff that
    // grows to minutes; the reconcile must not wait that long, the next one asks again.
    let Ok(evicted) = tokio::time::timeout(EVICT_TIMEOUT, api.evict(pod, &EvictParams::default())).await
    else {
        tracing::info!(%pod, "no answer to the eviction in time; the record stays until the pod shows whether it went");
        return Ok(Eviction::Unanswered);
    };
    match evicted {
        Ok(_) => {
            ctx.metrics.pod_restarts.inc();
            let note = format!("{pod}: restarting it on its StatefulSet's new template (one pod at a time)");
            event(ctx, cc, EventType::Normal, "RestartingNode", note).await;
            Ok(Eviction::Granted)
        }
        // 429: the budget says not now; the next look tries again.
        Err(kube::Error::Api(e)) if e.code == 429 || e.code == 404 => {
            tracing::info!(%pod, reason = %e.message, "restart deferred");
            Ok(Eviction::Refused)
        }
        Err(e) => Err(e.into()),
    }
}

/// Starts the coordinator for `cc` in the background: toward `target`, or (None) finishing what
/// the published topology describes.
fn start_move(
    ctx: &Arc<Context>,
    cc: &CacheCluster,
    store: ConfigMapRegistry,
    secret: &ClusterSecret,
    target: Option<Vec<shoal_wire::NodeInfo>>,
    what: String,
    resharding: bool,
) {
    let progress: Arc<Mutex<Option<Progress>>> = Arc::default();
    let sink = progress.clone();
    let cluster = cc.name_any();
    let coordinator = Coordinator::new(store, Credentials::secret(Some(secret.clone())))
        .with_timeout(ctx.settings.step_timeout)
        .with_progress(move |p| {
            tracing::info!(
                %cluster,
                version = p.version,
                slots_done = p.slots_done,
                slots_total = p.slots_total,
                keys = p.keys_moved,
                "resharding progress"
            );
            *sink.lock() = Some(p.clone());
        });
    let key = (cc.namespace().unwrap_or_default(), cc.name_any());
    let mut moves = ctx.moves.lock();
    if !ctx.may_start() {
        return;
    }
    let task = tokio::spawn(async move {
        let result = match target {
            Some(t) => coordinator.reshard(&t).await,
            None => coordinator.resume().await,
        };
        result.map_err(|e| e.to_string())
    });
    ctx.metrics.moves_started.inc();
    ctx.metrics.moves_running.add(1);
    moves.insert(key, Move { task, progress, what, resharding });
}

pub fn error_policy(cc: Arc<CacheCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_errors.inc();
    tracing::warn!(cluster = %cc.name_any(), %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// API-call scenarios: one reconcile against a scripted fake API server, call by call.
#[cfg(test)]
mod tests {
    use http::Method;
    use serde_json::{Value, json};

    use kube::runtime::events::Reporter;
    use shoal_coordinator::failover::FailoverOptions;

    use super::*;
    use crate::context::{Settings, render_metrics};
    use crate::crd::CacheClusterStatus;
    use crate::fake_api::{Call, Fake, call, echo, status};
    use crate::resources::tests::cluster;

    const NS: &str = "/api/v1/namespaces/shop";
    const APPS: &str = "/apis/apps/v1/namespaces/shop";
    const POLICY: &str = "/apis/policy/v1/namespaces/shop";

    fn context(client: Client, node_addresses: AddressMode) -> Arc<Context> {
        let settings = Settings {
            node_addresses,
            step_timeout: Duration::from_secs(60),
            busy_requeue: Duration::from_secs(2),
            // The writer's first look comes long after the test: its calls are not scripted.
            failover: FailoverOptions { interval: Duration::from_secs(3600), ..FailoverOptions::default() },
            secret_key: Arc::from(&b"test operator key"[..]),
        };
        Arc::new(Context::new(client, settings, Reporter { controller: "test".into(), instance: None }))
    }

    /// The cluster secret's Secret created (409: it exists, as it does after the first
    /// reconcile), then the objects applied before observing, in order (server-side apply
    /// PATCHes).
    fn applies() -> Vec<Call> {
        let made = call(Method::POST, format!("{NS}/secrets"), 409, status(409, "AlreadyExists"));
        std::iter::once(made)
            .chain(
                [
                    format!("{NS}/serviceaccounts/demo-node"),
                    format!("{NS}/serviceaccounts/demo-router"),
                    format!("{NS}/services/demo-node"),
                    format!("{NS}/services/demo"),
                    format!("{POLICY}/poddisruptionbudgets/demo-router"),
                    "/apis/networking.k8s.io/v1/namespaces/shop/networkpolicies/demo-node".into(),
                    "/apis/networking.k8s.io/v1/namespaces/shop/networkpolicies/demo-router".into(),
                ]
                .into_iter()
                .map(|p| echo(Method::PATCH, p)),
            )
            .collect()
    }

    #[tokio::test]
    async fn a_cluster_secret_is_derived_and_its_secret_created_never_read() {
        let cc = cluster(json!({"shards": 3}));
        let (client, fake) = Fake::start(vec![
            echo(Method::POST, format!("{NS}/secrets")).checking(|s| {
                assert_eq!(s["metadata"]["name"], "demo-cluster-secret");
                assert_eq!(s["metadata"]["ownerReferences"][0]["kind"], "CacheCluster");
                let value = s["stringData"]["secret"].as_str().unwrap();
                let derived =
                    resources::derive_cluster_secret(b"test operator key", &cluster(json!({"shards": 3})));
                assert_eq!(value, derived.expose());
            }),
            echo(Method::POST, "/apis/events.k8s.io/v1/namespaces/shop/events")
                .checking(|ev| assert_eq!(ev["reason"], "SecretCreated")),
            // There already: the same value, and nothing read.
            call(Method::POST, format!("{NS}/secrets"), 409, status(409, "AlreadyExists")),
            call(Method::POST, format!("{NS}/secrets"), 403, status(403, "Forbidden")),
        ]);
        let ctx = context(client, AddressMode::Dns);
        let first = cluster_secret(&ctx, "shop", &cc).await.unwrap();
        assert_eq!(first.expose().len(), 64);
        // Made sure of: the next reconciles do not ask again (no call expected) ...
        assert_eq!(cluster_secret(&ctx, "shop", &cc).await.unwrap(), first);
        // ... until SECRET_RECHECK has passed.
        ctx.secrets_made.lock().clear();
        assert_eq!(cluster_secret(&ctx, "shop", &cc).await.unwrap(), first);
        ctx.secrets_made.lock().clear();
        let denied = cluster_secret(&ctx, "shop", &cc).await.unwrap_err();
        assert!(denied.to_string().contains("Forbidden"), "{denied}");
        fake.done();
    }

    fn list(kind: &str, items: Vec<Value>) -> Value {
        json!({"kind": kind, "apiVersion": "v1", "metadata": {}, "items": items})
    }

    fn configmap(t: &Topology) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "demo-topology", "namespace": "shop", "resourceVersion": "5"},
               "data": {"topology.json": t.to_json()}})
    }

    fn status_patch(cc: &CacheCluster, check: impl Fn(&Value) + Send + Sync + 'static) -> Call {
        let path = "/apis/shoal.dev/v1alpha1/namespaces/shop/cacheclusters/demo/status";
        call(Method::PATCH, path, 200, serde_json::to_value(cc).unwrap()).checking(check)
    }

    fn ready_pod(name: &str, ip: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "shop"},
               "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]}})
    }

    #[tokio::test]
    async fn a_new_cluster_gets_its_statefulset_first_and_no_routers_before_a_topology() {
        let cc = cluster(json!({"shards": 3}));
        let mut calls = applies();
        calls.extend([
            call(Method::GET, format!("{NS}/configmaps/demo-topology"), 404, status(404, "NotFound")),
            call(Method::GET, format!("{APPS}/statefulsets"), 200, list("StatefulSetList", vec![])),
            call(Method::GET, format!("{NS}/pods"), 200, list("PodList", vec![])),
            echo(Method::POST, "/apis/events.k8s.io/v1/namespaces/shop/events").checking(|ev| {
                assert_eq!(ev["reason"], "ScalingNodes");
                assert_eq!(ev["note"], "node StatefulSet: 0 -> 3 pods");
            }),
            echo(Method::PATCH, format!("{APPS}/statefulsets/demo-node")).checking(|sts| {
                assert_eq!(sts["spec"]["replicas"], 3);
                assert!(sts["spec"].get("updateStrategy").is_none(), "no replicas: RollingUpdate as ever");
            }),
            echo(Method::PATCH, format!("{POLICY}/poddisruptionbudgets/demo-node")),
            call(Method::GET, format!("{POLICY}/poddisruptionbudgets"), 200, list("PodDisruptionBudgetList", vec![])),
            // Still no topology: the router Deployment is not applied (no call for it).
            call(Method::GET, format!("{NS}/configmaps/demo-topology"), 404, status(404, "NotFound")),
            status_patch(&cc, |patch| {
                let s = &patch["status"];
                assert_eq!(s["phase"], "Pending", "{s}");
                assert_eq!(s["selector"], "app.kubernetes.io/component=node,app.kubernetes.io/instance=demo,app.kubernetes.io/name=shoal");
                let ready = s["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
                assert_eq!(ready["status"], "False");
                assert_eq!(s["shardStatus"], json!([]), "written empty: a merge patch keeps what it omits");
            }),
        ]);
        let (client, fake) = Fake::start(calls);
        let ctx = context(client, AddressMode::Dns);
        let action = reconcile(Arc::new(cc), ctx.clone()).await.unwrap();
        assert_eq!(action, Action::requeue(Duration::from_secs(2)), "busy: look again soon");
        assert_eq!(ctx.writers_running(), 0, "no replicas, no failover writer");
        fake.done();
    }

    #[tokio::test]
    async fn a_settled_cluster_applies_its_routers_reports_ready_and_rests() {
        let cc = cluster(json!({"shards": 3}));
        let addrs: Vec<String> = (0..3).map(|i| format!("demo-node-{i}.demo-node.shop.svc:7001")).collect();
        let cm = configmap(&Topology::even(&addrs));
        let sts = serde_json::to_value(resources::node_statefulset(&cc, 0, 3, Placement::Ordinal)).unwrap();
        let pods =
            (0..3).map(|i| ready_pod(&format!("demo-node-{i}"), &format!("127.0.0.{}", i + 10))).collect();
        let mut calls = applies();
        calls.extend([
            call(Method::GET, format!("{NS}/configmaps/demo-topology"), 200, cm.clone()),
            call(Method::GET, format!("{APPS}/statefulsets"), 200, list("StatefulSetList", vec![sts])),
            call(Method::GET, format!("{NS}/pods"), 200, list("PodList", pods)),
            // Settled: the StatefulSet keeps its size, no event, no move.
            echo(Method::PATCH, format!("{APPS}/statefulsets/demo-node")).checking(|sts| {
                assert_eq!(sts["spec"]["replicas"], 3);
            }),
            echo(Method::PATCH, format!("{POLICY}/poddisruptionbudgets/demo-node")),
            // A shard budget left from when the cluster had replicas goes.
            call(
                Method::GET,
                format!("{POLICY}/poddisruptionbudgets"),
                200,
                list(
                    "PodDisruptionBudgetList",
                    vec![
                        serde_json::to_value(resources::pdb(&cc, Component::Node)).unwrap(),
                        serde_json::to_value(resources::shard_pdb(&cc, 0, 2, true)).unwrap(),
                    ],
                ),
            ),
            echo(Method::DELETE, format!("{POLICY}/poddisruptionbudgets/demo-shard-0")),
            call(Method::GET, format!("{NS}/configmaps/demo-topology"), 200, cm),
            echo(Method::PATCH, format!("{APPS}/deployments/demo-router")),
            status_patch(&cc, |patch| {
                let s = &patch["status"];
                assert_eq!(
                    (s["phase"].as_str(), s["shards"].as_i64(), s["readyShards"].as_i64()),
                    (Some("Ready"), Some(3), Some(3)),
                    "{s}"
                );
                assert_eq!(s["topologyVersion"], 1);
            }),
        ]);
        let (client, fake) = Fake::start(calls);
        let action = reconcile(Arc::new(cc), context(client, AddressMode::Dns)).await.unwrap();
        assert_eq!(action, Action::requeue(Duration::from_secs(300)), "settled: rest");
        fake.done();
    }

    #[tokio::test]
    async fn a_preempted_move_is_stopped_and_counted_and_nothing_starts_after_leadership_ends() {
        let (client, fake) = Fake::start(vec![]);
        let ctx = context(client, AddressMode::Dns);
        let key = ("shop".to_string(), "demo".to_string());
        let task = tokio::spawn(async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(Topology::even(&["a:1".into()]))
        });
        ctx.metrics.moves_running.add(1);
        let mv = Move {
            task,
            progress: Arc::default(),
            what: "resharding 2 -> 3 shards".into(),
            resharding: true,
        };
        ctx.moves.lock().insert(key.clone(), mv);
        ctx.preempt_move(&key);
        assert!(!ctx.moves.lock().contains_key(&key), "the next reconcile resumes it from the topology");
        assert_eq!((ctx.metrics.moves_running.get(), ctx.metrics.moves_preempted.get()), (0, 1));
        ctx.preempt_move(&key);
        assert_eq!(ctx.metrics.moves_preempted.get(), 1, "nothing to stop twice");

        ctx.stop_background();
        let cc = cluster(json!({"shards": 2, "replicasPerShard": 1}));
        let store = ConfigMapRegistry::new(Api::namespaced(ctx.client.clone(), "shop"), &cc);
        let secret = ClusterSecret::generate();
        start_move(&ctx, &cc, store.clone(), &secret, None, "x".into(), true);
        failover::ensure(&ctx, &cc, store, &secret);
        assert!(
            ctx.moves.lock().is_empty() && ctx.writers_running() == 0,
            "no longer leading: nothing starts"
        );
        fake.done();
    }

    /// Replicas asked for on a settled cluster: the replicas' StatefulSet, per-shard budgets in
    /// place of the cluster-wide one, the replicas listed in the next topology version, and the
    /// failover writer started. Node addresses are pod IPs on loopback where nothing listens,
    /// so every probe fails fast: primaries not serving, budgets closed, Degraded.
    #[tokio::test]
    async fn replicas_get_their_statefulset_budgets_topology_entries_and_a_failover_writer() {
        let cc = cluster(json!({"shards": 2, "replicasPerShard": 1}));
        let t = Topology::even(&["127.9.9.1:7001".into(), "127.9.9.2:7001".into()]);
        let sts = serde_json::to_value(resources::node_statefulset(&cc, 0, 2, Placement::Ordinal)).unwrap();
        let pods = vec![
            ready_pod("demo-node-0", "127.9.9.1"),
            ready_pod("demo-node-1", "127.9.9.2"),
            ready_pod("demo-node-r1-0", "127.9.9.3"),
            ready_pod("demo-node-r1-1", "127.9.9.4"),
        ];
        let mut listed = t.clone();
        listed.version = 2;
        listed.nodes[0].replicas = vec!["127.9.9.3:7001".into()];
        listed.nodes[1].replicas = vec!["127.9.9.4:7001".into()];
        let shard_pdb = |i: u32| {
            echo(Method::PATCH, format!("{POLICY}/poddisruptionbudgets/demo-shard-{i}")).checking(move |p| {
                assert_eq!(p["spec"]["minAvailable"], 2, "the shard is not redundant: both pods stay");
                assert_eq!(
                    p["spec"]["selector"]["matchLabels"]["apps.kubernetes.io/pod-index"],
                    i.to_string()
                );
                assert_eq!(p["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
            })
        };
        let mut calls = applies();
        calls.extend([
            call(Method::GET, format!("{NS}/configmaps/demo-topology"), 200, configmap(&t)),
            call(Method::GET, format!("{APPS}/statefulsets"), 200, list("StatefulSetList", vec![sts])),
            call(Method::GET, format!("{NS}/pods"), 200, list("PodList", pods)),
            echo(Method::PATCH, format!("{APPS}/statefulsets/demo-node")).checking(|sts| {
                assert_eq!(sts["spec"]["updateStrategy"]["type"], "OnDelete");
                let c = &sts["spec"]["template"]["spec"]["containers"][0];
                let args = c["args"].to_string();
                assert!(args.contains(r#""--advertise","$(POD_IP):7001""#), "{args}");
                assert_eq!(c["env"][0], json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}));
                assert_eq!(c["env"][1]["valueFrom"]["secretKeyRef"]["name"], "demo-cluster-secret");
            }),
            echo(Method::PATCH, format!("{APPS}/statefulsets/demo-node-r1")).checking(|sts| {
                assert_eq!(sts["spec"]["replicas"], 2);
                assert_eq!(sts["spec"]["selector"]["matchLabels"]["shoal.dev/member"], "1");
                assert_eq!(sts["spec"]["serviceName"], "demo-node");
            }),
            shard_pdb(0),
            shard_pdb(1),
            call(
                Method::GET,
                format!("{POLICY}/poddisruptionbudgets"),
                200,
                list("PodDisruptionBudgetList", vec![serde_json::to_value(resources::pdb(&cc, Component::Node)).unwrap()]),
            ),
            echo(Method::DELETE, format!("{POLICY}/poddisruptionbudgets/demo-node")),
            // The replicas listed: one version up, compare-and-swap on what was read.
            call(Method::GET, format!("{NS}/configmaps/demo-topology"), 200, configmap(&t)),
            call(Method::PUT, format!("{NS}/configmaps/demo-topology"), 200, configmap(&listed)).checking(|cm| {
                assert_eq!(cm["metadata"]["resourceVersion"], "5");
                let t = Topology::from_json(cm["data"]["topology.json"].as_str().unwrap()).unwrap();
                assert_eq!(t.version, 2);
                assert_eq!(t.nodes[0].replicas, ["127.9.9.3:7001"]);
                assert_eq!(t.nodes[1].replicas, ["127.9.9.4:7001"]);
            }),
            echo(Method::POST, "/apis/events.k8s.io/v1/namespaces/shop/events").checking(|ev| {
                assert_eq!(ev["reason"], "MembersChanged");
                assert!(ev["note"].as_str().unwrap().contains("replicas [\"127.9.9.3:7001\"] added"), "{ev}");
            }),
            call(Method::GET, format!("{NS}/configmaps/demo-topology"), 200, configmap(&listed)),
            echo(Method::PATCH, format!("{APPS}/deployments/demo-router")),
            status_patch(&cc, |patch| {
                let s = &patch["status"];
                assert_eq!(s["phase"], "Degraded", "{s}");
                let d = s["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Degraded").unwrap();
                assert_eq!(d["reason"], "ShardsNotRedundant");
                assert_eq!(d["message"], "shard 0: primary 127.9.9.1:7001 is not serving; shard 1: primary 127.9.9.2:7001 is not serving");
                let shards = s["shardStatus"].as_array().unwrap();
                assert_eq!(shards[0]["primaryPod"], "demo-node-0");
                assert_eq!(shards[0]["primaryServing"], false);
            }),
        ]);
        let (client, fake) = Fake::start(calls);
        let ctx = context(client, AddressMode::PodIp);
        let action = reconcile(Arc::new(cc), ctx.clone()).await.unwrap();
        assert_eq!(action, Action::requeue(Duration::from_secs(2)), "shards not whole: look again soon");
        assert_eq!(ctx.writers_running(), 1, "the failover writer runs");
        assert!(render_metrics(&ctx).contains("shoal_operator_failover_writers 1"));
        assert!(render_metrics(&ctx).contains("shoal_operator_member_changes_total 1"));
        ctx.stop_background();
        fake.done();
    }

    #[test]
    fn the_pod_waited_for_is_this_process_record_first_then_the_status() {
        let pod = |name: &str| PodRestart { pod: name.into(), evicted_at: "2026-11-21T09:59:00Z".into() };
        let (own, recorded) = (pod("demo-node-r1-0"), pod("demo-node-r0-1"));
        // The status this reconcile read may predate the write that named this process's pod.
        assert_eq!(waited_for(Some(&own), Some(&recorded)), Some(own.clone()));
        // A new leader has only the status.
        assert_eq!(waited_for(None, Some(&recorded)), Some(recorded));
        assert_eq!(waited_for(Some(&own), None), Some(own));
        assert_eq!(waited_for(None, None), None);
    }

    /// One shard whose primary and replica pods are both on an older template, both whole.
    fn outdated_shard() -> (Topology, Vec<PodView>, BTreeMap<String, NodeStats>, Vec<ShardHealth>) {
        let mut t = Topology::even(&["p:1".to_string()]);
        t.nodes[0].replicas = vec!["r:1".into()];
        let pod = |name: &str, member, addr: &str| PodView {
            name: name.into(),
            shard: 0,
            member,
            addr: Some(addr.into()),
            ready: true,
            terminating: false,
            outdated: true,
        };
        let views = vec![pod("demo-node-0", 0, "p:1"), pod("demo-node-r1-0", 1, "r:1")];
        // Both processes have run for an hour: neither is a restarted one.
        let old = NodeStats { uptime_ms: 3_600_000, ..Default::default() };
        let stats = BTreeMap::from([("p:1".to_string(), old.clone()), ("r:1".to_string(), old)]);
        let replica =
            health::ReplicaHealth { addr: "r:1".into(), synced: true, lag: Some(0), lag_ms: Some(0) };
        let shards = vec![ShardHealth {
            id: 0,
            primary: "p:1".into(),
            primary_serving: true,
            replicas: vec![replica],
        }];
        (t, views, stats, shards)
    }

    #[tokio::test]
    async fn a_restart_is_recorded_in_the_status_and_a_new_leader_waits_for_it() {
        let (t, views, stats, shards) = outdated_shard();
        let cc = cluster(json!({"shards": 1, "replicasPerShard": 1}));
        let evicted = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"});
        let (client, fake) = Fake::start(vec![
            // Recorded first, before the eviction is asked for (and before the reconcile's
            // report): an operator stopped in between leaves the record behind.
            status_patch(&cc, |p| {
                assert_eq!(p["status"]["restarting"]["pod"], "demo-node-r1-0");
                let at = p["status"]["restarting"]["evictedAt"].as_str().unwrap();
                assert!(at.parse::<k8s_openapi::jiff::Timestamp>().is_ok(), "{at}");
                assert_eq!(p["status"].as_object().unwrap().len(), 1, "nothing else is written: {p}");
            }),
            // The replica goes first.
            call(Method::POST, format!("{NS}/pods/demo-node-r1-0/eviction"), 201, evicted),
            echo(Method::POST, "/apis/events.k8s.io/v1/namespaces/shop/events")
                .checking(|ev| assert_eq!(ev["reason"], "RestartingNode")),
        ]);
        let first = context(client.clone(), AddressMode::Dns);
        let waiting = restart_outdated(&first, &cc, &views, &t, &stats, &shards).await.unwrap();
        let waiting = waiting.expect("the evicted pod is waited for");
        assert_eq!(waiting.pod, "demo-node-r1-0");
        // The same operator, on an object read before that status landed: its own record holds
        // the next restart back (no call is scripted).
        assert_eq!(
            restart_outdated(&first, &cc, &views, &t, &stats, &shards).await.unwrap(),
            Some(waiting.clone())
        );

        // A new leader (nothing in memory) reads the status: it waits for that pod too, although
        // every pod looks ready and whole (the old process may still answer while it stops).
        let mut recorded = cc.clone();
        recorded.status =
            Some(CacheClusterStatus { restarting: Some(waiting.clone()), ..Default::default() });
        let second = context(client, AddressMode::Dns);
        assert_eq!(
            restart_outdated(&second, &recorded, &views, &t, &stats, &shards).await.unwrap(),
            Some(waiting)
        );
        fake.done();
    }

    #[tokio::test]
    async fn a_refused_eviction_takes_its_record_back() {
        let (t, views, stats, shards) = outdated_shard();
        let cc = cluster(json!({"shards": 1, "replicasPerShard": 1}));
        let (client, fake) = Fake::start(vec![
            status_patch(&cc, |p| assert_eq!(p["status"]["restarting"]["pod"], "demo-node-r1-0")),
            // 404: the pod went meanwhile (a 429, the budget's "not now", is retried by the
            // client until the eviction's own timeout, which keeps the record: see the next test).
            call(Method::POST, format!("{NS}/pods/demo-node-r1-0/eviction"), 404, status(404, "NotFound")),
            status_patch(&cc, |p| {
                assert!(p["status"]["restarting"].is_null(), "the record is cleared: {p}");
            }),
        ]);
        let ctx = context(client, AddressMode::Dns);
        assert_eq!(restart_outdated(&ctx, &cc, &views, &t, &stats, &shards).await.unwrap(), None);
        assert!(ctx.restarting.lock().is_empty(), "nor kept in memory");
        fake.done();
    }

    #[tokio::test]
    async fn a_leader_that_stopped_between_its_record_and_the_eviction_holds_its_successor_back_only_briefly()
    {
        let (t, views, stats, shards) = outdated_shard();
        // The record names the replica's pod, but its process has run for an hour: the eviction
        // never went out.
        let mut cc = cluster(json!({"shards": 1, "replicasPerShard": 1}));
        let ago = |secs: i64| {
            let at = k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(secs);
            PodRestart { pod: "demo-node-r1-0".into(), evicted_at: at.to_string() }
        };
        // Recorded moments ago: the successor waits (the eviction may still be showing).
        cc.status = Some(CacheClusterStatus { restarting: Some(ago(5)), ..Default::default() });
        let (client, fake) = Fake::start(vec![]);
        let ctx = context(client, AddressMode::Dns);
        let waiting = restart_outdated(&ctx, &cc, &views, &t, &stats, &shards).await.unwrap();
        assert_eq!(waiting.map(|r| r.pod).as_deref(), Some("demo-node-r1-0"));
        fake.done();

        // A minute on, with the pod ready, not being deleted and the same process: it was never
        // evicted. The record is forgotten and the restart asked for again (record, eviction).
        cc.status = Some(CacheClusterStatus { restarting: Some(ago(60)), ..Default::default() });
        let evicted = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"});
        let (client, fake) = Fake::start(vec![
            status_patch(&cc, |p| assert_eq!(p["status"]["restarting"]["pod"], "demo-node-r1-0")),
            call(Method::POST, format!("{NS}/pods/demo-node-r1-0/eviction"), 201, evicted),
            echo(Method::POST, "/apis/events.k8s.io/v1/namespaces/shop/events"),
        ]);
        let ctx = context(client, AddressMode::Dns);
        let waiting = restart_outdated(&ctx, &cc, &views, &t, &stats, &shards).await.unwrap().unwrap();
        assert!(waiting.elapsed() < Duration::from_secs(30), "a fresh record: {waiting:?}");
        fake.done();

        // Had the pod been evicted, it would show: being deleted, or a new process.
        let mut deleting = views.clone();
        deleting[1].terminating = true;
        assert!(!never_evicted(&deleting, &stats, "demo-node-r1-0", Duration::from_secs(60)));
        let mut fresh = stats.clone();
        fresh.get_mut("r:1").unwrap().uptime_ms = 20_000;
        assert!(!never_evicted(&views, &fresh, "demo-node-r1-0", Duration::from_secs(60)));
        assert!(never_evicted(&views, &stats, "demo-node-r1-0", Duration::from_secs(60)));
    }
}
