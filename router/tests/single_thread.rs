//! The router as a process on one thread (`--threads 1`: Tokio's current-thread scheduler, every
//! task on the main thread; the in-process tests run the multi-threaded one). Where one task
//! waits for another (a BLPOP woken by another client's push, a subscriber's message, a script
//! on the node's script thread, a write held by CLIENT PAUSE until another client lifts it) and
//! on every front end (RESP, HTTP, the fast path and its near-cache), it answers as on many
//! threads; SIGTERM stops it gracefully.

mod support;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::{FastGet, Proc, Raw};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_on_one_thread_serves_every_path_and_stops_on_sigterm() {
    let (resp, http) = (support::free_port(), support::free_port());
    let resp: SocketAddr = format!("127.0.0.1:{resp}").parse().unwrap();
    let http: SocketAddr = format!("127.0.0.1:{http}").parse().unwrap();
    let child = support::shoal("shoal-router")
        .args(["--embedded-nodes", "3", "--threads", "1", "--near-cache", "8mb"])
        .args(["--resp", &resp.to_string(), "--http", &http.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut router = Proc(child);
    let start = Instant::now();
    let mut a = loop {
        if let Ok(s) = tokio::net::TcpStream::connect(resp).await {
            let mut c = Raw::from_stream(s);
            if c.cmd(&["SET", "k", "v"]).await == b"+OK\r\n" {
                break c;
            }
        }
        assert!(start.elapsed() < Duration::from_secs(30), "the router did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut b = Raw::connect(resp).await;
    let within = Duration::from_secs(5);

    // A blocked BLPOP is woken by another connection's push.
    b.send(&support::encode(&[b"BLPOP", b"list", b"5"])).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(a.cmd(&["LPUSH", "list", "x"]).await, b":1\r\n");
    assert_eq!(b.reply_within(within).await.unwrap(), b"*2\r\n$4\r\nlist\r\n$1\r\nx\r\n");

    // A subscriber gets another connection's message.
    let mut s = Raw::connect(resp).await;
    assert_eq!(s.cmd(&["SUBSCRIBE", "ch"]).await, b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n");
    assert_eq!(a.cmd(&["PUBLISH", "ch", "hi"]).await, b":1\r\n");
    assert_eq!(s.reply_within(within).await.unwrap(), b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n");

    // A script (the node's script thread answers a task of the main thread), a transaction.
    assert_eq!(a.cmd(&["EVAL", "return redis.call('incrby', KEYS[1], 5)", "1", "n"]).await, b":5\r\n");
    assert_eq!(a.cmd(&["MULTI"]).await, b"+OK\r\n");
    assert_eq!(a.cmd(&["INCR", "n"]).await, b"+QUEUED\r\n");
    assert_eq!(a.cmd(&["GET", "n"]).await, b"+QUEUED\r\n");
    assert_eq!(a.cmd(&["EXEC"]).await, b"*2\r\n:6\r\n$1\r\n6\r\n");

    // A write held by CLIENT PAUSE goes through when another client lifts the pause.
    assert_eq!(a.cmd(&["CLIENT", "PAUSE", "20000", "WRITE"]).await, b"+OK\r\n");
    b.send(&support::encode(&[b"SET", b"p", b"1"])).await;
    assert_eq!(b.reply_within(Duration::from_millis(300)).await, None, "held while paused");
    assert_eq!(a.cmd(&["CLIENT", "UNPAUSE"]).await, b"+OK\r\n");
    assert_eq!(b.reply_within(within).await.unwrap(), b"+OK\r\n");

    // HTTP and the fast path (its second GET is a near-cache hit).
    let page = support::http_get(http, "/keys/k").await;
    assert!(page.starts_with("HTTP/1.1 200") && page.ends_with("\r\n\r\nv"), "{page}");
    let mut fast = FastGet::connect(resp).await;
    for _ in 0..2 {
        assert_eq!(fast.get(b"k").await, Ok(Some(b"v".to_vec())));
    }
    let metrics = support::http_get(http, "/metrics").await;
    assert!(support::metric_sum(&metrics, "shoal_router_near_cache_hits_total") >= 1.0, "{metrics}");

    // SIGTERM: a graceful stop (exit status 0) within the drain time.
    let pid = router.0.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let start = Instant::now();
    let status = loop {
        if let Some(status) = router.0.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "the router did not stop on SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status}");
}
