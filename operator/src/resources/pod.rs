//! What every pod the operator runs (nodes and routers) is made of: the restricted security
//! profile, spread over hosts and zones, container ports and probes, and the topology ConfigMap
//! mounted read-only.

use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, ContainerPort, HTTPGetAction, PodSecurityContext, Probe,
    SeccompProfile, SecurityContext, TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::labels::{Component, selector};
use super::names::topology_name;
use crate::crd::CacheCluster;

/// The key of the topology document in its ConfigMap, and where the ConfigMap is mounted.
pub const TOPOLOGY_KEY: &str = "topology.json";
pub const TOPOLOGY_DIR: &str = "/etc/shoal/topology";
/// The image's non-root user (distroless "nonroot").
pub const RUN_AS: i64 = 65532;

/// Pod-level settings of the restricted Pod Security profile.
pub(super) fn pod_security() -> PodSecurityContext {
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
pub(super) fn spread(cc: &CacheCluster, c: Component) -> Vec<TopologySpreadConstraint> {
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

pub(super) fn port(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: port,
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

pub(super) fn http_probe(path: &str, port: i32, period: i32) -> Probe {
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

pub(super) fn topology_volume(cc: &CacheCluster) -> Volume {
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

pub(super) fn topology_mount() -> VolumeMount {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::tests::{cluster, pod_spec};
    use crate::resources::{Placement, node_statefulset, router_deployment, service_account};

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
}
