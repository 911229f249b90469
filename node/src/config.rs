//! `shoal-node` command line: flags, environment overrides and their defaults.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use shoal_telemetry::logging::LogFormat;
use shoal_wire::num::parse_memory;

use crate::snapshot::bake::InputFormat;
use shoal_wire::settings;

use crate::store::object::Limits;
use crate::store::{EvictionPolicy, StoreConfig, default_shards};

pub const DEFAULT_LISTEN: &str = "127.0.0.1:7001";

#[derive(Debug, Parser)]
#[command(
    name = "shoal-node",
    version,
    about = "Shoal storage node: a sharded in-memory store served over gRPC."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: ServeArgs,
    #[command(flatten)]
    pub auth: shoal_wire::auth::SecretArgs,
    /// Colocation rules, `PREFIX*` (repeat, or comma separated): keys starting with PREFIX hash
    /// on PREFIX alone, so they share one slot and one node without {hashtags} (an application's
    /// transactions and scripts over them then run as on one Redis). Every router and node of a
    /// cluster, and `bake`, must have the same rules for the life of the data.
    #[arg(
        long = "colocate",
        env = "SHOAL_COLOCATE",
        value_delimiter = ',',
        value_name = "PREFIX*",
        global = true
    )]
    pub colocate: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build a snapshot offline from CSV (key,value[,ttl_seconds]) or JSONL ({"key","value"} or
    /// {"key","hash"|"list"|"set"|"zset"}, optional "ttl"); a node started with
    /// --data-dir on the output directory serves it at once.
    Bake(BakeArgs),
    /// Read one key straight from a node over gRPC (bypassing routers), e.g. to check a node or to
    /// time how soon a restarted node answers. The read is routed by the topology the node serves
    /// by. Exit status: 0 found, 1 not found (or any error), 3 the node does not serve the key's
    /// slot.
    Get(GetArgs),
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// The node's gRPC address.
    #[arg(long, default_value = DEFAULT_LISTEN)]
    pub node: String,
    /// The key.
    pub key: String,
    /// Keep retrying (connection refused, key not there yet) for up to this many seconds.
    #[arg(long, default_value_t = 0.0)]
    pub wait: f64,
    /// With --wait: retry until the value equals this.
    #[arg(long)]
    pub expect: Option<String>,
}

#[derive(Debug, Args)]
pub struct BakeArgs {
    /// The input file.
    pub input: PathBuf,
    /// A data directory (the snapshot gets the next snapshot-<seq>.shoal name there) or a file.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Input format: csv or jsonl (default: .jsonl/.ndjson files are JSONL, others CSV).
    #[arg(long)]
    pub format: Option<InputFormat>,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// gRPC listen address.
    #[arg(long, env = "SHOAL_NODE_LISTEN", default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,

    /// The address topologies know this node by (host:port), when it differs from --listen (a
    /// pod listening on 0.0.0.0 is known by its DNS name or IP). A node finds its place in a
    /// topology (primary or replica of which shard) by this address, else by --node-id.
    #[arg(long, env = "SHOAL_NODE_ADVERTISE")]
    pub advertise: Option<String>,

    /// Memory limit: bytes, or with a unit like Redis (100mb, 2gb; k/m/g are powers of 1000,
    /// kb/mb/gb powers of 1024). 0 means no limit. CONFIG SET through a router changes it and the
    /// policy at runtime (not kept across restarts).
    #[arg(long, env = "SHOAL_NODE_MAXMEMORY", default_value = "0", value_parser = parse_memory)]
    pub maxmemory: u64,

    /// What to do at the memory limit.
    #[arg(long, env = "SHOAL_NODE_MAXMEMORY_POLICY", default_value = "noeviction",
          value_parser = clap::builder::PossibleValuesParser::new(EvictionPolicy::ALL.map(|p| p.as_str())))]
    pub maxmemory_policy: String,

    /// How slowly the LFU counter of allkeys-lfu/volatile-lfu grows (Redis's lfu-log-factor:
    /// an access increments it with probability 1 / ((counter - 5) * factor + 1)).
    #[arg(long, env = "SHOAL_NODE_LFU_LOG_FACTOR", default_value = "10", value_parser = int32_count)]
    pub lfu_log_factor: u64,

    /// Minutes after which an idle key's LFU counter drops by one (Redis's lfu-decay-time; 0:
    /// never).
    #[arg(long, env = "SHOAL_NODE_LFU_DECAY_TIME", default_value = "1", value_parser = int32_count)]
    pub lfu_decay_time: u64,

    /// Hashes with more fields than this are stored as hash tables instead of listpacks (Redis's
    /// hash-max-listpack-entries, 0 to 9223372036854775807). This and the other thresholds below
    /// can be changed at runtime with CONFIG SET through a router (not kept across restarts);
    /// existing values keep their encoding until a write converts them, as in Redis.
    #[arg(long, env = "SHOAL_NODE_HASH_MAX_LISTPACK_ENTRIES", default_value_t = 512, allow_negative_numbers = true,
          value_parser = count)]
    pub hash_max_listpack_entries: u64,

    /// Hashes with a field or value longer than this many bytes are stored as hash tables (Redis's
    /// hash-max-listpack-value; units like --maxmemory).
    #[arg(long, env = "SHOAL_NODE_HASH_MAX_LISTPACK_VALUE", default_value = "64", allow_negative_numbers = true,
          value_parser = byte_limit)]
    pub hash_max_listpack_value: u64,

    /// Sets of more integers than this are stored as hash tables instead of intsets (Redis's
    /// set-max-intset-entries).
    #[arg(long, env = "SHOAL_NODE_SET_MAX_INTSET_ENTRIES", default_value_t = 512, allow_negative_numbers = true,
          value_parser = count)]
    pub set_max_intset_entries: u64,

    /// Sorted sets with more members than this are stored as skiplists instead of listpacks
    /// (Redis's zset-max-listpack-entries).
    #[arg(long, env = "SHOAL_NODE_ZSET_MAX_LISTPACK_ENTRIES", default_value_t = 128, allow_negative_numbers = true,
          value_parser = count)]
    pub zset_max_listpack_entries: u64,

    /// Sorted sets with a member longer than this many bytes are stored as skiplists (Redis's
    /// zset-max-listpack-value).
    #[arg(long, env = "SHOAL_NODE_ZSET_MAX_LISTPACK_VALUE", default_value = "64", allow_negative_numbers = true,
          value_parser = byte_limit)]
    pub zset_max_listpack_value: u64,

    /// Size of one list chunk (Redis's list-max-listpack-size): a positive number caps its
    /// entries, -1 to -5 its bytes (4, 8, 16, 32 or 64 KiB).
    #[arg(long, env = "SHOAL_NODE_LIST_MAX_LISTPACK_SIZE", default_value_t = -2, allow_negative_numbers = true,
          value_parser = list_size)]
    pub list_max_listpack_size: i64,

    /// A stream's listpack node holds at most this many bytes (Redis's stream-node-max-bytes;
    /// 0: no cap but Redis's 1 GiB).
    #[arg(long, env = "SHOAL_NODE_STREAM_NODE_MAX_BYTES", default_value = "4096", allow_negative_numbers = true,
          value_parser = byte_limit)]
    pub stream_node_max_bytes: u64,

    /// A stream's listpack node holds at most this many entries (Redis's
    /// stream-node-max-entries; 0: no cap).
    #[arg(long, env = "SHOAL_NODE_STREAM_NODE_MAX_ENTRIES", default_value = "100", allow_negative_numbers = true,
          value_parser = count)]
    pub stream_node_max_entries: u64,

    /// Keyspace notifications (Redis's notify-keyspace-events letters, e.g. KEA; empty: off),
    /// published through this node's pub/sub to every router's subscribers. CONFIG SET through
    /// a router changes it at runtime (not kept across restarts).
    #[arg(long, env = "SHOAL_NODE_NOTIFY_KEYSPACE_EVENTS", default_value = "", value_parser = notify_classes)]
    pub notify_keyspace_events: u32,

    /// Internal shards (rounded up to a power of two); default: 4 per core, at least 8.
    #[arg(long, env = "SHOAL_NODE_SHARDS")]
    pub shards: Option<usize>,

    /// Serve /metrics, /healthz and /readyz over HTTP on this address (off by default; the operator
    /// turns it on: routers report node series only for nodes embedded in them).
    #[arg(long, env = "SHOAL_NODE_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,

    /// Directory for snapshots. At start the newest valid one is mapped and served at once; a
    /// snapshot is written on SIGTERM, every --snapshot-interval, and on request (SHOAL SNAPSHOT).
    /// Without it the node keeps nothing across restarts.
    #[arg(long, env = "SHOAL_NODE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// Seconds between periodic snapshots (0: only on request and at shutdown).
    #[arg(long, env = "SHOAL_NODE_SNAPSHOT_INTERVAL", default_value_t = 0)]
    pub snapshot_interval: u64,

    /// Snapshots to keep in the data directory.
    #[arg(long, env = "SHOAL_NODE_SNAPSHOT_KEEP", default_value_t = 2)]
    pub snapshot_keep: usize,

    /// This node's id in the cluster topology (a StatefulSet pod's ordinal, say). Without it, the
    /// node finds itself in a topology by its --listen address.
    #[arg(long, env = "SHOAL_NODE_ID")]
    pub node_id: Option<u32>,

    /// A topology file (JSON) to follow: the node serves only its slots at the newest version, and
    /// pulls the slots moving to it. Without one it serves every key it is sent (routers with a
    /// static --nodes list) until a coordinator or router offers it a topology.
    #[arg(long, env = "SHOAL_NODE_TOPOLOGY_FILE")]
    pub topology_file: Option<PathBuf>,

    /// Most bytes per second this node pulls when slots move to it, so a migration leaves CPU for
    /// client traffic (0: as fast as the old owners send). See docs/benchmarks.md for what each
    /// rate costs clients; raise it on nodes with cores to spare.
    #[arg(long, env = "SHOAL_NODE_MIGRATE_RATE", default_value = "8mb", value_parser = parse_memory)]
    pub migrate_rate: u64,

    /// How much of its change log a primary keeps (Redis's repl-backlog-size): a replica that
    /// reconnects within it continues where it was; one further behind gets a full sync. Each
    /// change takes its key's length plus about 13 bytes, and a SET of up to 4 KiB its value too
    /// (units like --maxmemory).
    #[arg(long, env = "SHOAL_NODE_REPL_BACKLOG_SIZE", default_value = "16mb", value_parser = parse_memory)]
    pub repl_backlog_size: u64,

    /// Count reads, writes and bytes per slot for SHOAL SLOT-STATS (Redis 8's
    /// cluster-slot-stats-enabled; CONFIG SET changes it). Off by default, as in Redis: it costs a
    /// cache miss per op under random keys. Key counts are reported either way.
    #[arg(long, env = "SHOAL_NODE_SLOT_STATS")]
    pub slot_stats: bool,

    /// After a script has held the node this many milliseconds, other commands are answered BUSY
    /// and SCRIPT KILL can stop it (Redis's busy-reply-threshold; CONFIG SET changes it).
    #[arg(long, env = "SHOAL_NODE_BUSY_REPLY_THRESHOLD", default_value_t = crate::script::DEFAULT_BUSY_MS)]
    pub busy_reply_threshold: u64,

    /// Memory the Lua VM that runs scripts may use (compiled scripts and what running ones
    /// allocate); a script past it fails with an error and the VM stays usable.
    #[arg(long, env = "SHOAL_NODE_LUA_MEMORY_LIMIT", default_value = "256mb", value_parser = parse_memory)]
    pub lua_memory_limit: u64,

    /// A primary with replicas that did not run for this many milliseconds (SIGSTOP, a frozen VM,
    /// starvation) stops serving until the failover writer confirms it, since a replica may have
    /// been promoted meanwhile (0: never). Keep it below the writer's --down-after-ms.
    #[arg(long, env = "SHOAL_NODE_STALL_FENCE_MS", default_value_t = 500)]
    pub stall_fence_ms: u64,

    /// On SIGTERM, a primary with replicas first hands its shard over to a caught-up replica
    /// (when a failover writer is watching), then answers for this many milliseconds more, so
    /// routers learn of the switch before it stops.
    #[arg(long, env = "SHOAL_NODE_HANDOVER_LINGER_MS", default_value_t = 1000)]
    pub handover_linger_ms: u64,

    /// Serve without a cluster secret: any process that reaches this port can read, write and
    /// flush keys and push topologies. Only for a network nobody else can reach; by default the
    /// node refuses to start without --cluster-secret(-file) / SHOAL_CLUSTER_SECRET.
    #[arg(long, env = "SHOAL_NODE_NO_AUTH")]
    pub no_auth: bool,

    /// Active expiry period in milliseconds.
    #[arg(long, env = "SHOAL_NODE_EXPIRE_INTERVAL_MS", default_value_t = 100)]
    pub expire_interval_ms: u64,

    /// Worker threads; default: the CPUs this process may use (cgroup limits included). One
    /// thread runs every task on the main thread (Tokio's current-thread scheduler).
    #[arg(long, env = "SHOAL_THREADS")]
    pub threads: Option<usize>,

    /// Log format: text or json (level from RUST_LOG, default info).
    #[arg(long, env = "SHOAL_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,
}

/// `--notify-keyspace-events`: Redis's class letters, checked like CONFIG SET checks them.
fn notify_classes(s: &str) -> Result<u32, String> {
    shoal_wire::notify::parse(s.as_bytes()).ok_or_else(|| shoal_wire::notify::BAD_CLASS.to_string())
}

impl ServeArgs {
    pub fn store_config(&self) -> StoreConfig {
        StoreConfig {
            shards: self.shards.unwrap_or_else(default_shards),
            maxmemory: self.maxmemory as usize,
            policy: self.maxmemory_policy.parse().expect("clap checked the policy name"),
            limits: self.limits(),
            notify_keyspace_events: self.notify_keyspace_events,
            slot_stats: self.slot_stats,
            lfu_log_factor: self.lfu_log_factor as u32,
            lfu_decay_time: self.lfu_decay_time as u32,
            ..StoreConfig::default()
        }
    }

    /// The encoding thresholds from the flags.
    pub fn limits(&self) -> Limits {
        let size = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        Limits {
            hash_max_listpack_entries: size(self.hash_max_listpack_entries),
            hash_max_listpack_value: size(self.hash_max_listpack_value),
            set_max_intset_entries: size(self.set_max_intset_entries),
            zset_max_listpack_entries: size(self.zset_max_listpack_entries),
            zset_max_listpack_value: size(self.zset_max_listpack_value),
            list_max_listpack_size: self.list_max_listpack_size,
            stream_node: crate::store::object::stream::NodeLimits {
                max_bytes: size(self.stream_node_max_bytes),
                max_entries: size(self.stream_node_max_entries),
            },
        }
    }

    pub fn expire_interval(&self) -> Duration {
        Duration::from_millis(self.expire_interval_ms.max(1))
    }

    pub fn snapshot_interval(&self) -> Option<Duration> {
        (self.snapshot_interval > 0).then(|| Duration::from_secs(self.snapshot_interval))
    }
}

// Flag parsers with Redis's ranges and texts (shoal_wire::settings).
fn int32_count(s: &str) -> Result<u64, String> {
    shoal_wire::settings::parse_int32_count(s.as_bytes()).map_err(str::to_string)
}

fn count(s: &str) -> Result<u64, String> {
    settings::parse_count(s.as_bytes()).map_err(String::from)
}

fn byte_limit(s: &str) -> Result<u64, String> {
    settings::parse_byte_limit(s.as_bytes()).map_err(String::from)
}

fn list_size(s: &str) -> Result<i64, String> {
    settings::parse_list_size(s.as_bytes()).map_err(String::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_parses_and_validates() {
        let cli = Cli::try_parse_from([
            "shoal-node",
            "--listen",
            "127.0.0.1:7005",
            "--maxmemory",
            "1mb",
            "--maxmemory-policy",
            "allkeys-lru",
        ])
        .unwrap();
        assert_eq!(cli.serve.migrate_rate, crate::server::DEFAULT_MIGRATE_RATE, "flag and library agree");
        assert_eq!(
            cli.serve.repl_backlog_size as usize,
            crate::store::changes::DEFAULT_BACKLOG_BYTES,
            "flag and library agree"
        );
        let small = Cli::try_parse_from(["shoal-node", "--repl-backlog-size", "1mb"]).unwrap();
        assert_eq!(small.serve.repl_backlog_size, 1 << 20);
        let config = cli.serve.store_config();
        assert_eq!(config.maxmemory, 1 << 20);
        assert_eq!(config.policy, EvictionPolicy::AllKeysLru);
        assert!(Cli::try_parse_from(["shoal-node", "--maxmemory-policy", "lfu"]).is_err());
        assert_eq!(config.limits, Limits::default(), "the flags' defaults are Redis's, as the store's");
    }

    #[test]
    fn thresholds_take_redis_ranges() {
        let cli = Cli::try_parse_from([
            "shoal-node",
            "--hash-max-listpack-entries",
            "2",
            "--hash-max-listpack-value",
            "1kb",
            "--set-max-intset-entries",
            "0",
            "--zset-max-listpack-entries",
            "7",
            "--zset-max-listpack-value",
            "9",
            "--list-max-listpack-size",
            "-5",
        ])
        .unwrap();
        let l = cli.serve.store_config().limits;
        assert_eq!(
            (l.hash_max_listpack_entries, l.hash_max_listpack_value, l.set_max_intset_entries),
            (2, 1024, 0)
        );
        assert_eq!(
            (l.zset_max_listpack_entries, l.zset_max_listpack_value, l.list_max_listpack_size),
            (7, 9, -5)
        );
        for bad in [
            ["--hash-max-listpack-entries", "-1"],
            ["--set-max-intset-entries", "1k"],
            ["--zset-max-listpack-value", "-1"],
            ["--list-max-listpack-size", "2147483648"],
        ] {
            assert!(Cli::try_parse_from(["shoal-node", bad[0], bad[1]]).is_err(), "{bad:?}");
        }
        let err = Cli::try_parse_from(["shoal-node", "--hash-max-listpack-entries", "-1"]).unwrap_err();
        assert!(err.to_string().contains(settings::NOT_NON_NEGATIVE), "{err}");
    }

    #[test]
    fn notifications_take_redis_letters() {
        let cli = Cli::try_parse_from(["shoal-node", "--notify-keyspace-events", "KEA"]).unwrap();
        assert_eq!(shoal_wire::notify::to_string(cli.serve.store_config().notify_keyspace_events), "AKE");
        assert_eq!(
            Cli::try_parse_from(["shoal-node"]).unwrap().serve.store_config().notify_keyspace_events,
            0
        );
        let err = Cli::try_parse_from(["shoal-node", "--notify-keyspace-events", "xyz"]).unwrap_err();
        assert!(err.to_string().contains(shoal_wire::notify::BAD_CLASS), "{err}");
    }
}
