//! Snapshots through the whole system: warm restarts, SIGTERM under load, bake, and the admin
//! commands (SAVE, BGSAVE, LASTSAVE, SHOAL SNAPSHOT, INFO persistence).

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use support::{Proc, Raw};

fn info_field(info: &[u8], field: &str) -> String {
    let text = String::from_utf8_lossy(info);
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")).map(|v| v.trim().to_string()))
        .unwrap_or_else(|| panic!("no {field} in {text}"))
}

/// Waits (10 s at most) until INFO says no background save is running.
async fn wait_for_no_bgsave(c: &mut Raw) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_field(&c.cmd(&["INFO", "persistence"]).await, "rdb_bgsave_in_progress") != "0" {
        assert!(Instant::now() < deadline, "BGSAVE still running after 10 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_cluster_restarts_warm() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap().to_string();
    let router = support::router(&["--embedded-nodes", "3", "--data-dir", &d]).await;
    let mut c = Raw::connect(router.resp_addr()).await;
    for i in 0..300 {
        assert_eq!(c.cmd(&["SET", &format!("k{i}"), &format!("v{i}")]).await, b"+OK\r\n");
    }
    c.cmd(&["SET", "ttl", "x", "EX", "1000"]).await;
    let ttl_set = Instant::now();
    c.cmd(&["DEL", "k7"]).await;
    let info = c.cmd(&["INFO", "persistence"]).await;
    assert_eq!(info_field(&info, "rdb_changes_since_last_save"), "302", "one per write that changed a key");
    assert_eq!(c.cmd(&["BGSAVE"]).await, b"+Background saving started\r\n");
    let states = router.node_states().await;
    support::wait_until(Duration::from_secs(10), || {
        states.iter().all(|n| n.persistence.info().snapshots_written >= 1)
    })
    .await;
    // The router clears its in-progress mark a moment after the last node has written (CI once
    // saw the first BGSAVE below refused): each round starts once INFO says no save runs.
    wait_for_no_bgsave(&mut c).await;
    // Pipelined BGSAVE, INFO, BGSAVE (redis-py's test_bgsave): whenever the second BGSAVE is
    // refused as already running, the INFO between them said a save was in progress.
    let mut refused = 0;
    for _ in 0..30 {
        let mut pipeline = support::encode(&[b"BGSAVE"]);
        pipeline.extend(support::encode(&[b"INFO", b"persistence"]));
        pipeline.extend(support::encode(&[b"BGSAVE", b"SCHEDULE"]));
        c.send(&pipeline).await;
        let (first, info, second) =
            (c.reply().await.unwrap(), c.reply().await.unwrap(), c.reply().await.unwrap());
        assert_eq!(first, b"+Background saving started\r\n");
        if second.starts_with(b"-ERR Background save already in progress") {
            refused += 1;
            assert_eq!(info_field(&info, "rdb_bgsave_in_progress"), "1", "INFO said no save was running");
        }
        wait_for_no_bgsave(&mut c).await;
    }
    assert!(refused > 0, "no BGSAVE was refused while another ran: the check above checked nothing");
    assert_eq!(c.cmd(&["SAVE"]).await, b"+OK\r\n");
    let report = String::from_utf8(c.cmd(&["SHOAL", "SNAPSHOT"]).await).unwrap();
    assert_eq!(report.matches("ok=yes").count(), 3, "{report}");
    let lastsave: i64 = String::from_utf8_lossy(&c.cmd(&["LASTSAVE"]).await)[1..].trim().parse().unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    assert!((now - 60..=now).contains(&lastsave), "{lastsave} vs {now}");
    let info = c.cmd(&["INFO", "persistence"]).await;
    assert_eq!(info_field(&info, "rdb_last_bgsave_status"), "ok");
    assert_eq!(info_field(&info, "rdb_changes_since_last_save"), "0", "all in the snapshot");
    assert!(info_field(&info, "rdb_saves").parse::<u64>().unwrap() >= 9);
    let metrics = support::http_get(router.http_addr(), "/metrics").await;
    for series in
        ["shoal_node_snapshots_written_total{node=\"2\"}", "shoal_node_snapshot_last_bytes{node=\"0\"}"]
    {
        assert!(metrics.contains(series), "missing {series} in {metrics}");
    }
    c.cmd(&["SET", "after-save", "kept by the shutdown snapshot"]).await;
    drop(c);
    router.shutdown().await;
    // Each node's newest file (its shutdown snapshot) holds its share: 301 in all. (CI once saw
    // DBSIZE 202 after the restart below; these figures tell a short write from a short load.)
    let written: Vec<(u64, String)> = states
        .iter()
        .map(|n| {
            let i = n.persistence.info();
            (i.last_entries, i.last_file)
        })
        .collect();
    assert_eq!(written.iter().map(|w| w.0).sum::<u64>(), 301, "the shutdown snapshots: {written:?}");

    let router = support::router(&["--embedded-nodes", "3", "--data-dir", &d]).await;
    let mut c = Raw::connect(router.resp_addr()).await;
    let states = router.node_states().await;
    let loaded: Vec<String> = states
        .iter()
        .enumerate()
        .map(|(pos, n)| {
            let i = n.persistence.info();
            format!(
                "node {pos}: loaded {} entries of {}, len {}, dropped slots {}, problem {:?}",
                i.loaded_entries,
                i.loaded_file,
                n.store.len(),
                n.store.dropped_slots().len(),
                i.last_error
            )
        })
        .collect();
    assert_eq!(c.cmd(&["DBSIZE"]).await, b":301\r\n", "wrote {written:?}; after the restart {loaded:?}");
    assert_eq!(c.cmd(&["GET", "k42"]).await, b"$3\r\nv42\r\n");
    assert_eq!(c.cmd(&["GET", "k7"]).await, b"$-1\r\n", "deleted stays deleted");
    assert_eq!(c.cmd(&["GET", "after-save"]).await, b"$29\r\nkept by the shutdown snapshot\r\n");
    let ttl: i64 = String::from_utf8_lossy(&c.cmd(&["TTL", "ttl"]).await)[1..].trim().parse().unwrap();
    // An absolute expiry: what is left is 1000 s less the time since the SET (the test's own
    // pace, ~10 s in a debug build and more on a busy machine), never reset by the restart.
    let since = ttl_set.elapsed().as_secs() as i64;
    assert!((999 - since..=1000 - since).contains(&ttl), "TTL survives: {ttl} after {since} s");
    let info = c.cmd(&["INFO", "persistence"]).await;
    assert_eq!(info_field(&info, "shoal_snapshot_loaded_entries"), "301");
    router.shutdown().await;

    // Without a data directory, saving is refused with a clear error.
    let router = support::cluster().await;
    let mut c = Raw::connect(router.resp_addr()).await;
    let err = String::from_utf8(c.cmd(&["SAVE"]).await).unwrap();
    assert!(err.starts_with("-ERR node 0") && err.contains("no --data-dir"), "{err}");
    router.shutdown().await;
}

fn start_node(addr: &str, dir: &std::path::Path) -> Child {
    support::shoal("shoal-node")
        .args(["--listen", addr, "--data-dir", dir.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_and_restart_under_write_load_loses_no_acknowledged_write() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let addrs: Vec<String> = (0..3).map(|_| format!("127.0.0.1:{}", support::free_port())).collect();
    let mut nodes: Vec<Proc> = addrs.iter().zip(&dirs).map(|(a, d)| Proc(start_node(a, d.path()))).collect();
    let router = support::router(&["--nodes", &addrs.join(","), "--deadline-ms", "500"]).await;

    // Writers: unique keys, values recorded only once acknowledged.
    let acked: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4 {
        let (acked, stop, addr): (_, _, SocketAddr) = (acked.clone(), stop.clone(), router.resp_addr());
        writers.push(tokio::spawn(async move {
            let mut c = Raw::connect(addr).await;
            let mut errors = 0;
            for i in 0..20_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let (k, v) = (format!("w{w}:{i}"), format!("value-{w}-{i}"));
                match c.cmd(&["SET", &k, &v]).await.as_slice() {
                    b"+OK\r\n" => {
                        acked.lock().insert(k, v);
                    }
                    _ => errors += 1,
                }
            }
            errors
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while acked.lock().len() < 2_000 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // SIGTERM node 1 mid-load: it answers what it has, snapshots, exits 0; then it comes back.
    let pid = nodes[1].0.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status = tokio::task::block_in_place(|| nodes[1].0.wait()).unwrap();
    assert!(status.success(), "node exits 0 after its final snapshot: {status:?}");
    let during = acked.lock().len();
    nodes[1] = Proc(start_node(&addrs[1], dirs[1].path()));
    support::wait_until(Duration::from_secs(15), || router.state.backend.all_up()).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while acked.lock().len() < during + 1_000 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut errors = 0;
    for w in writers {
        errors += w.await.unwrap();
    }

    let acked = acked.lock().clone();
    assert!(acked.len() > during, "writes continued after the restart");
    let mut c = Raw::connect(router.resp_addr()).await;
    let mut lost = Vec::new();
    for (k, v) in &acked {
        let got = c.cmd(&["GET", k]).await;
        if got != format!("${}\r\n{v}\r\n", v.len()).into_bytes() {
            lost.push(k.clone());
        }
    }
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes lost, e.g. {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(5)]
    );
    eprintln!(
        "{} acknowledged writes all present; {errors} writes refused while node 1 was down",
        acked.len()
    );
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baked_csv_is_served_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("data.csv");
    std::fs::write(
        &csv,
        "key,value,ttl_seconds\nplain,hello,\n\"comma,key\",\"a,b,c\",\nquoted,\"she said \"\"hi\"\"\",\nmulti,\"line 1\nline 2\",\nshort,gone soon,100\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let out = support::shoal("shoal-node")
        .args(["bake", csv.to_str().unwrap(), "-o", &format!("{}/", data.display())])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("5 entries from 5 records"), "{stderr}");

    let addr = format!("127.0.0.1:{}", support::free_port());
    let _node = Proc(start_node(&addr, &data));
    let router = support::router(&["--nodes", &addr]).await;
    let mut c = Raw::connect(router.resp_addr()).await;
    assert_eq!(c.cmd(&["GET", "plain"]).await, b"$5\r\nhello\r\n");
    assert_eq!(c.cmd(&["GET", "comma,key"]).await, b"$5\r\na,b,c\r\n");
    assert_eq!(c.cmd(&["GET", "quoted"]).await, b"$13\r\nshe said \"hi\"\r\n");
    assert_eq!(c.cmd(&["GET", "multi"]).await, b"$13\r\nline 1\nline 2\r\n");
    let ttl: i64 = String::from_utf8_lossy(&c.cmd(&["TTL", "short"]).await)[1..].trim().parse().unwrap();
    assert!((95..=100).contains(&ttl), "{ttl}");
    assert_eq!(c.cmd(&["DBSIZE"]).await, b":5\r\n");

    // A bad row is reported with its line number and nothing is written.
    std::fs::write(&csv, "a,1\nb,2\nc,3,not-a-number\n").unwrap();
    let out = support::shoal("shoal-node")
        .args(["bake", csv.to_str().unwrap(), "-o", dir.path().join("other/").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("data.csv:3: ttl must be a positive integer"), "{stderr}");
    router.shutdown().await;
}
