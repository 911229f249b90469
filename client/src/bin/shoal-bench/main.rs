//! `shoal-bench`: GET/SET load over RESP (TCP, Unix socket) or the fast path, through
//! `shoal-client`, with latency percentiles and, given the server's pids, its CPU per request.
//!
//! Two engines keep `-P` requests in flight on each of `-c` connections:
//! - `raw` (the default; [`raw`]): one task per connection writes every request its window has
//!   room for in one write and parses the replies by hand, as redis-benchmark does. Cheap per
//!   request, so at deep pipelines the server, not this process, is what is measured.
//! - `client`: through `shoal-client`'s pool, `c × P` worker tasks each sending one request and
//!   waiting for it (the client's writer coalesces them): what an application using the crate
//!   sees, at the client library's own cost per request.
//!
//! Every run is bounded by `-n` requests and by `--duration`, whichever ends first.

mod load;
mod raw;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use load::{histogram, key_index};
use shoal_client::{Client, Config, Endpoint, Protocol};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Transport {
    /// RESP over TCP (--addr).
    RespTcp,
    /// RESP over the Unix socket (--socket).
    RespUds,
    /// The binary fast path over the Unix socket (--socket).
    Fast,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Engine {
    /// Hand-encoded pipelined frames, one task per connection.
    Raw,
    /// shoal-client's pool, one task per request in flight.
    Client,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Test {
    Set,
    Get,
    /// GETs and SETs mixed by --get-ratio.
    Mixed,
}

#[derive(Debug, Parser)]
#[command(name = "shoal-bench", about = "GET/SET load generator for Shoal routers (RESP and fast path)")]
struct Args {
    #[arg(long, value_enum, default_value = "resp-tcp")]
    transport: Transport,
    /// How the load is sent (see above).
    #[arg(long, value_enum, default_value = "raw")]
    engine: Engine,
    /// RESP TCP address.
    #[arg(long, env = "SHOAL_ADDR", default_value = "127.0.0.1:6379")]
    addr: String,
    /// The router's Unix socket (resp-uds, fast).
    #[arg(short = 's', long, env = "SHOAL_SOCKET")]
    socket: Option<PathBuf>,
    #[arg(long, env = "SHOAL_USER")]
    user: Option<String>,
    #[arg(long, env = "SHOAL_PASSWORD", hide_env_values = true)]
    password: Option<String>,
    /// Connections.
    #[arg(short = 'c', long, default_value_t = 4)]
    connections: usize,
    /// Requests in flight per connection (pipeline depth).
    #[arg(short = 'P', long, default_value_t = 1)]
    pipeline: usize,
    /// Requests per test (at most).
    #[arg(short = 'n', long, default_value_t = 100_000)]
    requests: u64,
    /// Seconds per test (at most; the run ends at -n or this, whichever comes first).
    #[arg(long, default_value_t = 60.0)]
    duration: f64,
    /// Keys: key:0 .. key:<r-1>, picked at random.
    #[arg(short = 'r', long, default_value_t = 10_000)]
    keyspace: u64,
    /// Keys in turn instead of at random: key:0, key:1, ... (wrapping at -r), the whole run's
    /// requests counted together. `-t set --sequential -n <r>` writes every key exactly once
    /// (at random, -n 4r leaves about 2% of them unwritten).
    #[arg(long)]
    sequential: bool,
    /// The keys' prefix (`key:`), e.g. one the user's ACL key pattern allows (`shop:bench:`).
    #[arg(long, default_value = "key:")]
    key_prefix: String,
    /// SET value size in bytes.
    #[arg(short = 'd', long, default_value_t = 32)]
    data_size: usize,
    /// Tests to run, in order.
    #[arg(short = 't', long, value_enum, value_delimiter = ',', default_value = "set,get")]
    tests: Vec<Test>,
    /// Share of GETs in the mixed test.
    #[arg(long, default_value_t = 0.9)]
    get_ratio: f64,
    /// Runtime worker threads (1: a current-thread runtime, easy to pin with taskset).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Measure this server process's CPU (utime + stime of the listed pids only, not their
    /// children); repeatable.
    #[arg(long = "server-pid")]
    server_pids: Vec<u32>,
    /// Per-request timeout in milliseconds.
    #[arg(long, default_value_t = 5000)]
    timeout_ms: u64,
    /// One JSON document on stdout instead of text.
    #[arg(long)]
    json: bool,
    /// No progress lines on stderr.
    #[arg(short = 'q', long)]
    quiet: bool,
}

/// One test's numbers.
#[derive(Debug)]
struct Outcome {
    test: Test,
    requests: u64,
    errors: u64,
    first_error: Option<String>,
    seconds: f64,
    hist: Histogram<u64>,
    /// Server CPU (utime + stime) per request in microseconds, if pids were given.
    server_cpu_us_per_req: Option<f64>,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let rt = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(args.threads).enable_all().build()
    };
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("shoal-bench: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(&args)) {
        Ok(outcomes) => {
            report(&args, &outcomes);
            if outcomes.iter().all(|o| o.errors == 0) {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::from(2)
            }
        }
        Err(e) => {
            eprintln!("shoal-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> Result<Vec<Outcome>, String> {
    let (endpoint, protocol) = match args.transport {
        Transport::RespTcp => (Endpoint::Tcp(args.addr.clone()), Protocol::Resp),
        Transport::RespUds | Transport::Fast => {
            let path =
                args.socket.clone().ok_or("--socket (or SHOAL_SOCKET) is required for resp-uds and fast")?;
            let p = if args.transport == Transport::Fast { Protocol::Fast } else { Protocol::Resp };
            (Endpoint::Unix(path), p)
        }
    };
    if args.engine == Engine::Raw {
        return run_raw(args, &endpoint, protocol == Protocol::Fast).await;
    }
    let config = Config::new(endpoint.clone(), protocol)
        .auth(args.user.clone(), args.password.clone())
        .connections(args.connections)
        .max_in_flight(args.pipeline)
        .timeout(Duration::from_millis(args.timeout_ms))
        .connect_timeout(Duration::from_secs(5));
    let client = Client::connect(config).await.map_err(|e| format!("cannot connect to {endpoint}: {e}"))?;
    let ticks = clock_ticks();
    let mut outcomes = Vec::new();
    for &test in &args.tests {
        let cpu_before = server_cpu(&args.server_pids, ticks)?;
        let o = run_test(args, &client, test).await;
        outcomes.push(with_server_cpu(o, cpu_before, server_cpu(&args.server_pids, ticks)?));
    }
    Ok(outcomes)
}

/// The raw engine: `-c` connections opened first, then each test on all of them.
async fn run_raw(args: &Args, endpoint: &Endpoint, fast: bool) -> Result<Vec<Outcome>, String> {
    let ticks = clock_ticks();
    let mut outcomes = Vec::new();
    let mut conns = Vec::new();
    for _ in 0..args.connections.max(1) {
        conns.push(
            RawConn::connect(endpoint).await.map_err(|e| format!("cannot connect to {endpoint}: {e}"))?,
        );
    }
    for (i, c) in conns.iter_mut().enumerate() {
        let load = raw_load(args, Test::Get, fast, i, Instant::now());
        c.open(&load).await?;
    }
    for &test in &args.tests {
        let cpu_before = server_cpu(&args.server_pids, ticks)?;
        let issued = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let end = start + Duration::from_secs_f64(args.duration.max(0.0));
        let progress = (!args.quiet && !args.json).then(|| tokio::spawn(progress(test, done.clone(), start)));
        let tasks: Vec<_> = conns
            .drain(..)
            .enumerate()
            .map(|(i, mut c)| {
                let load = raw_load(args, test, fast, i, end);
                let (issued, done) = (issued.clone(), done.clone());
                tokio::spawn(async move {
                    let m = c.drive(&load, &issued, &done).await;
                    (c, m)
                })
            })
            .collect();
        let mut hist = histogram();
        let (mut errors, mut first_error) = (0, None);
        for t in tasks {
            let (c, m) = t.await.map_err(|e| format!("a connection's task failed: {e}"))?;
            hist.add(m.hist).expect("same bounds");
            errors += m.errors;
            first_error = first_error.or(m.first_error);
            conns.push(c);
        }
        let seconds = start.elapsed().as_secs_f64();
        if let Some(p) = progress {
            p.abort();
        }
        let o = Outcome {
            test,
            requests: done.load(Ordering::Relaxed),
            errors,
            first_error,
            seconds,
            hist,
            server_cpu_us_per_req: None,
        };
        outcomes.push(with_server_cpu(o, cpu_before, server_cpu(&args.server_pids, ticks)?));
    }
    Ok(outcomes)
}

fn raw_load(args: &Args, test: Test, fast: bool, conn: usize, end: Instant) -> raw::Load {
    raw::Load {
        fast,
        pipeline: args.pipeline.max(1),
        requests: args.requests,
        end,
        keyspace: args.keyspace.max(1),
        sequential: args.sequential,
        prefix: args.key_prefix.as_bytes().to_vec(),
        value: vec![b'x'; args.data_size],
        get_ratio: match test {
            Test::Get => 1.0,
            Test::Set => 0.0,
            Test::Mixed => args.get_ratio,
        },
        seed: 0x9E37_79B9_7F4A_7C15 ^ (conn as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9),
        user: args.user.clone(),
        password: args.password.clone(),
    }
}

/// A raw engine's connection.
enum RawConn {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

impl RawConn {
    async fn connect(endpoint: &Endpoint) -> std::io::Result<RawConn> {
        Ok(match endpoint {
            Endpoint::Tcp(addr) => {
                let s = tokio::net::TcpStream::connect(addr.as_str()).await?;
                s.set_nodelay(true)?;
                RawConn::Tcp(s)
            }
            Endpoint::Unix(path) => RawConn::Unix(tokio::net::UnixStream::connect(path).await?),
        })
    }

    async fn open(&mut self, load: &raw::Load) -> Result<(), String> {
        match self {
            RawConn::Tcp(s) => raw::open(s, load).await,
            RawConn::Unix(s) => raw::open(s, load).await,
        }
    }

    async fn drive(&mut self, load: &raw::Load, issued: &AtomicU64, done: &Arc<AtomicU64>) -> raw::Measured {
        match self {
            RawConn::Tcp(s) => raw::drive(s, load, issued, done).await,
            RawConn::Unix(s) => raw::drive(s, load, issued, done).await,
        }
    }
}

async fn run_test(args: &Args, client: &Client, test: Test) -> Outcome {
    let issued = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(args.duration.max(0.0));
    let value: bytes::Bytes = vec![b'x'; args.data_size].into();
    let workers = (args.connections.max(1) * args.pipeline.max(1)) as u64;
    let progress = (!args.quiet && !args.json).then(|| tokio::spawn(progress(test, done.clone(), start)));
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let (client, issued, done, value) = (client.clone(), issued.clone(), done.clone(), value.clone());
            let (n, keyspace, get_ratio) = (args.requests, args.keyspace.max(1), args.get_ratio);
            let sequential = args.sequential;
            let prefix = args.key_prefix.clone();
            tokio::spawn(async move {
                let mut hist = histogram();
                let mut errors = 0u64;
                let mut first_error = None;
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (w + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9));
                // Bounded twice: by the shared count and by the deadline.
                loop {
                    let i = issued.fetch_add(1, Ordering::Relaxed);
                    if i >= n || Instant::now() >= end {
                        break;
                    }
                    let key = format!("{prefix}{}", key_index(sequential, i, rng.next(), keyspace));
                    let get = match test {
                        Test::Get => true,
                        Test::Set => false,
                        Test::Mixed => (rng.next() % 10_000) as f64 / 10_000.0 < get_ratio,
                    };
                    let t0 = Instant::now();
                    let r =
                        if get { client.get(&key).await.map(drop) } else { client.set(&key, &value).await };
                    hist.saturating_record(t0.elapsed().as_nanos() as u64);
                    if let Err(e) = r {
                        errors += 1;
                        first_error.get_or_insert_with(|| e.to_string());
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                (hist, errors, first_error)
            })
        })
        .collect();
    let mut hist = histogram();
    let (mut errors, mut first_error) = (0, None);
    for t in tasks {
        if let Ok((h, e, fe)) = t.await {
            hist.add(h).expect("same bounds");
            errors += e;
            first_error = first_error.or(fe);
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    if let Some(p) = progress {
        p.abort();
    }
    Outcome {
        test,
        requests: done.load(Ordering::Relaxed),
        errors,
        first_error,
        seconds,
        hist,
        server_cpu_us_per_req: None,
    }
}

/// A line a second on stderr while a test runs.
async fn progress(test: Test, done: Arc<AtomicU64>, start: Instant) {
    let mut last = 0;
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_secs(1),
        Duration::from_secs(1),
    );
    loop {
        tick.tick().await;
        let now = done.load(Ordering::Relaxed);
        eprintln!(
            "{:?}: {now} requests in {:.0} s, {} req/s in the last second",
            test,
            start.elapsed().as_secs_f64(),
            now - last
        );
        last = now;
    }
}

/// xorshift64*: key picking needs speed and spread, not quality; no RNG dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Kernel clock ticks per second (USER_HZ) for /proc's utime and stime: `getconf CLK_TCK`, or
/// 100, its value on every mainstream Linux build.
fn clock_ticks() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .filter(|&t| t > 0)
        .unwrap_or(100)
}

/// `o` with its server CPU per request: the listed pids' CPU time between `before` and `after`
/// ([`server_cpu`] readings around the test) over its requests.
fn with_server_cpu(mut o: Outcome, before: Option<Duration>, after: Option<Duration>) -> Outcome {
    if let (Some(a), Some(b)) = (before, after)
        && o.requests > 0
    {
        o.server_cpu_us_per_req = Some((b - a).as_secs_f64() * 1e6 / o.requests as f64);
    }
    o
}

/// utime + stime of every listed pid (`None` if none is listed).
fn server_cpu(pids: &[u32], ticks: u64) -> Result<Option<Duration>, String> {
    if pids.is_empty() {
        return Ok(None);
    }
    let mut total = 0u64;
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_err(|e| format!("server pid {pid}: {e}"))?;
        // The command name (field 2) may hold spaces and parentheses: count fields after the
        // last ')'. utime and stime are fields 14 and 15, so the 12th and 13th after it.
        let rest =
            stat.rsplit_once(')').map(|(_, r)| r).ok_or(format!("server pid {pid}: unreadable stat"))?;
        let f: Vec<&str> = rest.split_whitespace().collect();
        let field = |i: usize| {
            f.get(i).and_then(|v| v.parse::<u64>().ok()).ok_or(format!("server pid {pid}: bad stat"))
        };
        total += field(11)? + field(12)?;
    }
    Ok(Some(Duration::from_secs_f64(total as f64 / ticks as f64)))
}

fn report(args: &Args, outcomes: &[Outcome]) {
    let transport = args.transport.to_possible_value().map(|v| v.get_name().to_owned()).unwrap_or_default();
    let q = |o: &Outcome, p: f64| o.hist.value_at_quantile(p) as f64 / 1000.0;
    if args.json {
        let tests: Vec<_> = outcomes
            .iter()
            .map(|o| {
                serde_json::json!({
                    "test": format!("{:?}", o.test).to_lowercase(),
                    "requests": o.requests,
                    "errors": o.errors,
                    "first_error": o.first_error,
                    "seconds": o.seconds,
                    "rps": o.requests as f64 / o.seconds,
                    "p50_us": q(o, 0.5),
                    "p99_us": q(o, 0.99),
                    "p999_us": q(o, 0.999),
                    "max_us": o.hist.max() as f64 / 1000.0,
                    "server_cpu_us_per_req": o.server_cpu_us_per_req,
                })
            })
            .collect();
        let doc = serde_json::json!({
            "transport": transport,
            "connections": args.connections,
            "pipeline": args.pipeline,
            "keyspace": args.keyspace,
            "data_size": args.data_size,
            "threads": args.threads,
            "tests": tests,
        });
        println!("{doc}");
        return;
    }
    println!(
        "{transport}: {} connections × {} in flight, {}-byte values, {} keys, {} runtime thread(s)",
        args.connections, args.pipeline, args.data_size, args.keyspace, args.threads
    );
    for o in outcomes {
        let cpu = o.server_cpu_us_per_req.map(|c| format!(", server CPU {c:.2} µs/req")).unwrap_or_default();
        println!(
            "{:>5}: {} requests in {:.2} s = {:.0} req/s; latency p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs, max {:.1} µs; {} errors{cpu}",
            format!("{:?}", o.test).to_uppercase(),
            o.requests,
            o.seconds,
            o.requests as f64 / o.seconds,
            q(o, 0.5),
            q(o, 0.99),
            q(o, 0.999),
            o.hist.max() as f64 / 1000.0,
            o.errors,
        );
        if let Some(e) = &o.first_error {
            println!("       first error: {e}");
        }
    }
}
