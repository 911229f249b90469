//! The operator end to end, against a real control plane (etcd + kube-apiserver +
//! kube-controller-manager + kube-scheduler + kwok, from `.ci/kube/up`), with real `shoal-node`
//! and `shoal-router` processes.
//!
//! kwok runs no containers: pods go Running with loopback IPs (127.1.x.y). This test plays the
//! kubelet for the node pods: for each Running node pod it starts `shoal-node` bound to the pod's
//! IP, with the arguments and environment of the pod's own spec (paths rewritten to a temp dir),
//! stops it when the pod goes, and projects the topology ConfigMap into a file as a ConfigMap
//! volume would. One `shoal-router` process, started from a router pod's spec, serves clients;
//! the router pod's readiness probe (from its spec) is run by the test against that process.
//!
//! Needs the tools from `.ci/tools/install etcd kube kwok kubectl` and `cargo build --bins`.
//! Without the tools it fails under CI and is skipped (with a message) elsewhere.
//!
//! Two scenarios, one control plane each, run one after the other: a cluster without replicas
//! (created, one node down, scaled 3 → 5 → 2 across a leader change, deleted) and one with a
//! replica per shard (its primary's pod deleted and replaced by the replica, scaled 2 → 3 → 2).

mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::api::{Api, ListParams};
use shoal_coordinator::{Registry, RegistryError};
use shoal_operator::crd::CacheCluster;
use shoal_operator::registry::ConfigMapRegistry;
use shoal_wire::Topology;
use support::{Kubelet, Plane, leader_gauge, operator_metric, repo, wait_for};

const NS: &str = "shoal-e2e";
const KEYS: usize = 3000;

/// The scenarios run one at a time: each starts a control plane and a dozen processes, and two
/// at once would overload the small machines the tests run on.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The published topology (from the ConfigMap), if any.
async fn published(client: &Client) -> Option<Topology> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), NS).get_opt("demo-topology").await.ok()??;
    shoal_operator::registry::parse(&cm).ok()?
}

async fn sts_replicas(client: &Client) -> Option<i32> {
    Api::<StatefulSet>::namespaced(client.clone(), NS).get_opt("demo-node").await.ok()??.spec?.replicas
}

/// Waits until the cluster is Ready with `shards` shards; returns its status. Meanwhile checks the
/// invariant that the StatefulSet never has fewer pods than the published topology has nodes
/// (a shard is never removed before its slots have moved) and collects the phases seen.
async fn wait_ready(
    client: &Client,
    shards: i32,
    phases: &mut Vec<String>,
) -> shoal_operator::crd::CacheClusterStatus {
    wait_status(client, shards, phases, false, 0).await
}

/// [`wait_ready`], and with `replicated` also every shard's primary serving with all its
/// replicas (at least one) synced, as `.status.shardStatus` reports, for topology version
/// `min_version` or later.
async fn wait_status(
    client: &Client,
    shards: i32,
    phases: &mut Vec<String>,
    replicated: bool,
    min_version: u64,
) -> shoal_operator::crd::CacheClusterStatus {
    let api: Api<CacheCluster> = Api::namespaced(client.clone(), NS);
    let what = format!("Ready with {shards} shards{}", if replicated { ", replicas synced" } else { "" });
    wait_for(&what, Duration::from_secs(120), async || {
        if let (Some(t), Some(r)) = (published(client).await, sts_replicas(client).await) {
            let needed = t.nodes.iter().map(|n| n.id + 1).max().unwrap_or(0) as i32;
            assert!(
                r >= needed,
                "StatefulSet at {r} pods while topology v{} still uses node {}",
                t.version,
                needed - 1
            );
        }
        let status = api.get(NS_NAME).await.ok()?.status?;
        if phases.last() != Some(&status.phase) {
            phases.push(status.phase.clone());
        }
        let synced = status.shard_status.len() == shards as usize
            && status
                .shard_status
                .iter()
                .all(|s| s.primary_serving && !s.replicas.is_empty() && s.replicas.iter().all(|r| r.synced));
        (status.phase == "Ready"
            && status.topology_version >= min_version as i64
            && status.shards == shards
            && status.ready_shards == shards
            && (synced || !replicated))
            .then_some(status)
    })
    .await
}

const NS_NAME: &str = "demo";

/// The chart's CRD applied and established, and the test namespace created.
fn install_crd(plane: &Plane) {
    plane.kubectl(
        &["apply", "--server-side", "-f", &repo().join("charts/shoal/crds").display().to_string()],
        None,
    );
    plane.wait_established("crd/cacheclusters.shoal.dev");
    plane.kubectl(&["create", "namespace", NS], None);
}

/// The operator made the cluster's secret (a Secret it owns), every node process got it from its
/// pod's environment, and a node refuses a call without it while it serves one with it.
async fn nodes_require_the_cluster_secret(client: &Client) {
    use shoal_wire::client::{self, ClientOptions};
    let secret = Api::<Secret>::namespaced(client.clone(), NS).get("demo-cluster-secret").await.unwrap();
    assert_eq!(secret.metadata.owner_references.unwrap()[0].name, NS_NAME, "owned by its CacheCluster");
    let value = String::from_utf8(secret.data.unwrap()["secret"].0.clone()).unwrap();
    let secret = shoal_wire::auth::ClusterSecret::new(&value).unwrap();
    let node = published(client).await.unwrap().nodes[0].addr.clone();
    let mut anonymous = client::connect(&node, &ClientOptions::admin()).await.unwrap();
    let refused = anonymous.stats(shoal_wire::proto::StatsRequest::default()).await.unwrap_err();
    assert!(refused.message().contains("requires the cluster secret"), "{}", refused.message());
    let mut member = client::connect(&node, &ClientOptions::admin().with_secret(Some(secret))).await.unwrap();
    assert!(member.stats(shoal_wire::proto::StatsRequest::default()).await.is_ok());
}

/// Stops node pod 1's process, checks the router while it is down, and brings it back.
async fn one_node_down(client: &Client, kubelet: &Kubelet, router: &support::RouterPod) {
    let all_up = async || {
        let up = support::router_nodes_up(&router.http).await?;
        (up.len() == 3 && up.iter().all(|&(_, v)| v == 1.0)).then_some(())
    };
    wait_for("the router to reach every node", Duration::from_secs(30), all_up).await;
    assert!(router.ready().await, "the router pod is Ready with every node up");

    kubelet.pause("demo-node-1");
    wait_for("the router to see node 1 down", Duration::from_secs(30), async || {
        let up = support::router_nodes_up(&router.http).await?;
        (up == [(0, 1.0), (1, 0.0), (2, 1.0)]).then_some(())
    })
    .await;
    for _ in 0..5 {
        assert!(router.ready().await, "the router pod stays Ready while one node is down");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let topology = published(client).await.expect("a topology");
    let mut c = redis(&router.resp).await;
    let (mut served, mut failed) = (0, 0);
    for i in 0..300 {
        let key = format!("k{i}");
        let owner = topology.owner_of(shoal_wire::key_slot(key.as_bytes())).unwrap();
        let started = std::time::Instant::now();
        let got: redis::RedisResult<Option<String>> = redis::cmd("GET").arg(&key).query_async(&mut c).await;
        if owner == 1 {
            let err = got.expect_err("node 1's keys fail while it is down").to_string();
            assert!(err.contains("node 1") && err.contains("is unavailable"), "{key}: {err}");
            assert!(started.elapsed() < Duration::from_millis(500), "fails fast, not at the deadline");
            failed += 1;
        } else {
            assert_eq!(got.unwrap().as_deref(), Some(format!("v{i}").as_str()), "{key} on node {owner}");
            served += 1;
        }
    }
    assert!(served > 0 && failed > 0, "keys on both sides: {served} served, {failed} failed");

    kubelet.resume("demo-node-1");
    wait_for("the router to reach node 1 again", Duration::from_secs(60), all_up).await;
    assert!(router.ready().await);
}

async fn redis(addr: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://{addr}/")).unwrap().get_multiplexed_async_connection().await.unwrap()
}

async fn write_keys(addr: &str) {
    let mut c = redis(addr).await;
    let mut pipe = redis::pipe();
    for i in 0..KEYS {
        pipe.cmd("SET").arg(format!("k{i}")).arg(format!("v{i}")).ignore();
    }
    pipe.cmd("SET").arg("session").arg("s").arg("EX").arg(3600).ignore();
    let () = pipe.query_async(&mut c).await.unwrap();
}

/// Runs `cmd`, retrying while the router answers that the topology is changing (its documented
/// "try again", as a client would), for at most 5 s; any other error, or a wrong answer, fails.
async fn query<T: redis::FromRedisValue>(c: &mut redis::aio::MultiplexedConnection, cmd: &redis::Cmd) -> T {
    for attempt in 0.. {
        match cmd.query_async(c).await {
            Ok(v) => return v,
            Err(e) if e.to_string().contains("try again") && attempt < 20 => {
                eprintln!("retrying after: {e}");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    unreachable!()
}

async fn check_keys(addr: &str) {
    let mut c = redis(addr).await;
    let keys: Vec<String> = (0..KEYS).map(|i| format!("k{i}")).collect();
    let values: Vec<Option<String>> = query(&mut c, redis::cmd("MGET").arg(&keys)).await;
    for (i, v) in values.iter().enumerate() {
        assert_eq!(v.as_deref(), Some(format!("v{i}").as_str()), "k{i} after resharding");
    }
    let ttl: i64 = query(&mut c, redis::cmd("TTL").arg("session")).await;
    assert!((3000..=3600).contains(&ttl), "TTL kept: {ttl}");
    let n: usize = query(&mut c, &redis::cmd("DBSIZE")).await;
    assert_eq!(n, KEYS + 1);
}

/// The ConfigMap topology store against the real API server: create, publish newer, refuse older,
/// and lose a compare-and-swap race cleanly.
async fn store_scenarios(client: &Client, cc: &CacheCluster) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let store = ConfigMapRegistry::new(api.clone(), cc);
    assert_eq!(store.load().await.unwrap(), None);
    let mut t = Topology::even(&["127.0.0.1:1".into(), "127.0.0.1:2".into()]);
    t.version = 5;
    store.publish(&t).await.unwrap();
    assert_eq!(store.load().await.unwrap().unwrap().version, 5);
    let mut older = t.clone();
    older.version = 4;
    assert!(matches!(store.publish(&older).await, Err(RegistryError::Stale { current: 5, new: 4 })));
    // Two writers that both read version 5: exactly one of them wins.
    let (mut a, mut b) = (t.clone(), t.clone());
    a.version = 6;
    b.version = 7;
    let (ra, rb) = tokio::join!(store.publish(&a), store.publish(&b));
    let stored = store.load().await.unwrap().unwrap().version;
    assert!(ra.is_ok() || rb.is_ok(), "{ra:?} {rb:?}");
    assert!(stored == 6 || stored == 7);
    let cm = api.get("scratch-topology").await.unwrap();
    assert_eq!(cm.metadata.owner_references.unwrap()[0].name, "scratch", "owned by its CacheCluster");
    api.delete("scratch-topology", &Default::default()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_creates_scales_and_deletes_a_cache_cluster() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(plane) = Plane::up("e2e") else { return };
    let dir = support::TestDir::new();
    let root = dir.path();
    let client = plane.client().await;

    install_crd(&plane);

    // The API server enforces the CRD's validation.
    for (spec, complaint) in [
        ("{shards: 0}", "should be greater than or equal to 1"),
        ("{shards: 2, maxmemory: lots}", "maxmemory is a number with an optional unit"),
        ("{shards: 2, storage: {type: PersistentVolumeClaim}}", "storage.size is required"),
        ("{shards: 2, maxmemoryPolicy: lru}", "Unsupported value"),
        ("{shards: 2, colocate: ['rq:*', 'bull:*:x']}", "spec.colocate[1] in body should match"),
    ] {
        let doc = format!(
            "apiVersion: shoal.dev/v1alpha1\nkind: CacheCluster\nmetadata: {{name: bad, namespace: {NS}}}\nspec: {spec}\n"
        );
        let (ok, out) = plane.try_kubectl(&["apply", "-f", "-"], Some(&doc));
        assert!(!ok && out.contains(complaint), "{spec}: {out}");
    }

    // The topology store, on its own (a CacheCluster that no operator runs yet).
    let mut scratch: CacheCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "shoal.dev/v1alpha1", "kind": "CacheCluster",
        "metadata": {"name": "scratch", "namespace": NS}, "spec": {"shards": 1}
    }))
    .unwrap();
    let ccs: Api<CacheCluster> = Api::namespaced(client.clone(), NS);
    scratch = ccs.create(&Default::default(), &scratch).await.unwrap();
    store_scenarios(&client, &scratch).await;
    ccs.delete("scratch", &Default::default()).await.unwrap();

    // Two operators: one leads, the other stands by.
    let args: Vec<String> =
        ["--node-addresses", "pod-ip", "--lease-seconds", "6", "--lease-namespace", "default"]
            .map(String::from)
            .into();
    let (mut op_a, port_a) = support::operator(&plane.kubeconfig, &root, "operator-a", &args, &[]);
    wait_for("operator-a to lead", Duration::from_secs(30), async || {
        (leader_gauge(port_a).await == Some(1.0)).then_some(())
    })
    .await;
    let (_op_b, port_b) = support::operator(&plane.kubeconfig, &root, "operator-b", &args, &[]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(leader_gauge(port_b).await, Some(0.0), "one active replica");

    let topology_file = root.join("topology.json");
    let kubelet = Kubelet::start(client.clone(), NS, "demo", root.clone(), topology_file.clone());
    plane.kubectl(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: shoal.dev/v1alpha1\nkind: CacheCluster\nmetadata: {{name: demo, namespace: {NS}}}\n\
             spec: {{shards: 3, routers: 1, maxmemory: 64mb, maxmemoryPolicy: allkeys-lru}}\n"
        )),
    );
    let mut phases = Vec::new();
    let ready = wait_ready(&client, 3, &mut phases).await;
    let v3 = ready.topology_version;
    assert!(v3 >= 1);
    assert!(ready.selector.contains("app.kubernetes.io/component=node"));
    assert!(
        ready
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True" && c.observed_generation.is_some())
    );
    let table = plane.kubectl(&["get", "cc", "-n", NS], None);
    assert!(table.contains("SHARDS") && table.contains("Ready"), "{table}");
    // Everything it owns exists.
    assert!(Api::<StatefulSet>::namespaced(client.clone(), NS).get_opt("demo-node").await.unwrap().is_some());
    for svc in ["demo", "demo-node"] {
        assert!(
            Api::<Service>::namespaced(client.clone(), NS).get_opt(svc).await.unwrap().is_some(),
            "{svc}"
        );
    }
    for pdb in ["demo-node", "demo-router"] {
        assert!(
            Api::<PodDisruptionBudget>::namespaced(client.clone(), NS).get_opt(pdb).await.unwrap().is_some()
        );
    }
    assert!(
        Api::<NetworkPolicy>::namespaced(client.clone(), NS).get_opt("demo-node").await.unwrap().is_some()
    );
    assert!(
        Api::<Deployment>::namespaced(client.clone(), NS).get_opt("demo-router").await.unwrap().is_some()
    );
    assert_eq!(published(&client).await.unwrap().nodes.len(), 3);
    nodes_require_the_cluster_secret(&client).await;

    // A router process, from the router pod's own spec.
    let router = support::router_pod(&client, NS, "demo", &root, &topology_file).await;
    let addr = router.resp.clone();
    write_keys(&addr).await;

    // One node pod's process stops (its container restarting): the router stays Ready by its
    // pod's own readiness probe, so it stays in the Service; the other nodes' keys keep
    // answering and only the stopped node's keys fail, fast, with the node-down error.
    one_node_down(&client, &kubelet, &router).await;

    // kubectl scale up: the StatefulSet grows first, slots move, the version advances.
    plane.kubectl(&["scale", "cachecluster/demo", "-n", NS, "--replicas=5"], None);
    let mut phases = Vec::new();
    let five = wait_ready(&client, 5, &mut phases).await;
    assert!(phases.contains(&"Resharding".to_string()), "phases seen: {phases:?}");
    assert!(five.topology_version > v3 + 1, "a move is two versions: {v3} -> {}", five.topology_version);
    assert_eq!(sts_replicas(&client).await, Some(5));
    check_keys(&addr).await;

    // The leader steps down; the standby takes over and does the scale-down.
    op_a.terminate();
    wait_for("operator-b to lead", Duration::from_secs(30), async || {
        (leader_gauge(port_b).await == Some(1.0)).then_some(())
    })
    .await;
    plane.kubectl(&["scale", "cachecluster/demo", "-n", NS, "--replicas=2"], None);
    let mut phases = Vec::new();
    let two = wait_ready(&client, 2, &mut phases).await;
    assert!(phases.contains(&"Resharding".to_string()), "phases seen: {phases:?}");
    assert!(two.topology_version > five.topology_version + 1);
    assert_eq!(sts_replicas(&client).await, Some(2), "shrunk only after the move");
    let t = published(&client).await.unwrap();
    assert_eq!((t.nodes.len(), t.migrations.len()), (2, 0));
    check_keys(&addr).await;

    // The story in Events.
    let events = plane.kubectl(
        &["get", "events", "-n", NS, "--field-selector", "involvedObject.name=demo", "-o", "json"],
        None,
    );
    for reason in ["TopologyPublished", "ScalingNodes", "ReshardingStarted", "Resharded"] {
        assert!(events.contains(&format!("\"reason\": \"{reason}\"")), "no {reason} event");
    }
    let conditions: Vec<String> =
        two.conditions.iter().map(|c| format!("{}={}", c.type_, c.status)).collect();
    assert_eq!(conditions, ["Ready=True", "Resharding=False", "Degraded=False"]);

    // Deleting the CacheCluster garbage-collects everything it owns.
    plane.kubectl(&["delete", "cachecluster/demo", "-n", NS, "--wait=true"], None);
    wait_for("garbage collection", Duration::from_secs(60), async || {
        let sts = Api::<StatefulSet>::namespaced(client.clone(), NS).get_opt("demo-node").await.ok()?;
        let dep = Api::<Deployment>::namespaced(client.clone(), NS).get_opt("demo-router").await.ok()?;
        let svc = Api::<Service>::namespaced(client.clone(), NS).get_opt("demo").await.ok()?;
        let cm = Api::<ConfigMap>::namespaced(client.clone(), NS).get_opt("demo-topology").await.ok()?;
        let sa = Api::<ServiceAccount>::namespaced(client.clone(), NS).get_opt("demo-node").await.ok()?;
        let pdb =
            Api::<PodDisruptionBudget>::namespaced(client.clone(), NS).get_opt("demo-node").await.ok()?;
        let np = Api::<NetworkPolicy>::namespaced(client.clone(), NS).get_opt("demo-node").await.ok()?;
        (sts.is_none()
            && dep.is_none()
            && svc.is_none()
            && cm.is_none()
            && sa.is_none()
            && pdb.is_none()
            && np.is_none())
        .then_some(())
    })
    .await;
    kubelet.stop().await;
}

/// Every series the chart's alerts and Grafana dashboard query is exported by a live process of
/// this cluster: the operator, a router, a primary and its replica (a renamed or missing series
/// would leave an alert that never fires and a panel that stays empty).
async fn alerts_and_dashboard_read_live_series(operator_port: u16, router_http: &str, t: &Topology) {
    let args = [
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "grafanaDashboard.enabled=true",
        "--api-versions",
        "monitoring.coreos.com/v1/PrometheusRule",
    ];
    let Some(docs) = support::render(&args) else { return };
    let mut exprs = Vec::new();
    for d in docs.unwrap() {
        if d["kind"] == "PrometheusRule" {
            for g in d["spec"]["groups"].as_array().unwrap() {
                exprs.extend(
                    g["rules"].as_array().unwrap().iter().map(|r| r["expr"].as_str().unwrap().to_string()),
                );
            }
        } else if d["kind"] == "ConfigMap" && d["data"]["shoal.json"].is_string() {
            let dash: serde_json::Value =
                serde_json::from_str(d["data"]["shoal.json"].as_str().unwrap()).unwrap();
            for p in dash["panels"].as_array().unwrap() {
                for target in p["targets"].as_array().into_iter().flatten() {
                    exprs.push(target["expr"].as_str().unwrap().to_string());
                }
            }
        }
    }
    let mut wanted = std::collections::BTreeSet::new();
    for e in &exprs {
        for (at, _) in e.match_indices("shoal_") {
            let name: String = e[at..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            wanted.insert(name);
        }
    }
    assert!(wanted.len() > 20, "{wanted:?}");
    let metrics_of = |addr: &str| format!("{}:9090", addr.rsplit_once(':').unwrap().0);
    let mut exported = support::metric_families(&format!("127.0.0.1:{operator_port}")).await;
    exported.extend(support::metric_families(router_http).await);
    exported.extend(support::metric_families(&metrics_of(&t.nodes[0].addr)).await);
    exported.extend(support::metric_families(&metrics_of(&t.nodes[0].replicas[0])).await);
    let missing: Vec<&String> = wanted
        .iter()
        .filter(|w| {
            let base = ["_bucket", "_sum", "_count"].iter().find_map(|s| w.strip_suffix(s));
            !exported.contains(*w) && !base.is_some_and(|b| exported.contains(b))
        })
        .collect();
    assert!(missing.is_empty(), "queried by the chart but exported by no process: {missing:?}");
}

/// The node pod (by name) whose IP is `addr`'s host.
async fn pod_at(client: &Client, addr: &str) -> String {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let list = pods.list(&ListParams::default().labels("app.kubernetes.io/component=node")).await.unwrap();
    list.items
        .into_iter()
        .find(|p| p.status.as_ref().and_then(|s| s.pod_ip.as_deref()) == Some(host))
        .and_then(|p| p.metadata.name)
        .unwrap_or_else(|| panic!("no node pod at {addr}"))
}

/// Every shard of the published topology has `replicas` replicas, each a pod of its shard's
/// replica StatefulSet or (after a failover) its member 0.
async fn check_members(client: &Client, shards: usize, replicas: usize) -> Topology {
    let t = published(client).await.expect("a topology");
    assert_eq!((t.nodes.len(), t.migrations.len()), (shards, 0), "{t:?}");
    for n in &t.nodes {
        assert_eq!(n.replicas.len(), replicas, "shard {}: {n:?}", n.id);
        let mut pods = vec![pod_at(client, &n.addr).await];
        for r in &n.replicas {
            pods.push(pod_at(client, r).await);
        }
        pods.sort();
        assert_eq!(pods, [format!("demo-node-{}", n.id), format!("demo-node-r1-{}", n.id)], "shard {}", n.id);
    }
    t
}

/// A CacheCluster with a replica per shard: comes up with each shard's replica synced, keys
/// written through a router survive the deletion of a shard's primary's pod (its replica is
/// promoted, the cluster is Degraded until the pod that comes back has synced as the new
/// replica, then Ready), survive resharding 2 → 3 → 2 with the replicas following their
/// shards (new shards get theirs, removed shards' go), and survive the operator restarting every
/// node pod for a changed setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_take_over_from_a_deleted_primary_and_follow_resharding() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(plane) = Plane::up("e2e-replicas") else { return };
    let dir = support::TestDir::new();
    let root = dir.path();
    let client = plane.client().await;
    install_crd(&plane);
    let args: Vec<String> =
        ["--node-addresses", "pod-ip", "--lease-seconds", "6", "--lease-namespace", "default"]
            .map(String::from)
            .into();
    let (_op, port) = support::operator(&plane.kubeconfig, &root, "operator", &args, &[]);
    wait_for("the operator to lead", Duration::from_secs(30), async || {
        (leader_gauge(port).await == Some(1.0)).then_some(())
    })
    .await;
    let topology_file = root.join("topology.json");
    let kubelet = Kubelet::start(client.clone(), NS, "demo", root.clone(), topology_file.clone());
    plane.kubectl(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: shoal.dev/v1alpha1\nkind: CacheCluster\nmetadata: {{name: demo, namespace: {NS}}}\n\
             spec: {{shards: 2, replicasPerShard: 1, routers: 1, maxmemory: 64mb}}\n"
        )),
    );
    let mut phases = Vec::new();
    wait_status(&client, 2, &mut phases, true, 0).await;
    let before = check_members(&client, 2, 1).await;
    let table = plane.kubectl(&["get", "cc", "-n", NS], None);
    let header: Vec<&str> = table.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "SHARDS", "REPLICAS", "READY", "TOPOLOGY", "PHASE", "AGE"], "{table}");
    assert!(table.lines().nth(1).unwrap_or_default().split_whitespace().nth(2) == Some("1"), "{table}");
    let pdbs = Api::<PodDisruptionBudget>::namespaced(client.clone(), NS);
    // Each shard is redundant: one of its two pods may go, as the disruption controller counts.
    for shard in 0..2 {
        let name = format!("demo-shard-{shard}");
        wait_for(&format!("{name} to allow one disruption"), Duration::from_secs(30), async || {
            let status = pdbs.get(&name).await.ok()?.status?;
            (status.expected_pods == 2 && status.disruptions_allowed == 1).then_some(())
        })
        .await;
    }
    assert!(pdbs.get_opt("demo-node").await.unwrap().is_none(), "one budget per pod: the shards' only");

    let router = support::router_pod(&client, NS, "demo", &root, &topology_file).await;
    let addr = router.resp.clone();
    write_keys(&addr).await;
    let mut c = redis(&addr).await;
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query_async(&mut c).await.unwrap();
    assert_eq!(acked, 1, "every shard's replica has every key");
    alerts_and_dashboard_read_live_series(port, &router.http, &before).await;

    // Delete the pod of shard 0's primary, as a drain or a node going away would.
    let old_primary = before.nodes[0].addr.clone();
    let victim = pod_at(&client, &old_primary).await;
    plane.kubectl(&["delete", "pod", &victim, "-n", NS, "--wait=false"], None);
    let promoted = wait_for("shard 0's replica to be promoted", Duration::from_secs(60), async || {
        let t = published(&client).await?;
        (t.nodes[0].addr != old_primary).then_some(t)
    })
    .await;
    assert_eq!(promoted.nodes[0].addr, before.nodes[0].replicas[0], "its replica took over");
    assert_eq!(promoted.nodes[1], before.nodes[1], "shard 1 untouched");
    // The status of the promoted topology or later: Degraded while the pod that replaced the
    // old primary's copies from the new one, then Ready.
    let mut phases = Vec::new();
    let status = wait_status(&client, 2, &mut phases, true, promoted.version).await;
    assert_eq!(status.shard_status[0].primary, promoted.nodes[0].addr);
    assert!(phases.contains(&"Degraded".to_string()), "Degraded until the new replica synced: {phases:?}");
    assert_eq!(phases.last().map(String::as_str), Some("Ready"));
    check_keys(&addr).await;
    let after = check_members(&client, 2, 1).await;
    assert_eq!(after.nodes[0].addr, promoted.nodes[0].addr, "the operator leaves the primary where it is");
    let events = plane.kubectl(
        &["get", "events", "-n", NS, "--field-selector", "involvedObject.name=demo", "-o", "json"],
        None,
    );
    assert!(events.contains("\"reason\": \"FailedOver\""), "a FailedOver event");
    assert!(
        events.contains(&format!("handed over to replica {}", promoted.nodes[0].addr)),
        "its note says how"
    );
    assert!(events.contains("\"reason\": \"MembersChanged\""), "replicas listed by the operator");
    assert!(operator_metric(port, "shoal_operator_failovers_total").await >= Some(1.0));
    assert_eq!(operator_metric(port, "shoal_operator_failover_writers").await, Some(1.0));

    // Shards with replicas scale: 2 -> 3 (the new shard gets its replica), 3 -> 2 (its goes).
    plane.kubectl(&["scale", "cachecluster/demo", "-n", NS, "--replicas=3"], None);
    let mut phases = Vec::new();
    wait_status(&client, 3, &mut phases, true, 0).await;
    assert!(phases.contains(&"Resharding".to_string()), "phases seen: {phases:?}");
    check_members(&client, 3, 1).await;
    check_keys(&addr).await;
    let sts = Api::<StatefulSet>::namespaced(client.clone(), NS);
    for name in ["demo-node", "demo-node-r1"] {
        assert_eq!(sts.get(name).await.unwrap().spec.unwrap().replicas, Some(3), "{name}");
    }
    assert!(pdbs.get_opt("demo-shard-2").await.unwrap().is_some());

    plane.kubectl(&["scale", "cachecluster/demo", "-n", NS, "--replicas=2"], None);
    let mut phases = Vec::new();
    wait_status(&client, 2, &mut phases, true, 0).await;
    check_members(&client, 2, 1).await;
    check_keys(&addr).await;
    wait_for("the third shard's pods and budget to go", Duration::from_secs(60), async || {
        let sizes = (
            sts.get("demo-node").await.ok()?.spec?.replicas,
            sts.get("demo-node-r1").await.ok()?.spec?.replicas,
        );
        let budget = pdbs.get_opt("demo-shard-2").await.ok()?;
        (sizes == (Some(2), Some(2)) && budget.is_none()).then_some(())
    })
    .await;

    // A node setting changes: the operator restarts every node pod on the new template itself,
    // one at a time (evictions), replicas first, each shard whole again before the next; every
    // key survives on emptyDir.
    let topology_before = published(&client).await.unwrap().version;
    plane.kubectl(
        &[
            "patch",
            "cachecluster/demo",
            "-n",
            NS,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"maxmemory":"96mb"}}"#,
        ],
        None,
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let ccs: Api<CacheCluster> = Api::namespaced(client.clone(), NS);
    // The pods the status named as restarting (the pod waited for, kept where a new leader
    // would find it).
    let mut named = std::collections::BTreeSet::new();
    let status = wait_for(
        "every node pod restarted on the new template, whole",
        Duration::from_secs(180),
        async || {
            if let Some(r) = ccs.get(NS_NAME).await.ok().and_then(|c| c.status?.restarting) {
                named.insert(r.pod);
            }
            let list =
                pods.list(&ListParams::default().labels("app.kubernetes.io/component=node")).await.ok()?;
            let all_new = list.items.len() == 4
                && list.items.iter().all(|p| {
                    let args = p.spec.as_ref().map(|s| s.containers[0].args.clone().unwrap_or_default());
                    args.is_some_and(|a| a.windows(2).any(|w| w[0] == "--maxmemory" && w[1] == "96mb"))
                });
            // The status of what is published now (the last restart's hand-over included).
            let t = published(&client).await?;
            let status = ccs.get(NS_NAME).await.ok()?.status?;
            let whole = status.phase == "Ready"
                && status.topology_version == t.version as i64
                && t.version > topology_before
                && status.shard_status.len() == 2
                && status
                    .shard_status
                    .iter()
                    .all(|s| s.primary_serving && s.replicas.len() == 1 && s.replicas[0].synced);
            (all_new && whole).then_some(status)
        },
    )
    .await;
    assert!(status.conditions.iter().any(|c| c.type_ == "Degraded" && c.status == "False"));
    assert!(named.iter().all(|p| p.starts_with("demo-node-")) && !named.is_empty(), "{named:?}");
    wait_for("the status to stop naming a restarting pod", Duration::from_secs(30), async || {
        ccs.get(NS_NAME).await.ok()?.status?.restarting.is_none().then_some(())
    })
    .await;
    // Read once the router routes by that topology too: right after a hand-over and the next
    // members change, a multi-node command may still find a node answering `moved` until its
    // deadline ("the cluster topology is changing; try again", the router's to handle).
    let version = status.topology_version as f64;
    wait_for("the router to route by the last topology", Duration::from_secs(30), async || {
        let v = support::router_metric(&router.http, "shoal_router_topology_version").await?;
        (v >= version).then_some(())
    })
    .await;
    check_keys(&addr).await;
    let events = plane.kubectl(
        &["get", "events", "-n", NS, "--field-selector", "involvedObject.name=demo", "-o", "json"],
        None,
    );
    let restarts = events.matches("\"reason\": \"RestartingNode\"").count();
    assert!(restarts >= 1, "restarts are the operator's (Events aggregate repeats): {restarts}");
    assert!(operator_metric(port, "shoal_operator_pod_restarts_total").await >= Some(4.0));
    drop(router);
    kubelet.stop().await;
}
