//! What to do next to bring a cluster to `spec.shards` (pure: the reconciler observes, this
//! decides, the reconciler acts).
//!
//! Node ids are StatefulSet ordinals, so a cluster of `n` shards is nodes `0..n`.
//! - First start: grow the StatefulSet, wait until every pod is ready, publish an even topology.
//! - Up: grow the StatefulSet, wait for the new pods, then move slots onto them.
//! - Down: move the leaving shards' slots off them first; only then shrink the StatefulSet.
//! - A move found in the topology (the operator restarted mid-move) is finished first.
//! - A change of `spec.shards` while a move runs waits for it ("queued", not lost: the spec is the
//!   queue), then the next step starts from the new topology.
//! - A node whose address changed (a restarted pod with a new IP) gets a topology version with
//!   the new address and no migration.
//!
//! With replicas, "node i is ready" means shard i's primary (whichever pod the topology names)
//! is, and a shard in the topology keeps its primary and replicas in every target: moves change
//! which slots a shard owns, never who serves it (the failover writer's business). New shards
//! join without replicas; [`crate::members`] lists theirs once the move is done.

use std::collections::BTreeMap;

use shoal_wire::{NodeInfo, Topology};

/// What the reconciler saw.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// `spec.shards`.
    pub desired: u32,
    /// The node StatefulSet's `spec.replicas`, if it exists.
    pub statefulset: Option<u32>,
    /// Shards whose node (with replicas: whose primary) runs on a ready pod: shard → address.
    pub ready: BTreeMap<u32, String>,
    /// The published topology, if any.
    pub topology: Option<Topology>,
    /// Whether a coordinator task is running for this cluster.
    pub moving: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Set the node StatefulSet's replicas.
    ScaleNodes(u32),
    /// Nothing to do until something changes (the reason is for status and logs).
    Wait(String),
    /// Publish the first topology, an even split over these nodes.
    Bootstrap(Vec<NodeInfo>),
    /// Run the coordinator until the cluster is on exactly these nodes.
    Reshard(Vec<NodeInfo>),
    /// Finish the move the published topology describes.
    Resume,
    /// The cluster is as wanted.
    Settled,
}

fn targets(o: &Observed, n: u32) -> Option<Vec<NodeInfo>> {
    (0..n)
        .map(|id| {
            let addr = o.ready.get(&id)?;
            // A shard keeps its replicas as long as its primary stays.
            let replicas = match o.topology.as_ref().and_then(|t| t.node(id)) {
                Some(n) if n.addr == *addr => n.replicas.clone(),
                _ => Vec::new(),
            };
            Some(NodeInfo { id, addr: addr.clone(), replicas })
        })
        .collect()
}

fn not_ready(o: &Observed, ids: impl Iterator<Item = u32>) -> Vec<u32> {
    ids.filter(|id| !o.ready.contains_key(id)).collect()
}

pub fn next_step(o: &Observed) -> Step {
    if o.moving {
        return Step::Wait("resharding".into());
    }
    let want = o.desired.max(1);
    let Some(t) = &o.topology else {
        if o.statefulset != Some(want) {
            return Step::ScaleNodes(want);
        }
        return match targets(o, want) {
            Some(nodes) => Step::Bootstrap(nodes),
            None => Step::Wait(format!("waiting for node pods {:?} to be ready", not_ready(o, 0..want))),
        };
    };
    let max_id = t.nodes.iter().map(|n| n.id + 1).max().unwrap_or(0);
    if !t.migrations.is_empty() {
        if o.statefulset.unwrap_or(0) < max_id {
            return Step::ScaleNodes(max_id);
        }
        return Step::Resume;
    }
    let have = t.nodes.len() as u32;
    // Every node that takes part (those in the topology, and any joining) must exist and be up:
    // leaving nodes export their slots, staying and joining ones receive them.
    let involved = want.max(max_id);
    if o.statefulset.unwrap_or(0) < involved {
        return Step::ScaleNodes(involved);
    }
    let missing = not_ready(o, 0..involved);
    if !missing.is_empty() {
        return Step::Wait(format!("waiting for node pods {missing:?} to be ready"));
    }
    let target = targets(o, want).expect("all involved nodes are ready");
    if want != have || target != t.nodes {
        return Step::Reshard(target);
    }
    if o.statefulset != Some(have) {
        // Shrink after a scale-down (the leaving shards hold nothing now), or undo a manual edit.
        return Step::ScaleNodes(have);
    }
    Step::Settled
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(ids: impl IntoIterator<Item = u32>) -> BTreeMap<u32, String> {
        ids.into_iter().map(|i| (i, format!("10.0.0.{i}:7001"))).collect()
    }

    fn topo(n: u32) -> Topology {
        let addrs: Vec<String> = (0..n).map(|i| format!("10.0.0.{i}:7001")).collect();
        Topology::even(&addrs)
    }

    fn nodes(n: u32) -> Vec<NodeInfo> {
        (0..n).map(|id| NodeInfo::new(id, format!("10.0.0.{id}:7001"))).collect()
    }

    #[test]
    fn first_start_grows_waits_then_bootstraps() {
        let mut o = Observed { desired: 3, ..Default::default() };
        assert_eq!(next_step(&o), Step::ScaleNodes(3));
        o.statefulset = Some(3);
        o.ready = ready([0, 2]);
        assert_eq!(next_step(&o), Step::Wait("waiting for node pods [1] to be ready".into()));
        o.ready = ready(0..3);
        assert_eq!(next_step(&o), Step::Bootstrap(nodes(3)));
    }

    #[test]
    fn scale_up_grows_the_statefulset_before_moving_slots() {
        let mut o = Observed {
            desired: 5,
            statefulset: Some(3),
            ready: ready(0..3),
            topology: Some(topo(3)),
            moving: false,
        };
        assert_eq!(next_step(&o), Step::ScaleNodes(5));
        o.statefulset = Some(5);
        o.ready = ready(0..4);
        assert!(matches!(next_step(&o), Step::Wait(_)), "node 4 is not ready yet");
        o.ready = ready(0..5);
        assert_eq!(next_step(&o), Step::Reshard(nodes(5)));
        o.moving = true;
        assert_eq!(next_step(&o), Step::Wait("resharding".into()));
    }

    #[test]
    fn scale_down_moves_slots_first_and_shrinks_after() {
        let mut o = Observed {
            desired: 2,
            statefulset: Some(5),
            ready: ready(0..5),
            topology: Some(topo(5)),
            moving: false,
        };
        assert_eq!(next_step(&o), Step::Reshard(nodes(2)), "the StatefulSet keeps 5 pods during the move");
        o.ready = ready([0, 1, 2, 4]);
        assert!(matches!(next_step(&o), Step::Wait(_)), "node 3 must be up to hand its slots over");
        o.ready = ready(0..5);
        o.topology = Some(topo(2));
        assert_eq!(next_step(&o), Step::ScaleNodes(2), "moved: now shrink");
        o.statefulset = Some(2);
        o.ready = ready(0..2);
        assert_eq!(next_step(&o), Step::Settled);
    }

    #[test]
    fn a_move_in_the_topology_is_finished_first_and_new_requests_wait_for_it() {
        let mut t = topo(4);
        t.migrations.push(shoal_wire::Migration { start: 0, end: 9, from: 0, to: 3 });
        let mut o = Observed {
            desired: 2,
            statefulset: Some(3),
            ready: ready(0..4),
            topology: Some(t),
            moving: false,
        };
        assert_eq!(next_step(&o), Step::ScaleNodes(4), "the receiving node must exist");
        o.statefulset = Some(4);
        assert_eq!(next_step(&o), Step::Resume);
    }

    #[test]
    fn a_new_address_is_published_without_moving_slots() {
        let mut o = Observed {
            desired: 3,
            statefulset: Some(3),
            ready: ready(0..3),
            topology: Some(topo(3)),
            moving: false,
        };
        assert_eq!(next_step(&o), Step::Settled);
        o.ready.insert(1, "10.0.9.9:7001".into());
        let mut want = nodes(3);
        want[1].addr = "10.0.9.9:7001".into();
        assert_eq!(next_step(&o), Step::Reshard(want));
    }

    #[test]
    fn a_manual_statefulset_edit_is_undone() {
        let o = Observed {
            desired: 3,
            statefulset: Some(7),
            ready: ready(0..7),
            topology: Some(topo(3)),
            moving: false,
        };
        assert_eq!(next_step(&o), Step::ScaleNodes(3));
        let o = Observed {
            desired: 3,
            statefulset: Some(1),
            ready: ready(0..1),
            topology: Some(topo(3)),
            moving: false,
        };
        assert_eq!(next_step(&o), Step::ScaleNodes(3), "shards holding slots are brought back");
    }

    /// Shards of `topo(n)` with replicas, shard 1 failed over to its replica.
    fn replicated(n: u32) -> Topology {
        let mut t = topo(n);
        for node in t.nodes.iter_mut() {
            node.replicas = vec![format!("10.0.1.{}:7001", node.id)];
        }
        let mut t = t.promote(1, "10.0.1.1:7001").unwrap();
        t.version = 7;
        t
    }

    /// What the reconciler reports as ready with replicas: each shard's primary.
    fn ready_primaries(t: &Topology, extra: impl IntoIterator<Item = u32>) -> BTreeMap<u32, String> {
        let mut r: BTreeMap<u32, String> = t.nodes.iter().map(|n| (n.id, n.addr.clone())).collect();
        r.extend(ready(extra));
        r
    }

    #[test]
    fn with_replicas_moves_keep_every_shards_primary_and_replicas_and_new_shards_start_bare() {
        let t = replicated(2);
        let mut o = Observed {
            desired: 3,
            statefulset: Some(2),
            ready: ready_primaries(&t, []),
            topology: Some(t.clone()),
            moving: false,
        };
        assert_eq!(next_step(&o), Step::ScaleNodes(3));
        o.statefulset = Some(3);
        assert!(matches!(next_step(&o), Step::Wait(_)), "shard 2's member 0 is not up yet");
        o.ready = ready_primaries(&t, [2]);
        let Step::Reshard(target) = next_step(&o) else { panic!("{:?}", next_step(&o)) };
        assert_eq!(target[..2], t.nodes[..], "shard 1 stays on its promoted replica, replicas kept");
        assert_eq!(target[2], NodeInfo::new(2, "10.0.0.2:7001"), "replicas come after the move");

        // Settled at 3 with replicas listed: nothing to do. Down to 2: shards 0 and 1 as they are.
        let t3 = replicated(3);
        let o = Observed {
            desired: 3,
            statefulset: Some(3),
            ready: ready_primaries(&t3, []),
            topology: Some(t3.clone()),
            moving: false,
        };
        assert_eq!(next_step(&o), Step::Settled);
        let o = Observed { desired: 2, ..o };
        assert_eq!(next_step(&o), Step::Reshard(t3.nodes[..2].to_vec()));
        // A primary that is down (before its replica is promoted) holds the move back.
        let mut down = o.clone();
        down.ready.remove(&1);
        assert_eq!(next_step(&down), Step::Wait("waiting for node pods [1] to be ready".into()));
    }
}
