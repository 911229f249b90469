//! Online resharding with real processes: `shoal-node` processes following a topology file, a
//! `shoal-router` process routing by it, and `shoal-router reshard` as the coordinator, while the
//! model-checked workload (`support/workload.rs`) writes and reads through the router. Nodes and
//! router run with `--threads 1`, on Tokio's current-thread scheduler (what a process given one
//! CPU runs; the in-process tests run the multi-threaded one).
//!
//! - 3→5→2→4 nodes: zero client errors, every acknowledged write read back.
//! - 3→4 with the sending node SIGKILLed mid-migration and restarted from its data directory:
//!   clients see errors only while it is down, and the only writes lost are the killed node's own
//!   since its last snapshot (the test computes which writes those may be and lists the lost ones).
//! - 3→4 with the coordinator SIGKILLed mid-migration and run again with `--resume`: no errors, no
//!   lost writes.

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use shoal_wire::Topology;
use support::workload::{self, Workload};
use support::{Proc, Raw};

/// Bulk data that makes migrations take a while at the nodes' pull rate limit.
const BULK_KEYS: usize = 20_000;
const BULK_VALUE: usize = 200;
/// One-off keys written right after the snapshot in the sender-kill test.
const RISK_KEYS: usize = 600;

struct Node {
    id: u32,
    addr: String,
    metrics: SocketAddr,
    dir: PathBuf,
    proc: Option<Proc>,
}

/// A cluster of node processes and one router process, all on loopback.
struct Bed {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    topology: PathBuf,
    nodes: Vec<Node>,
    migrate_rate: String,
    _router: Proc,
    resp: SocketAddr,
}

fn log_file(root: &Path, name: &str) -> Stdio {
    Stdio::from(std::fs::File::create(root.join(format!("{name}.log"))).unwrap())
}

impl Bed {
    /// Starts `n` nodes, publishes an even topology over them with the coordinator, and starts a
    /// router following it.
    async fn start(n: u32, migrate_rate: &str) -> Bed {
        Bed::start_with(n, migrate_rate, false).await
    }

    /// With `frozen_router`, the router follows a copy of the first topology that never changes:
    /// it learns newer versions only from the nodes (their `moved` replies).
    async fn start_with(n: u32, migrate_rate: &str, frozen_router: bool) -> Bed {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let topology = root.join("topology.json");
        let mut bed = Bed {
            root: root.clone(),
            topology: topology.clone(),
            nodes: Vec::new(),
            migrate_rate: migrate_rate.into(),
            _tmp: tmp,
            _router: Proc(Command::new("true").spawn().unwrap()),
            resp: "127.0.0.1:1".parse().unwrap(),
        };
        for _ in 0..n {
            bed.add_node().await;
        }
        let ids: Vec<u32> = bed.nodes.iter().map(|n| n.id).collect();
        assert!(bed.reshard(&ids).wait_ok(Duration::from_secs(30)), "creating the topology");

        let router_topology = if frozen_router {
            let copy = root.join("router-topology.json");
            std::fs::copy(&topology, &copy).unwrap();
            copy
        } else {
            topology.clone()
        };
        let (resp, http) = (support::free_port(), support::free_port());
        let resp: SocketAddr = format!("127.0.0.1:{resp}").parse().unwrap();
        let child = support::shoal("shoal-router")
            .args(["--topology-file", router_topology.to_str().unwrap(), "--resp", &resp.to_string()])
            .args(["--http", &format!("127.0.0.1:{http}"), "--deadline-ms", "2000", "--threads", "1"])
            .stdout(Stdio::null())
            .stderr(log_file(&root, "router"))
            .spawn()
            .unwrap();
        bed._router = Proc(child);
        bed.resp = resp;
        let start = Instant::now();
        loop {
            if let Ok(s) = tokio::net::TcpStream::connect(resp).await {
                let mut c = Raw::from_stream(s);
                if c.cmd(&["SET", "ready", "1"]).await == b"+OK\r\n" {
                    assert_eq!(c.cmd(&["DEL", "ready"]).await, b":1\r\n");
                    break;
                }
            }
            assert!(start.elapsed() < Duration::from_secs(20), "router did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bed
    }

    /// Starts a new node (next id, fresh port and data directory).
    async fn add_node(&mut self) -> u32 {
        let id = self.nodes.len() as u32;
        let addr = format!("127.0.0.1:{}", support::free_port());
        let dir = self.root.join(format!("node{id}"));
        let metrics = format!("127.0.0.1:{}", support::free_port()).parse().unwrap();
        self.nodes.push(Node { id, addr, metrics, dir, proc: None });
        self.run_node(id).await;
        id
    }

    /// (Re)starts node `id` with its data directory and waits until it accepts connections.
    async fn run_node(&mut self, id: u32) {
        let node = &self.nodes[id as usize];
        let child = support::shoal("shoal-node")
            .args(["--listen", &node.addr, "--node-id", &id.to_string()])
            .args(["--data-dir", node.dir.to_str().unwrap()])
            .args(["--topology-file", self.topology.to_str().unwrap()])
            .args(["--migrate-rate", &self.migrate_rate, "--threads", "1"])
            .args(["--metrics-listen", &node.metrics.to_string()])
            .stdout(Stdio::null())
            .stderr(log_file(&self.root, &format!("node{id}-{}", now_ms())))
            .spawn()
            .unwrap();
        let addr = node.addr.clone();
        self.nodes[id as usize].proc = Some(Proc(child));
        let start = Instant::now();
        while tokio::net::TcpStream::connect(&addr).await.is_err() {
            assert!(start.elapsed() < Duration::from_secs(20), "node {id} did not start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILLs node `id`.
    fn kill_node(&mut self, id: u32) {
        let mut p = self.nodes[id as usize].proc.take().unwrap();
        p.0.kill().unwrap();
        p.0.wait().unwrap();
    }

    /// Stops node `id` with SIGTERM and waits for it to exit cleanly.
    fn stop_node(&mut self, id: u32) {
        let mut p = self.nodes[id as usize].proc.take().unwrap();
        let status = Command::new("kill").args(["-TERM", &p.0.id().to_string()]).status().unwrap();
        assert!(status.success());
        let start = Instant::now();
        loop {
            if let Some(s) = p.0.try_wait().unwrap() {
                assert!(s.success(), "node {id} exited with {s}");
                return;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "node {id} did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the coordinator moving the cluster onto nodes `ids`.
    fn reshard(&self, ids: &[u32]) -> Coordinator {
        let nodes: Vec<String> =
            ids.iter().map(|&i| format!("{i}={}", self.nodes[i as usize].addr)).collect();
        self.coordinator(&["--nodes", &nodes.join(",")])
    }

    fn coordinator(&self, args: &[&str]) -> Coordinator {
        let child = support::shoal("shoal-router")
            .args(["reshard", "--topology-file", self.topology.to_str().unwrap(), "--timeout-secs", "120"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(log_file(&self.root, &format!("reshard-{}", now_ms())))
            .spawn()
            .unwrap();
        Coordinator(Some(child))
    }

    fn topology(&self) -> Topology {
        Topology::from_json(&std::fs::read_to_string(&self.topology).unwrap()).unwrap()
    }

    /// Waits until the router reports a migration under way with part of it done.
    async fn wait_mid_migration(&self) -> String {
        let mut c = Raw::connect(self.resp).await;
        let start = Instant::now();
        loop {
            // (A router that does not watch the file learns the new version from this.)
            assert!(c.cmd(&["DBSIZE"]).await.starts_with(b":"));
            let out = String::from_utf8(c.cmd(&["SHOAL", "TOPOLOGY"]).await).unwrap();
            let head = out.lines().nth(1).unwrap_or_default().to_string();
            let field = |name: &str| -> u64 {
                head.split(' ').find_map(|f| f.strip_prefix(&format!("{name}="))?.parse().ok()).unwrap_or(0)
            };
            if field("migrations") > 0
                && field("keys_moved") > 0
                && field("slots_done") < field("slots_moving")
            {
                return out;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "no migration seen under way: {out}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Logs of every process, for a failing test's message.
    fn logs(&self) -> String {
        let mut out = String::new();
        let mut entries: Vec<_> = std::fs::read_dir(&self.root).unwrap().flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries.into_iter().filter(|e| e.file_name().to_string_lossy().ends_with(".log")) {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            out += &format!("--- {}\n", e.file_name().to_string_lossy());
            out += &tail.into_iter().rev().collect::<Vec<_>>().join("\n");
            out += "\n";
        }
        out
    }
}

struct Coordinator(Option<Child>);

impl Coordinator {
    /// Waits for the coordinator to finish; whether it succeeded.
    fn wait_ok(&mut self, limit: Duration) -> bool {
        let child = self.0.as_mut().unwrap();
        let start = Instant::now();
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                self.0 = None;
                return s.success();
            }
            if start.elapsed() > limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn kill(&mut self) {
        let mut child = self.0.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn now_ms() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
}

fn bulk_key(i: usize) -> String {
    format!("bulk:{i}")
}

fn bulk_value(i: usize) -> String {
    format!("{i:0>width$}", width = BULK_VALUE)
}

async fn fill_bulk(addr: SocketAddr) {
    let mut c = Raw::connect(addr).await;
    for chunk in (0..BULK_KEYS).collect::<Vec<_>>().chunks(1000) {
        let mut pipeline = Vec::new();
        for &i in chunk {
            pipeline.extend(support::encode(&[b"SET", bulk_key(i).as_bytes(), bulk_value(i).as_bytes()]));
        }
        c.send(&pipeline).await;
        for _ in chunk {
            assert_eq!(c.reply().await.unwrap(), b"+OK\r\n");
        }
    }
}

async fn check_bulk(addr: SocketAddr) {
    let mut c = Raw::connect(addr).await;
    for chunk in (0..BULK_KEYS).collect::<Vec<_>>().chunks(1000) {
        let mut pipeline = Vec::new();
        for &i in chunk {
            pipeline.extend(support::encode(&[b"GET", bulk_key(i).as_bytes()]));
        }
        c.send(&pipeline).await;
        for &i in chunk {
            assert_eq!(c.reply().await.unwrap(), support::bulk(&bulk_value(i)), "{}", bulk_key(i));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_3_5_2_4_keep_every_write_and_show_no_errors() {
    let mut bed = Bed::start(3, "1mb").await;
    let addr = bed.resp;
    workload::preload(addr).await;
    fill_bulk(addr).await;
    let mut load = Workload::start(addr, 3, 2).await;

    // 3 → 5: two new nodes.
    let (a, b) = (bed.add_node().await, bed.add_node().await);
    let before = load.ops();
    assert!(bed.reshard(&[0, 1, 2, a, b]).wait_ok(Duration::from_secs(120)), "{}", bed.logs());
    assert!(load.ops() - before > 100, "clients kept working during the move");
    // 5 → 2: three nodes leave, and are stopped once they hold nothing.
    let before = load.ops();
    assert!(bed.reshard(&[0, a]).wait_ok(Duration::from_secs(120)), "{}", bed.logs());
    assert!(load.ops() - before > 100, "clients kept working during the move");
    let t = bed.topology();
    assert_eq!(t.nodes.iter().map(|n| n.id).collect::<Vec<_>>(), vec![0, a]);
    for id in [1, 2, b] {
        bed.stop_node(id);
    }
    // 2 → 4: two more new nodes.
    let (c, d) = (bed.add_node().await, bed.add_node().await);
    let before = load.ops();
    assert!(bed.reshard(&[0, a, c, d]).wait_ok(Duration::from_secs(120)), "{}", bed.logs());
    assert!(load.ops() - before > 100, "clients kept working during the move");

    load.stop().await;
    let t = bed.topology();
    assert!(t.migrations.is_empty() && t.nodes.len() == 4, "{t:?}");
    // Each node's own /metrics: the version it serves, what it pulled, what it gave away.
    for id in [0, a, c, d] {
        let page = support::http_get(bed.nodes[id as usize].metrics, "/metrics").await;
        let m = |name| support::metric_sum(&page, name);
        assert_eq!(m("shoal_node_topology_version"), t.version as f64, "node {id}");
        assert_eq!(m("shoal_node_migrations_in_progress"), 0.0);
        if id == 0 {
            assert!(m("shoal_node_slots_dropped_total") > 0.0, "node 0 gave slots away");
        } else {
            assert!(m("shoal_node_migrated_keys_total") > 0.0, "node {id} pulled keys");
            assert!(m("shoal_node_migration_duration_seconds_count") >= 1.0, "node {id}");
        }
    }
    let errors = load.errors();
    assert!(
        errors.is_empty(),
        "{} client errors, e.g. {:?}\n{}",
        errors.len(),
        &errors[..errors.len().min(5)],
        bed.logs()
    );
    check_bulk(addr).await;
    let report = load.verify(addr, BULK_KEYS, &|_, _| false).await;
    assert!(report.lost_writes.is_empty() && report.lost_incrs == 0, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_killed_mid_migration_loses_only_its_own_unsnapshotted_writes() {
    let mut bed = Bed::start(3, "300kb").await;
    let addr = bed.resp;
    workload::preload(addr).await;
    fill_bulk(addr).await;
    let mut load = Workload::start(addr, 3, 2).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Every node snapshots; writes acknowledged before this point are on disk.
    let mut admin = Raw::connect(addr).await;
    let save_started = Instant::now();
    assert_eq!(admin.cmd(&["SAVE"]).await, b"+OK\r\n");
    let before_move = bed.topology();
    // Written after the snapshot and never again: on the node that will be killed, these exist only
    // in its memory (or, for slots it is about to give away, on the receiver once pulled).
    let mut pipeline = Vec::new();
    for i in 0..RISK_KEYS {
        pipeline.extend(support::encode(&[b"SET", format!("risk:{i}").as_bytes(), b"r"]));
    }
    admin.send(&pipeline).await;
    for _ in 0..RISK_KEYS {
        assert_eq!(admin.reply().await.unwrap(), b"+OK\r\n");
    }

    let new = bed.add_node().await;
    let mut coordinator = bed.reshard(&[0, 1, 2, new]);
    let progress = bed.wait_mid_migration().await;
    let moving = bed.topology();
    let sender = moving.migrations[0].from;
    let killed_at = Instant::now();
    bed.kill_node(sender);
    eprintln!("killed node {sender} mid-migration:\n{progress}");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    bed.run_node(sender).await;
    let back_at = Instant::now();
    assert!(
        coordinator.wait_ok(Duration::from_secs(120)),
        "the move completes after the restart\n{}",
        bed.logs()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    load.stop().await;

    // Errors only while the node was down (and until the router reconnected), and only ones that
    // say the node is unavailable.
    let errors = load.errors();
    for (at, e) in &errors {
        assert!(
            *at >= killed_at && *at <= back_at + Duration::from_secs(3),
            "an error outside the outage ({:?} after the kill, restarted after {:?}): {e}\n{}",
            at.saturating_duration_since(killed_at),
            back_at - killed_at,
            bed.logs()
        );
        assert!(e.contains("unavailable") || e.contains("timed out"), "{e}");
    }
    eprintln!("{} client errors while node {sender} was down", errors.len());

    // At risk: writes acknowledged after the snapshot started, to keys the killed node owned.
    let risk = |key: &str, sent: Instant| {
        let slot = shoal_wire::key_slot(key.as_bytes());
        sent >= save_started && sent <= killed_at && before_move.owner_of(slot) == Some(sender)
    };
    check_bulk(addr).await;
    // The one-off writes: those the killed node held only in memory are gone (all of them in the
    // slots it kept, those not yet pulled in the slots it gave away); all others survive.
    let (mut kept, mut lost_kept, mut lost_moved, mut pulled) = (0, 0, 0, 0);
    for i in 0..RISK_KEYS {
        let key = format!("risk:{i}");
        let slot = shoal_wire::key_slot(key.as_bytes());
        let got = admin.cmd(&["GET", &key]).await;
        let survived = got == support::bulk("r");
        assert!(survived || got == b"$-1\r\n", "{key}: {}", String::from_utf8_lossy(&got));
        match (before_move.owner_of(slot) == Some(sender), moving.migration_of(slot).is_some()) {
            (false, _) => assert!(survived, "{key} was on a node that kept running"),
            (true, false) if survived => panic!("{key} was only in the killed node's memory, yet survived"),
            (true, false) => lost_kept += 1,
            (true, true) if survived => pulled += 1,
            (true, true) => lost_moved += 1,
        }
        kept += usize::from(survived);
    }
    assert!(lost_kept > 0, "the kill lost the killed node's unsnapshotted writes, as it must");
    eprintln!(
        "one-off writes after the snapshot: {kept}/{RISK_KEYS} survived; lost on node {sender}: {lost_kept} in \
         slots it kept, {lost_moved} in slots it was giving away (and {pulled} of those survived on the receiver)"
    );
    let report = load.verify(addr, BULK_KEYS + kept, &risk).await;
    eprintln!(
        "workload writes lost after SIGKILL of node {sender}: {} keys' last writes {:?}, {} INCRs; all at risk \
         by the rule",
        report.lost_writes.len(),
        &report.lost_writes[..report.lost_writes.len().min(10)],
        report.lost_incrs
    );
    let t = bed.topology();
    assert!(t.migrations.is_empty() && t.nodes.len() == 4, "{t:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_mid_migration_is_resumed_without_loss() {
    let mut bed = Bed::start(3, "300kb").await;
    let addr = bed.resp;
    workload::preload(addr).await;
    fill_bulk(addr).await;
    let mut load = Workload::start(addr, 3, 2).await;

    let new = bed.add_node().await;
    let mut coordinator = bed.reshard(&[0, 1, 2, new]);
    bed.wait_mid_migration().await;
    coordinator.kill();
    let stuck = bed.topology();
    assert!(!stuck.migrations.is_empty(), "killed while the migration was published");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(bed.coordinator(&["--resume"]).wait_ok(Duration::from_secs(120)), "{}", bed.logs());
    load.stop().await;

    let t = bed.topology();
    assert!(t.migrations.is_empty() && t.nodes.len() == 4 && t.version > stuck.version, "{t:?}");
    let errors = load.errors();
    assert!(errors.is_empty(), "{} client errors, e.g. {:?}", errors.len(), &errors[..errors.len().min(5)]);
    check_bulk(addr).await;
    let report = load.verify(addr, BULK_KEYS, &|_, _| false).await;
    assert!(report.lost_writes.is_empty() && report.lost_incrs == 0, "{report:?}");
}

/// `BULK_KEYS` … as a set, for comparing listings.
fn bulk_keys() -> std::collections::BTreeSet<String> {
    (0..BULK_KEYS).map(bulk_key).collect()
}

/// Array elements of a RESP reply (one level), as strings.
fn elements(reply: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(reply);
    text.split("\r\n").filter(|l| !l.is_empty() && !l.starts_with(['*', '$'])).map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_keyspace_commands_during_and_right_after_a_move() {
    // The router's own topology file never changes: it learns of the move only from the nodes.
    let mut bed = Bed::start_with(2, "300kb", true).await;
    let addr = bed.resp;
    fill_bulk(addr).await;
    let mut c = Raw::connect(addr).await;

    let new = bed.add_node().await;
    let mut coordinator = bed.reshard(&[0, 1, new]);
    bed.wait_mid_migration().await;
    // During the move: listings cover every key (KEYS once each), nothing fails, FLUSHALL refuses.
    let keys: Vec<String> = elements(&c.cmd(&["KEYS", "*"]).await);
    assert_eq!(keys.len(), BULK_KEYS, "KEYS lists a key held by both sides once");
    assert_eq!(keys.into_iter().collect::<std::collections::BTreeSet<_>>(), bulk_keys());
    let mut scanned = std::collections::BTreeSet::new();
    let mut cursor = "0".to_string();
    loop {
        let page = elements(&c.cmd(&["SCAN", &cursor, "COUNT", "500"]).await);
        cursor = page[0].clone();
        scanned.extend(page.into_iter().skip(1));
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(scanned, bulk_keys(), "SCAN returns every key (duplicates allowed)");
    let dbsize = String::from_utf8(c.cmd(&["DBSIZE"]).await).unwrap();
    assert!(dbsize.starts_with(':'), "{dbsize}");
    let flush = String::from_utf8(c.cmd(&["FLUSHALL"]).await).unwrap();
    assert!(flush.starts_with("-ERR FLUSHALL cannot run while slots are moving"), "{flush}");
    // MSETNX over keys on every node, some in moving slots: checked, then set, through the move.
    msetnx_across_nodes(&mut c, "during").await;

    // After the move, a router that still has the first topology (two nodes): the nodes' version
    // checks make every whole-keyspace command catch up and include the new node.
    assert!(coordinator.wait_ok(Duration::from_secs(120)), "{}", bed.logs());
    assert_eq!(elements(&c.cmd(&["KEYS", "*"]).await).len(), BULK_KEYS);
    let start = Instant::now();
    while c.cmd(&["DBSIZE"]).await != format!(":{BULK_KEYS}\r\n").into_bytes() {
        assert!(start.elapsed() < Duration::from_secs(5), "DBSIZE settles once old owners reclaim");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check_bulk(addr).await;
    // The router's routing is still the first one (two nodes): a cross-node MSETNX's per-node
    // steps are refused as `moved` and routed again, never answered with an error.
    msetnx_across_nodes(&mut c, "after").await;
    assert_eq!(c.cmd(&["FLUSHALL"]).await, b"+OK\r\n");
    assert_eq!(c.cmd(&["DBSIZE"]).await, b":0\r\n");
    assert_eq!(c.cmd(&["GET", &bulk_key(7)]).await, b"$-1\r\n", "flushed on every node, the new one too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msetnx_through_a_router_that_missed_a_whole_move() {
    // The router's own topology file never changes, and no client traffic tells it of the move:
    // its first command after the move routes by the topology from before it.
    let mut bed = Bed::start_with(2, "0", true).await;
    let mut c = Raw::connect(bed.resp).await;
    let new = bed.add_node().await;
    assert!(bed.reshard(&[0, 1, new]).wait_ok(Duration::from_secs(60)), "{}", bed.logs());
    msetnx_across_nodes(&mut c, "stale").await;
}

/// MSETNX of 40 fresh keys (spread over every node) answers 1 and sets them all; again, 0.
async fn msetnx_across_nodes(c: &mut Raw, tag: &str) {
    let keys: Vec<String> = (0..40).map(|i| format!("msetnx:{tag}:{i}")).collect();
    let mut args = vec!["MSETNX"];
    for k in &keys {
        args.push(k);
        args.push(k);
    }
    assert_eq!(c.cmd(&args).await, b":1\r\n", "MSETNX {tag} the move");
    assert_eq!(c.cmd(&args).await, b":0\r\n", "a second MSETNX finds the keys");
    for k in &keys {
        assert_eq!(c.cmd(&["GET", k]).await, support::bulk(k));
        assert_eq!(c.cmd(&["DEL", k]).await, b":1\r\n");
    }
}
