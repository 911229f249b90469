//! The reconciler: one reconcile of a CacheCluster, in the stages its files are named after.
//!
//! ```text
//! spec::Wanted::of          the spec, checked
//! secret::cluster_secret    the cluster's Secret, made sure of
//! apply_fixed_objects       ServiceAccounts, Services, router budget, NetworkPolicies
//! observe::cluster          topology, node StatefulSets and pods, the move that ended, probes
//! plan::decide              pure: scaling::next_step, and the node StatefulSets it needs
//! moves::settle             Events and errors of the move that ended
//! nodes::scale              node StatefulSets and PodDisruptionBudgets
//! moves::take_step          publish the first topology | start or resume a move
//! replicas::tend            members::membership: replica lists, hand-overs; restarts::restart_outdated
//! start_routers_and_failover  routers once there is a topology; the failover writer with replicas
//! report::status            status::compute, the status subresource, when to look again
//! ```
//!
//! A reconcile never blocks on a data move. Moves run as background tasks (`moves`); each
//! reconcile looks at the task's progress and, once it ends, takes the next step. With
//! replicas, the cluster's failover writer is a background task too ([`crate::failover`]), and a
//! failover decision stops a running move, which the next reconcile resumes from the topology
//! the decision published. What the stages share between reconciles is in
//! [`crate::context::Context`].

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use shoal_coordinator::Registry;
use shoal_wire::Topology;
use shoal_wire::auth::ClusterSecret;

use crate::context::Context;
use crate::crd::CacheCluster;
use crate::registry::ConfigMapRegistry;
use crate::resources::{self, Component};
use crate::{failover, members};

mod api;
mod moves;
mod nodes;
mod observe;
mod plan;
mod replicas;
mod report;
mod restarts;
mod secret;
mod spec;

pub use api::Error;
use api::apply;
use report::Acted;
use spec::Wanted;

pub async fn reconcile(cc: Arc<CacheCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.metrics.reconciles.inc();
    let wanted = Wanted::of(&cc)?;
    // First: every node requires the secret, and every call below to a node carries it.
    let secret = secret::cluster_secret(&ctx, &wanted.ns, &cc).await?;
    apply_fixed_objects(&ctx.client, &wanted.ns, &cc).await?;
    let store = ConfigMapRegistry::new(Api::<ConfigMap>::namespaced(ctx.client.clone(), &wanted.ns), &cc);

    // Observe.
    let seen = observe::cluster(&ctx, &cc, &wanted, &store, &secret).await?;
    // Decide (pure).
    let plan = plan::decide(&wanted, &seen);
    tracing::debug!(cluster = %wanted.name, step = ?plan.step, "next step");
    // Act: the move that ended, the nodes, then data, members (which wait for data), routers.
    moves::settle(&ctx, &cc, &wanted.key, seen.ended.as_ref()).await;
    nodes::scale(&ctx, &cc, &wanted, &seen, &plan).await?;
    moves::take_step(&ctx, &cc, &store, &secret, &plan.step, seen.topology.as_ref()).await?;
    let restarting = replicas::tend(&ctx, &cc, &wanted, &seen, &plan.step, &store, &secret).await?;
    let published = start_routers_and_failover(&ctx, &cc, &wanted, &store, &secret).await?;
    // Report.
    report::status(&ctx, &cc, &wanted, &seen, plan, Acted { published, restarting }).await
}

/// Starts the failover writer of every CacheCluster in `clusters` that has replicas, at once
/// and before the controller's first reconcile: a leader that has just taken over must probe
/// the primaries before their writer leases run out (a down-after after the previous leader's
/// last probe, 1 s by default) or they fence themselves until a writer confirms them, and a
/// first reconcile (the controller's watches started, objects applied, every member probed, one
/// of them perhaps restarting) takes longer than that. Best effort: the reconcile starts any
/// writer this could not.
pub async fn start_failover_writers(ctx: &Arc<Context>, clusters: &Api<CacheCluster>) {
    let list = match clusters.list(&Default::default()).await {
        Ok(list) => list,
        Err(e) => {
            tracing::warn!(error = %e, "listing CacheClusters to start their failover writers");
            return;
        }
    };
    for cc in list.items {
        let Ok(wanted) = Wanted::of(&cc) else { continue };
        let store = ConfigMapRegistry::new(Api::<ConfigMap>::namespaced(ctx.client.clone(), &wanted.ns), &cc);
        match store.load().await {
            Ok(published) if needs_failover_writer(&wanted, published.as_ref()) => {
                let secret = resources::derive_cluster_secret(&ctx.settings.secret_key, &cc);
                failover::ensure(ctx, &cc, store, &secret);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(cluster = %wanted.name, error = %e, "reading the topology to start its failover writer")
            }
        }
    }
}

/// The objects whose content does not depend on the scaling state.
async fn apply_fixed_objects(client: &Client, ns: &str, cc: &CacheCluster) -> Result<(), Error> {
    apply(client, ns, &resources::service_account(cc, Component::Node)).await?;
    apply(client, ns, &resources::service_account(cc, Component::Router)).await?;
    apply(client, ns, &resources::node_service(cc)).await?;
    apply(client, ns, &resources::router_service(cc)).await?;
    apply(client, ns, &resources::pdb(cc, Component::Router)).await?;
    apply(client, ns, &resources::node_network_policy(cc)).await?;
    apply(client, ns, &resources::router_network_policy(cc)).await?;
    Ok(())
}

/// Routers start once there is a topology to route by; the failover writer runs while it has
/// replicas (or should). Returns the topology published now, read again: a step above may
/// have published.
/// Whether a cluster's topology, once published, needs a failover writer: it runs with replicas
/// (or still has some in the topology, while going back to none). The same rule at a new
/// leader's start ([`start_failover_writers`]) and in every reconcile.
fn needs_failover_writer(wanted: &Wanted, published: Option<&Topology>) -> bool {
    published.is_some() && members::replica_mode(wanted.replicas, published)
}

async fn start_routers_and_failover(
    ctx: &Arc<Context>,
    cc: &CacheCluster,
    wanted: &Wanted,
    store: &ConfigMapRegistry,
    secret: &ClusterSecret,
) -> Result<Option<Topology>, Error> {
    let published = store.load().await?;
    if published.is_some() {
        apply(&ctx.client, &wanted.ns, &resources::router_deployment(cc)).await?;
    }
    if needs_failover_writer(wanted, published.as_ref()) {
        failover::ensure(ctx, cc, store.clone(), secret);
    } else {
        failover::stop(ctx, &wanted.key);
    }
    Ok(published)
}

pub fn error_policy(cc: Arc<CacheCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_errors.inc();
    tracing::warn!(cluster = %cc.name_any(), %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

/// API-call scenarios: one reconcile against a scripted fake API server, call by call. The
/// helpers serve the stages' own scenario tests too.
#[cfg(test)]
mod tests {
    use http::Method;
    use kube::runtime::events::Reporter;
    use serde_json::{Value, json};
    use shoal_coordinator::failover::FailoverOptions;

    use super::*;
    use crate::context::{Settings, render_metrics};
    use crate::fake_api::{Call, Fake, call, echo, status};
    use crate::resources::tests::cluster;
    use crate::resources::{AddressMode, Placement};

    pub(super) const NS: &str = "/api/v1/namespaces/shop";
    const APPS: &str = "/apis/apps/v1/namespaces/shop";
    const POLICY: &str = "/apis/policy/v1/namespaces/shop";

    pub(super) fn context(client: Client, node_addresses: AddressMode) -> Arc<Context> {
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

    fn list(kind: &str, items: Vec<Value>) -> Value {
        json!({"kind": kind, "apiVersion": "v1", "metadata": {}, "items": items})
    }

    fn configmap(t: &Topology) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "demo-topology", "namespace": "shop", "resourceVersion": "5"},
               "data": {"topology.json": t.to_json()}})
    }

    pub(super) fn status_patch(cc: &CacheCluster, check: impl Fn(&Value) + Send + Sync + 'static) -> Call {
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
}
