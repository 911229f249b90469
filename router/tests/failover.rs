//! Replicas and failover with real processes: four `shoal-node` processes (two shards, each a
//! primary and a replica) following a topology file, `shoal-router failover` as the one writer of
//! primaries, and a `shoal-router` process in front, under four writers.
//!
//! - SIGKILL one primary under load: writes to its shard fail only during the failover window
//!   (measured and printed; bounded here at 5 s, the target is 2 s with the default 1 s
//!   down-after), every write acknowledged before a `WAIT 1 100` that answered 1 is read back
//!   afterwards, writes to the other shard never fail, and the killed node, restarted, rejoins as
//!   a replica of the new primary and catches up.
//! - A rolling restart (SIGTERM, then start again, one process at a time, primaries and replicas)
//!   under load: primaries hand their shard over first, so no client sees an error and every
//!   acknowledged write is read back; `SHOAL FAILOVER` hands a shard back the same way.
//! - The embedded cluster with `--replicas 1`: every type of value reaches the replicas, WAIT
//!   counts them, `SHOAL FAILOVER` hands shards over, and `SHOAL SCALE` grows and shrinks the
//!   cluster with replicas (new shards get theirs) without losing a key.
//! - Replica reads: a client's READONLY, and a router's `--read-from replica-preferred`, send
//!   read-only commands to replicas (counted on the replicas' nodes); writes still go to primaries.
//! - A primary SIGKILLed while it ships a large transaction leaves the promoted replica all of it
//!   or none of it.
//! - A slot move onto a shard whose replica is frozen does not end until the replica holds what
//!   the new owner pulled: the primary killed right after loses nothing (issue 38's chaos run lost
//!   every key of a moved slot this way).
//! - A primary frozen with SIGSTOP is replaced; resumed, it refuses a write routed by the old
//!   topology (as a router that has not heard of the failover would send it) instead of taking
//!   a write the resync to the new primary would undo.

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shoal_wire::proto::StatsRequest;
use shoal_wire::{NodeInfo, Topology};
use support::{Proc, Raw};

/// One test of this file at a time: each runs a cluster of processes (or an embedded one) whose
/// timing matters (a primary that does not run for 500 ms fences itself), and two of them side by
/// side on a 2-core machine, with debug builds starting a dozen processes at once, starved each
/// other's nodes for seconds in looped runs.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn log_file(root: &Path, name: &str) -> Stdio {
    Stdio::from(std::fs::File::create(root.join(format!("{name}.log"))).unwrap())
}

fn start_node(root: &Path, topology: &Path, addr: &str, name: &str) -> Proc {
    let child = support::shoal("shoal-node")
        .args(["--listen", addr, "--topology-file", topology.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(log_file(root, name))
        .spawn()
        .unwrap();
    Proc(child)
}

async fn stats(addr: &str) -> Option<shoal_wire::proto::NodeStats> {
    let options = shoal_wire::client::ClientOptions {
        connect_timeout: Duration::from_millis(300),
        credentials: shoal_wire::auth::Credentials::secret(Some(support::secret())),
        ..Default::default()
    };
    let mut c = shoal_wire::client::connect(addr, &options).await.ok()?;
    Some(c.stats(StatsRequest::default()).await.ok()?.into_inner())
}

fn read_topology(path: &PathBuf) -> Topology {
    Topology::from_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// What one writer saw.
#[derive(Default)]
struct Seen {
    /// Writes answered +OK: (key, value).
    acked: Vec<(String, String)>,
    /// How many of `acked` a `WAIT 1 100` answered 1 after.
    durable: usize,
    /// When writes failed, and the error.
    errors: Vec<(Instant, String)>,
}

/// Two shards, each a primary and a replica, following a topology file; the failover writer; a
/// router in front (deadline 2 s).
struct Cluster {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    topology: PathBuf,
    /// p0, r0, p1, r1 as first started.
    addrs: [String; 4],
    nodes: Vec<Option<Proc>>,
    _failover: Proc,
    resp: SocketAddr,
    _router: Proc,
}

const NAMES: [&str; 4] = ["p0", "r0", "p1", "r1"];

impl Cluster {
    async fn start() -> Cluster {
        Self::start_with(&[]).await
    }

    /// `private`: nodes that follow a copy of the first topology file instead of the one the
    /// failover writer updates, so they learn of changes only from offers (as a node cut off from
    /// its topology source would).
    async fn start_with(private: &[usize]) -> Cluster {
        Self::start_full(private, 2000).await
    }

    /// [`start_with`](Self::start_with), the router's call deadline `deadline_ms`.
    async fn start_full(private: &[usize], deadline_ms: u64) -> Cluster {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let topology = root.join("topology.json");
        let addr = || format!("127.0.0.1:{}", support::free_port());
        let addrs = [addr(), addr(), addr(), addr()];
        let [p0, r0, p1, r1] = addrs.clone();
        let mut t = Topology::even(&[p0.clone(), p1.clone()]);
        t.nodes[0] = NodeInfo { id: 0, addr: p0, replicas: vec![r0.clone()] };
        t.nodes[1] = NodeInfo { id: 1, addr: p1, replicas: vec![r1.clone()] };
        std::fs::write(&topology, t.to_json()).unwrap();
        let nodes = (0..4)
            .map(|i| {
                let mut file = topology.clone();
                if private.contains(&i) {
                    file = root.join(format!("{}-topology.json", NAMES[i]));
                    std::fs::copy(&topology, &file).unwrap();
                }
                Some(start_node(&root, &file, &addrs[i], NAMES[i]))
            })
            .collect();
        let failover = Proc(
            support::shoal("shoal-router")
                .args(["failover", "--topology-file", topology.to_str().unwrap(), "--down-after-ms", "1000"])
                .stdout(Stdio::null())
                .stderr(log_file(&root, "failover"))
                .spawn()
                .unwrap(),
        );
        let resp: SocketAddr = format!("127.0.0.1:{}", support::free_port()).parse().unwrap();
        let router = Proc(
            support::shoal("shoal-router")
                .args(["--topology-file", topology.to_str().unwrap(), "--resp", &resp.to_string()])
                .args(["--http", &format!("127.0.0.1:{}", support::free_port())])
                .args(["--deadline-ms", &deadline_ms.to_string()])
                .stdout(Stdio::null())
                .stderr(log_file(&root, "router"))
                .spawn()
                .unwrap(),
        );
        // The new primaries start fenced; the failover writer confirms them (no replica holds
        // more), then the replicas sync.
        let start = Instant::now();
        loop {
            if let Ok(s) = tokio::net::TcpStream::connect(resp).await {
                let mut c = Raw::from_stream(s);
                let a = c.cmd(&["SET", "{a}ready", "1"]).await;
                let b = c.cmd(&["SET", "{b}ready", "1"]).await;
                let synced =
                    stats(&r0).await.is_some_and(|s| s.synced) && stats(&r1).await.is_some_and(|s| s.synced);
                if a == b"+OK\r\n" && b == b"+OK\r\n" && synced {
                    break;
                }
            }
            assert!(start.elapsed() < Duration::from_secs(30), "the cluster did not come up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(read_topology(&topology).version > 1, "the failover writer confirmed the primaries");
        Cluster { _tmp: tmp, root, topology, addrs, nodes, _failover: failover, resp, _router: router }
    }

    /// Sends `signal` to node `i` (by its first-start index) and, unless it is STOP or CONT, waits
    /// for it to exit.
    fn signal(&mut self, i: usize, signal: &str) {
        let pid = self.nodes[i].as_ref().expect("running").0.id().to_string();
        assert!(Command::new("kill").args([&format!("-{signal}"), &pid]).status().unwrap().success());
        if !matches!(signal, "STOP" | "CONT") {
            let mut p = self.nodes[i].take().unwrap();
            let status = p.0.wait().unwrap();
            assert!(signal == "KILL" || status.success(), "{} exits 0 on SIG{signal}: {status:?}", NAMES[i]);
        }
    }

    fn restart(&mut self, i: usize, name: &str) {
        self.nodes[i] = Some(start_node(&self.root, &self.topology, &self.addrs[i], name));
    }

    /// Waits until the process at `addrs[i]` is a synced replica of its shard's primary, following
    /// it (the primary lists it as synced).
    async fn caught_up(&self, i: usize) {
        let start = Instant::now();
        loop {
            let t = read_topology(&self.topology);
            let addr = &self.addrs[i];
            if let Some(shard) = t.nodes.iter().find(|n| n.replicas.contains(addr))
                && let (Some(me), Some(primary)) = (stats(addr).await, stats(&shard.addr).await)
                && me.role == "slave"
                && me.synced
                && me.primary_link_up
                && me.primary_addr == shard.addr
                && primary.replicas.iter().any(|r| r.addr == *addr && r.synced)
            {
                return;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "{addr} did not catch up as a replica");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// `n` writers (SET of keys of their own, a `WAIT 1 100` after every 8th when `wait` is set)
/// until `stop_at` or until `stop` is set.
fn writers(
    resp: SocketAddr,
    n: usize,
    stop_at: Instant,
    stop: Arc<std::sync::atomic::AtomicBool>,
    wait: bool,
) -> (Vec<Arc<Mutex<Seen>>>, Vec<tokio::task::JoinHandle<()>>) {
    let seen: Vec<Arc<Mutex<Seen>>> = (0..n).map(|_| Arc::default()).collect();
    let tasks = seen
        .iter()
        .enumerate()
        .map(|(w, seen)| {
            let (seen, stop) = (seen.clone(), stop.clone());
            tokio::spawn(async move {
                let mut c = Raw::connect(resp).await;
                for i in 0..200_000u64 {
                    if Instant::now() >= stop_at || stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let (key, value) = (format!("w{w}:{i}"), format!("v{i}"));
                    let reply = c.cmd(&["SET", &key, &value]).await;
                    let acked = {
                        let mut s = seen.lock().unwrap();
                        if reply == b"+OK\r\n" {
                            s.acked.push((key, value));
                            Some(s.acked.len())
                        } else {
                            s.errors.push((Instant::now(), String::from_utf8_lossy(&reply).into_owned()));
                            None
                        }
                    };
                    let Some(acked) = acked else {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        continue;
                    };
                    if wait && i % 8 == 7 && c.cmd(&["WAIT", "1", "100"]).await == b":1\r\n" {
                        seen.lock().unwrap().durable = acked;
                    }
                }
            })
        })
        .collect();
    (seen, tasks)
}

/// Reads back every write the writers saw acknowledged; returns (read back, missing), asserting
/// on the missing ones among the first `durable` of each writer (all of them if `all`).
async fn read_back(resp: SocketAddr, seen: &[Arc<Mutex<Seen>>], all: bool) -> (usize, usize) {
    let mut c = Raw::connect(resp).await;
    let (mut found, mut missing) = (0, 0);
    for s in seen {
        let (durable, acked) = {
            let s = s.lock().unwrap();
            (if all { s.acked.len() } else { s.durable }, s.acked.clone())
        };
        for (n, (key, value)) in acked.iter().enumerate() {
            let got = c.cmd(&["GET", key]).await;
            let want = format!("${}\r\n{value}\r\n", value.len()).into_bytes();
            if got == want {
                found += 1;
            } else {
                assert!(n >= durable, "{key} was acknowledged (and replicated) and is gone: {got:?}");
                missing += 1;
            }
        }
    }
    (found, missing)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_is_replaced_within_the_window_and_loses_no_replicated_write() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut cluster = Cluster::start().await;
    let (resp, [p0, r0, ..]) = (cluster.resp, cluster.addrs.clone());
    let mut c = Raw::connect(resp).await;
    let info = String::from_utf8(c.cmd(&["INFO", "replication"]).await).unwrap();
    assert!(info.contains("connected_slaves:2\r\n"), "{info}");
    assert!(
        info.contains(&format!("ip=127.0.0.1,port={},state=online", r0.rsplit_once(':').unwrap().1)),
        "{info}"
    );
    assert!(info.contains("shoal_fenced_primaries:0\r\n"), "{info}");
    drop(c);

    // Four writers, bounded in count and time.
    let stop_at = Instant::now() + Duration::from_secs(9);
    let (seen, tasks) = writers(resp, 4, stop_at, Arc::default(), true);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let killed_at = Instant::now();
    cluster.signal(0, "KILL");
    for w in tasks {
        w.await.unwrap();
    }

    // Errors only after the kill, within the window.
    let errors: Vec<(Instant, String)> = seen.iter().flat_map(|s| s.lock().unwrap().errors.clone()).collect();
    assert!(errors.iter().all(|(at, _)| *at >= killed_at), "an error before the kill: {errors:?}");
    let window = errors.iter().map(|(at, _)| *at - killed_at).max().unwrap_or_default();
    eprintln!("failover window: {} ms, {} failed writes", window.as_millis(), errors.len());
    assert!(window <= Duration::from_secs(5), "writes failed for {} ms", window.as_millis());
    let after = read_topology(&cluster.topology);
    assert_eq!(after.nodes[0].addr, r0, "the replica was promoted");
    assert_eq!(after.nodes[0].replicas, vec![p0.clone()], "the old primary is listed as a replica");

    // Every write acknowledged before a WAIT that answered 1 is there; report the others.
    assert!(seen.iter().all(|s| s.lock().unwrap().durable > 0), "every writer saw WAIT answer 1");
    let (found, lost) = read_back(resp, &seen, false).await;
    eprintln!("{found} writes read back; {lost} later, unreplicated writes lost");

    // The killed node comes back as a replica of the new primary and catches up.
    cluster.restart(0, "p0-again");
    let mut c = Raw::connect(resp).await;
    c.cmd(&["SET", "{a}after", "1"]).await;
    cluster.caught_up(0).await;
    assert_eq!(c.cmd(&["WAIT", "1", "2000"]).await, b":1\r\n", "every replica has every write");
    let (old, new) = (stats(&p0).await.unwrap(), stats(&r0).await.unwrap());
    assert_eq!((old.primary_addr.as_str(), old.keys), (r0.as_str(), new.keys));
}

/// Found by the chaos run's resharding: the new owner of a slot reported its pull done as soon as
/// it had stored the entries, the move ended and the old owner dropped them, and the new owner's
/// primary, killed before its replica had them, took the only copy along. A pull now reports done
/// only once a replica of its shard holds what it pulled, and a coordinator restarted meanwhile
/// (`resume`) waits for that too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_move_ends_only_once_a_replica_of_the_new_owner_holds_its_keys() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut cluster = Cluster::start().await;
    let mut c = Raw::connect(cluster.resp).await;
    // Keys on shard 1 (tag {a}), confirmed on its replica.
    for i in 0..50 {
        assert_eq!(c.cmd(&["SET", &format!("{{a}}moved{i}"), &format!("v{i}")]).await, b"+OK\r\n");
    }
    assert_eq!(c.cmd(&["WAIT", "1", "2000"]).await, b":1\r\n");
    // Shard 0's replica freezes; the slot moves onto shard 0.
    cluster.signal(1, "STOP");
    let slot = shoal_wire::key_slot(b"a");
    let coordinator = || {
        shoal_coordinator::Coordinator::new(
            shoal_coordinator::FileRegistry::new(&cluster.topology),
            shoal_wire::auth::Credentials::secret(Some(support::secret())),
        )
        .with_timeout(Duration::from_secs(60))
    };
    let first = coordinator();
    let mut mover = tokio::spawn(async move { first.move_slots(slot, slot, 0).await });
    let early = tokio::time::timeout(Duration::from_secs(3), &mut mover).await;
    assert!(
        early.is_err(),
        "the move ended while the new owner's replica could not hold the keys: {early:?}"
    );
    // The coordinator dies while the pull waits for the replica; one started again (it keeps no
    // state but the published topology) waits for the same thing.
    mover.abort();
    let again = coordinator();
    let mut mover = tokio::spawn(async move { again.resume().await });
    let early = tokio::time::timeout(Duration::from_secs(2), &mut mover).await;
    assert!(early.is_err(), "the resumed move ended while the replica could not hold the keys: {early:?}");
    cluster.signal(1, "CONT");
    let moved = tokio::time::timeout(Duration::from_secs(30), mover).await;
    let t = moved.expect("the move ends once the replica is back").unwrap().expect("the move succeeds");
    assert!(t.migrations.is_empty(), "{:?}", t.migrations);
    assert_eq!(shoal_coordinator::plan::slot_owners(&t)[usize::from(slot)], 0, "{:?}", t.slots);
    // The new owner's primary dies at once: its replica, promoted, has every key.
    cluster.signal(0, "KILL");
    let start = Instant::now();
    while read_topology(&cluster.topology).nodes[0].addr != cluster.addrs[1] {
        assert!(start.elapsed() < Duration::from_secs(20), "the failover writer did not promote r0");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut c = Raw::connect(cluster.resp).await;
    for i in 0..50 {
        let key = format!("{{a}}moved{i}");
        let mut got = Vec::new();
        for _ in 0..100 {
            got = c.cmd(&["GET", &key]).await;
            if !got.starts_with(b"-") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let want = format!("v{i}");
        assert_eq!(String::from_utf8_lossy(&got), format!("${}\r\n{want}\r\n", want.len()), "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_load_shows_no_error_and_loses_nothing() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut cluster = Cluster::start().await;
    let resp = cluster.resp;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (seen, tasks) = writers(resp, 4, Instant::now() + Duration::from_secs(90), stop.clone(), false);
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Replica, then primary (which hands over to the replica restarted just before), per shard.
    let started = Instant::now();
    for i in [1, 0, 3, 2] {
        let was_primary = read_topology(&cluster.topology).nodes.iter().any(|n| n.addr == cluster.addrs[i]);
        cluster.signal(i, "TERM");
        if was_primary {
            let t = read_topology(&cluster.topology);
            assert!(
                t.nodes.iter().all(|n| n.addr != cluster.addrs[i]),
                "{} handed its shard over before exiting",
                NAMES[i]
            );
        }
        cluster.restart(i, &format!("{}-again", NAMES[i]));
        cluster.caught_up(i).await;
    }
    eprintln!("rolling restart of 4 nodes took {} ms", started.elapsed().as_millis());
    // Every shard has a new primary: the replicas of the start.
    let t = read_topology(&cluster.topology);
    assert_eq!(
        (t.nodes[0].addr.as_str(), t.nodes[1].addr.as_str()),
        (cluster.addrs[1].as_str(), cluster.addrs[3].as_str())
    );

    // SHOAL FAILOVER hands shard 0 back to its first primary, under the same load.
    let mut c = Raw::connect(resp).await;
    let to = cluster.addrs[0].clone();
    assert_eq!(c.cmd(&["SHOAL", "FAILOVER", "0", &to]).await, b"+OK\r\n");
    let topo = String::from_utf8(c.cmd(&["SHOAL", "TOPOLOGY"]).await).unwrap();
    assert!(topo.contains(&format!("id=0 addr={to} ")), "{topo}");
    assert!(topo.contains(&format!("replicas={}", cluster.addrs[1])), "{topo}");
    assert_eq!(
        String::from_utf8(c.cmd(&["SHOAL", "FAILOVER", "0", "127.0.0.1:1"]).await).unwrap(),
        "-ERR 127.0.0.1:1 is not a replica of shard 0\r\n"
    );
    let missing = String::from_utf8(c.cmd(&["SHOAL", "FAILOVER", "7"]).await).unwrap();
    assert!(missing.starts_with("-ERR no shard 7 in topology version"), "{missing}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in tasks {
        w.await.unwrap();
    }
    let errors: Vec<(Instant, String)> = seen.iter().flat_map(|s| s.lock().unwrap().errors.clone()).collect();
    assert!(errors.is_empty(), "clients saw errors: {errors:?}");
    let (found, lost) = read_back(resp, &seen, true).await;
    eprintln!("{found} acknowledged writes read back");
    assert_eq!(lost, 0);
    assert!(found > 1000, "the writers kept writing: {found}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_resumed_after_sigstop_refuses_writes_routed_by_the_old_topology() {
    let _one = ONE_AT_A_TIME.lock().await;
    // p0 hears of topologies only from offers: resumed, it does not know of the failover until
    // the failover writer offers it the new topology (it does so for every member behind).
    let mut cluster = Cluster::start_with(&[0]).await;
    let (resp, [p0, r0, ..]) = (cluster.resp, cluster.addrs.clone());
    assert!(shoal_wire::key_slot(b"{b}") < 8192, "the keys below are shard 0's");
    let mut c = Raw::connect(resp).await;
    assert_eq!(c.cmd(&["SET", "{b}before", "1"]).await, b"+OK\r\n");
    assert_eq!(c.cmd(&["WAIT", "1", "1000"]).await, b":1\r\n");
    let old = read_topology(&cluster.topology);
    // A client straight on the primary's gRPC port, as a router that will not hear of the
    // failover would be: connected before the freeze.
    let options = shoal_wire::client::ClientOptions::default().with_secret(Some(support::secret()));
    let mut stale = shoal_wire::client::connect(&p0, &options).await.unwrap();
    cluster.signal(0, "STOP");
    support::wait_stopped(cluster.nodes[0].as_ref().unwrap().0.id()).await;
    // A write by the old version, sent while the primary is frozen (it waits in the socket, ahead
    // of the failover writer's offer of the new topology).
    let set = shoal_wire::proto::Set {
        key: bytes::Bytes::from_static(b"{b}stale"),
        value: bytes::Bytes::from_static(b"lost?"),
        ..Default::default()
    };
    let batch = shoal_wire::proto::Batch {
        id: 1,
        ops: vec![shoal_wire::proto::Op {
            kind: Some(shoal_wire::proto::op::Kind::Set(set)),
            ..Default::default()
        }],
        topology_version: old.version,
    };
    let in_flight = tokio::spawn(async move {
        let mut replies = stale.execute(tokio_stream::iter([batch])).await.unwrap().into_inner();
        replies.message().await.unwrap().unwrap().replies.remove(0).kind.unwrap()
    });
    // Replaced; once the router routes by the new topology (its file poll), writes go there.
    let start = Instant::now();
    let promoted = format!("id=0 addr={r0} ");
    while !String::from_utf8(c.cmd(&["SHOAL", "TOPOLOGY"]).await).unwrap().contains(&promoted) {
        assert!(start.elapsed() < Duration::from_secs(10), "the frozen primary was not replaced");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(c.cmd(&["SET", "{b}after", "2"]).await, b"+OK\r\n", "the promoted replica serves");
    cluster.signal(0, "CONT");
    // Resumed: the write is refused, not taken (the resync to the new primary would undo it).
    let reply = in_flight.await.unwrap();
    assert!(
        matches!(reply, shoal_wire::proto::reply::Kind::Moved(_)),
        "the resumed primary took a write by the old topology: {reply:?}\n{}",
        std::fs::read_to_string(cluster.root.join("p0.log")).unwrap_or_default()
    );
    // It learns the new topology, follows the new primary, and nothing of the refused write exists.
    cluster.caught_up(0).await;
    assert_eq!(c.cmd(&["GET", "{b}stale"]).await, b"$-1\r\n");
    assert_eq!(c.cmd(&["GET", "{b}before"]).await, b"$1\r\n1\r\n");
    assert_eq!(c.cmd(&["GET", "{b}after"]).await, b"$1\r\n2\r\n");
}

/// Issue 38's failover window: a read in flight at a frozen primary when the router learns of its
/// replacement is routed again, to the new primary, rather than left to wait out its deadline on
/// a node that will not answer. The router's deadline is 8 s here, far longer than the failover
/// (about 1.5 s); the read comes back with the value well before it (it used to fail at 8 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_in_flight_at_a_frozen_primary_is_served_by_its_replacement() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut cluster = Cluster::start_full(&[], 8000).await;
    let mut c = Raw::connect(cluster.resp).await;
    assert_eq!(c.cmd(&["SET", "{b}held", "v"]).await, b"+OK\r\n");
    assert_eq!(c.cmd(&["WAIT", "1", "1000"]).await, b":1\r\n");
    cluster.signal(0, "STOP");
    support::wait_stopped(cluster.nodes[0].as_ref().unwrap().0.id()).await;
    let start = Instant::now();
    let got = c.cmd(&["GET", "{b}held"]).await;
    let took = start.elapsed();
    cluster.signal(0, "CONT");
    assert_eq!(got, b"$1\r\nv\r\n", "{}", String::from_utf8_lossy(&got));
    assert!(
        took < Duration::from_secs(4),
        "the read took {took:?}: it waited out its deadline instead of moving"
    );
}

/// The other side of that rule: a *write* in flight at a primary when it is replaced is not sent
/// again to the new primary. The old primary may have run it and passed it to its replica (under a
/// slow link rather than a freeze: issue 38's one-hour chaos run pushed one list element twice
/// that way), so a second run could apply it twice; the client gets an error saying the write may
/// have run (as a Redis Cluster client sees its connection fail), and the write is applied at most
/// once. Here the primary is frozen before the write reaches it, so it is applied nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_in_flight_at_a_replaced_primary_is_answered_with_an_error_and_not_sent_twice() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut cluster = Cluster::start_full(&[], 8000).await;
    let mut c = Raw::connect(cluster.resp).await;
    assert_eq!(c.cmd(&["RPUSH", "{b}list", "before"]).await, b":1\r\n");
    assert_eq!(c.cmd(&["WAIT", "1", "1000"]).await, b":1\r\n");
    cluster.signal(0, "STOP");
    support::wait_stopped(cluster.nodes[0].as_ref().unwrap().0.id()).await;
    let start = Instant::now();
    let got = c.cmd(&["RPUSH", "{b}list", "in-flight"]).await;
    let took = start.elapsed();
    cluster.signal(0, "CONT");
    let text = String::from_utf8_lossy(&got).into_owned();
    assert!(text.starts_with('-') && text.contains("may have run"), "{text}");
    assert!(took < Duration::from_secs(4), "the write took {took:?}: it waited out its deadline");
    cluster.caught_up(0).await;
    assert_eq!(c.cmd(&["RPUSH", "{b}list", "after"]).await, b":2\r\n", "the new primary takes writes");
    let list = c.cmd(&["LRANGE", "{b}list", "0", "-1"]).await;
    assert_eq!(list, b"*2\r\n$6\r\nbefore\r\n$5\r\nafter\r\n", "{}", String::from_utf8_lossy(&list));
}

/// A primary SIGKILLed while it ships a large transaction to its replica (the transaction's cut
/// spans dozens of messages, of which the replica has received the first few) leaves the promoted
/// replica with none of the transaction, never some of its keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_killed_mid_cut_leaves_the_promoted_replica_none_of_the_transaction() {
    let _one = ONE_AT_A_TIME.lock().await;
    // The case meant needs the replica to have received the cut's first messages before the
    // stream broke (a replica that received nothing of it would hold none of it trivially). Under
    // a loaded machine the kernel or HTTP/2 sometimes hands it none (a CI run sharing the cores
    // with a chaos run saw that once in three), so the scenario runs again, in a fresh cluster,
    // up to three times until it is the one meant; every attempt must leave none of the
    // transaction.
    let mut partial_cuts = Vec::new();
    for _ in 0..3 {
        partial_cuts.push(kill_mid_cut().await);
        if partial_cuts.last() == Some(&1) {
            return;
        }
    }
    panic!("the replica never dropped a half-received cut: {partial_cuts:?}");
}

/// One attempt of the test above: returns how many half-received cuts the promoted replica
/// dropped.
async fn kill_mid_cut() -> u64 {
    let mut cluster = Cluster::start().await;
    let (resp, r0) = (cluster.resp, cluster.addrs[1].clone());
    assert!(shoal_wire::key_slot(b"{b}") < 8192, "the keys below are shard 0's");
    const KEYS: usize = 96;
    let key = |i: usize| format!("{{b}}unit:{i}");
    let mut c = Raw::connect(resp).await;
    for i in 0..KEYS {
        assert_eq!(c.cmd(&["SET", &key(i), "old"]).await, b"+OK\r\n");
    }
    assert_eq!(c.cmd(&["WAIT", "1", "2000"]).await, b":1\r\n");
    // 96 values of 512 KiB: the cut holding them is sent as ~48 messages of 1 MiB.
    let big = "n".repeat(512 * 1024);
    assert_eq!(c.cmd(&["MULTI"]).await, b"+OK\r\n");
    for i in 0..KEYS {
        assert_eq!(c.cmd(&["SET", &key(i), &big]).await, b"+QUEUED\r\n");
    }
    // The replica is frozen while the primary ships the cut: the first messages (what the
    // stream's flow-control window lets through) wait in its socket, the rest never leave, and
    // the primary dies mid-cut.
    cluster.signal(1, "STOP");
    support::wait_stopped(cluster.nodes[1].as_ref().unwrap().0.id()).await;
    let exec = c.cmd(&["EXEC"]).await;
    // The primary dies once at least one whole message of the cut (about 1 MiB) is in the
    // kernel between the two (its send queue, the frozen replica's receive queue): a killed
    // process's socket still delivers what it had written, so the replica gets the cut's first
    // messages, never its end.
    let (replica_pid, primary_port) = (cluster.nodes[1].as_ref().unwrap().0.id(), port_of(&cluster.addrs[0]));
    let start = Instant::now();
    // And once the primary has read everything the replica sent it before freezing (acks,
    // HTTP/2 control frames): a process killed with unread input resets its connections, and a
    // reset throws away what it had not sent yet.
    loop {
        let (queued, unread_by_primary) = queued_between(replica_pid, primary_port);
        if queued >= (1 << 20) + (256 << 10) && unread_by_primary == 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the primary did not start sending the cut, or left input unread"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.signal(0, "KILL");
    cluster.signal(1, "CONT");
    assert!(exec.starts_with(format!("*{KEYS}\r\n+OK\r\n").as_bytes()), "{:?}", &exec[..exec.len().min(64)]);
    let start = Instant::now();
    let promoted = format!("id=0 addr={r0} ");
    while !String::from_utf8(c.cmd(&["SHOAL", "TOPOLOGY"]).await).unwrap().contains(&promoted) {
        assert!(start.elapsed() < Duration::from_secs(10), "the killed primary was not replaced");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut lengths = Vec::with_capacity(KEYS);
    for i in 0..KEYS {
        let reply = c.cmd(&["STRLEN", &key(i)]).await;
        lengths.push(String::from_utf8(reply).unwrap());
    }
    let new = format!(":{}\r\n", big.len());
    let held = lengths.iter().filter(|l| **l == new).count();
    assert!(lengths.iter().all(|l| *l == new || l == ":3\r\n"), "{lengths:?}");
    assert_eq!(held, 0, "the promoted replica holds {held} of the transaction's {KEYS} keys");
    stats(&r0).await.expect("the promoted replica answers").partial_cuts_dropped
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit(':').next().unwrap().parse().unwrap()
}

/// Bytes in flight on the TCP connections from process `pid` to local port `port`: what that
/// process has not read yet plus what the other end has written but not had acknowledged; and
/// what the other end (the one listening on `port`) has not read of what `pid` sent it (from
/// `/proc`: the sockets `pid`'s descriptors name, matched in `/proc/net/tcp`).
fn queued_between(pid: u32, port: u16) -> (usize, usize) {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|l| Some(l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.to_string()))
        .collect();
    // Each line: sl, local "ADDR:PORT", remote "ADDR:PORT", st, "tx_queue:rx_queue", ..., inode (10th).
    struct Socket {
        local: u16,
        remote: u16,
        tx: usize,
        rx: usize,
        inode: String,
    }
    let hex_port = |f: &str| u16::from_str_radix(f.rsplit(':').next()?, 16).ok();
    let sockets: Vec<Socket> = std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (tx, rx) = f.get(4)?.split_once(':')?;
            Some(Socket {
                local: hex_port(f.get(1)?)?,
                remote: hex_port(f.get(2)?)?,
                tx: usize::from_str_radix(tx, 16).ok()?,
                rx: usize::from_str_radix(rx, 16).ok()?,
                inode: f.get(9)?.to_string(),
            })
        })
        .collect();
    let mine: Vec<&Socket> =
        sockets.iter().filter(|s| s.remote == port && inodes.contains(&s.inode)).collect();
    let unread: usize = mine.iter().map(|s| s.rx).sum();
    let theirs = || sockets.iter().filter(|s| s.local == port && mine.iter().any(|m| m.local == s.remote));
    let unacked: usize = theirs().map(|s| s.tx).sum();
    (unread + unacked, theirs().map(|s| s.rx).sum())
}

/// Writes `n` keys of every type through `c` (pipelined); `check` reads them back.
async fn typed_keys(c: &mut Raw, n: usize) {
    let mut pipeline = Vec::new();
    for i in 0..n {
        let k = |t: &str| format!("{t}:{i}");
        pipeline.extend(support::encode(&[b"SET", k("s").as_bytes(), format!("v{i}").as_bytes()]));
        pipeline.extend(support::encode(&[b"HSET", k("h").as_bytes(), b"f", format!("{i}").as_bytes()]));
        pipeline.extend(support::encode(&[b"RPUSH", k("l").as_bytes(), b"a", b"b"]));
        pipeline.extend(support::encode(&[b"SADD", k("set").as_bytes(), b"x", b"y", b"z"]));
        pipeline.extend(support::encode(&[b"ZADD", k("z").as_bytes(), b"1.5", b"m"]));
        pipeline.extend(support::encode(&[
            b"XADD",
            k("xs").as_bytes(),
            b"7-1",
            b"f",
            format!("{i}").as_bytes(),
        ]));
        pipeline.extend(support::encode(&[b"XGROUP", b"CREATE", k("xs").as_bytes(), b"g", b"0"]));
        pipeline.extend(support::encode(&[
            b"XREADGROUP",
            b"GROUP",
            b"g",
            b"c",
            b"STREAMS",
            k("xs").as_bytes(),
            b">",
        ]));
    }
    c.send(&pipeline).await;
    for _ in 0..n * 8 {
        let r = c.reply().await.unwrap();
        assert!(
            r == b"+OK\r\n" || r.starts_with(b":") || r == b"$3\r\n7-1\r\n" || r.starts_with(b"*1\r\n"),
            "{}",
            String::from_utf8_lossy(&r)
        );
    }
}

async fn check_typed_keys(c: &mut Raw, n: usize, when: &str) {
    for i in (0..n).step_by(7) {
        assert_eq!(c.cmd(&["GET", &format!("s:{i}")]).await, support::bulk(&format!("v{i}")), "{when}");
        assert_eq!(c.cmd(&["HGET", &format!("h:{i}"), "f"]).await, support::bulk(&i.to_string()), "{when}");
        assert_eq!(c.cmd(&["LLEN", &format!("l:{i}")]).await, b":2\r\n", "{when}");
        assert_eq!(c.cmd(&["SCARD", &format!("set:{i}")]).await, b":3\r\n", "{when}");
        assert_eq!(c.cmd(&["ZSCORE", &format!("z:{i}"), "m"]).await, support::bulk("1.5"), "{when}");
        let x = format!("xs:{i}");
        let want = format!("*1\r\n*2\r\n$3\r\n7-1\r\n*2\r\n$1\r\nf\r\n${}\r\n{i}\r\n", i.to_string().len());
        assert_eq!(String::from_utf8(c.cmd(&["XRANGE", &x, "-", "+"]).await).unwrap(), want, "{when}");
        let pending = String::from_utf8(c.cmd(&["XPENDING", &x, "g"]).await).unwrap();
        assert!(
            pending.starts_with("*4\r\n:1\r\n$3\r\n7-1\r\n"),
            "the group and its PEL replicate ({when}): {pending}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_cluster_with_replicas_fails_over_and_scales_without_losing_a_key() {
    let _one = ONE_AT_A_TIME.lock().await;
    let router = support::router(&["--embedded-nodes", "2", "--replicas", "1"]).await;
    let mut c = Raw::connect(router.resp_addr()).await;
    let info = String::from_utf8(c.cmd(&["INFO", "replication"]).await).unwrap();
    assert!(info.contains("connected_slaves:2\r\n"), "{info}");
    // A node setting reaches the replicas too (a promoted one serves with it), and the shards
    // SHOAL SCALE starts below (checked at the end).
    assert_eq!(c.cmd(&["CONFIG", "SET", "cluster-slot-stats-enabled", "yes"]).await, b"+OK\r\n");
    let cluster = router.state.embedded.clone().expect("an embedded cluster");
    let nodes = cluster.node_states().await;
    assert_eq!(nodes.len(), 4);
    assert!(nodes.iter().all(|n| n.store.slot_traffic.enabled()), "a primary or replica missed CONFIG SET");
    const N: usize = 600;
    typed_keys(&mut c, N).await;
    assert_eq!(c.cmd(&["WAIT", "1", "2000"]).await, b":1\r\n", "every shard's replica has every write");

    // A hand-over of shard 0 to its replica, then reads through the new primary.
    let before = String::from_utf8(c.cmd(&["SHOAL", "TOPOLOGY"]).await).unwrap();
    let replica = before
        .lines()
        .find(|l| l.starts_with("id=0 "))
        .and_then(|l| l.split(' ').find_map(|f| f.strip_prefix("replicas=")))
        .unwrap()
        .to_string();
    assert_eq!(c.cmd(&["SHOAL", "FAILOVER", "0"]).await, b"+OK\r\n");
    let after = String::from_utf8(c.cmd(&["SHOAL", "TOPOLOGY"]).await).unwrap();
    assert!(after.contains(&format!("id=0 addr={replica} ")), "{after}");
    // The writes so far were acknowledged by the primary replaced since: WAIT does not count the
    // new primary's replicas for them (a failover could have lost them; issue 38's chaos run),
    // though they have caught up (another connection's write after the change is counted).
    let mut later = Raw::connect(router.resp_addr()).await;
    assert_eq!(later.cmd(&["SET", "after:handover", "1"]).await, b"+OK\r\n");
    assert_eq!(later.cmd(&["WAIT", "1", "5000"]).await, b":1\r\n", "the new primary's replica caught up");
    assert_eq!(c.cmd(&["WAIT", "1", "300"]).await, b":0\r\n", "nothing counted across a change of primary");
    assert_eq!(later.cmd(&["DEL", "after:handover"]).await, b":1\r\n");
    check_typed_keys(&mut c, N, "after the hand-over").await;
    assert_eq!(c.cmd(&["SET", "after:failover", "1"]).await, b"+OK\r\n");
    assert_eq!(c.cmd(&["WAIT", "1", "2000"]).await, b":1\r\n", "the old primary follows the new one");

    // Grow with replicas: the new shard gets its replica once the move is done.
    assert_eq!(c.cmd(&["SHOAL", "SCALE", "3"]).await, b"+OK\r\n");
    support::wait_scaled(&mut c, 3).await;
    check_typed_keys(&mut c, N, "after growing to 3").await;
    let start = Instant::now();
    loop {
        let info = String::from_utf8(c.cmd(&["INFO", "replication"]).await).unwrap();
        if info.contains("connected_slaves:3\r\n") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "the new shard's replica did not connect: {info}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for i in 0..N {
        assert_eq!(c.cmd(&["SET", &format!("x:{i}"), "1"]).await, b"+OK\r\n");
    }
    assert_eq!(c.cmd(&["WAIT", "1", "2000"]).await, b":1\r\n", "every shard, the new one too");
    assert_eq!(c.cmd(&["SHOAL", "FAILOVER", "2"]).await, b"+OK\r\n", "the new shard hands over too");
    let nodes = cluster.node_states().await;
    assert_eq!(nodes.len(), 6);
    assert!(
        nodes.iter().all(|n| n.store.slot_traffic.enabled()),
        "a node SHOAL SCALE started missed the setting"
    );
    check_typed_keys(&mut c, N, "after the new shard's hand-over").await;

    // Shrink: the shard that leaves takes its replica along; nothing is lost.
    assert_eq!(c.cmd(&["SHOAL", "SCALE", "2"]).await, b"+OK\r\n");
    support::wait_scaled(&mut c, 2).await;
    check_typed_keys(&mut c, N, "after shrinking to 2").await;
    assert_eq!(c.cmd(&["GET", "after:failover"]).await, support::bulk("1"));
    assert_eq!(c.cmd(&["DBSIZE"]).await, format!(":{}\r\n", N * 7 + 1).into_bytes());
    router.shutdown().await;
}

/// Ops the embedded replicas have received (primaries' are not counted).
async fn replica_ops(router: &shoal_router::Router) -> u64 {
    router
        .node_states()
        .await
        .iter()
        .filter(|s| !s.membership.replication.link().primary_addr.is_empty())
        .map(|s| s.metrics.ops.get())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readonly_clients_and_replica_preferred_and_nearest_routers_read_from_replicas() {
    let _one = ONE_AT_A_TIME.lock().await;
    let router = support::router(&["--embedded-nodes", "2", "--replicas", "1"]).await;
    let mut c = Raw::connect(router.resp_addr()).await;
    for i in 0..100 {
        assert_eq!(c.cmd(&["SET", &format!("k{i}"), &format!("v{i}")]).await, b"+OK\r\n");
        assert_eq!(c.cmd(&["HSET", &format!("h{i}"), "f", &format!("{i}")]).await, b":1\r\n");
    }
    assert_eq!(c.cmd(&["WAIT", "1", "2000"]).await, b":1\r\n");
    async fn read_all(c: &mut Raw) {
        for i in 0..100 {
            assert_eq!(c.cmd(&["GET", &format!("k{i}")]).await, support::bulk(&format!("v{i}")));
            assert_eq!(c.cmd(&["HGET", &format!("h{i}"), "f"]).await, support::bulk(&i.to_string()));
        }
    }

    // By default reads go to primaries.
    let before = replica_ops(&router).await;
    read_all(&mut c).await;
    assert_eq!(replica_ops(&router).await, before, "no read reached a replica");

    // READONLY: reads (GET, and typed ones like HGET) are served by replicas, writes are not.
    assert_eq!(c.cmd(&["READONLY"]).await, b"+OK\r\n");
    read_all(&mut c).await;
    let after_reads = replica_ops(&router).await;
    assert!(after_reads >= before + 200, "every read went to a replica: {before} -> {after_reads}");
    for i in 0..50 {
        assert_eq!(c.cmd(&["SET", &format!("w{i}"), "x"]).await, b"+OK\r\n");
    }
    assert_eq!(replica_ops(&router).await, after_reads, "writes go to primaries");
    assert_eq!(c.cmd(&["WAIT", "1", "2000"]).await, b":1\r\n");
    assert_eq!(c.cmd(&["GET", "w49"]).await, support::bulk("x"), "a replicated write, read on a replica");
    assert_eq!(c.cmd(&["READWRITE"]).await, b"+OK\r\n");
    let before = replica_ops(&router).await;
    read_all(&mut c).await;
    assert_eq!(replica_ops(&router).await, before, "READWRITE: back to primaries");
    assert_eq!(c.cmd(&["READONLY", "x"]).await, b"-ERR wrong number of arguments for 'readonly' command\r\n");
    router.shutdown().await;

    // A router that prefers replicas for every client.
    let router =
        support::router(&["--embedded-nodes", "2", "--replicas", "1", "--read-from", "replica-preferred"])
            .await;
    let mut c = Raw::connect(router.resp_addr()).await;
    assert_eq!(c.cmd(&["SET", "k", "v"]).await, b"+OK\r\n");
    assert_eq!(c.cmd(&["WAIT", "1", "2000"]).await, b":1\r\n");
    let before = replica_ops(&router).await;
    for _ in 0..20 {
        assert_eq!(c.cmd(&["GET", "k"]).await, support::bulk("v"));
    }
    assert!(replica_ops(&router).await >= before + 20);
    router.shutdown().await;

    // A router that reads from the nearest member: it measures every member (2 primaries and
    // their replicas) within a second or so, and reads are served wherever that leads.
    let router =
        support::router(&["--embedded-nodes", "2", "--replicas", "1", "--read-from", "nearest"]).await;
    let mut c = Raw::connect(router.resp_addr()).await;
    for i in 0..100 {
        assert_eq!(c.cmd(&["SET", &format!("k{i}"), &format!("v{i}")]).await, b"+OK\r\n");
        assert_eq!(c.cmd(&["HSET", &format!("h{i}"), "f", &format!("{i}")]).await, b":1\r\n");
    }
    assert_eq!(c.cmd(&["WAIT", "1", "2000"]).await, b":1\r\n");
    let start = Instant::now();
    let rtts = loop {
        let page = support::http_get(router.http_addr(), "/metrics").await;
        let rtts: Vec<(String, f64)> = page
            .lines()
            .filter(|l| l.starts_with("shoal_router_member_rtt_seconds{"))
            .map(|l| {
                let role = if l.contains("role=\"primary\"") { "primary" } else { "replica" };
                (role.to_string(), l.rsplit(' ').next().unwrap().parse().unwrap())
            })
            .collect();
        if rtts.len() == 4 {
            break rtts;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "not every member measured: {rtts:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(rtts.iter().filter(|(role, _)| role == "replica").count(), 2, "{rtts:?}");
    assert!(rtts.iter().all(|(_, s)| *s > 0.0 && *s < 1.0), "loopback round trips: {rtts:?}");
    read_all(&mut c).await;
    // Writes still go to primaries only.
    let before = replica_ops(&router).await;
    assert_eq!(c.cmd(&["SET", "w", "x"]).await, b"+OK\r\n");
    assert_eq!(replica_ops(&router).await, before);
    router.shutdown().await;
}
