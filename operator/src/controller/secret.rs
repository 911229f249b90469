//! The cluster's Secret, made sure of before anything else: every node requires the secret it
//! holds on gRPC calls, and every call the operator makes to a node carries it.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::runtime::events::EventType;
use shoal_wire::auth::ClusterSecret;

use super::api::{Error, event};
use crate::context::Context;
use crate::crd::CacheCluster;
use crate::resources;

/// How long a cluster's Secret, once made sure of, is taken to exist: a reconcile does not POST
/// it again before then (a Secret deleted by hand is back within this long).
const SECRET_RECHECK: Duration = Duration::from_secs(600);

/// The cluster's secret, and its Secret made sure of. The value is derived from the operator's
/// key (`resources::derive_cluster_secret`), so the operator never reads a Secret (its RBAC has
/// `create` on Secrets and nothing else); the Secret is created with it for the pods, and a
/// 409 means it is there already (at most every [`SECRET_RECHECK`] per cluster). Never
/// rewritten: nodes and routers read it at start.
pub(super) async fn cluster_secret(
    ctx: &Context,
    ns: &str,
    cc: &CacheCluster,
) -> Result<ClusterSecret, Error> {
    let secret = resources::derive_cluster_secret(&ctx.settings.secret_key, cc);
    let uid = cc.metadata.uid.clone().unwrap_or_default();
    if ctx.secrets_made.lock().get(&uid).is_some_and(|at| at.elapsed() < SECRET_RECHECK) {
        return Ok(secret);
    }
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    match api.create(&PostParams::default(), &resources::cluster_secret(cc, secret.expose())).await {
        Ok(_) => {
            let note =
                format!("Secret {}: the secret every node requires", resources::cluster_secret_name(cc));
            event(ctx, cc, EventType::Normal, "SecretCreated", note).await;
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    ctx.secrets_made.lock().insert(uid, Instant::now());
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use http::Method;
    use serde_json::json;

    use super::*;
    use crate::controller::tests::{NS, context};
    use crate::fake_api::{Fake, call, echo, status};
    use crate::resources::AddressMode;
    use crate::resources::tests::cluster;

    #[tokio::test]
    async fn a_cluster_secret_is_derived_and_its_secret_created_never_read() {
        let cc = cluster(json!({"shards": 3}));
        let (client, fake) = Fake::start(vec![
            echo(Method::POST, format!("{NS}/secrets")).checking(|s| {
                assert_eq!(s["metadata"]["name"], "demo-cluster-secret");
                assert_eq!(s["metadata"]["ownerReferences"][0]["kind"], "CacheCluster");
                let value = s["stringData"]["secret"].as_str().unwrap();
                let derived =
                    resources::derive_cluster_secret(b"test operator key", &cluster(json!({"shards": 3})));
                assert_eq!(value, derived.expose());
            }),
            echo(Method::POST, "/apis/events.k8s.io/v1/namespaces/shop/events")
                .checking(|ev| assert_eq!(ev["reason"], "SecretCreated")),
            // There already: the same value, and nothing read.
            call(Method::POST, format!("{NS}/secrets"), 409, status(409, "AlreadyExists")),
            call(Method::POST, format!("{NS}/secrets"), 403, status(403, "Forbidden")),
        ]);
        let ctx = context(client, AddressMode::Dns);
        let first = cluster_secret(&ctx, "shop", &cc).await.unwrap();
        assert_eq!(first.expose().len(), 64);
        // Made sure of: the next reconciles do not ask again (no call expected) ...
        assert_eq!(cluster_secret(&ctx, "shop", &cc).await.unwrap(), first);
        // ... until SECRET_RECHECK has passed.
        ctx.secrets_made.lock().clear();
        assert_eq!(cluster_secret(&ctx, "shop", &cc).await.unwrap(), first);
        ctx.secrets_made.lock().clear();
        let denied = cluster_secret(&ctx, "shop", &cc).await.unwrap_err();
        assert!(denied.to_string().contains("Forbidden"), "{denied}");
        fake.done();
    }
}
