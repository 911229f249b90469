//! The router's near cache (`--near-cache`), end to end: a write through one router reaches
//! another router's cached reads within the documented bound (docs/near-cache.md); a random
//! workload over two caching routers, with a reshard in the middle, never reads a value older
//! than that bound, nor across a node restart or a failover; a node restart does not leave stale
//! values cached.

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::procs::NodeProc;
use support::pubsub::wait_links;
use support::{FastGet, Raw};

/// The documented bound on how long after a write's acknowledgement a reader on another router
/// may still read the old value: the lease (`--near-cache-lease-ms`, 300 by default).
const BOUND: Duration = Duration::from_millis(300);

/// Waits until the router's near cache hears from `n` nodes (their heartbeats flow).
async fn near_ready(r: &shoal_router::Router, n: usize) {
    let near = r.state.near.clone().expect("--near-cache is on");
    support::wait_until(Duration::from_secs(10), || near.fresh_nodes() >= n).await;
}

fn bulk_text(r: &[u8]) -> Option<String> {
    if r == b"$-1\r\n" {
        return None;
    }
    let s = String::from_utf8_lossy(r);
    assert!(s.starts_with('$'), "not a bulk reply: {s}");
    Some(s.split("\r\n").nth(1).unwrap().to_string())
}

/// A client that pipelines a write and a read of a cached key reads its write: the write's
/// command (sent to the node together with others) drops the key from the near cache as soon
/// as it is taken up, not when its group is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelined_write_then_read_of_a_cached_key_reads_the_write() {
    let r = support::router(&["--embedded-nodes", "3", "--near-cache", "64mb"]).await;
    wait_links(&r).await;
    near_ready(&r, 3).await;
    let mut c = Raw::connect(r.resp_addr()).await;
    let near = r.state.near.clone().unwrap();
    for round in 0..50 {
        let (old, new) = (format!("v{round}"), format!("v{}", round + 1));
        assert_eq!(c.cmd(&["SET", "k", &old]).await, b"+OK\r\n");
        // Cached (a miss fills it, the next read hits; a node lease that lapsed meanwhile, the
        // machine being busy, refuses fills and hits until the next heartbeat: read again).
        let started = std::time::Instant::now();
        loop {
            let hits = near.metrics.hits.get();
            assert_eq!(bulk_text(&c.cmd(&["GET", "k"]).await).as_deref(), Some(old.as_str()));
            if near.metrics.hits.get() > hits {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(5), "round {round}: the key is never cached");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut pipeline = support::encode(&[b"SET", b"k", new.as_bytes()]);
        pipeline.extend(support::encode(&[b"GET", b"k"]));
        pipeline.extend(support::encode(&[b"APPEND", b"k", b"!"]));
        pipeline.extend(support::encode(&[b"GET", b"k"]));
        c.send(&pipeline).await;
        assert_eq!(c.reply().await.unwrap(), b"+OK\r\n");
        assert_eq!(bulk_text(&c.reply().await.unwrap()).as_deref(), Some(new.as_str()), "round {round}");
        c.reply().await.unwrap();
        assert_eq!(bulk_text(&c.reply().await.unwrap()), Some(format!("{new}!")), "round {round}");
    }
    r.shutdown().await;
}

/// Router A (embedded nodes, no cache) writes; router B (same nodes, near cache) reads. Each
/// write's new value is read through B within the bound after A acknowledged it, and reads in
/// between return the previous value, never anything else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_through_one_router_reaches_another_routers_cache_within_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = support::two_routers(&dir, &["--embedded-nodes", "3"], &["--near-cache", "64mb"]).await;
    near_ready(&b, 3).await;
    let (mut wa, mut rb) = (Raw::connect(a.resp_addr()).await, Raw::connect(b.resp_addr()).await);
    const KEYS: usize = 40;
    const ROUNDS: usize = 5;
    let keys: Vec<String> = (0..KEYS).map(|i| format!("key:{i}")).collect();
    for k in &keys {
        assert_eq!(wa.cmd(&["SET", k, "v0"]).await, b"+OK\r\n");
        // A miss that fills the cache, then a hit.
        assert_eq!(bulk_text(&rb.cmd(&["GET", k]).await).as_deref(), Some("v0"));
        assert_eq!(bulk_text(&rb.cmd(&["GET", k]).await).as_deref(), Some("v0"));
    }
    let near = b.state.near.clone().unwrap();
    assert!(near.metrics.hits.get() >= KEYS as u64 / 2, "hits: {}", near.metrics.hits.get());
    let mut worst = Duration::ZERO;
    let mut stale_reads = 0;
    for round in 1..=ROUNDS {
        for k in &keys {
            let (old, new) = (format!("v{}", round - 1), format!("v{round}"));
            assert_eq!(wa.cmd(&["SET", k, &new]).await, b"+OK\r\n");
            let acked = Instant::now();
            for attempt in 0.. {
                let got = bulk_text(&rb.cmd(&["GET", k]).await).unwrap();
                if got == new {
                    worst = worst.max(acked.elapsed());
                    break;
                }
                assert_eq!(got, old, "only the previous value may still be read");
                stale_reads += 1;
                assert!(acked.elapsed() <= BOUND, "{k}: still {old} {:?} after the write", acked.elapsed());
                assert!(attempt < 100_000);
            }
            // Cached again for the next round.
            assert_eq!(bulk_text(&rb.cmd(&["GET", k]).await).as_deref(), Some(new.as_str()));
        }
    }
    eprintln!("worst delay {worst:?}, {stale_reads} reads of the previous value");
    assert!(worst <= BOUND);
    // The counters moved, and /metrics shows them.
    let page = support::http_get(b.http_addr(), "/metrics").await;
    let metric = |name: &str| support::metric_sum(&page, name);
    assert!(metric("shoal_router_near_cache_hits_total") > (KEYS * ROUNDS) as f64 / 2.0, "{page}");
    assert!(metric("shoal_router_near_cache_invalidations_total") >= (KEYS * ROUNDS) as f64);
    assert!(metric("shoal_router_near_cache_hit_ratio") > 0.0);
    assert!(metric("shoal_router_near_cache_entries") >= KEYS as f64);
    assert!(metric("shoal_router_near_cache_bytes") > 0.0);
    // The nodes' side: invalidations sent, keys tracked.
    let nodes = a.node_states().await;
    let sent: u64 = nodes.iter().map(|n| n.store.watches.tracking.sent.load(Ordering::Relaxed)).sum();
    assert!(sent >= (KEYS * ROUNDS) as u64, "{sent}");
    let tracked: usize = nodes.iter().map(|n| n.store.watches.tracking.len()).sum();
    assert_eq!(tracked, KEYS, "each key cached by B is tracked once");
    // Writes through the caching router itself are read back at once (their entry is dropped
    // before they are sent).
    for k in &keys {
        assert_eq!(rb.cmd(&["SET", k, "mine"]).await, b"+OK\r\n");
        assert_eq!(bulk_text(&rb.cmd(&["GET", k]).await).as_deref(), Some("mine"));
    }
    // MGET mixes hits and misses in argument order.
    let mut args = vec!["MGET"];
    args.extend(keys.iter().map(String::as_str));
    args.push("missing");
    let r = String::from_utf8(rb.cmd(&args).await).unwrap();
    assert_eq!(r.matches("mine").count(), KEYS);
    assert!(r.ends_with("$-1\r\n"));
    b.shutdown().await;
    a.shutdown().await;
}

/// One write acknowledged: (value number, when the acknowledgement arrived).
type Acks = HashMap<String, Vec<(u64, Instant)>>;

/// One read: (key, value number read (0: none), when it was sent).
type Reads = Vec<(String, u64, Instant)>;

/// A read of value `n` sent at `t` is too old if a later value was acknowledged more than
/// `BOUND` before `t`. Returns the problems and the largest lag seen (how long after the next
/// value's acknowledgement an older one was still read).
fn check(acks: &Acks, reads: &Reads) -> (Vec<String>, Duration) {
    let mut problems = Vec::new();
    let mut worst = Duration::ZERO;
    for (key, n, t) in reads {
        let Some(writes) = acks.get(key) else { continue };
        // The first acknowledged write of a newer value.
        if let Some((m, acked)) = writes.iter().filter(|(m, _)| m > n).min_by_key(|(m, _)| *m) {
            let lag = t.saturating_duration_since(*acked);
            worst = worst.max(lag);
            if lag > BOUND {
                problems.push(format!("{key}: read {n} {lag:?} after {m} was acknowledged"));
            }
        }
    }
    (problems, worst)
}

/// Router A running the cluster's nodes (`nodes_flags`, data in `dir`) and router B reading its
/// topology file, both with a near cache, linked and hearing from all `n` nodes.
async fn two_caching_routers(
    dir: &tempfile::TempDir,
    nodes_flags: &[&str],
    n: usize,
) -> (shoal_router::Router, shoal_router::Router) {
    let common = ["--deadline-ms", "3000", "--near-cache", "16mb"];
    let a_flags: Vec<&str> = nodes_flags.iter().copied().chain(common).collect();
    let (a, b) = support::two_routers(dir, &a_flags, &common).await;
    for r in [&a, &b] {
        near_ready(r, n).await;
    }
    (a, b)
}

/// What [`check`] found: nothing.
fn assert_none_too_old(problems: &[String]) {
    assert!(
        problems.is_empty(),
        "{} reads too old, e.g. {:?}",
        problems.len(),
        &problems[..problems.len().min(10)]
    );
}

fn hits(r: &shoal_router::Router) -> u64 {
    r.state.near.as_ref().unwrap().metrics.hits.get()
}

const KEYS: usize = 16;
const OPS: usize = 20_000;
type Tasks<T> = Vec<tokio::task::JoinHandle<T>>;

/// Two writers (each the only writer of half the keys, values counting up, through either
/// router at random) and two readers (any key, either router), until `stop` or their op count
/// or time limit.
/// While `pause` is set the writers wait (so that nothing but the cluster itself changes what
/// the routers hold).
async fn workload(
    routers: [std::net::SocketAddr; 2],
    stop: Arc<AtomicBool>,
    pause: Arc<AtomicBool>,
) -> (Tasks<Acks>, Tasks<Reads>) {
    let limit = Duration::from_secs(90);
    let mut writers = Vec::new();
    for w in 0..2 {
        let (stop, pause) = (stop.clone(), pause.clone());
        writers.push(tokio::spawn(async move {
            let mut conns = [Raw::connect(routers[0]).await, Raw::connect(routers[1]).await];
            let keys: Vec<String> = (0..KEYS).filter(|k| k % 2 == w).map(|k| format!("m:{k}")).collect();
            let mut next: HashMap<String, u64> = HashMap::new();
            let mut acks = Acks::new();
            let start = Instant::now();
            for _ in 0..OPS {
                if stop.load(Ordering::Relaxed) || start.elapsed() > limit {
                    break;
                }
                if pause.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                let key = &keys[fastrand::usize(..keys.len())];
                let n = next.entry(key.clone()).or_insert(0);
                *n += 1;
                let r = conns[fastrand::usize(..2)].cmd(&["SET", key, &n.to_string()]).await;
                if r == b"+OK\r\n" {
                    acks.entry(key.clone()).or_default().push((*n, Instant::now()));
                }
                // Writes are sparser than reads, so values stay cached for a while.
                tokio::time::sleep(Duration::from_millis(fastrand::u64(0..3))).await;
            }
            acks
        }));
    }
    let mut readers = Vec::new();
    for _ in 0..2 {
        let stop = stop.clone();
        readers.push(tokio::spawn(async move {
            let mut conns = [Raw::connect(routers[0]).await, Raw::connect(routers[1]).await];
            // Half the reads over the fast path, whose near-cache hits take their own way.
            let mut fasts = [FastGet::connect(routers[0]).await, FastGet::connect(routers[1]).await];
            let mut reads = Reads::new();
            let start = Instant::now();
            for _ in 0..OPS * 4 {
                if stop.load(Ordering::Relaxed) || start.elapsed() > limit {
                    break;
                }
                let key = format!("m:{}", fastrand::usize(..KEYS));
                let sent = Instant::now();
                let via = fastrand::usize(..4);
                let value = if via < 2 {
                    let r = conns[via].cmd(&["GET", &key]).await;
                    // An error: a topology change the deadline did not cover, no value read.
                    (!r.starts_with(b"-")).then(|| bulk_text(&r))
                } else {
                    fasts[via - 2]
                        .get(key.as_bytes())
                        .await
                        .ok()
                        .map(|v| v.map(|v| String::from_utf8(v).unwrap()))
                };
                let Some(value) = value else { continue };
                let n = value.map_or(0, |v| v.parse::<u64>().unwrap());
                reads.push((key, n, sent));
            }
            reads
        }));
    }
    (writers, readers)
}

async fn collect(writers: Tasks<Acks>, readers: Tasks<Reads>) -> (Acks, Reads) {
    let mut acks = Acks::new();
    for w in writers {
        for (k, v) in w.await.unwrap() {
            acks.entry(k).or_default().extend(v);
        }
    }
    let mut reads = Reads::new();
    for r in readers {
        reads.extend(r.await.unwrap());
    }
    (acks, reads)
}

/// Random writers and readers across two caching routers over the same nodes, while the
/// cluster scales 3 -> 4: every read returns a value its key had within the bound of the read.
/// Each key has one writer (values count up), which goes through either router at random.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_reads_and_writes_on_two_caching_routers_while_resharding_stay_within_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_caching_routers(&dir, &["--embedded-nodes", "3"], 3).await;
    // Data to move, so the reshard takes a while.
    let mut loader = Raw::connect(a.resp_addr()).await;
    support::fill(&mut loader, 20_000, 200).await;

    let routers = [a.resp_addr(), b.resp_addr()];
    let stop = Arc::new(AtomicBool::new(false));
    let (writers, readers) = workload(routers, stop.clone(), Arc::default()).await;
    // The reshard, in the middle of it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut admin = Raw::connect(a.resp_addr()).await;
    assert_eq!(admin.cmd(&["SHOAL", "SCALE", "4"]).await, b"+OK\r\n");
    support::wait_scaled(&mut admin, 4).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);

    let (acks, reads) = collect(writers, readers).await;
    let (problems, worst) = check(&acks, &reads);
    let (ha, hb) = (hits(&a), hits(&b));
    eprintln!(
        "{} writes, {} reads, hits {ha} + {hb}, worst lag {worst:?}",
        acks.values().map(Vec::len).sum::<usize>(),
        reads.len()
    );
    assert_none_too_old(&problems);
    assert!(reads.len() > 1000 && ha + hb > 100, "the workload ran and the caches served");
    b.shutdown().await;
    a.shutdown().await;
}

/// A node killed and restarted empty: the value cached from it is not served once its stream
/// broke, and after the restart a new value is read, not the cached one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restart_leaves_nothing_stale_cached() {
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, list) = NodeProc::start_many(dir.path(), 2).await;
    let writer = support::router(&["--nodes", &list, "--deadline-ms", "500"]).await;
    let reader = support::router(&["--nodes", &list, "--deadline-ms", "500", "--near-cache", "8mb"]).await;
    wait_links(&reader).await;
    near_ready(&reader, 2).await;
    let routing = reader.state.backend.routing();
    let key = (0..).map(|i| format!("k{i}")).find(|k| routing.locate(k.as_bytes()).0 == 1).unwrap();
    let (mut w, mut r) = (Raw::connect(writer.resp_addr()).await, Raw::connect(reader.resp_addr()).await);
    assert_eq!(w.cmd(&["SET", &key, "before"]).await, b"+OK\r\n");
    assert_eq!(bulk_text(&r.cmd(&["GET", &key]).await).as_deref(), Some("before"));
    assert_eq!(bulk_text(&r.cmd(&["GET", &key]).await).as_deref(), Some("before"));
    let near = reader.state.near.clone().unwrap();
    assert_eq!(near.metrics.hits.get(), 1);

    nodes[1].kill();
    let killed = Instant::now();
    // Within the lease the cached value may still be served; past it, never.
    loop {
        let got = r.cmd(&["GET", &key]).await;
        if got.starts_with(b"-ERR node 1") {
            break;
        }
        assert_eq!(bulk_text(&got).as_deref(), Some("before"));
        assert!(killed.elapsed() <= BOUND + Duration::from_millis(100), "served past the lease");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let addr = nodes[1].addr.clone();
    nodes[1] = NodeProc::start_at(dir.path(), "node1", &addr, &[]).await;
    let start = Instant::now();
    while w.cmd(&["SET", &key, "after"]).await != b"+OK\r\n" {
        assert!(start.elapsed() < Duration::from_secs(15), "the node did not come back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let acked = Instant::now();
    loop {
        let got = r.cmd(&["GET", &key]).await;
        if bulk_text(&got).as_deref() == Some("after") {
            break;
        }
        assert!(!got.starts_with(b"$6\r\nbefore"), "the value from before the restart was served");
        assert!(acked.elapsed() < Duration::from_secs(10), "{}", String::from_utf8_lossy(&got));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Cached again, from the new stream.
    near_ready(&reader, 2).await;
    let hits = near.metrics.hits.get();
    for _ in 0..50 {
        let _ = r.cmd(&["GET", &key]).await;
    }
    assert!(near.metrics.hits.get() > hits, "the restarted node's keys are cached again");
    reader.shutdown().await;
    writer.shutdown().await;
}

/// Like the resharding test, with a node killed and restarted empty in the middle (static
/// `--nodes` routing). The restarted node lost its keys, so for them a read after the kill may
/// return nothing, and only writes acknowledged after the kill count; once the node is back and
/// the bound has passed, no value from before the kill may be read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_reads_and_writes_across_a_node_restart_stay_within_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, list) = NodeProc::start_many(dir.path(), 2).await;
    let flags = ["--nodes", &list, "--deadline-ms", "500", "--near-cache", "8mb"];
    let (a, b) = (support::router(&flags).await, support::router(&flags).await);
    for r in [&a, &b] {
        wait_links(r).await;
        near_ready(r, 2).await;
    }
    let routing = a.state.backend.routing();
    let victims: std::collections::HashSet<String> =
        (0..KEYS).map(|k| format!("m:{k}")).filter(|k| routing.locate(k.as_bytes()).0 == 1).collect();
    assert!(!victims.is_empty() && victims.len() < KEYS);
    let stop = Arc::new(AtomicBool::new(false));
    let pause = Arc::new(AtomicBool::new(false));
    let (writers, readers) = workload([a.resp_addr(), b.resp_addr()], stop.clone(), pause.clone()).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    // No writes around the restart: what the routers cached before it is all they could serve
    // stale (a failed write through a router would drop its entry and hide the fault).
    pause.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(100)).await;
    nodes[1].kill();
    let killed = Instant::now();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let addr = nodes[1].addr.clone();
    nodes[1] = NodeProc::start_at(dir.path(), "node1", &addr, &[]).await;
    let up = Instant::now();
    tokio::time::sleep(BOUND * 3).await;
    pause.store(false, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, Ordering::Relaxed);
    let (acks, reads) = collect(writers, readers).await;

    // Keys of the surviving node: the plain rule.
    let (steady, victim_reads): (Reads, Reads) =
        reads.into_iter().partition(|(k, _, _)| !victims.contains(k));
    let (mut problems, worst) = check(&acks, &steady);
    // Keys of the restarted node, read after the kill: only writes acknowledged after it count.
    let (before, after): (Reads, Reads) = victim_reads.into_iter().partition(|(_, _, t)| *t < killed);
    problems.extend(check(&acks, &before).0);
    let acks_after: Acks = acks
        .iter()
        .map(|(k, v)| (k.clone(), v.iter().filter(|(_, t)| *t > killed).cloned().collect()))
        .collect();
    problems.extend(check(&acks_after, &after).0);
    // ... and once it is back and the bound has passed, nothing from before the kill.
    let last_before: HashMap<&String, u64> = acks
        .iter()
        .map(|(k, v)| (k, v.iter().filter(|(_, t)| *t < killed).map(|(n, _)| *n).max().unwrap_or(0)))
        .collect();
    let mut late = 0;
    for (k, n, t) in &after {
        if *t > up + BOUND {
            late += 1;
            if *n != 0 && *n <= last_before.get(k).copied().unwrap_or(0) {
                problems.push(format!("{k}: read {n}, written before the restart, {:?} after it", *t - up));
            }
        }
    }
    eprintln!(
        "{} writes, {} reads ({late} of restarted keys after it), worst lag {worst:?}",
        acks.values().map(Vec::len).sum::<usize>(),
        steady.len() + before.len() + after.len()
    );
    assert_none_too_old(&problems);
    assert!(late > 50, "the restarted node's keys were read after it came back");
    let hits = hits(&a) + hits(&b);
    assert!(hits > 100, "the caches served: {hits}");
    b.shutdown().await;
    a.shutdown().await;
}

/// The random workload on two caching routers while shard 0 is handed over to its replica
/// (`SHOAL FAILOVER`): the new primary tracks nothing the old one registered, so the routers must
/// not serve the old primary's entries past the change; no read is older than the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_reads_and_writes_across_a_failover_stay_within_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_caching_routers(&dir, &["--embedded-nodes", "2", "--replicas", "1"], 2).await;
    let stop = Arc::new(AtomicBool::new(false));
    let (writers, readers) = workload([a.resp_addr(), b.resp_addr()], stop.clone(), Arc::default()).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mut admin = Raw::connect(a.resp_addr()).await;
    let before = a.state.backend.routing().topology.nodes[0].addr.clone();
    assert_eq!(admin.cmd(&["SHOAL", "FAILOVER", "0"]).await, b"+OK\r\n");
    support::wait_until(Duration::from_secs(10), || {
        b.state.backend.routing().topology.nodes[0].addr != before
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, Ordering::Relaxed);
    let (acks, reads) = collect(writers, readers).await;
    let (problems, worst) = check(&acks, &reads);
    let hits = hits(&a) + hits(&b);
    eprintln!(
        "{} writes, {} reads, {hits} hits, worst lag {worst:?}",
        acks.values().map(Vec::len).sum::<usize>(),
        reads.len()
    );
    assert_none_too_old(&problems);
    assert!(reads.len() > 1000 && hits > 100);
    b.shutdown().await;
    a.shutdown().await;
}
