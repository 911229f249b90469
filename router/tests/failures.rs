//! A node that is down or slow: its keys get a clear error within the deadline, other nodes'
//! keys are unaffected, and the router reconnects when the node comes back.

mod support;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shoal_node::server::{NodeHandle, ServeOptions};
use shoal_node::store::{Store, StoreConfig, SystemClock};
use support::{Proc, Raw};

async fn node_at(addr: SocketAddr) -> NodeHandle {
    let store = Arc::new(Store::new(StoreConfig::default(), Arc::new(SystemClock)));
    NodeHandle::start(addr, store, ServeOptions::default()).await.unwrap()
}

/// A key owned by node position `pos`.
fn key_on(router: &shoal_router::Router, pos: usize) -> String {
    let routing = router.state.backend.routing();
    (0..).map(|i| format!("k{i}")).find(|k| routing.locate(k.as_bytes()).0 == pos).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_fails_fast_and_recovers() {
    let addrs: Vec<SocketAddr> =
        (0..3).map(|_| format!("127.0.0.1:{}", support::free_port()).parse().unwrap()).collect();
    let mut nodes = Vec::new();
    for a in &addrs {
        nodes.push(Some(node_at(*a).await));
    }
    let list = addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(",");
    let router = support::router(&["--nodes", &list, "--deadline-ms", "500"]).await;
    let (k0, k1, k2) = (key_on(&router, 0), key_on(&router, 1), key_on(&router, 2));
    let mut c = Raw::connect(router.resp_addr()).await;
    for k in [&k0, &k1, &k2] {
        assert_eq!(c.cmd(&["SET", k, "v"]).await, b"+OK\r\n");
    }

    nodes[1].take().unwrap().shutdown().await.unwrap();
    support::wait_until(Duration::from_secs(5), || !router.state.backend.routing().nodes[1].is_up()).await;
    let started = Instant::now();
    let err = String::from_utf8(c.cmd(&["GET", &k1]).await).unwrap();
    assert!(started.elapsed() < Duration::from_millis(500), "answered before the deadline");
    assert!(err.starts_with(&format!("-ERR node 1 ({}) is unavailable", addrs[1])), "{err}");
    assert_eq!(c.cmd(&["GET", &k0]).await, b"$1\r\nv\r\n", "other nodes unaffected");
    assert_eq!(c.cmd(&["GET", &k2]).await, b"$1\r\nv\r\n");
    // Pipelined one-key commands travel together (one group per node): the stopped node's
    // command fails alone, its neighbours' are answered.
    let mut pipeline = Vec::new();
    for k in [&k0, &k1, &k2] {
        pipeline.extend(support::encode(&[b"GET", k.as_bytes()]));
    }
    c.send(&pipeline).await;
    assert_eq!(c.reply().await.unwrap(), b"$1\r\nv\r\n");
    let err = String::from_utf8(c.reply().await.unwrap()).unwrap();
    assert!(err.starts_with("-ERR node 1"), "{err}");
    assert_eq!(c.reply().await.unwrap(), b"$1\r\nv\r\n");
    let mget = String::from_utf8(c.cmd(&["MGET", &k0, &k1]).await).unwrap();
    assert!(
        mget.starts_with("-ERR node 1"),
        "a multi-key command touching the node fails as a whole: {mget}"
    );
    let ready = support::http_get(router.http_addr(), "/readyz").await;
    assert!(ready.starts_with("HTTP/1.1 200"), "one node down: the router can still serve: {ready}");

    // The node comes back (empty: it was stopped without persistence) and the router reconnects.
    nodes[1] = Some(node_at(addrs[1]).await);
    support::wait_until(Duration::from_secs(10), || router.state.backend.all_up()).await;
    assert_eq!(c.cmd(&["SET", &k1, "again"]).await, b"+OK\r\n");
    assert_eq!(c.cmd(&["GET", &k1]).await, b"$5\r\nagain\r\n");
    router.shutdown().await;
    for n in nodes.into_iter().flatten() {
        n.shutdown().await.unwrap();
    }
}

/// Seen on a real Kubernetes node (issue 41's eviction phase): a replica pod away for 7 s, back
/// and synced, then handed its shard by the evicted primary. The router's link to it was still
/// backing off (2 s between attempts) and every call in between failed with the error of an
/// attempt made while the pod was away. A topology that makes the node a primary
/// (`reconnect_now`) must end the backoff and let calls wait for the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_made_primary_is_reconnected_at_once_and_calls_wait_for_it() {
    use shoal_router::backend::{LinkOptions, NodeLink, NodePort};
    use shoal_wire::proto::{self, op::Kind};
    let addr: SocketAddr = format!("127.0.0.1:{}", support::free_port()).parse().unwrap();
    let node = node_at(addr).await;
    let options = LinkOptions { deadline: Duration::from_millis(1500), ..Default::default() };
    let link = NodeLink::spawn(1, addr.to_string(), &options);
    let get = || proto::Op {
        kind: Some(Kind::Get(proto::Get { key: "k".into(), ..Default::default() })),
        ..Default::default()
    };
    let call = |link: &NodeLink| link.call(get(), 0, tokio::time::Instant::now() + options.deadline).wait();
    support::wait_until(Duration::from_secs(5), || link.is_up()).await;
    assert!(call(&link).await.is_ok());

    node.shutdown().await.unwrap();
    support::wait_until(Duration::from_secs(5), || !link.is_up()).await;
    // Away long enough for the backoff to reach its longest wait (2 s between attempts).
    tokio::time::sleep(Duration::from_millis(4200)).await;
    let started = Instant::now();
    let err = call(&link).await.unwrap_err().to_string();
    assert!(started.elapsed() < Duration::from_millis(100), "a down link fails fast: {err}");
    assert!(err.starts_with(&format!("node 1 ({addr}) is unavailable")), "{err}");

    let node = node_at(addr).await;
    link.reconnect_now();
    let started = Instant::now();
    let answer = call(&link).await;
    assert!(answer.is_ok(), "the call waited for the reconnect: {answer:?}");
    assert!(started.elapsed() < Duration::from_millis(1000), "{:?}", started.elapsed());
    assert!(link.is_up());
    link.close();
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_node_times_out_within_the_deadline() {
    // A real node process, frozen with SIGSTOP: its TCP connection stays open but nothing answers.
    let port = support::free_port();
    let frozen_addr = format!("127.0.0.1:{port}");
    let child = support::shoal("shoal-node")
        .args(["--listen", &frozen_addr])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let proc = Proc(child);
    let healthy = node_at("127.0.0.1:0".parse().unwrap()).await;
    let list = format!("{},{}", healthy.addr, frozen_addr);
    let router = support::router(&["--nodes", &list, "--deadline-ms", "300"]).await;
    let (k0, k1) = (key_on(&router, 0), key_on(&router, 1));
    let mut c = Raw::connect(router.resp_addr()).await;
    assert_eq!(c.cmd(&["SET", &k1, "v"]).await, b"+OK\r\n");

    let pid = proc.0.id().to_string();
    assert!(Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    support::wait_stopped(proc.0.id()).await;
    let started = Instant::now();
    let err = String::from_utf8(c.cmd(&["GET", &k1]).await).unwrap();
    let took = started.elapsed();
    assert_eq!(err, format!("-ERR node 1 ({frozen_addr}) did not answer within 300 ms\r\n"));
    assert!(took >= Duration::from_millis(250) && took < Duration::from_millis(1000), "{took:?}");
    let mut other = Raw::connect(router.resp_addr()).await;
    let started = Instant::now();
    assert_eq!(other.cmd(&["SET", &k0, "fine"]).await, b"+OK\r\n");
    assert!(started.elapsed() < Duration::from_millis(200), "the healthy node is not held up");

    assert!(Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
    assert_eq!(c.cmd(&["GET", &k1]).await, b"$1\r\nv\r\n", "answers again once thawed");
    router.shutdown().await;
    healthy.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_sigterm_exits_zero_after_in_flight_work() {
    let port = support::free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = support::shoal("shoal-node")
        .args(["--listen", &addr])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let router = support::router(&["--nodes", &addr]).await;
    let mut c = Raw::connect(router.resp_addr()).await;
    // Keep a pipeline in flight while the node is told to stop.
    let mut pipeline = Vec::new();
    for i in 0..2000 {
        pipeline.extend(support::encode(&[b"SET", format!("t{i}").as_bytes(), b"v"]));
    }
    c.send(&pipeline).await;
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    // Every request gets an answer: OK, or the node-down error once the node has gone.
    for _ in 0..2000 {
        let reply = c.reply().await.expect("an answer to every pipelined request");
        assert!(
            reply == b"+OK\r\n" || reply.starts_with(b"-ERR node 0"),
            "{}",
            String::from_utf8_lossy(&reply)
        );
    }
    let status = tokio::task::spawn_blocking(move || child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "node exits 0 on SIGTERM: {status:?}");
    router.shutdown().await;
}

/// SIGTERM to a router with an embedded cluster: it serves the request in hand, stops its nodes
/// after its links, exits 0, and says nothing alarming on the way out (a stream that ends at
/// shutdown is not a lost node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_sigterm_with_embedded_nodes_exits_zero_quietly() {
    let (resp, http) = (support::free_port(), support::free_port());
    let mut child = support::shoal("shoal-router")
        .args(["--resp", &format!("127.0.0.1:{resp}"), "--http", &format!("127.0.0.1:{http}")])
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{resp}").parse().unwrap();
    let started = Instant::now();
    let mut c = loop {
        if let Ok(s) = tokio::net::TcpStream::connect(addr).await {
            drop(s);
            break Raw::connect(addr).await;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "router did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(c.cmd(&["SET", "k", "v"]).await, b"+OK\r\n");
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let out = tokio::task::spawn_blocking(move || {
        let status = child.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
        (status, err)
    })
    .await
    .unwrap();
    let (status, stderr) = out;
    assert!(status.success(), "router exits 0 on SIGTERM: {status:?}\n{stderr}");
    assert!(stderr.contains("router stopped"), "{stderr}");
    let alarming: Vec<&str> = stderr.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")).collect();
    assert!(alarming.is_empty(), "warnings at shutdown: {alarming:#?}");
}
