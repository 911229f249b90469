//! The operator end to end, against a real control plane (etcd + kube-apiserver +
//! kube-controller-manager + kube-scheduler + kwok, from `.ci/kube/up`), with real `shoal-node`
//! and `shoal-router` processes.
//!
//! kwok runs no containers: pods go Running with loopback IPs (127.1.x.y). This test plays the
//! kubelet for the node pods: for each Running node pod it starts `shoal-node` bound to the pod's
//! IP, with the arguments and environment of the pod's own spec (paths rewritten to a temp dir),
//! stops it when the pod goes, and projects the topology ConfigMap into a file as a ConfigMap
//! volume would. One `shoal-router` process, started from a router pod's spec, serves clients.
//!
//! Needs the tools from `.ci/tools/install etcd kube kwok kubectl` and `cargo build --bins`.
//! Without the tools it fails under CI and is skipped (with a message) elsewhere.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use shoal_coordinator::{StoreError, TopologyStore};
use shoal_operator::crd::CacheCluster;
use shoal_operator::store::ConfigMapStore;
use shoal_wire::Topology;

const NS: &str = "shoal-e2e";
const KEYS: usize = 3000;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn cache() -> PathBuf {
    std::env::var_os("SHOAL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/shoal"))
}

/// PATH with the tool cache first.
fn path_env() -> String {
    format!("{}:{}", cache().join("bin").display(), std::env::var("PATH").unwrap_or_default())
}

/// A workspace binary from the same target directory as this test.
fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().parent().unwrap().join(name);
    assert!(path.exists(), "{} not found: run `cargo build --bins` first", path.display());
    path
}

/// The control plane, started by this test (and stopped when dropped) unless `SHOAL_KUBECONFIG`
/// names a running one.
struct Plane {
    kubeconfig: PathBuf,
    dir: Option<PathBuf>,
}

impl Plane {
    fn up() -> Option<Plane> {
        if let Some(k) = std::env::var_os("SHOAL_KUBECONFIG") {
            return Some(Plane { kubeconfig: k.into(), dir: None });
        }
        let missing: Vec<&str> =
            ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]
                .into_iter()
                .filter(|b| !cache().join("bin").join(b).exists())
                .collect();
        if !missing.is_empty() {
            let msg = format!("tools {missing:?} missing: run .ci/tools/install etcd kube kwok kubectl");
            assert!(std::env::var_os("CI").is_none(), "{msg}");
            eprintln!("SKIPPED: {msg}");
            return None;
        }
        let dir = cache().join("kube-e2e");
        let out = Command::new(repo().join(".ci/kube/up"))
            .env("SHOAL_KUBE_DIR", &dir)
            .env("PATH", path_env())
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(out.status.success(), ".ci/kube/up failed");
        let stdout = String::from_utf8(out.stdout).unwrap();
        let kubeconfig = stdout.lines().rev().find_map(|l| l.strip_prefix("export KUBECONFIG=")).unwrap();
        Some(Plane { kubeconfig: kubeconfig.trim().into(), dir: Some(dir) })
    }

    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> String {
        let (ok, out) = self.try_kubectl(args, stdin);
        assert!(ok, "kubectl {args:?}: {out}");
        out
    }

    /// Runs kubectl; whether it succeeded, and its stdout and stderr.
    fn try_kubectl(&self, args: &[&str], stdin: Option<&str>) -> (bool, String) {
        let mut child = Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("PATH", path_env())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl on PATH");
        if let Some(input) = stdin {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        }
        let out = child.wait_with_output().unwrap();
        if out.status.success() {
            (true, String::from_utf8(out.stdout).unwrap())
        } else {
            (
                false,
                format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
            )
        }
    }

    async fn client(&self) -> Client {
        let kc = Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.unwrap();
        Client::try_from(config).unwrap()
    }
}

impl Drop for Plane {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = Command::new(repo().join(".ci/kube/down")).env("SHOAL_KUBE_DIR", dir).status();
        }
    }
}

/// A child process stopped with SIGTERM (then SIGKILL) when dropped.
struct Proc(Child);

impl Proc {
    fn terminate(&mut self) {
        if let Ok(Some(_)) = self.0.try_wait() {
            return;
        }
        let _ = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).stderr(Stdio::null()).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.terminate();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn log(dir: &Path, name: &str) -> Stdio {
    Stdio::from(std::fs::File::create(dir.join(format!("{name}.log"))).unwrap())
}

/// A container's args with the pod-side addresses and paths swapped for this machine's.
fn rewrite(c: &Container, subst: &[(&str, String)]) -> Vec<String> {
    let mut args = c.args.clone().unwrap_or_default();
    for i in 1..args.len() {
        if let Some((_, v)) = subst.iter().find(|(flag, _)| args[i - 1] == *flag) {
            args[i] = v.clone();
        }
    }
    args
}

/// The container's environment, resolving the downward-API label references it uses.
fn resolve_env(c: &Container, pod: &Pod) -> Vec<(String, String)> {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    c.env
        .iter()
        .flatten()
        .map(|e| {
            let value = match (&e.value, e.value_from.as_ref().and_then(|v| v.field_ref.as_ref())) {
                (Some(v), _) => v.clone(),
                (None, Some(f)) => {
                    let label = f.field_path.trim_start_matches("metadata.labels['").trim_end_matches("']");
                    labels.get(label).unwrap_or_else(|| panic!("pod has no label {label}")).clone()
                }
                _ => panic!("unsupported env source in {e:?}"),
            };
            (e.name.clone(), value)
        })
        .collect()
}

/// Plays the kubelet for node pods and the ConfigMap volume (see the module docs).
struct Kubelet {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Kubelet {
    fn start(client: Client, root: PathBuf, topology_file: PathBuf) -> Kubelet {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
            let maps: Api<ConfigMap> = Api::namespaced(client, NS);
            let mut running: HashMap<String, Proc> = HashMap::new();
            let mut projected = String::new();
            while !flag.load(Ordering::Relaxed) {
                if let Ok(Some(cm)) = maps.get_opt("demo-topology").await
                    && let Some(doc) = cm.data.and_then(|d| d.get("topology.json").cloned())
                    && doc != projected
                {
                    let tmp = topology_file.with_extension("tmp");
                    std::fs::write(&tmp, &doc).unwrap();
                    std::fs::rename(&tmp, &topology_file).unwrap();
                    projected = doc;
                }
                let selector = "app.kubernetes.io/instance=demo,app.kubernetes.io/component=node";
                let Ok(list) = pods.list(&ListParams::default().labels(selector)).await else { continue };
                let mut alive = Vec::new();
                for pod in &list.items {
                    let uid = pod.metadata.uid.clone().unwrap();
                    let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone());
                    let running_phase =
                        pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                    if pod.metadata.deletion_timestamp.is_some() || !running_phase {
                        continue;
                    }
                    let Some(ip) = ip else { continue };
                    assert!(ip.starts_with("127."), "pod IPs must be loopback, got {ip}");
                    alive.push(uid.clone());
                    if running.contains_key(&uid) {
                        continue;
                    }
                    let container = &pod.spec.as_ref().unwrap().containers[0];
                    let data = root.join(format!("data-{uid}"));
                    let args = rewrite(
                        container,
                        &[
                            ("--listen", format!("{ip}:7001")),
                            ("--metrics-listen", format!("{ip}:9090")),
                            ("--data-dir", data.display().to_string()),
                            ("--topology-file", topology_file.display().to_string()),
                        ],
                    );
                    let name = pod.metadata.name.clone().unwrap();
                    let child = Command::new(bin("shoal-node"))
                        .args(&args)
                        .envs(resolve_env(container, pod))
                        .stdout(Stdio::null())
                        .stderr(log(&root, &name))
                        .spawn()
                        .unwrap();
                    running.insert(uid, Proc(child));
                }
                running.retain(|uid, _| alive.contains(uid));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Kubelet { stop, task }
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
    }
}

/// An operator process; `identity` names it in the Lease.
fn operator(plane: &Plane, root: &Path, identity: &str) -> (Proc, u16) {
    let port = free_port();
    let child = Command::new(bin("shoal-operator"))
        .args(["--node-addresses", "pod-ip", "--lease-seconds", "6", "--lease-namespace", "default"])
        .args(["--metrics-listen", &format!("127.0.0.1:{port}")])
        .env("KUBECONFIG", &plane.kubeconfig)
        .env("POD_NAME", identity)
        .env("RUST_LOG", "info,kube=warn")
        .stdout(Stdio::null())
        .stderr(log(root, identity))
        .spawn()
        .unwrap();
    (Proc(child), port)
}

/// `shoal_operator_leader` from an operator's /metrics (None while it is not answering).
async fn leader_gauge(port: u16) -> Option<f64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).await.ok()?;
    body.lines().find_map(|l| l.strip_prefix("shoal_operator_leader ")?.trim().parse().ok())
}

async fn wait_for<T>(what: &str, limit: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out after {limit:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The published topology (from the ConfigMap), if any.
async fn published(client: &Client) -> Option<Topology> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), NS).get_opt("demo-topology").await.ok()??;
    shoal_operator::store::parse(&cm).ok()?
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
    let api: Api<CacheCluster> = Api::namespaced(client.clone(), NS);
    wait_for(&format!("Ready with {shards} shards"), Duration::from_secs(120), async || {
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
        (status.phase == "Ready" && status.shards == shards && status.ready_shards == shards)
            .then_some(status)
    })
    .await
}

const NS_NAME: &str = "demo";

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

async fn check_keys(addr: &str) {
    let mut c = redis(addr).await;
    let keys: Vec<String> = (0..KEYS).map(|i| format!("k{i}")).collect();
    let values: Vec<Option<String>> = redis::cmd("MGET").arg(&keys).query_async(&mut c).await.unwrap();
    for (i, v) in values.iter().enumerate() {
        assert_eq!(v.as_deref(), Some(format!("v{i}").as_str()), "k{i} after resharding");
    }
    let ttl: i64 = redis::cmd("TTL").arg("session").query_async(&mut c).await.unwrap();
    assert!((3000..=3600).contains(&ttl), "TTL kept: {ttl}");
    let n: usize = redis::cmd("DBSIZE").query_async(&mut c).await.unwrap();
    assert_eq!(n, KEYS + 1);
}

/// The ConfigMap topology store against the real API server: create, publish newer, refuse older,
/// and lose a compare-and-swap race cleanly.
async fn store_scenarios(client: &Client, cc: &CacheCluster) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let store = ConfigMapStore::new(api.clone(), cc);
    assert_eq!(store.load().await.unwrap(), None);
    let mut t = Topology::even(&["127.0.0.1:1".into(), "127.0.0.1:2".into()]);
    t.version = 5;
    store.publish(&t).await.unwrap();
    assert_eq!(store.load().await.unwrap().unwrap().version, 5);
    let mut older = t.clone();
    older.version = 4;
    assert!(matches!(store.publish(&older).await, Err(StoreError::Stale { current: 5, new: 4 })));
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
    let Some(plane) = Plane::up() else { return };
    let root = tempfile::tempdir().unwrap();
    let root = root.path().to_path_buf();
    let client = plane.client().await;

    plane.kubectl(
        &["apply", "--server-side", "-f", &repo().join("charts/shoal/crds").display().to_string()],
        None,
    );
    plane.kubectl(
        &["wait", "--for", "condition=established", "--timeout=30s", "crd/cacheclusters.shoal.dev"],
        None,
    );
    plane.kubectl(&["create", "namespace", NS], None);

    // The API server enforces the CRD's validation.
    for (spec, complaint) in [
        ("{shards: 0}", "should be greater than or equal to 1"),
        ("{shards: 2, maxmemory: lots}", "maxmemory is a number with an optional unit"),
        ("{shards: 2, storage: {type: PersistentVolumeClaim}}", "storage.size is required"),
        ("{shards: 2, maxmemoryPolicy: lru}", "Unsupported value"),
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
    let (mut op_a, port_a) = operator(&plane, &root, "operator-a");
    wait_for("operator-a to lead", Duration::from_secs(30), async || {
        (leader_gauge(port_a).await == Some(1.0)).then_some(())
    })
    .await;
    let (_op_b, port_b) = operator(&plane, &root, "operator-b");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(leader_gauge(port_b).await, Some(0.0), "one active replica");

    let topology_file = root.join("topology.json");
    let kubelet = Kubelet::start(client.clone(), root.clone(), topology_file.clone());
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
    let dep = Api::<Deployment>::namespaced(client.clone(), NS).get("demo-router").await.unwrap();
    assert_eq!(published(&client).await.unwrap().nodes.len(), 3);

    // A router process, from the router pod's own spec.
    let router_pod = wait_for("a router pod", Duration::from_secs(30), async || {
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let l = pods.list(&ListParams::default().labels("app.kubernetes.io/component=router")).await.ok()?;
        l.items.into_iter().next()
    })
    .await;
    let container = dep.spec.unwrap().template.spec.unwrap().containers[0].clone();
    let (resp, http) = (free_port(), free_port());
    let router_args = rewrite(
        &container,
        &[
            ("--resp", format!("127.0.0.1:{resp}")),
            ("--http", format!("127.0.0.1:{http}")),
            ("--topology-file", topology_file.display().to_string()),
        ],
    );
    let _router = Proc(
        Command::new(bin("shoal-router"))
            .args(&router_args)
            .envs(resolve_env(&container, &router_pod))
            .stdout(Stdio::null())
            .stderr(log(&root, "router"))
            .spawn()
            .unwrap(),
    );
    let addr = format!("127.0.0.1:{resp}");
    wait_for("the router", Duration::from_secs(20), async || {
        std::net::TcpStream::connect(&addr).ok().map(|_| ())
    })
    .await;
    write_keys(&addr).await;

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
