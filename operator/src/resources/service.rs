//! The Services: the nodes' headless one (a stable DNS name per node pod, every member) and the
//! one clients connect to (every listener a router runs).

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::deployment::router_listeners;
use super::labels::{Component, meta, selector_labels};
use super::names::{NODE_GRPC_PORT, NODE_METRICS_PORT, node_name};
use crate::crd::CacheCluster;

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

/// The Service clients use: RESP on 6379 and HTTP on 8080; with TLS, RESP over TLS on 6380 and
/// HTTPS on 8443 (and without plaintext, 8080 for metrics only).
pub fn router_service(cc: &CacheCluster) -> Service {
    let ports = router_listeners(cc).ports;
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
