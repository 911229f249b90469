//! The topology of a CacheCluster in its ConfigMap (`<name>-topology`, key `topology.json`): the
//! coordinator's store in Kubernetes. Nodes and routers read it as a mounted file.
//!
//! Publishing is compare-and-swap on the ConfigMap's `resourceVersion`, and refuses a version
//! that is not newer than the stored one, so two operators that both think they lead (a lease
//! handover) cannot interleave two moves.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use shoal_coordinator::{Registry, RegistryError};
use shoal_wire::Topology;

use crate::crd::CacheCluster;
use crate::resources::{self, TOPOLOGY_KEY};

#[derive(Clone)]
pub struct ConfigMapRegistry {
    api: Api<ConfigMap>,
    name: String,
    /// Metadata for creating the ConfigMap (labels, owner reference).
    template: ConfigMap,
}

impl std::fmt::Debug for ConfigMapRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigMapRegistry").field("name", &self.name).finish_non_exhaustive()
    }
}

impl ConfigMapRegistry {
    pub fn new(api: Api<ConfigMap>, cc: &CacheCluster) -> ConfigMapRegistry {
        let name = resources::topology_name(cc);
        let template = ConfigMap { metadata: resources::meta(cc, name.clone(), None), ..Default::default() };
        ConfigMapRegistry { api, name, template }
    }

    fn other(e: impl std::fmt::Display) -> RegistryError {
        RegistryError::Other(e.to_string())
    }
}

/// The topology in a ConfigMap, if it holds one.
pub fn parse(cm: &ConfigMap) -> Result<Option<Topology>, RegistryError> {
    match cm.data.as_ref().and_then(|d| d.get(TOPOLOGY_KEY)) {
        None => Ok(None),
        Some(text) => Topology::from_json(text).map(Some).map_err(|e| {
            RegistryError::Other(format!("the {TOPOLOGY_KEY} in the ConfigMap is invalid: {e}"))
        }),
    }
}

impl Registry for ConfigMapRegistry {
    async fn load(&self) -> Result<Option<Topology>, RegistryError> {
        match self.api.get_opt(&self.name).await.map_err(Self::other)? {
            None => Ok(None),
            Some(cm) => parse(&cm),
        }
    }

    async fn publish(&self, t: &Topology) -> Result<(), RegistryError> {
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
                    return Err(RegistryError::Stale { current: stored.version, new: t.version });
                }
                // `replace` sends the resourceVersion we read: a concurrent writer makes it fail.
                cm.data.get_or_insert_with(Default::default).insert(TOPOLOGY_KEY.to_string(), json);
                self.api.replace(&self.name, &PostParams::default(), &cm).await.map_err(Self::other)?;
            }
        }
        Ok(())
    }
}

/// API-call scenarios: the store against a scripted fake API server ([`crate::fake_api`]) that
/// checks each request in order, so the compare-and-swap is tested call by call.
#[cfg(test)]
mod tests {
    use http::Method;
    use serde_json::{Value, json};

    use super::*;
    use crate::fake_api::{Fake, call, status};
    use crate::resources::tests::cluster;

    const CM: &str = "/api/v1/namespaces/shop/configmaps/demo-topology";

    fn configmap(resource_version: &str, topology: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "demo-topology", "namespace": "shop", "resourceVersion": resource_version},
               "data": {"topology.json": topology}})
    }

    fn topology(version: u64) -> Topology {
        let mut t = Topology::even(&["10.0.0.1:7001".into(), "10.0.0.2:7001".into()]);
        t.version = version;
        t
    }

    fn fake_store(calls: Vec<crate::fake_api::Call>) -> (ConfigMapRegistry, Fake) {
        let (client, fake) = Fake::start(calls);
        (ConfigMapRegistry::new(Api::namespaced(client, "shop"), &cluster(json!({"shards": 2}))), fake)
    }

    #[tokio::test]
    async fn the_first_publish_creates_a_configmap_owned_by_the_cluster() {
        let create = call(Method::POST, "/api/v1/namespaces/shop/configmaps", 201, configmap("1", "{}"))
            .checking(|body| {
                assert_eq!(body["metadata"]["name"], "demo-topology");
                let owner = &body["metadata"]["ownerReferences"][0];
                assert_eq!(
                    (owner["kind"].as_str(), owner["controller"].as_bool()),
                    (Some("CacheCluster"), Some(true))
                );
                let t = Topology::from_json(body["data"]["topology.json"].as_str().unwrap()).unwrap();
                assert_eq!((t.version, t.nodes.len()), (1, 2));
            });
        let (store, fake) = fake_store(vec![call(Method::GET, CM, 404, status(404, "NotFound")), create]);
        store.publish(&topology(1)).await.unwrap();
        fake.done();
    }

    #[tokio::test]
    async fn a_version_that_is_not_newer_is_refused_without_a_write() {
        let stored = configmap("7", &topology(3).to_json());
        let (store, fake) = fake_store(vec![call(Method::GET, CM, 200, stored.clone())]);
        let err = store.publish(&topology(3)).await.unwrap_err();
        assert!(matches!(err, RegistryError::Stale { current: 3, new: 3 }), "{err}");
        fake.done();

        let (store, fake) = fake_store(vec![call(Method::GET, CM, 200, stored)]);
        assert!(matches!(
            store.publish(&topology(2)).await,
            Err(RegistryError::Stale { current: 3, new: 2 })
        ));
        fake.done();
    }

    #[tokio::test]
    async fn a_replace_carries_the_resource_version_it_read_and_a_conflict_fails_it() {
        let replace = call(Method::PUT, CM, 409, status(409, "Conflict")).checking(|body| {
            assert_eq!(body["metadata"]["resourceVersion"], "42");
            let t = Topology::from_json(body["data"]["topology.json"].as_str().unwrap()).unwrap();
            assert_eq!(t.version, 4);
        });
        let (store, fake) =
            fake_store(vec![call(Method::GET, CM, 200, configmap("42", &topology(3).to_json())), replace]);
        let err = store.publish(&topology(4)).await.unwrap_err();
        assert!(matches!(&err, RegistryError::Other(m) if m.contains("Conflict")), "{err}");
        fake.done();

        // Without a conflict the same replace succeeds.
        let ok = call(Method::PUT, CM, 200, configmap("43", &topology(4).to_json()));
        let (store, fake) =
            fake_store(vec![call(Method::GET, CM, 200, configmap("42", &topology(3).to_json())), ok]);
        store.publish(&topology(4)).await.unwrap();
        fake.done();
    }

    #[tokio::test]
    async fn load_reads_absent_valid_and_invalid_documents() {
        let (store, fake) = fake_store(vec![
            call(Method::GET, CM, 404, status(404, "NotFound")),
            call(Method::GET, CM, 200, configmap("1", &topology(5).to_json())),
            call(Method::GET, CM, 200, configmap("2", "{not json")),
            call(Method::GET, CM, 403, status(403, "Forbidden")),
        ]);
        assert_eq!(store.load().await.unwrap(), None);
        assert_eq!(store.load().await.unwrap().map(|t| t.version), Some(5));
        let invalid = store.load().await.unwrap_err();
        assert!(invalid.to_string().contains("topology.json in the ConfigMap is invalid"), "{invalid}");
        let forbidden = store.load().await.unwrap_err();
        assert!(forbidden.to_string().contains("Forbidden"), "{forbidden}");
        fake.done();
    }
}
