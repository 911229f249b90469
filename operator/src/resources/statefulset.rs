//! The node StatefulSets: one per member index, each holding that member of every shard
//! (ordinal = shard id); see the layout in the [module docs](super).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    Affinity, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, GRPCAction, ObjectFieldSelector,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PodAffinityTerm, PodAntiAffinity, PodSpec,
    PodTemplateSpec, Probe, Volume, VolumeMount, VolumeResourceRequirements, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::labels::{Component, MEMBER_LABEL, POD_INDEX_LABEL, labels, meta, selector, selector_labels};
use super::names::{AddressMode, NODE_GRPC_PORT, NODE_METRICS_PORT, dns_address, member_name, node_name};
use super::pod::{
    container_security, http_probe, pod_security, port, spread, topology_file, topology_mount,
    topology_volume,
};
use super::secret::cluster_secret_env;
use crate::crd::{CacheCluster, SpreadMode, StorageKind};

/// How node pods find their place in the topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// By ordinal (`SHOAL_NODE_ID` = pod index): every shard is one node, the primary. The pod
    /// template of clusters without replicas, unchanged since before replicas existed.
    Ordinal,
    /// By address (`--advertise`): primary or replica of a shard, whichever the topology says.
    Advertised(AddressMode),
}

/// The StatefulSet of member `member` of every shard (see the module docs), with `replicas` pods.
/// Members beyond 0 exist only with replicas, whose pods are placed by address.
pub fn node_statefulset(cc: &CacheCluster, member: u32, replicas: i32, placement: Placement) -> StatefulSet {
    let advertised = matches!(placement, Placement::Advertised(_));
    let (pod_labels, sts_selector) = member_labels(cc, member, advertised);
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
                spec: Some(node_pod(cc, placement)),
            },
            volume_claim_templates: data_claims(cc),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The labels of member `member`'s pods, and its StatefulSet's selector. Member 0 keeps the
/// selector it always had (selectors are immutable); it also matches the other members' pods,
/// which the StatefulSet controller leaves alone (it only claims pods named after its own
/// StatefulSet). The others select their member label.
fn member_labels(
    cc: &CacheCluster,
    member: u32,
    advertised: bool,
) -> (BTreeMap<String, String>, LabelSelector) {
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
    (pod_labels, sts_selector)
}

/// A node pod: the node container, the topology and (without a claim) an emptyDir for data.
fn node_pod(cc: &CacheCluster, placement: Placement) -> PodSpec {
    let advertised = matches!(placement, Placement::Advertised(_));
    let mut volumes = vec![topology_volume(cc)];
    if cc.spec.storage.kind != StorageKind::PersistentVolumeClaim {
        volumes.push(Volume {
            name: "data".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        });
    }
    PodSpec {
        service_account_name: Some(node_name(cc)),
        automount_service_account_token: Some(false),
        security_context: Some(pod_security()),
        // Time for a primary's hand-over to a replica (at most 10 s) and the final snapshot of
        // every acknowledged write.
        termination_grace_period_seconds: Some(60),
        topology_spread_constraints: Some(spread(cc, Component::Node)),
        affinity: if advertised { shard_affinity(cc) } else { None },
        containers: vec![node_container(cc, placement)],
        volumes: Some(volumes),
        ..Default::default()
    }
}

fn node_container(cc: &CacheCluster, placement: Placement) -> Container {
    let s = &cc.spec;
    Container {
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
    }
}

/// With `storage.type: PersistentVolumeClaim`, the claim each node pod's data lives on.
fn data_claims(cc: &CacheCluster) -> Option<Vec<PersistentVolumeClaim>> {
    let s = &cc.spec;
    (s.storage.kind == StorageKind::PersistentVolumeClaim).then(|| {
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
    })
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
    if !s.colocate.is_empty() {
        args.extend(["--colocate".to_string(), s.colocate.join(",")]);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::Storage;
    use crate::resources::tests::{cluster, pod_spec};

    #[test]
    fn nodes_get_their_settings_ids_and_storage() {
        let mut cc = cluster(serde_json::json!({
            "shards": 3, "maxmemory": "2gb", "maxmemoryPolicy": "allkeys-lru", "migrateRate": "32mb",
            "storage": {"type": "PersistentVolumeClaim", "size": "5Gi", "storageClassName": "fast"},
            "colocate": ["rq:*", "bull:*"]
        }));
        let sts = node_statefulset(&cc, 0, 4, Placement::Ordinal);
        let spec = sts.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(4));
        let c = &pod_spec(&spec.template).containers[0];
        let args = c.args.clone().unwrap().join(" ");
        assert!(args.contains("--maxmemory 2gb --maxmemory-policy allkeys-lru"), "{args}");
        assert!(args.contains("--colocate rq:*,bull:*"), "the nodes' colocation rules: {args}");
        let router = crate::resources::deployment::router_listeners(&cc).args.join(" ");
        assert!(router.contains("--colocate rq:*,bull:*"), "the routers' are the same: {router}");
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
}
