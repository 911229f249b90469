//! Lettuce, the most used Java client, against two routers sharing one 3-node cluster: data types,
//! a transaction, pipelining, errors, and its client-side cache (`ClientSideCaching`, RESP3
//! CLIENT TRACKING in default and BCAST modes) invalidated through the other router. The checks
//! are in `tests/java/LettuceCheck.java`; this test compiles them with `javac` against the
//! Lettuce jars `.ci/tools/install lettuce` fetches (Maven) into `~/.cache/shoal/lettuce/lib`
//! (`SHOAL_LETTUCE_LIB` overrides), and runs them with `java`. Missing jars or JDK fail the test
//! with the command that installs them, as the redis-py tests do.

mod support;

use std::time::Duration;

use support::clients::{compile_lettuce_check, run_java};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lettuce_client_and_its_client_side_cache_work_through_two_routers() {
    let (_classes, classpath) = compile_lettuce_check("LettuceCheck").await;

    // Router A owns the embedded nodes; router B joins the same cluster through its topology file.
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = support::two_routers(&dir, &["--embedded-nodes", "3"], &[]).await;

    let ports = [a.resp_addr().port().to_string(), b.resp_addr().port().to_string()];
    let (ok, out) = run_java(&classpath, "LettuceCheck", &ports, Duration::from_secs(180)).await;
    assert!(ok, "Lettuce checks failed:\n{out}");
    b.shutdown().await;
    a.shutdown().await;
}
