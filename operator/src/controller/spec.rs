//! The spec, checked: what one reconcile aims for, and the key this operator's memory of the
//! cluster is kept under.

use kube::ResourceExt;

use super::api::Error;
use crate::context::Key;
use crate::crd::{CacheCluster, MAX_REPLICAS_PER_SHARD};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Wanted {
    pub ns: String,
    pub name: String,
    pub key: Key,
    /// `spec.shards` (at least 1).
    pub shards: u32,
    /// `spec.replicasPerShard`.
    pub replicas: u32,
}

impl Wanted {
    /// What `cc` asks for, or why it cannot be done. The CRD's schema has the same bounds; they
    /// are checked again here so that no reconcile acts on a spec outside them.
    pub fn of(cc: &CacheCluster) -> Result<Wanted, Error> {
        let ns = cc.namespace().ok_or_else(|| Error::Invalid("a CacheCluster is namespaced".into()))?;
        let name = cc.name_any();
        if cc.spec.shards < 1 {
            return Err(Error::Invalid(format!("spec.shards is {}; it must be at least 1", cc.spec.shards)));
        }
        if !(0..=MAX_REPLICAS_PER_SHARD).contains(&cc.spec.replicas_per_shard) {
            return Err(Error::Invalid(format!(
                "spec.replicasPerShard is {}; it must be 0 to {MAX_REPLICAS_PER_SHARD}",
                cc.spec.replicas_per_shard
            )));
        }
        Ok(Wanted {
            key: (ns.clone(), name.clone()),
            ns,
            name,
            shards: cc.spec.shards as u32,
            replicas: cc.spec.replicas_per_shard as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::resources::tests::cluster;

    #[test]
    fn a_spec_out_of_bounds_is_refused_with_the_field_named() {
        let no_shards = Wanted::of(&cluster(json!({"shards": 0}))).unwrap_err();
        assert_eq!(no_shards.to_string(), "spec.shards is 0; it must be at least 1");
        let too_many = Wanted::of(&cluster(json!({"shards": 1, "replicasPerShard": 9}))).unwrap_err();
        assert!(too_many.to_string().starts_with("spec.replicasPerShard is 9"), "{too_many}");
        let mut unplaced = cluster(json!({"shards": 1}));
        unplaced.metadata.namespace = None;
        assert!(Wanted::of(&unplaced).is_err(), "a CacheCluster is namespaced");
    }

    #[test]
    fn a_valid_spec_is_kept_under_its_namespace_and_name() {
        let w = Wanted::of(&cluster(json!({"shards": 3, "replicasPerShard": 2}))).unwrap();
        assert_eq!((w.key, w.shards, w.replicas), (("shop".to_string(), "demo".to_string()), 3, 2));
    }
}
