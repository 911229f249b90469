//! Clients in other languages than Rust and Python, as `.ci/tools/install` puts them in the tools
//! cache: Lettuce's jars (a check compiled with `javac` against them and run with `java`),
//! go-redis (a check built into `bin/`), ioredis (node modules a check runs with); each run
//! bounded in time.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The tools cache: `$SHOAL_CACHE`, else `~/.cache/shoal` (the install script's default).
pub fn tools_cache() -> PathBuf {
    std::env::var_os("SHOAL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(&std::env::var_os("HOME").expect("HOME is set")).join(".cache/shoal"))
}

/// Where the jars are: `SHOAL_LETTUCE_LIB`, else the cache's `lettuce/lib`.
pub fn lettuce_lib() -> PathBuf {
    if let Some(dir) = std::env::var_os("SHOAL_LETTUCE_LIB") {
        return dir.into();
    }
    tools_cache().join("lettuce/lib")
}

/// Runs `cmd` to completion, killing it after `limit` (a hung client fails instead of hanging).
pub fn run_bounded(mut cmd: Command, limit: Duration) -> (bool, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?} does not start: {e}"));
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

/// A Lettuce check compiled: `tests/java/<class>.java` built into a scratch directory (kept alive
/// by the returned guard); the classpath to run it with. Missing jars or JDK fail the test with
/// the command that installs them.
pub async fn compile_lettuce_check(class: &str) -> (tempfile::TempDir, String) {
    let lib = lettuce_lib();
    let has_lettuce = std::fs::read_dir(&lib)
        .map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().starts_with("lettuce-core-")))
        .unwrap_or(false);
    assert!(has_lettuce, "no Lettuce jars in {} (run .ci/tools/install lettuce)", lib.display());
    let classes = tempfile::tempdir().unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/java/{class}.java"));
    let jars = format!("{}/*", lib.display());
    let mut javac = Command::new("javac");
    javac.arg("-cp").arg(&jars).arg("-d").arg(classes.path()).arg(&source);
    let (ok, out) =
        tokio::task::spawn_blocking(move || run_bounded(javac, Duration::from_secs(120))).await.unwrap();
    assert!(ok, "javac {class}.java failed:\n{out}");
    let classpath = format!("{}:{jars}", classes.path().display());
    (classes, classpath)
}

/// Runs a compiled check (`java -cp classpath class args...`) on a blocking thread, so that the
/// routers under test keep serving on the runtime; whether it printed "ok" and exited 0, and
/// its output.
pub async fn run_java(classpath: &str, class: &str, args: &[String], limit: Duration) -> (bool, String) {
    let mut java = Command::new("java");
    java.arg("-cp").arg(classpath).arg(class).args(args);
    let (ok, out) = tokio::task::spawn_blocking(move || run_bounded(java, limit)).await.unwrap();
    (ok && out.lines().any(|l| l == "ok"), out)
}

/// Runs a client check program (`program args...`, e.g. the go-redis check or `node script`) on
/// a blocking thread, so that the routers under test keep serving on the runtime; whether it
/// printed "ok" and exited 0, and its output.
pub async fn run_check(mut cmd: Command, limit: Duration) -> (bool, String) {
    let (ok, out) = tokio::task::spawn_blocking(move || {
        cmd.stdin(Stdio::null());
        run_bounded(cmd, limit)
    })
    .await
    .unwrap();
    (ok && out.lines().any(|l| l == "ok"), out)
}

/// The go-redis cluster check `.ci/tools/install goredis` builds (`router/tests/go/clusterclient`).
pub fn goredis_cluster_check() -> Command {
    let bin = tools_cache().join("bin/shoal-goredis-cluster");
    assert!(bin.exists(), "no {} (run .ci/tools/install goredis)", bin.display());
    Command::new(bin)
}

/// `node tests/node/<script>` with NODE_PATH at the modules `.ci/tools/install ioredis` put in
/// the cache (`router/tests/node/package-lock.json` pins them).
pub fn node_check(script: &str) -> Command {
    let modules = tools_cache().join("node-clients/node_modules");
    assert!(
        modules.join("ioredis").exists(),
        "no ioredis in {} (run .ci/tools/install ioredis)",
        modules.display()
    );
    let mut node = Command::new("node");
    node.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node").join(script)).env("NODE_PATH", modules);
    node
}
