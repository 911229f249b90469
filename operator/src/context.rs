//! What every reconcile and every background task of this operator shares: the API client, the
//! settings, the Events recorder, the [`Metrics`], and what the operator remembers about each
//! cluster between reconciles (its running move, failover writer, last move error, last pod
//! restart, and when its Secret was last made sure of).
//!
//! It sits below both the reconciler ([`crate::controller`]) and the failover writers
//! ([`crate::failover`]): each uses it, neither imports the other's state. Only this process's
//! memory is here; everything a new leader needs is in the cluster's topology ConfigMap and
//! status.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use parking_lot::Mutex;
use shoal_coordinator::Progress;
use shoal_coordinator::failover::FailoverOptions;
use shoal_wire::Topology;
use tokio::task::JoinHandle;

use crate::crd::PodRestart;
use crate::metrics::{self, Metrics};
use crate::resources::AddressMode;

/// A cluster, by namespace and name: what the per-cluster memory is kept under.
pub type Key = (String, String);

#[derive(Debug, Clone)]
pub struct Settings {
    pub node_addresses: AddressMode,
    /// How long one resharding step may take before it is abandoned (and retried).
    pub step_timeout: Duration,
    /// How often to look again while something is in progress.
    pub busy_requeue: Duration,
    /// The failover writers' settings (clusters with replicas).
    pub failover: FailoverOptions,
    /// The key each cluster's node secret is derived from (`--secret-key-file`).
    pub secret_key: Arc<[u8]>,
}

/// A data move running in the background (started and collected by the reconciler's moves
/// stage; stopped here, by a failover or the end of leadership).
pub(crate) struct Move {
    pub task: JoinHandle<Result<Topology, String>>,
    pub progress: Arc<Mutex<Option<Progress>>>,
    pub what: String,
    /// Moves slots (rather than only offering the first topology to the nodes).
    pub resharding: bool,
}

pub struct Context {
    pub client: Client,
    pub settings: Settings,
    pub recorder: Recorder,
    pub metrics: Metrics,
    pub(crate) moves: Mutex<HashMap<Key, Move>>,
    /// Why each cluster's last move failed, until one succeeds (for its status).
    pub(crate) last_errors: Mutex<HashMap<Key, String>>,
    /// Failover writers, by cluster ([`crate::failover`]).
    pub(crate) writers: Mutex<HashMap<Key, JoinHandle<()>>>,
    /// The node pod each cluster last evicted for a restart, and when; the next waits for it.
    /// Also in the cluster's status (`status.restarting`), where a new leader finds it; this
    /// copy covers reconciles that run on an object read before that status was written.
    pub(crate) restarting: Mutex<HashMap<Key, PodRestart>>,
    /// When each cluster's Secret (by the cluster's uid) was last made sure of, so reconciles in
    /// between do not POST it again.
    pub(crate) secrets_made: Mutex<HashMap<String, Instant>>,
    /// Set for good by [`Context::stop_background`]: leadership is over, so a reconcile still
    /// finishing starts no new move or writer.
    stopped: AtomicBool,
}

impl Context {
    pub fn new(client: Client, settings: Settings, reporter: Reporter) -> Context {
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            settings,
            metrics: Metrics::default(),
            moves: Mutex::default(),
            last_errors: Mutex::default(),
            writers: Mutex::default(),
            restarting: Mutex::default(),
            secrets_made: Mutex::default(),
            stopped: Default::default(),
        }
    }

    /// Whether background work may start (see `stopped`). Checked under the lock of the map
    /// the work goes in, which `stop_background` drains after setting the flag.
    pub(crate) fn may_start(&self) -> bool {
        !self.stopped.load(Ordering::SeqCst)
    }

    /// Stops every running move and failover writer (shutdown or lost leadership); the topology
    /// keeps the moves' state, and the next leader starts its own writers.
    pub fn stop_background(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        for (_, m) in self.moves.lock().drain() {
            m.task.abort();
        }
        for (_, w) in self.writers.lock().drain() {
            w.abort();
        }
    }

    /// Stops the move of cluster `key`, if one runs: a failover decision is about to be
    /// published (see [`crate::failover`]). The next reconcile resumes it from the topology.
    pub fn preempt_move(&self, key: &Key) {
        if let Some(m) = self.moves.lock().remove(key) {
            m.task.abort();
            self.metrics.moves_running.add(-1);
            if m.resharding {
                self.metrics.moves_preempted.inc();
            }
            tracing::info!(cluster = %key.1, what = %m.what, "a failover preempts the move; it resumes from the topology");
        }
    }

    /// Failover writers running.
    pub(crate) fn writers_running(&self) -> usize {
        self.writers.lock().values().filter(|w| !w.is_finished()).count()
    }
}

/// The operator's own /metrics.
pub fn render_metrics(ctx: &Context) -> String {
    metrics::render(&ctx.metrics, ctx.writers_running())
}
