//! `shoal-router` command line: flags, environment overrides and their defaults.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use shoal_telemetry::logging::LogFormat;
use shoal_wire::num::parse_memory;

pub const DEFAULT_RESP: &str = "127.0.0.1:6379";
pub const DEFAULT_HTTP: &str = "127.0.0.1:8080";

#[derive(Debug, Parser)]
#[command(
    name = "shoal-router",
    version,
    // A flag given twice takes its last value (wrappers and tests append overrides).
    args_override_self = true,
    about = "Shoal router: speaks RESP (TCP and Unix socket) and HTTP to clients, routes each key to its node over gRPC.",
    after_help = "Start a whole local cluster with 3 in-process nodes:\n  shoal-router --embedded-nodes 3\n\
                  Front a running cluster:\n  shoal-router --nodes 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: RouterArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Move a cluster of separately started nodes onto a new set of nodes, online: writes the
    /// topology file routers and nodes follow, offers each version to the nodes, shows progress.
    /// Safe to interrupt and run again (it resumes).
    Reshard(ReshardArgs),
    /// Check a running router end to end, as a client would (the Helm chart's `helm test`): PING,
    /// SET with a TTL, GET, TTL, and an MSET/MGET spread over every shard. Exits non-zero on the
    /// first wrong answer.
    Check(CheckArgs),
    /// Watch a cluster of separately started nodes with replicas and fail over: when a shard's
    /// primary is unreachable for --down-after-ms, promote its most advanced synced replica; when
    /// a primary (re)starts fenced, promote a replica holding its earlier data or confirm it.
    /// Writes the topology file routers and nodes follow; runs until SIGTERM. Run one.
    Failover(FailoverArgs),
}

#[derive(Debug, Clone, Args)]
pub struct FailoverArgs {
    /// The topology file (shards list their replicas: `"replicas": ["host:port", ...]`).
    #[arg(long, env = "SHOAL_TOPOLOGY_FILE")]
    pub topology_file: PathBuf,
    /// How long a primary may be unreachable before a replica replaces it.
    #[arg(long, env = "SHOAL_FAILOVER_DOWN_AFTER_MS", default_value_t = 1000)]
    pub down_after_ms: u64,
    /// How often every member is checked.
    #[arg(long, env = "SHOAL_FAILOVER_INTERVAL_MS", default_value_t = 100)]
    pub interval_ms: u64,
}

#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// The router's RESP address (host:port).
    #[arg(long, env = "SHOAL_CHECK_ADDR", default_value = "127.0.0.1:6379")]
    pub addr: String,
    /// Password, if the router requires one.
    #[arg(long, env = "SHOAL_REQUIREPASS", hide_env_values = true)]
    pub password: Option<String>,
    /// Keep trying to connect for this long (the Service may not have endpoints yet).
    #[arg(long, default_value_t = 60)]
    pub timeout_secs: u64,
    /// Speak TLS, trusting this CA (PEM) for the router's certificate (checked for --addr's
    /// host).
    #[arg(long, env = "SHOAL_CHECK_TLS_CA_CERT_FILE")]
    pub tls_ca_cert_file: Option<PathBuf>,
    /// With TLS, present this client certificate (PEM) ...
    #[arg(long, requires_all = ["tls_key_file", "tls_ca_cert_file"])]
    pub tls_cert_file: Option<PathBuf>,
    /// ... and its key.
    #[arg(long, requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct ReshardArgs {
    /// The topology file (created, with an even split over --nodes, if it does not exist).
    #[arg(long, env = "SHOAL_TOPOLOGY_FILE")]
    pub topology_file: PathBuf,
    /// The nodes the cluster should have: ADDR or ID=ADDR, comma separated. Nodes already in the
    /// topology keep their id; new addresses get the next ids.
    #[arg(long, value_delimiter = ',', required_unless_present = "resume")]
    pub nodes: Vec<String>,
    /// Only finish a resharding step that was interrupted.
    #[arg(long)]
    pub resume: bool,
    /// Give up a step after this many seconds (it can be resumed later).
    #[arg(long, default_value_t = 3600)]
    pub timeout_secs: u64,
}

#[derive(Debug, Clone, Args)]
pub struct RouterArgs {
    /// Node gRPC addresses, comma separated; slots are split evenly over them in this order (a
    /// static cluster: for one that can be resharded, use --topology-file).
    #[arg(long, env = "SHOAL_NODES", value_delimiter = ',', conflicts_with_all = ["embedded_nodes", "topology_file"])]
    pub nodes: Vec<String>,

    /// Route by this topology file and follow its changes (the file `shoal-router reshard` and the
    /// operator write; nodes follow it too).
    #[arg(long, env = "SHOAL_TOPOLOGY_FILE", conflicts_with = "embedded_nodes")]
    pub topology_file: Option<PathBuf>,

    /// Run this many nodes inside the router process (real gRPC on loopback ports), for a local
    /// cluster without Kubernetes. Used when --nodes is not given (default 3).
    #[arg(long, env = "SHOAL_EMBEDDED_NODES")]
    pub embedded_nodes: Option<usize>,

    /// Colocation rules, `PREFIX*` (repeat, or comma separated): keys starting with PREFIX hash
    /// on PREFIX alone, so they share one slot and one node without {hashtags}: an application's
    /// MULTI/EXEC and scripts over its own keys (`rq:*`, `bull:*`) then work unchanged. Every
    /// router and node of a cluster must have the same rules for the life of the data (CONFIG GET
    /// cluster-colocate shows them).
    #[arg(long = "colocate", env = "SHOAL_COLOCATE", value_delimiter = ',', value_name = "PREFIX*")]
    pub colocate: Vec<String>,

    /// RESP (Redis protocol) listen address; `off` for none (TLS clients only, with --tls-port).
    #[arg(long, env = "SHOAL_RESP", default_value = DEFAULT_RESP)]
    pub resp: Bind,

    /// HTTP listen address (key/value API, /metrics, /healthz, /readyz); `off` for none.
    #[arg(long, env = "SHOAL_HTTP", default_value = DEFAULT_HTTP)]
    pub http: Bind,

    #[command(flatten)]
    pub tls: TlsArgs,

    /// Serve /metrics (and /healthz, /readyz) on this address too, apart from the API, e.g. on a
    /// port only the monitoring network reaches. The API port keeps serving them as well.
    #[arg(long, env = "SHOAL_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,

    /// Also serve RESP on this Unix socket (the sidecar transport).
    #[arg(long, env = "SHOAL_UNIX_SOCKET")]
    pub unix_socket: Option<PathBuf>,

    /// Permissions of the Unix socket, in octal, at most 777 (set before it accepts connections).
    #[arg(long, env = "SHOAL_UNIX_SOCKET_PERM", default_value = "770", value_parser = parse_octal)]
    pub unix_socket_perm: u32,

    #[command(flatten)]
    pub auth: shoal_wire::auth::SecretArgs,

    /// Require clients to AUTH with this password (user "default").
    #[arg(long, env = "SHOAL_REQUIREPASS", hide_env_values = true)]
    pub requirepass: Option<String>,

    /// ACL users from this file (`user <name> <rules>` lines, as Redis's aclfile), loaded at
    /// start and re-read when it changes; ACL SAVE writes it, ACL LOAD re-reads it. As in Redis,
    /// its `default` user replaces the one --requirepass sets.
    #[arg(long, env = "SHOAL_ACLFILE")]
    pub aclfile: Option<PathBuf>,

    /// Serve /metrics only to scrapes that carry `Authorization: Bearer <this token>` (from any
    /// address; Prometheus's `authorization.credentials`). Without it, /metrics follows the API's
    /// rule (the password, or protected mode).
    #[arg(long, env = "SHOAL_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,

    /// Without a password, refuse TCP clients that are not on the loopback interface (like Redis).
    #[arg(long, env = "SHOAL_PROTECTED_MODE", default_value = "yes", value_parser = parse_yes_no, action = clap::ArgAction::Set)]
    pub protected_mode: bool,

    /// How long a request may wait for its node before the client gets an error (ms).
    #[arg(long, env = "SHOAL_DEADLINE_MS", default_value_t = 1000)]
    pub deadline_ms: u64,

    /// Most simultaneous client connections (RESP over TCP and Unix socket together).
    #[arg(long, env = "SHOAL_MAXCLIENTS", default_value_t = 10_000)]
    pub maxclients: usize,

    /// Largest bulk argument an authenticated client may send (Redis's proto-max-bulk-len).
    #[arg(long, env = "SHOAL_PROTO_MAX_BULK_LEN", default_value = "512mb", value_parser = parse_memory)]
    pub proto_max_bulk_len: u64,

    /// Most arguments in one command.
    #[arg(long, env = "SHOAL_MAX_ARGS", default_value_t = 1 << 20)]
    pub max_args: usize,

    /// Largest unparsed input buffered for one authenticated client (Redis's
    /// client-query-buffer-limit); before AUTH the limit is 1 MiB.
    #[arg(long, env = "SHOAL_CLIENT_QUERY_BUFFER_LIMIT", default_value = "1gb", value_parser = parse_memory)]
    pub client_query_buffer_limit: u64,

    /// Largest reply data buffered for one client; a client over it is disconnected.
    #[arg(long, env = "SHOAL_CLIENT_OUTPUT_BUFFER_LIMIT", default_value = "1gb", value_parser = parse_memory)]
    pub client_output_buffer_limit: u64,

    /// Requests one fast-path connection (docs/fast-path.md) may have running at once; it
    /// reads no more until some complete (its share of the output-buffer bound).
    #[arg(long, env = "SHOAL_FAST_MAX_IN_FLIGHT", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub fast_max_in_flight: u32,

    /// Largest HTTP request body.
    #[arg(long, env = "SHOAL_HTTP_MAX_BODY", default_value = "64mb", value_parser = parse_memory)]
    pub http_max_body: u64,

    /// Close a RESP client idle this many seconds between requests (Redis's `timeout`; CONFIG SET
    /// timeout changes it at run time). Pub/sub clients and blocked clients are exempt. 0: never.
    #[arg(long, env = "SHOAL_TIMEOUT", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=2_147_483_647))]
    pub timeout: u64,

    /// On SIGTERM, serve on for this many ms (new connections too) with `/readyz` answering 503
    /// before closing connections, so that a load balancer (a Kubernetes Service's endpoints and
    /// kube-proxy) stops sending clients here first. Then connections close at a request
    /// boundary. 0: at once. The operator sets it on router pods; a second signal cuts it short.
    #[arg(long, env = "SHOAL_SHUTDOWN_DELAY_MS", default_value_t = 0)]
    pub shutdown_delay_ms: u64,

    /// With a password set, a RESP client that has not authenticated within this many ms is
    /// disconnected (with an error line). 0: no limit.
    #[arg(long, env = "SHOAL_AUTH_TIMEOUT_MS", default_value_t = 10_000)]
    pub auth_timeout_ms: u64,

    /// An HTTP request body must arrive completely within this many ms, else 408 and the
    /// connection closes. 0: no limit.
    #[arg(long, env = "SHOAL_HTTP_BODY_TIMEOUT_MS", default_value_t = 30_000)]
    pub http_body_timeout_ms: u64,

    /// Most request bytes the whole process buffers: HTTP bodies being read plus RESP read
    /// buffers past 64 KiB each. A client that would exceed it gets an error (RESP: -ERR, then
    /// disconnected; HTTP: 503) and the others are unaffected. "auto": half the memory limit of
    /// the process's cgroup (the container's limit), at most 1gb; 1gb without a limit. 0: none.
    #[arg(long, env = "SHOAL_REQUEST_BUFFER_BUDGET", default_value = "auto", value_parser = parse_budget)]
    pub request_buffer_budget: Budget,

    /// Embedded nodes keep snapshots in DIR/node-<i> and start from them (see shoal-node
    /// --data-dir), so the local cluster restarts warm. Restart with the same node count.
    #[arg(long, env = "SHOAL_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// Seconds between periodic snapshots of embedded nodes (0: only on request and at shutdown).
    #[arg(long, env = "SHOAL_SNAPSHOT_INTERVAL", default_value_t = 0)]
    pub snapshot_interval: u64,

    /// Who serves read-only commands on one key: the shard's primary, a replica when one is up
    /// (replica-preferred), or the member with the shortest measured round trip from this router
    /// (nearest). Replica reads may miss the latest writes. A client's READONLY makes its reads go
    /// to replicas when this says primary.
    #[arg(long, env = "SHOAL_READ_FROM", value_enum, default_value_t = crate::backend::ReadFrom::Primary)]
    pub read_from: crate::backend::ReadFrom,

    /// Counters of the hot-key sketch (`SHOAL HOTKEYS`, `shoal_router_hotkey_*`), per ranking (by
    /// commands, by bytes), e.g. 256; 0 (the default) turns hot-key tracking off: counting every
    /// command's keys cost up to a third of the throughput at pipeline depth 16
    /// (docs/benchmarks.md). Each ranking's error is at most about its total weight / capacity.
    #[arg(long, env = "SHOAL_HOTKEYS_CAPACITY", default_value_t = 0)]
    pub hotkeys_capacity: usize,

    /// Every this many seconds the hot-key counts are halved, so the ranking follows recent
    /// traffic (0: never; counts then cover the router's whole life).
    #[arg(long, env = "SHOAL_HOTKEYS_DECAY_SECS", default_value_t = 60)]
    pub hotkeys_decay_secs: u64,
    /// Near cache: keep up to this much of the string values read by GET and MGET in the router's
    /// memory (Redis memory syntax: 64mb, 1gb) and serve repeated reads without a node hop; the
    /// nodes invalidate entries when their keys change (docs/near-cache.md says how stale a read
    /// can be). 0: off.
    #[arg(long, env = "SHOAL_NEAR_CACHE", default_value = "0", value_parser = parse_memory)]
    pub near_cache: u64,

    /// Near cache: serve cached values of a node only until this many ms after the latest ping
    /// the node answered on its stream was sent (the router pings every 100 ms; the answer comes
    /// behind the invalidations queued before it). This bounds how stale a read can be when
    /// invalidations are delayed.
    #[arg(long, env = "SHOAL_NEAR_CACHE_LEASE_MS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub near_cache_lease_ms: u64,

    /// Who may run DEBUG (its safe subcommands: OBJECT, SET-ACTIVE-EXPIRE, ERROR, LOG, HELP):
    /// nobody (`no`, Redis's default), everyone (`yes`), or loopback and Unix-socket clients
    /// (`local`). Test suites that inspect values want it; production does not.
    #[arg(long, env = "SHOAL_ENABLE_DEBUG_COMMAND", value_enum,
          default_value_t = crate::state::DebugCommand::No)]
    pub enable_debug_command: crate::state::DebugCommand,

    /// Answer CLUSTER SLOTS/SHARDS/NODES/INFO ... as a one-node Redis Cluster whose node is this
    /// router and owns every slot (`emulated`), so that cluster-mode clients (redis-py
    /// RedisCluster, ioredis Cluster, go-redis ClusterClient, Jedis, Lettuce) connect and send
    /// everything here; `off` (default): a standalone Redis, as before.
    #[arg(long, env = "SHOAL_CLUSTER_MODE", value_enum, default_value_t = crate::state::ClusterMode::Off)]
    pub cluster_mode: crate::state::ClusterMode,

    /// While a script runs past busy-reply-threshold on a node: answer BUSY only to commands
    /// that reach that node (`node`, default: other clients are served on), or to every command
    /// but SCRIPT KILL, FUNCTION KILL and the others Redis lets through (`cluster`: as one
    /// Redis, for applications and test suites that expect it; one script then stalls every
    /// client of the cluster until it ends or is killed).
    #[arg(long, env = "SHOAL_BUSY_REPLY_SCOPE", value_enum,
          default_value_t = crate::state::BusyReplyScope::Node)]
    pub busy_reply_scope: crate::state::BusyReplyScope,

    /// The host (IP or name) the emulated cluster tells clients to connect to (default: the
    /// address each client reached, e.g. a Service's; set it behind NAT or a load balancer).
    #[arg(long, env = "SHOAL_CLUSTER_ANNOUNCE_HOST")]
    pub cluster_announce_host: Option<String>,

    /// The port the emulated cluster tells clients to connect to (default: the one each reached).
    #[arg(long, env = "SHOAL_CLUSTER_ANNOUNCE_PORT")]
    pub cluster_announce_port: Option<u16>,

    /// Replicas per embedded shard (0: none). With replicas, the router also runs the failover
    /// writer for its embedded nodes: a replica follows its primary, WAIT counts it, and
    /// SHOAL FAILOVER hands a shard over to it without losing a write.
    #[arg(long, env = "SHOAL_EMBEDDED_REPLICAS", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=4))]
    pub replicas: u32,

    /// Memory limit of each embedded node (see shoal-node --maxmemory).
    #[arg(long, env = "SHOAL_EMBEDDED_MAXMEMORY", default_value = "0", value_parser = parse_memory)]
    pub embedded_maxmemory: u64,

    /// Eviction policy of each embedded node.
    #[arg(long, env = "SHOAL_EMBEDDED_MAXMEMORY_POLICY", default_value = "noeviction",
          value_parser = parse_policy)]
    pub embedded_maxmemory_policy: String,

    /// Worker threads; default: the CPUs this process may use (cgroup limits included). One
    /// thread runs every task on the main thread (Tokio's current-thread scheduler, no hand-offs
    /// between threads): fastest when the router shares a small machine with its clients.
    #[arg(long, env = "SHOAL_THREADS")]
    pub threads: Option<usize>,

    /// Log format: text or json (level from RUST_LOG, default info).
    #[arg(long, env = "SHOAL_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,
}

/// Client TLS, with Redis's option names (rustls; TLS 1.2 and 1.3). The files are re-read when
/// they change, so a rotated certificate (cert-manager) is served to new connections within
/// seconds while open connections keep theirs.
#[derive(Debug, Clone, Args)]
pub struct TlsArgs {
    /// Serve RESP over TLS on this port (on --resp's address) or address (host:port).
    #[arg(long, env = "SHOAL_TLS_PORT")]
    pub tls_port: Option<ListenAt>,

    /// Serve the HTTP API over TLS (HTTPS) on this port (on --http's address) or address.
    #[arg(long, env = "SHOAL_HTTPS")]
    pub https: Option<ListenAt>,

    /// The server certificate chain (PEM).
    #[arg(long, env = "SHOAL_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,

    /// The server certificate's private key (PEM).
    #[arg(long, env = "SHOAL_TLS_KEY_FILE")]
    pub tls_key_file: Option<PathBuf>,

    /// The CA (PEM) client certificates must chain to.
    #[arg(long, env = "SHOAL_TLS_CA_CERT_FILE")]
    pub tls_ca_cert_file: Option<PathBuf>,

    /// Whether TLS clients must present a certificate signed by the CA: yes (Redis's default),
    /// optional (checked if presented), or no.
    #[arg(long, env = "SHOAL_TLS_AUTH_CLIENTS", default_value = "yes")]
    pub tls_auth_clients: shoal_wire::tls::ClientAuth,

    /// A TLS client that has not completed its handshake within this many ms is disconnected.
    #[arg(long, env = "SHOAL_TLS_HANDSHAKE_TIMEOUT_MS", default_value_t = 5000)]
    pub tls_handshake_timeout_ms: u64,
}

impl TlsArgs {
    /// The certificate files, if a TLS port is asked for; an error names what is missing.
    pub fn files(&self) -> Result<Option<shoal_wire::tls::TlsFiles>, String> {
        if self.tls_port.is_none() && self.https.is_none() {
            return Ok(None);
        }
        match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(cert), Some(key)) => Ok(Some(shoal_wire::tls::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: self.tls_ca_cert_file.clone(),
            })),
            _ => Err("--tls-port and --https need --tls-cert-file and --tls-key-file".into()),
        }
    }

    pub fn handshake_timeout(&self) -> Duration {
        Duration::from_millis(self.tls_handshake_timeout_ms.max(1))
    }
}

/// A listen address that can be turned off (`off`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bind(pub Option<SocketAddr>);

impl std::str::FromStr for Bind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("off") || s.eq_ignore_ascii_case("none") {
            return Ok(Bind(None));
        }
        s.parse().map(|a| Bind(Some(a))).map_err(|_| format!("expected host:port or off, not {s:?}"))
    }
}

/// A port on another listener's address, or an address of its own (Redis's `tls-port` is a
/// port; a router may also want its own address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenAt {
    Port(u16),
    Addr(SocketAddr),
}

impl std::str::FromStr for ListenAt {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Ok(port) = s.parse() {
            return Ok(ListenAt::Port(port));
        }
        s.parse().map(ListenAt::Addr).map_err(|_| format!("expected a port or host:port, not {s:?}"))
    }
}

impl ListenAt {
    /// The address: a bare port goes on `beside`'s IP (loopback when that listener is off).
    pub fn resolve(self, beside: Bind) -> SocketAddr {
        match self {
            ListenAt::Addr(a) => a,
            ListenAt::Port(p) => {
                let ip = beside.0.map_or(std::net::Ipv4Addr::LOCALHOST.into(), |a| a.ip());
                SocketAddr::new(ip, p)
            }
        }
    }
}

/// `--request-buffer-budget`: a size, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    Auto,
    Bytes(u64),
}

/// The `auto` budget's ceiling.
pub const AUTO_BUDGET_MAX: u64 = 1 << 30;

impl Budget {
    /// The budget in bytes for a process whose memory limit is `memory_limit` (`usize::MAX`:
    /// none).
    pub fn resolve(self, memory_limit: Option<u64>) -> usize {
        let bytes = match self {
            Budget::Auto => memory_limit.map_or(AUTO_BUDGET_MAX, |m| (m / 2).min(AUTO_BUDGET_MAX)),
            Budget::Bytes(0) => return usize::MAX,
            Budget::Bytes(n) => n,
        };
        usize::try_from(bytes).unwrap_or(usize::MAX)
    }
}

fn parse_budget(s: &str) -> Result<Budget, String> {
    if s.eq_ignore_ascii_case("auto") { Ok(Budget::Auto) } else { parse_memory(s).map(Budget::Bytes) }
}

impl RouterArgs {
    pub fn deadline(&self) -> Duration {
        Duration::from_millis(self.deadline_ms.max(1))
    }

    /// A limit in ms, or none for 0.
    fn optional_ms(ms: u64) -> Option<Duration> {
        (ms > 0).then(|| Duration::from_millis(ms))
    }

    pub fn auth_timeout(&self) -> Option<Duration> {
        Self::optional_ms(self.auth_timeout_ms)
    }

    pub fn http_body_timeout(&self) -> Option<Duration> {
        Self::optional_ms(self.http_body_timeout_ms)
    }

    /// The number of in-process nodes to run: `--embedded-nodes`, or 3 when neither `--nodes`
    /// nor `--topology-file` is given.
    pub fn embedded(&self) -> Option<usize> {
        match (self.embedded_nodes, self.nodes.is_empty() && self.topology_file.is_none()) {
            (Some(n), _) => Some(n.max(1)),
            (None, true) => Some(3),
            (None, false) => None,
        }
    }
}

/// An eviction policy name, checked against the store's list when the store is built in.
fn parse_policy(s: &str) -> Result<String, String> {
    #[cfg(feature = "embedded")]
    s.parse::<shoal_node::store::EvictionPolicy>()?;
    Ok(s.to_string())
}

/// A file mode in octal: permission bits only (0 to 777); setuid, setgid and sticky bits mean
/// nothing on a socket and are refused rather than silently applied.
fn parse_octal(s: &str) -> Result<u32, String> {
    let mode = u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .map_err(|_| format!("'{s}' is not an octal mode"))?;
    if mode > 0o777 {
        return Err(format!("'{s}' has bits outside 0777 (only read/write/execute for user, group, other)"));
    }
    Ok(mode)
}

fn parse_yes_no(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "yes" | "true" | "1" => Ok(true),
        "no" | "false" | "0" => Ok(false),
        _ => Err(format!("expected yes or no, got '{s}'")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let cli = Cli::try_parse_from(["shoal-router"]).unwrap();
        assert_eq!(cli.serve.resp, Bind(Some(DEFAULT_RESP.parse().unwrap())));
        assert_eq!(cli.serve.tls.files(), Ok(None), "no TLS port: no TLS");
        assert_eq!(cli.serve.embedded(), Some(3), "no --nodes: an embedded cluster");
        assert_eq!(cli.serve.unix_socket_perm, 0o770);
        assert!(cli.serve.protected_mode);
        let cli = Cli::try_parse_from([
            "shoal-router",
            "--nodes",
            "127.0.0.1:7001,127.0.0.1:7002",
            "--protected-mode",
            "no",
            "--unix-socket-perm",
            "777",
        ])
        .unwrap();
        assert_eq!(cli.serve.nodes.len(), 2);
        assert_eq!(cli.serve.embedded(), None);
        assert!(!cli.serve.protected_mode);
        assert_eq!(cli.serve.unix_socket_perm, 0o777);
        assert!(Cli::try_parse_from(["shoal-router", "--nodes", "a:1", "--embedded-nodes", "2"]).is_err());
        for bad in ["7777", "1777", "4770", "1000", "8", "rw"] {
            let err =
                Cli::try_parse_from(["shoal-router", "--unix-socket-perm", bad]).unwrap_err().to_string();
            assert!(err.contains("--unix-socket-perm"), "{bad}: {err}");
        }
        let cli = Cli::try_parse_from(["shoal-router", "--unix-socket-perm", "0o660"]).unwrap();
        assert_eq!(cli.serve.unix_socket_perm, 0o660);
    }

    #[test]
    fn tls_ports() {
        let cli = Cli::try_parse_from([
            "shoal-router",
            "--resp",
            "0.0.0.0:6379",
            "--http",
            "off",
            "--tls-port",
            "6380",
            "--https",
            "127.0.0.2:8443",
            "--tls-cert-file",
            "c.pem",
            "--tls-key-file",
            "k.pem",
            "--tls-auth-clients",
            "optional",
        ])
        .unwrap();
        let tls = &cli.serve.tls;
        assert_eq!(cli.serve.http, Bind(None));
        assert_eq!(tls.tls_port.unwrap().resolve(cli.serve.resp).to_string(), "0.0.0.0:6380");
        assert_eq!(tls.https.unwrap().resolve(cli.serve.http).to_string(), "127.0.0.2:8443");
        assert_eq!(ListenAt::Port(1).resolve(Bind(None)).to_string(), "127.0.0.1:1");
        assert_eq!(tls.tls_auth_clients, shoal_wire::tls::ClientAuth::Optional);
        let files = tls.files().unwrap().unwrap();
        assert_eq!((files.cert.to_str(), files.ca), (Some("c.pem"), None));
        let cli = Cli::try_parse_from(["shoal-router", "--tls-port", "6380"]).unwrap();
        assert!(cli.serve.tls.files().unwrap_err().contains("--tls-cert-file"));
        assert_eq!(cli.serve.tls.tls_auth_clients, shoal_wire::tls::ClientAuth::Yes, "Redis's default");
        assert!(Cli::try_parse_from(["shoal-router", "--tls-auth-clients", "maybe"]).is_err());
        assert!(Cli::try_parse_from(["shoal-router", "--resp", "nowhere"]).is_err());
    }

    #[test]
    fn client_limits() {
        let cli = Cli::try_parse_from(["shoal-router"]).unwrap();
        assert_eq!(cli.serve.auth_timeout(), Some(Duration::from_secs(10)));
        assert_eq!(cli.serve.http_body_timeout(), Some(Duration::from_secs(30)));
        assert_eq!(cli.serve.request_buffer_budget, Budget::Auto);
        assert_eq!((cli.serve.near_cache, cli.serve.near_cache_lease_ms), (0, 300), "off by default");
        let near = Cli::try_parse_from(["shoal-router", "--near-cache", "64mb"]).unwrap();
        assert_eq!(near.serve.near_cache, 64 << 20);
        assert_eq!(Budget::Auto.resolve(None), 1 << 30);
        assert_eq!(Budget::Auto.resolve(Some(256 << 20)), 128 << 20, "half a small container");
        assert_eq!(Budget::Auto.resolve(Some(64 << 30)), 1 << 30, "at most 1gb");
        let cli = Cli::try_parse_from([
            "shoal-router",
            "--auth-timeout-ms",
            "0",
            "--http-body-timeout-ms",
            "250",
            "--request-buffer-budget",
            "4mb",
        ])
        .unwrap();
        assert_eq!(cli.serve.auth_timeout(), None);
        assert_eq!(cli.serve.http_body_timeout(), Some(Duration::from_millis(250)));
        assert_eq!(cli.serve.request_buffer_budget.resolve(Some(1)), 4 << 20);
        assert_eq!(Budget::Bytes(0).resolve(None), usize::MAX, "0: no budget");
        assert!(Cli::try_parse_from(["shoal-router", "--request-buffer-budget", "lots"]).is_err());
    }
}
