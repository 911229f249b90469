//! Failover: the one writer that decides who is each shard's primary.
//!
//! Every `interval` the watcher asks every member of every shard with replicas for its stats
//! (role, run id, offset, fenced, synced) and [`decide`]s, shard by shard:
//! - a primary unreachable for `down_after` is replaced by its best replica: a reachable one
//!   whose full sync is done, with the highest offset (ties: the first listed);
//! - a primary that is fenced (it started, or restarted, as a primary with replicas, so its data
//!   may be stale) is replaced by a replica that holds a copy of an earlier run of it (synced,
//!   following another run id than the primary's current one); with no such replica (a new
//!   cluster, or every replica lost its copy too) it is confirmed instead: the same topology
//!   one version later, which lets it serve.
//!
//! A decision is published as the next topology version (to the registry, then offered to every
//! member); nodes and routers switch when they see it, and versions fence whoever missed it: a
//! router ahead of a node makes it catch up, and the old primary, told it is a replica, refuses
//! writes and follows the new one. A promoted replica serves what it had acked, so a write WAIT
//! reported as replicated to it is never lost; writes it had not received yet are (with R=0, or
//! without WAIT, the loss is bounded by the replica's lag at the moment of failure).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use shoal_wire::auth::Credentials;
use shoal_wire::client::{self, ClientOptions};
use shoal_wire::proto::{NodeStats, StatsRequest, TopologyDoc};
use shoal_wire::{NodeInfo, Topology};

use crate::registry::Registry;

/// What the watcher knows of one member (by address).
#[derive(Debug, Clone, Default)]
pub struct Health {
    /// Its stats, if it answered this round.
    pub stats: Option<NodeStats>,
    /// How long it has failed to answer (zero if it answered).
    pub down_for: Duration,
}

/// One decision: the next topology and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub topology: Topology,
    pub shard: u32,
    pub reason: String,
}

/// The next topology, if some shard needs a new (or confirmed) primary. One shard per decision:
/// the next round sees the result and handles the next one.
pub fn decide(t: &Topology, health: &HashMap<String, Health>, down_after: Duration) -> Option<Decision> {
    for shard in t.nodes.iter().filter(|n| !n.replicas.is_empty()) {
        let primary = health.get(&shard.addr).cloned().unwrap_or_default();
        // A shard's verdict: `None` to look at the next shard, `Some(decision)` to stop here (a
        // topology that could not be made stops with no decision).
        let verdict = match &primary.stats {
            Some(s) if s.handing_over || !s.handover_to.is_empty() => {
                handing_over(t, shard, s, health, down_after)
            }
            _ => unhealthy(t, shard, &primary, health, down_after),
        };
        if let Some(decision) = verdict {
            return decision;
        }
    }
    None
}

/// The replica with the most of the shard's data (`exclude_run`: not one that follows that
/// run: a restarted primary's new one).
fn best(shard: &NodeInfo, health: &HashMap<String, Health>, exclude_run: Option<&str>) -> Option<String> {
    shard
        .replicas
        .iter()
        .filter_map(|r| {
            let s = health.get(r)?.stats.as_ref()?;
            let usable =
                s.role == "slave" && s.synced && exclude_run.is_none_or(|run| s.primary_run_id != run);
            // A demoted primary still holding its own run (`keep_own_copy`) counts only when no
            // replica holds a copy of another run: its offset is in its own log, not comparable
            // with theirs, and it lacks whatever its successor acked.
            let copy_of_another = s.primary_run_id != s.run_id;
            usable.then_some((r, (copy_of_another, s.repl_offset)))
        })
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(a.0)))
        .map(|(r, _)| r.clone())
}

/// A lossless hand-over (SHOAL FAILOVER, a primary's SIGTERM): while the primary waits for a
/// replica to catch up, leave the shard alone (it is paused, not stale); once it has committed
/// (at the version in use), promote the replica it names, which has acked everything. If that
/// replica has gone since, promoting it would hand the shard to a dead member and leave the data
/// with the paused primary: promote another replica that holds as much (same run, same offset:
/// the primary is paused, so nothing came after), else confirm the primary, which ends its
/// hand-over and serves again.
fn handing_over(
    t: &Topology,
    shard: &NodeInfo,
    s: &NodeStats,
    health: &HashMap<String, Health>,
    down_after: Duration,
) -> Option<Option<Decision>> {
    if s.handover_to.is_empty() || !shard.replicas.contains(&s.handover_to) || s.topology_version != t.version
    {
        return None;
    }
    let target = health.get(&s.handover_to).cloned().unwrap_or_default();
    if target.stats.as_ref().is_some_and(|r| r.role == "slave" && r.synced) {
        return Some(t.promote(shard.id, &s.handover_to).map(|topology| Decision {
            topology,
            shard: shard.id,
            reason: format!("primary {} handed over to replica {}", shard.addr, s.handover_to),
        }));
    }
    if target.stats.is_some() || target.down_for < down_after {
        return None;
    }
    let equal = shard.replicas.iter().find(|r| {
        health.get(*r).and_then(|h| h.stats.as_ref()).is_some_and(|r| {
            r.role == "slave" && r.synced && r.primary_run_id == s.run_id && r.repl_offset >= s.repl_offset
        })
    });
    Some(match equal {
        Some(r) => t.promote(shard.id, r).map(|topology| Decision {
            topology,
            shard: shard.id,
            reason: format!(
                "primary {} handed over to replica {r}: {} it had chosen is unreachable",
                shard.addr, s.handover_to
            ),
        }),
        None => Some(Decision {
            topology: t.next_version(),
            shard: shard.id,
            reason: format!(
                "primary {} confirmed: replica {} it was handing over to is unreachable",
                shard.addr, s.handover_to
            ),
        }),
    })
}

/// A primary unreachable for `down_after` (a replica replaces it, if one is usable), or one that
/// restarted fenced (a replica that holds its data replaces it, else it is confirmed).
fn unhealthy(
    t: &Topology,
    shard: &NodeInfo,
    primary: &Health,
    health: &HashMap<String, Health>,
    down_after: Duration,
) -> Option<Option<Decision>> {
    match &primary.stats {
        None if primary.down_for >= down_after => {
            let r = best(shard, health, None)?;
            Some(t.promote(shard.id, &r).map(|topology| Decision {
                topology,
                shard: shard.id,
                reason: format!(
                    "primary {} unreachable for {} ms; promoted replica {r}",
                    shard.addr,
                    primary.down_for.as_millis()
                ),
            }))
        }
        Some(s) if s.fenced => Some(match best(shard, health, Some(&s.run_id)) {
            Some(r) => t.promote(shard.id, &r).map(|topology| Decision {
                topology,
                shard: shard.id,
                reason: format!(
                    "primary {} restarted; promoted replica {r}, which holds its data",
                    shard.addr
                ),
            }),
            None => Some(Decision {
                topology: t.next_version(),
                shard: shard.id,
                reason: format!("primary {} started and no replica holds more; confirmed", shard.addr),
            }),
        }),
        _ => None,
    }
}

/// Settings of the watcher.
#[derive(Debug, Clone)]
pub struct FailoverOptions {
    /// How long a primary may be unreachable before a replica replaces it.
    pub down_after: Duration,
    /// How often members are checked.
    pub interval: Duration,
    /// How long one stats call may take.
    pub probe_timeout: Duration,
    /// What the writer's calls carry (cluster secret, node-link TLS).
    pub credentials: Credentials,
}

impl Default for FailoverOptions {
    fn default() -> Self {
        FailoverOptions {
            down_after: Duration::from_millis(1000),
            interval: Duration::from_millis(100),
            probe_timeout: Duration::from_millis(300),
            credentials: Credentials::default(),
        }
    }
}

/// A probe's answer: the member's client (kept for the next probe) and its stats.
type Answer = Option<(client::Client, NodeStats)>;

/// The writer's probes of the members: one round asks every member for its stats at once, and
/// waits for the members that answered last time. A member found not answering is probed in
/// the background instead (one probe at a time, each within the probe timeout), its answer
/// taken up by the first round after it arrives: a member that is restarting, or whose address
/// leads nowhere for a while, must not hold up the rounds whose probes renew every other
/// primary's lease (two rounds slowed to connect timeout + call timeout each let leases lapse,
/// which is what happened at an operator hand-over while a node pod restarted).
struct Prober {
    options: ClientOptions,
    clients: HashMap<String, client::Client>,
    /// When each member that stopped answering was first found not answering.
    down_since: HashMap<String, Instant>,
    /// The lease on primaries (node/src/membership/lease.rs): each round's probes carry the
    /// round's number and, per member, the last probe whose answer came back. Numbers start from
    /// the time this writer started, so a restarted writer never names a probe of another.
    round: u64,
    answered: HashMap<String, u64>,
    down_after_ms: u64,
    /// Probes of members not answering: each one's number and task.
    background: HashMap<String, (u64, tokio::task::JoinHandle<Answer>)>,
}

impl Prober {
    fn new(options: &FailoverOptions) -> Prober {
        Prober {
            options: ClientOptions {
                connect_timeout: options.probe_timeout,
                request_timeout: Some(options.probe_timeout),
                keep_alive: false,
                credentials: options.credentials.clone(),
            },
            clients: HashMap::new(),
            down_since: HashMap::new(),
            round: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_micros() as u64),
            answered: HashMap::new(),
            down_after_ms: options.down_after.as_millis() as u64,
            background: HashMap::new(),
        }
    }

    /// One probe of `addr`, numbered `probe`, within the probe timeout (connecting first if
    /// there is no client).
    fn probe(&self, addr: &str, probe: u64) -> impl std::future::Future<Output = Answer> + Send + 'static {
        let (cached, options, addr) =
            (self.clients.get(addr).cloned(), self.options.clone(), addr.to_string());
        let request = StatsRequest {
            failover_writer: true,
            probe,
            acked_probe: self.answered.get(&addr).copied().unwrap_or(0),
            down_after_ms: self.down_after_ms,
        };
        async move {
            let mut c = match cached {
                Some(c) => c,
                None => client::connect(&addr, &options).await.ok()?,
            };
            let s = tokio::time::timeout(options.connect_timeout, c.stats(request)).await.ok()?.ok()?;
            Some((c, s.into_inner()))
        }
    }

    /// Probes every member once; how each stands.
    async fn round(&mut self, members: &[String]) -> HashMap<String, Health> {
        self.round += 1;
        let round = self.round;
        self.background.retain(|addr, (_, task)| {
            let keep = members.contains(addr);
            if !keep {
                task.abort();
            }
            keep
        });
        // Background probes that have finished, with the number each carried.
        let mut answers: HashMap<&String, (u64, Answer)> = HashMap::new();
        for addr in members {
            if self.background.get(addr).is_some_and(|(_, task)| task.is_finished()) {
                let (probe, task) = self.background.remove(addr).expect("just seen");
                answers.insert(addr, (probe, task.await.ok().flatten()));
            }
        }
        // The rest: those that answered last time are waited for; those that did not (and have
        // no probe out, or one that just failed) get one in the background.
        let mut waited = Vec::new();
        for addr in members {
            let answered = answers.get(addr).is_some_and(|(_, a)| a.is_some());
            if answered || self.background.contains_key(addr) {
                continue;
            }
            if self.down_since.contains_key(addr) {
                let task = tokio::spawn(self.probe(addr, round));
                self.background.insert(addr.clone(), (round, task));
            } else {
                waited.push((addr, self.probe(addr, round)));
            }
        }
        let (addrs, asks): (Vec<_>, Vec<_>) = waited.into_iter().unzip();
        for (addr, answer) in addrs.into_iter().zip(join_all(asks).await) {
            answers.insert(addr, (round, answer));
        }
        let mut health = HashMap::new();
        for addr in members {
            let now = Instant::now();
            let h = match answers.remove(addr) {
                Some((probe, Some((c, s)))) => {
                    self.clients.insert(addr.clone(), c);
                    self.answered.insert(addr.clone(), probe);
                    self.down_since.remove(addr);
                    Health { stats: Some(s), down_for: Duration::ZERO }
                }
                answer => {
                    if answer.is_some() {
                        // Counting down from the last answer: no lease from this writer until
                        // the member answers again (its down-after may be running out).
                        self.clients.remove(addr);
                        self.answered.remove(addr);
                    }
                    let since = *self.down_since.entry(addr.clone()).or_insert(now);
                    Health { stats: None, down_for: now - since }
                }
            };
            health.insert(addr.clone(), h);
        }
        health
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.background.values().for_each(|(_, task)| task.abort());
    }
}

/// Watches the topology in `registry` and publishes failovers until `stop` resolves. `on_decision`
/// sees each decision once published (logs, events, tests).
pub async fn watch<R: Registry>(
    registry: &R,
    options: FailoverOptions,
    on_decision: impl Fn(&Decision),
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut prober = Prober::new(&options);
    // Rounds start every `interval` (a round slowed by an unreachable member's probe timeout is
    // followed at once by the next), so the leases of the members that answer are renewed at
    // least every probe timeout, well inside a down-after.
    let mut rounds = tokio::time::interval(options.interval);
    rounds.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    rounds.tick().await;
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = rounds.tick() => {}
        }
        let t = match registry.load().await {
            Ok(Some(t)) if t.has_replicas() => t,
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "failover: cannot read the topology");
                continue;
            }
        };
        let members: Vec<String> =
            t.nodes.iter().flat_map(|n| std::iter::once(n.addr.clone()).chain(n.replicas.clone())).collect();
        let health = prober.round(&members).await;
        // A member that missed a version (stopped, partitioned, or on a topology source that
        // lags) is brought up to date: a returning old primary learns it is a replica now.
        let lagging: Vec<String> = members
            .iter()
            .filter(|a| {
                health.get(*a).and_then(|h| h.stats.as_ref()).is_some_and(|s| s.topology_version < t.version)
            })
            .cloned()
            .collect();
        if !lagging.is_empty() {
            // Debug: a member that keeps refusing would log this every round (the node logs the
            // topology it adopts itself).
            tracing::debug!(version = t.version, members = ?lagging, "failover: offering the topology to members behind it");
            offer(&prober.clients, &lagging, &t, options.probe_timeout).await;
        }
        let Some(decision) = decide(&t, &health, options.down_after) else { continue };
        if let Err(e) = registry.publish(&decision.topology).await {
            tracing::warn!(error = %e, "failover: could not publish");
            continue;
        }
        tracing::warn!(version = decision.topology.version, shard = decision.shard, reason = %decision.reason, "failover");
        // Offered at once (nodes also follow the registry): the new primary serves now.
        offer(&prober.clients, &members, &decision.topology, options.probe_timeout).await;
        on_decision(&decision);
    }
}

/// Offers `t` to `members` (those with a client), each call bounded by `limit`.
async fn offer(clients: &HashMap<String, client::Client>, members: &[String], t: &Topology, limit: Duration) {
    let doc = TopologyDoc { json: t.to_json() };
    let offers = members.iter().filter_map(|addr| clients.get(addr).cloned()).map(|mut c| {
        let doc = doc.clone();
        async move {
            let _ = tokio::time::timeout(limit, c.update_topology(doc)).await;
        }
    });
    join_all(offers).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(role: &str, run: &str, offset: u64, fenced: bool, synced: bool, following: &str) -> Health {
        Health {
            stats: Some(NodeStats {
                role: role.into(),
                run_id: run.into(),
                repl_offset: offset,
                fenced,
                synced,
                primary_run_id: following.into(),
                topology_version: cluster().version,
                ..Default::default()
            }),
            down_for: Duration::ZERO,
        }
    }

    fn cluster() -> Topology {
        let mut t = Topology::even(&["p0".into(), "p1".into()]);
        t.nodes[0].replicas = vec!["r0a".into(), "r0b".into()];
        t.nodes[1].replicas = vec!["r1".into()];
        t
    }

    fn healthy() -> HashMap<String, Health> {
        HashMap::from([
            ("p0".into(), stats("master", "run-p0", 10, false, false, "")),
            ("r0a".into(), stats("slave", "run-r0a", 10, false, true, "run-p0")),
            ("r0b".into(), stats("slave", "run-r0b", 9, false, true, "run-p0")),
            ("p1".into(), stats("master", "run-p1", 5, false, false, "")),
            ("r1".into(), stats("slave", "run-r1", 5, false, true, "run-p1")),
        ])
    }

    const DOWN: Duration = Duration::from_secs(1);

    #[test]
    fn a_healthy_cluster_is_left_alone() {
        assert_eq!(decide(&cluster(), &healthy(), DOWN), None);
    }

    #[test]
    fn a_primary_down_long_enough_is_replaced_by_the_most_advanced_synced_replica() {
        let mut h = healthy();
        h.insert("p0".into(), Health { stats: None, down_for: Duration::from_millis(500) });
        assert_eq!(decide(&cluster(), &h, DOWN), None, "not down long enough yet");
        h.get_mut("p0").unwrap().down_for = DOWN;
        let d = decide(&cluster(), &h, DOWN).unwrap();
        assert_eq!(d.shard, 0);
        assert_eq!(d.topology.nodes[0].addr, "r0a", "the highest offset wins");
        assert_eq!(d.topology.nodes[0].replicas, vec!["r0b".to_string(), "p0".to_string()]);
        assert_eq!(d.topology.version, 2);
        // An unsynced replica is never promoted, however far along.
        h.insert("r0a".into(), stats("slave", "run-r0a", 99, false, false, ""));
        assert_eq!(decide(&cluster(), &h, DOWN).unwrap().topology.nodes[0].addr, "r0b");
        h.remove("r0b");
        assert_eq!(decide(&cluster(), &h, DOWN), None, "no usable replica: wait for the primary");
    }

    #[test]
    fn a_hand_over_promotes_the_replica_it_committed_to_and_is_left_alone_before() {
        let mut h = healthy();
        // Paused, waiting for a replica: fenced-looking, but neither confirmed nor replaced.
        let mut paused = stats("master", "run-p0", 10, true, false, "");
        paused.stats.as_mut().unwrap().handing_over = true;
        h.insert("p0".into(), paused.clone());
        assert_eq!(decide(&cluster(), &h, DOWN), None);
        // Committed to the less advanced replica (the one asked for): that one is promoted.
        paused.stats.as_mut().unwrap().handover_to = "r0b".into();
        h.insert("p0".into(), paused.clone());
        let d = decide(&cluster(), &h, DOWN).unwrap();
        assert_eq!((d.shard, d.topology.nodes[0].addr.as_str()), (0, "r0b"));
        assert_eq!(d.topology.nodes[0].replicas, vec!["r0a".to_string(), "p0".to_string()]);
        // A commit made at another version than the one in use is not this topology's business.
        let mut older = paused.clone();
        older.stats.as_mut().unwrap().topology_version = 0;
        h.insert("p0".into(), older);
        assert_eq!(decide(&cluster(), &h, DOWN), None);
        // A name that is not a replica of the shard is ignored (and the pause respected).
        paused.stats.as_mut().unwrap().handover_to = "p1".into();
        h.insert("p0".into(), paused);
        assert_eq!(decide(&cluster(), &h, DOWN), None);
    }

    #[test]
    fn a_hand_over_to_a_replica_that_died_goes_to_an_equal_replica_or_back_to_the_primary() {
        let mut h = healthy();
        let mut committed = stats("master", "run-p0", 10, true, false, "");
        committed.stats.as_mut().unwrap().handing_over = true;
        committed.stats.as_mut().unwrap().handover_to = "r0a".into();
        h.insert("p0".into(), committed);
        // The chosen replica stops answering: not promoted (a dead primary would hold the shard),
        // and nothing is decided before it has been gone for `down_after`.
        h.insert("r0a".into(), Health { stats: None, down_for: Duration::from_millis(200) });
        assert_eq!(decide(&cluster(), &h, DOWN), None);
        h.get_mut("r0a").unwrap().down_for = DOWN;
        // r0b is at offset 9 of the paused primary's 10: it lacks acknowledged writes, so the
        // primary is confirmed (same members, next version) and serves again.
        let d = decide(&cluster(), &h, DOWN).unwrap();
        assert_eq!(d.topology.nodes, cluster().nodes);
        assert_eq!(d.topology.version, cluster().version + 1);
        assert!(d.reason.contains("confirmed"), "{}", d.reason);
        // r0b at the primary's offset holds everything: promoted instead.
        h.insert("r0b".into(), stats("slave", "run-r0b", 10, false, true, "run-p0"));
        let d = decide(&cluster(), &h, DOWN).unwrap();
        assert_eq!(d.topology.nodes[0].addr, "r0b");
        // ... but not one at that offset of another run (a copy of some other primary's data).
        h.insert("r0b".into(), stats("slave", "run-r0b", 10, false, true, "run-old"));
        assert_eq!(decide(&cluster(), &h, DOWN).unwrap().topology.nodes[0].addr, "p0");
        // A chosen replica that answers but has lost its copy (restarted, resyncing) is no
        // candidate either; wait for it (it is up, so it may still catch up).
        h.insert("r0a".into(), stats("slave", "run-r0a-2", 0, false, false, ""));
        assert_eq!(decide(&cluster(), &h, DOWN), None);
    }

    #[test]
    fn a_demoted_primary_holding_its_own_run_is_promoted_only_when_no_replica_holds_another() {
        // p0 was demoted (partitioned, replaced by r0a) and still reports a copy of its own run
        // at a high offset of its own log; r0a then died. r0b follows r0a's run: it holds what
        // r0a acked since (WAIT included), so it wins whatever the offsets say.
        let mut t = cluster();
        t.nodes[0].addr = "r0a".into();
        t.nodes[0].replicas = vec!["r0b".into(), "p0".into()];
        let mut h = healthy();
        h.insert("r0a".into(), Health { stats: None, down_for: DOWN });
        h.insert("p0".into(), stats("slave", "run-p0", 999, false, true, "run-p0"));
        h.insert("r0b".into(), stats("slave", "run-r0b", 5, false, true, "run-r0a"));
        assert_eq!(decide(&t, &h, DOWN).unwrap().topology.nodes[0].addr, "r0b");
        // Nobody copied r0a (r0b lost its copy): the old primary's own data is the best left.
        h.insert("r0b".into(), stats("slave", "run-r0b", 0, false, false, ""));
        assert_eq!(decide(&t, &h, DOWN).unwrap().topology.nodes[0].addr, "p0");
    }

    #[test]
    fn a_fenced_primary_is_replaced_by_a_replica_of_its_earlier_run_or_confirmed() {
        let mut h = healthy();
        // p1 restarted (new run id, fenced); r1 holds a copy of its earlier run.
        h.insert("p1".into(), stats("master", "run-p1-new", 0, true, false, ""));
        let d = decide(&cluster(), &h, DOWN).unwrap();
        assert_eq!((d.shard, d.topology.nodes[1].addr.as_str()), (1, "r1"));
        // A new cluster: the replica has nothing of an earlier run; confirm the primary.
        h.insert("r1".into(), stats("slave", "run-r1", 0, false, false, ""));
        let d = decide(&cluster(), &h, DOWN).unwrap();
        assert_eq!(d.topology.nodes, cluster().nodes, "same members");
        assert_eq!(d.topology.version, 2);
    }
}

#[cfg(test)]
mod prober_tests {
    use super::*;

    /// A member whose address accepts connections and never answers (a listener that never
    /// accepts: the kernel completes the handshake, HTTP/2's never comes) holds up the first round
    /// that probes it, by the probe timeout, and no round after it: later rounds see it down, for
    /// longer each time, while its probes run in the background one at a time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_member_that_does_not_answer_holds_up_one_round_only() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = silent.local_addr().unwrap().to_string();
        let options = FailoverOptions { probe_timeout: Duration::from_millis(300), ..Default::default() };
        let mut prober = Prober::new(&options);
        let members = vec![addr.clone()];

        let started = Instant::now();
        let first = prober.round(&members).await;
        assert!(started.elapsed() >= Duration::from_millis(250), "{:?}", started.elapsed());
        assert!(first[&addr].stats.is_none());

        let mut last_down = Duration::ZERO;
        let mut probes = std::collections::BTreeSet::new();
        let watching = Instant::now();
        while watching.elapsed() < Duration::from_millis(1500) {
            let started = Instant::now();
            let h = prober.round(&members).await;
            assert!(
                started.elapsed() < Duration::from_millis(100),
                "a round waited: {:?}",
                started.elapsed()
            );
            assert!(h[&addr].stats.is_none());
            assert!(h[&addr].down_for >= last_down);
            last_down = h[&addr].down_for;
            assert_eq!(prober.background.len(), 1, "one probe out at a time");
            probes.insert(prober.background[&addr].0);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(last_down >= Duration::from_millis(1400), "{last_down:?}");
        // Each background probe ends at its timeout and the next round starts another.
        assert!((3..=8).contains(&probes.len()), "{probes:?}");
        drop(silent);
    }
}
