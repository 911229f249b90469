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
use std::time::Duration;

use shoal_wire::proto::node_client::NodeClient;
use shoal_wire::proto::{MigrationProgress, StatsRequest, TopologyDoc};
use shoal_wire::{Migration, NodeInfo, Topology};
use tonic::transport::Channel;

use crate::plan::{self, PlanError};
use crate::store::{StoreError, TopologyStore};

#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    #[error(transparent)]
    Store(#[from] StoreError),
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

pub struct Coordinator<S> {
    store: S,
    poll: Duration,
    /// How long one step may take before giving up (the published topology stays, so a later
    /// run resumes it).
    step_timeout: Duration,
    on_progress: ProgressFn,
}

impl<S> std::fmt::Debug for Coordinator<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator").field("poll", &self.poll).finish_non_exhaustive()
    }
}

impl<S: TopologyStore> Coordinator<S> {
    pub fn new(store: S) -> Coordinator<S> {
        Coordinator {
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
        loop {
            let current = self.store.load().await?.ok_or(CoordinatorError::NoTopology)?;
            if !current.migrations.is_empty() {
                self.finish(&current, report).await?;
                continue;
            }
            let next = plan::plan(&current, target)?;
            if next.migrations.is_empty() && next.nodes == current.nodes {
                // Already there; make sure every node serves it.
                self.offer_all(&current, &current.nodes).await?;
                return Ok(current);
            }
            tracing::info!(
                version = next.version,
                slots = next.migrating_slots(),
                migrations = next.migrations.len(),
                "publishing a resharding plan"
            );
            self.store.publish(&next).await?;
            return self.finish(&next, report).await;
        }
    }

    /// Finishes the step in flight, if any. Returns the topology the cluster ends on.
    pub async fn resume(&self) -> Result<Topology, CoordinatorError> {
        let current = self.store.load().await?.ok_or(CoordinatorError::NoTopology)?;
        if current.migrations.is_empty() {
            self.offer_all(&current, &current.nodes).await?;
            return Ok(current);
        }
        self.finish(&current, &self.on_progress).await
    }

    /// Steps 2-4 for the published topology `t`.
    async fn finish(
        &self,
        t: &Topology,
        report: &(dyn Fn(&Progress) + Send + Sync),
    ) -> Result<Topology, CoordinatorError> {
        self.offer_all(t, &t.nodes).await?;
        self.wait_for_migrations(t, report).await?;
        let done = plan::finalize(t);
        tracing::info!(version = done.version, "migrations complete; publishing the final topology");
        self.store.publish(&done).await?;
        // Leaving nodes too, so they stop serving and drop what they gave away; they may already
        // be gone, which is fine.
        let (staying, leaving): (Vec<NodeInfo>, Vec<NodeInfo>) =
            t.nodes.iter().cloned().partition(|n| done.node(n.id).is_some());
        self.offer_all(&done, &staying).await?;
        for n in &leaving {
            let _ = tokio::time::timeout(Duration::from_secs(2), offer(&n.addr, &done)).await;
        }
        Ok(done)
    }

    /// Offers `t` to each of `nodes` until every one serves version `t.version` or later.
    async fn offer_all(&self, t: &Topology, nodes: &[NodeInfo]) -> Result<(), CoordinatorError> {
        let deadline = tokio::time::Instant::now() + self.step_timeout;
        let mut pending: Vec<&NodeInfo> = nodes.iter().collect();
        let mut warned = false;
        while !pending.is_empty() {
            let mut still = Vec::new();
            for n in pending {
                match offer(&n.addr, t).await {
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
        Ok(())
    }

    /// Polls the receivers until every migration of `t` reports done at version `t.version`.
    async fn wait_for_migrations(
        &self,
        t: &Topology,
        report: &(dyn Fn(&Progress) + Send + Sync),
    ) -> Result<(), CoordinatorError> {
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
            for id in &receivers {
                let Some(node) = t.node(*id) else { continue };
                match stats(&node.addr).await {
                    Ok((version, migrations)) if version >= t.version => {
                        for p in migrations.into_iter().filter(|p| p.version == t.version) {
                            reported.insert((p.start, p.end, p.from, p.to), p);
                        }
                    }
                    Ok(_) => {
                        // Behind (restarted from an older file?): offer the topology again.
                        let _ = offer(&node.addr, t).await;
                    }
                    Err(e) => tracing::debug!(node = id, error = %e, "receiver unreachable"),
                }
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
                return Ok(());
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

async fn client(addr: &str) -> Result<NodeClient<Channel>, tonic::transport::Error> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(10));
    Ok(NodeClient::new(endpoint.connect().await?))
}

/// Offers `t` to the node at `addr`; returns the version it serves afterwards.
pub async fn offer(addr: &str, t: &Topology) -> Result<u64, String> {
    let mut c = client(addr).await.map_err(|e| e.to_string())?;
    let ack =
        c.update_topology(TopologyDoc { json: t.to_json() }).await.map_err(|s| s.message().to_string())?;
    Ok(ack.into_inner().version)
}

/// A node's topology version and migration progress.
pub async fn stats(addr: &str) -> Result<(u64, Vec<MigrationProgress>), String> {
    let mut c = client(addr).await.map_err(|e| e.to_string())?;
    let s = c.stats(StatsRequest {}).await.map_err(|s| s.message().to_string())?.into_inner();
    Ok((s.topology_version, s.migrations))
}
