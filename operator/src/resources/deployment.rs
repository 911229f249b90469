//! The router Deployment, and the listeners a router runs (which its Service and NetworkPolicy
//! expose and admit).

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, EnvVarSource, KeyToPath, PodSpec, PodTemplateSpec, Probe,
    SecretKeySelector, SecretVolumeSource, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::labels::{Component, labels, meta, selector};
use super::names::{ROUTER_HTTP_PORT, ROUTER_HTTPS_PORT, ROUTER_RESP_PORT, ROUTER_TLS_PORT, router_name};
use super::pod::{
    container_security, http_probe, pod_security, port, spread, topology_file, topology_mount,
    topology_volume,
};
use super::secret::cluster_secret_env;
use crate::crd::{BusyReplyScope, CacheCluster, ClusterMode};

/// Where a router finds its TLS Secret and its ACL file.
pub const ROUTER_TLS_DIR: &str = "/etc/shoal/tls";
pub const ROUTER_ACL_DIR: &str = "/etc/shoal/acl";
pub const ROUTER_ACL_FILE: &str = "/etc/shoal/acl/users.acl";

/// How long a router pod told to stop serves on, unready, before closing its connections
/// (`--shutdown-delay-ms`): the time a Service takes to drop a terminating pod's endpoint and
/// kube-proxy its rules, so a rolling restart sends no client to a router that has closed. Well
/// inside the pod's grace period ([`ROUTER_GRACE_SECONDS`]).
pub const ROUTER_SHUTDOWN_DELAY_MS: u64 = 5_000;
/// The router pod's termination grace period: the shutdown delay, the request deadline and the
/// close, with room to spare.
pub const ROUTER_GRACE_SECONDS: i64 = 30;

pub fn router_deployment(cc: &CacheCluster) -> Deployment {
    let s = &cc.spec;
    let Listeners { mut args, ports, mounts, volumes } = router_listeners(cc);
    args.extend(["--shutdown-delay-ms".into(), ROUTER_SHUTDOWN_DELAY_MS.to_string()]);
    let container = Container {
        name: "router".into(),
        image: Some(s.image.clone()),
        image_pull_policy: s.image_pull_policy.clone(),
        command: Some(vec!["shoal-router".into()]),
        args: Some(args),
        env: Some(router_env(cc)),
        ports: Some(ports),
        // /readyz: the router can serve (listening, topology known). Not "every node up": one node
        // pod restarting must not take every router out of the Service.
        readiness_probe: Some(http_probe("/readyz", ROUTER_HTTP_PORT, 5)),
        liveness_probe: Some(Probe {
            initial_delay_seconds: Some(10),
            ..http_probe("/healthz", ROUTER_HTTP_PORT, 10)
        }),
        resources: s.router_resources.clone(),
        security_context: Some(container_security()),
        volume_mounts: Some(mounts),
        ..Default::default()
    };
    Deployment {
        metadata: meta(cc, router_name(cc), Some(Component::Router)),
        spec: Some(DeploymentSpec {
            replicas: Some(s.routers),
            selector: selector(cc, Component::Router),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(cc, Some(Component::Router))),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(router_name(cc)),
                    automount_service_account_token: Some(false),
                    security_context: Some(pod_security()),
                    termination_grace_period_seconds: Some(ROUTER_GRACE_SECONDS),
                    topology_spread_constraints: Some(spread(cc, Component::Router)),
                    containers: vec![container],
                    volumes: Some(volumes),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The router container's environment: the cluster secret, then the client password from its
/// Secret (never the value itself), or protected mode off.
fn router_env(cc: &CacheCluster) -> Vec<EnvVar> {
    let mut env = vec![cluster_secret_env(cc)];
    match &cc.spec.password_secret_ref {
        Some(secret) => env.push(EnvVar {
            name: "SHOAL_REQUIREPASS".into(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret.name.clone(),
                    key: secret.key.clone(),
                    optional: Some(false),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        // Without a password, protected mode would refuse every client outside the pod.
        None => env.push(EnvVar {
            name: "SHOAL_PROTECTED_MODE".into(),
            value: Some("no".into()),
            ..Default::default()
        }),
    }
    env
}

/// What a router listens on, and what that takes from its pod.
pub(super) struct Listeners {
    pub args: Vec<String>,
    pub ports: Vec<ContainerPort>,
    pub mounts: Vec<VolumeMount>,
    pub volumes: Vec<Volume>,
}

/// A router's arguments, container ports, volume mounts and volumes: the topology, and with
/// `spec.tls` the TLS listeners and their Secret (plaintext RESP and the HTTP API off unless
/// `plaintext`; the HTTP port then serves only the probes' and Prometheus's endpoints), with
/// `spec.aclSecretRef` the ACL file.
pub(super) fn router_listeners(cc: &CacheCluster) -> Listeners {
    let s = &cc.spec;
    let plaintext = s.tls.as_ref().is_none_or(|t| t.plaintext);
    let mut args: Vec<String> = vec!["--topology-file".into(), topology_file()];
    // The same rules as the nodes' (`node_args`): routers and nodes must agree on every slot.
    if !s.colocate.is_empty() {
        args.extend(["--colocate".into(), s.colocate.join(",")]);
    }
    if plaintext {
        args.extend(["--resp".into(), format!("0.0.0.0:{ROUTER_RESP_PORT}")]);
        args.extend(["--http".into(), format!("0.0.0.0:{ROUTER_HTTP_PORT}")]);
    } else {
        args.extend(["--resp".into(), "off".into(), "--http".into(), "off".into()]);
        args.extend(["--metrics-addr".into(), format!("0.0.0.0:{ROUTER_HTTP_PORT}")]);
    }
    let mut ports = vec![port("http", ROUTER_HTTP_PORT)];
    if plaintext {
        ports.insert(0, port("resp", ROUTER_RESP_PORT));
    }
    let mut mounts = vec![topology_mount()];
    let mut volumes = vec![topology_volume(cc)];
    if let Some(tls) = &s.tls {
        args.extend([
            "--tls-port".into(),
            format!("0.0.0.0:{ROUTER_TLS_PORT}"),
            "--https".into(),
            format!("0.0.0.0:{ROUTER_HTTPS_PORT}"),
            "--tls-cert-file".into(),
            format!("{ROUTER_TLS_DIR}/tls.crt"),
            "--tls-key-file".into(),
            format!("{ROUTER_TLS_DIR}/tls.key"),
            "--tls-auth-clients".into(),
            tls.auth_clients().into(),
        ]);
        if tls.auth_clients() != "no" {
            args.extend(["--tls-ca-cert-file".into(), format!("{ROUTER_TLS_DIR}/ca.crt")]);
        }
        ports.extend([port("resp-tls", ROUTER_TLS_PORT), port("https", ROUTER_HTTPS_PORT)]);
        // The whole Secret, not a subPath: a subPath mount never sees a rotated certificate.
        mounts.push(VolumeMount {
            name: "tls".into(),
            mount_path: ROUTER_TLS_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        });
        volumes.push(Volume {
            name: "tls".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(tls.secret_name.clone()),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    if let Some(acl) = &s.acl_secret_ref {
        args.extend(["--aclfile".into(), ROUTER_ACL_FILE.into()]);
        mounts.push(VolumeMount {
            name: "acl".into(),
            mount_path: ROUTER_ACL_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        });
        volumes.push(Volume {
            name: "acl".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(acl.name.clone()),
                items: Some(vec![KeyToPath {
                    key: acl.key.clone(),
                    path: "users.acl".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    if s.cluster_mode == ClusterMode::Emulated {
        // Cluster clients connect where CLUSTER SLOTS points them: the Service, not a pod.
        let port = if plaintext { ROUTER_RESP_PORT } else { ROUTER_TLS_PORT };
        let service = format!("{}.{}.svc", cc.name_any(), cc.namespace().unwrap_or_default());
        args.extend([
            "--cluster-mode".into(),
            "emulated".into(),
            "--cluster-announce-host".into(),
            service,
            "--cluster-announce-port".into(),
            port.to_string(),
        ]);
    }
    if s.busy_reply_scope == BusyReplyScope::Cluster {
        args.extend(["--busy-reply-scope".into(), "cluster".into()]);
    }
    args.extend(["--log-format".into(), "json".into()]);
    Listeners { args, ports, mounts, volumes }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::networking::v1::NetworkPolicyIngressRule;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::*;
    use crate::crd::SecretKeyRef;
    use crate::resources::tests::{cluster, pod_spec};
    use crate::resources::{CLUSTER_SECRET_KEY, router_network_policy, router_service};

    #[test]
    fn routers_take_the_password_from_the_secret_or_open_protected_mode() {
        let mut cc = cluster(serde_json::json!({"shards": 1, "routers": 3}));
        let env = |cc: &CacheCluster| {
            let d = router_deployment(cc);
            assert_eq!(d.spec.as_ref().unwrap().replicas, Some(cc.spec.routers));
            pod_spec(&d.spec.unwrap().template).containers[0].env.clone().unwrap()
        };
        // First the cluster secret (from the Secret the operator keeps), then the password.
        let secret = &env(&cc)[0];
        assert_eq!(secret.name, "SHOAL_CLUSTER_SECRET");
        let from = secret.value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap();
        assert_eq!((from.name.as_str(), from.key.as_str()), ("demo-cluster-secret", CLUSTER_SECRET_KEY));
        assert_eq!(env(&cc)[1].name, "SHOAL_PROTECTED_MODE");
        cc.spec.password_secret_ref = Some(SecretKeyRef { name: "pw".into(), key: "password".into() });
        let e = &env(&cc)[1];
        assert_eq!(e.name, "SHOAL_REQUIREPASS");
        assert_eq!(e.value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap().name, "pw");
        assert!(e.value.is_none(), "never the password itself");
    }

    #[test]
    fn router_pods_drain_within_their_grace_period() {
        let d = router_deployment(&cluster(serde_json::json!({"shards": 1})));
        let pod = pod_spec(&d.spec.unwrap().template).clone();
        let args = pod.containers[0].args.clone().unwrap().join(" ");
        assert!(args.contains(&format!("--shutdown-delay-ms {ROUTER_SHUTDOWN_DELAY_MS}")), "{args}");
        // The delay, a request's deadline and the close fit in the grace period, or the kubelet
        // kills a router still answering.
        let grace = pod.termination_grace_period_seconds.unwrap();
        assert!(grace * 1000 >= ROUTER_SHUTDOWN_DELAY_MS as i64 + 10_000, "{grace} s");
    }

    #[test]
    fn routers_serve_tls_from_the_secret_and_acl_users_from_theirs() {
        let parts = |cc: &CacheCluster| {
            let d = router_deployment(cc);
            let pod = pod_spec(&d.spec.unwrap().template).clone();
            let c = pod.containers[0].clone();
            let ports: Vec<i32> = c.ports.unwrap().iter().map(|p| p.container_port).collect();
            (c.args.unwrap().join(" "), ports, pod.volumes.unwrap(), c.volume_mounts.unwrap())
        };
        let plain = cluster(serde_json::json!({"shards": 1}));
        let (args, ports, volumes, _) = parts(&plain);
        assert!(
            args.contains("--resp 0.0.0.0:6379 --http 0.0.0.0:8080") && !args.contains("--tls"),
            "{args}"
        );
        assert_eq!((ports, volumes.len()), (vec![ROUTER_RESP_PORT, ROUTER_HTTP_PORT], 1));

        let cc = cluster(serde_json::json!({"shards": 1, "tls": {"secretName": "demo-tls"},
            "aclSecretRef": {"name": "demo-users"}}));
        let (args, ports, volumes, mounts) = parts(&cc);
        assert!(args.contains("--tls-port 0.0.0.0:6380 --https 0.0.0.0:8443"), "{args}");
        assert!(
            args.contains("--tls-cert-file /etc/shoal/tls/tls.crt --tls-key-file /etc/shoal/tls/tls.key")
        );
        assert!(
            args.contains("--tls-auth-clients no") && !args.contains("ca.crt"),
            "no CA unless clients are checked"
        );
        assert!(args.contains("--resp 0.0.0.0:6379"), "plaintext stays by default: {args}");
        assert!(args.contains("--aclfile /etc/shoal/acl/users.acl"));
        assert_eq!(ports, vec![ROUTER_RESP_PORT, ROUTER_HTTP_PORT, ROUTER_TLS_PORT, ROUTER_HTTPS_PORT]);
        let tls = volumes.iter().find(|v| v.name == "tls").unwrap().secret.clone().unwrap();
        assert_eq!(tls.secret_name.as_deref(), Some("demo-tls"));
        assert!(tls.items.is_none(), "the whole Secret: rotated files show up");
        let acl = volumes.iter().find(|v| v.name == "acl").unwrap().secret.clone().unwrap();
        assert_eq!(acl.items.unwrap()[0].key, "users.acl");
        assert!(mounts.iter().all(|m| m.sub_path.is_none() && m.read_only == Some(true)));
        let svc: Vec<i32> = router_service(&cc).spec.unwrap().ports.unwrap().iter().map(|p| p.port).collect();
        assert_eq!(svc, ports, "the Service exposes every listener");
        assert!(!args.contains("--cluster-mode"), "standalone unless asked: {args}");

        // TLS only: plaintext RESP and the API are off; 8080 serves metrics and probes only.
        let cc = cluster(serde_json::json!({"shards": 1,
            "tls": {"secretName": "demo-tls", "authClients": "yes", "plaintext": false},
            "clientPeers": [{"podSelector": {"matchLabels": {"app": "shop"}}}]}));
        let (args, ports, _, _) = parts(&cc);
        assert!(args.contains("--resp off --http off --metrics-addr 0.0.0.0:8080"), "{args}");
        assert!(args.contains("--tls-auth-clients yes --tls-ca-cert-file /etc/shoal/tls/ca.crt"), "{args}");
        assert_eq!(ports, vec![ROUTER_HTTP_PORT, ROUTER_TLS_PORT, ROUTER_HTTPS_PORT]);
        let np = router_network_policy(&cc).spec.unwrap();
        let rules = np.ingress.unwrap();
        let ports_of = |r: &NetworkPolicyIngressRule| -> Vec<IntOrString> {
            r.ports.clone().unwrap().into_iter().map(|p| p.port.unwrap()).collect()
        };
        assert_eq!(
            ports_of(&rules[0]),
            vec![IntOrString::Int(ROUTER_TLS_PORT), IntOrString::Int(ROUTER_HTTPS_PORT)]
        );
        let from = rules[0].from.clone().unwrap();
        assert_eq!(
            from[0].pod_selector.clone().unwrap().match_labels.unwrap()["app"],
            "shop",
            "clients only"
        );
        assert_eq!(ports_of(&rules[1]), vec![IntOrString::Int(ROUTER_HTTP_PORT)]);
        assert!(rules[1].from.is_none(), "metrics and probes from anywhere");
        // Without clientPeers: the client ports from anyone, nothing else open.
        let np = router_network_policy(&plain).spec.unwrap();
        assert_eq!(np.ingress.as_ref().unwrap().len(), 1);
        assert!(np.ingress.unwrap()[0].from.is_none());
    }

    #[test]
    fn emulated_cluster_routers_announce_the_service() {
        let args = |cc: &CacheCluster| {
            let d = router_deployment(cc);
            pod_spec(&d.spec.unwrap().template).containers[0].args.clone().unwrap().join(" ")
        };
        let cc = cluster(serde_json::json!({"shards": 2, "clusterMode": "emulated"}));
        assert!(
            args(&cc).contains(
                "--cluster-mode emulated --cluster-announce-host demo.shop.svc --cluster-announce-port 6379"
            ),
            "{}",
            args(&cc)
        );
        // TLS only: cluster clients are sent to the TLS port.
        let cc = cluster(serde_json::json!({"shards": 2, "clusterMode": "emulated",
            "tls": {"secretName": "demo-tls", "plaintext": false}}));
        assert!(args(&cc).contains("--cluster-announce-port 6380"), "{}", args(&cc));
        assert!(!args(&cc).contains("--busy-reply-scope"), "the routers' default unless asked");
        let cc = cluster(serde_json::json!({"shards": 2, "busyReplyScope": "cluster"}));
        assert!(args(&cc).contains("--busy-reply-scope cluster"), "{}", args(&cc));
    }
}
