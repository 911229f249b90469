//! The node's `/metrics` page: its state ([`NodeState`]) read out as Prometheus series.

use shoal_telemetry::metrics::Exposition;
use shoal_wire::proto::NodeStats;

use crate::state::NodeState;

/// Renders the node's metrics in Prometheus text format.
pub fn render(state: &NodeState) -> String {
    let s = state.stats();
    let mut e = Exposition::new();
    store_and_traffic(&mut e, state, &s);
    migrations(&mut e, state, &s);
    files_pubsub_tracking(&mut e, state, &s);
    expiry_lag(&mut e, state);
    replication(&mut e, &s);
    e.counter(
        "shoal_node_replica_partial_cuts_dropped_total",
        "Cuts of the primary's change stream whose first messages this process received as a replica and whose last never came (the stream broke); none of such a cut is applied.",
        s.partial_cuts_dropped,
    );
    e.counter(
        "shoal_node_full_syncs_total",
        "Full syncs sent to replicas (a new replica, one out of the backlog, a FLUSHALL, or a transaction or script that wrote more than one cut of the change stream may hold).",
        s.full_syncs,
    );
    e.finish()
}

/// The store's keys and memory, ops and batches, refused calls, open streams and uptime.
fn store_and_traffic(e: &mut Exposition, state: &NodeState, s: &NodeStats) {
    e.gauge("shoal_node_keys", "Keys stored (including expired keys not yet reclaimed).", s.keys as f64)
        .gauge("shoal_node_volatile_keys", "Keys with a TTL.", s.volatile_keys as f64)
        .gauge("shoal_node_used_memory_bytes", "Bytes accounted against maxmemory.", s.used_memory as f64)
        .gauge("shoal_node_maxmemory_bytes", "The memory limit (0: none).", s.maxmemory as f64)
        .gauge("shoal_node_rss_bytes", "Resident set size of the node process.", s.rss_bytes as f64)
        .counter("shoal_node_expired_keys_total", "Keys removed because their TTL passed.", s.expired_keys)
        .counter("shoal_node_evicted_keys_total", "Keys evicted to stay under maxmemory.", s.evicted_keys)
        .counter("shoal_node_keyspace_hits_total", "Reads that found their key.", s.keyspace_hits)
        .counter("shoal_node_keyspace_misses_total", "Reads that did not find their key.", s.keyspace_misses)
        .counter("shoal_node_ops_total", "Operations applied.", s.ops)
        .counter("shoal_node_batches_total", "Batches applied.", s.batches)
        .counter(
            "shoal_node_unauthenticated_calls_total",
            "gRPC calls refused for want of the cluster secret.",
            state.metrics.unauthenticated.load(std::sync::atomic::Ordering::Relaxed),
        )
        .counter(
            "shoal_node_link_tls_refused_total",
            "Connections refused in the node-link TLS handshake (certificate not from the cluster's CA, expired, plaintext, too slow).",
            state.metrics.link_tls_refused.load(std::sync::atomic::Ordering::Relaxed),
        )
        .gauge(
            "shoal_node_oldest_overdue_seconds",
            "How long the key overdue longest has been stored past its expiry time (0: none is).",
            s.oldest_overdue_ms as f64 / 1000.0,
        )
        .histogram("shoal_node_batch_ops", "Operations per batch received.", &state.metrics.batch_size)
        .gauge(
            "shoal_node_streams",
            "Open Execute streams (connected routers).",
            state.metrics.streams.get() as f64,
        )
        .counter(
            "shoal_node_cross_node_prepared_total",
            "Transactions over several nodes prepared here (their part held until decided).",
            state.metrics.transactions_prepared.get(),
        )
        .counter(
            "shoal_node_cross_node_committed_total",
            "Transactions over several nodes whose part was applied here.",
            state.metrics.transactions_committed.get(),
        )
        .counter(
            "shoal_node_cross_node_aborted_total",
            "Transactions over several nodes prepared here and let go (aborted, or no decision within the lease).",
            state.metrics.transactions_aborted.get(),
        )
        .counter(
            "shoal_node_script_holds_total",
            "Holds given to scripts running on other nodes (their ops on this node's keys applied under it).",
            state.metrics.script_holds.get(),
        )
        .counter(
            "shoal_node_spread_scripts_total",
            "Scripts run here holding other nodes (keys of several nodes).",
            state.scripts.spread_runs(),
        )
        .counter(
            "shoal_node_script_reach_refused_total",
            "Keys of another node a script reached mid-run, after writing, and could not hold (the call failed).",
            state.scripts.reach_refused(),
        )
        .gauge("shoal_node_uptime_seconds", "Seconds since the node started.", s.uptime_ms as f64 / 1000.0);
}

/// The topology served and the slot pulls into this node.
fn migrations(e: &mut Exposition, state: &NodeState, s: &NodeStats) {
    e.gauge("shoal_node_topology_version", "Topology version the node serves by.", s.topology_version as f64)
        .gauge(
            "shoal_node_migrations_in_progress",
            "Slot ranges being pulled into this node now.",
            s.migrations.iter().filter(|m| !m.done).count() as f64,
        )
        .counter("shoal_node_migrated_slots_total", "Slots pulled into this node.", s.slots_migrated_in)
        .counter("shoal_node_migrated_keys_total", "Entries pulled into this node.", s.keys_migrated_in)
        .counter("shoal_node_migrated_bytes_total", "Key and value bytes pulled in.", s.bytes_migrated_in)
        .counter("shoal_node_slots_dropped_total", "Slots given away to other nodes.", s.slots_dropped)
        .histogram(
            "shoal_node_migration_duration_seconds",
            "How long pulling one migration's slots took.",
            &state.membership.pulls.pull_seconds,
        );
}

/// Snapshot files passed over, pub/sub traffic, near-cache tracking.
fn files_pubsub_tracking(e: &mut Exposition, state: &NodeState, s: &NodeStats) {
    let files = state.persistence.counters();
    e.counter(
            "shoal_node_snapshot_load_fallbacks_total",
            "Snapshot files passed over at start because they failed their checks (an older one was loaded, or none).",
            files.load_fallbacks,
        )
        .counter(
            "shoal_node_snapshot_quarantined_total",
            "Snapshot files that failed their checks and were renamed to <name>.quarantined-<unix-ms>.",
            files.quarantined,
        )
        .counter(
            "shoal_node_pubsub_published_total",
            "Messages published here (PUBLISH ops and keyspace notifications).",
            state.pubsub.published.load(std::sync::atomic::Ordering::Relaxed),
        )
        .counter(
            "shoal_node_pubsub_deliveries_total",
            "Deliveries queued for routers (one per router per matching subscription).",
            state.pubsub.delivered.load(std::sync::atomic::Ordering::Relaxed),
        )
        .counter(
            "shoal_node_pubsub_overflows_total",
            "Router Subscribe streams closed because the router fell behind (their queued messages were lost).",
            state.pubsub.overflows.load(std::sync::atomic::Ordering::Relaxed),
        )
        .counter(
            "shoal_node_monitor_lines_dropped_total",
            "MONITOR lines not relayed to a router that had too many queued (its monitors miss them).",
            state.pubsub.monitor_dropped.load(std::sync::atomic::Ordering::Relaxed),
        )
        .gauge("shoal_node_pubsub_routers", "Routers with a Subscribe stream open.", s.pubsub_routers as f64)
        .gauge(
            "shoal_node_tracking_keys",
            "Keys some router's near cache is registered for (invalidated on their next change).",
            state.store.watches.tracking.len() as f64,
        )
        .counter(
            "shoal_node_tracking_invalidations_total",
            "Near-cache invalidations queued for routers (one per key per router; a flush counts one).",
            state.store.watches.tracking.sent.load(std::sync::atomic::Ordering::Relaxed),
        )
        .counter(
            "shoal_node_snapshot_salvaged_total",
            "Snapshots loaded after repairing a damaged header (every entry verified first).",
            files.salvaged,
        );
    // The snapshots themselves, with a data directory (a router shows the same for the nodes it
    // runs in process; a node run on its own, as on Kubernetes, says it here: the chart's
    // ShoalSnapshotFailing alert reads shoal_node_snapshot_last_ok).
    if let Some(info) = s.snapshot.as_ref().filter(|i| i.enabled) {
        e.counter("shoal_node_snapshots_written_total", "Snapshots written.", info.snapshots_written)
            .gauge(
                "shoal_node_snapshot_last_ok",
                "1 if the last snapshot attempt succeeded.",
                flag(info.last_ok),
            )
            .gauge(
                "shoal_node_snapshot_last_timestamp_seconds",
                "When the last successful snapshot started (Unix).",
                info.last_created_ms as f64 / 1000.0,
            )
            .gauge(
                "shoal_node_snapshot_last_duration_ms",
                "Duration of the last snapshot.",
                info.last_duration_ms as f64,
            )
            .gauge("shoal_node_snapshot_last_bytes", "Size of the last snapshot.", info.last_bytes as f64)
            .gauge(
                "shoal_node_snapshot_last_entries",
                "Entries in the last snapshot.",
                info.last_entries as f64,
            );
    }
}

/// How late expired keys were removed, by active and by lazy expiry.
fn expiry_lag(e: &mut Exposition, state: &NodeState) {
    let lag = &state.store.expiry_lag;
    e.family(
        "shoal_node_expiry_lag_seconds",
        "histogram",
        "How late expired keys were removed (removal time minus expiry time), by active expiry (the background cycle) or lazy expiry (an op found the key expired).",
    )
    .histogram_samples("shoal_node_expiry_lag_seconds", &[("how", "active")], &lag.active)
    .histogram_samples("shoal_node_expiry_lag_seconds", &[("how", "lazy")], &lag.lazy);
}

/// Role, offsets and lag (INFO replication's numbers, as series).
fn replication(e: &mut Exposition, s: &NodeStats) {
    use shoal_wire::proto::ReplicaInfo;
    let primary = s.role != "slave";
    e.family(
        "shoal_node_replication_role",
        "gauge",
        "1 for this process's role: master (a primary) or slave (a replica).",
    )
    .sample("shoal_node_replication_role", &[("role", if primary { "master" } else { "slave" })], 1.0)
    .gauge(
        "shoal_node_replication_offset",
        "A primary's change stream offset, or what a replica has applied of its primary's.",
        s.repl_offset as f64,
    )
    .gauge(
        "shoal_node_fenced",
        "1 while a primary refuses ops until the failover writer confirms it (a restart, a stall).",
        flag(s.fenced),
    )
    .gauge(
        "shoal_node_handing_over",
        "1 while a primary is paused handing its shard over to a replica.",
        flag(s.handing_over),
    );
    if primary {
        e.gauge(
            "shoal_node_connected_replicas",
            "Replicas streaming from this primary.",
            s.replicas.len() as f64,
        );
        let per_replica =
            |e: &mut Exposition, name: &str, help: &str, value: &dyn Fn(&ReplicaInfo) -> f64| {
                e.family(name, "gauge", help);
                for r in &s.replicas {
                    e.sample(name, &[("replica", &r.addr)], value(r));
                }
            };
        per_replica(
            e,
            "shoal_node_replica_lag_changes",
            "How many changes each replica's ack is behind this primary's offset (offsets count changed keys, not bytes).",
            &|r| s.repl_offset.saturating_sub(r.acked_offset) as f64,
        );
        per_replica(
            e,
            "shoal_node_replica_lag_seconds",
            "How long each replica has been behind (0: caught up at its last ack).",
            &|r| r.lag_ms as f64 / 1000.0,
        );
    } else {
        e.gauge(
            "shoal_node_primary_link_up",
            "1 while this replica's stream from its primary is open.",
            flag(s.primary_link_up),
        )
        .gauge(
            "shoal_node_replica_synced",
            "1 once this replica holds a full copy of its primary (its full sync is done).",
            flag(s.synced),
        );
    }
}

/// A boolean as a gauge's value.
fn flag(on: bool) -> f64 {
    if on { 1.0 } else { 0.0 }
}
