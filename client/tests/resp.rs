//! The RESP client against a real router (embedded node), over TCP and the Unix socket.

mod support;

use std::time::{Duration, Instant};

use shoal_client::{Client, Config, Endpoint, Error, Protocol, Value};
use support::exercise;

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

    let router = support::restart_with_a_request_waiting(&c, router, &sock).await;
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
