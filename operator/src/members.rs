//! Who is in each shard (pure: the reconciler observes pods and the topology, this decides).
//!
//! With replicas, the pods of shard i are `<name>-node-i` (member 0) and `<name>-node-r<m>-i`
//! (member m), see [`crate::resources`]. Which of them is the primary is the failover writer's
//! decision, recorded in the topology; the operator never moves a primary on its own, except to
//! take it off a member that is going away (a lower `replicasPerShard`) by asking it for a
//! lossless hand-over first. What the operator keeps in line is each shard's replica list:
//! - a pod of the shard whose member index is wanted (at most `replicasPerShard`) and that has an
//!   address is listed, as a replica unless it is the primary;
//! - a listed replica that is no longer such a pod is dropped (its pod is gone for good, or with
//!   pod IPs it came back at another address, which is listed instead).
//!
//! New shards join a move without replicas (their primaries would otherwise start fenced, and
//! the failover writer's confirmation would land in the middle of the move); their replicas are
//! listed in the next version, once the move is done. A primary whose replicas are added later
//! is never fenced: it has been serving.
//!
//! With stable addresses (DNS names) a pod that is deleted comes back at its address, so a shard
//! whose pods are all gone comes back by itself (its primary fenced, then confirmed by the
//! writer). With pod IPs nothing comes back at the old addresses: if no listed member of a shard
//! has a pod any more, its data is gone with them and the shard restarts empty on the pods it has
//! now ([`Change::Publish`] with a new primary).
//!
//! [`next_restart`] rolls outdated pods (their StatefulSet uses `OnDelete`): one at a time, only
//! while every shard has a serving primary and every listed replica is synced, replicas first; a
//! primary's pod, when deleted, hands its shard over to a synced replica before it exits.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use shoal_wire::{Member, NodeInfo, Topology};

use crate::crd::CacheCluster;
use crate::resources::{self, AddressMode, NODE_GRPC_PORT};

/// A node pod as the reconciler saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    pub name: String,
    pub shard: u32,
    pub member: u32,
    /// The address topologies name it by; `None` while it has none (pod IPs: not running yet,
    /// or being deleted, when its IP is about to go).
    pub addr: Option<String>,
    pub ready: bool,
    pub terminating: bool,
    /// Its pod template is older than its StatefulSet's.
    pub outdated: bool,
}

/// The node pods of `cc` among `pods`, with their addresses in `mode`. `update_revisions` is
/// each member StatefulSet's `status.updateRevision` (by member index).
pub fn pod_views(
    cc: &CacheCluster,
    pods: &[Pod],
    mode: AddressMode,
    update_revisions: &BTreeMap<u32, String>,
) -> Vec<PodView> {
    let mut out: Vec<PodView> = pods
        .iter()
        .filter_map(|p| {
            let name = p.metadata.name.clone()?;
            let (member, shard) = resources::pod_place(cc, &name)?;
            let terminating = p.metadata.deletion_timestamp.is_some();
            let status = p.status.as_ref();
            let ready = !terminating
                && status
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let addr = match mode {
                // The name comes back with the pod: the address stays valid while it restarts.
                AddressMode::Dns => Some(resources::dns_address(cc, &name)),
                AddressMode::PodIp if terminating => None,
                AddressMode::PodIp => {
                    status.and_then(|s| s.pod_ip.as_ref()).map(|ip| format!("{ip}:{NODE_GRPC_PORT}"))
                }
            };
            let revision = p.labels().get("controller-revision-hash");
            let outdated = matches!((revision, update_revisions.get(&member)), (Some(r), Some(u)) if r != u);
            Some(PodView { name, shard, member, addr, ready, terminating, outdated })
        })
        .collect();
    out.sort_by_key(|p| (p.shard, p.member));
    out
}

/// Whether the cluster runs with replicas: wanted, or still in the topology (while going back
/// to none, until their addresses have left it).
pub fn replica_mode(replicas_per_shard: u32, topology: Option<&Topology>) -> bool {
    replicas_per_shard > 0 || topology.is_some_and(Topology::has_replicas)
}

/// Shards whose primary runs on a ready pod: shard id → its address. Without replicas a shard's
/// node is member 0 (whose address may have changed: pod IPs). With replicas a shard of the
/// topology is served by whichever pod has its primary's address; a shard not in it yet (a new
/// one) will start on member 0.
pub fn ready_primaries(
    pods: &[PodView],
    topology: Option<&Topology>,
    replicas: bool,
) -> BTreeMap<u32, String> {
    let member0 = |shard: u32| {
        pods.iter().find(|p| p.shard == shard && p.member == 0 && p.ready).and_then(|p| p.addr.clone())
    };
    let shards: std::collections::BTreeSet<u32> = pods.iter().map(|p| p.shard).collect();
    let mut out = BTreeMap::new();
    for shard in shards {
        let addr = match topology.and_then(|t| t.node(shard)) {
            Some(n) if replicas => pods
                .iter()
                .any(|p| p.ready && p.addr.as_deref() == Some(n.addr.as_str()))
                .then(|| n.addr.clone()),
            _ => member0(shard),
        };
        if let Some(a) = addr {
            out.insert(shard, a);
        }
    }
    out
}

/// A change of the shards' members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Publish this topology (one version up): replica lists brought in line with the pods.
    Publish { topology: Topology, why: String },
    /// The primary of `shard` at `from` is on a member that is going away: ask it to hand the
    /// shard over to `to` (a synced replica that stays) first.
    HandOver { shard: u32, from: String, to: String },
}

/// What to change in `t`'s shards so that their members are the pods of members
/// `0..=replicas_per_shard` (see the module docs). `stable` says addresses survive pod restarts
/// (DNS names); `synced` tells whether the replica at an address is synced with its primary.
/// `t` must have no migrations (a move lists its own nodes).
pub fn membership(
    t: &Topology,
    pods: &[PodView],
    replicas_per_shard: u32,
    stable: bool,
    synced: impl Fn(&str) -> bool,
) -> Option<Change> {
    // Which pod (shard, member) has each address.
    let owner: HashMap<&str, (u32, u32)> =
        pods.iter().filter_map(|p| Some((p.addr.as_deref()?, (p.shard, p.member)))).collect();
    let belongs = |addr: &str, shard: u32| owner.get(addr).is_some_and(|&(s, _)| s == shard);
    let mut next = t.clone();
    let mut why = Vec::new();
    for node in next.nodes.iter_mut() {
        let wanted: Vec<String> = pods
            .iter()
            .filter(|p| p.shard == node.id && p.member <= replicas_per_shard)
            .filter_map(|p| p.addr.clone())
            .collect();
        // The primary on a member that goes away: hand over to a synced member that stays.
        if owner.get(node.addr.as_str()).is_some_and(|&(s, m)| s == node.id && m > replicas_per_shard)
            && let Some(to) = wanted.iter().find(|a| node.replicas.contains(a) && synced(a))
        {
            return Some(Change::HandOver { shard: node.id, from: node.addr.clone(), to: to.clone() });
        }
        let alive = belongs(&node.addr, node.id) || node.replicas.iter().any(|r| belongs(r, node.id));
        if !stable
            && !alive
            && let Some((first, rest)) = wanted.split_first()
        {
            why.push(format!(
                "shard {}: no member left of {} (its data is gone); starting over on {first}",
                node.id, node.addr
            ));
            *node = NodeInfo { id: node.id, addr: first.clone(), replicas: rest.to_vec() };
            continue;
        }
        let mut replicas: Vec<String> =
            node.replicas.iter().filter(|r| wanted.contains(r) && **r != node.addr).cloned().collect();
        replicas.extend(wanted.iter().filter(|w| **w != node.addr && !node.replicas.contains(w)).cloned());
        if replicas != node.replicas {
            let dropped: Vec<&String> = node.replicas.iter().filter(|r| !replicas.contains(r)).collect();
            let added: Vec<&String> = replicas.iter().filter(|r| !node.replicas.contains(r)).collect();
            let mut what = format!("shard {}:", node.id);
            if !added.is_empty() {
                what.push_str(&format!(" replicas {added:?} added"));
            }
            if !dropped.is_empty() {
                what.push_str(&format!(" replicas {dropped:?} dropped"));
            }
            why.push(what);
            node.replicas = replicas;
        }
    }
    if why.is_empty() {
        return None;
    }
    // An address listed in two shards (a pod IP reused by another shard's new pod while the old
    // listing stays): leave the newcomer out until the other shard lets it go.
    drop_duplicates(&mut next, t);
    if next.nodes == t.nodes {
        return None;
    }
    next.version = t.version + 1;
    next.validate().ok()?;
    Some(Change::Publish { topology: next, why: why.join("; ") })
}

/// Removes replicas added to `next` whose address another shard already lists in `before`.
fn drop_duplicates(next: &mut Topology, before: &Topology) {
    for node in next.nodes.iter_mut() {
        let old = before.node(node.id).map(|n| n.replicas.clone()).unwrap_or_default();
        node.replicas.retain(|r| old.contains(r) || shard_listing(before, r).is_none_or(|s| s == node.id));
    }
}

/// The shard whose primary or replica `addr` is in `t`.
fn shard_listing(t: &Topology, addr: &str) -> Option<u32> {
    t.member(addr).map(|(Member::Primary { shard } | Member::Replica { shard })| shard)
}

/// Whether pod `name`, evicted `elapsed` ago for a restart, is back: a ready pod of that name
/// whose address the topology names, answered by a process younger than the eviction (so not
/// the old one, still stopping) that is whole there (`member` gives its uptime and whether it is
/// a serving primary or a synced replica). Until then no other pod is restarted: the pods'
/// readiness alone cannot tell (a replacement is Ready long before it has copied its shard).
pub fn restarted(
    pods: &[PodView],
    t: &Topology,
    name: &str,
    elapsed: std::time::Duration,
    member: impl Fn(&str) -> Option<(std::time::Duration, bool)>,
) -> bool {
    let Some(addr) = pods.iter().find(|p| p.name == name && p.ready).and_then(|p| p.addr.as_deref()) else {
        return false;
    };
    t.member(addr).is_some() && member(addr).is_some_and(|(uptime, whole)| whole && uptime < elapsed)
}

/// The pod to restart next to bring pods up to their StatefulSet's template, if one may go now:
/// every node pod is running and ready, no shard is short of anything (`all_synced`), and
/// replicas go before primaries (whose pods hand over when deleted).
pub fn next_restart(pods: &[PodView], t: &Topology, all_synced: bool) -> Option<String> {
    if !all_synced || pods.iter().any(|p| p.terminating || !p.ready) {
        return None;
    }
    let is_primary =
        |p: &PodView| matches!(p.addr.as_deref().and_then(|a| t.member(a)), Some(Member::Primary { .. }));
    let mut outdated: Vec<&PodView> = pods.iter().filter(|p| p.outdated).collect();
    outdated.sort_by_key(|p| (is_primary(p), p.shard, p.member));
    outdated.first().map(|p| p.name.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::tests::cluster;

    fn pod(shard: u32, member: u32, addr: &str) -> PodView {
        PodView {
            name: if member == 0 {
                format!("demo-node-{shard}")
            } else {
                format!("demo-node-r{member}-{shard}")
            },
            shard,
            member,
            addr: Some(addr.into()),
            ready: true,
            terminating: false,
            outdated: false,
        }
    }

    /// Two shards, each with member 0 at `a<i>` and member 1 at `b<i>`.
    fn pods() -> Vec<PodView> {
        vec![pod(0, 0, "a0"), pod(0, 1, "b0"), pod(1, 0, "a1"), pod(1, 1, "b1")]
    }

    fn topology(shards: &[(&str, &[&str])]) -> Topology {
        let addrs: Vec<String> = shards.iter().map(|(p, _)| p.to_string()).collect();
        let mut t = Topology::even(&addrs);
        for (n, (_, rs)) in t.nodes.iter_mut().zip(shards) {
            n.replicas = rs.iter().map(|r| r.to_string()).collect();
        }
        t
    }

    fn published(c: Option<Change>) -> Topology {
        match c {
            Some(Change::Publish { topology, .. }) => topology,
            other => panic!("expected a publish, got {other:?}"),
        }
    }

    #[test]
    fn pods_are_read_with_their_place_address_and_revision() {
        let cc = cluster(serde_json::json!({"shards": 2, "replicasPerShard": 1}));
        let pod = |name: &str, ip: Option<&str>, rev: &str, deleting: bool| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "shop",
                             "labels": {"controller-revision-hash": rev},
                             "deletionTimestamp": deleting.then_some("2026-01-01T00:00:00Z")},
                "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]}
            }))
            .unwrap()
        };
        let list = [
            pod("demo-node-r1-0", Some("127.1.0.9"), "r1-new", false),
            pod("demo-node-0", Some("127.1.0.8"), "old", false),
            pod("demo-node-1", None, "new", false),
            pod("demo-node-r1-1", Some("127.1.0.7"), "r1-new", true),
            pod("demo-router-abc", Some("127.1.0.6"), "x", false),
            pod("demo-node-r0-1", Some("127.1.0.5"), "x", false),
        ];
        let revisions = BTreeMap::from([(0, "new".to_string()), (1, "r1-new".to_string())]);
        let dns = pod_views(&cc, &list, AddressMode::Dns, &revisions);
        let places: Vec<(u32, u32)> = dns.iter().map(|p| (p.shard, p.member)).collect();
        assert_eq!(places, [(0, 0), (0, 1), (1, 0), (1, 1)], "routers and r0 are not node members");
        assert_eq!(dns[1].addr.as_deref(), Some("demo-node-r1-0.demo-node.shop.svc:7001"));
        assert_eq!(
            dns[3].addr.as_deref(),
            Some("demo-node-r1-1.demo-node.shop.svc:7001"),
            "the name comes back"
        );
        assert!(dns[3].terminating && !dns[3].ready);
        assert_eq!(dns.iter().map(|p| p.outdated).collect::<Vec<_>>(), [true, false, false, false]);
        let ips = pod_views(&cc, &list, AddressMode::PodIp, &revisions);
        let addrs: Vec<Option<&str>> = ips.iter().map(|p| p.addr.as_deref()).collect();
        assert_eq!(addrs, [Some("127.1.0.8:7001"), Some("127.1.0.9:7001"), None, None], "no IP, or going");
    }

    #[test]
    fn ready_primaries_follow_the_topology_with_replicas_and_member_0_without() {
        let mut p = pods();
        let t = topology(&[("b0", &["a0"]), ("a1", &["b1"])]);
        assert_eq!(ready_primaries(&p, Some(&t), true), BTreeMap::from([(0, "b0".into()), (1, "a1".into())]));
        p[1].ready = false; // b0, shard 0's primary
        assert_eq!(ready_primaries(&p, Some(&t), true), BTreeMap::from([(1, "a1".into())]));
        // A new shard (not in the topology) starts on member 0.
        p.push(pod(2, 0, "a2"));
        p.push(pod(2, 1, "b2"));
        assert_eq!(ready_primaries(&p, Some(&t), true).get(&2).map(String::as_str), Some("a2"));
        // Without replicas: member 0, whatever the topology says (its address may have changed).
        let plain = topology(&[("old0", &[]), ("a1", &[])]);
        assert_eq!(ready_primaries(&p, Some(&plain), false).get(&0).map(String::as_str), Some("a0"));
        assert!(replica_mode(0, Some(&t)) && replica_mode(1, None) && !replica_mode(0, Some(&plain)));
    }

    #[test]
    fn replicas_are_listed_once_their_pods_have_addresses() {
        let t = topology(&[("a0", &[]), ("a1", &[])]);
        let next = published(membership(&t, &pods(), 1, true, |_| false));
        assert_eq!(next.version, t.version + 1);
        assert_eq!(
            (next.nodes[0].replicas.clone(), next.nodes[1].replicas.clone()),
            (vec!["b0".into()], vec!["b1".into()])
        );
        assert_eq!(next.slots, t.slots, "members only: no slot moves");
        assert_eq!(membership(&next, &pods(), 1, true, |_| false), None, "in line: nothing to do");
        // A pod without an address yet waits.
        let mut p = pods();
        p[3].addr = None;
        let next = published(membership(&t, &p, 1, true, |_| false));
        assert!(next.nodes[1].replicas.is_empty());
    }

    #[test]
    fn a_failed_over_shard_keeps_its_primary_and_swaps_the_old_address_for_the_new_pod() {
        // Shard 0 failed over to b0; the old primary a0's pod came back at a new IP, c0.
        let t = topology(&[("b0", &["a0"]), ("a1", &["b1"])]);
        let mut p = pods();
        p[0].addr = Some("c0".into());
        let next = published(membership(&t, &p, 1, false, |_| false));
        assert_eq!(next.nodes[0].addr, "b0", "the operator never moves a primary");
        assert_eq!(next.nodes[0].replicas, ["c0"]);
        // The primary itself gone (before the writer promotes): it stays, the new pod is added.
        let t = topology(&[("a0", &["b0"]), ("a1", &["b1"])]);
        let next = published(membership(&t, &p, 1, false, |_| false));
        assert_eq!(
            (next.nodes[0].addr.as_str(), next.nodes[0].replicas.clone()),
            ("a0", vec!["b0".into(), "c0".into()])
        );
    }

    #[test]
    fn a_shard_with_no_member_left_restarts_on_its_pods_only_without_stable_addresses() {
        let t = topology(&[("a0", &["b0"]), ("a1", &["b1"])]);
        let mut p = pods();
        p[0].addr = Some("c0".into());
        p[1].addr = Some("d0".into());
        let next = published(membership(&t, &p, 1, false, |_| false));
        assert_eq!((next.nodes[0].addr.as_str(), next.nodes[0].replicas.clone()), ("c0", vec!["d0".into()]));
        assert_eq!(next.nodes[1], t.nodes[1]);
        // With DNS names the pods come back at their addresses: the writer deals with it.
        let mut p = pods();
        p.retain(|p| p.shard != 0);
        let next = published(membership(&t, &p, 1, true, |_| false));
        assert_eq!((next.nodes[0].addr.as_str(), next.nodes[0].replicas.len()), ("a0", 0));
    }

    #[test]
    fn fewer_replicas_hand_over_first_then_drop_the_members_that_go() {
        let mut p = pods();
        p.push(pod(0, 2, "e0"));
        p.push(pod(1, 2, "e1"));
        // Shard 0's primary is member 2 (e0), which goes when replicasPerShard drops to 1.
        let t = topology(&[("e0", &["a0", "b0"]), ("a1", &["b1", "e1"])]);
        assert_eq!(
            membership(&t, &p, 1, true, |a| a == "b0"),
            Some(Change::HandOver { shard: 0, from: "e0".into(), to: "b0".into() })
        );
        // No synced member to take over: wait (member 2 stays listed, and primary).
        let next = published(membership(&t, &p, 1, true, |_| false));
        assert_eq!(
            (next.nodes[0].addr.as_str(), next.nodes[0].replicas.clone()),
            ("e0", vec!["a0".into(), "b0".into()])
        );
        assert_eq!(next.nodes[1].replicas, ["b1"], "shard 1 drops e1");
        // After the hand-over: member 2 leaves shard 0 too.
        let t = topology(&[("b0", &["a0", "e0"]), ("a1", &["b1"])]);
        let next = published(membership(&t, &p, 1, true, |_| true));
        assert_eq!(next.nodes[0].replicas, ["a0"]);
        // Down to none: shard 0's primary is member 1 now, so it hands over to member 0 first.
        assert_eq!(
            membership(&next, &p, 0, true, |_| true),
            Some(Change::HandOver { shard: 0, from: "b0".into(), to: "a0".into() })
        );
        let t = topology(&[("a0", &["b0"]), ("a1", &["b1"])]);
        let none = published(membership(&t, &p, 0, true, |_| true));
        assert!(none.nodes.iter().all(|n| n.replicas.is_empty()) && none.nodes[0].addr == "a0");
        assert!(!replica_mode(0, Some(&none)));
    }

    #[test]
    fn an_address_another_shard_lists_is_not_taken() {
        // Shard 1's new pod got the IP shard 0 still lists for its (gone) replica.
        let t = topology(&[("a0", &["b0"]), ("a1", &[])]);
        let mut p = pods();
        p[1].addr = None; // b0's pod is gone
        p[3].addr = Some("b0".into());
        let next = published(membership(&t, &p, 1, false, |_| false));
        assert!(next.nodes[0].replicas.is_empty(), "shard 0 lets it go");
        assert!(next.nodes[1].replicas.is_empty(), "and shard 1 takes it only the next time");
        let again = published(membership(&next, &p, 1, false, |_| false));
        assert_eq!(again.nodes[1].replicas, ["b0"]);
        next.validate().unwrap();
    }

    #[test]
    fn restarts_go_one_at_a_time_replicas_first_only_when_everything_is_synced() {
        let t = topology(&[("a0", &["b0"]), ("b1", &["a1"])]);
        let mut p = pods();
        assert_eq!(next_restart(&p, &t, true), None, "nothing outdated");
        for x in &mut p {
            x.outdated = true;
        }
        assert_eq!(next_restart(&p, &t, true).as_deref(), Some("demo-node-r1-0"), "shard 0's replica");
        assert_eq!(next_restart(&p, &t, false), None, "not while a shard is short");
        p[1].outdated = false;
        assert_eq!(
            next_restart(&p, &t, true).as_deref(),
            Some("demo-node-1"),
            "shard 1's replica is member 0"
        );
        p[2].outdated = false;
        assert_eq!(next_restart(&p, &t, true).as_deref(), Some("demo-node-0"), "then the primaries");
        p[3].ready = false;
        assert_eq!(next_restart(&p, &t, true), None, "not while a pod is down");
    }

    #[test]
    fn a_restarted_pod_is_back_once_a_new_process_is_whole_at_its_address() {
        use std::time::Duration;
        let t = topology(&[("a0", &["b0"]), ("a1", &["b1"])]);
        let p = pods();
        let ago = Duration::from_secs(30);
        let young = |whole: bool| move |_: &str| Some((Duration::from_secs(5), whole));
        assert!(restarted(&p, &t, "demo-node-r1-0", ago, young(true)));
        assert!(!restarted(&p, &t, "demo-node-r1-0", ago, young(false)), "still copying");
        let old = |_: &str| Some((Duration::from_secs(300), true));
        assert!(!restarted(&p, &t, "demo-node-r1-0", ago, old), "the old process, still stopping");
        assert!(!restarted(&p, &t, "demo-node-r1-0", ago, |_: &str| None), "not answering");
        let mut q = p.clone();
        q[1].addr = Some("c0".into());
        assert!(!restarted(&q, &t, "demo-node-r1-0", ago, young(true)), "not listed at its new address yet");
        q[1].ready = false;
        assert!(!restarted(&q, &t, "demo-node-r1-0", ago, young(true)));
        assert!(!restarted(&p, &t, "demo-node-r9-0", ago, young(true)), "no such pod");
    }
}
