//! Pure builders for everything a `CacheCluster` owns, one file per kind of object. Each takes
//! the resource and returns the object the operator applies (server-side apply, owned through a
//! controller reference so that deleting the CacheCluster garbage-collects it all).
//!
//! | Object | Name | Why | Built in |
//! |---|---|---|---|
//! | StatefulSet | `<name>-node` | member 0 of every shard: ordinal = shard id | [`statefulset`] |
//! | StatefulSet | `<name>-node-r<m>` | member m (1..=replicasPerShard) of every shard, same ordinals | [`statefulset`] |
//! | Service (headless) | `<name>-node` | stable DNS per node pod (`<pod>.<name>-node`), all members | [`service`] |
//! | Deployment | `<name>-router` | stateless routers | [`deployment`] |
//! | Service | `<name>` | what clients connect to: RESP 6379, HTTP 8080 | [`service`] |
//! | ConfigMap | `<name>-topology` | the published topology, mounted into nodes and routers | [`crate::registry`] |
//! | PodDisruptionBudget | `<name>-node` (no replicas) | never two shards down at once | [`pdb`](mod@pdb) |
//! | PodDisruptionBudget | `<name>-shard-<i>` (replicas) | one pod of shard i at a time, none while it is not redundant | [`pdb`](mod@pdb) |
//! | PodDisruptionBudget | `<name>-router` | never two routers down at once | [`pdb`](mod@pdb) |
//! | NetworkPolicy | `<name>-node` | node gRPC only from this cluster's routers (sidecars too), nodes and the operator | [`network_policy`] |
//! | NetworkPolicy | `<name>-router` | router client ports only from `spec.clientPeers` (anyone if unset); nothing else | [`network_policy`] |
//! | ServiceAccount | `<name>-node`, `<name>-router` | identities without API access (no token) | [`service_account`](mod@service_account) |
//! | Secret | `<name>-cluster-secret` | the secret every node requires (created, never read) | [`secret`] |
//!
//! What the builders share: [`names`] (object and pod names, ports, node addresses), [`labels`](mod@labels)
//! (labels, selectors, owner and metadata) and [`pod`] (security, spread, probes, the topology
//! mount). This file only maps: it re-exports every builder, so callers write
//! `resources::node_statefulset`; the files import from each other, never from here (a parent
//! that re-exports its children and children that use their parent would import in a circle).
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

pub mod deployment;
pub mod labels;
pub mod names;
pub mod network_policy;
pub mod pdb;
pub mod pod;
pub mod secret;
pub mod service;
pub mod service_account;
pub mod statefulset;

pub use deployment::{ROUTER_ACL_DIR, ROUTER_ACL_FILE, ROUTER_TLS_DIR, router_deployment};
pub use labels::{
    Component, MEMBER_LABEL, OPERATOR_NAME_LABEL, POD_INDEX_LABEL, SHARD_LABEL, SIDECAR_LABEL, labels, meta,
    node_selector_string, owner, selector_labels,
};
pub use names::{
    AddressMode, NODE_GRPC_PORT, NODE_METRICS_PORT, ROUTER_HTTP_PORT, ROUTER_HTTPS_PORT, ROUTER_RESP_PORT,
    ROUTER_TLS_PORT, dns_address, member_name, node_name, pod_name, pod_place, router_name, shard_pdb_name,
    statefulset_member, topology_name,
};
pub use network_policy::{node_network_policy, router_network_policy};
pub use pdb::{pdb, shard_pdb};
pub use pod::{RUN_AS, TOPOLOGY_DIR, TOPOLOGY_KEY, container_security, topology_file};
pub use secret::{CLUSTER_SECRET_KEY, cluster_secret, cluster_secret_name, derive_cluster_secret};
pub use service::{node_service, router_service};
pub use service_account::service_account;
pub use statefulset::{Placement, node_args, node_statefulset};

/// The test cluster every builder's tests start from, and a small accessor they share.
#[cfg(test)]
pub(crate) mod tests {
    use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec};

    use crate::crd::{CacheCluster, CacheClusterSpec};

    pub fn cluster(spec: serde_json::Value) -> CacheCluster {
        let mut cc = CacheCluster::new("demo", serde_json::from_value::<CacheClusterSpec>(spec).unwrap());
        cc.metadata.namespace = Some("shop".into());
        cc.metadata.uid = Some("0000-1111".into());
        cc
    }

    pub fn pod_spec(t: &PodTemplateSpec) -> &PodSpec {
        t.spec.as_ref().unwrap()
    }
}
