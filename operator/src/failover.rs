//! The failover writer of each CacheCluster with replicas, run by the leader: the coordinator's
//! [`shoal_coordinator::failover::watch`] on the cluster's topology ConfigMap, started by the
//! reconciler once a topology exists and stopped with leadership (see `main.rs`), when the
//! cluster no longer has replicas, or when its ConfigMap is gone (the cluster was deleted).
//!
//! **Moves and failovers never publish over each other.** Both publish "the version they read,
//! plus one" through the same compare-and-swap on the ConfigMap (its resourceVersion, and no
//! version that is not newer), so a topology one of them read and the other replaced since can
//! never be written back: the late writer gets `Stale` and reads again. On top of that a
//! failover decision preempts a move: [`WriterStore::publish`] stops the cluster's coordinator
//! task before it publishes. A move is a sequence of versions the coordinator drives from the
//! copy it published (it offers that version, waits for pulls reported at that version, then
//! publishes the next); after a promotion the nodes report pulls at the new version only, so a
//! coordinator left running would wait out its step timeout and then fail. Stopped instead, it
//! is restarted by the next reconcile from the published topology (`Step::Resume`), which
//! now names the new primary; pulls resume where they were (entries a node has are kept).
//! Failovers are never held back for a move: a primary that is down would stall the move anyway.
//!
//! The writer reads the topology every 100 ms; [`WriterStore`] answers from a copy at most
//! [`REFRESH`] old (10 GETs a second per cluster would load the API server for nothing). A
//! stale copy can only delay a decision: publishing from it is refused as above.

use std::sync::{Arc, Weak};
use std::time::Duration;

use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use parking_lot::Mutex;
use shoal_coordinator::failover::{self, Decision, FailoverOptions};
use shoal_coordinator::{Registry, RegistryError};
use shoal_wire::Topology;
use shoal_wire::auth::{ClusterSecret, Credentials};
use tokio::time::Instant;

use crate::context::{Context, Key};
use crate::crd::CacheCluster;
use crate::registry::ConfigMapRegistry;

/// Longest the writer works from a copy of the topology.
pub const REFRESH: Duration = Duration::from_millis(300);

/// The cluster's topology ConfigMap as its failover writer sees it (see the module docs).
pub struct WriterStore {
    store: ConfigMapRegistry,
    cached: Mutex<Option<(Instant, Option<Topology>)>>,
    /// The topology the last decision replaced, for telling a promotion from a confirmation.
    replaced: Mutex<Option<Topology>>,
    /// Called before each publish: stops the cluster's move.
    preempt: Box<dyn Fn() + Send + Sync>,
    /// Set once the ConfigMap is gone.
    gone: tokio::sync::watch::Sender<bool>,
}

impl WriterStore {
    pub fn new(store: ConfigMapRegistry, preempt: impl Fn() + Send + Sync + 'static) -> WriterStore {
        WriterStore {
            store,
            cached: Mutex::default(),
            replaced: Mutex::default(),
            preempt: Box::new(preempt),
            gone: tokio::sync::watch::channel(false).0,
        }
    }

    /// Resolves once a load found no ConfigMap.
    pub fn gone(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.gone.subscribe();
        async move {
            let _ = rx.wait_for(|g| *g).await;
        }
    }

    /// The topology the last published decision replaced.
    pub fn replaced(&self) -> Option<Topology> {
        self.replaced.lock().clone()
    }
}

impl Registry for WriterStore {
    async fn load(&self) -> Result<Option<Topology>, RegistryError> {
        if let Some((at, t)) = self.cached.lock().as_ref()
            && at.elapsed() < REFRESH
        {
            return Ok(t.clone());
        }
        let t = self.store.load().await?;
        if t.is_none() {
            self.gone.send_replace(true);
        }
        *self.cached.lock() = Some((Instant::now(), t.clone()));
        Ok(t)
    }

    async fn publish(&self, t: &Topology) -> Result<(), RegistryError> {
        (self.preempt)();
        let before = self.cached.lock().as_ref().and_then(|(_, t)| t.clone());
        match self.store.publish(t).await {
            Ok(()) => {
                *self.replaced.lock() = before;
                *self.cached.lock() = Some((Instant::now(), Some(t.clone())));
                Ok(())
            }
            Err(e) => {
                // Read again next time: someone else published.
                *self.cached.lock() = None;
                Err(e)
            }
        }
    }
}

/// How a decision is reported: the Event's reason and type, and whether it promoted a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    pub reason: &'static str,
    pub warning: bool,
    pub promoted: bool,
}

/// What `d` did to the topology it replaced (`before`): a new primary (a failover; a warning
/// when the old one was unreachable rather than handing over or restarting), or the same one
/// confirmed.
pub fn classify(before: Option<&Topology>, d: &Decision) -> Kind {
    let old = before.and_then(|t| t.node(d.shard)).map(|n| n.addr.as_str());
    let new = d.topology.node(d.shard).map(|n| n.addr.as_str());
    if old.is_some() && old == new {
        return Kind { reason: "PrimaryConfirmed", warning: false, promoted: false };
    }
    // The decision's own words say why; the coordinator's tests pin them.
    let unreachable = d.reason.contains("unreachable");
    Kind { reason: "FailedOver", warning: unreachable, promoted: true }
}

/// Starts the failover writer of `cc` unless one is running.
pub fn ensure(ctx: &Arc<Context>, cc: &CacheCluster, store: ConfigMapRegistry, secret: &ClusterSecret) {
    let key = (cc.namespace().unwrap_or_default(), cc.name_any());
    let mut writers = ctx.writers.lock();
    if !ctx.may_start() || writers.get(&key).is_some_and(|w| !w.is_finished()) {
        return;
    }
    let weak: Weak<Context> = Arc::downgrade(ctx);
    let preempt_key = key.clone();
    let preempt_ctx = weak.clone();
    let writer = WriterStore::new(store, move || {
        if let Some(ctx) = preempt_ctx.upgrade() {
            ctx.preempt_move(&preempt_key);
        }
    });
    let object = cc.object_ref(&());
    let cluster = cc.name_any();
    let options = FailoverOptions {
        credentials: Credentials::secret(Some(secret.clone())),
        ..ctx.settings.failover.clone()
    };
    tracing::info!(%cluster, down_after_ms = options.down_after.as_millis() as u64, "starting the failover writer");
    let task = tokio::spawn(async move {
        let gone = writer.gone();
        let on_decision = |d: &Decision| {
            let kind = classify(writer.replaced().as_ref(), d);
            let Some(ctx) = weak.upgrade() else { return };
            if kind.promoted {
                ctx.metrics.failovers.inc();
            } else {
                ctx.metrics.primaries_confirmed.inc();
            }
            let note = format!("{} (topology version {})", d.reason, d.topology.version);
            tracing::warn!(%cluster, shard = d.shard, reason = kind.reason, %note, "failover decision");
            let ev = Event {
                type_: if kind.warning { EventType::Warning } else { EventType::Normal },
                reason: kind.reason.into(),
                note: Some(note),
                action: "Failover".into(),
                secondary: None,
            };
            let (recorder, object) = (ctx.recorder.clone(), object.clone());
            tokio::spawn(async move {
                if let Err(e) = recorder.publish(&ev, &object).await {
                    tracing::warn!(error = %e, "could not record an event");
                }
            });
        };
        failover::watch(&writer, options, on_decision, gone).await;
        tracing::info!(%cluster, "failover writer stopped");
    });
    writers.insert(key, task);
}

/// Stops the failover writer of the cluster `key`, if one runs.
pub fn stop(ctx: &Context, key: &Key) {
    if let Some(task) = ctx.writers.lock().remove(key) {
        tracing::info!(cluster = %key.1, "stopping the failover writer (no replicas)");
        task.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use shoal_coordinator::failover::{Health, decide};
    use shoal_wire::proto::NodeStats;

    use super::*;

    fn topology() -> Topology {
        let mut t = Topology::even(&["p0".into()]);
        t.nodes[0].replicas = vec!["r0".into()];
        t
    }

    fn up(role: &str, run: &str, fenced: bool, synced: bool, following: &str) -> Health {
        Health {
            stats: Some(NodeStats {
                role: role.into(),
                run_id: run.into(),
                fenced,
                synced,
                primary_run_id: following.into(),
                topology_version: topology().version,
                ..Default::default()
            }),
            down_for: Duration::ZERO,
        }
    }

    mod store {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};

        use http::Method;
        use kube::Api;
        use serde_json::json;

        use super::super::*;
        use crate::fake_api::{Fake, call, status};
        use crate::resources::tests::cluster;

        const CM: &str = "/api/v1/namespaces/shop/configmaps/demo-topology";

        fn configmap(t: &Topology) -> serde_json::Value {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "demo-topology", "namespace": "shop", "resourceVersion": "3"},
                   "data": {"topology.json": t.to_json()}})
        }

        fn store(calls: Vec<crate::fake_api::Call>, preempted: Arc<AtomicBool>) -> (WriterStore, Fake) {
            let (client, fake) = Fake::start(calls);
            let registry =
                ConfigMapRegistry::new(Api::namespaced(client, "shop"), &cluster(json!({"shards": 1})));
            (WriterStore::new(registry, move || preempted.store(true, Ordering::SeqCst)), fake)
        }

        #[tokio::test]
        async fn the_move_stops_before_a_decision_is_published_and_reads_are_cached() {
            let t = super::topology();
            let mut next = t.clone();
            next.version += 1;
            let preempted = Arc::new(AtomicBool::new(false));
            let seen = preempted.clone();
            let calls = vec![
                // One read for two loads within the refresh time.
                call(Method::GET, CM, 200, configmap(&t)),
                // The publish reads (compare-and-swap) only once the move was stopped.
                call(Method::GET, CM, 200, configmap(&t)).checking(move |_| {
                    assert!(seen.load(Ordering::SeqCst), "the move is stopped before the publish starts");
                }),
                call(Method::PUT, CM, 200, configmap(&next)),
            ];
            let (writer, fake) = store(calls, preempted.clone());
            assert_eq!(writer.load().await.unwrap(), Some(t.clone()));
            assert_eq!(writer.load().await.unwrap(), Some(t.clone()), "from the copy");
            assert!(!preempted.load(Ordering::SeqCst), "reading stops nothing");
            writer.publish(&next).await.unwrap();
            assert_eq!(writer.load().await.unwrap(), Some(next), "what it published, without a read");
            assert_eq!(writer.replaced(), Some(t), "what the decision replaced, to classify it");
            fake.done();
        }

        #[tokio::test]
        async fn a_refused_publish_drops_the_copy_and_a_missing_configmap_ends_the_writer() {
            let t = super::topology();
            let mut newer = t.clone();
            newer.version += 5;
            let calls = vec![
                call(Method::GET, CM, 200, configmap(&t)),
                // Someone else published meanwhile: refused, and the next load reads again.
                call(Method::GET, CM, 200, configmap(&newer)),
                call(Method::GET, CM, 200, configmap(&newer)),
                call(Method::GET, CM, 404, status(404, "NotFound")),
            ];
            let (writer, fake) = store(calls, Arc::new(AtomicBool::new(false)));
            let gone = writer.gone();
            assert_eq!(writer.load().await.unwrap().map(|t| t.version), Some(t.version));
            let mut stale = t.clone();
            stale.version += 1;
            assert!(matches!(writer.publish(&stale).await, Err(RegistryError::Stale { .. })));
            assert_eq!(writer.load().await.unwrap().map(|t| t.version), Some(newer.version));
            tokio::time::sleep(REFRESH).await;
            assert_eq!(writer.load().await.unwrap(), None);
            tokio::time::timeout(Duration::from_secs(1), gone).await.expect("the writer's stop resolves");
            fake.done();
        }
    }

    /// Decisions made by the real `decide`, so a change of its wording shows here.
    #[test]
    fn decisions_are_told_apart_by_what_they_did() {
        let t = topology();
        let second = Duration::from_secs(1);
        let replica = ("r0".to_string(), up("slave", "r", false, true, "p-run"));

        let down =
            HashMap::from([("p0".to_string(), Health { stats: None, down_for: second }), replica.clone()]);
        let d = decide(&t, &down, second).unwrap();
        assert_eq!(classify(Some(&t), &d), Kind { reason: "FailedOver", warning: true, promoted: true });

        let mut handing = up("master", "p-run", true, false, "");
        if let Some(s) = handing.stats.as_mut() {
            s.handing_over = true;
            s.handover_to = "r0".into();
        }
        let d = decide(&t, &HashMap::from([("p0".to_string(), handing), replica.clone()]), second).unwrap();
        assert_eq!(classify(Some(&t), &d), Kind { reason: "FailedOver", warning: false, promoted: true });

        let restarted = up("master", "p-run-2", true, false, "");
        let d = decide(&t, &HashMap::from([("p0".to_string(), restarted.clone()), replica]), second).unwrap();
        assert!(classify(Some(&t), &d).promoted, "{}", d.reason);

        let empty = ("r0".to_string(), up("slave", "r", false, false, ""));
        let d = decide(&t, &HashMap::from([("p0".to_string(), restarted), empty]), second).unwrap();
        assert_eq!(
            classify(Some(&t), &d),
            Kind { reason: "PrimaryConfirmed", warning: false, promoted: false }
        );
    }
}
