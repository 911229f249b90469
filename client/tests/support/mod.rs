//! Starts a real router in this process (embedded nodes, RESP on a free loopback port, and a
//! Unix socket in a temp dir), as the router's own tests do.
#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use clap::Parser;
use shoal_client::{Client, Condition, Error, SetOptions, SetOutcome, Value};
use shoal_router::Router;
use shoal_router::config::Cli;

/// A router with one embedded node, serving RESP on 127.0.0.1 and on the Unix socket `socket`.
pub async fn router(socket: &Path, extra: &[&str]) -> Router {
    let mut argv = vec![
        "shoal-router",
        "--resp",
        "127.0.0.1:0",
        "--http",
        "off",
        "--embedded-nodes",
        "1",
        "--unix-socket",
        socket.to_str().unwrap(),
    ];
    argv.extend_from_slice(extra);
    let cli = Cli::try_parse_from(argv).expect("valid flags");
    let router = Router::start(&cli.serve).await.expect("router starts");
    let start = Instant::now();
    while !router.state.backend.all_up() {
        assert!(start.elapsed() < Duration::from_secs(10), "nodes not up within 10 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    router
}

/// Stops `old`, waits until none of `c`'s connections pretends to be live, makes a request
/// (`SET after 2`) while no router is up, then starts a new router on the same socket: the
/// waiting request must be served by it within 5 s of its start. Returns the new router.
pub async fn restart_with_a_request_waiting(c: &Client, old: Router, socket: &Path) -> Router {
    old.shutdown().await;
    let start = Instant::now();
    while c.live_connections() > 0 {
        assert!(start.elapsed() < Duration::from_secs(5), "connections still live after the router stopped");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A request made while the router is down waits for the new one instead of failing.
    let waiting = tokio::spawn({
        let c = c.clone();
        async move { c.set("after", "2").await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let restarted = Instant::now();
    let new = router(socket, &[]).await;
    waiting.await.unwrap().expect("served by the restarted router");
    assert!(restarted.elapsed() < Duration::from_secs(5), "recovered in {:?}", restarted.elapsed());
    new
}

fn bulk(s: &str) -> Value {
    Value::Bulk(s.as_bytes().to_vec().into())
}

/// Every typed command and `cmd`, with their answers checked, on one client.
pub async fn exercise(c: &Client) {
    c.ping().await.unwrap();
    assert_eq!(c.get("missing").await.unwrap(), None);
    c.set("k", "v1").await.unwrap();
    assert_eq!(c.get("k").await.unwrap().as_deref(), Some(&b"v1"[..]));

    // SET's options.
    let nx = SetOptions { condition: Some(Condition::IfAbsent), ..Default::default() };
    assert_eq!(c.set_with("k", "v2", nx).await.unwrap(), SetOutcome::NotStored);
    let xx = SetOptions { condition: Some(Condition::IfPresent), ..Default::default() };
    assert_eq!(c.set_with("nope", "v", xx).await.unwrap(), SetOutcome::NotStored);
    assert_eq!(c.set_with("k", "v2", xx).await.unwrap(), SetOutcome::Stored);
    let get = SetOptions { get: true, ..Default::default() };
    assert_eq!(c.set_with("k", "v3", get).await.unwrap(), SetOutcome::Previous(Some("v2".into())));
    assert_eq!(c.set_with("fresh", "x", get).await.unwrap(), SetOutcome::Previous(None));
    let ttl = SetOptions { ttl: Some(Duration::from_secs(100)), ..Default::default() };
    assert_eq!(c.set_with("t", "x", ttl).await.unwrap(), SetOutcome::Stored);
    let pttl = c.cmd(&["PTTL", "t"]).await.unwrap().as_int().unwrap();
    assert!((90_000..=100_000).contains(&pttl), "{pttl}");

    // DEL, INCRBY, EXPIRE.
    assert_eq!(c.del("fresh").await.unwrap(), 1);
    assert_eq!(c.del("fresh").await.unwrap(), 0);
    assert_eq!(c.incr_by("n", 5).await.unwrap(), 5);
    assert_eq!(c.incr_by("n", -7).await.unwrap(), -2);
    assert!(c.expire("n", Duration::from_secs(50)).await.unwrap());
    assert!(!c.expire("nothing", Duration::from_secs(50)).await.unwrap());
    let ttl = c.cmd(&["TTL", "n"]).await.unwrap().as_int().unwrap();
    assert!((45..=50).contains(&ttl), "{ttl}");

    // MSET / MGET across slots (the router splits them by node).
    c.mset(&[("a", "1"), ("b", "2"), ("{x}c", "3")]).await.unwrap();
    let got = c.mget(&["a", "missing", "b", "{x}c"]).await.unwrap();
    let got: Vec<Option<&[u8]>> = got.iter().map(|v| v.as_deref()).collect();
    assert_eq!(got, vec![Some(&b"1"[..]), None, Some(b"2"), Some(b"3")]);

    // Any command.
    assert_eq!(c.cmd(&["HSET", "h", "f1", "a", "f2", "b"]).await.unwrap(), Value::Int(2));
    assert_eq!(c.cmd(&["HGET", "h", "f2"]).await.unwrap(), bulk("b"));
    let Value::Array(all) = c.cmd(&["HGETALL", "h"]).await.unwrap() else { panic!("HGETALL") };
    assert_eq!(all.len(), 4);
    assert_eq!(c.cmd(&["RPUSH", "l", "x", "y"]).await.unwrap(), Value::Int(2));
    assert_eq!(c.cmd(&["LRANGE", "l", "0", "-1"]).await.unwrap(), Value::Array(vec![bulk("x"), bulk("y")]));
    assert_eq!(c.cmd(&["GET", "missing"]).await.unwrap(), Value::Nil);

    // Errors carry Redis's exact text, and the connection stays usable after them.
    match c.incr_by("h", 1).await {
        Err(Error::Server(e)) => {
            assert_eq!(e, "WRONGTYPE Operation against a key holding the wrong kind of value")
        }
        other => panic!("{other:?}"),
    }
    match c.get("h").await {
        Err(Error::Server(e)) => assert!(e.starts_with("WRONGTYPE"), "{e}"),
        other => panic!("{other:?}"),
    }
    match c.incr_by("k", 1).await {
        Err(Error::Server(e)) => assert_eq!(e, "ERR value is not an integer or out of range"),
        other => panic!("{other:?}"),
    }
    match c.cmd(&["NOSUCHCOMMAND"]).await {
        Err(Error::Server(e)) => assert!(e.starts_with("ERR unknown command"), "{e}"),
        other => panic!("{other:?}"),
    }
    c.ping().await.unwrap();
}
