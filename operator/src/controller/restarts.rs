//! Restarting outdated node pods, with replicas: one at a time, only while every shard is
//! whole, each an eviction (the shard's PodDisruptionBudget has the last word), and each waited
//! for until its pod is back and whole. Which pod goes next is [`members::next_restart`]'s
//! decision; this is the part that evicts and remembers.
//!
//! The pod waited for is remembered twice: in this process ([`Context`]'s `restarting`) and in
//! the cluster's status (`status.restarting`), where a new leader finds it.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, EvictParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use shoal_wire::Topology;
use shoal_wire::proto::NodeStats;

use super::api::{Error, event, now_rfc3339};
use crate::context::Context;
use crate::crd::{CacheCluster, PodRestart};
use crate::health::{self, ShardHealth};
use crate::members::{self, PodView};

/// How long one eviction may take, its retries included.
const EVICT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a restarted pod may take to be whole again before the next restart stops waiting
/// for it in particular (it still waits for every shard to be whole).
const RESTART_PATIENCE: Duration = Duration::from_secs(1800);

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
pub(super) async fn restart_outdated(
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
pub(super) fn waited_for(own: Option<&PodRestart>, recorded: Option<&PodRestart>) -> Option<PodRestart> {
    own.or(recorded).cloned()
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

#[cfg(test)]
mod tests {
    use http::Method;
    use serde_json::json;

    use super::*;
    use crate::controller::tests::{NS, context, status_patch};
    use crate::crd::CacheClusterStatus;
    use crate::fake_api::{Fake, call, echo, status};
    use crate::resources::AddressMode;
    use crate::resources::tests::cluster;

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
