//! The `CacheCluster` custom resource (`shoal.dev/v1alpha1`, short name `cc`).
//!
//! `spec.shards` is the number of storage nodes; the scale subresource maps it to `kubectl scale`
//! and HPAs (`.spec.shards`, `.status.shards`, `.status.selector`). The schema is generated from
//! these types (`crdgen` writes it into the chart), with validation the API server enforces.

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// The image the chart and the operator default to.
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
    /// Most bytes per second a node pulls while slots move to it (Redis syntax, e.g. 8mb).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^[0-9]+(b|k|kb|m|mb|g|gb|K|KB|M|MB|G|GB)?$')"))]
    pub migrate_rate: Option<String>,
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
    /// Node pods that are ready.
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
        assert_eq!(columns, ["Shards", "Ready", "Topology", "Phase", "Age"]);
        let spec = &v["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["properties"]["shards"]["minimum"].as_f64(), Some(1.0));
        assert_eq!(spec["required"], serde_json::json!(["shards"]));
        let text = crd.to_string();
        assert!(text.contains("x-kubernetes-validations"), "CEL rules are in the schema");
    }

    #[test]
    fn defaults_fill_a_minimal_spec() {
        let spec: CacheClusterSpec = serde_json::from_value(serde_json::json!({"shards": 3})).unwrap();
        assert_eq!(spec.routers, 2);
        assert_eq!(spec.image, DEFAULT_IMAGE);
        assert_eq!(spec.maxmemory, "0");
        assert_eq!(spec.maxmemory_policy, EvictionPolicy::Noeviction);
        assert_eq!(spec.storage.kind, StorageKind::EmptyDir);
        let policy: EvictionPolicy = serde_json::from_value(serde_json::json!("allkeys-lru")).unwrap();
        assert_eq!(policy.as_str(), "allkeys-lru");
    }
}
