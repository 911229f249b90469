//! The topology of a CacheCluster in its ConfigMap (`<name>-topology`, key `topology.json`): the
//! coordinator's store in Kubernetes. Nodes and routers read it as a mounted file.
//!
//! Publishing is compare-and-swap on the ConfigMap's `resourceVersion`, and refuses a version
//! that is not newer than the stored one, so two operators that both think they lead (a lease
//! handover) cannot interleave two moves.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use shoal_coordinator::{StoreError, TopologyStore};
use shoal_wire::Topology;

use crate::crd::CacheCluster;
use crate::resources::{self, TOPOLOGY_KEY};

#[derive(Clone)]
pub struct ConfigMapStore {
    api: Api<ConfigMap>,
    name: String,
    /// Metadata for creating the ConfigMap (labels, owner reference).
    template: ConfigMap,
}

impl std::fmt::Debug for ConfigMapStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigMapStore").field("name", &self.name).finish_non_exhaustive()
    }
}

impl ConfigMapStore {
    pub fn new(api: Api<ConfigMap>, cc: &CacheCluster) -> ConfigMapStore {
        let name = resources::topology_name(cc);
        let template = ConfigMap { metadata: resources::meta(cc, name.clone(), None), ..Default::default() };
        ConfigMapStore { api, name, template }
    }

    fn other(e: impl std::fmt::Display) -> StoreError {
        StoreError::Other(e.to_string())
    }
}

/// The topology in a ConfigMap, if it holds one.
pub fn parse(cm: &ConfigMap) -> Result<Option<Topology>, StoreError> {
    match cm.data.as_ref().and_then(|d| d.get(TOPOLOGY_KEY)) {
        None => Ok(None),
        Some(text) => Topology::from_json(text)
            .map(Some)
            .map_err(|e| StoreError::Other(format!("the {TOPOLOGY_KEY} in the ConfigMap is invalid: {e}"))),
    }
}

impl TopologyStore for ConfigMapStore {
    async fn load(&self) -> Result<Option<Topology>, StoreError> {
        match self.api.get_opt(&self.name).await.map_err(Self::other)? {
            None => Ok(None),
            Some(cm) => parse(&cm),
        }
    }

    async fn publish(&self, t: &Topology) -> Result<(), StoreError> {
        let current = self.api.get_opt(&self.name).await.map_err(Self::other)?;
        let json = t.to_json();
        match current {
            None => {
                let mut cm = self.template.clone();
                cm.data = Some([(TOPOLOGY_KEY.to_string(), json)].into());
                self.api.create(&PostParams::default(), &cm).await.map_err(Self::other)?;
            }
            Some(mut cm) => {
                if let Some(stored) = parse(&cm)?
                    && stored.version >= t.version
                {
                    return Err(StoreError::Stale { current: stored.version, new: t.version });
                }
                // `replace` sends the resourceVersion we read: a concurrent writer makes it fail.
                cm.data.get_or_insert_with(Default::default).insert(TOPOLOGY_KEY.to_string(), json);
                self.api.replace(&self.name, &PostParams::default(), &cm).await.map_err(Self::other)?;
            }
        }
        Ok(())
    }
}
