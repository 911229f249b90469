//! The shards' health with replicas: every member of the topology asked for its stats over gRPC
//! ([`probe`]), and what that says per shard ([`shards`], pure): is the primary serving, which
//! replicas are synced with it and how far behind they are. Status, the Degraded condition, the
//! per-shard PodDisruptionBudgets and the pod restarts all read it.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::join_all;
use shoal_wire::Topology;
use shoal_wire::auth::{ClusterSecret, Credentials};
use shoal_wire::client::{self, ClientOptions};
use shoal_wire::proto::{NodeStats, StatsRequest};

/// How long one member may take to answer.
const PROBE_TIMEOUT: Duration = Duration::from_millis(800);

/// Stats of every member of `t` that answered, by address (calls carry `secret`).
pub async fn probe(t: &Topology, secret: &ClusterSecret) -> BTreeMap<String, NodeStats> {
    let members: Vec<String> =
        t.nodes.iter().flat_map(|n| std::iter::once(n.addr.clone()).chain(n.replicas.clone())).collect();
    let options = ClientOptions {
        connect_timeout: PROBE_TIMEOUT,
        request_timeout: Some(PROBE_TIMEOUT),
        keep_alive: false,
        credentials: Credentials::secret(Some(secret.clone())),
    };
    let asks = members.iter().map(|addr| {
        let options = options.clone();
        // One bound for the whole exchange: the connect timeout covers the TCP connect only, and
        // a process that accepts but never answers (stopped, overloaded) would hold the HTTP/2
        // handshake, and the reconcile, forever.
        tokio::time::timeout(2 * PROBE_TIMEOUT, async move {
            let mut c = client::connect(addr, &options).await.ok()?;
            // Not `failover_writer`: only the writer's own probes may tell a primary that a
            // writer is watching (which lets it hand over).
            let s = c.stats(StatsRequest::default()).await.ok()?;
            Some(s.into_inner())
        })
    });
    members.iter().cloned().zip(join_all(asks).await).filter_map(|(a, s)| Some((a, s.ok()??))).collect()
}

/// One shard's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardHealth {
    pub id: u32,
    pub primary: String,
    /// The primary answered, as a primary that serves (not fenced, not pausing for a hand-over).
    pub primary_serving: bool,
    pub replicas: Vec<ReplicaHealth>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaHealth {
    pub addr: String,
    /// Answered as a replica whose full sync is done, following this shard's primary.
    pub synced: bool,
    /// Changes of the primary's stream it has not applied (None: either did not answer).
    pub lag: Option<u64>,
    /// Since it last acked while behind, as the primary counts (None: the primary does not list it).
    pub lag_ms: Option<u64>,
}

impl ShardHealth {
    /// Losing any one member leaves the data on a serving primary or a synced replica.
    pub fn redundant(&self) -> bool {
        self.primary_serving && self.replicas.iter().any(|r| r.synced)
    }

    /// Nothing to wait for: the primary serves and every replica listed is synced.
    pub fn complete(&self) -> bool {
        self.primary_serving && !self.replicas.is_empty() && self.replicas.iter().all(|r| r.synced)
    }

    /// Why the shard is short, if it is (for the Degraded condition).
    pub fn problem(&self) -> Option<String> {
        if !self.primary_serving {
            return Some(format!("shard {}: primary {} is not serving", self.id, self.primary));
        }
        if !self.replicas.iter().any(|r| r.synced) {
            return Some(format!("shard {}: no synced replica", self.id));
        }
        None
    }
}

/// Whether `addr` is a replica synced with its shard's primary, in `shards`.
pub fn synced(shards: &[ShardHealth], addr: &str) -> bool {
    shards.iter().flat_map(|h| &h.replicas).any(|r| r.addr == addr && r.synced)
}

/// Whether the process at `addr` does its whole part, in `shards`: a serving primary or a synced
/// replica.
pub fn whole(shards: &[ShardHealth], addr: &str) -> bool {
    shards.iter().any(|h| h.primary == addr && h.primary_serving) || synced(shards, addr)
}

/// Each shard of `t` as `stats` (from [`probe`]) show it.
pub fn shards(t: &Topology, stats: &BTreeMap<String, NodeStats>) -> Vec<ShardHealth> {
    t.nodes
        .iter()
        .map(|n| {
            let primary = stats.get(&n.addr);
            let primary_serving = primary.is_some_and(|p| p.role == "master" && !p.fenced && !p.handing_over);
            let replicas = n
                .replicas
                .iter()
                .map(|addr| {
                    let s = stats.get(addr);
                    let follows_this_primary = s.is_some_and(|s| {
                        s.primary_addr == n.addr && primary.is_none_or(|p| p.run_id == s.primary_run_id)
                    });
                    ReplicaHealth {
                        addr: addr.clone(),
                        synced: s.is_some_and(|s| s.role == "slave" && s.synced) && follows_this_primary,
                        lag: match (primary, s) {
                            (Some(p), Some(s)) if follows_this_primary => {
                                Some(p.repl_offset.saturating_sub(s.repl_offset))
                            }
                            _ => None,
                        },
                        lag_ms: primary
                            .and_then(|p| p.replicas.iter().find(|r| r.addr == *addr))
                            .map(|r| r.lag_ms),
                    }
                })
                .collect();
            ShardHealth { id: n.id, primary: n.addr.clone(), primary_serving, replicas }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use shoal_wire::proto::ReplicaInfo;

    use super::*;

    fn primary(run: &str, offset: u64) -> NodeStats {
        NodeStats { role: "master".into(), run_id: run.into(), repl_offset: offset, ..Default::default() }
    }

    fn replica(of: &str, run: &str, offset: u64, synced: bool) -> NodeStats {
        NodeStats {
            role: "slave".into(),
            primary_addr: of.into(),
            primary_run_id: run.into(),
            repl_offset: offset,
            synced,
            ..Default::default()
        }
    }

    fn topology() -> Topology {
        let mut t = Topology::even(&["p0".into(), "p1".into()]);
        t.nodes[0].replicas = vec!["r0".into()];
        t.nodes[1].replicas = vec!["r1".into()];
        t
    }

    #[test]
    fn a_synced_replica_of_a_serving_primary_makes_a_shard_redundant() {
        let mut p0 = primary("run0", 100);
        p0.replicas = vec![ReplicaInfo { addr: "r0".into(), acked_offset: 90, lag_ms: 40, synced: true }];
        let stats = BTreeMap::from([
            ("p0".to_string(), p0),
            ("r0".to_string(), replica("p0", "run0", 90, true)),
            ("p1".to_string(), primary("run1", 5)),
            ("r1".to_string(), replica("p1", "run1", 0, false)),
        ]);
        let h = shards(&topology(), &stats);
        assert!(h[0].redundant() && h[0].complete() && h[0].problem().is_none());
        assert_eq!((h[0].replicas[0].lag, h[0].replicas[0].lag_ms), (Some(10), Some(40)));
        assert!(!h[1].redundant(), "r1 is still in its full sync");
        assert!(synced(&h, "r0") && !synced(&h, "r1") && !synced(&h, "p0"));
        assert!(whole(&h, "p0") && whole(&h, "r0") && whole(&h, "p1") && !whole(&h, "r1") && !whole(&h, "x"));
        assert_eq!(h[1].problem().as_deref(), Some("shard 1: no synced replica"));
    }

    #[test]
    fn a_primary_down_fenced_or_handing_over_is_not_serving() {
        let mut stats = BTreeMap::from([("r0".to_string(), replica("p0", "run0", 9, true))]);
        let h = shards(&topology(), &stats);
        assert_eq!(h[0].problem().as_deref(), Some("shard 0: primary p0 is not serving"));
        assert!(h[0].replicas[0].synced, "a synced replica of a primary that is down still counts");
        assert_eq!(h[0].replicas[0].lag, None);
        let mut fenced = primary("run0b", 0);
        fenced.fenced = true;
        stats.insert("p0".into(), fenced);
        let h = shards(&topology(), &stats);
        assert!(!h[0].primary_serving);
        assert!(!h[0].replicas[0].synced, "it holds an earlier run of p0, not this one");
        let mut pausing = primary("run0", 9);
        pausing.handing_over = true;
        stats.insert("p0".into(), pausing);
        assert!(!shards(&topology(), &stats)[0].primary_serving);
    }

    #[test]
    fn a_replica_following_another_primary_is_not_synced_with_this_one() {
        let stats = BTreeMap::from([
            ("p0".to_string(), primary("run0", 5)),
            ("r0".to_string(), replica("old-primary", "runX", 5, true)),
        ]);
        let h = shards(&topology(), &stats);
        assert!(!h[0].replicas[0].synced && h[0].replicas[0].lag.is_none());
    }
}
