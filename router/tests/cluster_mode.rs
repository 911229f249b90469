//! `--cluster-mode emulated`: CLUSTER's replies beside a one-node redis-server 7.0.15 running in
//! cluster mode (ids, addresses and ports masked, everything else byte for byte, RESP2 and
//! RESP3), Redis's standalone errors with the mode off, and the cluster clients redis-py
//! `RedisCluster`, Lettuce `RedisClusterClient`, go-redis `ClusterClient` and ioredis `Cluster`
//! working through a 3-node Shoal.

mod support;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use support::{Raw, free_port};

/// A redis-server in cluster mode owning every slot (its nodes.conf in `dir`), once its state
/// is ok.
async fn redis_cluster_node(dir: &tempfile::TempDir) -> (support::Proc, SocketAddr) {
    let conf = dir.path().join("nodes.conf");
    let bus = free_port().to_string();
    let (proc, addr) = support::redis_server_with(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        conf.to_str().unwrap(),
        "--cluster-port",
        &bus,
        "--dir",
        dir.path().to_str().unwrap(),
    ])
    .await;
    let mut c = Raw::connect(addr).await;
    assert_eq!(c.cmd(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]).await, b"+OK\r\n");
    let start = std::time::Instant::now();
    while !String::from_utf8_lossy(&c.cmd(&["CLUSTER", "INFO"]).await).contains("cluster_state:ok") {
        assert!(start.elapsed() < Duration::from_secs(15), "redis-server's cluster state never became ok");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (proc, addr)
}

/// `reply` with `from`'s id, address and port written as `to`'s: the only things two
/// one-node clusters may differ in. Ids are 40 bytes both; ports and the ip are rewritten
/// with their RESP length where they are bulk strings.
fn masked(reply: &[u8], from: &Node, to: &Node) -> Vec<u8> {
    let text = String::from_utf8_lossy(reply).into_owned();
    let bulk = |s: &str| format!("${}\r\n{s}\r\n", s.len());
    let text = text
        .replace(&from.id, &to.id)
        .replace(&format!(":{}\r\n", from.port), &format!(":{}\r\n", to.port))
        .replace(&bulk(&from.ip), &bulk(&to.ip))
        .replace(
            &format!(" {}:{}@{} ", from.ip, from.port, from.bus),
            &format!(" {}:{}@{} ", to.ip, to.port, to.bus),
        );
    // A verbatim string's length changes with the address in it.
    match text.strip_prefix('=') {
        Some(rest) => {
            let body = &rest[rest.find("\r\n").unwrap() + 2..rest.len() - 2];
            format!("={}\r\n{body}\r\n", body.len()).into_bytes()
        }
        None => match text.strip_prefix('$') {
            Some(rest) if rest.contains(" myself,master ") => {
                let body = &rest[rest.find("\r\n").unwrap() + 2..rest.len() - 2];
                format!("${}\r\n{body}\r\n", body.len()).into_bytes()
            }
            _ => text.into_bytes(),
        },
    }
}

/// What identifies a cluster node in replies.
struct Node {
    id: String,
    ip: String,
    port: u16,
    bus: String,
}

async fn node_of(c: &mut Raw) -> Node {
    let nodes = String::from_utf8_lossy(&c.cmd(&["CLUSTER", "NODES"]).await).into_owned();
    let line = nodes.lines().nth(1).unwrap_or_else(|| panic!("{nodes:?}")).to_string();
    let mut fields = line.trim_start_matches("txt:").split(' ');
    let id = fields.next().unwrap().to_string();
    let (addr, bus) = fields.next().unwrap().split_once('@').unwrap();
    let (ip, port) = addr.rsplit_once(':').unwrap();
    Node { id, ip: ip.to_string(), port: port.parse().unwrap(), bus: bus.to_string() }
}

/// Every CLUSTER subcommand the emulation answers, read-only and errors alike.
const SCRIPT: &[&[&str]] = &[
    &["CLUSTER", "INFO"],
    &["CLUSTER", "NODES"],
    &["CLUSTER", "SLOTS"],
    &["CLUSTER", "SHARDS"],
    &["CLUSTER", "LINKS"],
    &["CLUSTER", "KEYSLOT", "foo"],
    &["CLUSTER", "KEYSLOT", "{user1000}.following"],
    &["CLUSTER", "KEYSLOT"],
    &["CLUSTER", "COUNTKEYSINSLOT", "12182"],
    &["CLUSTER", "COUNTKEYSINSLOT", "16384"],
    &["CLUSTER", "COUNTKEYSINSLOT", "-1"],
    &["CLUSTER", "COUNTKEYSINSLOT", "x"],
    &["CLUSTER", "GETKEYSINSLOT", "12182", "0"],
    &["CLUSTER", "GETKEYSINSLOT", "12182", "-1"],
    &["CLUSTER", "GETKEYSINSLOT", "16384", "1"],
    &["CLUSTER", "GETKEYSINSLOT", "x", "1"],
    &["CLUSTER", "REPLICAS", "0123456789012345678901234567890123456789"],
    &["CLUSTER", "COUNT-FAILURE-REPORTS", "nobody"],
    &["CLUSTER", "MYID", "extra"],
    &["CLUSTER", "NOSUCH"],
    &["CLUSTER", "HELP"],
    &["CLUSTER"],
    &["ASKING"],
    &["READONLY"],
    &["READWRITE"],
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulated_cluster_answers_as_a_one_node_redis_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let (_redis, redis_addr) = redis_cluster_node(&dir).await;
    let router = support::router(&["--embedded-nodes", "3", "--cluster-mode", "emulated"]).await;
    for protocol in ["2", "3"] {
        let mut r = Raw::connect(redis_addr).await;
        let mut s = Raw::connect(router.resp_addr()).await;
        r.cmd(&["HELLO", protocol]).await;
        s.cmd(&["HELLO", protocol]).await;
        let (rn, sn) = (node_of(&mut r).await, node_of(&mut s).await);
        // redis-server has not learned its address (no peer told it): it says "". The router
        // says the address the client reached.
        assert_eq!((sn.ip.as_str(), sn.port), ("127.0.0.1", router.resp_addr().port()));
        assert_eq!(sn.bus, (router.resp_addr().port() as u32 + 10_000).to_string());
        assert!(sn.id.len() == 40 && sn.id.bytes().all(|b| b.is_ascii_hexdigit()), "{}", sn.id);
        for args in SCRIPT {
            let want = masked(&r.cmd(args).await, &rn, &sn);
            let got = s.cmd(args).await;
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&want),
                "RESP{protocol} {args:?}"
            );
        }
        let myid = s.cmd(&["CLUSTER", "MYID"]).await;
        assert_eq!(myid, format!("$40\r\n{}\r\n", sn.id).into_bytes());
        assert_eq!(s.cmd(&["CLUSTER", "REPLICAS", &sn.id]).await, b"*0\r\n");
        assert_eq!(s.cmd(&["CLUSTER", "COUNT-FAILURE-REPORTS", &sn.id]).await, b":0\r\n");
    }

    // The same keys in both: the counts and key lists of a slot agree (the keys live on
    // several of Shoal's nodes; a slot's on one).
    let mut r = Raw::connect(redis_addr).await;
    let mut s = Raw::connect(router.resp_addr()).await;
    for i in 0..600 {
        let key = format!("{{tag{}}}:{i}", i % 3);
        r.cmd(&["SET", &key, "v"]).await;
        s.cmd(&["SET", &key, "v"]).await;
    }
    for tag in ["tag0", "tag1", "tag2"] {
        let slot =
            String::from_utf8_lossy(&s.cmd(&["CLUSTER", "KEYSLOT", tag]).await)[1..].trim().to_string();
        let count = s.cmd(&["CLUSTER", "COUNTKEYSINSLOT", &slot]).await;
        assert_eq!(count, b":200\r\n");
        assert_eq!(count, r.cmd(&["CLUSTER", "COUNTKEYSINSLOT", &slot]).await);
        let listed = |reply: Vec<u8>| {
            let mut keys: Vec<String> = String::from_utf8_lossy(&reply)
                .split("\r\n")
                .filter(|l| l.starts_with('{'))
                .map(str::to_string)
                .collect();
            keys.sort();
            keys
        };
        let got = listed(s.cmd(&["CLUSTER", "GETKEYSINSLOT", &slot, "1000"]).await);
        assert_eq!(got.len(), 200);
        assert_eq!(got, listed(r.cmd(&["CLUSTER", "GETKEYSINSLOT", &slot, "1000"]).await));
        assert_eq!(listed(s.cmd(&["CLUSTER", "GETKEYSINSLOT", &slot, "7"]).await).len(), 7);
    }
    let info = String::from_utf8_lossy(&s.cmd(&["INFO", "cluster"]).await).into_owned();
    assert!(info.contains("cluster_enabled:1"), "{info}");
    let server = String::from_utf8_lossy(&s.cmd(&["INFO", "server"]).await).into_owned();
    assert!(server.contains("redis_mode:cluster"), "{server}");
    router.shutdown().await;

    // Announced elsewhere (a Service, a NAT): that address, whatever the client reached.
    let router = support::router(&[
        "--cluster-mode",
        "emulated",
        "--cluster-announce-host",
        "10.1.2.3",
        "--cluster-announce-port",
        "7000",
    ])
    .await;
    let mut s = Raw::connect(router.resp_addr()).await;
    let n = node_of(&mut s).await;
    assert_eq!((n.ip.as_str(), n.port, n.bus.as_str()), ("10.1.2.3", 7000, "17000"));
    let slots = String::from_utf8_lossy(&s.cmd(&["CLUSTER", "SLOTS"]).await).into_owned();
    assert!(slots.contains("$8\r\n10.1.2.3\r\n:7000\r\n"), "{slots}");
    router.shutdown().await;
}

/// With the mode off, CLUSTER and ASKING answer as a standalone redis-server does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_commands_off_answer_as_standalone_redis() {
    let (_redis, redis_addr) = support::redis_server().await;
    let router = support::cluster().await;
    let mut r = Raw::connect(redis_addr).await;
    let mut s = Raw::connect(router.resp_addr()).await;
    for args in SCRIPT.iter().filter(|a| a[0] != "READONLY" && a[0] != "READWRITE") {
        let want = r.cmd(args).await;
        assert_eq!(String::from_utf8_lossy(&s.cmd(args).await), String::from_utf8_lossy(&want), "{args:?}");
    }
    // Shoal's own use of READONLY (replica reads) stays: Redis refuses it standalone.
    assert_eq!(s.cmd(&["READONLY"]).await, b"+OK\r\n");
    let info = String::from_utf8_lossy(&s.cmd(&["INFO", "cluster"]).await).into_owned();
    assert!(info.contains("cluster_enabled:0"), "{info}");
    router.shutdown().await;
}

/// redis-py's `RedisCluster` against `--cluster-mode emulated` (RESP2 and RESP3): it discovers
/// one node, and keys of every slot, pipelines and multi-key commands on one slot work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_cluster_client_works() {
    let router = support::router(&["--embedded-nodes", "3", "--cluster-mode", "emulated"]).await;
    let port = router.resp_addr().port();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/redis_py_cluster.py");
    let out = tokio::task::spawn_blocking(move || {
        Command::new("python3").arg(&script).arg(port.to_string()).output().expect("python3 runs")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "redis-py RedisCluster checks failed\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The keys went to every one of Shoal's nodes.
    let per_node: Vec<usize> = router.node_states().await.iter().map(|n| n.store.len()).collect();
    assert!(per_node.iter().all(|&n| n > 0), "{per_node:?}");
    router.shutdown().await;
}

/// Lettuce's `RedisClusterClient` against `--cluster-mode emulated`: it reads the topology from
/// CLUSTER NODES, finds one master of every slot at the router, and keys of every slot,
/// multi-key commands it splits by slot and a pipeline work (`tests/java/LettuceClusterCheck.java`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lettuce_cluster_client_works() {
    let (_classes, classpath) = support::clients::compile_lettuce_check("LettuceClusterCheck").await;
    let router = support::router(&["--embedded-nodes", "3", "--cluster-mode", "emulated"]).await;
    let port = [router.resp_addr().port().to_string()];
    let (ok, out) =
        support::clients::run_java(&classpath, "LettuceClusterCheck", &port, Duration::from_secs(180)).await;
    assert!(ok, "Lettuce cluster checks failed:\n{out}");
    router.shutdown().await;
}

/// go-redis's `ClusterClient` against `--cluster-mode emulated` (RESP2 and RESP3;
/// `tests/go/clusterclient`): the topology from CLUSTER SLOTS, keys of every slot, a pipeline it
/// groups by node, MULTI/EXEC and WATCH on one slot, the per-master helpers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_redis_cluster_client_works() {
    let router = support::router(&["--embedded-nodes", "3", "--cluster-mode", "emulated"]).await;
    let mut check = support::clients::goredis_cluster_check();
    check.arg(router.resp_addr().port().to_string());
    let (ok, out) = support::clients::run_check(check, Duration::from_secs(120)).await;
    assert!(ok, "go-redis cluster checks failed:\n{out}");
    let per_node: Vec<usize> = router.node_states().await.iter().map(|n| n.store.len()).collect();
    assert!(per_node.iter().all(|&n| n > 0), "{per_node:?}");
    router.shutdown().await;
}

/// ioredis's `Cluster` against `--cluster-mode emulated` (`tests/node/ioredis_cluster.js`):
/// the topology from CLUSTER SLOTS, keys of every slot, a pipeline, MULTI/EXEC and EVAL on one
/// slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ioredis_cluster_client_works() {
    let router = support::router(&["--embedded-nodes", "3", "--cluster-mode", "emulated"]).await;
    let mut check = support::clients::node_check("ioredis_cluster.js");
    check.arg(router.resp_addr().port().to_string());
    let (ok, out) = support::clients::run_check(check, Duration::from_secs(120)).await;
    assert!(ok, "ioredis cluster checks failed:\n{out}");
    let per_node: Vec<usize> = router.node_states().await.iter().map(|n| n.store.len()).collect();
    assert!(per_node.iter().all(|&n| n > 0), "{per_node:?}");
    router.shutdown().await;
}
