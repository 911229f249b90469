//! The reconciler: observe a CacheCluster's objects and pods, decide the next step
//! ([`scaling::next_step`]), act, and report ([`status::compute`], Kubernetes Events).
//!
//! A reconcile never blocks on a data move. Moves run as background tasks (one per cluster, the
//! coordinator library driving the topology in the cluster's ConfigMap); each reconcile looks at
//! the task's progress and, once it ends, takes the next step. Everything a move needs is in the
//! published topology, so an operator restarted (or replaced by another leader) mid-move resumes
//! it from there.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use parking_lot::Mutex;
use serde::Serialize;
use serde::de::DeserializeOwned;
use shoal_coordinator::{Coordinator, Progress, Registry};
use shoal_telemetry::metrics::{Counter, Gauge};
use shoal_wire::Topology;
use tokio::task::JoinHandle;

use crate::crd::CacheCluster;
use crate::registry::ConfigMapRegistry;
use crate::resources::{self, Component, NODE_GRPC_PORT};
use crate::scaling::{self, Observed, Step};
use crate::status;

const FIELD_MANAGER: &str = "shoal-operator";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("topology store: {0}")]
    Store(#[from] shoal_coordinator::RegistryError),
    #[error("{0}")]
    Invalid(String),
}

/// How the topology names nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AddressMode {
    /// `<name>-node-<i>.<name>-node.<namespace>.svc:7001`: stable across pod restarts.
    Dns,
    /// The pod's IP: for operators outside the cluster network's DNS (and the test control
    /// plane, whose fake pods have loopback IPs). A restarted pod's new IP is published as a new
    /// topology version.
    PodIp,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub node_addresses: AddressMode,
    /// How long one resharding step may take before it is abandoned (and retried).
    pub step_timeout: Duration,
    /// How often to look again while something is in progress.
    pub busy_requeue: Duration,
}

/// A data move running in the background.
struct Move {
    task: JoinHandle<Result<Topology, String>>,
    progress: Arc<Mutex<Option<Progress>>>,
    what: String,
    /// Moves slots (rather than only offering the first topology to the nodes).
    resharding: bool,
}

#[derive(Debug, Default)]
pub struct Metrics {
    pub reconciles: Counter,
    pub reconcile_errors: Counter,
    pub moves_started: Counter,
    pub moves_failed: Counter,
    pub moves_running: Gauge,
    pub leader: Gauge,
}

pub struct Context {
    pub client: Client,
    pub settings: Settings,
    pub recorder: Recorder,
    pub metrics: Metrics,
    moves: Mutex<HashMap<(String, String), Move>>,
    last_errors: Mutex<HashMap<(String, String), String>>,
}

impl Context {
    pub fn new(client: Client, settings: Settings, reporter: Reporter) -> Context {
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            settings,
            metrics: Metrics::default(),
            moves: Mutex::default(),
            last_errors: Mutex::default(),
        }
    }

    /// Stops every running move (shutdown or lost leadership); the topology keeps their state.
    pub fn abort_moves(&self) {
        for (_, m) in self.moves.lock().drain() {
            m.task.abort();
        }
    }
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

async fn event(ctx: &Context, cc: &CacheCluster, type_: EventType, reason: &str, note: String) {
    tracing::info!(cluster = %cc.name_any(), reason, %note, "event");
    let ev = Event { type_, reason: reason.into(), note: Some(note), action: reason.into(), secondary: None };
    if let Err(e) = ctx.recorder.publish(&ev, &cc.object_ref(&())).await {
        tracing::warn!(error = %e, "could not record an event");
    }
}

/// Ready node pods (not being deleted), by ordinal, with the address the topology uses.
fn ready_nodes(cc: &CacheCluster, pods: &[Pod], mode: AddressMode) -> BTreeMap<u32, String> {
    let prefix = format!("{}-", resources::node_name(cc));
    let ns = cc.namespace().unwrap_or_default();
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .filter_map(|p| {
            let name = p.metadata.name.as_deref()?;
            let ordinal: u32 = name.strip_prefix(&prefix)?.parse().ok()?;
            let addr = match mode {
                AddressMode::Dns => format!("{name}.{}.{ns}.svc:{NODE_GRPC_PORT}", resources::node_name(cc)),
                AddressMode::PodIp => format!("{}:{NODE_GRPC_PORT}", p.status.as_ref()?.pod_ip.as_ref()?),
            };
            Some((ordinal, addr))
        })
        .collect()
}

pub async fn reconcile(cc: Arc<CacheCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.metrics.reconciles.inc();
    let ns = cc.namespace().ok_or_else(|| Error::Invalid("a CacheCluster is namespaced".into()))?;
    let name = cc.name_any();
    let key = (ns.clone(), name.clone());
    let client = &ctx.client;
    if cc.spec.shards < 1 {
        return Err(Error::Invalid(format!("spec.shards is {}; it must be at least 1", cc.spec.shards)));
    }

    // Objects whose content does not depend on the scaling state.
    apply(client, &ns, &resources::service_account(&cc, Component::Node)).await?;
    apply(client, &ns, &resources::service_account(&cc, Component::Router)).await?;
    apply(client, &ns, &resources::node_service(&cc)).await?;
    apply(client, &ns, &resources::router_service(&cc)).await?;
    apply(client, &ns, &resources::pdb(&cc, Component::Node)).await?;
    apply(client, &ns, &resources::pdb(&cc, Component::Router)).await?;
    apply(client, &ns, &resources::node_network_policy(&cc)).await?;

    // Observe.
    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let sts = sts_api.get_opt(&resources::node_name(&cc)).await?;
    let sts_replicas = sts.as_ref().and_then(|s| s.spec.as_ref()?.replicas).map(|r| r.max(0) as u32);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pods = pods.list(&ListParams::default().labels(&resources::node_selector_string(&cc))).await?.items;
    let store = ConfigMapRegistry::new(Api::<ConfigMap>::namespaced(client.clone(), &ns), &cc);
    let topology = store.load().await?;

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
        ready: ready_nodes(&cc, &pods, ctx.settings.node_addresses),
        topology: topology.clone(),
        moving,
    };
    let step = scaling::next_step(&observed);
    tracing::debug!(cluster = %name, ?step, "next step");

    // Act.
    let replicas = match &step {
        Step::ScaleNodes(n) => {
            let note = format!("node StatefulSet: {} -> {n} pods", sts_replicas.unwrap_or(0));
            event(&ctx, &cc, EventType::Normal, "ScalingNodes", note).await;
            *n
        }
        _ => sts_replicas.unwrap_or(cc.spec.shards as u32),
    };
    apply(client, &ns, &resources::node_statefulset(&cc, replicas as i32)).await?;
    match &step {
        Step::Bootstrap(nodes) => {
            // `nodes` are ids 0..n in order, which is how `even` numbers them.
            let t = Topology::even(&nodes.iter().map(|n| n.addr.clone()).collect::<Vec<_>>());
            store.publish(&t).await?;
            let note = format!("first topology: {} shards, version {}", t.nodes.len(), t.version);
            event(&ctx, &cc, EventType::Normal, "TopologyPublished", note).await;
            // Offer it to every node now rather than waiting for their file to change.
            start_move(&ctx, &cc, store.clone(), None, "publishing the first topology".into(), false);
        }
        Step::Reshard(target) => {
            let from = topology.as_ref().map_or(0, |t| t.nodes.len());
            let what = if from == target.len() {
                "new node addresses".to_string()
            } else {
                format!("resharding {from} -> {} shards", target.len())
            };
            event(&ctx, &cc, EventType::Normal, "ReshardingStarted", what.clone()).await;
            start_move(&ctx, &cc, store.clone(), Some(target.clone()), what, true);
        }
        Step::Resume => {
            let what = "finishing the move in the published topology".to_string();
            event(&ctx, &cc, EventType::Normal, "ReshardingResumed", what.clone()).await;
            start_move(&ctx, &cc, store.clone(), None, what, true);
        }
        Step::ScaleNodes(_) | Step::Wait(_) | Step::Settled => {}
    }
    // Routers start once there is a topology to route by.
    let published = store.load().await?;
    if published.is_some() {
        apply(client, &ns, &resources::router_deployment(&cc)).await?;
    }

    // Report.
    let (moving, progress, resharding_task) = match ctx.moves.lock().get(&key) {
        Some(m) => (true, m.progress.lock().clone(), m.resharding),
        None => (false, None, false),
    };
    let observed = Observed { topology: published, moving, ..observed };
    let last_error = ctx.last_errors.lock().get(&key).cloned();
    let new_status = status::compute(&status::Inputs {
        generation: cc.metadata.generation,
        previous: cc.status.as_ref(),
        observed: &observed,
        step: &step,
        progress: progress.as_ref(),
        last_error: last_error.as_deref(),
        resharding_task,
        selector: resources::node_selector_string(&cc),
        now: now_rfc3339(),
    });
    if cc.status.as_ref() != Some(&new_status) {
        let api: Api<CacheCluster> = Api::namespaced(client.clone(), &ns);
        let patch = serde_json::json!({ "status": new_status });
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    Ok(match step {
        Step::Settled if !observed.moving => Action::requeue(Duration::from_secs(300)),
        _ => Action::requeue(ctx.settings.busy_requeue),
    })
}

/// Starts the coordinator for `cc` in the background: toward `target`, or (None) finishing what
/// the published topology describes.
fn start_move(
    ctx: &Arc<Context>,
    cc: &CacheCluster,
    store: ConfigMapRegistry,
    target: Option<Vec<shoal_wire::NodeInfo>>,
    what: String,
    resharding: bool,
) {
    let progress: Arc<Mutex<Option<Progress>>> = Arc::default();
    let sink = progress.clone();
    let cluster = cc.name_any();
    let coordinator =
        Coordinator::new(store).with_timeout(ctx.settings.step_timeout).with_progress(move |p| {
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
    let task = tokio::spawn(async move {
        let result = match target {
            Some(t) => coordinator.reshard(&t).await,
            None => coordinator.resume().await,
        };
        result.map_err(|e| e.to_string())
    });
    ctx.metrics.moves_started.inc();
    ctx.metrics.moves_running.add(1);
    let key = (cc.namespace().unwrap_or_default(), cc.name_any());
    ctx.moves.lock().insert(key, Move { task, progress, what, resharding });
}

pub fn error_policy(cc: Arc<CacheCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_errors.inc();
    tracing::warn!(cluster = %cc.name_any(), %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// The operator's own /metrics.
pub fn render_metrics(ctx: &Context) -> String {
    let m = &ctx.metrics;
    let mut e = shoal_telemetry::metrics::Exposition::new();
    e.counter("shoal_operator_reconciles_total", "Reconciles run.", m.reconciles.get())
        .counter(
            "shoal_operator_reconcile_errors_total",
            "Reconciles that failed (retried).",
            m.reconcile_errors.get(),
        )
        .counter("shoal_operator_moves_started_total", "Resharding runs started.", m.moves_started.get())
        .counter(
            "shoal_operator_moves_failed_total",
            "Resharding runs that failed (retried).",
            m.moves_failed.get(),
        )
        .gauge("shoal_operator_moves_running", "Resharding runs in progress.", m.moves_running.get() as f64)
        .gauge(
            "shoal_operator_leader",
            "1 while this replica holds the leader lease.",
            m.leader.get() as f64,
        );
    e.finish()
}

/// API-call scenarios: one reconcile against a scripted fake API server, call by call.
#[cfg(test)]
mod tests {
    use http::Method;
    use serde_json::{Value, json};

    use super::*;
    use crate::fake_api::{Call, Fake, call, echo, status};
    use crate::resources::tests::cluster;

    const NS: &str = "/api/v1/namespaces/shop";

    fn context(client: Client) -> Arc<Context> {
        let settings = Settings {
            node_addresses: AddressMode::Dns,
            step_timeout: Duration::from_secs(60),
            busy_requeue: Duration::from_secs(2),
        };
        Arc::new(Context::new(client, settings, Reporter { controller: "test".into(), instance: None }))
    }

    /// The objects applied before observing, in order (server-side apply PATCHes).
    fn applies() -> Vec<Call> {
        [
            format!("{NS}/serviceaccounts/demo-node"),
            format!("{NS}/serviceaccounts/demo-router"),
            format!("{NS}/services/demo-node"),
            format!("{NS}/services/demo"),
            "/apis/policy/v1/namespaces/shop/poddisruptionbudgets/demo-node".into(),
            "/apis/policy/v1/namespaces/shop/poddisruptionbudgets/demo-router".into(),
            "/apis/networking.k8s.io/v1/namespaces/shop/networkpolicies/demo-node".into(),
        ]
        .into_iter()
        .map(|p| echo(Method::PATCH, p))
        .collect()
    }

    fn status_patch(cc: &CacheCluster, check: impl Fn(&Value) + Send + Sync + 'static) -> Call {
        let path = "/apis/shoal.dev/v1alpha1/namespaces/shop/cacheclusters/demo/status";
        call(Method::PATCH, path, 200, serde_json::to_value(cc).unwrap()).checking(check)
    }

    fn ready_pod(i: u32) -> Value {
        json!({"metadata": {"name": format!("demo-node-{i}"), "namespace": "shop"},
               "status": {"podIP": format!("127.0.0.{}", i + 10),
                          "conditions": [{"type": "Ready", "status": "True"}]}})
    }

    #[tokio::test]
    async fn a_new_cluster_gets_its_statefulset_first_and_no_routers_before_a_topology() {
        let cc = cluster(json!({"shards": 3}));
        let mut calls = applies();
        calls.extend([
            call(Method::GET, "/apis/apps/v1/namespaces/shop/statefulsets/demo-node", 404, status(404, "NotFound")),
            call(Method::GET, format!("{NS}/pods"), 200, json!({"kind": "PodList", "apiVersion": "v1",
                                                               "metadata": {}, "items": []})),
            call(Method::GET, format!("{NS}/configmaps/demo-topology"), 404, status(404, "NotFound")),
            echo(Method::POST, "/apis/events.k8s.io/v1/namespaces/shop/events").checking(|ev| {
                assert_eq!(ev["reason"], "ScalingNodes");
                assert_eq!(ev["note"], "node StatefulSet: 0 -> 3 pods");
            }),
            echo(Method::PATCH, "/apis/apps/v1/namespaces/shop/statefulsets/demo-node").checking(|sts| {
                assert_eq!(sts["spec"]["replicas"], 3);
            }),
            // Still no topology: the router Deployment is not applied (no call for it).
            call(Method::GET, format!("{NS}/configmaps/demo-topology"), 404, status(404, "NotFound")),
            status_patch(&cc, |patch| {
                let s = &patch["status"];
                assert_eq!(s["phase"], "Pending", "{s}");
                assert_eq!(s["selector"], "app.kubernetes.io/component=node,app.kubernetes.io/instance=demo,app.kubernetes.io/name=shoal");
                let ready = s["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
                assert_eq!(ready["status"], "False");
            }),
        ]);
        let (client, fake) = Fake::start(calls);
        let action = reconcile(Arc::new(cc), context(client)).await.unwrap();
        assert_eq!(action, Action::requeue(Duration::from_secs(2)), "busy: look again soon");
        fake.done();
    }

    #[tokio::test]
    async fn a_settled_cluster_applies_its_routers_reports_ready_and_rests() {
        let cc = cluster(json!({"shards": 3}));
        let addrs: Vec<String> = (0..3).map(|i| format!("demo-node-{i}.demo-node.shop.svc:7001")).collect();
        let topology = Topology::even(&addrs).to_json();
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "demo-topology", "namespace": "shop", "resourceVersion": "5"},
                        "data": {"topology.json": topology}});
        let sts = serde_json::to_value(resources::node_statefulset(&cc, 3)).unwrap();
        let mut calls = applies();
        calls.extend([
            call(Method::GET, "/apis/apps/v1/namespaces/shop/statefulsets/demo-node", 200, sts),
            call(
                Method::GET,
                format!("{NS}/pods"),
                200,
                json!({"kind": "PodList", "apiVersion": "v1",
                "metadata": {}, "items": [ready_pod(0), ready_pod(1), ready_pod(2)]}),
            ),
            call(Method::GET, format!("{NS}/configmaps/demo-topology"), 200, cm.clone()),
            // Settled: the StatefulSet keeps its size, no event, no move.
            echo(Method::PATCH, "/apis/apps/v1/namespaces/shop/statefulsets/demo-node").checking(|sts| {
                assert_eq!(sts["spec"]["replicas"], 3);
            }),
            call(Method::GET, format!("{NS}/configmaps/demo-topology"), 200, cm),
            echo(Method::PATCH, "/apis/apps/v1/namespaces/shop/deployments/demo-router"),
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
        let action = reconcile(Arc::new(cc), context(client)).await.unwrap();
        assert_eq!(action, Action::requeue(Duration::from_secs(300)), "settled: rest");
        fake.done();
    }
}
