//! The operator's own counters and gauges, and their Prometheus exposition (`/metrics`).
//!
//! Below everything that counts: the reconciler, background moves and failover writers each
//! bump these through the [`crate::context::Context`] they share.

use shoal_telemetry::metrics::{Counter, Exposition, Gauge};

#[derive(Debug, Default)]
pub struct Metrics {
    pub reconciles: Counter,
    pub reconcile_errors: Counter,
    pub moves_started: Counter,
    pub moves_failed: Counter,
    pub moves_running: Gauge,
    /// Moves stopped by a failover decision (and resumed by the next reconcile).
    pub moves_preempted: Counter,
    pub leader: Gauge,
    /// Failover decisions that made a replica primary.
    pub failovers: Counter,
    /// Failover decisions that confirmed a primary that started fenced.
    pub primaries_confirmed: Counter,
    /// Topology versions that changed shards' replica lists.
    pub member_changes: Counter,
    /// Node pods restarted (evicted) to bring them up to their StatefulSet's template.
    pub pod_restarts: Counter,
}

/// The exposition of `m`, with `failover_writers` running (counted from the writers' tasks, not
/// kept as a gauge: a writer that ends on its own is no longer counted).
pub fn render(m: &Metrics, failover_writers: usize) -> String {
    let mut e = Exposition::new();
    e.counter("shoal_operator_reconciles_total", "Reconciles run.", m.reconciles.get())
        .counter(
            "shoal_operator_reconcile_errors_total",
            "Reconciles that failed (retried).",
            m.reconcile_errors.get(),
        )
        .counter("shoal_operator_moves_started_total", "Resharding runs started.", m.moves_started.get())
        .counter(
            "shoal_operator_moves_failed_total",
            "Resharding runs that failed (retried).",
            m.moves_failed.get(),
        )
        .counter(
            "shoal_operator_moves_preempted_total",
            "Resharding runs stopped by a failover decision (resumed from the topology).",
            m.moves_preempted.get(),
        )
        .gauge("shoal_operator_moves_running", "Resharding runs in progress.", m.moves_running.get() as f64)
        .counter(
            "shoal_operator_failovers_total",
            "Failover decisions that made a replica its shard's primary.",
            m.failovers.get(),
        )
        .counter(
            "shoal_operator_primaries_confirmed_total",
            "Failover decisions that confirmed a primary that started fenced.",
            m.primaries_confirmed.get(),
        )
        .gauge(
            "shoal_operator_failover_writers",
            "Failover writers running (one per CacheCluster with replicas).",
            failover_writers as f64,
        )
        .counter(
            "shoal_operator_member_changes_total",
            "Topology versions published to change shards' replicas.",
            m.member_changes.get(),
        )
        .counter(
            "shoal_operator_pod_restarts_total",
            "Node pods restarted to bring them up to their StatefulSet's template.",
            m.pod_restarts.get(),
        )
        .gauge(
            "shoal_operator_leader",
            "1 while this replica holds the leader lease.",
            m.leader.get() as f64,
        );
    e.finish()
}
