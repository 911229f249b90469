//! The RESP client against a real router (embedded node), over TCP and the Unix socket.

mod support;

use std::time::{Duration, Instant};

use shoal_client::{Client, Condition, Config, Endpoint, Error, Protocol, SetOptions, SetOutcome, Value};

fn bulk(s: &str) -> Value {
    Value::Bulk(s.as_bytes().to_vec().into())
}

/// Every typed command and `cmd`, with their answers checked, on one client.
async fn exercise(c: &Client) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_over_tcp_and_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("shoal.sock");
    let router = support::router(&sock, &[]).await;
    for endpoint in [Endpoint::Tcp(router.resp_addr().to_string()), Endpoint::Unix(sock.clone())] {
        let c = Client::connect(Config::new(endpoint.clone(), Protocol::Resp).connections(2)).await.unwrap();
        c.cmd(&["FLUSHALL"]).await.unwrap();
        exercise(&c).await;
    }
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_pipeline_on_few_connections() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("shoal.sock");
    let router = support::router(&sock, &[]).await;
    let c = Client::connect(
        Config::new(Endpoint::Unix(sock), Protocol::Resp).connections(2).timeout(Duration::from_secs(10)),
    )
    .await
    .unwrap();
    let tasks: Vec<_> = (0..32)
        .map(|t| {
            let c = c.clone();
            tokio::spawn(async move {
                for i in 0..50 {
                    let key = format!("t{t}:{i}");
                    c.set(&key, &key).await.unwrap();
                    assert_eq!(c.incr_by(format!("count{t}"), 1).await.unwrap(), i + 1);
                    assert_eq!(c.get(&key).await.unwrap().as_deref(), Some(key.as_bytes()));
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
async fn auth_with_user_and_password() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("shoal.sock");
    let router = support::router(&sock, &["--requirepass", "s3cret"]).await;
    let ep = Endpoint::Unix(sock);

    // Without credentials the router refuses commands with Redis's text.
    let anon = Client::connect(Config::new(ep.clone(), Protocol::Resp)).await.unwrap();
    match anon.get("k").await {
        Err(Error::Server(e)) => assert!(e.starts_with("NOAUTH"), "{e}"),
        other => panic!("{other:?}"),
    }
    // A wrong password fails the connect itself.
    let wrong =
        Client::connect(Config::new(ep.clone(), Protocol::Resp).auth(None, Some("nope".into()))).await;
    assert!(matches!(&wrong, Err(Error::Server(e)) if e.starts_with("WRONGPASS")), "{wrong:?}");
    // The password alone, and as the default user by name.
    for user in [None, Some("default".to_string())] {
        let c = Client::connect(Config::new(ep.clone(), Protocol::Resp).auth(user, Some("s3cret".into())))
            .await
            .unwrap();
        c.set("k", "v").await.unwrap();
        assert_eq!(c.get("k").await.unwrap().as_deref(), Some(&b"v"[..]));
    }
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_recovers_when_the_router_restarts_on_the_same_socket() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("shoal.sock");
    let router = support::router(&sock, &[]).await;
    let config = Config::new(Endpoint::Unix(sock.clone()), Protocol::Resp)
        .connections(3)
        .timeout(Duration::from_secs(8))
        .backoff(Duration::from_millis(20), Duration::from_millis(200));
    let c = Client::connect(config).await.unwrap();
    c.set("before", "1").await.unwrap();
    assert_eq!(c.live_connections(), 3);

    router.shutdown().await;
    // Every connection notices the router is gone (none is left pretending to be live).
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
    let router = support::router(&sock, &[]).await;
    waiting.await.unwrap().expect("served by the restarted router");
    assert!(restarted.elapsed() < Duration::from_secs(5), "recovered in {:?}", restarted.elapsed());
    // The new router's embedded node is empty: the key written before is gone, the new one is there.
    assert_eq!(c.get("before").await.unwrap(), None);
    assert_eq!(c.get("after").await.unwrap().as_deref(), Some(&b"2"[..]));
    let start = Instant::now();
    while c.live_connections() < 3 {
        assert!(start.elapsed() < Duration::from_secs(5), "only {} connections back", c.live_connections());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    router.shutdown().await;
}
