//! INFO: Redis's sections, with values summed over the nodes, plus a `shoal` section.

use std::sync::Arc;

use shoal_wire::proto::NodeStats;

use super::connection::REDIS_COMPAT_VERSION;
use super::spec::*;
use super::{Args, Ctx, Pending};
use crate::backend::Routing;
use crate::resp::Reply;
use crate::state::{ClusterMode, RouterState};

pub const INFO: CommandSpec = CommandSpec { decl: &redis::INFO, run: info, ..CommandSpec::DEFAULT };

/// The sections only `all`/`everything` or an explicit request show (as in Redis); the others
/// of [`ALL_SECTIONS`] are the default ones.
const NOT_DEFAULT: &[&str] = &["commandstats", "latencystats"];
const ALL_SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "modules",
    "commandstats",
    "errorstats",
    "latencystats",
    "cluster",
    "keyspace",
    "shoal",
];

pub fn info(args: &Args, ctx: &mut Ctx) -> Pending {
    let mut wanted: Vec<String> =
        args[1..].iter().map(|a| String::from_utf8_lossy(a).to_ascii_lowercase()).collect();
    if wanted.iter().any(|w| matches!(w.as_str(), "all" | "everything")) {
        wanted = ALL_SECTIONS.iter().map(|s| s.to_string()).collect();
    } else if wanted.is_empty() || wanted.iter().any(|w| w == "default") {
        wanted = ALL_SECTIONS.iter().filter(|s| !NOT_DEFAULT.contains(s)).map(|s| s.to_string()).collect();
    }
    let state = Arc::clone(ctx.state);
    let routing = Arc::clone(ctx.routing);
    let (clients, blocked) = (state.connected_clients(), state.clients.blocked());
    // Read as INFO arrives, as BGSAVE reads it: commands pipelined behind this INFO are judged
    // by the flag then, not after the nodes' stats come back (a save may end meanwhile).
    let bgsave = state.bgsave_running.load(std::sync::atomic::Ordering::Acquire);
    let (embedded, registry) = (state.embedded.is_some(), ctx.registry);
    Pending::later(async move {
        let stats = routing.stats_all().await;
        let reachable = stats.iter().filter(|s| s.is_ok()).count();
        let nodes: Vec<NodeStats> = stats.into_iter().flatten().collect();
        let gathered =
            Gathered { state, routing, registry, clients, blocked, bgsave, embedded, nodes, reachable };
        let mut out: Vec<u8> = Vec::new();
        for section in ALL_SECTIONS.iter().filter(|s| wanted.iter().any(|w| w == *s)) {
            if !out.is_empty() {
                out.extend_from_slice(b"\r\n");
            }
            let title = match *section {
                "cpu" => "CPU".to_string(),
                s => format!("{}{}", s[..1].to_ascii_uppercase(), &s[1..]),
            };
            out.extend_from_slice(format!("# {title}\r\n").as_bytes());
            if *section == "errorstats" {
                // Error replies by code (this router's), as Redis counts them; a code is written
                // as the bytes it is (a script may raise one that is not UTF-8), as by Redis.
                for (code, count) in gathered.state.stats.errors() {
                    out.extend_from_slice(b"errorstat_");
                    out.extend_from_slice(&code);
                    out.extend_from_slice(format!(":count={count}\r\n").as_bytes());
                }
                continue;
            }
            let mut field = |k: &str, v: String| {
                out.extend_from_slice(format!("{k}:{v}\r\n").as_bytes());
            };
            gathered.section(section, &mut field);
        }
        Reply::Verbatim(out.into())
    })
}

/// What the sections are written from, gathered once per INFO.
struct Gathered {
    state: Arc<RouterState>,
    routing: Arc<Routing>,
    registry: &'static Registry,
    clients: usize,
    blocked: usize,
    /// A BGSAVE through this router was running when INFO arrived.
    bgsave: bool,
    embedded: bool,
    /// The nodes that answered.
    nodes: Vec<NodeStats>,
    reachable: usize,
}

impl Gathered {
    /// A node field summed over the nodes.
    fn sum(&self, f: fn(&NodeStats) -> u64) -> u64 {
        self.nodes.iter().map(f).sum()
    }

    fn section(&self, name: &str, field: &mut dyn FnMut(&str, String)) {
        match name {
            "server" => self.server(field),
            "clients" => self.clients(field),
            "memory" => self.memory(field),
            "persistence" => self.persistence(field),
            "stats" => self.stats(field),
            "replication" => self.replication(field),
            "cpu" => cpu(field),
            // No modules: the section is there, empty, as on a Redis without any.
            "modules" => {}
            // Clients see one server, not a cluster (the router does the routing): as Redis
            // without cluster mode answers, which is what clients and test harnesses check.
            "cluster" => {
                let on = self.state.settings.cluster.mode == ClusterMode::Emulated;
                field("cluster_enabled", if on { "1" } else { "0" }.into())
            }
            "commandstats" => self.commandstats(field),
            // (errorstats: written by `info`, as bytes.)
            "latencystats" => self.latencystats(field),
            "keyspace" => self.keyspace(field),
            "shoal" => self.shoal(field),
            _ => {}
        }
    }

    /// The server: versions, process, port, uptime.
    fn server(&self, field: &mut dyn FnMut(&str, String)) {
        field("redis_version", REDIS_COMPAT_VERSION.into());
        field("shoal_version", env!("CARGO_PKG_VERSION").into());
        let mode = match self.state.settings.cluster.mode {
            ClusterMode::Off => "standalone",
            ClusterMode::Emulated => "cluster",
        };
        field("redis_mode", mode.into());
        field("os", format!("{} {}", std::env::consts::OS, std::env::consts::ARCH));
        field("arch_bits", (usize::BITS).to_string());
        field("process_id", std::process::id().to_string());
        field("tcp_port", self.state.settings.tcp_port.to_string());
        let up = self.state.started.elapsed().as_secs();
        field("uptime_in_seconds", up.to_string());
        field("uptime_in_days", (up / 86_400).to_string());
    }

    /// Connected and blocked clients.
    fn clients(&self, field: &mut dyn FnMut(&str, String)) {
        field("connected_clients", self.clients.to_string());
        field("maxclients", self.state.settings.maxclients.to_string());
        field("blocked_clients", self.blocked.to_string());
    }

    /// The nodes' memory, summed.
    fn memory(&self, field: &mut dyn FnMut(&str, String)) {
        let used = self.sum(|n| n.used_memory);
        let max = self.sum(|n| n.maxmemory);
        field("used_memory", used.to_string());
        field("used_memory_human", human(used));
        let rss = resident_bytes(self.embedded, &self.nodes);
        field("used_memory_rss", rss.to_string());
        field("used_memory_rss_human", human(rss));
        // Each node's own peak, summed: at least the cluster's (the nodes peaked at different
        // times), as a Redis's peak is its process's. Sidekiq's dashboard reads the _human form.
        let peak = self.sum(|n| n.used_memory_peak).max(used);
        field("used_memory_peak", peak.to_string());
        field("used_memory_peak_human", human(peak));
        field("used_memory_peak_perc", format!("{:.2}%", used as f64 * 100.0 / peak.max(1) as f64));
        field("maxmemory", max.to_string());
        field("maxmemory_human", human(max));
        let policy = self.nodes.first().map_or("noeviction", |n| n.maxmemory_policy.as_str());
        field("maxmemory_policy", policy.into());
    }

    /// The nodes' snapshots.
    fn persistence(&self, field: &mut dyn FnMut(&str, String)) {
        let snaps: Vec<_> = self.nodes.iter().filter_map(|n| n.snapshot.as_ref()).collect();
        let max =
            |f: fn(&shoal_wire::proto::SnapshotInfo) -> u64| snaps.iter().map(|s| f(s)).max().unwrap_or(0);
        let total = |f: fn(&shoal_wire::proto::SnapshotInfo) -> u64| snaps.iter().map(|s| f(s)).sum::<u64>();
        let last_save = snaps.iter().map(|s| s.last_created_ms).min().unwrap_or(0) / 1000;
        let all_ok = snaps.iter().all(|s| s.last_ok);
        field("loading", "0".into());
        field("rdb_changes_since_last_save", total(|s| s.changes_since_last_save).to_string());
        // A BGSAVE through this router counts from when it answered "started" (the nodes may not
        // have begun yet), as long as it refuses another one.
        field(
            "rdb_bgsave_in_progress",
            u8::from(self.bgsave || snaps.iter().any(|s| s.in_progress)).to_string(),
        );
        field("rdb_last_save_time", last_save.to_string());
        field("rdb_last_bgsave_status", if all_ok { "ok" } else { "err" }.into());
        field("rdb_last_bgsave_time_sec", (max(|s| s.last_duration_ms) / 1000).to_string());
        field("rdb_saves", total(|s| s.snapshots_written).to_string());
        field("shoal_snapshot_nodes_enabled", snaps.iter().filter(|s| s.enabled).count().to_string());
        field("shoal_snapshot_last_entries", total(|s| s.last_entries).to_string());
        field("shoal_snapshot_last_bytes", total(|s| s.last_bytes).to_string());
        field("shoal_snapshot_last_duration_ms", max(|s| s.last_duration_ms).to_string());
        field("shoal_snapshot_loaded_entries", total(|s| s.loaded_entries).to_string());
        field("shoal_snapshot_load_us", max(|s| s.load_us).to_string());
        field("shoal_snapshot_corrupt_entries", total(|s| s.corrupt_entries).to_string());
    }

    /// Counters: the router's, and the nodes' summed.
    fn stats(&self, field: &mut dyn FnMut(&str, String)) {
        let (commands, connections, rejected) = self.state.metrics.info_counts();
        field("total_connections_received", connections.to_string());
        field("total_commands_processed", commands.to_string());
        field("rejected_connections", rejected.to_string());
        field("expired_keys", self.sum(|n| n.expired_keys).to_string());
        // Redis 7.4's: hash fields removed by their own time (HEXPIRE).
        field("expired_subkeys", self.sum(|n| n.expired_subkeys).to_string());
        field("evicted_keys", self.sum(|n| n.evicted_keys).to_string());
        field("keyspace_hits", self.sum(|n| n.keyspace_hits).to_string());
        field("keyspace_misses", self.sum(|n| n.keyspace_misses).to_string());
        // Every node holds every router's registrations: any one answers for all.
        let first = |f: fn(&NodeStats) -> u64| self.nodes.first().map_or(0, f).to_string();
        field("pubsub_channels", first(|n| n.pubsub_channels));
        field("pubsub_patterns", first(|n| n.pubsub_patterns));
        field("pubsub_shardchannels", first(|n| n.pubsub_shard_channels));
        // MIGRATE is refused (docs/compatibility.md): no socket to another server is ever cached.
        field("migrate_cached_sockets", "0".into());
        field("total_error_replies", self.state.stats.error_replies().to_string());
    }

    /// To clients the router is one master; its replicas are every shard's.
    fn replication(&self, field: &mut dyn FnMut(&str, String)) {
        // To clients the router is one master; its replicas are every shard's.
        field("role", "master".into());
        let replicas: Vec<_> = self.nodes.iter().flat_map(|n| n.replicas.iter()).collect();
        field("connected_slaves", replicas.len().to_string());
        for (i, r) in replicas.iter().enumerate() {
            let (ip, port) = r.addr.rsplit_once(':').unwrap_or((r.addr.as_str(), "0"));
            let state = if r.synced { "online" } else { "wait_bgsave" };
            field(
                &format!("slave{i}"),
                format!(
                    "ip={ip},port={port},state={state},offset={},lag={}",
                    r.acked_offset,
                    r.lag_ms / 1000
                ),
            );
        }
        field("master_repl_offset", self.sum(|n| n.repl_offset).to_string());
        field("shoal_fenced_primaries", self.nodes.iter().filter(|n| n.fenced).count().to_string());
        let lag = self.nodes.iter().flat_map(|n| n.replicas.iter()).map(|r| r.lag_ms).max().unwrap_or(0);
        field("shoal_max_replica_lag_ms", lag.to_string());
    }

    /// Calls, time and failures per command (this router's).
    fn commandstats(&self, field: &mut dyn FnMut(&str, String)) {
        for n in self.state.stats.snapshot(|s| self.registry.name_of(s)) {
            let per_call = n.usec as f64 / n.calls as f64;
            field(
                &format!("cmdstat_{}", n.name),
                format!(
                    "calls={},usec={},usec_per_call={per_call:.2},rejected_calls=0,failed_calls={}",
                    n.calls, n.usec, n.failed
                ),
            );
        }
    }

    /// Latency percentiles per command (this router's).
    fn latencystats(&self, field: &mut dyn FnMut(&str, String)) {
        for n in self.state.stats.snapshot(|s| self.registry.name_of(s)) {
            field(
                &format!("latency_percentiles_usec_{}", n.name),
                format!(
                    "p50={:.3},p99={:.3},p99.9={:.3}",
                    n.percentile(50.0),
                    n.percentile(99.0),
                    n.percentile(99.9)
                ),
            );
        }
    }

    /// The keys, summed over the nodes.
    fn keyspace(&self, field: &mut dyn FnMut(&str, String)) {
        let keys = self.sum(|n| n.keys);
        if keys > 0 {
            let expires = self.sum(|n| n.volatile_keys);
            // The nodes' averages, weighted by their keys with a TTL.
            let weighted: u128 =
                self.nodes.iter().map(|n| u128::from(n.avg_ttl_ms) * u128::from(n.volatile_keys)).sum();
            let avg_ttl = if expires == 0 { 0 } else { weighted / u128::from(expires) };
            field("db0", format!("keys={keys},expires={expires},avg_ttl={avg_ttl}"));
        }
    }

    /// The topology this router routes by.
    fn shoal(&self, field: &mut dyn FnMut(&str, String)) {
        field("topology_version", self.routing.topology.version.to_string());
        field("nodes", self.routing.len().to_string());
        field("nodes_reachable", self.reachable.to_string());
    }
}

/// `used_memory_rss`: as in Redis, the resident set size of the process(es) holding the data, each
/// process counted once. Embedded nodes run inside this router process and each report that same
/// process's RSS, so it is counted once (it includes the router itself); separate node processes
/// are summed (the routers' own memory is not included, as used_memory counts only the nodes' data).
/// Unreachable nodes are missing from the sum, as from every other summed field.
/// CPU time of this process (the router, and in the embedded shape its nodes too), of its
/// waited-for children, and of its main thread, in seconds, from `/proc` (Linux; zeros
/// elsewhere), as Redis prints it.
fn cpu(field: &mut dyn FnMut(&str, String)) {
    let pid = std::process::id();
    let all = proc_times("/proc/self/stat");
    let main = proc_times(&format!("/proc/self/task/{pid}/stat"));
    let secs = |ticks: u64| format!("{:.6}", ticks as f64 / USER_HZ);
    field("used_cpu_sys", secs(all[1]));
    field("used_cpu_user", secs(all[0]));
    field("used_cpu_sys_children", secs(all[3]));
    field("used_cpu_user_children", secs(all[2]));
    field("used_cpu_sys_main_thread", secs(main[1]));
    field("used_cpu_user_main_thread", secs(main[0]));
}

/// Clock ticks per second in `/proc`'s times (the kernel's fixed USER_HZ on Linux).
const USER_HZ: f64 = 100.0;

/// utime, stime, cutime and cstime (ticks) from a `/proc/.../stat` file; zeros if unreadable.
fn proc_times(path: &str) -> [u64; 4] {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces: state is the
    // first, utime the 12th.
    let rest = text.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest.split_whitespace().skip(11).take(4).map(|v| v.parse().unwrap_or(0)).collect();
    [0, 1, 2, 3].map(|i| f.get(i).copied().unwrap_or(0))
}

pub(super) fn resident_bytes(embedded: bool, nodes: &[NodeStats]) -> u64 {
    if embedded { shoal_telemetry::metrics::rss_bytes() } else { nodes.iter().map(|n| n.rss_bytes).sum() }
}

/// Bytes as Redis prints them in `*_human` fields (`1.50M`).
fn human(n: u64) -> String {
    let units = [("G", 1u64 << 30), ("M", 1 << 20), ("K", 1 << 10)];
    for (suffix, size) in units {
        if n >= size {
            return format!("{:.2}{suffix}", n as f64 / size as f64);
        }
    }
    format!("{n}B")
}
