//! redis-py, the most common Python client, against a 3-node cluster (with and without a
//! password). Needs `python3 -m pip install redis` (the CI installs it).

mod support;

use std::process::Command;

fn run_client(port: u16, password: Option<&str>) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/redis_py_client.py");
    let mut cmd = Command::new("python3");
    cmd.arg(&script).arg(port.to_string());
    if let Some(p) = password {
        cmd.arg(p);
    }
    let out = cmd.output().expect("python3 runs");
    assert!(
        out.status.success(),
        "redis-py checks failed (is redis-py installed? python3 -m pip install redis)\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_client_works() {
    let router = support::cluster().await;
    let port = router.resp_addr().port();
    tokio::task::spawn_blocking(move || run_client(port, None)).await.unwrap();
    router.shutdown().await;

    let router = support::router(&["--embedded-nodes", "3", "--requirepass", "py-secret"]).await;
    let port = router.resp_addr().port();
    tokio::task::spawn_blocking(move || run_client(port, Some("py-secret"))).await.unwrap();
    router.shutdown().await;
}
