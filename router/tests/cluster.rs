//! Black-box tests of a 3-node cluster through real clients: the `redis` crate, raw RESP sockets
//! and redis-cli.

mod support;

use std::collections::HashSet;
use std::process::Command;

use redis::AsyncCommands;
use support::{Raw, cluster, redis_conn};

/// Keys owned by node `pos`, generated until `n` are found.
fn keys_on(router: &shoal_router::Router, pos: usize, n: usize) -> Vec<String> {
    let routing = router.state.backend.routing();
    (0..).map(|i| format!("key:{i}")).filter(|k| routing.locate(k.as_bytes()).0 == pos).take(n).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_land_on_all_three_nodes() {
    let router = cluster().await;
    let mut con = redis_conn(router.resp_addr()).await;
    for i in 0..300 {
        let _: () = con.set(format!("user:{i}"), i).await.unwrap();
    }
    let per_node: Vec<usize> = router.node_states().await.iter().map(|n| n.store.len()).collect();
    assert_eq!(per_node.iter().sum::<usize>(), 300);
    assert!(per_node.iter().all(|&n| n > 50), "every node holds a fair share: {per_node:?}");

    let nodes: String = redis::cmd("SHOAL").arg("NODES").query_async(&mut con).await.unwrap();
    let lines: Vec<&str> = nodes.lines().collect();
    assert_eq!(lines.len(), 3, "{nodes}");
    for (line, count) in lines.iter().zip(&per_node) {
        assert!(line.contains(&format!("keys={count} ")), "{line} vs {count}");
        assert!(line.ends_with("reachable=yes"), "{line}");
    }
    let slot: i64 =
        redis::cmd("SHOAL").arg("KEYSLOT").arg("{user1000}.following").query_async(&mut con).await.unwrap();
    assert_eq!(slot, 3443, "same answer as CLUSTER KEYSLOT");
    let dbsize: i64 = redis::cmd("DBSIZE").query_async(&mut con).await.unwrap();
    assert_eq!(dbsize, 300);
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_node_mget_mset_del_keep_argument_order() {
    let router = cluster().await;
    let mut con = redis_conn(router.resp_addr()).await;
    let keys: Vec<String> = (0..3).flat_map(|pos| keys_on(&router, pos, 4)).collect();
    let pairs: Vec<(String, String)> = keys.iter().map(|k| (k.clone(), format!("v-{k}"))).collect();
    let _: () = con.mset(&pairs).await.unwrap();
    // Interleave keys from different nodes and a missing key.
    let mut asked: Vec<String> =
        vec![keys[8].clone(), "missing".into(), keys[0].clone(), keys[4].clone(), keys[1].clone()];
    asked.push(keys[11].clone());
    let got: Vec<Option<String>> = con.mget(&asked).await.unwrap();
    let want: Vec<Option<String>> =
        asked.iter().map(|k| (k != "missing").then(|| format!("v-{k}"))).collect();
    assert_eq!(got, want);
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&keys[0])
        .arg(&keys[0])
        .arg(&keys[5])
        .arg("nope")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(exists, 3, "duplicates count, as in Redis");
    let deleted: i64 = con.del(&[&keys[0], &keys[5], &keys[10], "nope"]).await.unwrap();
    assert_eq!(deleted, 3);
    let left: i64 = redis::cmd("DBSIZE").query_async(&mut con).await.unwrap();
    assert_eq!(left, 9);
    // MSETNX across nodes refuses as a whole when one key exists.
    let refused: i64 = redis::cmd("MSETNX")
        .arg("fresh1")
        .arg("1")
        .arg(&keys[1])
        .arg("x")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(refused, 0);
    let fresh: Option<String> = con.get("fresh1").await.unwrap();
    assert_eq!(fresh, None);
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelines_answer_in_order() {
    let router = cluster().await;
    let mut con = redis_conn(router.resp_addr()).await;
    let mut pipe = redis::pipe();
    for i in 0..500 {
        pipe.set(format!("p{i}"), i).ignore();
        pipe.incr(format!("p{i}"), 1);
        pipe.get(format!("p{i}"));
    }
    let out: Vec<(i64, String)> = {
        let flat: Vec<redis::Value> = pipe.query_async(&mut con).await.unwrap();
        flat.chunks(2)
            .map(|c| (redis::from_redis_value(&c[0]).unwrap(), redis::from_redis_value(&c[1]).unwrap()))
            .collect()
    };
    for (i, (incr, get)) in out.iter().enumerate() {
        assert_eq!(*incr, i as i64 + 1);
        assert_eq!(get, &(i + 1).to_string());
    }
    // A raw pipeline in a single write, across nodes.
    let mut raw = Raw::connect(router.resp_addr()).await;
    let mut bytes = Vec::new();
    for i in 0..200 {
        bytes.extend(support::encode(&[b"ECHO", i.to_string().as_bytes()]));
    }
    raw.send(&bytes).await;
    for i in 0..200 {
        let r = raw.reply().await.unwrap();
        assert_eq!(r, format!("${}\r\n{i}\r\n", i.to_string().len()).into_bytes());
    }
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp3_after_hello() {
    let router = cluster().await;
    let mut raw = Raw::connect(router.resp_addr()).await;
    assert_eq!(raw.cmd(&["GET", "missing"]).await, b"$-1\r\n");
    let hello = raw.cmd(&["HELLO", "3"]).await;
    let text = String::from_utf8_lossy(&hello);
    assert!(text.starts_with("%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n"), "{text}");
    assert!(text.contains("$5\r\nproto\r\n:3\r\n"), "{text}");
    assert_eq!(raw.cmd(&["GET", "missing"]).await, b"_\r\n");
    let info = raw.cmd(&["INFO", "keyspace"]).await;
    assert!(info.starts_with(b"="), "INFO is a verbatim string in RESP3");
    raw.cmd(&["HELLO", "2"]).await;
    assert_eq!(raw.cmd(&["GET", "missing"]).await, b"$-1\r\n");

    // The redis crate negotiating RESP3 itself.
    let client = redis::Client::open(format!("redis://{}/?protocol=resp3", router.resp_addr())).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = con.set("r3", "x").await.unwrap();
    let v: Option<String> = con.get("r3").await.unwrap();
    assert_eq!(v.as_deref(), Some("x"));
    let none: Option<String> = con.get("nope").await.unwrap();
    assert_eq!(none, None);
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_gates_everything_but_auth_hello_quit_reset() {
    let router = support::router(&["--embedded-nodes", "3", "--requirepass", "s3cret"]).await;
    let mut raw = Raw::connect(router.resp_addr()).await;
    assert_eq!(raw.cmd(&["GET", "k"]).await, b"-NOAUTH Authentication required.\r\n");
    assert_eq!(raw.cmd(&["PING"]).await, b"-NOAUTH Authentication required.\r\n");
    assert_eq!(raw.cmd(&["NOPE"]).await, b"-ERR unknown command 'NOPE', with args beginning with: \r\n");
    assert!(raw.cmd(&["HELLO", "3"]).await.starts_with(b"-NOAUTH HELLO must be called"));
    assert_eq!(
        raw.cmd(&["AUTH", "wrong"]).await,
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(
        raw.cmd(&["AUTH", "bob", "s3cret"]).await,
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(
        raw.cmd(&["HELLO", "3", "AUTH", "default", "wrong"]).await,
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    let page = support::http_raw(
        router.http_addr(),
        b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\nAuthorization: Bearer s3cret\r\n\r\n",
    )
    .await;
    assert_eq!(support::metric_sum(&page, "shoal_router_auth_failures_total"), 3.0, "AUTH and HELLO AUTH");
    assert!(raw.cmd(&["HELLO", "3", "AUTH", "default", "s3cret"]).await.starts_with(b"%7\r\n"));
    assert_eq!(raw.cmd(&["SET", "k", "v"]).await, b"+OK\r\n");
    assert_eq!(raw.cmd(&["RESET"]).await, b"+RESET\r\n");
    assert_eq!(raw.cmd(&["GET", "k"]).await, b"-NOAUTH Authentication required.\r\n", "RESET logs out");
    assert_eq!(raw.cmd(&["AUTH", "s3cret"]).await, b"+OK\r\n");
    assert_eq!(raw.cmd(&["GET", "k"]).await, b"$1\r\nv\r\n");

    // Before AUTH, requests are held to 10 arguments ...
    let mut raw = Raw::connect(router.resp_addr()).await;
    raw.send(b"*11\r\n").await;
    assert_eq!(raw.until_close().await, b"-ERR Protocol error: unauthenticated multibulk length\r\n");
    // ... of 16 KiB each ...
    let mut raw = Raw::connect(router.resp_addr()).await;
    raw.send(b"*2\r\n$4\r\nAUTH\r\n$20000\r\n").await;
    assert_eq!(raw.until_close().await, b"-ERR Protocol error: unauthenticated bulk length\r\n");
    // ... and 1 MiB of buffered input (an endless inline line is cut at 64 KiB first).
    let mut raw = Raw::connect(router.resp_addr()).await;
    raw.send(&vec![b'a'; 70 * 1024]).await;
    assert_eq!(raw.until_close().await, b"-ERR Protocol error: too big inline request\r\n");

    // The redis crate with a password in the URL.
    let client = redis::Client::open(format!("redis://:s3cret@{}/", router.resp_addr())).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let v: String = con.get("k").await.unwrap();
    assert_eq!(v, "v");
    router.shutdown().await;
}

async fn connect_from(src: &str, dst: std::net::SocketAddr) -> Raw {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{src}:0").parse().unwrap()).unwrap();
    Raw::from_stream(socket.connect(dst).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protected_mode_refuses_other_addresses_without_a_password() {
    // Redis trusts only 127.0.0.1 and ::1; 127.0.0.2 stands in for a remote client.
    let router = cluster().await;
    let mut raw = connect_from("127.0.0.2", router.resp_addr()).await;
    let out = raw.until_close().await;
    assert!(
        out.starts_with(b"-DENIED Shoal is running in protected mode"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    let mut local = Raw::connect(router.resp_addr()).await;
    assert_eq!(local.cmd(&["PING"]).await, b"+PONG\r\n");
    router.shutdown().await;

    let router = support::router(&["--embedded-nodes", "1", "--protected-mode", "no"]).await;
    let mut raw = connect_from("127.0.0.2", router.resp_addr()).await;
    assert_eq!(raw.cmd(&["PING"]).await, b"+PONG\r\n");
    router.shutdown().await;

    let router = support::router(&["--embedded-nodes", "1", "--requirepass", "pw"]).await;
    let mut raw = connect_from("127.0.0.2", router.resp_addr()).await;
    assert_eq!(
        raw.cmd(&["PING"]).await,
        b"-NOAUTH Authentication required.\r\n",
        "a password lifts protected mode"
    );
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_with_mode_set_before_listen() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shoal.sock");
    // A stale socket file from a crashed run is replaced.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let p = path.to_str().unwrap().to_string();
    let router =
        support::router(&["--embedded-nodes", "3", "--unix-socket", &p, "--unix-socket-perm", "700"]).await;
    let meta = std::fs::metadata(&path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    let client = redis::Client::open(format!("redis+unix://{p}")).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = con.set("via-uds", "yes").await.unwrap();
    let v: String = con.get("via-uds").await.unwrap();
    assert_eq!(v, "yes");
    let mut tcp = redis_conn(router.resp_addr()).await;
    let v: String = tcp.get("via-uds").await.unwrap();
    assert_eq!(v, "yes", "same data over TCP");
    router.shutdown().await;
    assert!(!path.exists(), "socket removed on shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_enforced_and_configurable() {
    let router = support::router(&[
        "--embedded-nodes",
        "2",
        "--maxclients",
        "2",
        "--proto-max-bulk-len",
        "1kb",
        "--client-output-buffer-limit",
        "4kb",
    ])
    .await;
    let mut a = Raw::connect(router.resp_addr()).await;
    let mut b = Raw::connect(router.resp_addr()).await;
    assert_eq!(a.cmd(&["PING"]).await, b"+PONG\r\n");
    assert_eq!(b.cmd(&["PING"]).await, b"+PONG\r\n");
    let mut c = Raw::connect(router.resp_addr()).await;
    assert_eq!(c.until_close().await, b"-ERR max number of clients reached\r\n");
    drop(b);
    support::wait_until(std::time::Duration::from_secs(5), || router.state.connected_clients() < 2).await;

    let mut big = Raw::connect(router.resp_addr()).await;
    big.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2000\r\n").await;
    assert_eq!(big.until_close().await, b"-ERR Protocol error: invalid bulk length\r\n");

    // A reply over the output limit disconnects the client; others carry on.
    let value = "x".repeat(1000);
    for i in 0..8 {
        assert_eq!(a.cmd(&["SET", &format!("k{i}"), &value]).await, b"+OK\r\n");
    }
    let mut greedy = Raw::connect(router.resp_addr()).await;
    greedy.send(&support::encode(&[b"MGET", b"k0", b"k1", b"k2", b"k3", b"k4", b"k5", b"k6", b"k7"])).await;
    assert!(greedy.until_close().await.is_empty());
    assert_eq!(a.cmd(&["PING"]).await, b"+PONG\r\n");
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_is_a_happy_client() {
    let router = cluster().await;
    let port = router.resp_addr().port().to_string();
    let cli = |args: &[&str]| {
        let out =
            Command::new("redis-cli").args(["-p", &port]).args(args).output().expect("redis-cli installed");
        assert!(out.status.success(), "{:?}", out);
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(cli(&["SET", "greeting", "hello world"]), "OK\n");
    assert_eq!(cli(&["GET", "greeting"]), "hello world\n");
    assert_eq!(cli(&["--raw", "INCRBYFLOAT", "f", "10.5"]), "10.5\n");
    assert_eq!(cli(&["-3", "GET", "nothing"]), "\n", "RESP3 null");
    assert!(cli(&["INFO", "server"]).contains("redis_version:"));
    assert_eq!(cli(&["SHOAL", "KEYSLOT", "foo"]), "12182\n");
    // Commands on stdin, one per line, like a script.
    let mut child = Command::new("redis-cli")
        .args(["-p", &port])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"MSET a 1 b 2 c 3\nMGET a b c\nDEL a b c\n").unwrap();
    let out = String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap();
    assert_eq!(out, "OK\n1\n2\n3\n3\n");
    // Mass insertion with --pipe (redis-cli checks the echo it appends at the end).
    let mut proto = Vec::new();
    for i in 0..2000 {
        proto.extend(support::encode(&[b"SET", format!("mass:{i}").as_bytes(), b"v"]));
    }
    let mut child = Command::new("redis-cli")
        .args(["-p", &port, "--pipe"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&proto).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("errors: 0, replies: 2000"), "{text}");
    // A full SCAN with redis-cli's iterator finds every key exactly once.
    let scanned = cli(&["--scan", "--pattern", "mass:*"]);
    let keys: HashSet<&str> = scanned.lines().collect();
    assert_eq!(keys.len(), 2000);
    assert_eq!(scanned.lines().count(), 2000);
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_binary_values_round_trip() {
    // The reply (128 MiB back) gets no size allowance, and debug builds are slow: a roomy deadline.
    let router = support::router(&["--embedded-nodes", "3", "--deadline-ms", "30000"]).await;
    let mut con = redis_conn(router.resp_addr()).await;
    // 128 MiB of every byte value, through RESP, the batched gRPC stream and the store, and back.
    let value: Vec<u8> = (0..128 * 1024 * 1024).map(|i: usize| (i % 251) as u8).collect();
    let _: () = con.set("big", &value).await.unwrap();
    let back: Vec<u8> = con.get("big").await.unwrap();
    assert!(back == value, "value came back intact");
    let len: usize = con.strlen("big").await.unwrap();
    assert_eq!(len, value.len());
    let tail: Vec<u8> =
        redis::cmd("GETRANGE").arg("big").arg(-3).arg(-1).query_async(&mut con).await.unwrap();
    assert_eq!(tail, value[value.len() - 3..]);
    router.shutdown().await;
}
