//! The node's shared state ([`NodeState`]): the store and what sits beside it (scripts,
//! persistence, membership, pub/sub), the node's own counters, and the settings CONFIG SET
//! changes. It sits below everything that uses it (the RPCs, the `Execute` stream, the
//! `/metrics` page, the `Subscribe` stream) and imports only what it holds.

use std::sync::Arc;
use std::time::Instant;

use shoal_telemetry::metrics::{Counter, Gauge, Histogram, SIZE_BUCKETS};
use shoal_wire::proto::{NodeSettings, NodeStats};

use crate::decisions::Decisions;
use crate::membership::Membership;
use crate::persistence::Persistence;
use crate::pubsub::PubSub;
use crate::script::Scripts;
use crate::store::{EvictionPolicy, Store, StoreConfig};

/// What the service needs: the store, its persistence, its place in the cluster, counters, and
/// when it started.
#[derive(Debug)]
pub struct NodeState {
    pub store: Arc<Store>,
    /// Lua scripts: the cache and the script thread.
    pub scripts: Scripts,
    pub persistence: Arc<Persistence>,
    pub membership: Arc<Membership>,
    pub metrics: NodeMetrics,
    pub started: Instant,
    /// Routers' subscriptions; the store publishes through it (PUBLISH ops, notifications).
    pub pubsub: Arc<PubSub>,
    /// Transactions over several nodes prepared here and their decisions.
    pub decisions: Decisions,
}

impl NodeState {
    pub fn new(store: Arc<Store>, persistence: Arc<Persistence>, membership: Arc<Membership>) -> NodeState {
        let pubsub = Arc::new(PubSub::default());
        store.events.set_sink(pubsub.clone());
        let scripts =
            Scripts::new(store.clone(), crate::script::DEFAULT_MEMORY_LIMIT, crate::script::DEFAULT_BUSY_MS);
        scripts.attach(membership.clone());
        NodeState {
            store,
            scripts,
            persistence,
            membership,
            metrics: NodeMetrics::default(),
            started: Instant::now(),
            pubsub,
            decisions: Decisions::default(),
        }
    }

    pub fn stats(&self) -> NodeStats {
        let s = self.store.stats();
        let (channels, patterns, shard) = self.pubsub.counts();
        NodeStats {
            pubsub_channels: channels as u64,
            pubsub_patterns: patterns as u64,
            pubsub_shard_channels: shard as u64,
            pubsub_routers: self.pubsub.routers() as u64,
            keys: s.keys,
            volatile_keys: s.volatile_keys,
            avg_ttl_ms: s.avg_ttl_ms,
            oldest_overdue_ms: self.store.oldest_overdue_ms(),
            used_memory: s.used_memory,
            used_memory_peak: s.used_memory_peak,
            maxmemory: self.store.maxmemory() as u64,
            maxmemory_policy: self.store.policy().to_string(),
            expired_keys: s.expired_keys,
            expired_subkeys: s.expired_subkeys,
            evicted_keys: s.evicted_keys,
            keyspace_hits: s.keyspace_hits,
            keyspace_misses: s.keyspace_misses,
            ops: self.metrics.ops.get(),
            batches: self.metrics.batches.get(),
            shards: self.store.shard_count() as u32,
            uptime_ms: self.started.elapsed().as_millis() as u64,
            rss_bytes: shoal_telemetry::metrics::rss_bytes(),
            snapshot: Some(self.persistence.info()),
            topology_version: self.membership.version(),
            migrations: self.membership.progress(),
            keys_migrated_in: self.membership.pulls.keys_in.load(std::sync::atomic::Ordering::Relaxed),
            bytes_migrated_in: self.membership.pulls.bytes_in.load(std::sync::atomic::Ordering::Relaxed),
            slots_dropped: self.membership.slots_dropped.load(std::sync::atomic::Ordering::Relaxed),
            slots_migrated_in: self.membership.pulls.slots_in.load(std::sync::atomic::Ordering::Relaxed),
            latency: self.store.latency.to_proto(),
            ..self.replication_stats()
        }
    }

    /// The replication part of the stats.
    fn replication_stats(&self) -> NodeStats {
        let repl = &self.membership.replication;
        let link = repl.link();
        let replica = !link.primary_addr.is_empty();
        NodeStats {
            role: if replica { "slave" } else { "master" }.to_string(),
            run_id: repl.run_id.clone(),
            repl_offset: if replica { link.offset } else { self.store.events.changes.end() },
            fenced: self.membership.fenced(),
            handing_over: repl.handing_over(),
            handover_to: repl.handover_to(),
            primary_addr: link.primary_addr,
            primary_run_id: link.primary_run_id,
            synced: link.synced,
            primary_link_up: link.up,
            partial_cuts_dropped: repl.partial_cuts_dropped(),
            full_syncs: repl.full_syncs(),
            replicas: if replica { Vec::new() } else { repl.replicas() },
            ..Default::default()
        }
    }
}

impl NodeState {
    /// The settings CONFIG SET changes, as they are now.
    pub fn settings(&self) -> NodeSettings {
        let l = self.store.limits();
        NodeSettings {
            maxmemory: Some(self.store.maxmemory() as u64),
            maxmemory_policy: Some(self.store.policy().to_string()),
            hash_max_listpack_entries: Some(l.hash_max_listpack_entries as u64),
            hash_max_listpack_value: Some(l.hash_max_listpack_value as u64),
            set_max_intset_entries: Some(l.set_max_intset_entries as u64),
            zset_max_listpack_entries: Some(l.zset_max_listpack_entries as u64),
            zset_max_listpack_value: Some(l.zset_max_listpack_value as u64),
            list_max_listpack_size: Some(l.list_max_listpack_size),
            stream_node_max_bytes: Some(l.stream_node.max_bytes as u64),
            stream_node_max_entries: Some(l.stream_node.max_entries as u64),
            notify_keyspace_events: Some(shoal_wire::notify::to_string(self.store.events.flags())),
            busy_reply_threshold: Some(self.scripts.busy_reply_threshold()),
            cluster_slot_stats_enabled: Some(self.store.slot_traffic.enabled()),
            lfu_log_factor: Some(u64::from(self.store.lfu_params().0)),
            lfu_decay_time: Some(u64::from(self.store.lfu_params().1)),
            latency_monitor_threshold: Some(self.store.latency.threshold()),
            active_expire: Some(self.store.active_expire.load(std::sync::atomic::Ordering::Relaxed)),
        }
    }

    /// Applies the settings `change` sets (all of them, or none if one is out of range) and
    /// returns every setting afterwards. New thresholds apply to values converted from now on; a
    /// lower memory limit is enforced by the next write that may grow memory.
    pub fn configure(&self, change: &NodeSettings) -> Result<NodeSettings, String> {
        let store = &self.store;
        let mut now = StoreConfig {
            maxmemory: store.maxmemory(),
            policy: store.policy(),
            limits: store.limits(),
            notify_keyspace_events: store.events.flags(),
            slot_stats: store.slot_traffic.enabled(),
            lfu_log_factor: store.lfu_params().0,
            lfu_decay_time: store.lfu_params().1,
            ..store.config().clone()
        };
        apply_settings(&mut now, change)?;
        if now.limits != store.limits() {
            store.set_limits(now.limits);
        }
        store.set_policy(now.policy);
        store.set_lfu_params(now.lfu_log_factor, now.lfu_decay_time);
        if let Some(ms) = change.latency_monitor_threshold {
            store.latency.set_threshold(ms);
        }
        if let Some(on) = change.active_expire {
            store.active_expire.store(on, std::sync::atomic::Ordering::Relaxed);
        }
        store.set_maxmemory(now.maxmemory);
        store.events.set_flags(now.notify_keyspace_events);
        store.slot_traffic.set_enabled(now.slot_stats);
        if let Some(ms) = change.busy_reply_threshold {
            self.scripts.set_busy_reply_threshold(ms);
        }
        if change != &NodeSettings::default() {
            tracing::info!(?change, "settings changed");
        }
        Ok(self.settings())
    }
}

/// Applies the settings `change` sets to `config` (its memory limit, policy and thresholds): all
/// of them, or none if one is out of range (the error says which and why).
pub fn apply_settings(config: &mut StoreConfig, change: &NodeSettings) -> Result<(), String> {
    shoal_wire::settings::check(change)?;
    if let Some(p) = &change.maxmemory_policy {
        config.policy = p.parse::<EvictionPolicy>()?;
    }
    let size = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    if let Some(v) = change.maxmemory {
        config.maxmemory = size(v);
    }
    let l = &mut config.limits;
    if let Some(v) = change.hash_max_listpack_entries {
        l.hash_max_listpack_entries = size(v);
    }
    if let Some(v) = change.hash_max_listpack_value {
        l.hash_max_listpack_value = size(v);
    }
    if let Some(v) = change.set_max_intset_entries {
        l.set_max_intset_entries = size(v);
    }
    if let Some(v) = change.zset_max_listpack_entries {
        l.zset_max_listpack_entries = size(v);
    }
    if let Some(v) = change.zset_max_listpack_value {
        l.zset_max_listpack_value = size(v);
    }
    if let Some(v) = change.list_max_listpack_size {
        l.list_max_listpack_size = v;
    }
    if let Some(v) = change.stream_node_max_bytes {
        l.stream_node.max_bytes = size(v);
    }
    if let Some(v) = change.stream_node_max_entries {
        l.stream_node.max_entries = size(v);
    }
    if let Some(v) = &change.notify_keyspace_events {
        config.notify_keyspace_events = shoal_wire::notify::parse(v.as_bytes()).unwrap_or_default();
    }
    if let Some(on) = change.cluster_slot_stats_enabled {
        config.slot_stats = on;
    }
    // `check` has kept both within a C int.
    if let Some(v) = change.lfu_log_factor {
        config.lfu_log_factor = v as u32;
    }
    if let Some(v) = change.lfu_decay_time {
        config.lfu_decay_time = v as u32;
    }
    Ok(())
}

/// The node's own counters (the store keeps its own: `Store::stats`).
#[derive(Debug)]
pub struct NodeMetrics {
    pub ops: Counter,
    pub batches: Counter,
    pub batch_size: Histogram,
    /// Open `Execute` streams (one per connected router).
    pub streams: Gauge,
    /// Calls refused for want of the cluster secret (`shoal_wire::auth::Check` counts them).
    pub unauthenticated: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Connections refused in the node-link TLS handshake (no certificate from the cluster's CA,
    /// an expired one, plaintext) or that did not finish it in time.
    pub link_tls_refused: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Transactions over several nodes prepared here, and how they ended (`crate::twophase`).
    pub transactions_prepared: Counter,
    pub transactions_committed: Counter,
    pub transactions_aborted: Counter,
    /// Holds this node gave a script running on another node (`crate::held`).
    pub script_holds: Counter,
}

impl Default for NodeMetrics {
    fn default() -> Self {
        NodeMetrics {
            ops: Counter::default(),
            batches: Counter::default(),
            batch_size: Histogram::new(SIZE_BUCKETS),
            streams: Gauge::default(),
            unauthenticated: Default::default(),
            link_tls_refused: Default::default(),
            transactions_prepared: Counter::default(),
            transactions_committed: Counter::default(),
            transactions_aborted: Counter::default(),
            script_holds: Counter::default(),
        }
    }
}

impl NodeMetrics {
    pub fn record_batch(&self, ops: usize) {
        self.ops.add(ops as u64);
        self.batches.inc();
        self.batch_size.observe(ops as f64);
    }
}
