//! Data moves, which a reconcile never waits for: each runs as a background task (one per
//! cluster, the coordinator library driving the topology in the cluster's ConfigMap). A
//! reconcile collects the move that ended since the last look ([`ended`], [`settle`]), starts
//! the one its step asks for ([`take_step`]), and reports the running one's progress
//! ([`running`]). Everything a move needs is in the published topology, so an operator
//! restarted (or replaced by another leader) mid-move resumes it from there.

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::events::EventType;
use parking_lot::Mutex;
use shoal_coordinator::{Coordinator, Progress, Registry};
use shoal_wire::auth::{ClusterSecret, Credentials};
use shoal_wire::{NodeInfo, Topology};

use super::api::{Error, event};
use crate::context::{Context, Key, Move};
use crate::crd::CacheCluster;
use crate::registry::ConfigMapRegistry;
use crate::scaling::Step;

/// A move that ran in the background, once it ended.
pub(super) struct Ended {
    pub what: String,
    pub outcome: Outcome,
}

pub(super) enum Outcome {
    /// The cluster is on this topology.
    Done(Topology),
    /// The coordinator gave up (the next step retries from the topology).
    Failed(String),
    /// The task itself ended without an answer (it panicked, or was aborted).
    Lost(String),
}

/// Takes the move of `key` off the running ones if it ended since the last look.
pub(super) async fn ended(ctx: &Context, key: &Key) -> Option<Ended> {
    let m = {
        let mut moves = ctx.moves.lock();
        match moves.get(key) {
            Some(m) if m.task.is_finished() => moves.remove(key),
            _ => None,
        }
    }?;
    ctx.metrics.moves_running.add(-1);
    let outcome = match m.task.await {
        Ok(Ok(t)) => Outcome::Done(t),
        Ok(Err(e)) => Outcome::Failed(e),
        Err(e) => Outcome::Lost(e.to_string()),
    };
    Some(Ended { what: m.what, outcome })
}

/// Reports how the move ended (Events, metrics) and keeps its error for the status until a
/// move succeeds.
pub(super) async fn settle(ctx: &Context, cc: &CacheCluster, key: &Key, ended: Option<&Ended>) {
    let Some(Ended { what, outcome }) = ended else { return };
    match outcome {
        Outcome::Done(t) => {
            ctx.last_errors.lock().remove(key);
            let note = format!("{what}: done, topology version {} with {} shards", t.version, t.nodes.len());
            event(ctx, cc, EventType::Normal, "Resharded", note).await;
        }
        Outcome::Failed(e) => {
            ctx.metrics.moves_failed.inc();
            ctx.last_errors.lock().insert(key.clone(), e.clone());
            let note = format!("{what}: {e} (will retry)");
            event(ctx, cc, EventType::Warning, "ReshardFailed", note).await;
        }
        Outcome::Lost(e) => {
            ctx.metrics.moves_failed.inc();
            ctx.last_errors.lock().insert(key.clone(), e.clone());
        }
    }
}

/// Acts on the steps that move data: publishes the first topology and offers it to the nodes,
/// or starts a move toward a target, or resumes the one the topology describes.
pub(super) async fn take_step(
    ctx: &Arc<Context>,
    cc: &CacheCluster,
    store: &ConfigMapRegistry,
    secret: &ClusterSecret,
    step: &Step,
    topology: Option<&Topology>,
) -> Result<(), Error> {
    match step {
        Step::Bootstrap(nodes) => {
            // `nodes` are ids 0..n in order, which is how `even` numbers them. Primaries only:
            // replicas are listed in the next version (see `members`).
            let t = Topology::even(&nodes.iter().map(|n| n.addr.clone()).collect::<Vec<_>>());
            store.publish(&t).await?;
            let note = format!("first topology: {} shards, version {}", t.nodes.len(), t.version);
            event(ctx, cc, EventType::Normal, "TopologyPublished", note).await;
            // Offer it to every node now rather than waiting for their file to change.
            let what = "publishing the first topology".to_string();
            start_move(ctx, cc, store.clone(), secret, None, what, false);
        }
        Step::Reshard(target) => {
            let from = topology.map_or(0, |t| t.nodes.len());
            let what = if from == target.len() {
                "new node addresses".to_string()
            } else {
                format!("resharding {from} -> {} shards", target.len())
            };
            event(ctx, cc, EventType::Normal, "ReshardingStarted", what.clone()).await;
            start_move(ctx, cc, store.clone(), secret, Some(target.clone()), what, true);
        }
        Step::Resume => {
            let what = "finishing the move in the published topology".to_string();
            event(ctx, cc, EventType::Normal, "ReshardingResumed", what.clone()).await;
            start_move(ctx, cc, store.clone(), secret, None, what, true);
        }
        Step::ScaleNodes(_) | Step::Wait(_) | Step::Settled => {}
    }
    Ok(())
}

/// Starts the coordinator for `cc` in the background: toward `target`, or (None) finishing what
/// the published topology describes.
pub(super) fn start_move(
    ctx: &Arc<Context>,
    cc: &CacheCluster,
    store: ConfigMapRegistry,
    secret: &ClusterSecret,
    target: Option<Vec<NodeInfo>>,
    what: String,
    resharding: bool,
) {
    let progress: Arc<Mutex<Option<Progress>>> = Arc::default();
    let sink = progress.clone();
    let cluster = cc.name_any();
    let coordinator = Coordinator::new(store, Credentials::secret(Some(secret.clone())))
        .with_timeout(ctx.settings.step_timeout)
        .with_progress(move |p| {
            tracing::info!(
                %cluster,
                version = p.version,
                slots_done = p.slots_done,
                slots_total = p.slots_total,
                keys = p.keys_moved,
                "resharding progress"
            );
            *sink.lock() = Some(p.clone());
        });
    let key = (cc.namespace().unwrap_or_default(), cc.name_any());
    let mut moves = ctx.moves.lock();
    if !ctx.may_start() {
        return;
    }
    let task = tokio::spawn(async move {
        let result = match target {
            Some(t) => coordinator.reshard(&t).await,
            None => coordinator.resume().await,
        };
        result.map_err(|e| e.to_string())
    });
    ctx.metrics.moves_started.inc();
    ctx.metrics.moves_running.add(1);
    moves.insert(key, Move { task, progress, what, resharding });
}

/// The move running now, as the status tells it.
#[derive(Debug, Default)]
pub(super) struct Running {
    pub moving: bool,
    pub progress: Option<Progress>,
    /// It moves slots (not only offering the first topology).
    pub resharding: bool,
}

pub(super) fn running(ctx: &Context, key: &Key) -> Running {
    match ctx.moves.lock().get(key) {
        Some(m) => Running { moving: true, progress: m.progress.lock().clone(), resharding: m.resharding },
        None => Running::default(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kube::Api;
    use serde_json::json;

    use super::*;
    use crate::controller::tests::context;
    use crate::failover;
    use crate::fake_api::Fake;
    use crate::resources::AddressMode;
    use crate::resources::tests::cluster;

    #[tokio::test]
    async fn a_preempted_move_is_stopped_and_counted_and_nothing_starts_after_leadership_ends() {
        let (client, fake) = Fake::start(vec![]);
        let ctx = context(client, AddressMode::Dns);
        let key = ("shop".to_string(), "demo".to_string());
        let task = tokio::spawn(async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(Topology::even(&["a:1".into()]))
        });
        ctx.metrics.moves_running.add(1);
        let mv = Move {
            task,
            progress: Arc::default(),
            what: "resharding 2 -> 3 shards".into(),
            resharding: true,
        };
        ctx.moves.lock().insert(key.clone(), mv);
        ctx.preempt_move(&key);
        assert!(!ctx.moves.lock().contains_key(&key), "the next reconcile resumes it from the topology");
        assert_eq!((ctx.metrics.moves_running.get(), ctx.metrics.moves_preempted.get()), (0, 1));
        ctx.preempt_move(&key);
        assert_eq!(ctx.metrics.moves_preempted.get(), 1, "nothing to stop twice");

        ctx.stop_background();
        let cc = cluster(json!({"shards": 2, "replicasPerShard": 1}));
        let store = ConfigMapRegistry::new(Api::namespaced(ctx.client.clone(), "shop"), &cc);
        let secret = ClusterSecret::generate();
        start_move(&ctx, &cc, store.clone(), &secret, None, "x".into(), true);
        failover::ensure(&ctx, &cc, store, &secret);
        assert!(
            ctx.moves.lock().is_empty() && ctx.writers_running() == 0,
            "no longer leading: nothing starts"
        );
        fake.done();
    }
}
