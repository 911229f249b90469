//! The state one router process shares across all its connections and front ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::backend::{Backend, ReadFrom};
use crate::metrics::RouterMetrics;
use crate::resp::Limits;

/// Before AUTH, a client may buffer at most this much unparsed input.
pub const UNAUTH_QUERY_BUFFER_LIMIT: usize = 1024 * 1024;

/// A RESP connection's read buffer up to this size is its own; beyond it, the bytes come from the
/// process-wide [`BufferBudget`]. Ordinary commands never get near it, so they never touch the
/// budget.
pub const QUERY_BUFFER_ALLOWANCE: usize = 64 * 1024;

/// `--fast-max-in-flight`'s default: requests one fast-path connection may have running at once
/// (RESP's pipeline round is 1024 commands too).
pub const DEFAULT_FAST_MAX_IN_FLIGHT: usize = 1024;

/// The settings that shape request handling (the rest of the CLI only matters at startup).
#[derive(Debug, Clone)]
pub struct Settings {
    pub requirepass: Option<String>,
    /// `--metrics-token`: when set, `/metrics` wants exactly this Bearer token, whoever asks.
    pub metrics_token: Option<String>,
    pub protected_mode: bool,
    pub deadline: Duration,
    pub maxclients: usize,
    pub proto_max_bulk_len: usize,
    pub max_args: usize,
    pub query_buffer_limit: usize,
    pub output_buffer_limit: usize,
    pub http_max_body: usize,
    /// A RESP client that must authenticate and has not within this long is disconnected.
    pub auth_timeout: Option<Duration>,
    /// An HTTP request body must arrive completely within this long.
    pub http_body_timeout: Option<Duration>,
    /// `--shutdown-delay-ms`: how long a stopping router serves on, unready, before it closes.
    pub shutdown_delay: Duration,
    /// A TLS client must complete its handshake within this long (a pre-authentication limit).
    pub tls_handshake_timeout: Duration,
    /// `--timeout`: the idle-client timeout at start, in seconds (0: none).
    pub idle_timeout_secs: u64,
    /// Process-wide cap on buffered request bytes (see [`BufferBudget`]); `usize::MAX`: none.
    pub request_buffer_budget: usize,
    /// The RESP TCP port, for INFO.
    pub tcp_port: u16,
    /// Where read-only commands go when the client did not say (READONLY makes it a replica).
    pub read_from: ReadFrom,
    /// `--aclfile`: the ACL users' file.
    pub aclfile: Option<std::path::PathBuf>,
    /// `--hotkeys-capacity` (0: off) and `--hotkeys-decay-secs` (`None`: no decay).
    pub hotkeys_capacity: usize,
    pub hotkeys_decay: Option<Duration>,
    /// `--fast-max-in-flight`: requests one fast-path connection may have running at once.
    pub fast_max_in_flight: usize,
    /// `--near-cache` in bytes (0: off) and its lease (`--near-cache-lease-ms`).
    pub near_cache: usize,
    pub near_cache_lease: Duration,
    /// `--enable-debug-command`: who may run DEBUG.
    pub enable_debug_command: DebugCommand,
    /// `--cluster-mode` and what the emulated cluster announces (`cmd/cluster.rs`).
    pub cluster: ClusterSettings,
    /// `--busy-reply-scope`: whom a script past busy-reply-threshold makes wait.
    pub busy_reply_scope: BusyReplyScope,
}

/// `--busy-reply-scope`: what a script that runs past busy-reply-threshold on one node does to
/// the commands of other clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum BusyReplyScope {
    /// Only commands that reach that node are answered BUSY; every other node's keys, and what
    /// the router answers itself (PING, ...), are served on: one client's script stalls one
    /// node, not the cluster.
    #[default]
    Node,
    /// Every command (but those Redis lets through, `allow_busy`: SCRIPT KILL, FUNCTION KILL,
    /// MULTI, ...) is answered BUSY through every router until it ends, as one Redis would:
    /// for applications and test suites that rely on it.
    Cluster,
}

/// `--cluster-mode`: whether the router answers CLUSTER as a one-node Redis Cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ClusterMode {
    /// Redis standalone: CLUSTER and ASKING answer "cluster support disabled".
    #[default]
    Off,
    /// A one-node cluster (this router, every slot), for cluster-mode clients.
    Emulated,
}

/// The emulated cluster's node: this router.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    pub mode: ClusterMode,
    /// `--cluster-announce-host/-port`: the address clients are told (default: the one each
    /// client reached).
    pub announce_host: Option<String>,
    pub announce_port: Option<u16>,
    /// This router's node id (40 hex digits, new at each start).
    pub id: String,
}

/// This router's first client id. Clients of every router of a cluster meet in one CLIENT LIST
/// and CLIENT KILL ID (crate::cmd::clients), so ids must not repeat across routers: each router
/// draws a random tag (1..=65535) for the bits above 32 and counts below them. Two routers of
/// one cluster share a tag with odds of about n^2/131,072 for n routers (docs/compatibility.md);
/// ids stay under 2^48, exact in every client's number type (JavaScript's too).
pub fn first_client_id() -> u64 {
    (fastrand::u64(1..=0xFFFF) << 32) | 1
}

/// A node id for this router process: 40 hex digits, as Redis's, random per start (Redis keeps
/// its id in nodes.conf; a router keeps nothing, and clients only compare ids within one answer).
pub fn new_node_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let state = std::collections::hash_map::RandomState::new();
    let word = |i: u64| {
        let mut h = state.build_hasher();
        h.write_u64(i);
        h.write_u128(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos(),
        );
        h.write_u32(std::process::id());
        h.finish()
    };
    (0..3).map(|i| format!("{:016x}", word(i))).collect::<String>()[..40].to_string()
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            mode: ClusterMode::Off,
            announce_host: None,
            announce_port: None,
            id: new_node_id(),
        }
    }
}

/// `--enable-debug-command` (Redis's `enable-debug-command`): who may run DEBUG's subcommands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum DebugCommand {
    /// Nobody (Redis's default).
    #[default]
    No,
    /// Every client (that ACL lets run it).
    Yes,
    /// Clients on the loopback interface or the Unix socket.
    Local,
}

impl DebugCommand {
    /// As CONFIG GET shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            DebugCommand::No => "no",
            DebugCommand::Yes => "yes",
            DebugCommand::Local => "local",
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            requirepass: None,
            metrics_token: None,
            protected_mode: true,
            deadline: Duration::from_secs(1),
            maxclients: 10_000,
            proto_max_bulk_len: 512 * 1024 * 1024,
            max_args: 1 << 20,
            query_buffer_limit: 1 << 30,
            output_buffer_limit: 1 << 30,
            http_max_body: 64 * 1024 * 1024,
            auth_timeout: Some(Duration::from_secs(10)),
            http_body_timeout: Some(Duration::from_secs(30)),
            shutdown_delay: Duration::ZERO,
            tls_handshake_timeout: Duration::from_secs(5),
            idle_timeout_secs: 0,
            request_buffer_budget: 1 << 30,
            tcp_port: 6379,
            read_from: ReadFrom::Primary,
            aclfile: None,
            hotkeys_capacity: 0,
            hotkeys_decay: Some(Duration::from_secs(60)),
            fast_max_in_flight: DEFAULT_FAST_MAX_IN_FLIGHT,
            near_cache: 0,
            near_cache_lease: crate::nearcache::DEFAULT_LEASE,
            enable_debug_command: DebugCommand::No,
            cluster: ClusterSettings::default(),
            busy_reply_scope: BusyReplyScope::Node,
        }
    }
}

impl Settings {
    /// Parser limits for a connection in the given authentication state. (The parser applies
    /// the tighter pre-AUTH caps itself, so that it can answer with Redis's specific texts.)
    pub fn limits(&self, authenticated: bool) -> Limits {
        Limits { authenticated, max_bulk: self.proto_max_bulk_len, max_args: self.max_args }
    }

    pub fn query_buffer_limit(&self, authenticated: bool) -> usize {
        if authenticated { self.query_buffer_limit } else { UNAUTH_QUERY_BUFFER_LIMIT }
    }
}

/// The process-wide budget for buffered request bytes: HTTP bodies being read (from the first
/// byte; a declared `Content-Length` is taken up front) and RESP read buffers beyond
/// [`QUERY_BUFFER_ALLOWANCE`] each. Like Redis's client query buffer limits, but for the whole
/// process: many clients that each stay under their own limit cannot together exhaust memory. A
/// client whose buffer cannot grow within the budget gets an error and is disconnected; the
/// others are unaffected.
#[derive(Debug)]
pub struct BufferBudget {
    limit: usize,
    used: AtomicUsize,
}

impl BufferBudget {
    pub fn new(limit: usize) -> BufferBudget {
        BufferBudget { limit, used: AtomicUsize::new(0) }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held by all clients now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// A client's (empty) share; bytes up to `allowance` are free.
    pub fn hold(&self, allowance: usize) -> BufferHold<'_> {
        BufferHold { budget: self, allowance, held: 0 }
    }

    fn try_take(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&total| total <= self.limit)
            })
            .is_ok()
    }
}

/// The bytes one client holds against the [`BufferBudget`]; given back when dropped.
#[derive(Debug)]
pub struct BufferHold<'a> {
    budget: &'a BufferBudget,
    allowance: usize,
    held: usize,
}

impl BufferHold<'_> {
    /// Makes this client's share cover a buffer of `bytes`. Growing must fit in the budget:
    /// returns false, holding what it held, if it does not. Shrinking always succeeds.
    pub fn resize(&mut self, bytes: usize) -> bool {
        let want = bytes.saturating_sub(self.allowance);
        if want == self.held {
            return true; // the common case (a buffer within its allowance): no shared write
        }
        if want > self.held {
            if !self.budget.try_take(want - self.held) {
                return false;
            }
        } else {
            self.budget.used.fetch_sub(self.held - want, Ordering::AcqRel);
        }
        self.held = want;
        true
    }

    /// Makes room for a buffer with `len` bytes in `capacity` to take `additional` more: if they
    /// do not fit, growing it may double its capacity, so that much must fit. Returns false (the
    /// buffer must not grow) when the budget cannot cover it.
    pub fn reserve(&mut self, len: usize, capacity: usize, additional: usize) -> bool {
        let needed = len.saturating_add(additional);
        if needed <= capacity {
            return true;
        }
        self.resize(needed.max(capacity.saturating_mul(2)))
    }

    /// Records the buffer's actual size after an allocation or a shrink: never refuses, since
    /// the memory is already allocated (or released).
    pub fn set(&mut self, bytes: usize) {
        if !self.resize(bytes) {
            let want = bytes.saturating_sub(self.allowance);
            self.budget.used.fetch_add(want - self.held, Ordering::AcqRel);
            self.held = want;
        }
    }
}

impl Drop for BufferHold<'_> {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.held, Ordering::AcqRel);
    }
}

/// Bytes a client holds against the [`BufferBudget`] outside its read buffer (a transaction's
/// queued commands, which wait for EXEC), given back when dropped. Owned (it lives in the
/// session), unlike a [`BufferHold`]; the first [`QUERY_BUFFER_ALLOWANCE`] bytes are free, so a
/// small transaction touches no shared counter.
pub struct Charge {
    state: Arc<RouterState>,
    bytes: usize,
    held: usize,
}

impl Charge {
    pub fn new(state: &Arc<RouterState>) -> Charge {
        Charge { state: state.clone(), bytes: 0, held: 0 }
    }

    /// Covers `n` more bytes; false (nothing taken) if the budget cannot.
    pub fn grow(&mut self, n: usize) -> bool {
        let want = (self.bytes + n).saturating_sub(QUERY_BUFFER_ALLOWANCE);
        if want > self.held {
            if !self.state.buffers.try_take(want - self.held) {
                return false;
            }
            self.held = want;
        }
        self.bytes += n;
        true
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.state.buffers.used.fetch_sub(self.held, Ordering::AcqRel);
    }
}

impl std::fmt::Debug for Charge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Charge").field("bytes", &self.bytes).field("held", &self.held).finish()
    }
}

#[derive(Debug)]
pub struct RouterState {
    pub settings: Settings,
    pub backend: Arc<Backend>,
    pub metrics: RouterMetrics,
    /// Buffered request bytes, process-wide.
    pub buffers: BufferBudget,
    pub started: Instant,
    /// Wall-clock time (expiry checks, LASTSAVE, TIME); injectable for tests.
    pub clock: Arc<dyn shoal_wire::clock::Clock>,
    /// The next client id: [`first_client_id`]'s router tag in the high bits, a count below.
    next_client_id: AtomicU64,
    connected: AtomicUsize,
    /// Set at shutdown: `/readyz` answers 503 from then on.
    draining: AtomicBool,
    /// A BGSAVE is running (Redis refuses a second one).
    pub bgsave_running: std::sync::atomic::AtomicBool,
    /// The nodes were given a memory limit through this router (CONFIG SET maxmemory, or the
    /// embedded cluster's --embedded-maxmemory): a command queued in MULTI then asks its key's
    /// node for room, as Redis refuses it with OOM at queueing. A limit set
    /// elsewhere is met at EXEC (EXECABORT with the OOM reason), as Redis meets one set meanwhile.
    pub memory_limited: AtomicBool,
    /// The in-process nodes and coordinator, in embedded mode (SHOAL SCALE).
    pub embedded: Option<Arc<crate::embedded::EmbeddedCluster>>,
    /// INFO commandstats and SLOWLOG.
    pub stats: crate::stats::CommandStats,
    /// The latency monitor's command events (LATENCY LATEST and its kin).
    pub latency: crate::latency::Latency,
    /// The open RESP connections (CLIENT LIST, CLIENT KILL).
    pub clients: Arc<crate::clients::Clients>,
    /// CLIENT PAUSE, for this router process.
    pub pause: crate::pause::Pause,
    /// Pub/sub: this router's subscribed clients and its streams to the nodes.
    pub pubsub: Arc<crate::pubsub::Hub>,
    /// `client-output-buffer-limit` of the `normal` and `replica` classes (hard, soft, seconds),
    /// as CONFIG SET last set them (shown, not enforced: see `cmd/config.rs`).
    pub output_limits: parking_lot::Mutex<[[u64; 3]; 2]>,
    /// CONFIG SET values of the parameters Shoal accepts and reports without acting on them
    /// (`save`, `appendonly`, ...; `cmd/config.rs`'s `Param::Accepted`), by name: unset ones show
    /// their defaults. Also `requirepass` as last set (`Param::Requirepass`, which does act: it
    /// sets the default user's password; this keeps what CONFIG GET shows).
    pub accepted_config: parking_lot::Mutex<std::collections::HashMap<&'static str, String>>,
    /// ACL users (`default` carries `--requirepass`).
    pub acl: crate::acl::Acl,
    /// The keys this router's clients use most (`SHOAL HOTKEYS`).
    pub hotkeys: crate::hotkeys::HotKeys,
    /// The near cache (`--near-cache`; `None`: off).
    pub near: Option<Arc<crate::nearcache::NearCache>>,
    /// Redis's `timeout` (`--timeout`, CONFIG SET): seconds a RESP client may sit idle between
    /// requests before it is closed; 0 (the default): never. Pub/sub clients and clients in a
    /// blocking command are exempt, as in Redis. A change applies to each connection from its
    /// next request on (one relaxed load per read; Redis's cron looks at every client instead).
    pub idle_timeout_secs: AtomicU64,
    /// Scripts (by SHA, or function name) a node reported reaching an undeclared key of a node
    /// it did not hold: sent from then on to the first node, holding every node (`cmd/scripting.rs`).
    pub reaching_scripts: parking_lot::Mutex<std::collections::HashSet<String>>,
    /// Writes over keys of several nodes queue here by key (`crate::keylocks`).
    pub key_locks: crate::keylocks::KeyLocks,
}

impl RouterState {
    pub fn new(
        settings: Settings,
        backend: Arc<Backend>,
        embedded: Option<Arc<crate::embedded::EmbeddedCluster>>,
    ) -> Arc<RouterState> {
        let settings_deadline = settings.deadline;
        let near = (settings.near_cache > 0).then(|| {
            Arc::new(crate::nearcache::NearCache::new(settings.near_cache, settings.near_cache_lease))
        });
        if let Some(near) = &near {
            backend.set_near_cache(near.clone());
        }
        let clients = Arc::new(crate::clients::Clients::default());
        Arc::new(RouterState {
            near: near.clone(),
            buffers: BufferBudget::new(settings.request_buffer_budget),
            backend,
            metrics: RouterMetrics::default(),
            started: Instant::now(),
            clock: Arc::new(shoal_wire::clock::SystemClock),
            next_client_id: AtomicU64::new(first_client_id()),
            connected: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
            bgsave_running: std::sync::atomic::AtomicBool::new(false),
            memory_limited: AtomicBool::new(false),
            embedded,
            stats: crate::stats::CommandStats::default(),
            latency: crate::latency::Latency::default(),
            clients: clients.clone(),
            pause: crate::pause::Pause::default(),
            pubsub: crate::pubsub::Hub::new(settings_deadline, near, clients),
            output_limits: parking_lot::Mutex::new([[0, 0, 0], [268_435_456, 67_108_864, 60]]),
            accepted_config: parking_lot::Mutex::default(),
            acl: crate::acl::Acl::new(settings.requirepass.as_deref(), settings.aclfile.clone()),
            hotkeys: crate::hotkeys::HotKeys::new(settings.hotkeys_capacity),
            idle_timeout_secs: AtomicU64::new(settings.idle_timeout_secs),
            reaching_scripts: Default::default(),
            key_locks: Default::default(),
            settings,
        })
    }

    /// When a client idle from now on is to be closed (`timeout`), or `None`.
    pub fn idle_deadline(&self) -> Option<tokio::time::Instant> {
        match self.idle_timeout_secs.load(Ordering::Relaxed) {
            0 => None,
            secs => tokio::time::Instant::now().checked_add(std::time::Duration::from_secs(secs)),
        }
    }

    pub fn next_client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Takes a client slot; `None` when `maxclients` are already connected.
    pub fn admit(self: &Arc<Self>) -> Option<ClientSlot> {
        let prev = self.connected.fetch_add(1, Ordering::AcqRel);
        if prev >= self.settings.maxclients {
            self.connected.fetch_sub(1, Ordering::AcqRel);
            self.metrics.rejected_connections.inc();
            return None;
        }
        self.metrics.connections.inc();
        Some(ClientSlot(self.clone()))
    }

    pub fn connected_clients(&self) -> usize {
        self.connected.load(Ordering::Relaxed)
    }

    /// Whether this router can serve (`/readyz`, the router Deployment's readiness probe): it is
    /// listening (its state exists only once every listener is bound), it knows a topology, and it
    /// is not shutting down. It does *not* require every node to be up: a node that is down makes
    /// only its own keys fail (fast, with `-ERR node N ... is unavailable`), and taking every
    /// router out of the Service for it would fail every key instead. Per-node health is in
    /// `SHOAL NODES` and `shoal_router_node_up`.
    pub fn ready(&self) -> bool {
        !self.draining.load(Ordering::Acquire) && !self.backend.routing().topology.nodes.is_empty()
    }

    /// Shutdown has begun: stop reporting ready.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }
}

/// A connected client; frees its slot when dropped.
#[derive(Debug)]
pub struct ClientSlot(Arc<RouterState>);

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.0.connected.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_budget_is_shared_and_given_back() {
        let budget = BufferBudget::new(1000);
        let mut a = budget.hold(100);
        assert!(a.resize(100), "within the allowance: free");
        assert_eq!(budget.used(), 0);
        assert!(a.resize(700));
        assert_eq!(budget.used(), 600);
        let mut b = budget.hold(0);
        assert!(!b.resize(401), "over the budget");
        assert_eq!(budget.used(), 600, "a refusal takes nothing");
        assert!(b.resize(400));
        assert!(!a.resize(701));
        a.set(200);
        assert_eq!(budget.used(), 500, "shrinking gives back");
        assert!(!b.reserve(900, 1000, 101), "growing a full buffer may double it: 2000 must fit");
        assert!(b.reserve(900, 1000, 100), "no growth needed");
        b.set(1200);
        assert_eq!(budget.used(), 1300, "what is allocated is recorded, even over the budget");
        drop(b);
        drop(a);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn limits_tighten_before_auth() {
        let s = Settings::default();
        assert!(!s.limits(false).authenticated, "the parser's pre-AUTH caps apply");
        assert_eq!(s.limits(true).max_bulk, 512 * 1024 * 1024);
        assert_eq!(s.query_buffer_limit(false), 1024 * 1024);
    }
}
