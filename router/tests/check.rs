//! `shoal-router check` (the chart's `helm test`) against a real router: passes on a healthy
//! cluster, with and without a password, and fails clearly otherwise.

mod support;

use std::process::Command;

fn check(addr: &str, password: Option<&str>) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shoal-router"));
    cmd.args(["check", "--addr", addr, "--timeout-secs", "2"]).env_remove("SHOAL_REQUIREPASS");
    if let Some(p) = password {
        cmd.env("SHOAL_REQUIREPASS", p);
    }
    let out = cmd.output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_passes_on_a_healthy_cluster_and_fails_clearly_otherwise() {
    let router = support::cluster().await;
    let addr = router.resp_addr().to_string();
    let (ok, out) = tokio::task::spawn_blocking(move || check(&addr, None)).await.unwrap();
    assert!(ok, "{out}");
    for step in ["ok   PING", "ok   SET EX, GET, TTL", "ok   MSET/MGET over 32 slots", "ok   DEL"] {
        assert!(out.contains(step), "{out}");
    }
    // Every shard answered: the 32 keys land on all three nodes.
    let routing = router.state.backend.routing();
    let nodes: std::collections::BTreeSet<usize> =
        shoal_router::check::spread_keys("x").iter().map(|k| routing.locate(k.as_bytes()).0).collect();
    assert_eq!(nodes.len(), 3);
    let mut c = support::Raw::connect(router.resp_addr()).await;
    assert_eq!(c.cmd(&["DBSIZE"]).await, b":0\r\n", "the check cleans up after itself");
    router.shutdown().await;

    let secured = support::router(&["--embedded-nodes", "2", "--requirepass", "s3cret"]).await;
    let addr = secured.resp_addr().to_string();
    let (ok, out) = tokio::task::spawn_blocking({
        let addr = addr.clone();
        move || check(&addr, Some("s3cret"))
    })
    .await
    .unwrap();
    assert!(ok && out.contains("ok   AUTH"), "{out}");
    let (ok, out) = tokio::task::spawn_blocking(move || check(&addr, Some("wrong"))).await.unwrap();
    assert!(!ok && out.contains("AUTH answered"), "{out}");
    secured.shutdown().await;

    let (ok, out) = tokio::task::spawn_blocking(|| check("127.0.0.1:1", None)).await.unwrap();
    assert!(!ok && out.contains("cannot connect to 127.0.0.1:1"), "{out}");
}
