//! Shared by the operator's end-to-end tests: the control plane, a stand-in kubelet that runs
//! real `shoal-node` processes for node pods, operator and router processes.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Probe, Secret};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

pub fn cache() -> PathBuf {
    std::env::var_os("SHOAL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/shoal"))
}

/// PATH with the tool cache first.
pub fn path_env() -> String {
    format!("{}:{}", cache().join("bin").display(), std::env::var("PATH").unwrap_or_default())
}

/// A workspace binary from the same target directory as this test.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().parent().unwrap().join(name);
    assert!(path.exists(), "{} not found: run `cargo build --bins` first", path.display());
    path
}

/// The control plane, started by this test (and stopped when dropped) unless `SHOAL_KUBECONFIG`
/// names a running one.
pub struct Plane {
    pub kubeconfig: PathBuf,
    dir: Option<PathBuf>,
}

impl Plane {
    pub fn up(name: &str) -> Option<Plane> {
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
        let dir = cache().join(format!("kube-{name}"));
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

    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> String {
        let (ok, out) = self.try_kubectl(args, stdin);
        assert!(ok, "kubectl {args:?}: {out}");
        out
    }

    /// Waits until the CRD `crd` (`crd/<name>`) is established. `kubectl wait` fails at once,
    /// instead of waiting, on a CRD whose status has no conditions yet (the API server has not got
    /// to it: a busy machine), so it is tried again, for at most a minute.
    pub fn wait_established(&self, crd: &str) {
        let started = Instant::now();
        loop {
            let (established, out) =
                self.try_kubectl(&["wait", "--for", "condition=established", "--timeout=30s", crd], None);
            if established {
                return;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "{crd} was not established: {out}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Runs kubectl; whether it succeeded, and its stdout and stderr.
    pub fn try_kubectl(&self, args: &[&str], stdin: Option<&str>) -> (bool, String) {
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

    pub async fn client(&self) -> Client {
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
pub struct Proc(pub Child);

impl Proc {
    pub fn terminate(&mut self) {
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

/// A tool from the tool cache (`.ci/tools/install`), or None (skipping, outside CI) when it is
/// missing.
pub fn tool(name: &str) -> Option<PathBuf> {
    let path = cache().join("bin").join(name);
    if path.exists() {
        return Some(path);
    }
    assert!(std::env::var_os("CI").is_none(), "{name} missing: run .ci/tools/install {name}");
    eprintln!("SKIPPED: {name} missing (run .ci/tools/install {name})");
    None
}

/// `helm template` of `charts/shoal` (release `rel`, namespace shoal-system) with `args`; the
/// manifests as JSON values, or helm's error text. None when helm is missing (see [`tool`]).
pub fn render(args: &[&str]) -> Option<Result<Vec<serde_json::Value>, String>> {
    let helm = tool("helm")?;
    let chart = repo().join("charts/shoal");
    let out = Command::new(helm)
        .args(["template", "rel", chart.to_str().unwrap(), "--namespace", "shoal-system"])
        .args(args)
        .output()
        .unwrap();
    if !out.status.success() {
        return Some(Err(String::from_utf8_lossy(&out.stderr).into_owned()));
    }
    let text = String::from_utf8(out.stdout).unwrap();
    let docs = text
        .split("\n---")
        .filter_map(|d| serde_yaml::from_str::<serde_json::Value>(d).ok())
        .filter(|v| v.is_object())
        .collect();
    Some(Ok(docs))
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub fn log(dir: &Path, name: &str) -> Stdio {
    Stdio::from(std::fs::File::create(dir.join(format!("{name}.log"))).unwrap())
}

/// A container's args with the pod-side addresses and paths swapped for this machine's.
pub fn rewrite(c: &Container, subst: &[(&str, String)]) -> Vec<String> {
    let mut args = c.args.clone().unwrap_or_default();
    for i in 1..args.len() {
        if let Some((_, v)) = subst.iter().find(|(flag, _)| args[i - 1] == *flag) {
            args[i] = v.clone();
        }
    }
    args
}

/// `$(VAR)` references in `args` replaced by the values in `env`, as the kubelet does for a
/// container's command and args (an undefined reference stays as it is).
pub fn expand(args: Vec<String>, env: &[(String, String)]) -> Vec<String> {
    args.into_iter()
        .map(|mut a| {
            for (k, v) in env {
                a = a.replace(&format!("$({k})"), v);
            }
            a
        })
        .collect()
}

/// The container's environment, resolving the downward-API label references and Secret keys it
/// uses.
pub async fn resolve_env(client: &Client, c: &Container, pod: &Pod) -> Vec<(String, String)> {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let ns = pod.metadata.namespace.clone().unwrap();
    let mut out = Vec::new();
    for e in c.env.iter().flatten() {
        let from = e.value_from.as_ref();
        let value = match (
            &e.value,
            from.and_then(|v| v.field_ref.as_ref()),
            from.and_then(|v| v.secret_key_ref.as_ref()),
        ) {
            (Some(v), _, _) => v.clone(),
            (None, Some(f), _) if f.field_path.starts_with("metadata.labels[") => {
                let label = f.field_path.trim_start_matches("metadata.labels['").trim_end_matches("']");
                labels.get(label).unwrap_or_else(|| panic!("pod has no label {label}")).clone()
            }
            (None, Some(f), _) if f.field_path == "metadata.name" => pod.metadata.name.clone().unwrap(),
            (None, Some(f), _) if f.field_path == "status.podIP" => {
                pod.status.as_ref().and_then(|s| s.pod_ip.clone()).expect("a running pod has an IP")
            }
            (None, Some(f), _) if f.field_path == "metadata.namespace" => ns.clone(),
            (None, None, Some(s)) => {
                let secret = Api::<Secret>::namespaced(client.clone(), &ns).get(&s.name).await.unwrap();
                let bytes = secret
                    .data
                    .unwrap_or_default()
                    .remove(&s.key)
                    .unwrap_or_else(|| panic!("no key {} in secret {}", s.key, s.name));
                String::from_utf8(bytes.0).unwrap()
            }
            _ => panic!("unsupported env source in {e:?}"),
        };
        out.push((e.name.clone(), value));
    }
    out
}

/// Plays the kubelet for node pods and the ConfigMap volume (see the module docs).
pub struct Kubelet {
    stop: Arc<AtomicBool>,
    /// Pods (by name) whose process is stopped and not restarted, like a container that is
    /// restarting: the pod stays, its process does not run.
    paused: Arc<parking_lot::Mutex<HashSet<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Kubelet {
    /// Runs node processes for the node pods of CacheCluster `instance` in `ns`.
    pub fn start(client: Client, ns: &str, instance: &str, root: PathBuf, topology_file: PathBuf) -> Kubelet {
        let (ns, instance) = (ns.to_string(), instance.to_string());
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let paused = Arc::new(parking_lot::Mutex::new(HashSet::new()));
        let paused_pods = paused.clone();
        let task = tokio::spawn(async move {
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
            // Processes by pod uid, with their pod's IP; and processes being stopped, by IP.
            let mut running: HashMap<String, (String, Proc)> = HashMap::new();
            let mut stopping: Vec<(String, tokio::task::JoinHandle<()>)> = Vec::new();
            let mut projected = String::new();
            while !flag.load(Ordering::Relaxed) {
                if let Ok(Some(cm)) = maps.get_opt(&format!("{instance}-topology")).await
                    && let Some(doc) = cm.data.and_then(|d| d.get("topology.json").cloned())
                    && doc != projected
                {
                    let tmp = topology_file.with_extension("tmp");
                    std::fs::write(&tmp, &doc).unwrap();
                    std::fs::rename(&tmp, &topology_file).unwrap();
                    projected = doc;
                }
                let selector =
                    format!("app.kubernetes.io/instance={instance},app.kubernetes.io/component=node");
                let Ok(list) = pods.list(&ListParams::default().labels(&selector)).await else {
                    // The API server may be gone (a failed test tearing down): never spin.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let mut alive = Vec::new();
                let mut start = Vec::new();
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
                    if paused_pods.lock().contains(pod.metadata.name.as_deref().unwrap_or_default()) {
                        continue; // not alive: its process is stopped below (SIGTERM)
                    }
                    alive.push(uid.clone());
                    if !running.contains_key(&uid) {
                        start.push((pod, uid, ip));
                    }
                }
                // Gone pods' processes stop at once and side by side, as kubelets stop containers
                // (SIGTERM, up to 10 s, then SIGKILL). kwok deletes a pod without waiting for its
                // grace period and may give the StatefulSet's replacement the same IP; a real
                // pod's IP is not reused while the old sandbox lives, so a process starts only
                // once no stopping process holds its IP.
                let gone: Vec<String> = running.keys().filter(|uid| !alive.contains(uid)).cloned().collect();
                for uid in gone {
                    if let Some((ip, mut proc)) = running.remove(&uid) {
                        stopping.push((ip, tokio::task::spawn_blocking(move || proc.terminate())));
                    }
                }
                stopping.retain(|(_, stop)| !stop.is_finished());
                for (pod, uid, ip) in start {
                    if stopping.iter().any(|(held, _)| *held == ip) {
                        continue; // next round
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
                    let env = resolve_env(&client, container, pod).await;
                    let args = expand(args, &env);
                    let child = Command::new(bin("shoal-node"))
                        .args(&args)
                        .envs(env)
                        .stdout(Stdio::null())
                        // A pod recreated under the same name gets its own log.
                        .stderr(log(&root, &format!("{name}-{}", &uid[..8.min(uid.len())])))
                        .spawn()
                        .unwrap();
                    running.insert(uid, (ip, Proc(child)));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            for (_, stop) in stopping {
                let _ = stop.await;
            }
        });
        Kubelet { stop, paused, task }
    }

    /// Stops the process of node pod `name` (SIGTERM, as a kubelet restarting the container
    /// would) and keeps it stopped until [`Kubelet::resume`]. The pod itself stays (and stays
    /// Running in the API: kwok does not know).
    pub fn pause(&self, name: &str) {
        self.paused.lock().insert(name.to_string());
    }

    /// Lets node pod `name` run again (a new process on the same data directory).
    pub fn resume(&self, name: &str) {
        self.paused.lock().remove(name);
    }

    pub async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
    }
}

/// An operator process with `kubeconfig`'s credentials; `identity` names it in the Lease.
pub fn operator(
    kubeconfig: &Path,
    root: &Path,
    identity: &str,
    args: &[String],
    env: &[(String, String)],
) -> (Proc, u16) {
    let port = free_port();
    // Operators sharing `root` share a key (as the chart's replicas share its Secret), so a new
    // leader derives the same cluster secrets.
    let mut args = args.to_vec();
    if !args.iter().any(|a| a.starts_with("--secret-key-file")) {
        let key = root.join("operator-key");
        if !key.exists() {
            std::fs::write(&key, "an operator key for the tests, 32+ bytes long").unwrap();
        }
        args.push(format!("--secret-key-file={}", key.display()));
    }
    let child = Command::new(bin("shoal-operator"))
        .args(&args)
        .args(["--metrics-listen", &format!("127.0.0.1:{port}")])
        .env("KUBECONFIG", kubeconfig)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("POD_NAME", identity)
        .env("RUST_LOG", "info,kube=warn,shoal_operator=debug")
        .stdout(Stdio::null())
        .stderr(log(root, identity))
        .spawn()
        .unwrap();
    (Proc(child), port)
}

/// A router process from a router pod's own container spec, serving RESP on a free port and
/// routing by `topology_file`; returns it and its RESP address.
pub async fn router(
    client: &Client,
    ns: &str,
    instance: &str,
    root: &Path,
    topology_file: &Path,
) -> (Proc, String) {
    let r = router_pod(client, ns, instance, root, topology_file).await;
    (r.proc, r.resp)
}

/// A router process run for a router pod (see [`router_pod`]).
pub struct RouterPod {
    pub proc: Proc,
    /// Its RESP address (`127.0.0.1:port`).
    pub resp: String,
    /// Its HTTP address.
    pub http: String,
    /// Its RESP-over-TLS address, when the pod serves TLS.
    pub tls: Option<String>,
    /// The pod's container, for its probes and ports.
    pub container: Container,
}

impl RouterPod {
    /// Runs the container's readiness probe against the process, the way the kubelet would
    /// (HTTP GET, success is 200..=399, `timeoutSeconds` default 1): the pod's Ready condition as
    /// far as this harness can model it (kwok marks pods Ready on its own).
    pub async fn ready(&self) -> bool {
        let probe = self.container.readiness_probe.as_ref().expect("the router pod has a readiness probe");
        probe_http(probe, &self.container, &[("resp", &self.resp), ("http", &self.http)]).await
    }
}

/// Runs an `httpGet` probe of `container`; `ports` maps container port names to the local
/// addresses the harness gave them.
pub async fn probe_http(probe: &Probe, container: &Container, ports: &[(&str, &str)]) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let get = probe.http_get.as_ref().expect("an httpGet probe");
    assert!(get.scheme.as_deref().unwrap_or("HTTP") == "HTTP", "HTTP probes only");
    let name = match &get.port {
        IntOrString::String(name) => name.clone(),
        IntOrString::Int(port) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.container_port == *port)
            .and_then(|p| p.name.clone())
            .unwrap_or_else(|| panic!("the probe's port {port} is not a declared container port")),
    };
    let addr = ports
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no local address for port {name}"))
        .1;
    let path = get.path.clone().unwrap_or_else(|| "/".into());
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for h in get.http_headers.iter().flatten() {
        request.push_str(&format!("{}: {}\r\n", h.name, h.value));
    }
    request.push_str("\r\n");
    let timeout = Duration::from_secs(probe.timeout_seconds.unwrap_or(1).max(1) as u64);
    let response = tokio::time::timeout(timeout, async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(request.as_bytes()).await.ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).await.ok()?;
        Some(out)
    })
    .await
    .ok()
    .flatten();
    let status: Option<u16> = response.as_deref().and_then(|r| r.split(' ').nth(1)?.parse().ok());
    status.is_some_and(|s| (200..400).contains(&s))
}

/// A router process from a router pod's own container spec (args and environment), serving RESP
/// and HTTP on free loopback ports and routing by `topology_file`.
pub async fn router_pod(
    client: &Client,
    ns: &str,
    instance: &str,
    root: &Path,
    topology_file: &Path,
) -> RouterPod {
    let selector = format!("app.kubernetes.io/instance={instance},app.kubernetes.io/component=router");
    let pod = wait_for("a router pod", Duration::from_secs(60), async || {
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        pods.list(&ListParams::default().labels(&selector)).await.ok()?.items.into_iter().next()
    })
    .await;
    let container = pod.spec.as_ref().unwrap().containers[0].clone();
    let (resp, http, tls) = (free_port(), free_port(), free_port());
    let mut args = rewrite(
        &container,
        &[
            ("--resp", format!("127.0.0.1:{resp}")),
            ("--http", format!("127.0.0.1:{http}")),
            ("--tls-port", format!("127.0.0.1:{tls}")),
            ("--https", format!("127.0.0.1:{}", free_port())),
            ("--topology-file", topology_file.display().to_string()),
            // No Service sends clients here (kwok runs no kube-proxy): stop at once.
            ("--shutdown-delay-ms", "0".into()),
        ],
    );
    // Secret volumes (TLS certificate, ACL file) written where the process can read them, and
    // the paths in the arguments pointed there.
    for (mount, local) in secret_volumes(client, &pod, &container, root).await {
        for a in args.iter_mut() {
            if let Some(rest) = a.strip_prefix(&mount) {
                *a = format!("{}{rest}", local.display());
            }
        }
    }
    let tls = args.iter().any(|a| a == "--tls-port").then(|| format!("127.0.0.1:{tls}"));
    let child = Command::new(bin("shoal-router"))
        .args(&args)
        .envs(resolve_env(client, &container, &pod).await)
        .stdout(Stdio::null())
        .stderr(log(root, "router"))
        .spawn()
        .unwrap();
    let addr = format!("127.0.0.1:{resp}");
    wait_for("the router", Duration::from_secs(30), async || {
        std::net::TcpStream::connect(&addr).ok().map(|_| ())
    })
    .await;
    RouterPod { proc: Proc(child), resp: addr, http: format!("127.0.0.1:{http}"), tls, container }
}

/// The pod's Secret volumes that `container` mounts, written under `root` as the kubelet would
/// project them (every key, or the volume's `items`): (mount path, local directory).
pub async fn secret_volumes(
    client: &Client,
    pod: &Pod,
    container: &Container,
    root: &Path,
) -> Vec<(String, PathBuf)> {
    let ns = pod.metadata.namespace.clone().unwrap();
    let mut out = Vec::new();
    for v in pod.spec.as_ref().unwrap().volumes.iter().flatten() {
        let Some(source) = &v.secret else { continue };
        let Some(mount) = container.volume_mounts.iter().flatten().find(|m| m.name == v.name) else {
            continue;
        };
        let name = source.secret_name.clone().unwrap();
        let secret = wait_for(&format!("Secret {name}"), Duration::from_secs(30), async || {
            Api::<Secret>::namespaced(client.clone(), &ns).get(&name).await.ok()
        })
        .await;
        let data = secret.data.unwrap_or_default();
        let dir = root.join(format!("volume-{}", v.name));
        std::fs::create_dir_all(&dir).unwrap();
        match &source.items {
            Some(items) => {
                for item in items {
                    std::fs::write(dir.join(&item.path), &data[&item.key].0).unwrap();
                }
            }
            None => {
                for (key, value) in &data {
                    std::fs::write(dir.join(key), &value.0).unwrap();
                }
            }
        }
        out.push((mount.mount_path.clone(), dir));
    }
    out
}

/// The whole HTTP response of `addr`'s /metrics (None while it is not answering).
async fn scrape(addr: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).await.ok()?;
    Some(body)
}

/// The metric families (`# TYPE` lines) of `addr`'s /metrics page (empty while it is not
/// answering).
pub async fn metric_families(addr: &str) -> std::collections::BTreeSet<String> {
    let page = scrape(addr).await.unwrap_or_default();
    page.lines().filter_map(|l| Some(l.strip_prefix("# TYPE ")?.split(' ').next()?.to_string())).collect()
}

/// An unlabelled series from `addr`'s /metrics (None while it is not answering).
async fn metric(addr: &str, name: &str) -> Option<f64> {
    let body = scrape(addr).await?;
    body.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// An unlabelled series from a router's /metrics (None while it is not answering).
pub async fn router_metric(http: &str, name: &str) -> Option<f64> {
    metric(http, name).await
}

/// A router's `shoal_router_node_up` gauge per node id, from its /metrics (None while it is not
/// answering).
pub async fn router_nodes_up(http: &str) -> Option<Vec<(u32, f64)>> {
    let body = scrape(http).await?;
    if !body.starts_with("HTTP/1.1 200") {
        return None;
    }
    Some(
        body.lines()
            .filter_map(|l| l.strip_prefix("shoal_router_node_up{node=\""))
            .filter_map(|rest| {
                let (id, rest) = rest.split_once('"')?;
                Some((id.parse().ok()?, rest.rsplit(' ').next()?.parse().ok()?))
            })
            .collect(),
    )
}

/// `shoal_operator_leader` from an operator's /metrics (None while it is not answering).
pub async fn leader_gauge(port: u16) -> Option<f64> {
    operator_metric(port, "shoal_operator_leader").await
}

/// An unlabelled series from an operator's /metrics (None while it is not answering).
pub async fn operator_metric(port: u16, name: &str) -> Option<f64> {
    metric(&format!("127.0.0.1:{port}"), name).await
}

pub async fn wait_for<T>(what: &str, limit: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out after {limit:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A scratch directory for process logs and data; if the test fails, the tails of its logs are
/// printed and the directory is kept for inspection.
pub struct TestDir(pub tempfile::TempDir);

impl TestDir {
    pub fn new() -> TestDir {
        TestDir(tempfile::tempdir().unwrap())
    }

    pub fn path(&self) -> PathBuf {
        self.0.path().to_path_buf()
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        self.0.disable_cleanup(true);
        eprintln!("--- logs kept in {}", self.0.path().display());
        let Ok(entries) = std::fs::read_dir(self.0.path()) else { return };
        for e in entries.flatten().filter(|e| e.path().extension().is_some_and(|x| x == "log")) {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!("--- {} (last 25 lines)", e.file_name().to_string_lossy());
            for l in &lines[lines.len().saturating_sub(25)..] {
                eprintln!("{l}");
            }
        }
    }
}

/// `charts/shoal/examples/sidecar.yaml` as shipped, and with its optional part (the commented
/// documents after the `# ---` line) uncommented, as a user who wants the load check would.
pub fn sidecar_example() -> (String, String) {
    let text = std::fs::read_to_string(repo().join("charts/shoal/examples/sidecar.yaml")).unwrap();
    let at = text.find("\n# ---\n").expect("the example's optional part starts at a `# ---` line") + 1;
    let optional: String = text[at..]
        .lines()
        .map(|l| l.strip_prefix("# ").or_else(|| l.strip_prefix('#')).unwrap_or(l))
        .map(|l| format!("{l}\n"))
        .collect();
    let full = format!("{}{optional}", &text[..at]);
    (text, full)
}

/// The pod templates of `yaml`'s Deployments and Jobs: (object name, pod spec).
pub fn pod_templates(yaml: &str) -> Vec<(String, k8s_openapi::api::core::v1::PodSpec)> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::batch::v1::Job;
    use serde::Deserialize;
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let v = serde_yaml::Value::deserialize(doc).unwrap();
        let (kind, spec) = match v["kind"].as_str() {
            Some("Deployment") => {
                let d: Deployment = serde_yaml::from_value(v).unwrap();
                (d.metadata.name.unwrap(), d.spec.unwrap().template.spec.unwrap())
            }
            Some("Job") => {
                let j: Job = serde_yaml::from_value(v).unwrap();
                (j.metadata.name.unwrap(), j.spec.unwrap().template.spec.unwrap())
            }
            _ => continue,
        };
        out.push((kind, spec));
    }
    out
}
