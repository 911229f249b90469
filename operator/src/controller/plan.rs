//! The decide stage of a reconcile (pure): from what was seen, the scaling step
//! ([`scaling::next_step`]) and the node StatefulSets it needs. What replicas do next is
//! decided later, by [`crate::members`], and only once scaling has nothing under way.

use shoal_wire::Topology;

use super::observe::Seen;
use super::spec::Wanted;
use crate::members::{self, PodView};
use crate::scaling::{self, Observed, Step};

#[derive(Debug, Clone)]
pub(super) struct Plan {
    /// What scaling saw; the status starts from it too.
    pub observed: Observed,
    pub step: Step,
    /// The size of every member StatefulSet: one pod per shard.
    pub replicas: u32,
    /// The highest member index whose StatefulSet stays; those above it go.
    pub keep: u32,
}

pub(super) fn decide(wanted: &Wanted, seen: &Seen) -> Plan {
    let statefulset = seen.sets.get(&0).and_then(|s| s.spec.as_ref()?.replicas).map(|r| r.max(0) as u32);
    let observed = Observed {
        desired: wanted.shards,
        statefulset,
        ready: members::ready_primaries(&seen.pods, seen.topology.as_ref(), seen.replica_mode),
        topology: seen.topology.clone(),
        moving: seen.moving,
    };
    let step = scaling::next_step(&observed);
    let replicas = match step {
        Step::ScaleNodes(n) => n,
        _ => statefulset.unwrap_or(wanted.shards),
    };
    // Member StatefulSets: 0..=replicasPerShard, and any member the topology still names (going
    // down to fewer replicas, it is dropped from the topology first).
    let listed = seen.topology.as_ref().map_or(0, |t| listed_members(t, &seen.pods));
    let keep = if seen.replica_mode { wanted.replicas.max(listed) } else { 0 };
    Plan { observed, step, replicas, keep }
}

/// The highest member index whose pod the topology names (0 if none).
fn listed_members(t: &Topology, pods: &[PodView]) -> u32 {
    pods.iter()
        .filter(|p| p.addr.as_deref().is_some_and(|a| t.member(a).is_some()))
        .map(|p| p.member)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};

    use super::*;

    fn wanted(shards: u32, replicas: u32) -> Wanted {
        let key = ("shop".to_string(), "demo".to_string());
        Wanted { ns: key.0.clone(), name: key.1.clone(), key, shards, replicas }
    }

    fn sized(n: i32) -> StatefulSet {
        StatefulSet {
            spec: Some(StatefulSetSpec { replicas: Some(n), ..Default::default() }),
            ..Default::default()
        }
    }

    fn pod(member: u32, shard: u32, addr: &str) -> PodView {
        PodView {
            name: format!("demo-node-r{member}-{shard}"),
            shard,
            member,
            addr: Some(addr.into()),
            ready: true,
            terminating: false,
            outdated: false,
        }
    }

    /// Two shards, each with a replica on member 2 (listed in the topology).
    fn listed_on_member_two() -> Seen {
        let mut t = Topology::even(&["p0:1".to_string(), "p1:1".to_string()]);
        t.nodes[0].replicas = vec!["r0:1".into()];
        t.nodes[1].replicas = vec!["r1:1".into()];
        let pods = vec![pod(0, 0, "p0:1"), pod(0, 1, "p1:1"), pod(2, 0, "r0:1"), pod(2, 1, "r1:1")];
        let sets = [(0, sized(2)), (1, sized(2)), (2, sized(2))].into_iter().collect();
        Seen { topology: Some(t), replica_mode: true, sets, pods, ..Seen::default() }
    }

    #[test]
    fn a_new_cluster_scales_its_nodes_to_the_wanted_shards_first() {
        let plan = decide(&wanted(3, 0), &Seen::default());
        assert_eq!((plan.step.clone(), plan.replicas, plan.keep), (Step::ScaleNodes(3), 3, 0));
        assert_eq!(plan.observed.statefulset, None);
    }

    #[test]
    fn a_statefulset_keeps_its_size_until_a_step_changes_it() {
        let seen = Seen { sets: [(0, sized(2))].into_iter().collect(), moving: true, ..Seen::default() };
        let plan = decide(&wanted(3, 0), &seen);
        assert_eq!(plan.step, Step::Wait("resharding".into()), "a move runs: nothing else starts");
        assert_eq!(plan.replicas, 2);
    }

    #[test]
    fn going_down_to_fewer_replicas_keeps_a_member_the_topology_still_names() {
        let seen = listed_on_member_two();
        assert_eq!(decide(&wanted(2, 1), &seen).keep, 2, "member 2's pods are listed: it stays for now");
        let mut dropped = listed_on_member_two();
        for n in &mut dropped.topology.as_mut().unwrap().nodes {
            n.replicas.clear();
        }
        assert_eq!(decide(&wanted(2, 1), &dropped).keep, 1, "no longer listed: it may go");
    }

    #[test]
    fn without_replicas_only_member_zero_stays() {
        let mut seen = listed_on_member_two();
        seen.replica_mode = false;
        assert_eq!(decide(&wanted(2, 0), &seen).keep, 0);
    }
}
