//! The image's sidecar programs, run as built, against a real router with a password and an ACL
//! user limited to its own keys, as `charts/shoal/examples/sidecar.yaml` sets them up:
//! `shoal-sidecar-demo` (the app container) and `shoal-bench` (the optional load check).

mod support;

use std::path::Path;
use std::process::{Command, Output};

use shoal_client::{Client, Config, Endpoint, Protocol, Value};

const PASSWORD: &str = "cluster-pw";
const SHOP_PASSWORD: &str = "shop-pw";

/// A router like the example's sidecar: the default user keeps the cluster's password, the app
/// signs in as `shop`, limited to keys `shop:*`.
async fn sidecar_router(dir: &Path) -> (shoal_router::Router, std::path::PathBuf) {
    let acl = dir.join("users.acl");
    std::fs::write(&acl, format!("user shop on >{SHOP_PASSWORD} ~shop:* +@all -@dangerous\n")).unwrap();
    let sock = dir.join("shoal.sock");
    let router =
        support::router(&sock, &["--requirepass", PASSWORD, "--aclfile", acl.to_str().unwrap()]).await;
    (router, sock)
}

/// Runs a binary of this crate off the runtime's threads (the router runs on them).
async fn run(bin: &'static str, args: Vec<String>, env: Vec<(&'static str, String)>) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(bin).args(args).envs(env).env_remove("SHOAL_STAY").output().unwrap()
    })
    .await
    .unwrap()
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The cluster's own view of the data, as the default user over RESP.
async fn admin(sock: &Path) -> Client {
    let config =
        Config::new(Endpoint::Unix(sock.to_path_buf()), Protocol::Resp).auth(None, Some(PASSWORD.into()));
    Client::connect(config).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sidecar_demo_writes_and_reads_back_over_the_fast_path() {
    let dir = tempfile::tempdir().unwrap();
    let (_router, sock) = sidecar_router(dir.path()).await;
    let demo = env!("CARGO_BIN_EXE_shoal-sidecar-demo");
    let env = |password: &str| {
        vec![
            ("SHOAL_SOCKET", sock.display().to_string()),
            ("SHOAL_USER", "shop".to_string()),
            ("SHOAL_PASSWORD", password.to_string()),
            ("SHOAL_KEY_PREFIX", "shop:sidecar:".to_string()),
            ("SHOAL_ROUNDS", "5".to_string()),
        ]
    };

    let out = run(demo, vec![], env(SHOP_PASSWORD)).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    // The fast path, chosen without a fallback.
    assert!(stdout.starts_with(&format!("connected to {} over Fast\n", sock.display())), "{stdout}");
    assert!(!stdout.contains("using RESP"), "{stdout}");
    for i in 0..5 {
        let line = format!("shop:sidecar:{i} = Some(\"value {i}\") (hits {})\n", i + 1);
        assert!(stdout.contains(&line), "no {line:?} in {stdout}");
    }
    assert!(stdout.contains("5 rounds over Fast in "), "{stdout}");
    assert!(stdout.trim_end().ends_with("shop:sidecar:hits = 5"), "{stdout}");

    // What it wrote is in the cluster, with its TTL.
    let c = admin(&sock).await;
    for i in 0..5 {
        let got = c.get(&format!("shop:sidecar:{i}")).await.unwrap();
        assert_eq!(got.as_deref(), Some(format!("value {i}").as_bytes()));
    }
    let ttl = c.cmd(&["TTL", "shop:sidecar:4"]).await.unwrap().as_int().unwrap();
    assert!((50..=60).contains(&ttl), "{ttl}");
    assert_eq!(c.get("shop:sidecar:hits").await.unwrap().as_deref(), Some(&b"5"[..]));

    // A second run counts on.
    let out = run(demo, vec![], env(SHOP_PASSWORD)).await;
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success() && stdout.trim_end().ends_with("shop:sidecar:hits = 10"),
        "{stdout}{stderr}"
    );
    assert_eq!(c.get("shop:sidecar:hits").await.unwrap().as_deref(), Some(&b"10"[..]));

    // A wrong password is final: no retries, a failure exit, nothing written.
    let out = run(demo, vec![], env("nope")).await;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("WRONGPASS"), "{stderr}");
    assert!(!stdout.contains("retrying") && !stdout.contains("connected"), "{stdout}");
    assert_eq!(c.get("shop:sidecar:hits").await.unwrap().as_deref(), Some(&b"10"[..]));

    // Keys outside the user's pattern are refused (the example's prefix matters).
    let mut outside = env(SHOP_PASSWORD);
    outside[3].1 = "sidecar:".into();
    let out = run(demo, vec![], outside).await;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success() && stderr.contains("NOPERM"), "{stdout}{stderr}");
    assert_eq!(c.get("sidecar:0").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shoal_bench_runs_the_examples_load_check_as_the_apps_user() {
    let dir = tempfile::tempdir().unwrap();
    let (_router, sock) = sidecar_router(dir.path()).await;
    let bench = env!("CARGO_BIN_EXE_shoal-bench");
    let sock_arg = sock.display().to_string();
    // The example's command line, smaller.
    let args = |prefix: &str| -> Vec<String> {
        ["--transport", "fast", "-s", &sock_arg, "-n", "2000", "--duration", "30", "--json", "-r", "50"]
            .into_iter()
            .chain(["--key-prefix", prefix])
            .map(String::from)
            .collect()
    };
    let env = vec![("SHOAL_USER", "shop".to_string()), ("SHOAL_PASSWORD", SHOP_PASSWORD.to_string())];

    let out = run(bench, args("shop:bench:"), env.clone()).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let doc: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON document");
    assert_eq!(doc["transport"], "fast");
    let tests = doc["tests"].as_array().unwrap();
    assert_eq!(tests.iter().map(|t| t["test"].as_str().unwrap()).collect::<Vec<_>>(), ["set", "get"]);
    for t in tests {
        assert_eq!(t["requests"], 2000, "{t}");
        assert_eq!(t["errors"], 0, "{t}");
    }
    // Its SETs landed under the prefix (50 keys, 2000 random SETs: all hit, almost surely).
    let c = admin(&sock).await;
    let value = Some(vec![b'x'; 32]);
    let mut present = 0;
    for i in 0..50 {
        if c.get(&format!("shop:bench:{i}")).await.unwrap().map(|v| v.to_vec()) == value {
            present += 1;
        }
    }
    assert!(present >= 45, "{present} of 50 keys written");

    // The default prefix is outside the user's keys: every request fails, and the exit says so.
    let out = run(bench, args("key:"), env).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    let doc: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let first = &doc["tests"][0];
    assert_eq!(first["errors"], first["requests"], "{first}");
    assert!(first["first_error"].as_str().unwrap().contains("NOPERM"), "{first}");
    assert_eq!(c.cmd(&["EXISTS", "key:0", "key:1"]).await.unwrap(), Value::Int(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shoal_bench_sequential_writes_each_key_in_turn() {
    let dir = tempfile::tempdir().unwrap();
    let (_router, sock) = sidecar_router(dir.path()).await;
    let bench = env!("CARGO_BIN_EXE_shoal-bench");
    let sock_arg = sock.display().to_string();
    let env = vec![("SHOAL_USER", "shop".to_string()), ("SHOAL_PASSWORD", SHOP_PASSWORD.to_string())];
    let c = admin(&sock).await;
    // Each engine and transport, several connections with pipelines: 150 SETs over a keyspace of
    // 400 write exactly keys 0..149 of their prefix, whichever connection sends which.
    for (i, (engine, transport)) in
        [("raw", "fast"), ("raw", "resp-uds"), ("client", "fast")].into_iter().enumerate()
    {
        let prefix = format!("shop:seq{i}:");
        let args: Vec<String> = [
            "--engine",
            engine,
            "--transport",
            transport,
            "-s",
            &sock_arg,
            "-t",
            "set",
            "--sequential",
            "-n",
            "150",
            "-r",
            "400",
            "-c",
            "3",
            "-P",
            "7",
            "--json",
            "--key-prefix",
            &prefix,
        ]
        .into_iter()
        .map(String::from)
        .collect();
        let out = run(bench, args, env.clone()).await;
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{engine} {transport}: {stdout}{stderr}");
        let keys: Vec<String> = (0..400).map(|k| format!("{prefix}{k}")).collect();
        let mut exists = vec!["EXISTS"];
        exists.extend(keys.iter().map(String::as_str));
        assert_eq!(c.cmd(&exists).await.unwrap(), Value::Int(150), "{engine} {transport}");
        let mut first = vec!["EXISTS"];
        first.extend(keys[..150].iter().map(String::as_str));
        assert_eq!(c.cmd(&first).await.unwrap(), Value::Int(150), "{engine} {transport}");
    }
}
