//! Labels, selectors and the metadata every owned object carries: who it belongs to (a
//! controller owner reference, so deleting the CacheCluster garbage-collects it) and which of
//! its components it is part of.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use crate::crd::CacheCluster;

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

pub(super) fn selector(cc: &CacheCluster, c: Component) -> LabelSelector {
    LabelSelector { match_labels: Some(selector_labels(cc, c)), ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::tests::cluster;
    use crate::resources::{Placement, node_statefulset, router_service};

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
}
