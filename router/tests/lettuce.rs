//! Lettuce, the most used Java client, against two routers sharing one 3-node cluster: data types,
//! a transaction, pipelining, errors, and its client-side cache (`ClientSideCaching`, RESP3
//! CLIENT TRACKING in default and BCAST modes) invalidated through the other router. The checks
//! are in `tests/java/LettuceCheck.java`; this test compiles them with `javac` against the
//! Lettuce jars `.ci/tools/install lettuce` fetches (Maven) into `~/.cache/shoal/lettuce/lib`
//! (`SHOAL_LETTUCE_LIB` overrides), and runs them with `java`. Missing jars or JDK fail the test
//! with the command that installs them, as the redis-py tests do.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where the jars are: `SHOAL_LETTUCE_LIB`, else `$SHOAL_CACHE/lettuce/lib`, else
/// `~/.cache/shoal/lettuce/lib` (the install script's layout).
fn lettuce_lib() -> PathBuf {
    if let Some(dir) = std::env::var_os("SHOAL_LETTUCE_LIB") {
        return dir.into();
    }
    let cache = std::env::var_os("SHOAL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(&std::env::var_os("HOME").expect("HOME is set")).join(".cache/shoal"));
    cache.join("lettuce/lib")
}

/// Runs `cmd` to completion, killing it after `limit` (a hung client fails instead of hanging).
fn run_bounded(mut cmd: Command, limit: Duration) -> (bool, String) {
    let mut child =
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the JDK runs (java, javac)");
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lettuce_client_and_its_client_side_cache_work_through_two_routers() {
    let lib = lettuce_lib();
    let has_lettuce = std::fs::read_dir(&lib)
        .map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().starts_with("lettuce-core-")))
        .unwrap_or(false);
    assert!(has_lettuce, "no Lettuce jars in {} (run .ci/tools/install lettuce)", lib.display());
    let classes = tempfile::tempdir().unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/java/LettuceCheck.java");
    let classpath = format!("{}/*", lib.display());
    let mut javac = Command::new("javac");
    javac.arg("-cp").arg(&classpath).arg("-d").arg(classes.path()).arg(&source);
    let (ok, out) =
        tokio::task::spawn_blocking(move || run_bounded(javac, Duration::from_secs(120))).await.unwrap();
    assert!(ok, "javac LettuceCheck.java failed:\n{out}");

    // Router A owns the embedded nodes; router B joins the same cluster through its topology file.
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = support::two_routers(&dir, &["--embedded-nodes", "3"], &[]).await;

    let mut java = Command::new("java");
    java.arg("-cp")
        .arg(format!("{}:{classpath}", classes.path().display()))
        .arg("LettuceCheck")
        .arg(a.resp_addr().port().to_string())
        .arg(b.resp_addr().port().to_string());
    // A blocking child on a blocking thread: the routers keep serving on the runtime.
    let (ok, out) =
        tokio::task::spawn_blocking(move || run_bounded(java, Duration::from_secs(180))).await.unwrap();
    assert!(ok && out.lines().any(|l| l == "ok"), "Lettuce checks failed:\n{out}");
    b.shutdown().await;
    a.shutdown().await;
}
