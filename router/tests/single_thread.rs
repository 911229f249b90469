//! The router as a process on one thread (`--threads 1`: Tokio's current-thread scheduler, every
//! task on the main thread; the in-process tests run the multi-threaded one). Where one task
//! waits for another (a BLPOP woken by another client's push, a subscriber's message, a script
//! on the node's script thread, a write held by CLIENT PAUSE until another client lifts it) and
//! on every front end (RESP, HTTP, the fast path and its near-cache), it answers as on many
//! threads; SIGTERM stops it gracefully.

mod support;

use std::time::Duration;

use support::procs::RouterProc;
use support::{FastGet, Raw};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_on_one_thread_serves_every_path_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--embedded-nodes", "3", "--threads", "1", "--near-cache", "8mb"];
    let mut router = RouterProc::start(dir.path(), "router", &args).await;
    let (resp, http) = (router.resp, router.http);
    let mut a = router.raw().await;
    assert_eq!(a.cmd(&["SET", "k", "v"]).await, b"+OK\r\n");
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
    router.signal("-TERM");
    let status = router.wait_exit(Duration::from_secs(20)).await;
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{}", router.logs());
}

/// A blocking command that reaches a node while a script holds the node's store waits for the
/// store without holding the thread (issue 38, item 6): on one thread, where the router's tasks
/// and its node's all run, a BLPOP behind a looping script used to wait for the store's gate on
/// that thread, so nothing else ran, SCRIPT KILL included, and the script never ended. Now SCRIPT
/// KILL ends the script and the BLPOP then runs and times out as Redis's would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_command_behind_a_running_script_leaves_the_thread_to_script_kill() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--embedded-nodes", "1", "--threads", "1"];
    let mut router = RouterProc::start(dir.path(), "router", &args).await;
    let mut script = router.raw().await;
    script.send(&support::encode(&[b"EVAL", b"while true do end", b"0"])).await;
    // The script takes the store on the node's script thread (nothing to poll for: it answers
    // nothing until it ends).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut blocked = router.raw().await;
    blocked.send(&support::encode(&[b"BLPOP", b"list", b"1"])).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut killer = router.raw().await;
    killer.send(&support::encode(&[b"SCRIPT", b"KILL"])).await;
    let within = Duration::from_secs(5);
    assert_eq!(killer.reply_within(within).await.as_deref(), Some(&b"+OK\r\n"[..]), "{}", router.logs());
    let killed = script.reply_within(within).await.expect("the script's caller is answered");
    assert!(
        killed.starts_with(b"-ERR Script killed by user with SCRIPT KILL"),
        "{}",
        String::from_utf8_lossy(&killed)
    );
    // The BLPOP ran once the store was free, and timed out (nothing was pushed).
    assert_eq!(blocked.reply_within(within).await.as_deref(), Some(&b"*-1\r\n"[..]));
    router.signal("-TERM");
    let status = router.wait_exit(Duration::from_secs(20)).await;
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{}", router.logs());
}
