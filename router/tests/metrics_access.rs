//! The router's `/metrics`: who may read it, and what it holds.
//!
//! - It follows the API's access rule (Redis's, as on the RESP port): without a password,
//!   protected mode admits only loopback clients; with `--requirepass`, the same Bearer/Basic
//!   credentials as the API; with `--metrics-token`, exactly that Bearer token from anywhere.
//!   `/healthz` and `/readyz` stay open (they are the pod's probes).
//! - Nodes' own `shoal_node_*` series are there only for embedded nodes; separately run nodes
//!   publish them themselves, and the router's per-node link series (`shoal_router_node_*`) stay.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::procs::{NodeProc, RouterProc, body, status};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A GET from source address `src` (127.0.0.2 stands in for a remote client), with extra headers.
async fn get_from(src: &str, addr: SocketAddr, path: &str, headers: &str) -> String {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{src}:0").parse().unwrap()).unwrap();
    let mut s = socket.connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{headers}\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await.expect("answered").unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_password_metrics_answer_loopback_clients_only() {
    let dir = tempfile::tempdir().unwrap();
    let router = RouterProc::start(dir.path(), "router", &["--embedded-nodes", "1"]).await;
    let remote = get_from("127.0.0.2", router.http, "/metrics", "").await;
    assert_eq!(status(&remote), 403, "protected mode: {remote}");
    assert!(!remote.contains("shoal_router_node_up"), "nothing leaks: {remote}");
    for probe in ["/healthz", "/readyz"] {
        assert_eq!(status(&get_from("127.0.0.2", router.http, probe, "").await), 200, "{probe} is a probe");
    }
    let local = get_from("127.0.0.1", router.http, "/metrics", "").await;
    assert_eq!(status(&local), 200);
    assert!(body(&local).contains("shoal_router_node_up{node=\"0\""), "{local}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_password_metrics_need_it() {
    let dir = tempfile::tempdir().unwrap();
    let router =
        RouterProc::start(dir.path(), "router", &["--embedded-nodes", "1", "--requirepass", "s3cret"]).await;
    for (src, headers) in [
        ("127.0.0.1", ""),
        ("127.0.0.2", ""),
        ("127.0.0.1", "Authorization: Bearer wrong\r\n"),
        ("127.0.0.1", "Authorization: Basic ZGVmYXVsdDp3cm9uZw==\r\n"), // default:wrong
    ] {
        let r = get_from(src, router.http, "/metrics", headers).await;
        assert_eq!(status(&r), 401, "{src} {headers:?}: {r}");
        assert!(r.contains("www-authenticate: Basic realm=\"shoal\""), "{r}");
        assert!(!body(&r).contains("shoal_"), "no series without the password: {r}");
    }
    for (src, headers) in [
        ("127.0.0.1", "Authorization: Bearer s3cret\r\n"),
        ("127.0.0.2", "Authorization: Bearer s3cret\r\n"), // a password lifts protected mode
        ("127.0.0.2", "Authorization: Basic ZGVmYXVsdDpzM2NyZXQ=\r\n"), // default:s3cret
    ] {
        let r = get_from(src, router.http, "/metrics", headers).await;
        assert_eq!(status(&r), 200, "{src} {headers:?}: {r}");
        assert!(body(&r).contains("shoal_router_commands_total"), "{r}");
    }
    for probe in ["/healthz", "/readyz"] {
        assert_eq!(status(&get_from("127.0.0.2", router.http, probe, "").await), 200, "{probe} is a probe");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_metrics_token_a_scrape_needs_exactly_it() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--embedded-nodes", "1", "--requirepass", "s3cret", "--metrics-token", "scrape-t0ken"];
    let router = RouterProc::start(dir.path(), "router", &args).await;
    for (src, headers) in [
        ("127.0.0.1", ""),                                      // loopback alone is not enough
        ("127.0.0.1", "Authorization: Bearer s3cret\r\n"),      // nor is the password
        ("127.0.0.2", "Authorization: Bearer scrape-t0ke\r\n"), // nor a prefix of the token
        ("127.0.0.2", "Authorization: Basic ZGVmYXVsdDpzM2NyZXQ=\r\n"),
    ] {
        let r = get_from(src, router.http, "/metrics", headers).await;
        assert_eq!(status(&r), 401, "{src} {headers:?}: {r}");
        assert!(r.contains("www-authenticate: Bearer realm=\"shoal-metrics\""), "{r}");
        assert!(!body(&r).contains("shoal_"), "no series without the token: {r}");
    }
    // The token, from anywhere (Prometheus scrapes from another pod).
    let r = get_from("127.0.0.2", router.http, "/metrics", "Authorization: Bearer scrape-t0ken\r\n").await;
    assert_eq!(status(&r), 200, "{r}");
    assert!(body(&r).contains("shoal_router_commands_total"), "{r}");
    // The API keeps its own rule: the password, not the token.
    let api = get_from("127.0.0.2", router.http, "/keys/k", "Authorization: Bearer scrape-t0ken\r\n").await;
    assert_eq!(status(&api), 401, "{api}");
    for probe in ["/healthz", "/readyz"] {
        assert_eq!(status(&get_from("127.0.0.2", router.http, probe, "").await), 200, "{probe} is a probe");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_series_only_for_embedded_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProc::start(dir.path(), "node", &[]).await;
    let fronting = RouterProc::start(dir.path(), "fronting", &["--nodes", &node.addr]).await;
    // Once the link is up, the page has the router's view of the node and none of its own series.
    let start = Instant::now();
    let page = loop {
        let page = support::http_get(fronting.http, "/metrics").await;
        if page.contains(&format!("shoal_router_node_up{{node=\"0\",addr=\"{}\"}} 1", node.addr)) {
            break page;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "node link not up: {page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let node_lines: Vec<&str> = body(&page).lines().filter(|l| l.contains("shoal_node_")).collect();
    assert!(node_lines.is_empty(), "a separate node publishes its own series: {node_lines:#?}");
    assert!(body(&page).contains("shoal_router_node_ops_total{node=\"0\""), "link series stay");

    let embedded = RouterProc::start(dir.path(), "embedded", &["--embedded-nodes", "2"]).await;
    let start = Instant::now();
    loop {
        let page = support::http_get(embedded.http, "/metrics").await;
        if page.contains("shoal_node_keys{node=\"0\"}") && page.contains("shoal_node_keys{node=\"1\"}") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "embedded nodes' series missing: {page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
