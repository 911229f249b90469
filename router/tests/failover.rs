//! Replicas and failover with real processes: four `shoal-node` processes (two shards, each a
//! primary and a replica) following a topology file, `shoal-router failover` as the one writer of
//! primaries, and a `shoal-router` process in front, under four writers.
//!
//! SIGKILL one primary under load: writes to its shard fail only during the failover window
//! (measured and printed; bounded here at 5 s, the target is 2 s with the default 1 s
//! down-after), every write acknowledged before a `WAIT 1 100` that answered 1 is read back
//! afterwards, writes to the other shard never fail, and the killed node, restarted, rejoins as
//! a replica of the new primary and catches up.

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shoal_wire::proto::StatsRequest;
use shoal_wire::{NodeInfo, Topology};
use support::{Proc, Raw};

fn log_file(root: &Path, name: &str) -> Stdio {
    Stdio::from(std::fs::File::create(root.join(format!("{name}.log"))).unwrap())
}

fn start_node(root: &Path, topology: &Path, addr: &str, name: &str) -> Proc {
    let child = Command::new(support::workspace_bin("shoal-node"))
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
        ..Default::default()
    };
    let mut c = shoal_wire::client::connect(addr, &options).await.ok()?;
    Some(c.stats(StatsRequest {}).await.ok()?.into_inner())
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_is_replaced_within_the_window_and_loses_no_replicated_write() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let topology = root.join("topology.json");
    let addr = || format!("127.0.0.1:{}", support::free_port());
    let (p0, r0, p1, r1) = (addr(), addr(), addr(), addr());
    let mut t = Topology::even(&[p0.clone(), p1.clone()]);
    t.nodes[0] = NodeInfo { id: 0, addr: p0.clone(), replicas: vec![r0.clone()] };
    t.nodes[1] = NodeInfo { id: 1, addr: p1.clone(), replicas: vec![r1.clone()] };
    std::fs::write(&topology, t.to_json()).unwrap();
    let mut nodes = vec![
        Some(start_node(&root, &topology, &p0, "p0")),
        Some(start_node(&root, &topology, &r0, "r0")),
        Some(start_node(&root, &topology, &p1, "p1")),
        Some(start_node(&root, &topology, &r1, "r1")),
    ];
    let _failover = Proc(
        Command::new(support::workspace_bin("shoal-router"))
            .args(["failover", "--topology-file", topology.to_str().unwrap(), "--down-after-ms", "1000"])
            .stdout(Stdio::null())
            .stderr(log_file(&root, "failover"))
            .spawn()
            .unwrap(),
    );
    let resp: SocketAddr = format!("127.0.0.1:{}", support::free_port()).parse().unwrap();
    let _router = Proc(
        Command::new(support::workspace_bin("shoal-router"))
            .args(["--topology-file", topology.to_str().unwrap(), "--resp", &resp.to_string()])
            .args(["--http", &format!("127.0.0.1:{}", support::free_port()), "--deadline-ms", "2000"])
            .stdout(Stdio::null())
            .stderr(log_file(&root, "router"))
            .spawn()
            .unwrap(),
    );

    // The new primaries start fenced; the failover writer confirms them (no replica holds more),
    // then the replicas sync.
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
    let seen: Vec<Arc<Mutex<Seen>>> = (0..4).map(|_| Arc::default()).collect();
    let writers: Vec<_> = seen
        .iter()
        .enumerate()
        .map(|(w, seen)| {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut c = Raw::connect(resp).await;
                for i in 0..200_000u64 {
                    if Instant::now() >= stop_at {
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
                    if i % 8 == 7 && c.cmd(&["WAIT", "1", "100"]).await == b":1\r\n" {
                        seen.lock().unwrap().durable = acked;
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let killed_at = Instant::now();
    {
        let mut p = nodes[0].take().unwrap();
        p.0.kill().unwrap();
        p.0.wait().unwrap();
    }
    for w in writers {
        w.await.unwrap();
    }

    // Errors only after the kill, within the window.
    let errors: Vec<(Instant, String)> = seen.iter().flat_map(|s| s.lock().unwrap().errors.clone()).collect();
    assert!(errors.iter().all(|(at, _)| *at >= killed_at), "an error before the kill: {errors:?}");
    let window = errors.iter().map(|(at, _)| *at - killed_at).max().unwrap_or_default();
    eprintln!("failover window: {} ms, {} failed writes", window.as_millis(), errors.len());
    assert!(window <= Duration::from_secs(5), "writes failed for {} ms", window.as_millis());
    let after = read_topology(&topology);
    assert_eq!(after.nodes[0].addr, r0, "the replica was promoted");
    assert_eq!(after.nodes[0].replicas, vec![p0.clone()], "the old primary is listed as a replica");

    // Every write acknowledged before a WAIT that answered 1 is there; report the others.
    let mut c = Raw::connect(resp).await;
    let (mut checked, mut unreplicated_lost) = (0, 0);
    for s in &seen {
        let (durable, acked) = {
            let s = s.lock().unwrap();
            (s.durable, s.acked.clone())
        };
        assert!(durable > 0, "a writer saw WAIT answer 1");
        for (n, (key, value)) in acked.iter().enumerate() {
            let got = c.cmd(&["GET", key]).await;
            let want = format!("${}\r\n{value}\r\n", value.len()).into_bytes();
            if n < durable {
                assert_eq!(got, want, "{key} was replicated (WAIT answered 1) and must survive");
                checked += 1;
            } else if got != want {
                unreplicated_lost += 1;
            }
        }
    }
    eprintln!("{checked} replicated writes read back; {unreplicated_lost} later, unreplicated writes lost");

    // The killed node comes back as a replica of the new primary and catches up.
    nodes[0] = Some(start_node(&root, &topology, &p0, "p0-again"));
    c.cmd(&["SET", "{a}after", "1"]).await;
    let start = Instant::now();
    loop {
        let (old, new) = (stats(&p0).await, stats(&r0).await);
        if let (Some(old), Some(new)) = (old, new)
            && old.role == "slave"
            && old.synced
            && old.primary_addr == r0
            && old.repl_offset == new.repl_offset
            && old.keys == new.keys
        {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "the old primary did not catch up as a replica");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(nodes);
}
