//! Chart unit tests: render `charts/shoal` with `helm template` (the real helm) under several
//! values and assert on the manifests: the restricted Pod Security settings, least-privilege
//! RBAC, labels and selectors, the password Secret, the ServiceMonitor guard, the alerts (checked
//! and unit-tested by the real `promtool`) and the dashboard, and the values schema refusing bad
//! values. (`operator/tests/helm_install.rs` installs it for real.)

mod support;

use serde_json::Value;
use support::{render, tool};

fn find<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found = find(docs, kind);
    assert_eq!(found.len(), 1, "exactly one {kind}");
    found[0]
}

/// Pod specs in the manifests (Deployment templates and bare Pods).
fn pod_specs(docs: &[Value]) -> Vec<(&str, &Value)> {
    docs.iter()
        .filter_map(|d| match d["kind"].as_str()? {
            "Deployment" | "StatefulSet" => {
                Some((d["metadata"]["name"].as_str()?, &d["spec"]["template"]["spec"]))
            }
            "Pod" => Some((d["metadata"]["name"].as_str()?, &d["spec"])),
            _ => None,
        })
        .collect()
}

#[test]
fn every_pod_meets_the_restricted_pod_security_profile() {
    let Some(docs) = render(&[]) else { return };
    let docs = docs.unwrap();
    let pods = pod_specs(&docs);
    assert_eq!(pods.len(), 2, "the operator Deployment and the helm test Pod");
    for (name, spec) in pods {
        let sc = &spec["securityContext"];
        assert_eq!(sc["runAsNonRoot"], true, "{name}");
        assert_eq!(sc["runAsUser"], 65532, "{name}");
        assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault", "{name}");
        for c in spec["containers"].as_array().unwrap() {
            let s = &c["securityContext"];
            assert_eq!(s["allowPrivilegeEscalation"], false, "{name}");
            assert_eq!(s["readOnlyRootFilesystem"], true, "{name}");
            assert_eq!(s["capabilities"]["drop"], serde_json::json!(["ALL"]), "{name}");
            assert!(s.get("privileged").is_none(), "{name}");
            assert!(c["resources"]["limits"]["memory"].is_string(), "{name} has a memory limit");
        }
    }
    let test_pod = one(&docs, "Pod");
    assert_eq!(test_pod["spec"]["automountServiceAccountToken"], false, "the test needs no API token");
    assert_eq!(test_pod["metadata"]["annotations"]["helm.sh/hook"], "test");
    let args = test_pod["spec"]["containers"][0]["args"].as_array().unwrap();
    assert_eq!(args[0], "check");
    assert_eq!(args[2], "rel.shoal-system.svc:6379", "through the router Service");
    let op = one(&docs, "Deployment");
    assert_eq!(
        op["spec"]["template"]["spec"]["automountServiceAccountToken"], true,
        "the operator needs the API"
    );
}

#[test]
fn rbac_is_least_privilege_and_follows_the_watch_scope() {
    let Some(docs) = render(&[]) else { return };
    let docs = docs.unwrap();
    let role = one(&docs, "ClusterRole");
    let rules = role["rules"].as_array().unwrap();
    let mut grants = Vec::new();
    for r in rules {
        for group in r["apiGroups"].as_array().unwrap() {
            for res in r["resources"].as_array().unwrap() {
                let verbs: Vec<&str> =
                    r["verbs"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
                assert!(!verbs.contains(&"*") && res != "*" && group != "*", "no wildcards: {r}");
                grants.push((group.as_str().unwrap().to_string(), res.as_str().unwrap().to_string(), verbs));
            }
        }
    }
    let verbs =
        |g: &str, r: &str| grants.iter().find(|(gg, rr, _)| gg == g && rr == r).map(|(_, _, v)| v.clone());
    assert_eq!(verbs("", "pods"), Some(vec!["get", "list", "watch"]), "pods are only read");
    assert_eq!(verbs("", "pods/eviction"), Some(vec!["create"]), "restarts are evictions, never deletes");
    assert_eq!(verbs("shoal.dev", "cacheclusters"), Some(vec!["get", "list", "watch"]));
    assert!(verbs("shoal.dev", "cacheclusters/status").unwrap().contains(&"patch"));
    assert!(verbs("apps", "statefulsets").unwrap().contains(&"create"));
    assert_eq!(verbs("", "secrets"), Some(vec!["create"]), "Secrets are made, never read");
    assert_eq!(verbs("coordination.k8s.io", "leases"), None, "the Lease is namespaced");
    let lease = find(&docs, "Role");
    assert_eq!(lease.len(), 1);
    assert_eq!(lease[0]["metadata"]["namespace"], "shoal-system");
    assert_eq!(lease[0]["rules"][0]["resources"], serde_json::json!(["leases"]));
    let binding = one(&docs, "ClusterRoleBinding");
    assert_eq!(binding["subjects"][0]["name"], "rel-shoal-operator");

    // Limited to one namespace: Roles there, nothing cluster-wide, and the operator told so.
    let docs = render(&["--set", "operator.watchNamespace=apps"]).unwrap().unwrap();
    assert!(find(&docs, "ClusterRole").is_empty() && find(&docs, "ClusterRoleBinding").is_empty());
    let roles = find(&docs, "Role");
    assert!(
        roles
            .iter()
            .any(|r| r["metadata"]["namespace"] == "apps" && r["rules"].as_array().unwrap().len() > 5)
    );
    let args = one(&docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("--namespace=apps"), "{args}");
}

#[test]
fn labels_and_selectors() {
    let Some(docs) = render(&[]) else { return };
    let docs = docs.unwrap();
    for d in &docs {
        let labels = &d["metadata"]["labels"];
        assert_eq!(labels["app.kubernetes.io/part-of"], "shoal", "{}", d["kind"]);
        assert_eq!(labels["app.kubernetes.io/managed-by"], "Helm", "{}", d["kind"]);
        assert!(labels["helm.sh/chart"].as_str().unwrap().starts_with("shoal-"));
    }
    let dep = one(&docs, "Deployment");
    let selector = dep["spec"]["selector"]["matchLabels"].as_object().unwrap();
    let keys: Vec<&str> = selector.keys().map(String::as_str).collect();
    assert_eq!(keys, ["app.kubernetes.io/component", "app.kubernetes.io/instance", "app.kubernetes.io/name"]);
    let pod_labels = &dep["spec"]["template"]["metadata"]["labels"];
    for (k, v) in selector {
        assert_eq!(&pod_labels[k], v, "the template carries its selector");
    }
    assert_eq!(selector["app.kubernetes.io/name"], "shoal-operator", "what the nodes' NetworkPolicy admits");
    let svc = one(&docs, "Service");
    assert_eq!(svc["spec"]["selector"], dep["spec"]["selector"]["matchLabels"]);
}

#[test]
fn the_cluster_and_its_password() {
    let Some(docs) = render(&[]) else { return };
    let docs = docs.unwrap();
    let cc = one(&docs, "CacheCluster");
    assert_eq!(cc["spec"]["shards"], 3);
    assert_eq!(cc["spec"]["replicasPerShard"], 1, "the chart's clusters have a replica per shard");
    assert_eq!(
        cc["spec"]["shardSpread"],
        serde_json::json!({"mode": "Preferred", "topologyKeys": ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]})
    );
    assert_eq!(cc["spec"]["image"], "ghcr.io/shoal-dev/shoal:0.1.0", "the chart's appVersion");
    assert!(cc["spec"].get("encoding").is_none(), "no thresholds set: the nodes' defaults");
    assert_eq!(cc["spec"]["clusterMode"], "standalone", "standalone Redis unless asked");
    // Two Secrets: the cluster's password and the operator's key (cluster secrets derive from it).
    let password = |docs: &[Value]| {
        find(docs, "Secret").into_iter().find(|s| s["data"].get("password").is_some()).cloned().unwrap()
    };
    assert_eq!(find(&docs, "Secret").len(), 2);
    let secret = password(&docs);
    assert_eq!(cc["spec"]["passwordSecretRef"]["name"], secret["metadata"]["name"]);
    let generated = secret["data"]["password"].as_str().unwrap();
    assert_eq!(generated.len(), 44, "32 random characters, base64");
    let again = render(&[]).unwrap().unwrap();
    assert_ne!(password(&again)["data"]["password"].as_str().unwrap(), generated, "random per install");
    let key = find(&docs, "Secret")
        .into_iter()
        .find(|s| s["metadata"]["name"] == "rel-shoal-operator-key")
        .unwrap();
    assert_eq!(key["data"]["key"].as_str().unwrap().len(), 64, "48 random characters, base64");
    let operator = one(&docs, "Deployment");
    let pod = &operator["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "rel-shoal-operator-key");
    assert!(
        pod["containers"][0]["args"].to_string().contains("--secret-key-file=/etc/shoal/operator-key/key")
    );

    let docs =
        render(&["-f", support::repo().join("charts/shoal/ci/persistent-values.yaml").to_str().unwrap()])
            .unwrap()
            .unwrap();
    assert!(
        find(&docs, "Secret").iter().all(|s| s["data"].get("password").is_none()),
        "an existing password Secret is used, not generated"
    );
    let cc = one(&docs, "CacheCluster");
    assert_eq!(
        cc["spec"]["passwordSecretRef"],
        serde_json::json!({"name": "shoal-credentials", "key": "redis-password"})
    );
    assert_eq!(
        cc["spec"]["storage"],
        serde_json::json!({"type": "PersistentVolumeClaim", "size": "5Gi", "storageClassName": "standard"})
    );
    assert_eq!(cc["spec"]["image"], "ghcr.io/shoal-dev/shoal:0.1.0-test");
    assert_eq!(cc["spec"]["replicasPerShard"], 2);
    assert_eq!(
        cc["spec"]["shardSpread"],
        serde_json::json!({"mode": "Required", "topologyKeys": ["kubernetes.io/hostname"]})
    );
    assert_eq!(
        cc["spec"]["encoding"],
        serde_json::json!({"hashMaxListpackEntries": 1024, "listMaxListpackSize": -3})
    );
    let test_env = &one(&docs, "Pod")["spec"]["containers"][0]["env"][0];
    assert_eq!(test_env["valueFrom"]["secretKeyRef"]["key"], "redis-password");

    let docs =
        render(&["--set", "cluster.auth.enabled=false", "--set", "cluster.enabled=true"]).unwrap().unwrap();
    assert!(find(&docs, "Secret").iter().all(|s| s["data"].get("password").is_none()), "no password");
    assert!(one(&docs, "CacheCluster")["spec"].get("passwordSecretRef").is_none());
    let docs = render(&[
        "--set",
        "cluster.encoding.setMaxIntsetEntries=4096",
        "--set",
        "cluster.encoding.zsetMaxListpackValue=0",
    ])
    .unwrap()
    .unwrap();
    assert_eq!(
        one(&docs, "CacheCluster")["spec"]["encoding"],
        serde_json::json!({"setMaxIntsetEntries": 4096, "zsetMaxListpackValue": 0}),
        "only the thresholds set, as numbers"
    );
    let docs = render(&["--set", "cluster.clusterMode=emulated"]).unwrap().unwrap();
    let spec: shoal_operator::crd::CacheClusterSpec =
        serde_json::from_value(one(&docs, "CacheCluster")["spec"].clone()).unwrap();
    assert_eq!(spec.cluster_mode, shoal_operator::crd::ClusterMode::Emulated, "the operator reads it");
    assert!(spec.colocate.is_empty(), "no colocation rules unless asked");
    let docs = render(&["--set", "cluster.colocate={rq:*,bull:*}"]).unwrap().unwrap();
    let spec: shoal_operator::crd::CacheClusterSpec =
        serde_json::from_value(one(&docs, "CacheCluster")["spec"].clone()).unwrap();
    assert_eq!(spec.colocate, ["rq:*", "bull:*"], "the operator reads the colocation rules");
    let docs = render(&["--set", "cluster.enabled=false"]).unwrap().unwrap();
    assert!(find(&docs, "CacheCluster").is_empty() && find(&docs, "Pod").is_empty());
}

#[test]
fn tls_certificates_acl_users_and_client_peers() {
    let secrets = |docs: &[Value]| -> Vec<String> {
        find(docs, "Secret").iter().map(|s| s["metadata"]["name"].as_str().unwrap().to_string()).collect()
    };
    let Some(docs) = render(&[]) else { return };
    let docs = docs.unwrap();
    let spec = &one(&docs, "CacheCluster")["spec"];
    assert!(spec.get("tls").is_none() && spec.get("aclSecretRef").is_none(), "off by default");
    assert!(find(&docs, "Certificate").is_empty());

    // TLS without cert-manager: a CA and certificate generated by Helm, for the Service's names.
    let docs = render(&["--set", "cluster.tls.enabled=true"]).unwrap().unwrap();
    let tls =
        find(&docs, "Secret").into_iter().find(|s| s["metadata"]["name"] == "rel-tls").expect("rel-tls");
    assert_eq!(tls["type"], "kubernetes.io/tls");
    for key in ["tls.crt", "tls.key", "ca.crt"] {
        assert!(tls["data"][key].as_str().is_some_and(|v| v.len() > 100), "{key}");
    }
    let spec = &one(&docs, "CacheCluster")["spec"];
    assert_eq!(
        spec["tls"],
        serde_json::json!({"secretName": "rel-tls", "authClients": "no", "plaintext": true})
    );

    // With an issuer and cert-manager's API: a Certificate writes the same Secret name instead.
    let issuer =
        ["--set", "cluster.tls.enabled=true", "--set", "cluster.tls.certManager.issuerRef.name=ca-issuer"];
    let docs = render(&[&issuer[..], &["--api-versions", "cert-manager.io/v1/Certificate"]].concat())
        .unwrap()
        .unwrap();
    let cert = one(&docs, "Certificate");
    assert_eq!(cert["spec"]["secretName"], "rel-tls");
    assert_eq!(cert["spec"]["issuerRef"]["name"], "ca-issuer");
    assert!(cert["spec"]["dnsNames"].as_array().unwrap().contains(&Value::from("rel.shoal-system.svc")));
    assert!(!secrets(&docs).contains(&"rel-tls".to_string()), "cert-manager makes it");
    // An issuer without cert-manager's API: Helm's own certificate.
    let docs = render(&issuer).unwrap().unwrap();
    assert!(find(&docs, "Certificate").is_empty() && secrets(&docs).contains(&"rel-tls".to_string()));
    // An existing Secret: used as it is, nothing made.
    let docs = render(&[
        "--set",
        "cluster.tls.enabled=true",
        "--set",
        "cluster.tls.existingSecret=mine",
        "--set",
        "cluster.tls.authClients=yes",
        "--set",
        "cluster.tls.plaintext=false",
    ])
    .unwrap()
    .unwrap();
    assert!(!secrets(&docs).iter().any(|s| s.ends_with("-tls")));
    let spec = &one(&docs, "CacheCluster")["spec"];
    assert_eq!(
        spec["tls"],
        serde_json::json!({"secretName": "mine", "authClients": "yes", "plaintext": false})
    );
    // `helm test` then checks over TLS, trusting the Secret's ca.crt.
    let check = one(&docs, "Pod");
    let args: Vec<&str> = check["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        args.contains(&"rel.shoal-system.svc:6380") && args.contains(&"/etc/shoal/tls/ca.crt"),
        "{args:?}"
    );
    assert_eq!(check["spec"]["volumes"][0]["secret"]["secretName"], "mine");
    let plain = render(&["--set", "cluster.tls.enabled=true"]).unwrap().unwrap();
    let args = one(&plain, "Pod")["spec"]["containers"][0]["args"].clone();
    assert!(
        args.as_array().unwrap().contains(&Value::from("rel.shoal-system.svc:6379")),
        "plaintext kept: {args}"
    );

    // ACL users: rendered into a Secret holding the file, which the cluster names.
    let docs = render(&[
        "--set",
        "cluster.acl.users[0]=user dash on >pw ~* +@read",
        "--set",
        "cluster.acl.users[1]=user shop on >pw2 ~shop:* +@all",
        "--set",
        "cluster.clientPeers[0].podSelector.matchLabels.app=shop",
    ])
    .unwrap()
    .unwrap();
    let users =
        find(&docs, "Secret").into_iter().find(|s| s["metadata"]["name"] == "rel-users").expect("rel-users");
    assert_eq!(
        users["stringData"]["users.acl"],
        "user dash on >pw ~* +@read\nuser shop on >pw2 ~shop:* +@all"
    );
    let spec = &one(&docs, "CacheCluster")["spec"];
    assert_eq!(spec["aclSecretRef"], serde_json::json!({"name": "rel-users", "key": "users.acl"}));
    assert_eq!(spec["clientPeers"][0]["podSelector"]["matchLabels"]["app"], "shop");
    let docs = render(&["--set", "cluster.acl.existingSecret=theirs"]).unwrap().unwrap();
    assert_eq!(one(&docs, "CacheCluster")["spec"]["aclSecretRef"]["name"], "theirs");
    assert!(!secrets(&docs).contains(&"rel-users".to_string()));
    // The schema refuses what the routers could not use.
    assert!(render(&["--set", "cluster.tls.authClients=maybe"]).unwrap().is_err());
    assert!(render(&["--set", "cluster.acl.users[0]=not an acl line"]).unwrap().is_err());
}

#[test]
fn service_monitors_only_where_the_api_exists() {
    let Some(docs) = render(&["--set", "serviceMonitor.enabled=true"]) else { return };
    assert!(find(&docs.unwrap(), "ServiceMonitor").is_empty(), "no Prometheus Operator, no ServiceMonitor");
    let docs = render(&[
        "--set",
        "serviceMonitor.enabled=true",
        "--api-versions",
        "monitoring.coreos.com/v1/ServiceMonitor",
    ])
    .unwrap()
    .unwrap();
    let monitors = find(&docs, "ServiceMonitor");
    let names: Vec<&str> = monitors.iter().map(|m| m["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["rel-shoal-operator", "rel-node", "rel-router"]);
    let node = monitors[1];
    assert_eq!(node["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(node["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"], "node");
    assert!(node["spec"]["endpoints"][0].get("authorization").is_none());
    // A router's /metrics takes the API's password: its monitor sends the cluster's Secret.
    let router = &monitors[2]["spec"]["endpoints"][0];
    assert_eq!(router["port"], "http");
    assert_eq!(router["authorization"]["type"], "Bearer");
    assert_eq!(router["authorization"]["credentials"]["name"], "rel-password");
    assert_eq!(router["authorization"]["credentials"]["key"], "password");
    let secret = find(&docs, "Secret");
    assert_eq!(secret[0]["metadata"]["name"], "rel-password", "the Secret the monitor names exists");

    // An existing Secret is named instead; without auth (routers run without protected mode),
    // no credentials.
    let docs = render(&[
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "cluster.auth.existingSecret=mine",
        "--set",
        "cluster.auth.secretKey=pw",
        "--api-versions",
        "monitoring.coreos.com/v1/ServiceMonitor",
    ])
    .unwrap()
    .unwrap();
    let router = &find(&docs, "ServiceMonitor")[2]["spec"]["endpoints"][0];
    assert_eq!(router["authorization"]["credentials"]["name"], "mine");
    assert_eq!(router["authorization"]["credentials"]["key"], "pw");
    let docs = render(&[
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "cluster.auth.enabled=false",
        "--api-versions",
        "monitoring.coreos.com/v1/ServiceMonitor",
    ])
    .unwrap()
    .unwrap();
    let router = &find(&docs, "ServiceMonitor")[2]["spec"]["endpoints"][0];
    assert!(router.get("authorization").is_none(), "{router}");
}

#[test]
fn the_values_schema_refuses_bad_values() {
    for (args, complaint) in [
        (vec!["--set", "cluster.shards=0"], "/cluster/shards"),
        (vec!["--set", "cluster.maxmemoryPolicy=lru"], "/cluster/maxmemoryPolicy"),
        (vec!["--set", "cluster.maxmemory=lots"], "/cluster/maxmemory"),
        (vec!["--set", "operator.nodeAddresses=ip"], "/operator/nodeAddresses"),
        (vec!["--set", "operator.failoverDownAfterMs=50"], "/operator/failoverDownAfterMs"),
        (vec!["--set", "cluster.replicasPerShard=6"], "/cluster/replicasPerShard"),
        (vec!["--set", "cluster.replicasPerShard=-1"], "/cluster/replicasPerShard"),
        (vec!["--set", "cluster.shardSpread.mode=Sometimes"], "/cluster/shardSpread/mode"),
        (vec!["--set", "cluster.shardSpread.zones=3"], "additional properties 'zones'"),
        (vec!["--set", "clutser.shards=3"], "additional properties 'clutser'"),
        (vec!["--set", "cluster.clusterMode=on"], "/cluster/clusterMode"),
        // A short commit id of digits only (8522793 was one) is a number to --set: refused
        // rather than rendered as a different tag (0123456 would become 123456); README says
        // --set-string.
        (vec!["--set", "image.tag=8522793"], "at '/image/tag': got number, want string"),
        (vec!["--set", "cluster.encoding.setMaxIntsetEntries=-1"], "/cluster/encoding/setMaxIntsetEntries"),
        (
            vec!["--set", "cluster.encoding.hashMaxListpackValue=64b"],
            "/cluster/encoding/hashMaxListpackValue",
        ),
        (
            vec!["--set", "cluster.encoding.listMaxListpackSize=2147483648"],
            "/cluster/encoding/listMaxListpackSize",
        ),
        (
            vec!["--set", "cluster.encoding.listMaxZiplistSize=-2"],
            "additional properties 'listMaxZiplistSize'",
        ),
    ] {
        let Some(result) = render(&args) else { return };
        let err = result.expect_err(&format!("{args:?} must be refused"));
        assert!(err.contains(complaint), "{args:?}: {err}");
    }
}

/// The CacheCluster the chart renders, as the operator would turn it into objects (the operator's
/// own builders): with the default values, a replica StatefulSet next to the nodes', each pod
/// advertising its DNS name and kept apart from its shard's other pods by preferred
/// anti-affinity, and a PodDisruptionBudget per shard; with the persistent variant, two
/// replica StatefulSets and required anti-affinity; without replicas, the one budget of old.
#[test]
fn the_rendered_cluster_becomes_member_statefulsets_spread_by_shard_and_per_shard_budgets() {
    use shoal_operator::crd::CacheCluster;
    use shoal_operator::resources::{self, AddressMode, Placement};

    let rendered = |args: &[&str]| -> Option<(CacheCluster, Vec<Value>)> {
        let docs = render(args)?.unwrap();
        let mut cc: CacheCluster = serde_json::from_value(one(&docs, "CacheCluster").clone()).unwrap();
        cc.metadata.uid = Some("0000-1111".into());
        Some((cc, docs))
    };
    let Some((cc, docs)) = rendered(&[]) else { return };
    let args = one(&docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("--failover-down-after-ms=1000"), "{args}");
    let dns = Placement::Advertised(AddressMode::Dns);
    assert_eq!(cc.spec.replicas_per_shard, 1);
    for member in 0..=1 {
        let sts = resources::node_statefulset(&cc, member, cc.spec.shards, dns);
        assert_eq!(sts.metadata.name.unwrap(), resources::member_name(&cc, member));
        let spec = sts.spec.unwrap();
        assert_eq!(spec.update_strategy.unwrap().type_.as_deref(), Some("OnDelete"));
        let pod = spec.template.spec.unwrap();
        let args = pod.containers[0].args.clone().unwrap().join(" ");
        assert!(args.contains("--advertise $(POD_NAME).rel-node.shoal-system.svc:7001"), "{args}");
        let anti = pod.affinity.unwrap().pod_anti_affinity.unwrap();
        let preferred = anti.preferred_during_scheduling_ignored_during_execution.unwrap();
        let keys: Vec<&str> = preferred.iter().map(|w| w.pod_affinity_term.topology_key.as_str()).collect();
        assert_eq!(keys, ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]);
        assert!(anti.required_during_scheduling_ignored_during_execution.is_none());
    }
    let budgets: Vec<String> = (0..cc.spec.shards as u32)
        .map(|i| resources::shard_pdb(&cc, i, 2, true).metadata.name.unwrap())
        .collect();
    assert_eq!(budgets, ["rel-shard-0", "rel-shard-1", "rel-shard-2"]);

    let persistent = support::repo().join("charts/shoal/ci/persistent-values.yaml");
    let (cc, _) = rendered(&["-f", persistent.to_str().unwrap()]).unwrap();
    assert_eq!(cc.spec.replicas_per_shard, 2);
    let pod = resources::node_statefulset(&cc, 2, 4, dns).spec.unwrap().template.spec.unwrap();
    let anti = pod.affinity.unwrap().pod_anti_affinity.unwrap();
    let required = anti.required_during_scheduling_ignored_during_execution.unwrap();
    assert_eq!(
        required.iter().map(|t| t.topology_key.as_str()).collect::<Vec<_>>(),
        ["kubernetes.io/hostname"]
    );

    let (cc, _) = rendered(&["--set", "cluster.replicasPerShard=0"]).unwrap();
    assert_eq!(cc.spec.replicas_per_shard, 0);
    let pod = resources::node_statefulset(&cc, 0, 3, Placement::Ordinal).spec.unwrap().template.spec.unwrap();
    assert!(pod.affinity.is_none());
    assert_eq!(resources::pdb(&cc, resources::Component::Node).metadata.name.as_deref(), Some("rel-node"));
}

/// No Docker engine runs here, so the Dockerfile is checked against what runs from it: it must
/// build and ship every binary that the chart's pods and the operator's pods start, build only
/// binaries that exist, and run as the user the pods' securityContext names.
#[test]
fn the_image_ships_every_binary_the_pods_run() {
    use shoal_operator::crd::{CacheCluster, CacheClusterSpec};
    use shoal_operator::resources;

    let dockerfile = std::fs::read_to_string(support::repo().join("Dockerfile")).unwrap();
    let built: std::collections::BTreeSet<String> = dockerfile
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "--bin")
        .map(|w| w[1].to_string())
        .collect();
    for b in &built {
        support::bin(b); // a binary cargo really builds
        assert!(dockerfile.contains(&format!("target/release/{b}")), "{b} is built but not copied");
    }
    assert!(dockerfile.contains("COPY --from=build /out/ /usr/local/bin/"));

    let mut cc = CacheCluster::new(
        "demo",
        serde_json::from_value::<CacheClusterSpec>(serde_json::json!({"shards": 1})).unwrap(),
    );
    cc.metadata.namespace = Some("shop".into());
    cc.metadata.uid = Some("0000-1111".into());
    let mut commands: Vec<String> = Vec::new();
    let sts = resources::node_statefulset(&cc, 0, 1, resources::Placement::Ordinal)
        .spec
        .unwrap()
        .template
        .spec
        .unwrap();
    let dep = resources::router_deployment(&cc).spec.unwrap().template.spec.unwrap();
    for c in sts.containers.iter().chain(&dep.containers) {
        commands.extend(c.command.clone().unwrap().into_iter().take(1));
    }
    if let Some(docs) = render(&[]) {
        let docs = docs.unwrap();
        for (_, spec) in pod_specs(&docs) {
            for c in spec["containers"].as_array().unwrap() {
                commands.push(c["command"][0].as_str().unwrap().to_string());
            }
        }
        assert!(commands.contains(&"shoal-operator".to_string()));
    }
    // The sidecar example's containers, its optional load-check Job's too.
    let (_, example) = support::sidecar_example();
    for (_, spec) in support::pod_templates(&example) {
        for c in spec.init_containers.iter().flatten().chain(&spec.containers) {
            commands.extend(c.command.clone().unwrap().into_iter().take(1));
        }
    }
    for b in ["shoal-router", "shoal-sidecar-demo", "shoal-bench"] {
        assert!(commands.iter().any(|c| c == b), "nothing runs {b} ({commands:?})");
    }
    for c in &commands {
        assert!(built.contains(c), "pods run {c} but the Dockerfile does not build it ({built:?})");
    }
    let user = format!("USER {0}:{0}", resources::RUN_AS);
    assert!(dockerfile.lines().any(|l| l.trim() == user), "the image must run as {user}");
}

/// The sidecar example: the app container is `shoal-sidecar-demo` and the optional Job is
/// `shoal-bench --transport fast`, both on the socket their router sidecar serves (a volume they
/// share), signed in as `shop` with the password from the app's Secret, on keys the `shop` user's
/// rules (`~shop:*`, in the example's header) allow. The Job stays commented out as shipped.
#[test]
fn the_sidecar_example_runs_the_demo_and_the_bench_on_the_routers_socket() {
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    let (shipped, full) = support::sidecar_example();
    assert!(shipped.contains("user shop on >REPLACE-ME ~shop:* +@all -@dangerous"));
    let kinds = |yaml: &str| support::pod_templates(yaml).into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    assert_eq!(kinds(&shipped), ["shop"], "the optional Job ships commented out");
    assert_eq!(kinds(&full), ["shop", "shop-bench"]);

    fn env(c: &Container, name: &str) -> Option<String> {
        c.env.iter().flatten().find(|e| e.name == name).and_then(|e| e.value.clone())
    }
    fn secret(c: &Container, name: &str) -> Option<(String, String)> {
        let e = c.env.iter().flatten().find(|e| e.name == name)?;
        let s = e.value_from.as_ref()?.secret_key_ref.as_ref()?;
        Some((s.name.clone(), s.key.clone()))
    }
    /// The router sidecar's socket path, checked to be on an emptyDir that `app` mounts too.
    fn socket(spec: &PodSpec, app: &Container) -> String {
        let router = &spec.init_containers.as_ref().unwrap()[0];
        assert_eq!(router.command.as_deref(), Some(&["shoal-router".to_string()][..]));
        assert_eq!(router.restart_policy.as_deref(), Some("Always"), "a native sidecar");
        let args = router.args.clone().unwrap();
        let sock = args.iter().find_map(|a| a.strip_prefix("--unix-socket=")).unwrap().to_string();
        let dir = std::path::Path::new(&sock).parent().unwrap().to_str().unwrap().to_string();
        let mount = |c: &Container| {
            c.volume_mounts.iter().flatten().find(|m| m.mount_path == dir).map(|m| m.name.clone())
        };
        let volume = mount(router).expect("the router's socket directory is a volume");
        assert_eq!(mount(app), Some(volume.clone()), "{} shares the socket's volume", app.name);
        let v = spec.volumes.iter().flatten().find(|v| v.name == volume).unwrap();
        assert!(v.empty_dir.is_some(), "{v:?}");
        // The app signs in as its own user; the router holds the cluster's password for default.
        assert!(args.iter().any(|a| a.starts_with("--aclfile=")), "{args:?}");
        assert_eq!(secret(router, "SHOAL_REQUIREPASS"), Some(("cache-password".into(), "password".into())));
        assert_eq!(
            secret(router, "SHOAL_CLUSTER_SECRET"),
            Some(("cache-cluster-secret".into(), "secret".into()))
        );
        sock
    }
    let credentials = |c: &Container| {
        assert_eq!(env(c, "SHOAL_USER").as_deref(), Some("shop"), "{}", c.name);
        assert_eq!(secret(c, "SHOAL_PASSWORD"), Some(("shop-redis".into(), "password".into())), "{}", c.name);
    };

    let pods = support::pod_templates(&full);
    let (_, spec) = &pods[0];
    let app = &spec.containers[0];
    assert_eq!(app.name, "app");
    assert_eq!(app.image.as_deref(), spec.init_containers.as_ref().unwrap()[0].image.as_deref(), "one image");
    assert_eq!(app.command.as_deref(), Some(&["shoal-sidecar-demo".to_string()][..]));
    assert_eq!(env(app, "SHOAL_SOCKET"), Some(socket(spec, app)));
    credentials(app);
    assert!(env(app, "SHOAL_KEY_PREFIX").unwrap().starts_with("shop:"), "inside ~shop:*");
    assert_eq!(env(app, "SHOAL_STAY").as_deref(), Some("1"), "a Deployment's container stays up");
    let rounds: u64 = env(app, "SHOAL_ROUNDS").unwrap().parse().unwrap();
    assert!((1..=1_000_000).contains(&rounds));

    let (_, spec) = &pods[1];
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    let bench = &spec.containers[0];
    assert_eq!(bench.command.as_deref(), Some(&["shoal-bench".to_string()][..]));
    let sock = socket(spec, bench);
    let args = bench.args.clone().unwrap();
    assert_eq!(
        args,
        [
            "--transport",
            "fast",
            "-s",
            &sock,
            "-n",
            "100000",
            "--duration",
            "30",
            "--json",
            "--key-prefix",
            "shop:bench:"
        ]
    );
    credentials(bench);
    // The header's `kubectl exec` load check is the same command line.
    let exec: String = shipped
        .lines()
        .skip_while(|l| !l.contains("kubectl exec deploy/shop -c app -- shoal-bench"))
        .take(2)
        .map(|l| l.trim_start_matches('#').trim().trim_end_matches('\\').trim())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(exec.ends_with(&format!("-- shoal-bench {}", args.join(" "))), "{exec}");
}

#[test]
fn alerts_render_where_the_api_exists_and_pass_promtools_tests() {
    let Some(docs) = render(&["--set", "prometheusRule.enabled=true"]) else { return };
    assert!(find(&docs.unwrap(), "PrometheusRule").is_empty(), "no Prometheus Operator, no PrometheusRule");
    let api = ["--api-versions", "monitoring.coreos.com/v1/PrometheusRule"];
    let alerts = |docs: &[Value]| -> Vec<String> {
        one(docs, "PrometheusRule")["spec"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap())
            .map(|r| r["alert"].as_str().unwrap().to_string())
            .collect()
    };
    let docs = render(&[&["--set", "prometheusRule.enabled=true"][..], &api].concat()).unwrap().unwrap();
    let with_replicas = alerts(&docs);
    for a in
        ["ShoalOperatorNoLeader", "ShoalNodeUnreachable", "ShoalShardWithoutReplica", "ShoalMemoryNearLimit"]
    {
        assert!(with_replicas.iter().any(|x| x == a), "{a} in {with_replicas:?}");
    }
    // Without replicas (a shard is one pod by choice), no alert about replicas.
    let none = alerts(
        &render(
            &[&["--set", "prometheusRule.enabled=true", "--set", "cluster.replicasPerShard=0"][..], &api]
                .concat(),
        )
        .unwrap()
        .unwrap(),
    );
    assert!(none.iter().all(|a| !a.contains("Replica")), "{none:?}");
    assert_eq!(none.len() + 3, with_replicas.len());

    // The rules as Prometheus reads them: promtool checks them, then runs the chart's unit tests
    // of them (charts/shoal/tests/alerts.test.yaml, written against release `rel` in shoal-system).
    let Some(promtool) = tool("promtool") else { return };
    let dir = tempfile::tempdir().unwrap();
    let rules = serde_yaml::to_string(&one(&docs, "PrometheusRule")["spec"]).unwrap();
    std::fs::write(dir.path().join("rules.yaml"), rules).unwrap();
    std::fs::copy(
        support::repo().join("charts/shoal/tests/alerts.test.yaml"),
        dir.path().join("alerts.test.yaml"),
    )
    .unwrap();
    for args in [["check", "rules", "rules.yaml"], ["test", "rules", "alerts.test.yaml"]] {
        let out = std::process::Command::new(&promtool).args(args).current_dir(dir.path()).output().unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_grafana_dashboard_ships_in_a_configmap_its_sidecar_finds() {
    let Some(docs) = render(&[]) else { return };
    assert!(find(&docs.unwrap(), "ConfigMap").is_empty(), "off by default");
    let docs = render(&["--set", "grafanaDashboard.enabled=true"]).unwrap().unwrap();
    let cm = one(&docs, "ConfigMap");
    assert_eq!(cm["metadata"]["name"], "rel-shoal-dashboard");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let dash: Value = serde_json::from_str(cm["data"]["shoal.json"].as_str().unwrap()).unwrap();
    assert_eq!(dash["uid"], "shoal-cluster");
    let panels: Vec<&Value> =
        dash["panels"].as_array().unwrap().iter().filter(|p| p["type"] != "row").collect();
    assert!(panels.len() >= 12, "{}", panels.len());
    for p in panels {
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{}", p["title"]);
        for t in targets {
            let expr = t["expr"].as_str().unwrap();
            assert!(
                expr.contains("shoal_") && expr.contains("namespace=~\"$namespace\""),
                "{}: {expr}",
                p["title"]
            );
        }
    }
    // Every metric it and the alerts read is one Shoal exports: operator/tests/e2e.rs checks
    // them against live /metrics pages.
}
