//! The RESP listeners (TCP and Unix socket) share one accept loop: the same admission rules and
//! the same refusal path on each, except protected mode, which applies to TCP only. A router
//! process never takes over a Unix socket path that another process serves, replaces a stale one,
//! and removes the socket file at exit only if it is still its own.

mod support;

use std::path::Path;
use std::time::Duration;

use support::Raw;
use support::procs::RouterProc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Everything a refused client receives until the router closes the connection (bounded).
async fn until_close<S: AsyncReadExt + Unpin>(mut s: S) -> Vec<u8> {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out))
        .await
        .expect("the router closes a refused connection within 5 s")
        .expect("read");
    out
}

/// PING over a Unix socket; the reply's bytes.
async fn unix_ping(path: &Path) -> Vec<u8> {
    let mut s = UnixStream::connect(path).await.unwrap();
    s.write_all(b"*1\r\n$4\r\nPING\r\n").await.unwrap();
    let mut buf = vec![0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await.expect("a reply").unwrap();
    buf.truncate(n);
    buf
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maxclients_counts_and_refuses_the_same_on_tcp_and_unix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shoal.sock");
    let p = path.to_str().unwrap();
    let router = support::router(&["--embedded-nodes", "1", "--unix-socket", p, "--maxclients", "1"]).await;

    // One TCP client takes the only slot: a Unix client is refused, with the text, and closed.
    let mut tcp = Raw::connect(router.resp_addr()).await;
    assert_eq!(tcp.cmd(&["PING"]).await, b"+PONG\r\n");
    let refused = until_close(UnixStream::connect(&path).await.unwrap()).await;
    assert_eq!(refused, b"-ERR max number of clients reached\r\n");

    // The slot frees; now a Unix client holds it and a TCP client is refused the same way.
    drop(tcp);
    support::wait_until(Duration::from_secs(5), || router.state.connected_clients() == 0).await;
    let mut unix = UnixStream::connect(&path).await.unwrap();
    unix.write_all(b"*1\r\n$4\r\nPING\r\n").await.unwrap();
    let mut pong = [0u8; 7];
    tokio::time::timeout(Duration::from_secs(5), unix.read_exact(&mut pong)).await.unwrap().unwrap();
    assert_eq!(&pong, b"+PONG\r\n");
    let refused = until_close(tokio::net::TcpStream::connect(router.resp_addr()).await.unwrap()).await;
    assert_eq!(refused, b"-ERR max number of clients reached\r\n");
    drop(unix);
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protected_mode_applies_to_tcp_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shoal.sock");
    let router = support::router(&["--embedded-nodes", "1", "--unix-socket", path.to_str().unwrap()]).await;
    // 127.0.0.2 stands in for a remote client (Redis trusts only 127.0.0.1 and ::1).
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let remote = socket.connect(router.resp_addr()).await.unwrap();
    let refused = until_close(remote).await;
    assert!(refused.starts_with(b"-DENIED Shoal is running in protected mode"), "{refused:?}");
    assert_eq!(unix_ping(&path).await, b"+PONG\r\n", "a Unix socket client is local: no protected mode");
    let mut local = Raw::connect(router.resp_addr()).await;
    assert_eq!(local.cmd(&["PING"]).await, b"+PONG\r\n");
    router.shutdown().await;
}

/// `INFO server`'s process_id as seen through the Unix socket at `path`: who serves it.
async fn unix_server_pid(path: &Path) -> u32 {
    let mut s = UnixStream::connect(path).await.unwrap();
    s.write_all(b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n").await.unwrap();
    let mut buf = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let text = String::from_utf8_lossy(&buf).into_owned();
        // Only whole lines: the reply may arrive in several reads, split inside the number.
        let whole = text.rsplit_once("\r\n").map_or("", |(lines, _)| lines);
        if let Some(pid) = whole.split("\r\n").find_map(|l| l.strip_prefix("process_id:")) {
            return pid.trim().parse().unwrap();
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let n = tokio::time::timeout(left, s.read_buf(&mut buf)).await.expect("INFO within 5 s").unwrap();
        assert!(n > 0, "closed before answering INFO: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_router_refuses_a_socket_path_that_another_one_serves() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shoal.sock");
    let p = path.to_str().unwrap();
    let mut first =
        RouterProc::start(dir.path(), "first", &["--embedded-nodes", "1", "--unix-socket", p]).await;
    assert_eq!(unix_server_pid(&path).await, first.child.id());

    let mut second = RouterProc::spawn(dir.path(), "second", &["--embedded-nodes", "1", "--unix-socket", p]);
    let status = second.wait_exit(Duration::from_secs(30)).await;
    let logs = second.logs();
    assert!(status.is_some_and(|s| !s.success()), "the second router must fail to start: {status:?}\n{logs}");
    assert!(logs.contains("is in use: another process accepts connections on it"), "{logs}");
    // The first one still owns the path and serves on it.
    assert_eq!(unix_server_pid(&path).await, first.child.id(), "the live socket was not taken over");

    // Its own socket file is removed at exit.
    first.signal("-TERM");
    let status = first.wait_exit(Duration::from_secs(15)).await;
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{}", first.logs());
    assert!(!path.exists(), "the router removes its own socket file at exit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_leaves_a_socket_file_that_is_no_longer_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shoal.sock");
    let p = path.to_str().unwrap();
    let mut router =
        RouterProc::start(dir.path(), "router", &["--embedded-nodes", "1", "--unix-socket", p]).await;
    assert_eq!(unix_ping(&path).await, b"+PONG\r\n");
    // Someone else (another service, an operator by hand) replaces the path with its own socket.
    std::fs::remove_file(&path).unwrap();
    let other = tokio::net::UnixListener::bind(&path).unwrap();

    router.signal("-TERM");
    let status = router.wait_exit(Duration::from_secs(15)).await;
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{}", router.logs());
    assert!(path.exists(), "the router must not remove a socket file it did not create");
    let _client = UnixStream::connect(&path).await.expect("the other socket still works");
    let accepted = tokio::time::timeout(Duration::from_secs(5), other.accept()).await;
    assert!(accepted.is_ok_and(|a| a.is_ok()), "the connection reached the other listener");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_perm_outside_0777_is_refused_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shoal.sock");
    let p = path.to_str().unwrap();
    let mut router = RouterProc::spawn(
        dir.path(),
        "router",
        &["--embedded-nodes", "1", "--unix-socket", p, "--unix-socket-perm", "7777"],
    );
    let status = router.wait_exit(Duration::from_secs(30)).await;
    let logs = router.logs();
    assert!(status.is_some_and(|s| s.code() == Some(2)), "a usage error: {status:?}\n{logs}");
    assert!(logs.contains("--unix-socket-perm") && logs.contains("outside 0777"), "{logs}");
    assert!(!path.exists(), "nothing was bound");
}
