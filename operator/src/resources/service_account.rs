//! The ServiceAccounts of nodes and routers: identities without API access. Nodes and routers
//! read the topology from the mounted ConfigMap and learn newer versions from each other, so
//! they get no Role and no token.

use k8s_openapi::api::core::v1::ServiceAccount;

use super::labels::{Component, meta};
use super::names::{node_name, router_name};
use crate::crd::CacheCluster;

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
