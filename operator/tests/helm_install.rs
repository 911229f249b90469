//! The Helm chart against a real API server (`.ci/kube/up`): `helm lint --strict`; every values
//! variant in `charts/shoal/ci/` rendered and applied with `--dry-run=server`; the sidecar
//! example validated the same way, its optional load-check Job uncommented too; then a real
//! `helm install`, the operator running with the chart's own ServiceAccount and RBAC (a token
//! for that account), the CacheCluster reaching Ready with real node and router processes (see
//! `support`) and, as the chart's default, a synced replica per shard, the `helm test` hook's
//! command passing against it, the sidecar example's router sidecar, app (`shoal-sidecar-demo`,
//! on the fast path) and load check (`shoal-bench`) run with their own arguments, env and
//! Secrets against it, and `helm uninstall` removing everything.

mod support;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, ContainerPort, Pod, PodSpec, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams};
use shoal_operator::crd::CacheCluster;
use support::{Kubelet, Plane, cache, repo, wait_for};

const NS: &str = "shoal-system";

fn helm(plane: &Plane, args: &[&str]) -> String {
    let out = std::process::Command::new(cache().join("bin/helm"))
        .args(args)
        .env("KUBECONFIG", &plane.kubeconfig)
        .output()
        .unwrap();
    assert!(out.status.success(), "helm {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Runs the router sidecar (first init container) of an example pod `spec` here, as the kubelet
/// would: its env and Secret volumes resolved, its socket and loopback ports moved under `dir`,
/// the topology file the stand-in kubelet keeps; returns once its own startup probe passes.
async fn sidecar_router(
    client: &kube::Client,
    spec: &PodSpec,
    dir: &Path,
    topology_file: &Path,
) -> (support::Proc, Pod, std::path::PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("shop-0".into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        spec: Some(spec.clone()),
        ..Default::default()
    };
    let router = &spec.init_containers.as_ref().unwrap()[0];
    let volumes = support::secret_volumes(client, &pod, router, dir).await;
    let sock = dir.join("shoal.sock");
    let http = format!("127.0.0.1:{}", support::free_port());
    let probe = router.startup_probe.clone().expect("the sidecar's startup probe");
    let probe_port = match &probe.http_get.as_ref().unwrap().port {
        IntOrString::Int(p) => *p,
        other => panic!("{other:?}"),
    };
    let args: Vec<String> = router
        .args
        .clone()
        .unwrap()
        .into_iter()
        .map(|a| {
            let (flag, value) = a.split_once('=').expect("--flag=value");
            let value = match flag {
                "--topology-file" => topology_file.display().to_string(),
                "--unix-socket" => sock.display().to_string(),
                "--resp" => format!("127.0.0.1:{}", support::free_port()),
                "--http" => {
                    assert_eq!(value, format!("127.0.0.1:{probe_port}"), "the probe checks this listener");
                    http.clone()
                }
                _ => volumes
                    .iter()
                    .find_map(|(mount, local)| {
                        value.strip_prefix(mount.as_str()).map(|rest| format!("{}{rest}", local.display()))
                    })
                    .unwrap_or_else(|| value.to_string()),
            };
            format!("{flag}={value}")
        })
        .collect();
    let child = std::process::Command::new(support::bin(&router.command.as_ref().unwrap()[0]))
        .args(&args)
        .env_clear()
        .envs(support::resolve_env(client, router, &pod).await)
        .stdout(std::process::Stdio::null())
        .stderr(support::log(dir, "router"))
        .spawn()
        .unwrap();
    let proc = support::Proc(child);
    // The probe's port, named for probe_http.
    let mut probed = router.clone();
    probed.ports = Some(vec![ContainerPort {
        name: Some("http".into()),
        container_port: probe_port,
        ..Default::default()
    }]);
    wait_for("the sidecar router's startup probe", Duration::from_secs(60), async || {
        support::probe_http(&probe, &probed, &[("http", &http)]).await.then_some(())
    })
    .await;
    (proc, pod, sock)
}

/// A kubeconfig like `plane`'s but authenticating as `token`.
fn kubeconfig_with_token(plane: &Plane, token: &str, dir: &Path) -> std::path::PathBuf {
    let mut doc: serde_json::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&plane.kubeconfig).unwrap()).unwrap();
    doc["users"] = serde_json::json!([{"name": "operator", "user": {"token": token}}]);
    doc["contexts"][0]["context"]["user"] = "operator".into();
    let path = dir.join("operator.kubeconfig");
    std::fs::write(&path, serde_yaml::to_string(&doc).unwrap()).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_lints_renders_installs_tests_and_uninstalls() {
    if !cache().join("bin/helm").exists() {
        assert!(std::env::var_os("CI").is_none(), "helm missing: run .ci/tools/install helm");
        eprintln!("SKIPPED: helm missing");
        return;
    }
    let Some(plane) = Plane::up("helm") else { return };
    let dir = support::TestDir::new();
    let root = dir.path();
    let chart = repo().join("charts/shoal");
    let chart = chart.to_str().unwrap();
    let client = plane.client().await;

    // Lint and server-side dry runs of every variant.
    let variants: Vec<String> = std::fs::read_dir(repo().join("charts/shoal/ci"))
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .collect();
    assert!(variants.len() >= 3);
    helm(&plane, &["lint", "--strict", chart]);
    plane.kubectl(&["apply", "--server-side", "-f", &format!("{chart}/crds")], None);
    plane.wait_established("crd/cacheclusters.shoal.dev");
    plane.kubectl(&["create", "namespace", "shoal-apps"], None);
    let mut renders = vec![helm(&plane, &["template", "t", chart, "-n", "shoal-apps"])];
    for v in &variants {
        helm(&plane, &["lint", "--strict", chart, "-f", v]);
        renders.push(helm(&plane, &["template", "t", chart, "-n", "shoal-apps", "-f", v]));
    }
    for manifests in renders {
        let out =
            plane.kubectl(&["apply", "--dry-run=server", "-n", "shoal-apps", "-f", "-"], Some(&manifests));
        assert!(out.contains("(server dry run)"), "{out}");
    }
    // The sidecar example as shipped, and with its optional load-check Job uncommented.
    let (example, with_job) = support::sidecar_example();
    for (yaml, objects) in [(&example, 1), (&with_job, 2)] {
        let out = plane.kubectl(&["apply", "--dry-run=server", "-n", "shoal-apps", "-f", "-"], Some(yaml));
        assert_eq!(out.matches("(server dry run)").count(), objects, "{out}");
    }

    // A real install. The operator Deployment's pods are kwok's (nothing runs in them), so the
    // operator runs here, with the arguments and the ServiceAccount the chart gives it.
    helm(
        &plane,
        &[
            "install",
            "rel",
            chart,
            "-n",
            NS,
            "--create-namespace",
            "--wait",
            "--timeout",
            "90s",
            "--set",
            "operator.nodeAddresses=pod-ip",
            "--set",
            "operator.replicas=1",
            "--set",
            "cluster.shards=2",
            "--set",
            "cluster.routers=1",
            // TLS (a certificate Helm generates) and two restricted users from the chart's Secret.
            "--set",
            "cluster.tls.enabled=true",
            "--set",
            "cluster.acl.users[0]=user dash on >dash-pw ~* +@read",
            "--set",
            "cluster.acl.users[1]=user shop on >shop-pw ~shop:* +@all -@dangerous",
        ],
    );
    let token = plane.kubectl(&["create", "token", "rel-shoal-operator", "-n", NS, "--duration=1h"], None);
    let kubeconfig = kubeconfig_with_token(&plane, token.trim(), &root);
    let dep = Api::<Deployment>::namespaced(client.clone(), NS).get("rel-shoal-operator").await.unwrap();
    let container = dep.spec.unwrap().template.spec.unwrap().containers[0].clone();
    // The key Secret the chart generated, projected where the Deployment mounts it.
    let key = Api::<Secret>::namespaced(client.clone(), NS).get("rel-shoal-operator-key").await.unwrap();
    let key = key.data.unwrap()["key"].0.clone();
    assert!(key.len() >= 32, "the chart's operator key has {} bytes", key.len());
    std::fs::write(root.join("operator-key"), &key).unwrap();
    let args: Vec<String> = container
        .args
        .clone()
        .unwrap()
        .into_iter()
        .filter(|a| !a.starts_with("--metrics-listen"))
        .map(|a| match a.strip_prefix("--secret-key-file=") {
            Some(path) => {
                assert_eq!(path, "/etc/shoal/operator-key/key", "the mounted Secret");
                format!("--secret-key-file={}", root.join("operator-key").display())
            }
            None => a,
        })
        .collect();
    // The Deployment's own pod supplies the environment (POD_NAMESPACE picks the Lease's home).
    let pod = wait_for("the operator pod", Duration::from_secs(60), async || {
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let lp = ListParams::default().labels("app.kubernetes.io/component=operator");
        pods.list(&lp).await.ok()?.items.into_iter().next()
    })
    .await;
    let env = support::resolve_env(&client, &container, &pod).await;
    let (_operator, _) = support::operator(&kubeconfig, &root, "rel-operator", &args, &env);

    let topology_file = root.join("topology.json");
    let kubelet = Kubelet::start(client.clone(), NS, "rel", root.clone(), topology_file.clone());
    let ccs: Api<CacheCluster> = Api::namespaced(client.clone(), NS);
    // The chart's default: a replica per shard, each synced (the operator, on the chart's RBAC,
    // also made the replicas' StatefulSet and the per-shard budgets).
    wait_for("the chart's CacheCluster to be Ready, replicas synced", Duration::from_secs(120), async || {
        let s = ccs.get("rel").await.ok()?.status?;
        let synced = s.shard_status.len() == 2
            && s.shard_status.iter().all(|sh| sh.replicas.len() == 1 && sh.replicas.iter().all(|r| r.synced));
        (s.phase == "Ready" && s.shards == 2 && synced).then_some(())
    })
    .await;
    let router = support::router_pod(&client, NS, "rel", &root, &topology_file).await;
    let addr = router.resp.clone();

    // `helm test`: run the hook's own command against the router.
    let hooks = helm(&plane, &["get", "hooks", "rel", "-n", NS]);
    let pod: Pod = hooks
        .split("\n---")
        .filter_map(|d| serde_yaml::from_str::<Pod>(d).ok())
        .find(|p| p.metadata.name.as_deref() == Some("rel-check"))
        .expect("the test hook");
    let mut pod = pod;
    pod.metadata.namespace = Some(NS.into());
    let c = pod.spec.as_ref().unwrap().containers[0].clone();
    let check_args = support::rewrite(&c, &[("--addr", addr.clone()), ("--timeout-secs", "30".into())]);
    let env = support::resolve_env(&client, &c, &pod).await;
    assert!(env.iter().any(|(k, _)| k == "SHOAL_REQUIREPASS"), "the generated password is used");
    let out = std::process::Command::new(support::bin("shoal-router"))
        .args(&check_args)
        .envs(env)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("check passed"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Without the password, the router refuses: the Secret really is in force.
    let anonymous = std::process::Command::new(support::bin("shoal-router"))
        .args(&check_args)
        .env_remove("SHOAL_REQUIREPASS")
        .output()
        .unwrap();
    let refusal = String::from_utf8_lossy(&anonymous.stderr);
    assert!(!anonymous.status.success() && refusal.contains("NOAUTH"), "{refusal}");

    // TLS with the chart's certificate: redis-cli --tls trusting the generated CA.
    let tls = Api::<Secret>::namespaced(client.clone(), NS).get("rel-tls").await.unwrap().data.unwrap();
    std::fs::write(root.join("ca.crt"), &tls["ca.crt"].0).unwrap();
    let password = support::resolve_env(&client, &c, &pod)
        .await
        .into_iter()
        .find(|(k, _)| k == "SHOAL_REQUIREPASS")
        .unwrap()
        .1;
    let cli = |addr: &str, extra: &[&str], cmd: &[&str]| {
        let (host, port) = addr.rsplit_once(':').unwrap();
        let out = std::process::Command::new("redis-cli")
            .args(["-h", host, "-p", port, "--no-auth-warning"])
            .args(extra)
            .args(cmd)
            .output()
            .expect("redis-cli installed");
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
            .trim()
            .to_string()
    };
    let tls_addr = router.tls.clone().expect("the router pod serves TLS");
    let ca = root.join("ca.crt").display().to_string();
    let tls_args = ["--tls", "--cacert", &ca, "-a", &password];
    assert_eq!(cli(&tls_addr, &tls_args, &["SET", "shop:1", "over tls"]), "OK");
    assert_eq!(cli(&tls_addr, &tls_args, &["GET", "shop:1"]), "over tls");
    // The users from the chart's Secret can do only what their rules say.
    let dash = ["--user", "dash", "--pass", "dash-pw"];
    assert_eq!(cli(&addr, &dash, &["GET", "shop:1"]), "over tls");
    let denied = cli(&addr, &dash, &["SET", "shop:1", "x"]);
    assert!(denied.contains("NOPERM") && denied.contains("'set' command"), "{denied}");
    let shop = ["--user", "shop", "--pass", "shop-pw"];
    assert_eq!(cli(&addr, &shop, &["SET", "shop:2", "mine"]), "OK");
    let denied = cli(&addr, &shop, &["GET", "orders:1"]);
    assert!(denied.contains("NOPERM") && denied.contains("keys"), "{denied}");
    let denied = cli(&addr, &shop, &["FLUSHALL"]);
    assert!(denied.contains("NOPERM"), "{denied}");
    let wrong = cli(&addr, &["--user", "shop", "--pass", "nope"], &["PING"]);
    assert!(wrong.contains("WRONGPASS"), "{wrong}");

    // The sidecar example against this cluster (its names: "cache" becomes "rel"): its router
    // sidecar with the example's own arguments, env and Secret volumes; the app container's
    // command (shoal-sidecar-demo) signed in as shop from the app's Secret, over the fast path;
    // then the optional Job's shoal-bench the same way.
    let shop_secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "shop-redis", "namespace": NS},
        "stringData": {"password": "shop-pw"},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), NS).create(&Default::default(), &shop_secret).await.unwrap();
    let local = with_job.replace("cache-", "rel-").replace("router-of: cache", "router-of: rel");
    let pods = support::pod_templates(&local);
    let (_, spec) = &pods[0];
    let (_sidecar, pod, sock) = sidecar_router(&client, spec, &root.join("shop"), &topology_file).await;
    let app = &spec.containers[0];
    let mut env = support::resolve_env(&client, app, &pod).await;
    let rounds: u64 = env.iter().find(|(k, _)| k == "SHOAL_ROUNDS").unwrap().1.parse().unwrap();
    let prefix = env.iter().find(|(k, _)| k == "SHOAL_KEY_PREFIX").unwrap().1.clone();
    for (k, v) in env.iter_mut() {
        match k.as_str() {
            "SHOAL_SOCKET" => *v = sock.display().to_string(),
            "SHOAL_STAY" => *v = "0".into(), // exit after the rounds here
            _ => {}
        }
    }
    let out = std::process::Command::new(support::bin(&app.command.as_ref().unwrap()[0]))
        .args(app.args.iter().flatten())
        .env_clear()
        .envs(env)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.starts_with(&format!("connected to {} over Fast\n", sock.display())), "{text}");
    let hits = format!("{prefix}hits");
    assert!(text.trim_end().ends_with(&format!("{hits} = {rounds}")), "{text}");
    let last = format!("{prefix}{}", rounds - 1);
    assert_eq!(cli(&addr, &shop, &["GET", &last]), format!("value {}", rounds - 1));
    assert_eq!(cli(&addr, &shop, &["GET", &hits]), rounds.to_string());

    let (_, spec) = &pods[1];
    let (_bench_sidecar, pod, sock) =
        sidecar_router(&client, spec, &root.join("shop-bench"), &topology_file).await;
    let bench = &spec.containers[0];
    let env = support::resolve_env(&client, bench, &pod).await;
    // The Job's command line, with this machine's socket, fewer requests, and 10 keys (so its
    // random SETs surely write each).
    let mut args = support::rewrite(bench, &[("-s", sock.display().to_string()), ("-n", "2000".into())]);
    args.extend(["-r".into(), "10".into()]);
    let out = std::process::Command::new(support::bin(&bench.command.as_ref().unwrap()[0]))
        .args(&args)
        .env_clear()
        .envs(env)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_str(text.trim()).expect("--json: one document");
    assert_eq!(report["transport"], "fast");
    for t in report["tests"].as_array().unwrap() {
        assert_eq!((&t["requests"], &t["errors"]), (&2000.into(), &0.into()), "{t}");
    }
    let written = cli(&addr, &shop, &["EXISTS", "shop:bench:0", "shop:bench:1", "shop:bench:2"]);
    assert_eq!(written, "3", "the bench's SETs landed under its prefix");

    // Uninstall: the chart's objects go, and the CacheCluster's go with it (owner references).
    helm(&plane, &["uninstall", "rel", "-n", NS, "--wait", "--timeout", "60s"]);
    wait_for("everything removed", Duration::from_secs(60), async || {
        let gone = ccs.get_opt("rel").await.ok()?.is_none()
            && Api::<StatefulSet>::namespaced(client.clone(), NS).get_opt("rel-node").await.ok()?.is_none()
            && Api::<StatefulSet>::namespaced(client.clone(), NS)
                .get_opt("rel-node-r1")
                .await
                .ok()?
                .is_none()
            && Api::<Deployment>::namespaced(client.clone(), NS).get_opt("rel-router").await.ok()?.is_none()
            && Api::<Deployment>::namespaced(client.clone(), NS)
                .get_opt("rel-shoal-operator")
                .await
                .ok()?
                .is_none()
            && Api::<ConfigMap>::namespaced(client.clone(), NS).get_opt("rel-topology").await.ok()?.is_none()
            && Api::<Secret>::namespaced(client.clone(), NS).get_opt("rel-password").await.ok()?.is_none()
            && Api::<ServiceAccount>::namespaced(client.clone(), NS)
                .get_opt("rel-shoal-operator")
                .await
                .ok()?
                .is_none()
            && Api::<ClusterRole>::all(client.clone()).get_opt("rel-shoal-operator").await.ok()?.is_none()
            // The Lease the operator made at run time goes with its Deployment (its owner).
            && Api::<Lease>::namespaced(client.clone(), NS).get_opt("rel-shoal-operator").await.ok()?.is_none();
        gone.then_some(())
    })
    .await;
    kubelet.stop().await;
}
