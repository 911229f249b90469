//! The HTTP API and ops endpoints over real sockets.

mod support;

use support::{http_get, http_raw};

fn request(method: &str, path: &str, body: &[u8], extra: &str) -> Vec<u8> {
    let mut r = format!(
        "{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: {}\r\n{extra}\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

fn status(resp: &str) -> u16 {
    resp.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

fn body(resp: &str) -> &str {
    resp.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mkvss_routes() {
    let router = support::cluster().await;
    let a = router.http_addr();
    let created = http_raw(a, &request("POST", "/keys", br#"{"key":"fruit","value":"apple"}"#, "")).await;
    assert_eq!(status(&created), 201, "{created}");
    let again = http_raw(a, &request("POST", "/keys", br#"{"key":"fruit","value":"pear"}"#, "")).await;
    assert_eq!(status(&again), 409, "{again}");
    let got = http_get(a, "/keys/fruit").await;
    assert_eq!((status(&got), body(&got)), (200, "apple"));
    assert!(got.contains("content-type: application/octet-stream"));
    assert_eq!(status(&http_get(a, "/keys/nothing").await), 404);

    // PUT stores raw (binary, here not UTF-8) bodies; ?ttl sets a TTL readable from /ttl.
    let put = http_raw(a, &request("PUT", "/keys/bin%2Fkey?ttl=100", b"\xff\x01raw", "")).await;
    assert_eq!(status(&put), 200, "{put}");
    let ttl = http_get(a, "/keys/bin%2Fkey/ttl").await;
    assert_eq!(body(&ttl), r#"{"key":"bin/key","ttl":100}"#);
    assert_eq!(body(&http_get(a, "/keys/fruit/ttl").await), r#"{"key":"fruit","ttl":-1}"#);
    assert_eq!(status(&http_get(a, "/keys/nothing/ttl").await), 404);
    // The same data is visible over RESP.
    let mut raw = support::Raw::connect(router.resp_addr()).await;
    assert_eq!(raw.cmd(&["GET", "bin/key"]).await, b"$5\r\n\xff\x01raw\r\n");

    let mget =
        http_raw(a, &request("POST", "/keys/_mget", br#"{"keys":["fruit","nothing","bin/key"]}"#, "")).await;
    assert_eq!(
        body(&mget),
        r#"{"values":[{"key":"fruit","value":"apple"},{"key":"nothing","value":null},{"key":"bin/key","value_base64":"/wFyYXc="}]}"#
    );

    assert_eq!(status(&http_raw(a, &request("DELETE", "/keys/fruit", b"", "")).await), 200);
    assert_eq!(status(&http_raw(a, &request("DELETE", "/keys/fruit", b"", "")).await), 404);

    // A typed value is a conflict for the string routes, with Redis's text; MGET shows it as null
    // (as Redis's MGET does), and DELETE and the TTL route work on any type.
    assert_eq!(raw.cmd(&["HSET", "session", "user", "ada"]).await, b":1\r\n");
    let typed = http_get(a, "/keys/session").await;
    assert_eq!(status(&typed), 409, "{typed}");
    assert!(
        body(&typed).contains("WRONGTYPE Operation against a key holding the wrong kind of value"),
        "{typed}"
    );
    let mget = http_raw(a, &request("POST", "/keys/_mget", br#"{"keys":["session"]}"#, "")).await;
    assert_eq!(body(&mget), r#"{"values":[{"key":"session","value":null}]}"#);
    assert_eq!(body(&http_get(a, "/keys/session/ttl").await), r#"{"key":"session","ttl":-1}"#);
    assert_eq!(status(&http_raw(a, &request("DELETE", "/keys/session", b"", "")).await), 200);
    assert_eq!(raw.cmd(&["EXISTS", "session"]).await, b":0\r\n");
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_errors() {
    let router = support::router(&["--embedded-nodes", "2", "--http-max-body", "1kb"]).await;
    let a = router.http_addr();
    let bad_json = http_raw(a, &request("POST", "/keys", b"{not json", "")).await;
    assert_eq!(status(&bad_json), 400);
    assert!(body(&bad_json).contains("expected {\\\"key\\\",\\\"value\\\"}"), "{bad_json}");
    assert_eq!(status(&http_raw(a, &request("PUT", "/keys/k?ttl=0", b"v", "")).await), 400);
    assert_eq!(status(&http_raw(a, &request("PUT", "/keys/k?ttl=x", b"v", "")).await), 400);
    assert_eq!(status(&http_raw(a, &request("PUT", "/keys/k", &[b'x'; 2000], "")).await), 413);
    assert_eq!(status(&http_get(a, "/keys/%zz").await), 400);
    assert_eq!(status(&http_get(a, "/nowhere").await), 404);
    let wrong = http_raw(a, &request("PATCH", "/keys/k", b"", "")).await;
    assert_eq!(status(&wrong), 405);
    assert!(wrong.to_ascii_lowercase().contains("allow: get, put, delete"));
    // Garbage instead of HTTP: the connection is closed with a 400, the server carries on.
    let garbage = http_raw(a, b"\x00\x01\x02 not http\r\n\r\n").await;
    assert!(garbage.is_empty() || status(&garbage) == 400, "{garbage}");
    assert_eq!(status(&http_get(a, "/healthz").await), 200);
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_endpoints_and_auth() {
    let router = support::router(&["--embedded-nodes", "3", "--requirepass", "pw"]).await;
    let a = router.http_addr();
    assert_eq!(body(&http_get(a, "/healthz").await), "ok\n");
    assert_eq!(status(&http_get(a, "/readyz").await), 200);
    assert_eq!(status(&http_get(a, "/keys/k").await), 401, "API routes need the password");
    let put = http_raw(a, &request("PUT", "/keys/k", b"v", "Authorization: Bearer pw\r\n")).await;
    assert_eq!(status(&put), 200);
    let basic =
        http_raw(a, &request("GET", "/keys/k", b"", "Authorization: Basic ZGVmYXVsdDpwdw==\r\n")).await;
    assert_eq!((status(&basic), body(&basic)), (200, "v"));
    let wrong = http_raw(a, &request("GET", "/keys/k", b"", "Authorization: Bearer nope\r\n")).await;
    assert_eq!(status(&wrong), 401);

    assert_eq!(status(&http_get(a, "/metrics").await), 401, "/metrics takes the password too");
    let metrics = http_raw(a, &request("GET", "/metrics", b"", "Authorization: Bearer pw\r\n")).await;
    assert!(metrics.contains("text/plain; version=0.0.4"));
    let text = body(&metrics);
    for series in [
        "shoal_router_commands_total",
        "shoal_router_node_up{node=\"0\"",
        "shoal_router_node_batch_ops_bucket{node=\"2\",le=\"+Inf\"}",
        "shoal_node_keys{node=\"1\"}",
        "shoal_router_topology_version 1",
    ] {
        assert!(text.contains(series), "missing {series} in\n{text}");
    }
    assert!(text.contains("shoal_router_http_requests_total"));
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_at_maxmemory_is_insufficient_storage() {
    let router = support::cluster().await;
    let a = router.http_addr();
    let mut raw = support::Raw::connect(router.resp_addr()).await;
    let value = "v".repeat(4096);
    for i in 0..16 {
        assert_eq!(raw.cmd(&["SET", &format!("fill{i}"), &value]).await, b"+OK\r\n");
    }
    assert_eq!(raw.cmd(&["CONFIG", "SET", "maxmemory", "1"]).await, b"+OK\r\n");
    // The node's OOM refusal reaches HTTP as its kind (507), with Redis's text.
    let put = http_raw(a, &request("PUT", "/keys/more", b"v", "")).await;
    assert_eq!(status(&put), 507, "{put}");
    assert!(body(&put).contains("OOM command not allowed when used memory"), "{put}");
    // Reads are not refused.
    assert_eq!(status(&http_get(a, "/keys/fill0").await), 200);
    assert_eq!(raw.cmd(&["CONFIG", "SET", "maxmemory", "0"]).await, b"+OK\r\n");
    router.shutdown().await;
}
