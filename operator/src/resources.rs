//! Pure builders for everything a `CacheCluster` owns. Each takes the resource and returns the
//! object the operator applies (server-side apply, owned through a controller reference so that
//! deleting the CacheCluster garbage-collects it all).
//!
//! | Object | Name | Why |
//! |---|---|---|
//! | StatefulSet | `<name>-node` | member 0 of every shard: ordinal = shard id |
//! | StatefulSet | `<name>-node-r<m>` | member m (1..=replicasPerShard) of every shard, same ordinals |
//! | Service (headless) | `<name>-node` | stable DNS per node pod (`<pod>.<name>-node`), all members |
//! | Deployment | `<name>-router` | stateless routers |
//! | Service | `<name>` | what clients connect to: RESP 6379, HTTP 8080 |
//! | ConfigMap | `<name>-topology` | the published topology, mounted into nodes and routers |
//! | PodDisruptionBudget | `<name>-node` (no replicas) | never two shards down at once |
//! | PodDisruptionBudget | `<name>-shard-<i>` (replicas) | one pod of shard i at a time, none while it is not redundant |
//! | PodDisruptionBudget | `<name>-router` | never two routers down at once |
//! | NetworkPolicy | `<name>-node` | node gRPC only from this cluster's routers (sidecars too), nodes and the operator |
//! | NetworkPolicy | `<name>-router` | router client ports only from `spec.clientPeers` (anyone if unset); nothing else |
//! | ServiceAccount | `<name>-node`, `<name>-router` | identities without API access (no token) |
//!
//! Nodes and routers read the topology from the mounted ConfigMap and learn newer versions from
//! each other over gRPC (`moved` replies), so they need no Kubernetes API access at all: their
//! ServiceAccounts get no Role and no token, which is stricter than a Role to read one ConfigMap.
//!
//! **Layout with replicas: one StatefulSet per member index.** Pod `<name>-node-r<m>-<i>` is
//! member m of shard i (member 0 keeps the name `<name>-node-<i>` it always had), so every
//! StatefulSet holds one pod of each shard and changing `shards` scales them all alike: new
//! shards get their replicas, removed shards' replicas go with them (the highest ordinals), and
//! changing `replicasPerShard` adds or removes whole StatefulSets without renaming any pod. One
//! StatefulSet of shards×(R+1) pods would instead renumber every pod when R changes. Which member
//! is a shard's primary is the failover writer's business, not the layout's: after a failover
//! the primary may be any member, so these pods find their place by address (`--advertise`, the
//! address the topology names them by) rather than by ordinal. The same pod-index label on every
//! member of a shard is what the per-shard spread constraints and PodDisruptionBudgets select on.
//!
//! Without replicas the node StatefulSet is exactly what it was before replicas existed (ordinal
//! = node id through `SHOAL_NODE_ID`, RollingUpdate), so upgrading the operator rolls no pod.
//! With replicas the node StatefulSets use `OnDelete` and the operator restarts outdated pods
//! itself (`members::next_restart`), one at a time and only while every shard has a synced
//! replica: StatefulSets rolling on their own would restart member 0 and member 1 of the same
//! shard together, and a pod's readiness does not say whether its replacement has caught up.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy,
    StatefulSetSpec, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar,
    EnvVarSource, GRPCAction, HTTPGetAction, KeyToPath, ObjectFieldSelector, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PodAffinityTerm, PodAntiAffinity, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, SeccompProfile, Secret, SecretKeySelector, SecretVolumeSource, SecurityContext,
    Service, ServiceAccount, ServicePort, ServiceSpec, TopologySpreadConstraint, Volume, VolumeMount,
    VolumeResourceRequirements, WeightedPodAffinityTerm,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use shoal_wire::auth::ClusterSecret;

use crate::crd::{CacheCluster, SpreadMode, StorageKind};

pub const NODE_GRPC_PORT: i32 = 7001;
pub const NODE_METRICS_PORT: i32 = 9090;
pub const ROUTER_RESP_PORT: i32 = 6379;
pub const ROUTER_HTTP_PORT: i32 = 8080;
/// RESP over TLS and HTTPS, with `spec.tls`.
pub const ROUTER_TLS_PORT: i32 = 6380;
pub const ROUTER_HTTPS_PORT: i32 = 8443;
/// Where a router finds its TLS Secret and its ACL file.
pub const ROUTER_TLS_DIR: &str = "/etc/shoal/tls";
pub const ROUTER_ACL_DIR: &str = "/etc/shoal/acl";
pub const ROUTER_ACL_FILE: &str = "/etc/shoal/acl/users.acl";
/// The key of the topology document in its ConfigMap, and where the ConfigMap is mounted.
pub const TOPOLOGY_KEY: &str = "topology.json";
pub const TOPOLOGY_DIR: &str = "/etc/shoal/topology";
/// The image's non-root user (distroless "nonroot").
pub const RUN_AS: i64 = 65532;
/// Label the operator's own pods carry (the NetworkPolicy lets them reach nodes).
pub const OPERATOR_NAME_LABEL: &str = "shoal-operator";
/// Label (value: the CacheCluster's name) of application pods that run a router as a sidecar;
/// the NetworkPolicy lets them reach the nodes.
pub const SIDECAR_LABEL: &str = "shoal.dev/router-of";
/// Label of node pods placed by address: their member index (0 = the `<name>-node` StatefulSet).
pub const MEMBER_LABEL: &str = "shoal.dev/member";
/// Label of the per-shard PodDisruptionBudgets: the shard id.
pub const SHARD_LABEL: &str = "shoal.dev/shard";
/// The label the StatefulSet controller gives each pod: its ordinal, which is its shard id in
/// every node StatefulSet.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// How topologies address nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AddressMode {
    /// `<pod>.<name>-node.<namespace>.svc:7001`: stable across pod restarts.
    Dns,
    /// The pod's IP: for operators outside the cluster network's DNS (and the test control
    /// plane, whose fake pods have loopback IPs). A restarted pod's new IP is published as a new
    /// topology version.
    PodIp,
}

/// How node pods find their place in the topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// By ordinal (`SHOAL_NODE_ID` = pod index): every shard is one node, the primary. The pod
    /// template of clusters without replicas, unchanged since before replicas existed.
    Ordinal,
    /// By address (`--advertise`): primary or replica of a shard, whichever the topology says.
    Advertised(AddressMode),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    Node,
    Router,
}

impl Component {
    pub fn as_str(self) -> &'static str {
        match self {
            Component::Node => "node",
            Component::Router => "router",
        }
    }
}

pub fn node_name(cc: &CacheCluster) -> String {
    format!("{}-node", cc.name_any())
}

/// The StatefulSet of member `member` of every shard: `<name>-node` for member 0 (the name the
/// nodes always had), `<name>-node-r<m>` for the replicas' members.
pub fn member_name(cc: &CacheCluster, member: u32) -> String {
    match member {
        0 => node_name(cc),
        m => format!("{}-r{m}", node_name(cc)),
    }
}

/// The member index of a node StatefulSet, from its name (see [`member_name`]).
pub fn statefulset_member(cc: &CacheCluster, name: &str) -> Option<u32> {
    let rest = name.strip_prefix(&node_name(cc))?;
    if rest.is_empty() {
        return Some(0);
    }
    plain_number(rest.strip_prefix("-r")?).filter(|&m| m > 0)
}

/// Member and shard of a node pod, from its name (`<name>-node-<i>`, `<name>-node-r<m>-<i>`).
pub fn pod_place(cc: &CacheCluster, pod: &str) -> Option<(u32, u32)> {
    let rest = pod.strip_prefix(&node_name(cc))?.strip_prefix('-')?;
    match rest.strip_prefix('r').and_then(|r| r.split_once('-')) {
        Some((m, i)) => {
            let member: u32 = m.parse().ok().filter(|&m| m > 0)?;
            Some((member, plain_number(i)?))
        }
        None => Some((0, plain_number(rest)?)),
    }
}

/// A decimal number as a StatefulSet writes ordinals (no sign, no leading zeros).
fn plain_number(s: &str) -> Option<u32> {
    let n: u32 = s.parse().ok()?;
    (n.to_string() == s).then_some(n)
}

/// The name of member `member`'s pod of shard `shard`.
pub fn pod_name(cc: &CacheCluster, member: u32, shard: u32) -> String {
    format!("{}-{shard}", member_name(cc, member))
}

/// A node pod's stable DNS address (through the headless Service), as topologies name it.
pub fn dns_address(cc: &CacheCluster, pod: &str) -> String {
    format!("{pod}.{}.{}.svc:{NODE_GRPC_PORT}", node_name(cc), cc.namespace().unwrap_or_default())
}

/// The per-shard PodDisruptionBudget of shard `shard`.
pub fn shard_pdb_name(cc: &CacheCluster, shard: u32) -> String {
    format!("{}-shard-{shard}", cc.name_any())
}

pub fn router_name(cc: &CacheCluster) -> String {
    format!("{}-router", cc.name_any())
}

pub fn topology_name(cc: &CacheCluster) -> String {
    format!("{}-topology", cc.name_any())
}

/// The labels that select a component's pods: name, instance and component only, so they never
/// change across upgrades (selectors are immutable).
pub fn selector_labels(cc: &CacheCluster, c: Component) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "shoal".into()),
        ("app.kubernetes.io/instance".into(), cc.name_any()),
        ("app.kubernetes.io/component".into(), c.as_str().into()),
    ])
}

/// The node pods' selector as a string (`status.selector`, for the scale subresource and HPAs).
pub fn node_selector_string(cc: &CacheCluster) -> String {
    selector_labels(cc, Component::Node).iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

pub fn labels(cc: &CacheCluster, c: Option<Component>) -> BTreeMap<String, String> {
    let mut l = BTreeMap::from([
        ("app.kubernetes.io/name".into(), "shoal".into()),
        ("app.kubernetes.io/instance".into(), cc.name_any()),
        ("app.kubernetes.io/managed-by".into(), OPERATOR_NAME_LABEL.into()),
        ("app.kubernetes.io/part-of".into(), "shoal".into()),
    ]);
    if let Some(c) = c {
        l.insert("app.kubernetes.io/component".into(), c.as_str().into());
    }
    l
}

pub fn owner(cc: &CacheCluster) -> OwnerReference {
    cc.controller_owner_ref(&()).expect("a CacheCluster read from the API has a name and uid")
}

pub fn meta(cc: &CacheCluster, name: String, c: Option<Component>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: cc.namespace(),
        labels: Some(labels(cc, c)),
        owner_references: Some(vec![owner(cc)]),
        ..Default::default()
    }
}

fn selector(cc: &CacheCluster, c: Component) -> LabelSelector {
    LabelSelector { match_labels: Some(selector_labels(cc, c)), ..Default::default() }
}

/// Pod-level settings of the restricted Pod Security profile.
fn pod_security() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(RUN_AS),
        run_as_group: Some(RUN_AS),
        fs_group: Some(RUN_AS),
        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), ..Default::default() }),
        ..Default::default()
    }
}

/// Container-level settings of the restricted profile, with a read-only root filesystem.
pub fn container_security() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Default::default() }),
        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), ..Default::default() }),
        ..Default::default()
    }
}

/// Spread a component's pods over nodes and zones when the cluster allows (never blocks
/// scheduling: a small cluster still gets all its pods).
fn spread(cc: &CacheCluster, c: Component) -> Vec<TopologySpreadConstraint> {
    ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
        .into_iter()
        .map(|key| TopologySpreadConstraint {
            max_skew: 1,
            topology_key: key.into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            label_selector: Some(selector(cc, c)),
            ..Default::default()
        })
        .collect()
}

fn port(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: port,
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

fn http_probe(path: &str, port: i32, period: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(port),
            ..Default::default()
        }),
        period_seconds: Some(period),
        ..Default::default()
    }
}

fn topology_volume(cc: &CacheCluster) -> Volume {
    Volume {
        name: "topology".into(),
        // Optional: the operator publishes the first topology only once the nodes are up.
        config_map: Some(ConfigMapVolumeSource {
            name: topology_name(cc),
            optional: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn topology_mount() -> VolumeMount {
    VolumeMount {
        name: "topology".into(),
        mount_path: TOPOLOGY_DIR.into(),
        read_only: Some(true),
        ..Default::default()
    }
}

pub fn topology_file() -> String {
    format!("{TOPOLOGY_DIR}/{TOPOLOGY_KEY}")
}

/// The node container's arguments.
pub fn node_args(cc: &CacheCluster, placement: Placement) -> Vec<String> {
    let s = &cc.spec;
    let mut args: Vec<String> = [
        "--listen",
        &format!("0.0.0.0:{NODE_GRPC_PORT}"),
        "--metrics-listen",
        &format!("0.0.0.0:{NODE_METRICS_PORT}"),
        "--data-dir",
        "/data",
        "--snapshot-interval",
        "300",
        "--topology-file",
        &topology_file(),
        "--maxmemory",
        &s.maxmemory,
        "--maxmemory-policy",
        s.maxmemory_policy.as_str(),
        "--log-format",
        "json",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    if let Some(rate) = &s.migrate_rate {
        args.extend(["--migrate-rate".to_string(), rate.clone()]);
    }
    // The kubelet expands $(VAR) from the container's environment (see `node_env`).
    match placement {
        Placement::Ordinal => {}
        // The address the operator lists the pod by (`members::pod_views`).
        Placement::Advertised(AddressMode::Dns) => {
            args.extend(["--advertise".to_string(), dns_address(cc, "$(POD_NAME)")])
        }
        Placement::Advertised(AddressMode::PodIp) => {
            args.extend(["--advertise".to_string(), format!("$(POD_IP):{NODE_GRPC_PORT}")])
        }
    }
    // `--flag=value`: list-max-listpack-size may be negative.
    if let Some(encoding) = &s.encoding {
        args.extend(encoding.flags().into_iter().map(|(flag, v)| format!("{flag}={v}")));
    }
    args
}

/// The cluster secret (`shoal_wire::auth`) of `cc`: HMAC-SHA256 of the cluster's namespace, name
/// and uid under the operator's key, in hex. Derived rather than generated and stored, so the
/// operator knows every cluster's secret without reading Secrets, and a new operator replica
/// (or a restarted one) agrees with the old. The same name recreated (a new uid) gets another.
pub fn derive_cluster_secret(key: &[u8], cc: &CacheCluster) -> ClusterSecret {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    let what = format!(
        "shoal cluster secret v1\0{}\0{}\0{}",
        cc.namespace().unwrap_or_default(),
        cc.name_any(),
        cc.uid().unwrap_or_default()
    );
    let tag = ring::hmac::sign(&key, what.as_bytes());
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    ClusterSecret::new(&hex).expect("64 hex digits make a valid secret")
}

/// The Secret holding the cluster secret that every node requires and every router sends (the
/// operator derives it, [`derive_cluster_secret`]). Created once and never changed by the
/// operator; deleted, it is made again, with the same value, at the next reconcile.
pub fn cluster_secret_name(cc: &CacheCluster) -> String {
    format!("{}-cluster-secret", cc.name_any())
}

/// The key of the secret's value in that Secret.
pub const CLUSTER_SECRET_KEY: &str = "secret";

/// The Secret object, holding `value`.
pub fn cluster_secret(cc: &CacheCluster, value: &str) -> Secret {
    Secret {
        metadata: meta(cc, cluster_secret_name(cc), None),
        string_data: Some(BTreeMap::from([(CLUSTER_SECRET_KEY.to_string(), value.to_string())])),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

/// `SHOAL_CLUSTER_SECRET` from the cluster's Secret, for node and router containers.
fn cluster_secret_env(cc: &CacheCluster) -> EnvVar {
    EnvVar {
        name: "SHOAL_CLUSTER_SECRET".into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: cluster_secret_name(cc),
                key: CLUSTER_SECRET_KEY.into(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The node container's environment: its ordinal as the node id, or what its advertised address
/// is made of; and the cluster secret.
fn node_env(cc: &CacheCluster, placement: Placement) -> Vec<EnvVar> {
    let field = |name: &str, path: &str| EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector { field_path: path.into(), ..Default::default() }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut env = match placement {
        // The pod's ordinal is its id in the topology.
        Placement::Ordinal => vec![field("SHOAL_NODE_ID", &format!("metadata.labels['{POD_INDEX_LABEL}']"))],
        // No node id: a pod that is not (yet) in the topology by its address must wait for a
        // version that names it, not take its ordinal's shard for its own (it may be a replica).
        Placement::Advertised(AddressMode::Dns) => vec![field("POD_NAME", "metadata.name")],
        Placement::Advertised(AddressMode::PodIp) => vec![field("POD_IP", "status.podIP")],
    };
    env.push(cluster_secret_env(cc));
    env
}

/// Keeps a shard's pods (same pod-index in every member StatefulSet) in different domains: pod
/// anti-affinity per topology key, against node pods of this cluster with the pod's own
/// pod-index (`matchLabelKeys`). Not topology spread constraints: the node pods already have
/// those for the whole cluster on the same keys, and the API server takes one constraint per
/// (key, whenUnsatisfiable).
fn shard_affinity(cc: &CacheCluster) -> Option<Affinity> {
    let spread = &cc.spec.shard_spread;
    let term = |key: &String| PodAffinityTerm {
        label_selector: Some(selector(cc, Component::Node)),
        // Merged with the pod's own value: only pods of its shard count.
        match_label_keys: Some(vec![POD_INDEX_LABEL.into()]),
        topology_key: key.clone(),
        ..Default::default()
    };
    let anti = match spread.mode {
        SpreadMode::None => return None,
        // The first key weighs most.
        SpreadMode::Preferred => PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(
                spread
                    .topology_keys
                    .iter()
                    .enumerate()
                    .map(|(i, key)| WeightedPodAffinityTerm {
                        weight: 100 / (i as i32 + 1),
                        pod_affinity_term: term(key),
                    })
                    .collect(),
            ),
            ..Default::default()
        },
        SpreadMode::Required => PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: Some(
                spread.topology_keys.iter().map(term).collect(),
            ),
            ..Default::default()
        },
    };
    Some(Affinity { pod_anti_affinity: Some(anti), ..Default::default() })
}

/// The StatefulSet of member `member` of every shard (see the module docs), with `replicas` pods.
/// Members beyond 0 exist only with replicas, whose pods are placed by address.
pub fn node_statefulset(cc: &CacheCluster, member: u32, replicas: i32, placement: Placement) -> StatefulSet {
    let s = &cc.spec;
    let advertised = matches!(placement, Placement::Advertised(_));
    let persistent = s.storage.kind == StorageKind::PersistentVolumeClaim;
    let mut volumes = vec![topology_volume(cc)];
    if !persistent {
        volumes.push(Volume {
            name: "data".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        });
    }
    let container = Container {
        name: "node".into(),
        image: Some(s.image.clone()),
        image_pull_policy: s.image_pull_policy.clone(),
        command: Some(vec!["shoal-node".into()]),
        args: Some(node_args(cc, placement)),
        env: Some(node_env(cc, placement)),
        ports: Some(vec![port("grpc", NODE_GRPC_PORT), port("metrics", NODE_METRICS_PORT)]),
        readiness_probe: Some(Probe {
            grpc: Some(GRPCAction { port: NODE_GRPC_PORT, service: None }),
            period_seconds: Some(5),
            ..Default::default()
        }),
        liveness_probe: Some(Probe {
            initial_delay_seconds: Some(10),
            ..http_probe("/healthz", NODE_METRICS_PORT, 10)
        }),
        resources: s.node_resources.clone(),
        security_context: Some(container_security()),
        volume_mounts: Some(vec![
            VolumeMount { name: "data".into(), mount_path: "/data".into(), ..Default::default() },
            topology_mount(),
        ]),
        ..Default::default()
    };
    let claims = persistent.then(|| {
        vec![PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("data".into()),
                labels: Some(selector_labels(cc, Component::Node)),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                storage_class_name: s.storage.storage_class_name.clone(),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".into(),
                        Quantity(s.storage.size.clone().unwrap_or_else(|| "1Gi".into())),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]
    });
    // Member 0 keeps the selector it always had (selectors are immutable); it also matches the
    // other members' pods, which the StatefulSet controller leaves alone (it only claims pods
    // named after its own StatefulSet). The others select their member label.
    let mut pod_labels = labels(cc, Some(Component::Node));
    let mut sts_selector = selector(cc, Component::Node);
    if advertised {
        pod_labels.insert(MEMBER_LABEL.into(), member.to_string());
    }
    if member > 0 {
        sts_selector
            .match_labels
            .get_or_insert_with(Default::default)
            .insert(MEMBER_LABEL.into(), member.to_string());
    }
    StatefulSet {
        metadata: meta(cc, member_name(cc, member), Some(Component::Node)),
        spec: Some(StatefulSetSpec {
            replicas: Some(replicas),
            service_name: Some(node_name(cc)),
            // Ordinals still give stable ids; pods need not wait for each other.
            pod_management_policy: Some("Parallel".into()),
            selector: sts_selector,
            // With replicas the operator restarts outdated pods itself (see the module docs).
            update_strategy: advertised
                .then(|| StatefulSetUpdateStrategy { type_: Some("OnDelete".into()), rolling_update: None }),
            // A shard that leaves has had its slots moved away first: its claim holds nothing
            // anyone needs, and a stale copy must never come back with a later scale-up.
            persistent_volume_claim_retention_policy: Some(StatefulSetPersistentVolumeClaimRetentionPolicy {
                when_scaled: Some("Delete".into()),
                when_deleted: Some("Delete".into()),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(pod_labels), ..Default::default() }),
                spec: Some(PodSpec {
                    service_account_name: Some(node_name(cc)),
                    automount_service_account_token: Some(false),
                    security_context: Some(pod_security()),
                    // Time for a primary's hand-over to a replica (at most 10 s) and the final
                    // snapshot of every acknowledged write.
                    termination_grace_period_seconds: Some(60),
                    topology_spread_constraints: Some(spread(cc, Component::Node)),
                    affinity: if advertised { shard_affinity(cc) } else { None },
                    containers: vec![container],
                    volumes: Some(volumes),
                    ..Default::default()
                }),
            },
            volume_claim_templates: claims,
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn node_service(cc: &CacheCluster) -> Service {
    Service {
        metadata: meta(cc, node_name(cc), Some(Component::Node)),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            // Nodes find each other (migrations) before they report ready.
            publish_not_ready_addresses: Some(true),
            selector: Some(selector_labels(cc, Component::Node)),
            ports: Some(vec![
                service_port("grpc", NODE_GRPC_PORT),
                service_port("metrics", NODE_METRICS_PORT),
            ]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn service_port(name: &str, port: i32) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port,
        target_port: Some(IntOrString::String(name.into())),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

pub fn router_deployment(cc: &CacheCluster) -> Deployment {
    let s = &cc.spec;
    let mut env = vec![cluster_secret_env(cc)];
    match &s.password_secret_ref {
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
    let (args, ports, mounts, volumes) = router_listeners(cc);
    let container = Container {
        name: "router".into(),
        image: Some(s.image.clone()),
        image_pull_policy: s.image_pull_policy.clone(),
        command: Some(vec!["shoal-router".into()]),
        args: Some(args),
        env: Some(env),
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
                    termination_grace_period_seconds: Some(30),
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

/// A router's arguments, container ports, volume mounts and volumes: the topology, and with
/// `spec.tls` the TLS listeners and their Secret (plaintext RESP and the HTTP API off unless
/// `plaintext`; the HTTP port then serves only the probes' and Prometheus's endpoints), with
/// `spec.aclSecretRef` the ACL file.
fn router_listeners(cc: &CacheCluster) -> (Vec<String>, Vec<ContainerPort>, Vec<VolumeMount>, Vec<Volume>) {
    let s = &cc.spec;
    let plaintext = s.tls.as_ref().is_none_or(|t| t.plaintext);
    let mut args: Vec<String> = vec!["--topology-file".into(), topology_file()];
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
    args.extend(["--log-format".into(), "json".into()]);
    (args, ports, mounts, volumes)
}

/// The Service clients use: RESP on 6379 and HTTP on 8080; with TLS, RESP over TLS on 6380 and
/// HTTPS on 8443 (and without plaintext, 8080 for metrics only).
pub fn router_service(cc: &CacheCluster) -> Service {
    let ports = router_listeners(cc).1;
    let ports = ports.iter().map(|p| service_port(p.name.as_deref().unwrap_or(""), p.container_port));
    Service {
        metadata: meta(cc, cc.name_any(), Some(Component::Router)),
        spec: Some(ServiceSpec {
            selector: Some(selector_labels(cc, Component::Router)),
            ports: Some(ports.collect()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn pdb(cc: &CacheCluster, c: Component) -> PodDisruptionBudget {
    let name = match c {
        Component::Node => node_name(cc),
        Component::Router => router_name(cc),
    };
    PodDisruptionBudget {
        metadata: meta(cc, name, Some(c)),
        spec: Some(PodDisruptionBudgetSpec {
            // Never two shards (or two routers) voluntarily down at once.
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(selector(cc, c)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The PodDisruptionBudget of shard `shard`'s `members` pods (primary and replicas), with
/// replicas: `open`, one of them may go voluntarily at a time (`minAvailable: members - 1`);
/// closed, none (`minAvailable: members`). The operator opens it while the shard has a serving
/// primary and a synced replica: a pod's readiness says it runs, not that a replica has caught
/// up, so only the operator's probes can tell when evicting one more pod would leave the shard's
/// data on no running process. A whole number of pods, not `maxUnavailable`: the disruption
/// controller counts a `maxUnavailable` budget against the scale of the pods' controllers, and
/// the member StatefulSets hold every shard's pods, so a per-shard `maxUnavailable: 1` would
/// never allow an eviction. Unhealthy pods may always be evicted (they serve nothing, and a
/// drain must not hang on a crashing pod).
pub fn shard_pdb(cc: &CacheCluster, shard: u32, members: u32, open: bool) -> PodDisruptionBudget {
    let mut sel = selector_labels(cc, Component::Node);
    sel.insert(POD_INDEX_LABEL.into(), shard.to_string());
    let mut metadata = meta(cc, shard_pdb_name(cc, shard), Some(Component::Node));
    metadata.labels.get_or_insert_with(Default::default).insert(SHARD_LABEL.into(), shard.to_string());
    PodDisruptionBudget {
        metadata,
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int((members - u32::from(open && members > 0)) as i32)),
            selector: Some(LabelSelector { match_labels: Some(sel), ..Default::default() }),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Node gRPC only from this cluster's routers and nodes (migrations pull node to node) and from
/// the operator's pods in any namespace; metrics from anywhere (Prometheus).
pub fn node_network_policy(cc: &CacheCluster) -> NetworkPolicy {
    let peer = |c: Component| NetworkPolicyPeer {
        pod_selector: Some(LabelSelector {
            match_labels: Some(selector_labels(cc, c)),
            ..Default::default()
        }),
        ..Default::default()
    };
    let operator = NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector::default()),
        pod_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(
                "app.kubernetes.io/name".into(),
                OPERATOR_NAME_LABEL.into(),
            )])),
            ..Default::default()
        }),
        ..Default::default()
    };
    // Application pods running a router as a sidecar (see charts/shoal/examples/sidecar.yaml).
    let sidecars = NetworkPolicyPeer {
        pod_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(SIDECAR_LABEL.into(), cc.name_any())])),
            ..Default::default()
        }),
        ..Default::default()
    };
    let tcp = |p: i32| NetworkPolicyPort {
        port: Some(IntOrString::Int(p)),
        protocol: Some("TCP".into()),
        ..Default::default()
    };
    NetworkPolicy {
        metadata: meta(cc, node_name(cc), Some(Component::Node)),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(selector(cc, Component::Node)),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![
                NetworkPolicyIngressRule {
                    from: Some(vec![peer(Component::Router), peer(Component::Node), operator, sidecars]),
                    ports: Some(vec![tcp(NODE_GRPC_PORT)]),
                },
                NetworkPolicyIngressRule { from: None, ports: Some(vec![tcp(NODE_METRICS_PORT)]) },
            ]),
            ..Default::default()
        }),
    }
}

/// Routers: the client ports (plaintext and TLS) only from `spec.clientPeers` (anyone if unset),
/// the metrics-only port (TLS without plaintext) from anywhere (Prometheus, the kubelet's
/// probes); nothing else.
pub fn router_network_policy(cc: &CacheCluster) -> NetworkPolicy {
    let plaintext = cc.spec.tls.as_ref().is_none_or(|t| t.plaintext);
    let tcp = |p: i32| NetworkPolicyPort {
        port: Some(IntOrString::Int(p)),
        protocol: Some("TCP".into()),
        ..Default::default()
    };
    let (client, ops): (Vec<_>, Vec<_>) = router_listeners(cc)
        .1
        .iter()
        .map(|p| p.container_port)
        .partition(|p| plaintext || *p != ROUTER_HTTP_PORT);
    let mut ingress = vec![NetworkPolicyIngressRule {
        from: cc.spec.client_peers.clone(),
        ports: Some(client.into_iter().map(tcp).collect()),
    }];
    if !ops.is_empty() {
        ingress
            .push(NetworkPolicyIngressRule { from: None, ports: Some(ops.into_iter().map(tcp).collect()) });
    }
    NetworkPolicy {
        metadata: meta(cc, router_name(cc), Some(Component::Router)),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(selector(cc, Component::Router)),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(ingress),
            ..Default::default()
        }),
    }
}

pub fn service_account(cc: &CacheCluster, c: Component) -> ServiceAccount {
    let name = match c {
        Component::Node => node_name(cc),
        Component::Router => router_name(cc),
    };
    ServiceAccount {
        metadata: meta(cc, name, Some(c)),
        automount_service_account_token: Some(false),
        ..Default::default()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::crd::{CacheClusterSpec, SecretKeyRef, Storage};

    pub fn cluster(spec: serde_json::Value) -> CacheCluster {
        let mut cc = CacheCluster::new("demo", serde_json::from_value::<CacheClusterSpec>(spec).unwrap());
        cc.metadata.namespace = Some("shop".into());
        cc.metadata.uid = Some("0000-1111".into());
        cc
    }

    fn pod_spec(t: &PodTemplateSpec) -> &PodSpec {
        t.spec.as_ref().unwrap()
    }

    #[test]
    fn every_pod_meets_the_restricted_profile_and_has_no_api_token() {
        let cc = cluster(serde_json::json!({"shards": 3}));
        let sts = node_statefulset(&cc, 0, 3, Placement::Ordinal);
        let dep = router_deployment(&cc);
        for spec in
            [pod_spec(&sts.spec.as_ref().unwrap().template), pod_spec(&dep.spec.as_ref().unwrap().template)]
        {
            let p = spec.security_context.as_ref().unwrap();
            assert_eq!((p.run_as_non_root, p.run_as_user), (Some(true), Some(RUN_AS)));
            assert_eq!(p.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
            assert_eq!(spec.automount_service_account_token, Some(false));
            for c in &spec.containers {
                let s = c.security_context.as_ref().unwrap();
                assert_eq!(s.allow_privilege_escalation, Some(false));
                assert_eq!(s.read_only_root_filesystem, Some(true));
                assert_eq!(s.capabilities.as_ref().unwrap().drop.as_deref(), Some(&["ALL".to_string()][..]));
                assert!(c.security_context.as_ref().unwrap().privileged.is_none());
            }
        }
        for sa in [service_account(&cc, Component::Node), service_account(&cc, Component::Router)] {
            assert_eq!(sa.automount_service_account_token, Some(false));
        }
    }

    #[test]
    fn selectors_use_name_instance_component_only_and_owner_is_the_cluster() {
        let cc = cluster(serde_json::json!({"shards": 3}));
        let sts = node_statefulset(&cc, 0, 3, Placement::Ordinal);
        let sel = sts.spec.as_ref().unwrap().selector.match_labels.clone().unwrap();
        assert_eq!(
            sel.keys().collect::<Vec<_>>(),
            ["app.kubernetes.io/component", "app.kubernetes.io/instance", "app.kubernetes.io/name"]
        );
        let pod_labels =
            sts.spec.as_ref().unwrap().template.metadata.as_ref().unwrap().labels.clone().unwrap();
        assert!(sel.iter().all(|(k, v)| pod_labels.get(k) == Some(v)), "the template matches its selector");
        let owner = &sts.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.controller),
            ("CacheCluster", "demo", Some(true))
        );
        assert_eq!(
            node_selector_string(&cc),
            "app.kubernetes.io/component=node,app.kubernetes.io/instance=demo,app.kubernetes.io/name=shoal"
        );
        let svc = router_service(&cc);
        assert_eq!(svc.metadata.name.as_deref(), Some("demo"));
        assert_eq!(svc.spec.unwrap().selector.unwrap().get("app.kubernetes.io/component").unwrap(), "router");
    }

    #[test]
    fn nodes_get_their_settings_ids_and_storage() {
        let mut cc = cluster(serde_json::json!({
            "shards": 3, "maxmemory": "2gb", "maxmemoryPolicy": "allkeys-lru", "migrateRate": "32mb",
            "storage": {"type": "PersistentVolumeClaim", "size": "5Gi", "storageClassName": "fast"}
        }));
        let sts = node_statefulset(&cc, 0, 4, Placement::Ordinal);
        let spec = sts.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(4));
        let c = &pod_spec(&spec.template).containers[0];
        let args = c.args.clone().unwrap().join(" ");
        assert!(args.contains("--maxmemory 2gb --maxmemory-policy allkeys-lru"), "{args}");
        assert!(
            args.contains("--migrate-rate 32mb")
                && args.contains("--topology-file /etc/shoal/topology/topology.json")
        );
        let env = &c.env.as_ref().unwrap()[0];
        assert_eq!(env.name, "SHOAL_NODE_ID");
        assert!(
            env.value_from.as_ref().unwrap().field_ref.as_ref().unwrap().field_path.contains("pod-index")
        );
        let claim = &spec.volume_claim_templates.as_ref().unwrap()[0];
        let claim_spec = claim.spec.as_ref().unwrap();
        assert_eq!(claim_spec.storage_class_name.as_deref(), Some("fast"));
        assert_eq!(claim_spec.resources.as_ref().unwrap().requests.as_ref().unwrap()["storage"].0, "5Gi");
        assert_eq!(
            spec.persistent_volume_claim_retention_policy.as_ref().unwrap().when_scaled.as_deref(),
            Some("Delete")
        );
        assert!(!pod_spec(&spec.template).volumes.as_ref().unwrap().iter().any(|v| v.name == "data"));

        cc.spec.storage = Storage::default();
        let sts = node_statefulset(&cc, 0, 3, Placement::Ordinal);
        let spec = sts.spec.as_ref().unwrap();
        assert!(spec.volume_claim_templates.is_none());
        assert!(
            pod_spec(&spec.template)
                .volumes
                .as_ref()
                .unwrap()
                .iter()
                .any(|v| v.name == "data" && v.empty_dir.is_some())
        );
    }

    #[test]
    fn nodes_get_only_the_encoding_thresholds_that_are_set() {
        let encoding_args = |cc: &CacheCluster| -> Vec<String> {
            node_args(cc, Placement::Ordinal).into_iter().filter(|a| a.contains("-max-")).collect()
        };
        assert!(encoding_args(&cluster(serde_json::json!({"shards": 3}))).is_empty(), "node defaults");
        assert!(encoding_args(&cluster(serde_json::json!({"shards": 3, "encoding": {}}))).is_empty());
        let cc = cluster(serde_json::json!({
            "shards": 3,
            "encoding": {"hashMaxListpackEntries": 1024, "zsetMaxListpackValue": 0, "listMaxListpackSize": -5}
        }));
        assert_eq!(
            encoding_args(&cc),
            [
                "--hash-max-listpack-entries=1024",
                "--zset-max-listpack-value=0",
                "--list-max-listpack-size=-5"
            ]
        );
        let all = cluster(serde_json::json!({"shards": 3, "encoding": {
            "hashMaxListpackEntries": 1, "hashMaxListpackValue": 2, "setMaxIntsetEntries": 3,
            "zsetMaxListpackEntries": 4, "zsetMaxListpackValue": 5, "listMaxListpackSize": 6
        }}));
        assert_eq!(
            encoding_args(&all),
            [
                "--hash-max-listpack-entries=1",
                "--hash-max-listpack-value=2",
                "--set-max-intset-entries=3",
                "--zset-max-listpack-entries=4",
                "--zset-max-listpack-value=5",
                "--list-max-listpack-size=6",
            ]
        );
    }

    #[test]
    fn an_encoding_change_changes_the_node_pod_template() {
        // The operator applies the StatefulSet on every reconcile; a different pod template is
        // what rolls the node pods (RollingUpdate, one at a time), as a maxmemory change does.
        let template = |cc: &CacheCluster| {
            serde_json::to_value(node_statefulset(cc, 0, 3, Placement::Ordinal).spec.unwrap().template)
                .unwrap()
        };
        let before = cluster(serde_json::json!({"shards": 3, "maxmemory": "1gb"}));
        let more_memory = cluster(serde_json::json!({"shards": 3, "maxmemory": "2gb"}));
        let encoded = cluster(serde_json::json!({"shards": 3, "maxmemory": "1gb",
                                                 "encoding": {"setMaxIntsetEntries": 4096}}));
        assert_ne!(template(&before), template(&more_memory));
        assert_ne!(template(&before), template(&encoded));
        let args = template(&encoded)["spec"]["containers"][0]["args"].clone();
        assert!(
            args.as_array().unwrap().contains(&serde_json::json!("--set-max-intset-entries=4096")),
            "{args}"
        );
    }

    #[test]
    fn cluster_secrets_are_derived_per_cluster_and_per_key() {
        let cc = cluster(serde_json::json!({"shards": 1}));
        let a = derive_cluster_secret(b"key one", &cc);
        assert_eq!(a, derive_cluster_secret(b"key one", &cc), "the same for every operator replica");
        assert_eq!(a.expose().len(), 64);
        assert!(a.expose().bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, derive_cluster_secret(b"key two", &cc), "another key");
        let mut other = cc.clone();
        other.metadata.uid = Some("2222-3333".into());
        assert_ne!(a, derive_cluster_secret(b"key one", &other), "the same name recreated");
        other = cc.clone();
        other.metadata.name = Some("other".into());
        assert_ne!(a, derive_cluster_secret(b"key one", &other), "another cluster");
        let s = cluster_secret(&cc, a.expose());
        assert_eq!(s.metadata.name.as_deref(), Some("demo-cluster-secret"));
        assert_eq!(s.string_data.unwrap()[CLUSTER_SECRET_KEY], a.expose());
    }

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
    fn disruption_budgets_and_network_policy() {
        let cc = cluster(serde_json::json!({"shards": 3}));
        let p = pdb(&cc, Component::Node);
        assert_eq!(p.spec.as_ref().unwrap().max_unavailable, Some(IntOrString::Int(1)));
        let np = node_network_policy(&cc);
        let rules = np.spec.as_ref().unwrap().ingress.clone().unwrap();
        let grpc = &rules[0];
        assert_eq!(grpc.ports.as_ref().unwrap()[0].port, Some(IntOrString::Int(NODE_GRPC_PORT)));
        let from = grpc.from.as_ref().unwrap();
        let components: Vec<Option<String>> = from
            .iter()
            .map(|p| {
                p.pod_selector
                    .as_ref()
                    .unwrap()
                    .match_labels
                    .as_ref()
                    .unwrap()
                    .get("app.kubernetes.io/component")
                    .cloned()
            })
            .collect();
        assert_eq!(
            components,
            [Some("router".into()), Some("node".into()), None, None],
            "routers, nodes, operator, sidecars"
        );
        let sidecars = from[3].pod_selector.as_ref().unwrap().match_labels.as_ref().unwrap();
        assert_eq!(sidecars.get(SIDECAR_LABEL).map(String::as_str), Some("demo"));
        assert!(from[2].namespace_selector.is_some(), "the operator may run in another namespace");
        assert!(
            rules[1].from.is_none()
                && rules[1].ports.as_ref().unwrap()[0].port == Some(IntOrString::Int(NODE_METRICS_PORT))
        );
    }

    #[test]
    fn member_statefulsets_and_pods_are_named_and_parsed_back() {
        let cc = cluster(serde_json::json!({"shards": 3, "replicasPerShard": 2}));
        assert_eq!(
            (member_name(&cc, 0), member_name(&cc, 2)),
            ("demo-node".to_string(), "demo-node-r2".to_string())
        );
        assert_eq!(pod_name(&cc, 1, 7), "demo-node-r1-7");
        for (member, shard) in [(0, 0), (0, 12), (1, 0), (2, 999)] {
            assert_eq!(pod_place(&cc, &pod_name(&cc, member, shard)), Some((member, shard)));
            assert_eq!(statefulset_member(&cc, &member_name(&cc, member)), Some(member));
        }
        for bad in [
            "demo-node",
            "demo-node-",
            "demo-node-r1",
            "demo-node-r0-1",
            "demo-node-01",
            "demo-node-+1",
            "demo-node-r1-x",
            "demo-router-1",
            "other-node-1",
            "demo-node-r-1",
        ] {
            assert_eq!(pod_place(&cc, bad), None, "{bad}");
        }
        for bad in ["demo-node-r0", "demo-node-x", "demo-router", "demo-node-r01"] {
            assert_eq!(statefulset_member(&cc, bad), None, "{bad}");
        }
        assert_eq!(dns_address(&cc, "demo-node-r1-2"), "demo-node-r1-2.demo-node.shop.svc:7001");
        assert_eq!(shard_pdb_name(&cc, 4), "demo-shard-4");
    }

    /// The topology keys of a pod's spread constraints, in order.
    fn spread_keys(pod: &PodSpec) -> Vec<&str> {
        pod.topology_spread_constraints.iter().flatten().map(|t| t.topology_key.as_str()).collect()
    }

    #[test]
    fn without_replicas_the_node_statefulset_is_what_it_always_was() {
        // Upgrading the operator must not roll the pods of clusters without replicas: their
        // template is exactly the one from before replicas existed, plus the cluster secret
        // (which did roll them once, with the upgrade that brought node authentication).
        let cc = cluster(serde_json::json!({"shards": 3}));
        let sts = node_statefulset(&cc, 0, 3, Placement::Ordinal);
        let spec = sts.spec.as_ref().unwrap();
        assert!(spec.update_strategy.is_none());
        let pod = spec.template.spec.as_ref().unwrap();
        let c = &pod.containers[0];
        assert!(!c.args.as_ref().unwrap().iter().any(|a| a == "--advertise"));
        let env: Vec<&str> = c.env.as_ref().unwrap().iter().map(|e| e.name.as_str()).collect();
        assert_eq!(env, ["SHOAL_NODE_ID", "SHOAL_CLUSTER_SECRET"]);
        assert!(
            !spec.template.metadata.as_ref().unwrap().labels.as_ref().unwrap().contains_key(MEMBER_LABEL)
        );
        assert_eq!(spread_keys(pod), ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]);
        assert!(
            pod.topology_spread_constraints.as_ref().unwrap().iter().all(|t| t.match_label_keys.is_none())
        );
    }

    #[test]
    fn with_replicas_pods_advertise_their_address_and_spread_by_shard() {
        let cc = cluster(serde_json::json!({"shards": 3, "replicasPerShard": 1}));
        let args = |p: Placement| node_args(&cc, p).join(" ");
        assert!(
            args(Placement::Advertised(AddressMode::Dns))
                .ends_with("--advertise $(POD_NAME).demo-node.shop.svc:7001")
        );
        assert!(args(Placement::Advertised(AddressMode::PodIp)).ends_with("--advertise $(POD_IP):7001"));

        let sts = node_statefulset(&cc, 1, 3, Placement::Advertised(AddressMode::Dns));
        assert_eq!(sts.metadata.name.as_deref(), Some("demo-node-r1"));
        let spec = sts.spec.as_ref().unwrap();
        assert_eq!(spec.service_name.as_deref(), Some("demo-node"), "one headless Service for every member");
        assert_eq!(spec.update_strategy.as_ref().unwrap().type_.as_deref(), Some("OnDelete"));
        let selector = spec.selector.match_labels.as_ref().unwrap();
        let labels = spec.template.metadata.as_ref().unwrap().labels.as_ref().unwrap();
        assert_eq!(selector.get(MEMBER_LABEL).map(String::as_str), Some("1"));
        assert!(selector.iter().all(|(k, v)| labels.get(k) == Some(v)), "the template matches its selector");
        let pod = spec.template.spec.as_ref().unwrap();
        let env = pod.containers[0].env.as_ref().unwrap();
        assert_eq!(env.len(), 2);
        assert_eq!(env[0].name, "POD_NAME", "no node id: a replica must not take its ordinal's shard");
        assert_eq!(env[1].name, "SHOAL_CLUSTER_SECRET");
        assert_eq!(
            spread_keys(pod),
            ["kubernetes.io/hostname", "topology.kubernetes.io/zone"],
            "the cluster-wide spread"
        );
        let preferred = pod
            .affinity
            .as_ref()
            .unwrap()
            .pod_anti_affinity
            .as_ref()
            .unwrap()
            .preferred_during_scheduling_ignored_during_execution
            .clone()
            .unwrap();
        let weights: Vec<(i32, &str)> =
            preferred.iter().map(|w| (w.weight, w.pod_affinity_term.topology_key.as_str())).collect();
        assert_eq!(weights, [(100, "kubernetes.io/hostname"), (50, "topology.kubernetes.io/zone")]);
        let term = &preferred[0].pod_affinity_term;
        assert_eq!(
            term.match_label_keys.as_deref(),
            Some(&[POD_INDEX_LABEL.to_string()][..]),
            "same shard only"
        );
        assert_eq!(
            term.label_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()
                .get("app.kubernetes.io/component")
                .map(String::as_str),
            Some("node"),
            "every member's pods count"
        );

        // Member 0 keeps its selector (immutable) and gets the member label on its pods.
        let zero = node_statefulset(&cc, 0, 3, Placement::Advertised(AddressMode::Dns));
        let spec = zero.spec.as_ref().unwrap();
        assert!(!spec.selector.match_labels.as_ref().unwrap().contains_key(MEMBER_LABEL));
        assert_eq!(
            spec.template
                .metadata
                .as_ref()
                .unwrap()
                .labels
                .as_ref()
                .unwrap()
                .get(MEMBER_LABEL)
                .map(String::as_str),
            Some("0")
        );

        let required = cluster(serde_json::json!({"shards": 3, "replicasPerShard": 1,
            "shardSpread": {"mode": "Required", "topologyKeys": ["topology.kubernetes.io/zone"]}}));
        let anti = shard_affinity(&required).unwrap().pod_anti_affinity.unwrap();
        assert!(anti.preferred_during_scheduling_ignored_during_execution.is_none());
        let terms = anti.required_during_scheduling_ignored_during_execution.unwrap();
        assert_eq!(
            terms.iter().map(|t| t.topology_key.as_str()).collect::<Vec<_>>(),
            ["topology.kubernetes.io/zone"]
        );
        let none =
            cluster(serde_json::json!({"shards": 3, "replicasPerShard": 1, "shardSpread": {"mode": "None"}}));
        assert!(shard_affinity(&none).is_none());
        assert!(
            node_statefulset(&cc, 0, 3, Placement::Ordinal)
                .spec
                .unwrap()
                .template
                .spec
                .unwrap()
                .affinity
                .is_none(),
            "no replicas: the template as it was"
        );
    }

    #[test]
    fn a_shard_budget_selects_every_member_of_its_shard_only() {
        let cc = cluster(serde_json::json!({"shards": 3, "replicasPerShard": 1}));
        let p = shard_pdb(&cc, 2, 2, true);
        assert_eq!(p.metadata.name.as_deref(), Some("demo-shard-2"));
        assert_eq!(p.metadata.labels.as_ref().unwrap().get(SHARD_LABEL).map(String::as_str), Some("2"));
        let spec = p.spec.unwrap();
        assert_eq!(
            (spec.min_available, spec.max_unavailable),
            (Some(IntOrString::Int(1)), None),
            "one of two may go"
        );
        let sel = spec.selector.unwrap().match_labels.unwrap();
        assert_eq!(sel.get(POD_INDEX_LABEL).map(String::as_str), Some("2"));
        assert_eq!(sel.get("app.kubernetes.io/component").map(String::as_str), Some("node"));
        assert!(!sel.contains_key(MEMBER_LABEL), "primary and replicas alike");
        assert_eq!(
            shard_pdb(&cc, 0, 2, false).spec.unwrap().min_available,
            Some(IntOrString::Int(2)),
            "closed"
        );
        assert_eq!(shard_pdb(&cc, 0, 3, true).spec.unwrap().min_available, Some(IntOrString::Int(2)));
    }
}
