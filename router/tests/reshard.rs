//! Online resharding through the embedded cluster (SHOAL SCALE): data moves while clients keep
//! reading and writing, and they never see an error or lose a write. (`reshard_processes.rs` does
//! the same with separate node processes, the `shoal-router reshard` coordinator, and crashes.)

mod support;

use std::time::{Duration, Instant};

use support::Raw;
use support::workload::{self, Workload};

/// Waits until the cluster has `n` nodes, no migration in flight and no scaling running.
async fn wait_scaled(c: &mut Raw, n: usize) -> String {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_3_5_2_4_keeps_every_write_and_shows_no_errors() {
    let router = support::router(&["--embedded-nodes", "3", "--deadline-ms", "2000"]).await;
    let addr = router.resp_addr;
    let mut admin = Raw::connect(addr).await;
    workload::preload(addr).await;
    let mut load = Workload::start(addr, 3, 2).await;

    for n in [5, 2, 4] {
        let before = load.ops();
        assert_eq!(admin.cmd(&["SHOAL", "SCALE", &n.to_string()]).await, b"+OK\r\n");
        let topology = wait_scaled(&mut admin, n).await;
        let during = load.ops() - before;
        eprintln!("scaled to {n} with {during} client ops during the move:\n{topology}");
        assert!(during > 50, "clients kept working during the move");
        assert_eq!(router.node_states().await.len(), n, "nodes that left were stopped");
    }
    load.stop().await;

    // The moves show in the router's metrics, and in the nodes' (as the router reports them).
    let page = support::http_get(router.http_addr, "/metrics").await;
    let m = |name| support::metric_sum(&page, name);
    assert!(m("shoal_router_topology_changes_total") >= 6.0, "two versions per step");
    assert_eq!(m("shoal_router_migrations"), 0.0);
    assert!(m("shoal_router_fallback_reads_total") + m("shoal_router_keys_copied_total") > 0.0);
    assert!(m("shoal_node_migrated_keys_total") > 0.0 && m("shoal_node_migrated_bytes_total") > 0.0);
    assert!(m("shoal_node_migrated_slots_total") >= 16384.0 * 0.4, "3→5 alone moves 2/5 of the slots");
    let version = m("shoal_router_topology_version");
    assert_eq!(m("shoal_node_topology_version"), 4.0 * version, "every node serves the router's version");
    let errors = load.errors();
    assert!(errors.is_empty(), "{} client errors, e.g. {:?}", errors.len(), &errors[..errors.len().min(5)]);
    let report = load.verify(addr, 0, &|_, _| false).await;
    assert!(report.lost_writes.is_empty() && report.lost_incrs == 0, "{report:?}");
    assert!(report.keys_checked > 500, "{report:?}");
    router.shutdown().await;
}
