//! The PodDisruptionBudgets: routers and (without replicas) nodes never two down at once; with
//! replicas one budget per shard, open only while the shard is redundant.

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::labels::{Component, POD_INDEX_LABEL, SHARD_LABEL, meta, selector, selector_labels};
use super::names::{node_name, router_name, shard_pdb_name};
use crate::crd::CacheCluster;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::MEMBER_LABEL;
    use crate::resources::tests::cluster;

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
