//! Router readiness means "this router can serve" (listening, topology known), not "every node is
//! up": `/readyz` is the router Deployment's readiness probe, and one node pod restarting must not
//! take every router out of the Service. Per-node health stays visible in `SHOAL NODES` and
//! `shoal_router_node_up`.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use shoal_wire::Topology;
use support::procs::{NodeProc, RouterProc, status};

/// `shoal_router_node_up` per node id, from a /metrics page.
fn node_up(page: &str) -> Vec<(u32, f64)> {
    page.lines()
        .filter_map(|l| l.strip_prefix("shoal_router_node_up{node=\""))
        .filter_map(|rest| {
            let (id, rest) = rest.split_once('"')?;
            Some((id.parse().ok()?, rest.rsplit(' ').next()?.parse().ok()?))
        })
        .collect()
}

async fn metrics(http: SocketAddr) -> String {
    let page = support::http_get(http, "/metrics").await;
    assert_eq!(status(&page), 200, "{page}");
    page
}

/// Polls /metrics until `shoal_router_node_up` is `want` for every node (at most 15 s).
async fn wait_node_up(http: SocketAddr, want: &[f64]) {
    let start = Instant::now();
    loop {
        let up = node_up(&metrics(http).await);
        if up.iter().map(|&(_, v)| v).collect::<Vec<_>>() == want {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "node_up {up:?}, want {want:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_leaves_the_router_ready_and_its_other_keys_served() {
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, list) = NodeProc::start_many(dir.path(), 3).await;
    let addrs: Vec<String> = nodes.iter().map(|n| n.addr.clone()).collect();
    let router = RouterProc::start(dir.path(), "router", &["--nodes", &list, "--deadline-ms", "2000"]).await;
    wait_node_up(router.http, &[1.0, 1.0, 1.0]).await;

    // One key per node, as the router routes them (--nodes: an even split in list order).
    let topology = Topology::even(&addrs);
    let key_on = |id: u32| {
        (0..)
            .map(|i| format!("k{i}"))
            .find(|k| topology.owner_of(shoal_wire::slot::key_slot(k.as_bytes())) == Some(id))
            .unwrap()
    };
    let keys = [key_on(0), key_on(1), key_on(2)];
    let mut c = router.raw().await;
    for k in &keys {
        assert_eq!(c.cmd(&["SET", k, "v"]).await, b"+OK\r\n");
    }
    assert_eq!(status(&support::http_get(router.http, "/readyz").await), 200);

    nodes[1].kill();
    wait_node_up(router.http, &[1.0, 0.0, 1.0]).await;

    // Still ready, and stays ready while the node is gone.
    for _ in 0..10 {
        let ready = support::http_get(router.http, "/readyz").await;
        assert_eq!(status(&ready), 200, "a router with one node down can still serve: {ready}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(c.cmd(&["GET", &keys[0]]).await, b"$1\r\nv\r\n", "node 0's keys still answer");
    assert_eq!(c.cmd(&["GET", &keys[2]]).await, b"$1\r\nv\r\n", "node 2's keys still answer");
    let started = Instant::now();
    let err = String::from_utf8(c.cmd(&["GET", &keys[1]]).await).unwrap();
    assert!(err.starts_with(&format!("-ERR node 1 ({}) is unavailable", addrs[1])), "{err}");
    assert!(started.elapsed() < Duration::from_millis(1000), "fails fast, well before the 2 s deadline");

    let nodes_text = String::from_utf8(c.cmd(&["SHOAL", "NODES"]).await).unwrap();
    for (id, reachable) in [(0, "yes"), (1, "no"), (2, "yes")] {
        let line = nodes_text.lines().find(|l| l.contains(&format!("id={id} "))).unwrap_or_default();
        assert!(line.contains(&format!("reachable={reachable}")), "node {id}: {nodes_text}");
    }
}

/// SIGTERM with `--shutdown-delay-ms` (as the operator runs router pods): the router turns
/// unready at once, so the Service stops sending it new clients, yet answers the connection it
/// has and new ones until the delay ends; only then do its connections close and it exits 0.
/// Without the delay, clients mid-conversation would see their connection closed while the
/// load balancer still sends new ones here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_router_is_unready_but_serves_through_its_shutdown_delay() {
    const DELAY: Duration = Duration::from_millis(3000);
    let dir = tempfile::tempdir().unwrap();
    let mut router =
        RouterProc::start(dir.path(), "router", &["--shutdown-delay-ms", &DELAY.as_millis().to_string()])
            .await;
    let mut c = router.raw().await;
    assert_eq!(c.cmd(&["SET", "k", "v"]).await, b"+OK\r\n");
    assert_eq!(status(&support::http_get(router.http, "/readyz").await), 200);

    let signalled = Instant::now();
    router.signal("-TERM");
    loop {
        let ready = support::http_get(router.http, "/readyz").await;
        if status(&ready) == 503 {
            break;
        }
        assert!(signalled.elapsed() < Duration::from_millis(1000), "still ready after SIGTERM: {ready}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Through most of the delay: the connection it had, and a new one, are answered.
    let mut answered = 0;
    while signalled.elapsed() < DELAY - Duration::from_millis(1000) {
        assert_eq!(c.cmd(&["GET", "k"]).await, b"$1\r\nv\r\n", "{}", router.logs());
        answered += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(answered >= 5, "{answered}");
    let mut late = router.raw().await;
    assert_eq!(late.cmd(&["GET", "k"]).await, b"$1\r\nv\r\n", "a client arriving during the delay is served");

    // Then both connections close (at a request boundary) and the process exits 0.
    // (`reply_within` also gives None at its limit: the time tells a close from a timeout.)
    assert_eq!(c.reply_within(Duration::from_secs(5)).await, None, "the connection closes after the delay");
    let closed = signalled.elapsed();
    assert!(closed >= DELAY, "closed {closed:?} after SIGTERM, before the delay ended");
    assert!(closed < DELAY + Duration::from_secs(2), "not closed {closed:?} after SIGTERM");
    assert_eq!(late.reply_within(Duration::from_secs(5)).await, None);
    let exit = router.wait_exit(Duration::from_secs(15)).await.expect("exits after the delay");
    assert!(exit.success(), "{exit:?}\n{}", router.logs());
    assert!(router.logs().contains("serving on for the shutdown delay"), "{}", router.logs());
}
