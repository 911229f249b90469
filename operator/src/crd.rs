//! The `CacheCluster` custom resource (`shoal.dev/v1alpha1`, short name `cc`).
//!
//! `spec.shards` is the number of storage nodes; the scale subresource maps it to `kubectl scale`
//! and HPAs (`.spec.shards`, `.status.shards`, `.status.selector`). `spec.replicasPerShard` gives
//! each shard that many replicas, which follow its primary and replace it when it fails. The
//! schema is generated from these types (`crdgen` writes it into the chart), with validation the
//! API server enforces.

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// The image the chart and the operator default to.
/// The most replicas any shard may have (`spec.replicasPerShard`).
pub const MAX_REPLICAS_PER_SHARD: i32 = 5;

pub const DEFAULT_IMAGE: &str = "ghcr.io/shoal-dev/shoal:0.1.0";

// Each printcolumn(...) repeats the same keys, which clippy takes for duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "shoal.dev",
    version = "v1alpha1",
    kind = "CacheCluster",
    plural = "cacheclusters",
    shortname = "cc",
    category = "shoal",
    namespaced,
    status = "CacheClusterStatus",
    derive = "PartialEq",
    doc = "A Shoal cache cluster: storage nodes (shards), stateless routers, and the topology between them. \
           Changing spec.shards (kubectl scale) reshards online without losing acknowledged writes.",
    scale(
        spec_replicas_path = ".spec.shards",
        status_replicas_path = ".status.shards",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "Shards",
        type_ = "integer",
        json_path = ".spec.shards",
        description = "Wanted shards"
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".spec.replicasPerShard",
        description = "Replicas per shard"
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyShards",
        description = "Ready shards"
    ),
    printcolumn(name = "Topology", type_ = "integer", json_path = ".status.topologyVersion"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct CacheClusterSpec {
    /// Storage nodes. Each owns a share of the 16384 hash slots; changing the number moves slots
    /// (and their keys) online.
    #[schemars(range(min = 1, max = 1000))]
    pub shards: i32,
    /// Replicas per shard: each follows its shard's primary (a full copy, then every change) and
    /// the operator's failover writer promotes one when the primary fails or hands over (a
    /// deleted or drained primary's pod). 0: a shard is one node, whose data is lost with its
    /// pod unless storage is a PersistentVolumeClaim.
    #[serde(default)]
    #[schemars(range(min = 0, max = MAX_REPLICAS_PER_SHARD))]
    pub replicas_per_shard: i32,
    /// How the pods of one shard (its primary and replicas) are kept apart, so that one machine
    /// or zone going down does not take a whole shard.
    #[serde(default)]
    pub shard_spread: ShardSpread,
    /// Router replicas (stateless; clients connect to the Service in front of them).
    #[serde(default = "default_routers")]
    #[schemars(range(min = 1, max = 1000))]
    pub routers: i32,
    /// Container image holding shoal-node and shoal-router.
    #[serde(default = "default_image")]
    #[x_kube(validation = Rule::new("self != ''").message("image must not be empty"))]
    pub image: String,
    /// Image pull policy (Always, IfNotPresent, Never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self in ['Always', 'IfNotPresent', 'Never']"))]
    pub image_pull_policy: Option<String>,
    /// Resources of each node container. Set the memory limit above maxmemory: the store's own
    /// overhead and snapshots need headroom.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_resources: Option<ResourceRequirements>,
    /// Resources of each router container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_resources: Option<ResourceRequirements>,
    /// Memory for cached data per node, in Redis syntax (512mb, 2gb); "0" means no limit.
    #[serde(default = "default_maxmemory")]
    #[x_kube(validation = Rule::new("self.matches('^[0-9]+(b|k|kb|m|mb|g|gb|K|KB|M|MB|G|GB)?$')")
        .message("maxmemory is a number with an optional unit: b, k, kb, m, mb, g, gb"))]
    pub maxmemory: String,
    /// What a node does when maxmemory is reached.
    #[serde(default)]
    pub maxmemory_policy: EvictionPolicy,
    /// Where nodes keep their snapshots (warm restarts).
    #[serde(default)]
    pub storage: Storage,
    /// A Secret holding the password clients must send (AUTH / HTTP bearer). None: no password;
    /// then only the NetworkPolicy and your network stand between clients and the data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret_ref: Option<SecretKeyRef>,
    /// Client TLS on the routers: RESP over TLS on 6380 and HTTPS on 8443, with the certificate
    /// in a Secret (re-read when it changes, e.g. renewed by cert-manager).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ClientTls>,
    /// ACL users: a Secret holding an ACL file in Redis's format (`user <name> on >pass ~keys
    /// +@read ...`, one user per line), mounted into every router and re-read when it changes.
    /// A `default` user there overrides passwordSecretRef.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acl_secret_ref: Option<AclSecretRef>,
    /// Who may reach the routers' client ports (NetworkPolicy peers: pod and namespace
    /// selectors, IP blocks). Unset: anyone; the routers' NetworkPolicy then still closes every
    /// other port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_peers: Option<Vec<k8s_openapi::api::networking::v1::NetworkPolicyPeer>>,
    /// Most bytes per second a node pulls while slots move to it (Redis syntax, e.g. 8mb).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^[0-9]+(b|k|kb|m|mb|g|gb|K|KB|M|MB|G|GB)?$')"))]
    pub migrate_rate: Option<String>,
    /// Thresholds at which hashes, sets, sorted sets and lists leave their compact encodings
    /// (Redis's hash-max-listpack-entries etc.), passed to every node at start. Unset fields keep
    /// the node's defaults, which are Redis's. CONFIG SET through a router changes them at
    /// runtime but only until a node restarts; set them here to keep them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<Encoding>,
    /// How routers answer CLUSTER: `standalone` (a standalone Redis, the default) or `emulated` (a
    /// one-node Redis Cluster owning every slot, for cluster-mode clients such as redis-py's
    /// RedisCluster, ioredis Cluster, go-redis ClusterClient, Jedis and Lettuce). Emulated
    /// routers announce the routers' Service name, so those clients keep going through it.
    #[serde(default)]
    pub cluster_mode: ClusterMode,
    /// What a script that runs past busy-reply-threshold on a node does to other clients'
    /// commands: `node` (the default: only commands that reach the nodes it holds are answered
    /// BUSY; the rest of the cluster serves on) or `cluster` (routers answer every command BUSY
    /// but those Redis lets through, SCRIPT KILL, FUNCTION KILL, MULTI, ..., as one Redis would).
    #[serde(default)]
    pub busy_reply_scope: BusyReplyScope,
    /// Colocation rules, `PREFIX*` (e.g. `rq:*`, `bull:*`): keys starting with PREFIX share one
    /// slot, so an application's transactions and scripts over its own default key names run as on
    /// one Redis, without {hashtags}. Passed to every node and router. Fixed once the cluster
    /// exists: keys live in the slots these rules give them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 2, max = 256), regex(pattern = r"^[^*?\[\]\\]+\*$")))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("colocate cannot change once set"))]
    pub colocate: Vec<String>,
}

/// Routers' `--cluster-mode` (`off` there; not here, where YAML would read `off` as false).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ClusterMode {
    #[default]
    Standalone,
    Emulated,
}

/// Routers' `--busy-reply-scope`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum BusyReplyScope {
    #[default]
    Node,
    Cluster,
}

fn default_routers() -> i32 {
    2
}

fn default_image() -> String {
    DEFAULT_IMAGE.into()
}

fn default_maxmemory() -> String {
    "0".into()
}

/// Encoding thresholds of the nodes, by Redis's names and with the ranges the nodes accept
/// (`shoal_wire::settings`). Each is optional: unset means the node's default (Redis's).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Encoding {
    /// Hashes with more fields than this are stored as hash tables instead of listpacks
    /// (hash-max-listpack-entries; default 512).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub hash_max_listpack_entries: Option<i64>,
    /// Hashes with a field or value longer than this many bytes are stored as hash tables
    /// (hash-max-listpack-value; default 64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub hash_max_listpack_value: Option<i64>,
    /// Sets of more integers than this are stored as hash tables instead of intsets
    /// (set-max-intset-entries; default 512).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub set_max_intset_entries: Option<i64>,
    /// Sorted sets with more members than this are stored as skiplists instead of listpacks
    /// (zset-max-listpack-entries; default 128).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub zset_max_listpack_entries: Option<i64>,
    /// Sorted sets with a member longer than this many bytes are stored as skiplists
    /// (zset-max-listpack-value; default 64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub zset_max_listpack_value: Option<i64>,
    /// Size of one list chunk (list-max-listpack-size; default -2): a positive number caps its
    /// entries, -1 to -5 its bytes (4, 8, 16, 32 or 64 KiB); 0 acts as -1 and below -5 as -5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = i32::MIN, max = i32::MAX))]
    pub list_max_listpack_size: Option<i32>,
}

impl Encoding {
    /// The set thresholds as (the node's flag, value), in Redis's order.
    pub fn flags(&self) -> Vec<(&'static str, i64)> {
        [
            ("--hash-max-listpack-entries", self.hash_max_listpack_entries),
            ("--hash-max-listpack-value", self.hash_max_listpack_value),
            ("--set-max-intset-entries", self.set_max_intset_entries),
            ("--zset-max-listpack-entries", self.zset_max_listpack_entries),
            ("--zset-max-listpack-value", self.zset_max_listpack_value),
            ("--list-max-listpack-size", self.list_max_listpack_size.map(i64::from)),
        ]
        .into_iter()
        .filter_map(|(flag, v)| Some((flag, v?)))
        .collect()
    }
}

/// How the scheduler keeps a shard's pods apart: pod anti-affinity per key against the pods of
/// the same shard (pods carry their shard as the StatefulSet pod-index label).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardSpread {
    /// Preferred: apart when the cluster allows, never blocking scheduling (the first key weighs
    /// most). Required: a pod waits (Pending) rather than share a domain with a pod of its shard,
    /// so every key needs replicasPerShard + 1 domains (and nodes without a key's label count as
    /// none). None: no rule per shard.
    #[serde(default)]
    pub mode: SpreadMode,
    /// Node labels that name failure domains, most important first.
    #[serde(default = "default_spread_keys")]
    #[schemars(length(max = 4))]
    pub topology_keys: Vec<String>,
}

impl Default for ShardSpread {
    fn default() -> Self {
        ShardSpread { mode: SpreadMode::default(), topology_keys: default_spread_keys() }
    }
}

fn default_spread_keys() -> Vec<String> {
    vec!["kubernetes.io/hostname".into(), "topology.kubernetes.io/zone".into()]
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
pub enum SpreadMode {
    #[default]
    Preferred,
    Required,
    None,
}

/// Redis's eviction policies that Shoal implements.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EvictionPolicy {
    #[default]
    Noeviction,
    AllkeysLru,
    AllkeysRandom,
    VolatileLru,
    VolatileRandom,
    VolatileTtl,
}

impl EvictionPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            EvictionPolicy::Noeviction => "noeviction",
            EvictionPolicy::AllkeysLru => "allkeys-lru",
            EvictionPolicy::AllkeysRandom => "allkeys-random",
            EvictionPolicy::VolatileLru => "volatile-lru",
            EvictionPolicy::VolatileRandom => "volatile-random",
            EvictionPolicy::VolatileTtl => "volatile-ttl",
        }
    }
}

/// Snapshot storage: an emptyDir (survives container restarts, not pod deletion) or a
/// PersistentVolumeClaim per node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.type == 'EmptyDir' || has(self.size)")
    .message("storage.size is required when storage.type is PersistentVolumeClaim"))]
pub struct Storage {
    /// EmptyDir or PersistentVolumeClaim.
    #[serde(default, rename = "type")]
    pub kind: StorageKind,
    /// Claim size (PersistentVolumeClaim), e.g. 10Gi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// Storage class of the claims; the cluster's default if unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
pub enum StorageKind {
    #[default]
    EmptyDir,
    PersistentVolumeClaim,
}

/// A key of a Secret in the CacheCluster's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    pub name: String,
    /// The key holding the password.
    #[serde(default = "default_password_key")]
    pub key: String,
}

/// Client TLS of the routers.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientTls {
    /// A Secret of type kubernetes.io/tls: `tls.crt`, `tls.key` and, to check client
    /// certificates, `ca.crt` (what a cert-manager Certificate writes).
    #[x_kube(validation = Rule::new("self != ''").message("secretName must not be empty"))]
    pub secret_name: String,
    /// Redis's tls-auth-clients: whether clients must present a certificate signed by `ca.crt`
    /// (yes), may (optional), or are not asked (no, when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self in ['no', 'optional', 'yes']").message("authClients is no, optional or yes"))]
    pub auth_clients: Option<String>,
    /// Keep the plaintext RESP port and HTTP API. false: clients must use TLS; the plaintext HTTP
    /// port then serves only /metrics, /healthz and /readyz (the probes').
    #[serde(default = "default_true")]
    pub plaintext: bool,
}

impl ClientTls {
    /// tls-auth-clients as the router takes it (`no` when unset). (No schema default: `no`
    /// would be read back as a boolean by the API server's YAML.)
    pub fn auth_clients(&self) -> &str {
        self.auth_clients.as_deref().unwrap_or("no")
    }
}

fn default_true() -> bool {
    true
}

/// A Secret key holding an ACL file.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AclSecretRef {
    pub name: String,
    /// The key holding the ACL file.
    #[serde(default = "default_acl_key")]
    pub key: String,
}

fn default_acl_key() -> String {
    "users.acl".into()
}

fn default_password_key() -> String {
    "password".into()
}

/// What the operator last saw and did.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CacheClusterStatus {
    /// Shards in the published topology (the scale subresource's status replicas).
    #[serde(default)]
    pub shards: i32,
    /// Shards whose primary's pod is ready.
    #[serde(default)]
    pub ready_shards: i32,
    /// Label selector of the node pods (for the scale subresource and HPAs).
    #[serde(default)]
    pub selector: String,
    /// Version of the published topology.
    #[serde(default)]
    pub topology_version: i64,
    /// Pending, Creating, Ready, Resharding or Degraded.
    #[serde(default)]
    pub phase: String,
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready, Resharding, Degraded.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Each shard's primary and replicas as the operator last probed them (with replicas only).
    /// Named so because `.status.shards` is the count the scale subresource reads. Always
    /// written, empty too: the status is a merge patch, which would keep a list it omits.
    #[serde(default)]
    pub shard_status: Vec<ShardStatus>,
    /// The node pod the operator evicted last to restart it on its StatefulSet's new template:
    /// the next restart waits until that pod is whole again. Kept here, not only in the
    /// operator's memory, so that a restarted operator or a new leader waits for it too. Written
    /// as null when there is none (the status is a merge patch).
    #[serde(default)]
    pub restarting: Option<PodRestart>,
}

/// A node pod evicted for a restart (`status.restarting`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodRestart {
    pub pod: String,
    /// When it was evicted (RFC 3339, the operator's clock; recorded just before the eviction is
    /// asked for).
    pub evicted_at: String,
}

impl PodRestart {
    /// How long ago it was evicted by this clock; an unreadable time counts as long ago (the
    /// wait for the pod then ends, and only the rule that every shard is whole remains).
    pub fn elapsed(&self) -> std::time::Duration {
        match self.evicted_at.parse::<k8s_openapi::jiff::Timestamp>() {
            Ok(at) => k8s_openapi::jiff::Timestamp::now()
                .duration_since(at)
                .try_into()
                .unwrap_or(std::time::Duration::ZERO),
            Err(_) => std::time::Duration::MAX,
        }
    }
}

/// One shard as the operator last saw it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardStatus {
    /// The shard's id in the topology.
    pub id: i64,
    /// The primary's address, as the topology names it.
    pub primary: String,
    /// The pod at that address, if one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_pod: Option<String>,
    /// Whether the primary answered and serves (not fenced, not handing over).
    pub primary_serving: bool,
    #[serde(default)]
    pub replicas: Vec<ReplicaStatus>,
}

/// One replica of a shard.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// Its full sync is done and it follows the shard's current primary: it could take over.
    pub synced: bool,
    /// Changes of the primary's stream it has not applied yet (unknown if either did not answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<i64>,
    /// Milliseconds since it last acked while behind, as its primary counts (0: caught up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_ms: Option<i64>,
}

/// A status condition, as in Kubernetes' `metav1.Condition`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    pub reason: String,
    pub message: String,
    /// RFC 3339 time of the last change of `status`.
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;

    use super::*;

    #[test]
    fn crd_has_scale_status_printer_columns_and_validation() {
        let crd = serde_json::to_value(CacheCluster::crd()).unwrap();
        let v = &crd["spec"]["versions"][0];
        assert_eq!(crd["spec"]["names"]["shortNames"][0], "cc");
        assert_eq!(v["subresources"]["scale"]["specReplicasPath"], ".spec.shards");
        assert_eq!(v["subresources"]["scale"]["statusReplicasPath"], ".status.shards");
        assert_eq!(v["subresources"]["scale"]["labelSelectorPath"], ".status.selector");
        assert!(v["subresources"]["status"].is_object());
        let columns: Vec<&str> = v["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(columns, ["Shards", "Replicas", "Ready", "Topology", "Phase", "Age"]);
        let spec = &v["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["properties"]["shards"]["minimum"].as_f64(), Some(1.0));
        let replicas = &spec["properties"]["replicasPerShard"];
        assert_eq!((replicas["minimum"].as_f64(), replicas["maximum"].as_f64()), (Some(0.0), Some(5.0)));
        assert_eq!(
            spec["properties"]["shardSpread"]["properties"]["mode"]["enum"],
            serde_json::json!(["Preferred", "Required", "None"])
        );
        assert_eq!(spec["required"], serde_json::json!(["shards"]));
        let text = crd.to_string();
        assert!(text.contains("x-kubernetes-validations"), "CEL rules are in the schema");
    }

    /// Whether the API server would take `value` for `spec.encoding.<field>`: checks the type and
    /// the bounds that the generated schema declares (all the encoding fields declare).
    fn encoding_field_accepts(field: &str, value: serde_json::Value) -> bool {
        let crd = serde_json::to_value(CacheCluster::crd()).unwrap();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["encoding"]["properties"][field];
        assert_eq!(schema["type"], "integer", "{field}: {schema}");
        let Some(v) = value.as_i64().map(|v| v as f64) else { return false };
        schema["minimum"].as_f64().is_none_or(|min| v >= min)
            && schema["maximum"].as_f64().is_none_or(|max| v <= max)
    }

    #[test]
    fn encoding_thresholds_are_optional_and_validated_with_the_nodes_ranges() {
        let spec: CacheClusterSpec = serde_json::from_value(serde_json::json!({"shards": 3})).unwrap();
        assert_eq!(spec.encoding, None);
        let spec: CacheClusterSpec = serde_json::from_value(serde_json::json!({
            "shards": 3, "encoding": {"hashMaxListpackEntries": 1024, "listMaxListpackSize": -3}
        }))
        .unwrap();
        let e = spec.encoding.clone().unwrap();
        assert_eq!((e.hash_max_listpack_entries, e.list_max_listpack_size), (Some(1024), Some(-3)));
        assert_eq!(e.set_max_intset_entries, None);
        // Unset fields stay out of the serialized spec (server-side apply owns only what is set).
        let back = serde_json::to_value(&spec).unwrap();
        assert_eq!(
            back["encoding"],
            serde_json::json!({"hashMaxListpackEntries": 1024, "listMaxListpackSize": -3})
        );

        let counts = [
            "hashMaxListpackEntries",
            "hashMaxListpackValue",
            "setMaxIntsetEntries",
            "zsetMaxListpackEntries",
            "zsetMaxListpackValue",
        ];
        for field in counts {
            assert!(encoding_field_accepts(field, serde_json::json!(0)), "{field}");
            assert!(encoding_field_accepts(field, serde_json::json!(i64::MAX)), "{field}");
            assert!(!encoding_field_accepts(field, serde_json::json!(-1)), "{field}: negative refused");
            assert!(!encoding_field_accepts(field, serde_json::json!("64")), "{field}: not a number");
        }
        // Any 32-bit integer, as Redis and the nodes take it.
        for ok in [-5, -1, 0, 128, i32::MIN as i64, i32::MAX as i64] {
            assert!(encoding_field_accepts("listMaxListpackSize", serde_json::json!(ok)), "{ok}");
        }
        for bad in [i32::MIN as i64 - 1, i32::MAX as i64 + 1] {
            assert!(!encoding_field_accepts("listMaxListpackSize", serde_json::json!(bad)), "{bad}");
            let spec = serde_json::json!({"shards": 1, "encoding": {"listMaxListpackSize": bad}});
            assert!(serde_json::from_value::<CacheClusterSpec>(spec).is_err());
        }
    }

    #[test]
    fn defaults_fill_a_minimal_spec() {
        let spec: CacheClusterSpec = serde_json::from_value(serde_json::json!({"shards": 3})).unwrap();
        assert_eq!(spec.routers, 2);
        assert_eq!(spec.image, DEFAULT_IMAGE);
        assert_eq!(spec.maxmemory, "0");
        assert_eq!(spec.maxmemory_policy, EvictionPolicy::Noeviction);
        assert_eq!(spec.storage.kind, StorageKind::EmptyDir);
        assert_eq!(spec.replicas_per_shard, 0, "no replicas unless asked: what a cluster was before");
        assert_eq!(spec.shard_spread.mode, SpreadMode::Preferred);
        assert_eq!(
            spec.shard_spread.topology_keys,
            ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
        );
        let policy: EvictionPolicy = serde_json::from_value(serde_json::json!("allkeys-lru")).unwrap();
        assert_eq!(policy.as_str(), "allkeys-lru");
    }

    #[test]
    fn a_status_without_a_restart_says_null_so_that_the_merge_patch_clears_it() {
        let v = serde_json::to_value(CacheClusterStatus::default()).unwrap();
        assert!(v.as_object().unwrap().contains_key("restarting") && v["restarting"].is_null(), "{v}");
    }

    #[test]
    fn a_restart_s_age_comes_from_its_recorded_time() {
        let ago = |secs: i64| {
            let at = k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(secs);
            PodRestart { pod: "p".into(), evicted_at: at.to_string() }
        };
        let age = ago(90).elapsed();
        assert!(
            age >= std::time::Duration::from_secs(90) && age < std::time::Duration::from_secs(120),
            "{age:?}"
        );
        assert_eq!(ago(-60).elapsed(), std::time::Duration::ZERO, "a time ahead of this clock");
        let unreadable = PodRestart { pod: "p".into(), evicted_at: "yesterday".into() };
        assert_eq!(unreadable.elapsed(), std::time::Duration::MAX);
    }
}
