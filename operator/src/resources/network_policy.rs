//! The NetworkPolicies: who may reach a node's gRPC port (this cluster's routers, sidecars and
//! nodes, and the operator) and a router's client ports (`spec.clientPeers`, anyone if unset).

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::deployment::router_listeners;
use super::labels::{Component, OPERATOR_NAME_LABEL, SIDECAR_LABEL, meta, selector, selector_labels};
use super::names::{NODE_GRPC_PORT, NODE_METRICS_PORT, ROUTER_HTTP_PORT, node_name, router_name};
use crate::crd::CacheCluster;

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
    let (client, ops): (Vec<_>, Vec<_>) = router_listeners(cc)
        .ports
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

fn tcp(port: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(IntOrString::Int(port)),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::pdb;
    use crate::resources::tests::cluster;

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
}
