//! Acting on the members of each shard, with replicas and only while scaling has nothing under
//! way: the replica lists [`members::membership`] decides are published, a primary whose member
//! goes is asked to hand its shard over, and on a settled cluster outdated pods are restarted
//! one at a time ([`super::restarts`]).

use std::time::Duration;

use kube::runtime::events::EventType;
use shoal_coordinator::{Registry, RegistryError};
use shoal_wire::auth::{ClusterSecret, Credentials};
use shoal_wire::client::{self, ClientOptions};
use shoal_wire::proto::HandoverRequest;

use super::api::{Error, event};
use super::observe::Seen;
use super::restarts::restart_outdated;
use super::spec::Wanted;
use crate::context::Context;
use crate::crd::{CacheCluster, PodRestart};
use crate::health;
use crate::members::{self, Change};
use crate::registry::ConfigMapRegistry;
use crate::resources::AddressMode;
use crate::scaling::Step;

/// How long the operator lets a primary take to hand its shard over (the node's own default).
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(10);

/// Returns, when restarts were looked at, the pod waited for now (`status.restarting`).
pub(super) async fn tend(
    ctx: &Context,
    cc: &CacheCluster,
    wanted: &Wanted,
    seen: &Seen,
    step: &Step,
    store: &ConfigMapRegistry,
    secret: &ClusterSecret,
) -> Result<Option<Option<PodRestart>>, Error> {
    // A move running now (started above, or still running) holds them back.
    let idle = !ctx.moves.lock().contains_key(&wanted.key) && matches!(step, Step::Settled | Step::Wait(_));
    let probed = match (seen.replica_mode, idle, &seen.topology, &seen.stats, &seen.shards) {
        (true, true, Some(t), Some(stats), Some(health)) if t.migrations.is_empty() => {
            Some((t, stats, health))
        }
        _ => None,
    };
    let Some((t, stats, health)) = probed else {
        if seen.replica_mode {
            tracing::debug!(cluster = %wanted.name, ?step, idle, "members and restarts wait for scaling");
        }
        return Ok(None);
    };
    let synced = |addr: &str| health::synced(health, addr);
    let dns = ctx.settings.node_addresses == AddressMode::Dns;
    match members::membership(t, &seen.pods, wanted.replicas, dns, synced) {
        Some(Change::Publish { topology: next, why }) => match store.publish(&next).await {
            Ok(()) => {
                ctx.metrics.member_changes.inc();
                let note = format!("{why} (topology version {})", next.version);
                event(ctx, cc, EventType::Normal, "MembersChanged", note).await;
            }
            // The failover writer (or a move) published first: the compare-and-swap refused
            // this one, and the ConfigMap's change brings the next look.
            Err(RegistryError::Stale { current, .. }) => {
                tracing::info!(cluster = %wanted.name, current, "members change superseded; looking again");
            }
            Err(e) => return Err(e.into()),
        },
        Some(Change::HandOver { shard, from, to }) => {
            let note = format!("shard {shard}: primary {from} hands over to {to} (its member goes)");
            event(ctx, cc, EventType::Normal, "HandingOver", note).await;
            if let Err(e) = hand_over(&from, &to, secret).await {
                event(ctx, cc, EventType::Warning, "HandOverFailed", format!("shard {shard}: {e}")).await;
            }
        }
        None if *step == Step::Settled => {
            return Ok(Some(restart_outdated(ctx, cc, &seen.pods, t, stats, health).await?));
        }
        None => {}
    }
    Ok(None)
}

/// Asks the primary at `from` to hand its shard over to `to` (it pauses, waits for `to` to
/// catch up, and the failover writer promotes `to`).
async fn hand_over(from: &str, to: &str, secret: &ClusterSecret) -> Result<(), String> {
    let options = ClientOptions {
        request_timeout: Some(HANDOVER_TIMEOUT * 2),
        credentials: Credentials::secret(Some(secret.clone())),
        ..ClientOptions::admin()
    };
    let req = HandoverRequest { replica: to.to_string(), timeout_ms: HANDOVER_TIMEOUT.as_millis() as u64 };
    // Bounded as a whole (see `health::probe`): a reconcile must never wait on one node forever.
    let call = async {
        let mut c = client::connect(from, &options).await.map_err(|e| e.to_string())?;
        c.handover(req).await.map_err(|s| s.message().to_string())?;
        Ok(())
    };
    tokio::time::timeout(HANDOVER_TIMEOUT * 3, call).await.map_err(|_| format!("{from} did not answer"))?
}
