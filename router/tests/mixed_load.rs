//! A mixed-size load against a router process and 3 node processes: 20 clients SET and GET values
//! of 1 KiB to 8 MiB in pipelines of up to 500 (at most 16 MiB per pipeline, a client within
//! limits), every reply checked, while the router's and nodes' resident memory is sampled. No
//! client may see an error, no node stream may be reset, and memory must level off rather than
//! grow.
//!
//! `SHOAL_MIXED_SECS` (default 30) sets the duration; `SHOAL_BIN_DIR` runs other binaries (the
//! release build, for the numbers in docs/benchmarks.md):
//!
//!     SHOAL_MIXED_SECS=300 SHOAL_BIN_DIR=target/release \
//!       cargo test --release -p shoal-router --test mixed_load -- --nocapture

mod support;

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use support::Proc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const KIB: usize = 1024;
/// Value sizes and the pipeline depth used with each: at most 16 MiB of values per pipeline.
const CLASSES: [(usize, usize); 5] =
    [(KIB, 500), (16 * KIB, 500), (256 * KIB, 64), (1024 * KIB, 16), (8192 * KIB, 2)];
const CLIENTS: usize = 20;

/// The value of `key` at `version`: a pattern both sides can regenerate.
fn value(key: &str, version: u64, len: usize) -> Vec<u8> {
    let stamp = format!("{key}@{version};");
    stamp.as_bytes().iter().copied().cycle().take(len).collect()
}

/// Reads as many bytes as `want` and checks them; on a mismatch `buf` holds what came (and a
/// little more, to show an error line whole).
async fn read_exact(s: &mut tokio::net::TcpStream, buf: &mut Vec<u8>, want: &[u8]) -> bool {
    buf.resize(want.len(), 0);
    let ok = match tokio::time::timeout(Duration::from_secs(60), s.read_exact(buf)).await {
        Ok(Ok(_)) => buf[..] == *want,
        _ => false,
    };
    if !ok {
        let mut more = [0u8; 200];
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(200), s.read(&mut more)).await {
            buf.extend_from_slice(&more[..n]);
        }
    }
    ok
}

struct Stats {
    ops: AtomicU64,
    bytes: AtomicU64,
    errors: Mutex<Vec<String>>,
}

async fn client(addr: SocketAddr, id: usize, stop: Arc<AtomicBool>, stats: Arc<Stats>) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    let mut versions = vec![0u64; CLASSES.iter().map(|c| c.1).max().unwrap()];
    let mut round = 0u64;
    let mut buf = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let (size, depth) = CLASSES[(round as usize + id) % CLASSES.len()];
        round += 1;
        // Half SETs of fresh versions, then GETs of the same keys, all in one pipeline.
        let n = depth / 2;
        let keys: Vec<String> = (0..n).map(|i| format!("c{id}:s{size}:k{i}")).collect();
        let mut request = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            versions[i] += 1;
            request.extend(support::encode(&[b"SET", k.as_bytes(), &value(k, versions[i], size)]));
        }
        for k in &keys {
            request.extend(support::encode(&[b"GET", k.as_bytes()]));
        }
        if s.write_all(&request).await.is_err() {
            stats.errors.lock().push(format!("client {id}: write failed"));
            return;
        }
        for k in &keys {
            if !read_exact(&mut s, &mut buf, b"+OK\r\n").await {
                stats.errors.lock().push(format!(
                    "client {id}: SET {k} answered {:?}",
                    String::from_utf8_lossy(&buf[..buf.len().min(80)])
                ));
                return;
            }
        }
        for (i, k) in keys.iter().enumerate() {
            let mut want = format!("${size}\r\n").into_bytes();
            want.extend(value(k, versions[i], size));
            want.extend(b"\r\n");
            if !read_exact(&mut s, &mut buf, &want).await {
                stats.errors.lock().push(format!(
                    "client {id}: GET {k} answered {:?}",
                    String::from_utf8_lossy(&buf[..buf.len().min(80)])
                ));
                return;
            }
        }
        stats.ops.fetch_add(2 * n as u64, Ordering::Relaxed);
        stats.bytes.fetch_add((2 * n * size) as u64, Ordering::Relaxed);
    }
}

fn rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/statm"))
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Peak, steady (median of the second half) and whether the last quarter stayed within the
/// earlier peak (plus some slack): memory levels off.
fn summary(samples: &[u64]) -> (u64, u64, bool) {
    let peak = *samples.iter().max().unwrap();
    let mut late: Vec<u64> = samples[samples.len() / 2..].to_vec();
    late.sort_unstable();
    let steady = late[late.len() / 2];
    let cut = samples.len() * 3 / 4;
    let early_peak = *samples[..cut].iter().max().unwrap();
    let late_peak = *samples[cut..].iter().max().unwrap();
    (peak, steady, late_peak <= early_peak + early_peak / 4 + (64 << 20))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_sizes_and_deep_pipelines_leave_streams_intact_and_memory_bounded() {
    let secs: u64 = std::env::var("SHOAL_MIXED_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    let mut procs = Vec::new();
    let mut addrs = Vec::new();
    for _ in 0..3 {
        let addr = format!("127.0.0.1:{}", support::free_port());
        procs.push(Proc(
            support::shoal("shoal-node")
                .args(["--listen", &addr])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        ));
        addrs.push(addr);
    }
    let resp: SocketAddr = format!("127.0.0.1:{}", support::free_port()).parse().unwrap();
    let http: SocketAddr = format!("127.0.0.1:{}", support::free_port()).parse().unwrap();
    let router = Proc(
        support::shoal("shoal-router")
            .args(["--nodes", &addrs.join(","), "--resp", &resp.to_string(), "--http", &http.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    while tokio::net::TcpStream::connect(http).await.is_err()
        || !support::http_get(http, "/readyz").await.starts_with("HTTP/1.1 200")
    {
        assert!(start.elapsed() < Duration::from_secs(20), "router did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Wait until every node stream is up.
    let up =
        || async { support::metric_sum(&support::http_get(http, "/metrics").await, "shoal_router_node_up") };
    while up().await < 3.0 {
        assert!(start.elapsed() < Duration::from_secs(20), "nodes not connected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let stats =
        Arc::new(Stats { ops: AtomicU64::new(0), bytes: AtomicU64::new(0), errors: Mutex::default() });
    let clients: Vec<_> =
        (0..CLIENTS).map(|id| tokio::spawn(client(resp, id, stop.clone(), stats.clone()))).collect();
    let pids: Vec<u32> = std::iter::once(router.0.id()).chain(procs.iter().map(|p| p.0.id())).collect();
    let mut samples: Vec<Vec<u64>> = vec![Vec::new(); pids.len()];
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(secs) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        for (i, pid) in pids.iter().enumerate() {
            samples[i].push(rss(*pid));
        }
        if !stats.errors.lock().is_empty() {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        let _ = tokio::time::timeout(Duration::from_secs(120), c).await;
    }
    let elapsed = began.elapsed().as_secs_f64();
    let errors = stats.errors.lock().clone();
    assert!(errors.is_empty(), "{} client errors, e.g. {:?}", errors.len(), &errors[..errors.len().min(3)]);
    let page = support::http_get(http, "/metrics").await;
    assert_eq!(
        support::metric_sum(&page, "shoal_router_node_connects_total"),
        3.0,
        "a node stream was reset"
    );
    assert_eq!(support::metric_sum(&page, "shoal_router_node_failed_calls_total"), 0.0);
    let ops = stats.ops.load(Ordering::Relaxed);
    let mib = stats.bytes.load(Ordering::Relaxed) as f64 / (1 << 20) as f64;
    eprintln!(
        "mixed load: {CLIENTS} clients, {elapsed:.0} s, {ops} ops ({:.0} ops/s), {mib:.0} MiB of values ({:.0} MiB/s), transfers {}",
        ops as f64 / elapsed,
        mib / elapsed,
        support::metric_sum(&page, "shoal_router_node_transfers_total")
    );
    for (i, s) in samples.iter().enumerate() {
        let (peak, steady, level) = summary(s);
        let name = if i == 0 { "router".to_string() } else { format!("node {}", i - 1) };
        eprintln!("{name}: RSS peak {} MiB, steady {} MiB", peak >> 20, steady >> 20);
        assert!(level, "{name}'s memory kept growing: {:?}", s.iter().map(|b| b >> 20).collect::<Vec<_>>());
    }
    assert!(ops > 0, "the clients made progress");
}
