//! The router's `/metrics` page: router series, per-node link series (`shoal_router_node_*`,
//! e.g. `shoal_router_node_up`) and, only when the router runs its nodes in process
//! (`--embedded-nodes`), the nodes' own `shoal_node_*` series.

use shoal_telemetry::metrics::Exposition;

use crate::backend::Routing;
use crate::state::RouterState;

/// Hot keys shown as series: only the top few, so a scrape's label values stay bounded.
pub const HOTKEY_SERIES: usize = 10;

/// `shoal_router_hotkey_ops{key}` and `shoal_router_hotkey_bytes{key}`: the [`HOTKEY_SERIES`]
/// heaviest keys of each ranking (the sketch's overestimates; SHOAL HOTKEYS gives the bounds).
fn hotkey_series(e: &mut Exposition, hot: &crate::hotkeys::HotKeys) {
    use crate::hotkeys::By;
    if !hot.enabled() {
        return;
    }
    for (name, by, help) in [
        (
            "shoal_router_hotkey_ops",
            By::Ops,
            "Commands naming the key, decayed (this router's heaviest keys).",
        ),
        (
            "shoal_router_hotkey_bytes",
            By::Bytes,
            "Request and reply bytes of commands naming the key, decayed (this router's heaviest keys).",
        ),
    ] {
        e.family(name, "gauge", help);
        let mut seen = std::collections::HashSet::new();
        for k in hot.top(by, HOTKEY_SERIES) {
            let label = key_label(&k.key);
            // Two keys cut to the same label would make two series with one label set.
            if seen.insert(label.clone()) {
                e.sample(name, &[("key", &label)], k.count as f64);
            }
        }
    }
}

/// A key as a label value: printable ASCII as is, `\` doubled, other bytes as `\xNN` (so that
/// binary keys stay distinct and the text stays valid UTF-8), cut after 128 bytes of key. The
/// exposition escapes `\` and `"` again, as its format wants.
pub fn key_label(key: &[u8]) -> String {
    const MAX: usize = 128;
    let mut out = String::with_capacity(key.len().min(MAX) + 8);
    for &b in key.iter().take(MAX) {
        match b {
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    if key.len() > MAX {
        out.push_str("...");
    }
    out
}

/// Renders everything; with embedded nodes, asks each node for its stats (bounded by the call
/// deadline).
pub async fn render(state: &RouterState) -> String {
    let routing = state.backend.routing();
    let mut e = Exposition::new();
    if let Some(near) = &state.near {
        near_cache(&mut e, near);
    }
    router_series(&mut e, state, &routing);
    hotkey_series(&mut e, &state.hotkeys);
    backend_series(&mut e, &state.backend.metrics);
    let ids: Vec<String> = routing.nodes.iter().map(|l| l.ident().id.to_string()).collect();
    link_series(&mut e, &routing, &ids);
    if state.embedded.is_some() {
        embedded_series(&mut e, &routing, &ids).await;
    }
    e.finish()
}

/// The router's own series.
fn router_series(e: &mut Exposition, state: &RouterState, routing: &Routing) {
    let m = &state.metrics;
    e.counter("shoal_router_connections_total", "Client connections accepted.", m.connections.get())
        .counter(
            "shoal_router_rejected_connections_total",
            "Connections refused (maxclients).",
            m.rejected_connections.get(),
        )
        .counter(
            "shoal_router_tls_handshake_failures_total",
            "TLS clients whose handshake failed (untrusted or expired certificate, not TLS) or timed out.",
            m.tls_handshake_failures.get(),
        )
        .gauge("shoal_router_connected_clients", "Clients connected now.", state.connected_clients() as f64)
        .counter("shoal_router_commands_total", "Commands dispatched.", m.commands.get())
        .counter(
            "shoal_router_pubsub_delivered_total",
            "Pub/sub messages queued for this router's subscribed clients.",
            state.pubsub.counters.delivered.load(std::sync::atomic::Ordering::Relaxed),
        )
        .counter(
            "shoal_router_pubsub_disconnected_total",
            "Subscribed clients disconnected for passing client-output-buffer-limit pubsub.",
            state.pubsub.counters.disconnected.load(std::sync::atomic::Ordering::Relaxed),
        )
        .counter(
            "shoal_router_protocol_errors_total",
            "Connections closed for protocol errors.",
            m.protocol_errors.get(),
        )
        .counter("shoal_router_auth_failures_total", "Failed AUTH/HELLO attempts.", m.auth_failures.get())
        .counter("shoal_router_http_requests_total", "HTTP API requests.", m.http_requests.get())
        .counter(
            "shoal_router_auth_timeouts_total",
            "RESP clients disconnected for not authenticating within --auth-timeout-ms.",
            m.auth_timeouts.get(),
        )
        .counter(
            "shoal_router_http_body_timeouts_total",
            "HTTP requests whose body did not arrive within --http-body-timeout-ms (408).",
            m.http_body_timeouts.get(),
        )
        .gauge(
            "shoal_router_request_buffer_bytes",
            "Request bytes buffered now against --request-buffer-budget (HTTP bodies being read, RESP buffers past their allowance).",
            state.buffers.used() as f64,
        )
        .gauge(
            "shoal_router_request_buffer_budget_bytes",
            "The process-wide request buffer budget.",
            state.buffers.limit().min(1 << 53) as f64,
        )
        .counter(
            "shoal_router_request_buffer_refusals_total",
            "Clients refused (RESP: disconnected; HTTP: 503) because the request buffer budget was exhausted.",
            m.buffer_refusals.get(),
        )
        .counter(
            "shoal_router_fast_connections_total",
            "Connections that negotiated the binary fast path (docs/fast-path.md).",
            m.fast_connections.get(),
        )
        .counter("shoal_router_fast_requests_total", "Fast-path requests received.", m.fast_requests.get())
        .counter(
            "shoal_router_fast_errors_total",
            "Fast-path error replies (Status::Err) and frames that closed their connection.",
            m.fast_errors.get(),
        )
        .histogram(
            "shoal_router_command_duration_seconds",
            "Time from dispatch to reply.",
            &m.command_seconds,
        )
        .gauge(
            "shoal_router_topology_version",
            "Topology version routed by.",
            routing.topology.version as f64,
        )
        .gauge(
            "shoal_router_migrations",
            "Slot ranges moving in the topology routed by.",
            routing.topology.migrations.len() as f64,
        );
}

/// Topology changes as the backend met them.
fn backend_series(e: &mut Exposition, c: &crate::backend::BackendMetrics) {
    e.counter("shoal_router_topology_changes_total", "Topologies adopted.", c.topology_changes.get())
        .counter(
            "shoal_router_fallback_reads_total",
            "Reads of a moving slot that missed on the new owner and asked the old one.",
            c.fallback_reads.get(),
        )
        .counter(
            "shoal_router_moved_retries_total",
            "Ops routed again after a node answered `moved`.",
            c.moved_retries.get(),
        )
        .counter(
            "shoal_router_transaction_retries_total",
            "Transactions (EXEC) and scripts (EVAL) sent again because a slot of theirs was moving or had moved.",
            c.transaction_retries.get(),
        )
        .counter(
            "shoal_router_cross_node_transactions_committed_total",
            "Transactions over keys of several nodes applied on every node (two phases).",
            c.spread_committed.get(),
        )
        .counter(
            "shoal_router_cross_node_transactions_refused_total",
            "Transactions over keys of several nodes applied on none (a watched key changed, BUSY, OOM, a node down).",
            c.spread_refused.get(),
        )
        .counter(
            "shoal_router_cross_node_transactions_undecided_total",
            "Transactions over keys of several nodes whose commit went unanswered (the nodes finish them; their replies are lost).",
            c.spread_undecided.get(),
        )
        .counter(
            "shoal_router_stale_retries_total",
            "Ops routed again because their node had left the cluster.",
            c.stale_retries.get(),
        )
        .counter(
            "shoal_router_keys_copied_total",
            "Keys copied to their new owner ahead of a read-modify-write.",
            c.keys_copied.get(),
        );
}

/// Per-node link series (`shoal_router_node_*`) and the measured round trips.
fn link_series(e: &mut Exposition, routing: &Routing, ids: &[String]) {
    let per_link = |e: &mut Exposition, name: &str, kind: &str, help: &str, value: &dyn Fn(usize) -> f64| {
        e.family(name, kind, help);
        for (i, link) in routing.nodes.iter().enumerate() {
            e.sample(name, &[("node", &ids[i]), ("addr", &link.ident().addr)], value(i));
        }
    };
    let links = &routing.nodes;
    per_link(e, "shoal_router_node_up", "gauge", "1 when the node's stream is connected.", &|i| {
        f64::from(u8::from(links[i].is_up()))
    });
    per_link(e, "shoal_router_node_batches_total", "counter", "Batches sent to the node.", &|i| {
        links[i].metrics().batches.get() as f64
    });
    per_link(e, "shoal_router_node_ops_total", "counter", "Ops sent to the node.", &|i| {
        links[i].metrics().ops.get() as f64
    });
    per_link(
        e,
        "shoal_router_node_failed_calls_total",
        "counter",
        "Calls failed (down, timeout, overload).",
        &|i| links[i].metrics().failed_calls.get() as f64,
    );
    per_link(e, "shoal_router_node_connects_total", "counter", "Successful (re)connections.", &|i| {
        links[i].metrics().connects.get() as f64
    });
    per_link(
        e,
        "shoal_router_node_transfers_total",
        "counter",
        "Ops sent in pieces (larger than one message piece).",
        &|i| links[i].metrics().transfers.get() as f64,
    );
    e.family("shoal_router_node_batch_ops", "histogram", "Ops per batch sent to a node.");
    for (i, link) in links.iter().enumerate() {
        e.histogram_samples("shoal_router_node_batch_ops", &[("node", &ids[i])], &link.metrics().batch_ops);
    }
    e.family(
        "shoal_router_member_rtt_seconds",
        "gauge",
        "Measured round trip to each shard member, primary or replica (a ping a second, smoothed; --read-from nearest picks the lowest).",
    );
    for (i, link) in links.iter().enumerate() {
        let replicas = routing.replicas.get(i).map_or(&[][..], Vec::as_slice);
        let members = std::iter::once(("primary", link)).chain(replicas.iter().map(|r| ("replica", r)));
        for (role, m) in members {
            if let Some(rtt) = m.rtt() {
                let labels = [("node", ids[i].as_str()), ("addr", m.ident().addr.as_str()), ("role", role)];
                e.sample("shoal_router_member_rtt_seconds", &labels, rtt.as_secs_f64());
            }
        }
    }
}

/// With embedded nodes only: each node's own `shoal_node_*` series (separately run nodes
/// publish those themselves: `shoal-node --metrics-listen`, the chart's node ServiceMonitor;
/// re-publishing them here would duplicate every series and cost a stats call per node per
/// scrape), bounded by the call deadline.
async fn embedded_series(e: &mut Exposition, routing: &Routing, ids: &[String]) {
    let stats = routing.stats_all().await;
    let node_stat = |e: &mut Exposition,
                     name: &str,
                     kind: &str,
                     help: &str,
                     f: fn(&shoal_wire::proto::NodeStats) -> u64| {
        e.family(name, kind, help);
        for (i, s) in stats.iter().enumerate() {
            if let Ok(s) = s {
                e.sample(name, &[("node", &ids[i])], f(s) as f64);
            }
        }
    };
    type StatSeries = (&'static str, &'static str, &'static str, fn(&shoal_wire::proto::NodeStats) -> u64);
    let node_series: [StatSeries; 12] = [
        ("shoal_node_keys", "gauge", "Keys stored on the node.", |s| s.keys),
        ("shoal_node_used_memory_bytes", "gauge", "Bytes accounted against maxmemory.", |s| s.used_memory),
        ("shoal_node_maxmemory_bytes", "gauge", "The node's memory limit (0: none).", |s| s.maxmemory),
        ("shoal_node_expired_keys_total", "counter", "Keys expired on the node.", |s| s.expired_keys),
        ("shoal_node_evicted_keys_total", "counter", "Keys evicted on the node.", |s| s.evicted_keys),
        ("shoal_node_keyspace_hits_total", "counter", "Reads that found their key.", |s| s.keyspace_hits),
        ("shoal_node_keyspace_misses_total", "counter", "Reads that missed.", |s| s.keyspace_misses),
        ("shoal_node_topology_version", "gauge", "Topology version the node serves by.", |s| {
            s.topology_version
        }),
        ("shoal_node_migrated_slots_total", "counter", "Slots pulled into the node.", |s| {
            s.slots_migrated_in
        }),
        ("shoal_node_migrated_keys_total", "counter", "Entries pulled into the node.", |s| {
            s.keys_migrated_in
        }),
        ("shoal_node_migrated_bytes_total", "counter", "Bytes pulled into the node.", |s| {
            s.bytes_migrated_in
        }),
        ("shoal_node_slots_dropped_total", "counter", "Slots the node gave away.", |s| s.slots_dropped),
    ];
    for (name, kind, help, f) in node_series {
        node_stat(e, name, kind, help, f);
    }
    type Series = (&'static str, &'static str, &'static str, fn(&shoal_wire::proto::SnapshotInfo) -> u64);
    let snapshot_series: [Series; 9] = [
        ("shoal_node_snapshots_written_total", "counter", "Snapshots written.", |s| s.snapshots_written),
        (
            "shoal_node_snapshot_last_timestamp_seconds",
            "gauge",
            "When the last snapshot started (Unix).",
            |s| s.last_created_ms / 1000,
        ),
        ("shoal_node_snapshot_last_duration_ms", "gauge", "Duration of the last snapshot.", |s| {
            s.last_duration_ms
        }),
        ("shoal_node_snapshot_last_bytes", "gauge", "Size of the last snapshot.", |s| s.last_bytes),
        ("shoal_node_snapshot_last_entries", "gauge", "Entries in the last snapshot.", |s| s.last_entries),
        ("shoal_node_snapshot_last_ok", "gauge", "1 if the last snapshot attempt succeeded.", |s| {
            u64::from(s.last_ok)
        }),
        ("shoal_node_snapshot_load_us", "gauge", "Time to open the snapshot loaded at start.", |s| s.load_us),
        ("shoal_node_snapshot_loaded_entries", "gauge", "Entries in the snapshot loaded at start.", |s| {
            s.loaded_entries
        }),
        ("shoal_node_snapshot_corrupt_entries_total", "counter", "Damaged snapshot entries refused.", |s| {
            s.corrupt_entries
        }),
    ];
    for (name, kind, help, f) in snapshot_series {
        e.family(name, kind, help);
        for (i, s) in stats.iter().enumerate() {
            if let Ok(Some(info)) = s.as_ref().map(|s| s.snapshot.as_ref()) {
                e.sample(name, &[("node", &ids[i])], f(info) as f64);
            }
        }
    }
}

/// `--near-cache` series (only when it is on).
fn near_cache(e: &mut Exposition, near: &crate::nearcache::NearCache) {
    use std::sync::atomic::Ordering::Relaxed;
    let m = &near.metrics;
    e.counter("shoal_router_near_cache_hits_total", "GET/MGET keys served from the near cache.", m.hits.get())
        .counter(
            "shoal_router_near_cache_misses_total",
            "GET/MGET keys the near cache could not serve (absent, expired, or the owner's lease lapsed).",
            m.misses.get(),
        )
        .gauge("shoal_router_near_cache_hit_ratio", "hits / (hits + misses) since start.", near.hit_ratio())
        .counter("shoal_router_near_cache_inserts_total", "Values cached.", m.inserts.get())
        .counter(
            "shoal_router_near_cache_refused_total",
            "Fetched values not cached because their key was invalidated (or the owner changed) while the fetch was on its way.",
            m.refused.get(),
        )
        .counter(
            "shoal_router_near_cache_invalidations_total",
            "Invalidations received from nodes (one per key; an invalidate-all counts one).",
            m.invalidations.get(),
        )
        .counter("shoal_router_near_cache_evictions_total", "Entries evicted to stay within --near-cache.", m.evictions.get())
        .gauge("shoal_router_near_cache_bytes", "Bytes the near cache holds (keys, values, overhead).", m.bytes.load(Relaxed) as f64)
        .gauge("shoal_router_near_cache_entries", "Entries in the near cache.", m.entries.load(Relaxed) as f64)
        .gauge("shoal_router_near_cache_capacity_bytes", "--near-cache.", near.capacity() as f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_labels_stay_distinct_and_printable() {
        assert_eq!(key_label(b"user:42"), "user:42");
        assert_eq!(key_label(b"a\\x00"), "a\\\\x00", "a literal backslash-x is not a byte escape");
        assert_eq!(key_label(b"a\x00"), "a\\x00");
        assert_eq!(key_label("é\n\"".as_bytes()), "\\xc3\\xa9\\x0a\"");
        let long = key_label(&[b'k'; 300]);
        assert_eq!((long.len(), long.ends_with("...")), (131, true));

        let hot = crate::hotkeys::HotKeys::new(64);
        for i in 0..20u8 {
            for _ in 0..=i {
                hot.record(&[b'k', i], 1);
            }
        }
        let mut e = Exposition::new();
        hotkey_series(&mut e, &hot);
        let page = e.finish();
        let ops = page.lines().filter(|l| l.starts_with("shoal_router_hotkey_ops{")).count();
        assert_eq!(ops, HOTKEY_SERIES, "bounded series");
        assert!(page.contains("shoal_router_hotkey_ops{key=\"k\\\\x13\"} 20"), "{page}");
    }
}
