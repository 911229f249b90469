//! `shoal-node get` against real node processes: it reads by the topology the node serves by, and
//! tells "this node does not serve the key's slot" apart from "not found".

mod support;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use shoal_wire::proto::{GetTopologyRequest, reply};
use shoal_wire::{Topology, key_slot};
use support::{free_port, start_node};

fn get(addr: &str, key: &str) -> Output {
    Command::new(support::node_bin()).args(["get", "--node", addr, key]).output().unwrap()
}

/// The first `user:<n>` key whose slot satisfies `pred`.
fn key_where(pred: impl Fn(u16) -> bool) -> String {
    (0..).map(|n| format!("user:{n}")).find(|k| pred(key_slot(k.as_bytes()))).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_reads_by_the_nodes_topology_and_reports_unserved_slots() {
    let work = tempfile::tempdir().unwrap();
    let (addr0, addr1) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
    let mut topology = Topology::even(&[addr0.clone(), addr1.clone()]);
    topology.version = 7;
    let file = work.path().join("topology.json");
    std::fs::write(&file, topology.to_json()).unwrap();
    let node_args = ["--listen", &addr0, "--node-id", "0", "--topology-file", file.to_str().unwrap()];
    let _node0 = start_node(&node_args, &work.path().join("node0.log"));
    let mut client = support::connect(&addr0).await;
    let started = Instant::now();
    while client.get_topology(GetTopologyRequest {}).await.is_err() {
        assert!(started.elapsed() < Duration::from_secs(20), "node 0 never adopted the topology");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Written over the node's Execute stream at its version, as a router would.
    let mine = key_where(|s| topology.owner_of(s) == Some(0));
    assert_eq!(support::set(&mut client, 7, &mine, "hello").await, reply::Kind::Ok(Default::default()));

    let out = get(&addr0, &mine);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");

    // A key of the node's own slots that is not there: "not found", status 1.
    let absent = key_where(|s| topology.owner_of(s) == Some(0) && s > key_slot(mine.as_bytes()));
    let out = get(&addr0, &absent);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("{absent} not found on {addr0}")), "{stderr}");

    // A key of node 1's slots: said plainly, with a status of its own.
    let theirs = key_where(|s| topology.owner_of(s) == Some(1));
    let slot = key_slot(theirs.as_bytes());
    let out = get(&addr0, &theirs);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let want = format!(
        "{theirs}: slot {slot} is not served by node {addr0} (topology version 7, owned by node 1 at {addr1})"
    );
    assert!(stderr.contains(&want), "want {want:?} in {stderr}");
    assert!(!stderr.contains("not found"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_reads_from_a_node_without_topology() {
    let work = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let _node = start_node(&["--listen", &addr], &work.path().join("node.log"));
    let mut client = support::connect(&addr).await;
    assert_eq!(support::set(&mut client, 0, "plain", "v").await, reply::Kind::Ok(Default::default()));
    let out = get(&addr, "plain");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "v\n");
}
