//! Limits on unauthenticated and slow clients, on router processes over real sockets:
//!
//! - a RESP client that must authenticate and does not within `--auth-timeout-ms` is told so and
//!   disconnected (only when a password is required); authenticated clients are unaffected;
//! - an HTTP body that does not arrive within `--http-body-timeout-ms` (one that never ends, or
//!   one that trickles) gets 408 and its connection is closed; other requests are unaffected;
//! - `--request-buffer-budget` caps the request bytes the whole process buffers (HTTP bodies,
//!   RESP buffers past a small allowance, transactions' queued commands): a client that cannot
//!   get budget gets an error (HTTP 503, RESP -ERR and a close; a queued command -ERR and then
//!   EXECABORT), clients within it keep working, and the budget comes back.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::procs::{RouterProc, body, status};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads until the router closes the connection (at most `limit`); `None` if it is still open.
async fn read_until_close(s: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    match tokio::time::timeout(limit, s.read_to_end(&mut out)).await {
        Ok(_) => Some(out),
        Err(_) => None,
    }
}

/// One series' value from a /metrics page (first sample).
fn metric(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{page}"))
}

async fn metrics(http: SocketAddr, password: Option<&str>) -> String {
    let auth = password.map(|p| format!("Authorization: Bearer {p}\r\n")).unwrap_or_default();
    let page = support::http_raw(
        http,
        format!("GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{auth}\r\n").as_bytes(),
    )
    .await;
    assert_eq!(status(&page), 200, "{page}");
    page
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_do_not_authenticate_in_time_are_disconnected() {
    let dir = tempfile::tempdir().unwrap();
    let router = RouterProc::start(
        dir.path(),
        "router",
        &["--embedded-nodes", "1", "--requirepass", "pw", "--auth-timeout-ms", "600"],
    )
    .await;
    let mut authed = router.raw().await;
    assert_eq!(authed.cmd(&["AUTH", "pw"]).await, b"+OK\r\n");

    // 200 clients hold a partial AUTH, one sends nothing, one keeps sending commands that need
    // authentication.
    let started = Instant::now();
    let mut holders = Vec::new();
    for _ in 0..200 {
        let mut s = TcpStream::connect(router.resp).await.unwrap();
        s.write_all(b"*2\r\n$4\r\nAUTH\r\n$2\r\np").await.unwrap();
        holders.push(s);
    }
    holders.push(TcpStream::connect(router.resp).await.unwrap());
    let mut busy = router.raw().await;
    for _ in 0..3 {
        assert_eq!(busy.cmd(&["GET", "k"]).await, b"-NOAUTH Authentication required.\r\n");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for (i, s) in holders.iter_mut().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        let got = read_until_close(s, left).await;
        let got = got.unwrap_or_else(|| panic!("client {i} still connected 10 s after the timeout"));
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("-ERR authentication timeout"), "client {i}: {text}");
    }
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(550), "not before the timeout: {waited:?}");
    let rest = read_until_close(&mut busy.stream, Duration::from_secs(5)).await;
    let rest = rest.expect("sending commands does not extend the time to authenticate");
    assert!(String::from_utf8_lossy(&rest).starts_with("-ERR authentication timeout"));

    // The authenticated client is unaffected, long after the timeout.
    assert_eq!(authed.cmd(&["SET", "k", "v"]).await, b"+OK\r\n");
    // (A client sees its connection closed a moment before the router's count of clients drops.)
    let settled = Instant::now() + Duration::from_secs(5);
    let page = loop {
        let page = metrics(router.http, Some("pw")).await;
        if metric(&page, "shoal_router_connected_clients") == 1.0 || Instant::now() > settled {
            break page;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(metric(&page, "shoal_router_auth_timeouts_total"), 202.0);
    assert_eq!(metric(&page, "shoal_router_connected_clients"), 1.0, "only the authenticated client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthenticated_client_that_does_not_read_its_replies_is_disconnected_too() {
    let dir = tempfile::tempdir().unwrap();
    let router = RouterProc::start(
        dir.path(),
        "router",
        &["--embedded-nodes", "1", "--requirepass", "pw", "--auth-timeout-ms", "600"],
    )
    .await;
    // A pipeline of PINGs whose -NOAUTH replies (far more than the socket buffers hold) are never
    // read: the router ends up blocked writing to it, not waiting for a request.
    let s = TcpStream::connect(router.resp).await.unwrap();
    let (_reader, mut writer) = s.into_split();
    let pings = b"*1\r\n$4\r\nPING\r\n".repeat(600_000);
    let flood = tokio::spawn(async move {
        let _ = writer.write_all(&pings).await;
        writer
    });
    let start = Instant::now();
    loop {
        let page = metrics(router.http, Some("pw")).await;
        let connected = metric(&page, "shoal_router_connected_clients");
        if metric(&page, "shoal_router_auth_timeouts_total") == 1.0 && connected == 0.0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "a client that never authenticates and never reads is still connected ({connected})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(start.elapsed() >= Duration::from_millis(300), "not before the timeout");
    flood.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_auth_timeout_applies_only_when_a_password_is_required() {
    let dir = tempfile::tempdir().unwrap();
    let router =
        RouterProc::start(dir.path(), "router", &["--embedded-nodes", "1", "--auth-timeout-ms", "200"]).await;
    let mut idle = router.raw().await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(idle.cmd(&["PING"]).await, b"+PONG\r\n", "no password: nothing to wait for");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_bodies_must_arrive_within_the_body_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let router =
        RouterProc::start(dir.path(), "router", &["--embedded-nodes", "1", "--http-body-timeout-ms", "700"])
            .await;
    // A chunked body that never ends, and one that trickles a byte every 100 ms.
    let started = Instant::now();
    let mut endless = TcpStream::connect(router.http).await.unwrap();
    endless
        .write_all(
            b"PUT /keys/endless HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
        )
        .await
        .unwrap();
    let mut trickle = TcpStream::connect(router.http).await.unwrap();
    trickle.write_all(b"PUT /keys/trickle HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n").await.unwrap();
    let dripping = tokio::spawn(async move {
        for _ in 0..100 {
            if trickle.write_all(b"x").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        trickle
    });
    // Meanwhile other requests are served.
    let put = support::http_raw(
        router.http,
        b"PUT /keys/fine HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
    )
    .await;
    assert_eq!(status(&put), 200, "{put}");

    let got = read_until_close(&mut endless, Duration::from_secs(10)).await.expect("closed within 10 s");
    let text = String::from_utf8_lossy(&got);
    assert_eq!(status(&text), 408, "{text}");
    assert!(body(&text).contains("did not arrive within 700 ms"), "{text}");
    assert!(started.elapsed() >= Duration::from_millis(650));
    let mut trickle = dripping.await.unwrap();
    let got = read_until_close(&mut trickle, Duration::from_secs(10)).await.expect("closed within 10 s");
    assert_eq!(status(&String::from_utf8_lossy(&got)), 408, "progress does not extend the time");

    for (key, want) in [("endless", 404), ("trickle", 404), ("fine", 200)] {
        assert_eq!(status(&support::http_get(router.http, &format!("/keys/{key}")).await), want, "{key}");
    }
    assert_eq!(metric(&metrics(router.http, None).await, "shoal_router_http_body_timeouts_total"), 2.0);
}

/// `SET key <len bytes>` as RESP.
fn big_set(key: &str, len: usize) -> Vec<u8> {
    support::encode(&[b"SET", key.as_bytes(), &vec![b'v'; len]])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_buffer_budget_is_shared_by_all_clients() {
    const MIB: usize = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let router = RouterProc::start(
        dir.path(),
        "router",
        &["--embedded-nodes", "1", "--request-buffer-budget", "4mb", "--http-body-timeout-ms", "20000"],
    )
    .await;
    let page = metrics(router.http, None).await;
    assert_eq!(metric(&page, "shoal_router_request_buffer_budget_bytes"), (4 * MIB) as f64);

    // A holds most of the budget: a 3.5 MiB body, declared, of which it sends 1 MiB for now.
    let a_len = 7 * MIB / 2;
    let mut a = TcpStream::connect(router.http).await.unwrap();
    a.write_all(
        format!("PUT /keys/a HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: {a_len}\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    a.write_all(&vec![b'a'; MIB]).await.unwrap();
    let start = Instant::now();
    while metric(&metrics(router.http, None).await, "shoal_router_request_buffer_bytes") < a_len as f64 {
        assert!(start.elapsed() < Duration::from_secs(10), "A's body is not counted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // B declares 2 MiB: refused before a byte of its body is read, and closed.
    let b_head = format!("PUT /keys/b HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n", 2 * MIB);
    let mut b = TcpStream::connect(router.http).await.unwrap();
    b.write_all(b_head.as_bytes()).await.unwrap();
    let got = read_until_close(&mut b, Duration::from_secs(10)).await.expect("B answered and closed");
    let text = String::from_utf8_lossy(&got);
    assert_eq!(status(&text), 503, "{text}");
    assert!(body(&text).contains("request buffer budget exhausted"), "{text}");

    // D sends a 2 MiB SET over RESP: its read buffer cannot grow; it gets -ERR and is closed.
    let mut d = TcpStream::connect(router.resp).await.unwrap();
    let (mut d_read, mut d_write) = d.split();
    let payload = big_set("d", 2 * MIB);
    let (_, reply) = tokio::join!(d_write.write_all(&payload), async {
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), d_read.read_to_end(&mut out)).await.map(|_| out)
    });
    let reply = reply.expect("D answered and closed within 10 s");
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("-ERR request buffer budget exhausted"), "{reply}");

    // Clients within the budget are unaffected: small RESP commands and small HTTP bodies.
    let mut e = router.raw().await;
    assert_eq!(e.cmd(&["SET", "e", "small"]).await, b"+OK\r\n");
    assert_eq!(e.cmd(&["GET", "e"]).await, b"$5\r\nsmall\r\n");
    let c = support::http_raw(
        router.http,
        b"PUT /keys/c HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 5\r\n\r\nsmall",
    )
    .await;
    assert_eq!(status(&c), 200, "{c}");

    // A finishes: stored, and its budget comes back.
    a.write_all(&vec![b'a'; a_len - MIB]).await.unwrap();
    let got = read_until_close(&mut a, Duration::from_secs(10)).await.expect("A answered");
    assert_eq!(status(&String::from_utf8_lossy(&got)), 200);
    let start = Instant::now();
    while metric(&metrics(router.http, None).await, "shoal_router_request_buffer_bytes") != 0.0 {
        assert!(start.elapsed() < Duration::from_secs(10), "the budget is not given back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Now B's and D's requests fit.
    let mut b_full = b_head.replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n").into_bytes();
    b_full.extend(vec![b'b'; 2 * MIB]);
    assert_eq!(status(&support::http_raw(router.http, &b_full).await), 200);
    let mut d = router.raw().await;
    d.send(&payload).await;
    assert_eq!(d.reply().await.unwrap(), b"+OK\r\n");
    let strlen = String::from_utf8(e.cmd(&["STRLEN", "a"]).await).unwrap();
    assert_eq!(strlen, format!(":{a_len}\r\n"));
    let page = metrics(router.http, None).await;
    assert_eq!(metric(&page, "shoal_router_request_buffer_refusals_total"), 2.0);
}

/// A transaction's queued commands count against `--request-buffer-budget` too (issue 38, item
/// 7): each client's queue is bounded by its own query buffer limit, but many clients each
/// queueing up to it could together hold more than the process may buffer. A client whose queue
/// does not fit gets an error for that command and EXECABORT; the others are unaffected, and the
/// bytes come back once the transaction ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_transactions_share_the_request_buffer_budget() {
    const KIB: usize = 1 << 10;
    let dir = tempfile::tempdir().unwrap();
    let args = ["--embedded-nodes", "1", "--request-buffer-budget", "4mb"];
    let router = RouterProc::start(dir.path(), "router", &args).await;
    let value = "x".repeat(20 * KIB);
    // Queues `n` SETs of 20 KiB in `c`'s open transaction; the replies, in order.
    async fn queue(c: &mut support::Raw, n: usize, value: &str) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for i in 0..n {
            out.push(c.cmd(&["SET", &format!("k{i}"), value]).await);
        }
        out
    }
    // A queues 3 MiB: within the budget.
    let mut a = router.raw().await;
    assert_eq!(a.cmd(&["MULTI"]).await, b"+OK\r\n");
    assert!(queue(&mut a, 150, &value).await.iter().all(|r| r == b"+QUEUED\r\n"));
    // B queues 2 MiB more: past the budget, refused part of the way, and its EXEC is refused.
    let mut b = router.raw().await;
    assert_eq!(b.cmd(&["MULTI"]).await, b"+OK\r\n");
    let replies = queue(&mut b, 100, &value).await;
    let refused =
        replies.iter().filter(|r| r.starts_with(b"-ERR the transaction's queued commands exceed")).count();
    assert!(
        refused > 0 && replies[0] == b"+QUEUED\r\n",
        "{:?}",
        replies.iter().map(|r| String::from_utf8_lossy(r)).collect::<Vec<_>>()
    );
    assert!(b.cmd(&["EXEC"]).await.starts_with(b"-EXECABORT"));
    // A's transaction runs whole; afterwards nothing is held and B's fits.
    let exec = a.cmd(&["EXEC"]).await;
    assert!(exec.starts_with(b"*150\r\n+OK\r\n"), "{}", String::from_utf8_lossy(&exec[..exec.len().min(80)]));
    let start = Instant::now();
    while metric(&metrics(router.http, None).await, "shoal_router_request_buffer_bytes") != 0.0 {
        assert!(start.elapsed() < Duration::from_secs(10), "the queued bytes are not given back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(b.cmd(&["MULTI"]).await, b"+OK\r\n");
    assert!(queue(&mut b, 100, &value).await.iter().all(|r| r == b"+QUEUED\r\n"));
    assert!(b.cmd(&["EXEC"]).await.starts_with(b"*100\r\n+OK\r\n"));
}
