//! The reconciler's few verbs on the Kubernetes API (server-side apply, delete, an Event) and
//! the error a reconcile fails with.

use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::context::Context;
use crate::crd::CacheCluster;

/// The field manager of every server-side apply: the operator owns the fields it sets.
const FIELD_MANAGER: &str = "shoal-operator";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("topology store: {0}")]
    Store(#[from] shoal_coordinator::RegistryError),
    #[error("{0}")]
    Invalid(String),
}

pub(super) async fn apply<K>(client: &Client, ns: &str, obj: &K) -> Result<K, Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Serialize
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let name = obj.meta().name.clone().ok_or_else(|| Error::Invalid("object without a name".into()))?;
    Ok(api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(obj)).await?)
}

/// Deletes `name`; gone already is fine.
pub(super) async fn delete<K>(client: &Client, ns: &str, name: &str) -> Result<(), Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Records an Event on `cc` (and logs it). An Event that cannot be recorded fails nothing.
pub(super) async fn event(ctx: &Context, cc: &CacheCluster, type_: EventType, reason: &str, note: String) {
    tracing::info!(cluster = %cc.name_any(), reason, %note, "event");
    let ev = Event { type_, reason: reason.into(), note: Some(note), action: reason.into(), secondary: None };
    if let Err(e) = ctx.recorder.publish(&ev, &cc.object_ref(&())).await {
        tracing::warn!(error = %e, "could not record an event");
    }
}

/// "Now" as the API writes times (RFC 3339).
pub(super) fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}
