//! The fast-path client against a real router's Unix socket.
//!
//! Each test first checks that the router answers the 0xF5 preamble with its own
//! ([`assert_fast_path_served`]): a router that took it for RESP fails the test there, with what
//! it said.

mod support;

use std::path::Path;
use std::time::Duration;

use shoal_client::{Client, Config, Endpoint, Error, Protocol, Value};
use shoal_wire::fast;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Asserts that the router on `sock` answers the fast-path preamble with its own.
async fn assert_fast_path_served(sock: &Path) {
    let mut s = UnixStream::connect(sock).await.unwrap();
    s.write_all(&fast::Preamble { version: fast::VERSION }.encode()).await.unwrap();
    let mut buf = Vec::new();
    if tokio::time::timeout(Duration::from_secs(2), s.read_buf(&mut buf)).await.is_err() {
        // Silence: a RESP-only router is waiting for the end of an inline command; a line end
        // makes it say what it took the preamble for.
        s.write_all(b"\r\n").await.unwrap();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_buf(&mut buf)).await;
    }
    assert_eq!(
        buf.first(),
        Some(&fast::MAGIC[0]),
        "the router did not answer the fast-path preamble with its own: {:?}",
        String::from_utf8_lossy(&buf)
    );
}

fn config(sock: &Path) -> Config {
    Config::new(Endpoint::Unix(sock.to_path_buf()), Protocol::Fast)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_over_the_fast_path() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("shoal.sock");
    let router = support::router(&sock, &[]).await;
    assert_fast_path_served(&sock).await;
    let c = Client::connect(config(&sock).connections(2)).await.unwrap();
    // The same checks, answers and error texts as over RESP.
    support::exercise(&c).await;
    // A fast-path client and a RESP client see the same data.
    let resp = Client::connect(Config::new(Endpoint::Unix(sock.clone()), Protocol::Resp)).await.unwrap();
    c.set("shared", "from-fast").await.unwrap();
    assert_eq!(resp.get("shared").await.unwrap().as_deref(), Some(&b"from-fast"[..]));
    resp.cmd(&["SADD", "s", "m"]).await.unwrap();
    assert_eq!(c.cmd(&["SISMEMBER", "s", "m"]).await.unwrap(), Value::Int(1));
    // A large value crosses in one piece.
    let big = vec![b'z'; 3 << 20];
    c.set("big", &big).await.unwrap();
    assert_eq!(c.get("big").await.unwrap().as_deref(), Some(&big[..]));
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_share_one_fast_connection() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("shoal.sock");
    let router = support::router(&sock, &[]).await;
    assert_fast_path_served(&sock).await;
    let c = Client::connect(config(&sock).timeout(Duration::from_secs(10))).await.unwrap();
    let tasks: Vec<_> = (0..32)
        .map(|t| {
            let c = c.clone();
            tokio::spawn(async move {
                for i in 0..50 {
                    let key = format!("t{t}:{i}");
                    c.set(&key, &key).await.unwrap();
                    assert_eq!(c.incr_by(format!("count{t}"), 1).await.unwrap(), i + 1);
                    let got = c.mget(&[key.as_str(), "nope"]).await.unwrap();
                    assert_eq!(got, vec![Some(key.clone().into()), None]);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(c.cmd(&["DBSIZE"]).await.unwrap(), Value::Int(32 * 50 + 32));
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_authenticates() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("shoal.sock");
    let router = support::router(&sock, &["--requirepass", "s3cret"]).await;
    assert_fast_path_served(&sock).await;
    let wrong = Client::connect(config(&sock).auth(None, Some("nope".into()))).await;
    assert!(matches!(&wrong, Err(Error::Server(e)) if e.starts_with("WRONGPASS")), "{wrong:?}");
    // No credentials: refused at HELLO, or every command refused with NOAUTH.
    match Client::connect(config(&sock)).await {
        Err(Error::Server(e)) => assert!(e.starts_with("WRONGPASS") || e.starts_with("NOAUTH"), "{e}"),
        Err(e) => panic!("{e:?}"),
        Ok(anon) => match anon.get("k").await {
            Err(Error::Server(e)) => assert!(e.starts_with("NOAUTH"), "{e}"),
            other => panic!("{other:?}"),
        },
    }
    for user in [None, Some("default".to_string())] {
        let c = Client::connect(config(&sock).auth(user, Some("s3cret".into()))).await.unwrap();
        c.set("k", "v").await.unwrap();
        assert_eq!(c.get("k").await.unwrap().as_deref(), Some(&b"v"[..]));
    }
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fast_pool_recovers_when_the_router_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("shoal.sock");
    let router = support::router(&sock, &[]).await;
    assert_fast_path_served(&sock).await;
    let c = Client::connect(
        config(&sock)
            .connections(2)
            .timeout(Duration::from_secs(8))
            .backoff(Duration::from_millis(20), Duration::from_millis(200)),
    )
    .await
    .unwrap();
    c.set("before", "1").await.unwrap();
    let router = support::restart_with_a_request_waiting(&c, router, &sock).await;
    assert_eq!(c.get("after").await.unwrap().as_deref(), Some(&b"2"[..]));
    router.shutdown().await;
}
