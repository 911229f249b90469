//! The resharding coordinator: the one writer of the topology.
//!
//! A resharding step is:
//! 1. publish version v+1 (the plan: new owners, and the migrations in flight);
//! 2. offer it to every node listed (UpdateTopology) until each serves at least v+1; a node that
//!    is down is retried, so a step waits for it rather than skipping it;
//! 3. wait while each new owner pulls its incoming ranges from the old owner and reports progress
//!    in its stats;
//! 4. publish v+2, the same slots with no migrations and without the nodes that left, and offer it
//!    to every node (old owners then drop the slots they gave away).
//!
//! The coordinator keeps nothing but what it published: restarted at any point, [`Coordinator::resume`]
//! (or the next `reshard`) sees migrations in the published topology and carries on from step 2.
//! Nodes restarted mid-step reload the topology and restart their pulls; a pulled entry never
//! replaces what the receiver already has, so repeating a pull is harmless.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use shoal_wire::auth::Credentials;
use shoal_wire::client::{self, ClientOptions};
use shoal_wire::proto::{MigrationProgress, StatsRequest, TopologyDoc};
use shoal_wire::{Migration, NodeInfo, Topology};

use crate::plan::{self, PlanError};
use crate::registry::{Registry, RegistryError};

#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    #[error(transparent)]
    Store(#[from] RegistryError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("no topology has been published yet")]
    NoTopology,
    #[error("gave up after {0:?} waiting for {1}")]
    Timeout(Duration, String),
}

/// A snapshot of a step's progress, for display.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    pub version: u64,
    pub migrations: usize,
    pub migrations_done: usize,
    pub slots_total: u64,
    pub slots_done: u64,
    pub keys_moved: u64,
    pub bytes_moved: u64,
    /// About how many keys the step moves in all (as the old owners counted them).
    pub keys_estimate: u64,
    /// How long the longest pull of this step has been running (or took).
    pub elapsed_ms: u64,
}

type ProgressFn = Box<dyn Fn(&Progress) + Send + Sync>;

/// A topology published after the one a step works on.
enum Newer {
    /// The same migrations (a failover writer replaced a primary): the step follows it.
    SameMove(Topology),
    /// No migrations left: someone else finished the move.
    Settled(Topology),
}

/// How the coordinator reaches nodes: it offers them topologies and reads their migration
/// progress. [`GrpcNodes`] in production; tests drive the coordinator with fake nodes.
pub trait Nodes: Send + Sync {
    /// Offers `t` to `node`; returns the version it serves afterwards.
    fn offer(&self, node: &NodeInfo, t: &Topology) -> impl Future<Output = Result<u64, String>> + Send;
    /// The topology version `node` serves and the progress of the migrations into it.
    fn progress(
        &self,
        node: &NodeInfo,
    ) -> impl Future<Output = Result<(u64, Vec<MigrationProgress>), String>> + Send;
}

/// Nodes over gRPC (`UpdateTopology`, `Stats`), every call carrying `credentials`.
#[derive(Debug, Clone, Default)]
pub struct GrpcNodes {
    pub credentials: Credentials,
}

impl GrpcNodes {
    fn options(&self) -> ClientOptions {
        ClientOptions::admin().with_credentials(self.credentials.clone())
    }
}

impl Nodes for GrpcNodes {
    async fn offer(&self, node: &NodeInfo, t: &Topology) -> Result<u64, String> {
        let mut c = client::connect(&node.addr, &self.options()).await.map_err(|e| e.to_string())?;
        let ack = c
            .update_topology(TopologyDoc { json: t.to_json() })
            .await
            .map_err(|s| s.message().to_string())?;
        Ok(ack.into_inner().version)
    }

    async fn progress(&self, node: &NodeInfo) -> Result<(u64, Vec<MigrationProgress>), String> {
        let mut c = client::connect(&node.addr, &self.options()).await.map_err(|e| e.to_string())?;
        let s = c.stats(StatsRequest::default()).await.map_err(|s| s.message().to_string())?.into_inner();
        Ok((s.topology_version, s.migrations))
    }
}

pub struct Coordinator<S, N = GrpcNodes> {
    nodes: N,
    store: S,
    poll: Duration,
    /// How long one step may take before giving up (the published topology stays, so a later
    /// run resumes it).
    step_timeout: Duration,
    on_progress: ProgressFn,
}

impl<S, N> std::fmt::Debug for Coordinator<S, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator").field("poll", &self.poll).finish_non_exhaustive()
    }
}

impl<S: Registry> Coordinator<S> {
    /// A coordinator that reaches nodes over gRPC, its calls carrying `credentials`.
    pub fn new(store: S, credentials: Credentials) -> Coordinator<S> {
        Coordinator::with_nodes(store, GrpcNodes { credentials })
    }
}

impl<S: Registry, N: Nodes> Coordinator<S, N> {
    /// A coordinator that reaches nodes through `nodes`.
    pub fn with_nodes(store: S, nodes: N) -> Coordinator<S, N> {
        Coordinator {
            nodes,
            store,
            poll: Duration::from_millis(100),
            step_timeout: Duration::from_secs(3600),
            on_progress: Box::new(|_| {}),
        }
    }

    pub fn with_progress(mut self, f: impl Fn(&Progress) + Send + Sync + 'static) -> Self {
        self.on_progress = Box::new(f);
        self
    }

    pub fn with_timeout(mut self, step_timeout: Duration) -> Self {
        self.step_timeout = step_timeout;
        self
    }

    /// How often nodes are asked again (offers to nodes that are down, migration progress).
    pub fn with_poll(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    /// Moves the cluster onto exactly the nodes in `target`, finishing any step in flight first.
    /// Returns the final topology.
    pub async fn reshard(&self, target: &[NodeInfo]) -> Result<Topology, CoordinatorError> {
        self.reshard_with(target, &self.on_progress).await
    }

    /// Like [`reshard`](Self::reshard), reporting progress to `report`.
    pub async fn reshard_with(
        &self,
        target: &[NodeInfo],
        report: &(dyn Fn(&Progress) + Send + Sync),
    ) -> Result<Topology, CoordinatorError> {
        self.step(|current| plan::plan(current, target), report).await
    }

    /// Moves the slots `start..=end` onto node `to` (a member), finishing any step in flight
    /// first ([`plan::move_slots`]). Returns the final topology.
    pub async fn move_slots(&self, start: u16, end: u16, to: u32) -> Result<Topology, CoordinatorError> {
        self.step(|current| plan::move_slots(current, start, end, to), &self.on_progress).await
    }

    /// Finishes any step in flight, then publishes what `next` plans from the current topology
    /// and drives it to the end.
    async fn step(
        &self,
        next: impl Fn(&Topology) -> Result<Topology, PlanError>,
        report: &(dyn Fn(&Progress) + Send + Sync),
    ) -> Result<Topology, CoordinatorError> {
        loop {
            let current = self.store.load().await?.ok_or(CoordinatorError::NoTopology)?;
            if !current.migrations.is_empty() {
                self.finish(&current, report).await?;
                continue;
            }
            let next = next(&current)?;
            if next.migrations.is_empty() && next.nodes == current.nodes {
                // Already there; make sure every node serves it (or a newer version of it).
                if self.offer_all(&current, &current.nodes).await?.is_some() {
                    continue;
                }
                return Ok(current);
            }
            tracing::info!(
                version = next.version,
                slots = next.migrating_slots(),
                migrations = next.migrations.len(),
                "publishing a resharding plan"
            );
            match self.store.publish(&next).await {
                // Someone else published meanwhile (a failover writer): plan again from theirs.
                Err(RegistryError::Stale { .. }) => continue,
                r => r?,
            }
            return self.finish(&next, report).await;
        }
    }

    /// Finishes the step in flight, if any. Returns the topology the cluster ends on.
    pub async fn resume(&self) -> Result<Topology, CoordinatorError> {
        let mut current = self.store.load().await?.ok_or(CoordinatorError::NoTopology)?;
        if current.migrations.is_empty() {
            while let Some(newer) = self.offer_all(&current, &current.nodes).await? {
                current = newer;
            }
            return Ok(current);
        }
        self.finish(&current, &self.on_progress).await
    }

    /// Steps 2-4 for the published topology `t`.
    ///
    /// A failover writer may publish while a move runs (a shard's primary replaced): the same
    /// migrations at a newer version, with other members. The step then carries on from that
    /// version (offered to its members; the receivers restart their pulls for it, which repeat
    /// harmlessly) instead of waiting for reports that now come at another version, and the final
    /// topology is built from it, so the promotion is kept.
    async fn finish(
        &self,
        t: &Topology,
        report: &(dyn Fn(&Progress) + Send + Sync),
    ) -> Result<Topology, CoordinatorError> {
        let mut t = t.clone();
        let mut done = loop {
            if let Some(newer) = self.offer_all(&t, &t.nodes).await? {
                t = newer;
                continue;
            }
            if let Some(newer) = self.wait_for_migrations(&t, report).await? {
                t = newer;
                continue;
            }
            let done = plan::finalize(&t);
            tracing::info!(version = done.version, "migrations complete; publishing the final topology");
            match self.store.publish(&done).await {
                Ok(()) => break done,
                Err(e @ RegistryError::Stale { .. }) => match self.newer_than(&t).await? {
                    Some(Newer::SameMove(newer)) => t = newer,
                    Some(Newer::Settled(newer)) => return Ok(newer),
                    None => return Err(e.into()),
                },
                Err(e) => return Err(e.into()),
            }
        };
        // Leaving nodes too, so they stop serving and drop what they gave away; they may already
        // be gone, which is fine.
        let leaving: Vec<NodeInfo> = t.nodes.iter().filter(|n| done.node(n.id).is_none()).cloned().collect();
        while let Some(newer) = self.offer_all(&done, &done.nodes).await? {
            done = newer;
        }
        for n in &leaving {
            let _ = tokio::time::timeout(Duration::from_secs(2), self.nodes.offer(n, &done)).await;
        }
        Ok(done)
    }

    /// What the registry holds if it is newer than `t`: the same move (a failover changed
    /// members), or a topology with no move left (another coordinator finished it).
    async fn newer_than(&self, t: &Topology) -> Result<Option<Newer>, CoordinatorError> {
        let Some(current) = self.store.load().await? else { return Ok(None) };
        if current.version <= t.version {
            return Ok(None);
        }
        Ok(if current.migrations == t.migrations {
            tracing::info!(
                from = t.version,
                to = current.version,
                "a newer version of the move was published (a failover); following it"
            );
            Some(Newer::SameMove(current))
        } else if current.migrations.is_empty() {
            Some(Newer::Settled(current))
        } else {
            None
        })
    }

    /// Offers `t` to each of `nodes` until every one serves version `t.version` or later; or,
    /// while some cannot be reached, until a newer version of the same move is published (a
    /// failover writer replaced a primary that is down): returns that one then.
    async fn offer_all(
        &self,
        t: &Topology,
        nodes: &[NodeInfo],
    ) -> Result<Option<Topology>, CoordinatorError> {
        let deadline = tokio::time::Instant::now() + self.step_timeout;
        let mut pending: Vec<&NodeInfo> = nodes.iter().collect();
        let mut warned = false;
        while !pending.is_empty() {
            let mut still = Vec::new();
            for n in pending {
                match self.nodes.offer(n, t).await {
                    Ok(v) if v >= t.version => {}
                    Ok(v) => {
                        tracing::warn!(node = n.id, have = v, want = t.version, "node refused the topology");
                        still.push(n);
                    }
                    Err(e) => {
                        if !warned {
                            tracing::warn!(node = n.id, addr = %n.addr, error = %e, "node unreachable; retrying");
                        }
                        still.push(n);
                    }
                }
            }
            pending = still;
            if !pending.is_empty() {
                if let Some(Newer::SameMove(newer)) = self.newer_than(t).await? {
                    return Ok(Some(newer));
                }
                warned = true;
                if tokio::time::Instant::now() >= deadline {
                    let ids: Vec<u32> = pending.iter().map(|n| n.id).collect();
                    return Err(CoordinatorError::Timeout(
                        self.step_timeout,
                        format!("nodes {ids:?} to take version {}", t.version),
                    ));
                }
                tokio::time::sleep(self.poll).await;
            }
        }
        Ok(None)
    }

    /// Polls the receivers until every migration of `t` reports done at version `t.version`
    /// (`None`), or a newer version of the same move is published (that one).
    async fn wait_for_migrations(
        &self,
        t: &Topology,
        report: &(dyn Fn(&Progress) + Send + Sync),
    ) -> Result<Option<Topology>, CoordinatorError> {
        let deadline = tokio::time::Instant::now() + self.step_timeout;
        let receivers: Vec<u32> = {
            let mut ids: Vec<u32> = t.migrations.iter().map(|m| m.to).collect();
            ids.sort_unstable();
            ids.dedup();
            ids
        };
        let mut last = Progress::default();
        loop {
            let mut reported: HashMap<(u32, u32, u32, u32), MigrationProgress> = HashMap::new();
            // A receiver ahead of `t`, or one that is down, may mean a failover was published:
            // then the registry is read (only then: it may be an API server).
            let mut look = false;
            for id in &receivers {
                let Some(node) = t.node(*id) else { continue };
                match self.nodes.progress(node).await {
                    Ok((version, migrations)) if version >= t.version => {
                        look |= version > t.version;
                        for p in migrations.into_iter().filter(|p| p.version == t.version) {
                            reported.insert((p.start, p.end, p.from, p.to), p);
                        }
                    }
                    Ok(_) => {
                        // Behind (restarted from an older file?): offer the topology again.
                        let _ = self.nodes.offer(node, t).await;
                    }
                    Err(e) => {
                        look = true;
                        tracing::debug!(node = id, error = %e, "receiver unreachable");
                    }
                }
            }
            if look && let Some(Newer::SameMove(newer)) = self.newer_than(t).await? {
                return Ok(Some(newer));
            }
            let progress = summarize(t, &reported);
            // Time alone passing is not news.
            let news =
                Progress { elapsed_ms: 0, ..progress.clone() } != Progress { elapsed_ms: 0, ..last.clone() };
            if news {
                report(&progress);
                last = progress.clone();
            }
            if progress.migrations_done == progress.migrations {
                return Ok(None);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(CoordinatorError::Timeout(
                    self.step_timeout,
                    format!("version {} migrations", t.version),
                ));
            }
            tokio::time::sleep(self.poll).await;
        }
    }
}

fn summarize(t: &Topology, reported: &HashMap<(u32, u32, u32, u32), MigrationProgress>) -> Progress {
    let mut p = Progress { version: t.version, migrations: t.migrations.len(), ..Default::default() };
    for m in &t.migrations {
        p.slots_total += m.len() as u64;
        if let Some(r) = reported.get(&key(m)) {
            p.slots_done += u64::from(r.slots_done);
            p.keys_moved += r.keys;
            p.bytes_moved += r.bytes;
            p.elapsed_ms = p.elapsed_ms.max(r.elapsed_ms);
            p.keys_estimate += r.keys_estimate;
            if r.done {
                p.migrations_done += 1;
            }
        }
    }
    p
}

fn key(m: &Migration) -> (u32, u32, u32, u32) {
    (u32::from(m.start), u32::from(m.end), m.from, m.to)
}

#[cfg(test)]
mod tests {
    //! The coordinator against fake nodes that pull when asked for progress (one step per poll)
    //! and can be made to crash at each step of a move: down for a while, or restarted (their
    //! pull's progress lost, back on the topology their data directory kept).

    use std::collections::HashMap;
    use std::sync::Arc;

    use parking_lot::Mutex;

    use super::*;
    use crate::registry::MemoryRegistry;

    #[derive(Debug, Default)]
    struct FakeNode {
        topology: Option<Topology>,
        /// The copy a restart comes back with (the node's data directory).
        saved: Option<Topology>,
        /// Polls until each incoming migration of the served version is pulled.
        pulls: HashMap<(u32, u32, u32, u32), u32>,
        /// Calls refused before the node answers again.
        down: u32,
        /// Offers of a settled topology refused (the node crashes as the move ends).
        refuse_settled: u32,
        /// Polls a pull takes, if not `PULL_POLLS`.
        pull_polls: Option<u32>,
    }

    #[derive(Debug, Default)]
    struct Fakes {
        nodes: Mutex<HashMap<u32, FakeNode>>,
        /// Every version a node adopted, in order: (node, version).
        adopted: Mutex<Vec<(u32, u64)>>,
    }

    const PULL_POLLS: u32 = 3;

    impl Fakes {
        fn new(ids: impl IntoIterator<Item = u32>) -> Arc<Fakes> {
            let f = Arc::new(Fakes::default());
            f.nodes.lock().extend(ids.into_iter().map(|id| (id, FakeNode::default())));
            f
        }

        fn crash(&self, id: u32, down_for: u32) {
            let mut nodes = self.nodes.lock();
            let n = nodes.get_mut(&id).unwrap();
            n.down = down_for;
            n.topology = n.saved.clone();
            n.pulls.clear();
            if let Some(t) = n.topology.clone() {
                Self::start_pulls(id, &t, n);
            }
        }

        fn start_pulls(id: u32, t: &Topology, n: &mut FakeNode) {
            for m in t.migrations.iter().filter(|m| m.to == id) {
                n.pulls.entry(key(m)).or_insert(n.pull_polls.unwrap_or(PULL_POLLS));
            }
        }

        fn version(&self, id: u32) -> u64 {
            self.nodes.lock()[&id].topology.as_ref().map_or(0, |t| t.version)
        }
    }

    impl Nodes for Arc<Fakes> {
        async fn offer(&self, node: &NodeInfo, t: &Topology) -> Result<u64, String> {
            let mut nodes = self.nodes.lock();
            let n = nodes.get_mut(&node.id).ok_or("no such node")?;
            if n.down > 0 {
                n.down -= 1;
                return Err("connection refused".into());
            }
            if n.refuse_settled > 0
                && t.migrations.is_empty()
                && n.topology.as_ref().is_some_and(|m| m.version < t.version)
            {
                n.refuse_settled -= 1;
                return Err("connection refused".into());
            }
            if n.topology.as_ref().is_none_or(|mine| mine.version < t.version) {
                n.topology = Some(t.clone());
                n.saved = Some(t.clone());
                n.pulls.clear();
                Fakes::start_pulls(node.id, t, n);
                self.adopted.lock().push((node.id, t.version));
            }
            Ok(n.topology.as_ref().map_or(0, |t| t.version))
        }

        async fn progress(&self, node: &NodeInfo) -> Result<(u64, Vec<MigrationProgress>), String> {
            let mut nodes = self.nodes.lock();
            let n = nodes.get_mut(&node.id).ok_or("no such node")?;
            if n.down > 0 {
                n.down -= 1;
                return Err("connection refused".into());
            }
            let Some(t) = n.topology.clone() else { return Ok((0, Vec::new())) };
            let mut out = Vec::new();
            for m in t.migrations.iter().filter(|m| m.to == node.id) {
                let left = n.pulls.get_mut(&key(m)).expect("a pull per incoming migration");
                *left = left.saturating_sub(1);
                out.push(MigrationProgress {
                    start: m.start.into(),
                    end: m.end.into(),
                    from: m.from,
                    to: m.to,
                    version: t.version,
                    done: *left == 0,
                    slots_done: if *left == 0 { m.len() as u32 } else { 0 },
                    ..Default::default()
                });
            }
            Ok((t.version, out))
        }
    }

    fn infos(ids: &[u32]) -> Vec<NodeInfo> {
        ids.iter().map(|&id| NodeInfo::new(id, format!("fake:{id}"))).collect()
    }

    /// A coordinator over `fakes` with a published 3-node topology every node serves.
    async fn bootstrap(fakes: &Arc<Fakes>) -> Coordinator<Arc<MemoryRegistry>, Arc<Fakes>> {
        let registry = Arc::new(MemoryRegistry::new(None));
        let mut t = Topology::even(&infos(&[0, 1, 2]).iter().map(|n| n.addr.clone()).collect::<Vec<_>>());
        t.nodes = infos(&[0, 1, 2]);
        registry.publish(&t).await.unwrap();
        let c = Coordinator::with_nodes(registry, fakes.clone()).with_poll(Duration::from_millis(1));
        c.resume().await.unwrap();
        c
    }

    /// Checks the end state: settled, and every listed node serves the final version.
    fn assert_settled(fakes: &Fakes, done: &Topology, ids: &[u32]) {
        assert!(done.migrations.is_empty());
        assert_eq!(done.nodes.iter().map(|n| n.id).collect::<Vec<_>>(), ids);
        for &id in ids {
            assert_eq!(fakes.version(id), done.version, "node {id} serves the final version");
        }
    }

    /// Waits until the registry holds a plan (migrations in flight); returns it.
    async fn published_plan(c: &Coordinator<Arc<MemoryRegistry>, Arc<Fakes>>) -> Topology {
        for _ in 0..5000 {
            if let Some(t) = c.store().load().await.unwrap().filter(|t| !t.migrations.is_empty()) {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("no plan was published");
    }

    /// What a failover writer publishes for shard `id`: its replica `addr` is the primary now.
    fn promoted(t: &Topology, id: u32, addr: &str) -> Topology {
        let mut next = t.next_version();
        next.nodes.iter_mut().find(|n| n.id == id).unwrap().addr = addr.to_string();
        next
    }

    #[tokio::test]
    async fn a_failover_of_an_unreachable_receiver_during_a_move_is_followed_and_kept() {
        let fakes = Fakes::new(0..4);
        let c = Arc::new(bootstrap(&fakes).await.with_timeout(Duration::from_secs(5)));
        // The joining shard's primary is unreachable from the start: the plan cannot reach it.
        fakes.nodes.lock().get_mut(&3).unwrap().down = u32::MAX;
        let task = tokio::spawn({
            let c = c.clone();
            async move { c.reshard(&infos(&[0, 1, 2, 3])).await }
        });
        let plan = published_plan(&c).await;
        // The writer promotes its replica (reachable: the fake answers again, as the new member).
        let failover = promoted(&plan, 3, "fake:3-replica");
        c.store().publish(&failover).await.unwrap();
        fakes.nodes.lock().get_mut(&3).unwrap().down = 0;
        let done = task.await.unwrap().expect("the move finishes on the newer version");
        assert_settled(&fakes, &done, &[0, 1, 2, 3]);
        assert_eq!(done.version, failover.version + 1);
        assert_eq!(done.node(3).unwrap().addr, "fake:3-replica", "the promotion is kept");
    }

    #[tokio::test]
    async fn a_failover_published_while_slots_are_pulled_is_followed_and_kept() {
        let fakes = Fakes::new(0..4);
        let c = Arc::new(bootstrap(&fakes).await.with_timeout(Duration::from_secs(5)));
        // Slow pulls: the failover lands while the move waits for them.
        fakes.nodes.lock().get_mut(&3).unwrap().pull_polls = Some(200);
        let task = tokio::spawn({
            let c = c.clone();
            async move { c.reshard(&infos(&[0, 1, 2, 3])).await }
        });
        let plan = published_plan(&c).await;
        let failover = promoted(&plan, 1, "fake:1-replica");
        c.store().publish(&failover).await.unwrap();
        // The writer offers it to the members; the receiver restarts its pulls at that version.
        for id in 0..4 {
            let _ = fakes.offer(&NodeInfo::new(id, format!("fake:{id}")), &failover).await;
        }
        let done = task.await.unwrap().expect("the move finishes on the newer version");
        assert_settled(&fakes, &done, &[0, 1, 2, 3]);
        assert!(done.version > failover.version);
        assert_eq!(done.node(1).unwrap().addr, "fake:1-replica", "the promotion is kept");
    }

    #[tokio::test]
    async fn a_move_publishes_the_final_topology_only_after_every_pull_is_done() {
        let fakes = Fakes::new(0..4);
        let c = bootstrap(&fakes).await;
        let done = c.reshard(&infos(&[0, 1, 2, 3])).await.unwrap();
        assert_settled(&fakes, &done, &[0, 1, 2, 3]);
        // Node 3 (the receiver) adopted the plan, pulled, then the final version.
        let adopted: Vec<u64> =
            fakes.adopted.lock().iter().filter(|(id, _)| *id == 3).map(|(_, v)| *v).collect();
        assert_eq!(adopted, vec![done.version - 1, done.version]);
    }

    #[tokio::test]
    async fn a_receiver_down_when_the_plan_is_offered_is_waited_for() {
        let fakes = Fakes::new(0..4);
        let c = bootstrap(&fakes).await;
        fakes.crash(3, 5);
        let done = c.reshard(&infos(&[0, 1, 2, 3])).await.unwrap();
        assert_settled(&fakes, &done, &[0, 1, 2, 3]);
    }

    #[tokio::test]
    async fn a_receiver_restarted_mid_pull_pulls_again_before_the_move_finishes() {
        let fakes = Fakes::new(0..4);
        let c = Arc::new(bootstrap(&fakes).await);
        let task = {
            let c = c.clone();
            tokio::spawn(async move { c.reshard(&infos(&[0, 1, 2, 3])).await })
        };
        // Wait until node 3 is pulling (the coordinator polls its progress), then crash it: its
        // progress is lost.
        let limit = tokio::time::Instant::now() + Duration::from_secs(5);
        while fakes.nodes.lock()[&3].pulls.values().all(|&left| left == PULL_POLLS) {
            assert!(tokio::time::Instant::now() < limit && !task.is_finished(), "node 3 never pulled");
            tokio::time::sleep(Duration::from_micros(100)).await;
        }
        let plan_version = fakes.version(3);
        fakes.crash(3, 3);
        assert_eq!(fakes.version(3), plan_version, "it comes back on the plan its data directory kept");
        let done = task.await.unwrap().unwrap();
        assert_settled(&fakes, &done, &[0, 1, 2, 3]);
    }

    #[tokio::test]
    async fn a_node_down_when_the_final_topology_is_offered_is_waited_for() {
        let fakes = Fakes::new(0..4);
        let c = bootstrap(&fakes).await;
        fakes.nodes.lock().get_mut(&0).unwrap().refuse_settled = 5;
        let done = c.reshard(&infos(&[0, 1, 2, 3])).await.unwrap();
        assert_eq!(fakes.nodes.lock()[&0].refuse_settled, 0, "the final offer was refused and retried");
        assert_settled(&fakes, &done, &[0, 1, 2, 3]);
    }

    #[tokio::test]
    async fn a_coordinator_stopped_at_any_step_is_finished_by_the_next_one() {
        // Stop the coordinator after each number of node calls in turn; a new coordinator on the
        // same registry must finish the move (3 -> 4 -> 2) from what was published.
        for stop_after in [0usize, 1, 2, 4, 6, 9, 14] {
            let fakes = Fakes::new(0..4);
            let c = bootstrap(&fakes).await;
            let registry = c.store().clone();
            let calls_before = fakes.adopted.lock().len();
            let target = infos(&[0, 1, 2, 3]);
            let mut reshard = Box::pin(c.reshard(&target));
            // Poll the future until the fakes saw `stop_after` more adoptions, then drop it.
            let limit = tokio::time::Instant::now() + Duration::from_secs(5);
            loop {
                if fakes.adopted.lock().len() >= calls_before + stop_after
                    || tokio::time::Instant::now() > limit
                {
                    break;
                }
                if tokio::time::timeout(Duration::from_millis(1), &mut reshard).await.is_ok() {
                    break;
                }
            }
            drop(reshard);
            let next =
                Coordinator::with_nodes(registry.clone(), fakes.clone()).with_poll(Duration::from_millis(1));
            let done = next.reshard(&infos(&[0, 1, 2, 3])).await.unwrap();
            assert_settled(&fakes, &done, &[0, 1, 2, 3]);
            let done = next.reshard(&infos(&[0, 1])).await.unwrap();
            assert_settled(&fakes, &done, &[0, 1]);
        }
    }
}
