//! The cluster secret (`shoal_wire::auth`) every node requires on gRPC calls and every router
//! sends: how the operator derives it, the Secret that holds it for the pods, and the variable
//! that hands it to their containers.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, Secret, SecretKeySelector};
use kube::ResourceExt;
use shoal_wire::auth::ClusterSecret;

use super::labels::meta;
use crate::crd::CacheCluster;

/// The key of the secret's value in that Secret.
pub const CLUSTER_SECRET_KEY: &str = "secret";

/// The cluster secret of `cc`: HMAC-SHA256 of the cluster's namespace, name and uid under the
/// operator's key, in hex. Derived rather than generated and stored, so the operator knows every
/// cluster's secret without reading Secrets, and a new operator replica (or a restarted one)
/// agrees with the old. The same name recreated (a new uid) gets another.
pub fn derive_cluster_secret(key: &[u8], cc: &CacheCluster) -> ClusterSecret {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    let what = format!(
        "shoal cluster secret v1\0{}\0{}\0{}",
        cc.namespace().unwrap_or_default(),
        cc.name_any(),
        cc.uid().unwrap_or_default()
    );
    let tag = ring::hmac::sign(&key, what.as_bytes());
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    ClusterSecret::new(&hex).expect("64 hex digits make a valid secret")
}

/// The Secret holding the cluster secret that every node requires and every router sends (the
/// operator derives it, [`derive_cluster_secret`]). Created once and never changed by the
/// operator; deleted, it is made again, with the same value, at the next reconcile.
pub fn cluster_secret_name(cc: &CacheCluster) -> String {
    format!("{}-cluster-secret", cc.name_any())
}

/// The Secret object, holding `value`.
pub fn cluster_secret(cc: &CacheCluster, value: &str) -> Secret {
    Secret {
        metadata: meta(cc, cluster_secret_name(cc), None),
        string_data: Some(BTreeMap::from([(CLUSTER_SECRET_KEY.to_string(), value.to_string())])),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

/// `SHOAL_CLUSTER_SECRET` from the cluster's Secret, for node and router containers.
pub(super) fn cluster_secret_env(cc: &CacheCluster) -> EnvVar {
    EnvVar {
        name: "SHOAL_CLUSTER_SECRET".into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: cluster_secret_name(cc),
                key: CLUSTER_SECRET_KEY.into(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::tests::cluster;

    #[test]
    fn cluster_secrets_are_derived_per_cluster_and_per_key() {
        let cc = cluster(serde_json::json!({"shards": 1}));
        let a = derive_cluster_secret(b"key one", &cc);
        assert_eq!(a, derive_cluster_secret(b"key one", &cc), "the same for every operator replica");
        assert_eq!(a.expose().len(), 64);
        assert!(a.expose().bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, derive_cluster_secret(b"key two", &cc), "another key");
        let mut other = cc.clone();
        other.metadata.uid = Some("2222-3333".into());
        assert_ne!(a, derive_cluster_secret(b"key one", &other), "the same name recreated");
        other = cc.clone();
        other.metadata.name = Some("other".into());
        assert_ne!(a, derive_cluster_secret(b"key one", &other), "another cluster");
        let s = cluster_secret(&cc, a.expose());
        assert_eq!(s.metadata.name.as_deref(), Some("demo-cluster-secret"));
        assert_eq!(s.string_data.unwrap()[CLUSTER_SECRET_KEY], a.expose());
    }
}
