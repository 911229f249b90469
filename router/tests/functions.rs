//! Function libraries across a cluster of node processes (one-connection cases, byte-compared
//! with redis-server, are in differential/functions.redis): a library loaded, restored or
//! deleted through one router is on (or gone from) every node, as FCALL through another router
//! on a key of each node shows; FUNCTION DUMP payloads move between redis-server and Shoal both
//! ways, byte-identical for the same libraries; a looping function answers FUNCTION STATS and
//! stops at FUNCTION KILL, while SCRIPT KILL names the KILL that would stop it; libraries
//! reach replicas and nodes that join, and survive a restart.

mod support;

use std::time::Duration;

use support::Raw;
use support::procs::{NodeProc, RouterProc};

const LIB: &str = "#!lua name=kv\n\
    redis.register_function('kv_set', function(keys, args) return redis.call('set', keys[1], args[1]) end)\n\
    redis.register_function{function_name='kv_get', callback=function(keys) return redis.call('get', keys[1]) end, \
    flags={'no-writes'}, description='reads one key'}\n";

const SPIN_LIB: &str = "#!lua name=spin\n\
    redis.register_function{function_name='spin', callback=function() local i = 0 while true do i = i + 1 end end, \
    flags={'no-writes'}}\n";

fn text(b: Vec<u8>) -> String {
    String::from_utf8_lossy(&b).into_owned()
}

/// One key the topology gives to each node.
fn a_key_per_node(topology: &shoal_wire::Topology) -> Vec<String> {
    let mut owners = Vec::new();
    let mut keys = Vec::new();
    for k in (0..10_000).map(|i| format!("fk{i}")) {
        let owner = topology.owner_of(shoal_wire::key_slot(k.as_bytes()));
        if !owners.contains(&owner) {
            owners.push(owner);
            keys.push(k);
        }
    }
    assert_eq!(keys.len(), 3, "three nodes own keys");
    keys
}

/// A bulk reply's payload.
fn bulk_payload(reply: &[u8]) -> Vec<u8> {
    let header = reply.iter().position(|&b| b == b'\n').expect("a bulk header") + 1;
    assert_eq!(reply[0], b'$', "a bulk reply: {:?}", String::from_utf8_lossy(reply));
    reply[header..reply.len() - 2].to_vec()
}

async fn cmd_bytes(c: &mut Raw, args: &[&[u8]]) -> Vec<u8> {
    c.send(&support::encode(args)).await;
    c.reply().await.expect("a reply")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libraries_reach_every_node_and_payloads_move_both_ways_with_redis() {
    let (_redis, redis_addr) = support::redis_server().await;
    let mut redis = Raw::connect(redis_addr).await;
    let dir = tempfile::tempdir().unwrap();
    let (nodes, list) = NodeProc::start_many(dir.path(), 3).await;
    let a = RouterProc::start(dir.path(), "router-a", &["--nodes", &list]).await;
    let b = RouterProc::start(dir.path(), "router-b", &["--nodes", &list]).await;
    let topology = shoal_wire::Topology::even(&nodes.iter().map(|n| n.addr.clone()).collect::<Vec<_>>());
    let keys = a_key_per_node(&topology);
    let (mut ca, mut cb) = (a.raw().await, b.raw().await);

    // A library loaded in redis-server, dumped there and restored through router a: every node
    // has it (FCALL through router b on a key of each node), and Shoal dumps the same bytes.
    assert_eq!(redis.cmd(&["FUNCTION", "FLUSH"]).await, b"+OK\r\n");
    assert_eq!(text(redis.cmd(&["FUNCTION", "LOAD", LIB]).await), "$2\r\nkv\r\n");
    let payload = bulk_payload(&redis.cmd(&["FUNCTION", "DUMP"]).await);
    assert_eq!(cmd_bytes(&mut ca, &[b"FUNCTION", b"RESTORE", &payload]).await, b"+OK\r\n");
    for k in &keys {
        assert_eq!(cb.cmd(&["FCALL", "kv_set", "1", k, "v"]).await, b"+OK\r\n", "node of {k}");
        assert_eq!(text(cb.cmd(&["FCALL_RO", "kv_get", "1", k]).await), "$1\r\nv\r\n", "node of {k}");
    }
    assert_eq!(bulk_payload(&cb.cmd(&["FUNCTION", "DUMP"]).await), payload, "the same payload");
    // (FUNCTION LIST is not compared: Redis lists a library's functions in its hash table's
    // order, which changes from one redis-server to the next.)
    assert_eq!(
        text(ca.cmd(&["FUNCTION", "RESTORE", &String::from_utf8_lossy(&payload)]).await),
        "-ERR DUMP payload version or checksum are wrong\r\n",
        "a payload mangled by a text conversion is refused"
    );
    assert_eq!(
        text(cmd_bytes(&mut ca, &[b"FUNCTION", b"RESTORE", &payload]).await),
        "-ERR Library kv already exists\r\n"
    );

    // The reverse: a library loaded through Shoal restores into redis-server.
    let second = "#!lua name=two\nredis.register_function('two', function() return 2 end)\n";
    assert_eq!(text(ca.cmd(&["FUNCTION", "LOAD", second]).await), "$3\r\ntwo\r\n");
    let both = bulk_payload(&cb.cmd(&["FUNCTION", "DUMP"]).await);
    assert_eq!(cmd_bytes(&mut redis, &[b"FUNCTION", b"RESTORE", &both, b"REPLACE"]).await, b"+OK\r\n");
    assert_eq!(text(redis.cmd(&["FCALL", "two", "0"]).await), ":2\r\n");
    assert_eq!(redis.cmd(&["FUNCTION", "STATS"]).await, cb.cmd(&["FUNCTION", "STATS"]).await);

    // Deleted through one router: gone from every node.
    assert_eq!(cb.cmd(&["FUNCTION", "DELETE", "kv"]).await, b"+OK\r\n");
    for k in &keys {
        assert_eq!(text(ca.cmd(&["FCALL", "kv_get", "1", k]).await), "-ERR Function not found\r\n");
    }
    assert_eq!(text(ca.cmd(&["FCALL", "two", "0"]).await), ":2\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_function_shows_in_stats_and_stops_at_function_kill() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, list) = NodeProc::start_many(dir.path(), 3).await;
    let a = RouterProc::start(dir.path(), "router-a", &["--nodes", &list]).await;
    let topology = shoal_wire::Topology::even(&nodes.iter().map(|n| n.addr.clone()).collect::<Vec<_>>());
    let keys = a_key_per_node(&topology);
    let mut admin = a.raw().await;
    assert_eq!(admin.cmd(&["CONFIG", "SET", "busy-reply-threshold", "300"]).await, b"+OK\r\n");
    assert_eq!(text(admin.cmd(&["FUNCTION", "LOAD", SPIN_LIB]).await), "$4\r\nspin\r\n");
    let mut spinner = a.raw().await;
    // Lowercase, as Valkey's harness sends it: FUNCTION STATS shows the client's own argv.
    spinner.send(&support::encode(&[b"fcall", b"spin", b"1", keys[0].as_bytes()])).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let stats = text(admin.cmd(&["FUNCTION", "STATS"]).await);
    assert!(
        stats.starts_with(&format!(
            "*4\r\n$14\r\nrunning_script\r\n*6\r\n$4\r\nname\r\n$4\r\nspin\r\n$7\r\ncommand\r\n*4\r\n$5\r\nfcall\r\n\
             $4\r\nspin\r\n$1\r\n1\r\n${}\r\n{}\r\n$11\r\nduration_ms\r\n:",
            keys[0].len(),
            keys[0]
        )),
        "{stats}"
    );
    assert_eq!(
        text(admin.cmd(&["GET", &keys[0]]).await),
        "-BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.\r\n"
    );
    assert_eq!(text(admin.cmd(&["SET", &keys[1], "x"]).await), "+OK\r\n", "other nodes serve");
    // Scripts and library changes queued behind it are answered BUSY, and never run.
    let busy =
        "-BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.\r\n";
    let started = std::time::Instant::now();
    assert_eq!(
        text(admin.cmd(&["EVAL", "redis.call('set', KEYS[1], 'ran') return 1", "1", &keys[0]]).await),
        busy
    );
    let another = "#!lua name=later\nredis.register_function('later', function() return 1 end)\n";
    assert_eq!(text(admin.cmd(&["FUNCTION", "LOAD", another]).await), busy);
    assert!(started.elapsed() < Duration::from_secs(2), "answered, not held");
    assert_eq!(
        text(admin.cmd(&["SCRIPT", "KILL"]).await),
        "-BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.\r\n"
    );
    assert_eq!(admin.cmd(&["FUNCTION", "KILL"]).await, b"+OK\r\n");
    let killed = text(spinner.reply_within(Duration::from_secs(5)).await.expect("the FCALL's reply"));
    assert!(killed.starts_with("-ERR Script killed by user with SCRIPT KILL..."), "{killed}");
    assert_eq!(text(admin.cmd(&["GET", &keys[0]]).await), "$-1\r\n", "the EVAL answered BUSY never ran");
    // The other nodes took the library; loaded again (REPLACE), it is on every node.
    assert_eq!(text(admin.cmd(&["FUNCTION", "LOAD", "REPLACE", another]).await), "$5\r\nlater\r\n");
    for k in &keys {
        assert_eq!(text(admin.cmd(&["FCALL", "later", "1", k]).await), ":1\r\n", "node of {k}");
    }
    assert_eq!(admin.cmd(&["FUNCTION", "KILL"]).await, b"-NOTBUSY No scripts in execution right now.\r\n");

    // A payload whose library never finishes loading is refused at the load timeout (Redis
    // would run it for ever), and scripts go on.
    let endless = bytes::Bytes::from_static(b"#!lua name=endless\nwhile true do end\n");
    let payload = shoal_node::script::registry::payload_of(&[endless]);
    let started = std::time::Instant::now();
    assert_eq!(
        text(cmd_bytes(&mut admin, &[b"FUNCTION", b"RESTORE", &payload]).await),
        "-ERR Error registering functions: ERR FUNCTION LOAD timeout\r\n"
    );
    assert!(started.elapsed() < Duration::from_secs(3), "bounded by the load timeout");
    assert_eq!(text(admin.cmd(&["EVAL", "return 7", "0"]).await), ":7\r\n");
}

/// FCALL of `counter` on `n` keys spread over every slot range: every node serving them has
/// the library.
async fn fcall_everywhere(c: &mut Raw, n: usize, what: &str) {
    for i in 0..n {
        let key = format!("fc:{i}");
        let reply = text(c.cmd(&["FCALL", "counter", "1", &key]).await);
        assert!(reply.starts_with(':'), "{what}: FCALL on {key}: {reply}");
    }
}

const COUNTER: &str = "#!lua name=counter\nredis.register_function('counter', function(keys) return redis.call('incr', keys[1]) end)\n";

/// A library follows the data: replicas get it from their primary (a promoted one serves it),
/// nodes that join by scaling get it with the slots they take, and a node that restarts from
/// its data directory has it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libraries_reach_replicas_new_nodes_and_survive_a_restart() {
    let router = support::router(&["--embedded-nodes", "2", "--replicas", "1"]).await;
    let mut c = Raw::connect(router.resp_addr()).await;
    assert_eq!(text(c.cmd(&["FUNCTION", "LOAD", COUNTER]).await), "$7\r\ncounter\r\n");
    let states = router.node_states().await;
    assert_eq!(states.len(), 4);
    support::wait_until(Duration::from_secs(10), || {
        states.iter().all(|n| !n.store.libraries.get().bytes.is_empty())
    })
    .await;
    assert_eq!(c.cmd(&["SHOAL", "FAILOVER", "0"]).await, b"+OK\r\n");
    fcall_everywhere(&mut c, 200, "after a failover").await;
    assert_eq!(c.cmd(&["SHOAL", "SCALE", "3"]).await, b"+OK\r\n");
    support::wait_scaled(&mut c, 3).await;
    fcall_everywhere(&mut c, 200, "after growing to 3").await;
    let states = router.node_states().await;
    assert_eq!(states.len(), 6);
    support::wait_until(Duration::from_secs(10), || {
        states.iter().all(|n| !n.store.libraries.get().bytes.is_empty())
    })
    .await;
    // Deleted: gone from replicas too.
    assert_eq!(c.cmd(&["FUNCTION", "DELETE", "counter"]).await, b"+OK\r\n");
    support::wait_until(Duration::from_secs(10), || {
        states.iter().all(|n| n.store.libraries.get().bytes.is_empty())
    })
    .await;
    router.shutdown().await;

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap().to_string();
    let router = support::router(&["--embedded-nodes", "3", "--data-dir", &d]).await;
    let mut c = Raw::connect(router.resp_addr()).await;
    assert_eq!(text(c.cmd(&["FUNCTION", "LOAD", COUNTER]).await), "$7\r\ncounter\r\n");
    fcall_everywhere(&mut c, 50, "before the restart").await;
    drop(c);
    router.shutdown().await; // each node writes a last snapshot, and its libraries beside it
    let router = support::router(&["--embedded-nodes", "3", "--data-dir", &d]).await;
    let mut c = Raw::connect(router.resp_addr()).await;
    let stats = text(c.cmd(&["FUNCTION", "STATS"]).await);
    assert!(stats.ends_with("$15\r\nlibraries_count\r\n:1\r\n$15\r\nfunctions_count\r\n:1\r\n"), "{stats}");
    assert_eq!(text(c.cmd(&["FCALL", "counter", "1", "fc:0"]).await), ":2\r\n", "data and library back");
    fcall_everywhere(&mut c, 50, "after the restart").await;
    router.shutdown().await;
}
