//! The CacheCluster's status from what the reconciler observed and decided (pure).
//!
//! Phases: `Pending` (nothing running yet), `Creating` (first nodes starting), `Resharding` (slots
//! moving, or about to: the wanted shard count differs from the topology), `Degraded` (a node of
//! the topology is not ready; with replicas also a shard whose primary does not serve, or that
//! has no synced replica while replicas are wanted), `Ready`. Conditions `Ready`, `Resharding`
//! and `Degraded` tell the same story with reasons and messages; a condition keeps its
//! `lastTransitionTime` until its status changes. With replicas `.status.shardStatus` lists each
//! shard's primary and replicas (synced, lag) as last probed.

use shoal_coordinator::Progress;
use shoal_wire::Topology;

use crate::crd::{CacheClusterStatus, Condition, ReplicaStatus, ShardStatus};
use crate::health::ShardHealth;
use crate::members::PodView;
use crate::scaling::{Observed, Step};

/// Everything that goes into one status.
#[derive(Debug)]
pub struct Inputs<'a> {
    pub generation: Option<i64>,
    pub previous: Option<&'a CacheClusterStatus>,
    pub observed: &'a Observed,
    pub step: &'a Step,
    /// Progress of the running move, if any.
    pub progress: Option<&'a Progress>,
    /// Why the last move failed, if it did (it is retried).
    pub last_error: Option<&'a str>,
    /// Whether the running background task moves slots (not just offering a topology).
    pub resharding_task: bool,
    pub selector: String,
    /// RFC 3339 "now".
    pub now: String,
    /// With replicas: each shard's health as probed (None without replicas).
    pub shards: Option<&'a [ShardHealth]>,
    /// `spec.replicasPerShard`: a shard without a synced replica is degraded only if it should
    /// have one.
    pub replicas_wanted: u32,
    /// The node pods (for naming the pod at each address).
    pub pods: &'a [PodView],
}

pub fn compute(i: &Inputs) -> CacheClusterStatus {
    let o = i.observed;
    let t = o.topology.as_ref();
    let topology_nodes: Vec<u32> = t.map(|t| t.nodes.iter().map(|n| n.id).collect()).unwrap_or_default();
    let not_ready: Vec<u32> = topology_nodes.iter().copied().filter(|id| !o.ready.contains_key(id)).collect();
    let problems: Vec<String> = i
        .shards
        .unwrap_or_default()
        .iter()
        // Replicas on their way out (none wanted): a shard without a synced one is fine.
        .filter(|h| i.replicas_wanted > 0 || !h.primary_serving)
        .filter_map(ShardHealth::problem)
        .collect();
    let degraded = !not_ready.is_empty() || !problems.is_empty();
    let resharding = i.resharding_task
        || t.is_some_and(|t| !t.migrations.is_empty() || t.nodes.len() as u32 != o.desired.max(1))
        || matches!(i.step, Step::Reshard(_) | Step::Resume);
    let phase = phase(t, o.statefulset, i.step, resharding, degraded);
    let ready_reason = if phase == "Ready" { "Serving" } else { phase };
    let reshard_reason = match (i.last_error, resharding) {
        (Some(_), _) => "MoveFailed",
        (None, true) => "SlotsMoving",
        (None, false) => "Settled",
    };
    let conditions = vec![
        condition(i, "Ready", phase == "Ready", ready_reason, ready_message(i, phase, topology_nodes.len())),
        condition(i, "Resharding", resharding, reshard_reason, reshard_message(i, resharding)),
        degraded_condition(i, degraded, &not_ready, &problems),
    ];
    CacheClusterStatus {
        shards: topology_nodes.len() as i32,
        ready_shards: o.ready.len() as i32,
        selector: i.selector.clone(),
        topology_version: t.map_or(0, |t| t.version as i64),
        phase: phase.into(),
        observed_generation: i.generation,
        conditions,
        shard_status: shard_status(i),
        // Not this function's: the controller decides it on every reconcile (its own record
        // of the pod it evicted first, then the status's), in one place.
        restarting: None,
    }
}

fn phase(
    t: Option<&Topology>,
    statefulset: Option<u32>,
    step: &Step,
    resharding: bool,
    degraded: bool,
) -> &'static str {
    match (t, statefulset) {
        (None, None) => "Pending",
        (None, Some(_)) => "Creating",
        (Some(_), _) if resharding => "Resharding",
        (Some(_), _) if degraded => "Degraded",
        (Some(_), _) if matches!(step, Step::Settled) => "Ready",
        // Shrinking the StatefulSet after a scale-down's move.
        (Some(_), _) if matches!(step, Step::ScaleNodes(_)) => "Resharding",
        // The first topology is being offered to the nodes.
        (Some(_), _) => "Creating",
    }
}

fn ready_message(i: &Inputs, phase: &str, shards: usize) -> String {
    match phase {
        "Ready" => {
            let version = i.observed.topology.as_ref().map_or(0, |t| t.version);
            format!("{shards} shards serving topology version {version}")
        }
        _ => match i.step {
            Step::Wait(why) => why.clone(),
            other => format!("{other:?}").split('(').next().unwrap_or_default().to_string(),
        },
    }
}

fn reshard_message(i: &Inputs, resharding: bool) -> String {
    let t = i.observed.topology.as_ref();
    let message = match (i.progress, t) {
        (Some(p), _) if p.migrations > 0 => format!(
            "topology version {}: {}/{} slots moved ({} keys, {:.1} MB), {}/{} migrations done",
            p.version,
            p.slots_done,
            p.slots_total,
            p.keys_moved,
            p.bytes_moved as f64 / 1e6,
            p.migrations_done,
            p.migrations
        ),
        _ if resharding => {
            format!("from {} to {} shards", t.map_or(0, |t| t.nodes.len()), i.observed.desired.max(1))
        }
        _ => "no slots are moving".into(),
    };
    match i.last_error {
        Some(e) => format!("{message}; last attempt failed (retrying): {e}"),
        None => message,
    }
}

fn degraded_condition(i: &Inputs, degraded: bool, not_ready: &[u32], problems: &[String]) -> Condition {
    let not_ready_msg = || format!("node pods {not_ready:?} of the topology are not ready");
    let (reason, message) = match (not_ready.is_empty(), problems.is_empty()) {
        (true, true) if i.shards.is_some() => {
            ("AllNodesReady", "every shard has a serving primary and a synced replica".to_string())
        }
        (true, true) => ("AllNodesReady", "every node of the topology is ready".to_string()),
        (true, false) => ("ShardsNotRedundant", problems.join("; ")),
        (false, true) => ("NodesNotReady", not_ready_msg()),
        (false, false) => ("NodesNotReady", format!("{}; {}", not_ready_msg(), problems.join("; "))),
    };
    condition(i, "Degraded", degraded, reason, message)
}

/// `.status.shardStatus`: each shard's primary and replicas as last probed, with their pods.
fn shard_status(i: &Inputs) -> Vec<ShardStatus> {
    let pod_at = |addr: &str| i.pods.iter().find(|p| p.addr.as_deref() == Some(addr)).map(|p| p.name.clone());
    i.shards
        .unwrap_or_default()
        .iter()
        .map(|h| ShardStatus {
            id: i64::from(h.id),
            primary: h.primary.clone(),
            primary_pod: pod_at(&h.primary),
            primary_serving: h.primary_serving,
            replicas: h
                .replicas
                .iter()
                .map(|r| ReplicaStatus {
                    address: r.addr.clone(),
                    pod: pod_at(&r.addr),
                    synced: r.synced,
                    lag: r.lag.map(|l| l.min(i64::MAX as u64) as i64),
                    lag_ms: r.lag_ms.map(|l| l.min(i64::MAX as u64) as i64),
                })
                .collect(),
        })
        .collect()
}

fn condition(i: &Inputs, type_: &str, on: bool, reason: &str, message: String) -> Condition {
    let status = if on { "True" } else { "False" };
    let since = i
        .previous
        .and_then(|p| p.conditions.iter().find(|c| c.type_ == type_ && c.status == status))
        .map_or_else(|| i.now.clone(), |c| c.last_transition_time.clone());
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        last_transition_time: since,
        observed_generation: i.generation,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn observed(desired: u32, ready: u32, topo: Option<u32>) -> Observed {
        Observed {
            desired,
            statefulset: Some(desired.max(topo.unwrap_or(0))),
            ready: (0..ready).map(|i| (i, format!("a{i}"))).collect::<BTreeMap<_, _>>(),
            topology: topo.map(|n| Topology::even(&(0..n).map(|i| format!("a{i}")).collect::<Vec<_>>())),
            moving: false,
        }
    }

    fn inputs<'a>(o: &'a Observed, step: &'a Step, previous: Option<&'a CacheClusterStatus>) -> Inputs<'a> {
        Inputs {
            generation: Some(4),
            previous,
            observed: o,
            step,
            progress: None,
            last_error: None,
            resharding_task: false,
            selector: "s".into(),
            now: "2026-11-21T10:00:00Z".into(),
            shards: None,
            replicas_wanted: 0,
            pods: &[],
        }
    }

    fn cond<'a>(s: &'a CacheClusterStatus, t: &str) -> &'a Condition {
        s.conditions.iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn ready_when_settled_and_every_node_is_up() {
        let o = observed(3, 3, Some(3));
        let s = compute(&inputs(&o, &Step::Settled, None));
        assert_eq!((s.phase.as_str(), s.shards, s.ready_shards, s.topology_version), ("Ready", 3, 3, 1));
        assert_eq!(cond(&s, "Ready").status, "True");
        assert_eq!(cond(&s, "Resharding").status, "False");
        assert_eq!(cond(&s, "Degraded").status, "False");
        assert_eq!(cond(&s, "Ready").observed_generation, Some(4));
    }

    #[test]
    fn scaling_shows_resharding_with_progress_then_ready() {
        let mut o = observed(5, 5, Some(3));
        o.moving = true;
        let resharding_task = true;
        let p = Progress {
            version: 2,
            migrations: 3,
            migrations_done: 1,
            slots_total: 6554,
            slots_done: 2000,
            keys_moved: 12345,
            bytes_moved: 2_000_000,
            ..Default::default()
        };
        let step = Step::Wait("resharding".into());
        let mut i = inputs(&o, &step, None);
        i.progress = Some(&p);
        i.resharding_task = resharding_task;
        let s = compute(&i);
        assert_eq!(s.phase, "Resharding");
        assert_eq!(cond(&s, "Ready").status, "False");
        let r = cond(&s, "Resharding");
        assert_eq!((r.status.as_str(), r.reason.as_str()), ("True", "SlotsMoving"));
        assert!(r.message.contains("2000/6554 slots moved (12345 keys"), "{}", r.message);

        // Later: done; the Resharding condition flips and records when.
        let done = observed(5, 5, Some(5));
        let mut later = inputs(&done, &Step::Settled, Some(&s));
        later.now = "2026-11-21T10:05:00Z".into();
        let s2 = compute(&later);
        assert_eq!(s2.phase, "Ready");
        assert_eq!(cond(&s2, "Resharding").last_transition_time, "2026-11-21T10:05:00Z");
        assert_eq!(cond(&s2, "Degraded").last_transition_time, "2026-11-21T10:00:00Z", "unchanged: kept");
    }

    #[test]
    fn a_node_down_is_degraded_and_a_failure_is_reported() {
        let o = observed(3, 2, Some(3));
        let step = Step::Wait("waiting for node pods [2] to be ready".into());
        let mut i = inputs(&o, &step, None);
        i.last_error = Some("node 2 unreachable");
        let s = compute(&i);
        assert_eq!(s.phase, "Degraded");
        let d = cond(&s, "Degraded");
        assert_eq!(
            (d.status.as_str(), d.message.as_str()),
            ("True", "node pods [2] of the topology are not ready")
        );
        assert_eq!(cond(&s, "Resharding").reason, "MoveFailed");
        assert!(cond(&s, "Ready").message.contains("waiting for node pods [2]"));
    }

    #[test]
    fn offering_the_first_topology_is_still_creating() {
        let mut o = observed(3, 3, Some(3));
        o.moving = true;
        let s = compute(&inputs(&o, &Step::Wait("resharding".into()), None));
        assert_eq!(s.phase, "Creating");
        assert_eq!(cond(&s, "Resharding").status, "False");
    }

    #[test]
    fn before_a_topology_exists() {
        let mut o = observed(3, 0, None);
        o.statefulset = None;
        assert_eq!(compute(&inputs(&o, &Step::ScaleNodes(3), None)).phase, "Pending");
        o.statefulset = Some(3);
        let s = compute(&inputs(&o, &Step::Wait("waiting".into()), None));
        assert_eq!((s.phase.as_str(), s.shards), ("Creating", 0));
    }

    fn shard(id: u32, serving: bool, synced: &[bool]) -> ShardHealth {
        ShardHealth {
            id,
            primary: format!("a{id}"),
            primary_serving: serving,
            replicas: synced
                .iter()
                .enumerate()
                .map(|(k, &s)| crate::health::ReplicaHealth {
                    addr: format!("r{k}-{id}"),
                    synced: s,
                    lag: s.then_some(3),
                    lag_ms: Some(0),
                })
                .collect(),
        }
    }

    #[test]
    fn with_replicas_a_shard_without_a_synced_replica_or_serving_primary_is_degraded_until_it_has() {
        let o = observed(2, 2, Some(2));
        let pods = vec![PodView {
            name: "demo-node-r1-0".into(),
            shard: 0,
            member: 1,
            addr: Some("r0-0".into()),
            ready: true,
            terminating: false,
            outdated: false,
        }];
        let healthy = [shard(0, true, &[true]), shard(1, true, &[true])];
        let mut i = inputs(&o, &Step::Settled, None);
        i.replicas_wanted = 1;
        i.pods = &pods;
        i.shards = Some(&healthy);
        let s = compute(&i);
        assert_eq!(s.phase, "Ready");
        assert_eq!(cond(&s, "Degraded").message, "every shard has a serving primary and a synced replica");
        assert_eq!(s.shard_status.len(), 2);
        let r = &s.shard_status[0].replicas[0];
        assert_eq!(
            (r.pod.as_deref(), r.synced, r.lag, r.lag_ms),
            (Some("demo-node-r1-0"), true, Some(3), Some(0))
        );
        assert_eq!(s.shard_status[1].replicas[0].pod, None, "no pod at that address");

        // Shard 0's primary failed over; its new replica is still copying.
        let failing = [shard(0, true, &[false]), shard(1, true, &[true])];
        let mut later = inputs(&o, &Step::Settled, Some(&s));
        later.replicas_wanted = 1;
        later.shards = Some(&failing);
        later.now = "2026-11-21T10:01:00Z".into();
        let d = compute(&later);
        assert_eq!(d.phase, "Degraded");
        let c = cond(&d, "Degraded");
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "ShardsNotRedundant"));
        assert_eq!(c.message, "shard 0: no synced replica");
        assert_eq!(c.last_transition_time, "2026-11-21T10:01:00Z");
        assert_eq!(cond(&d, "Ready").status, "False");

        let down = [shard(0, false, &[true]), shard(1, true, &[true])];
        later.shards = Some(&down);
        assert_eq!(cond(&compute(&later), "Degraded").message, "shard 0: primary a0 is not serving");

        // Synced again: Ready.
        let mut again = inputs(&o, &Step::Settled, Some(&d));
        again.replicas_wanted = 1;
        again.shards = Some(&healthy);
        again.now = "2026-11-21T10:02:00Z".into();
        let r = compute(&again);
        assert_eq!(r.phase, "Ready");
        assert_eq!(cond(&r, "Degraded").last_transition_time, "2026-11-21T10:02:00Z");

        // Going back to no replicas: shards without a synced one are fine then.
        let leaving = [shard(0, true, &[]), shard(1, true, &[false])];
        let mut none = inputs(&o, &Step::Settled, None);
        none.shards = Some(&leaving);
        assert_eq!(compute(&none).phase, "Ready");
    }
}
