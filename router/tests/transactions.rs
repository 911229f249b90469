//! MULTI/EXEC and WATCH with several clients (one-connection cases are in
//! differential/transactions.redis): WATCH races byte-compared with redis-server, isolation of
//! concurrent transactions, large values inside a transaction, and transactions while slots move.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use support::Raw;

/// Two connections (the watcher and another client) run the same steps on redis-server and on
/// Shoal; every reply must be byte-identical. Each step is (connection, command).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_races_match_redis() {
    let (_redis, redis_addr) = support::redis_server().await;
    let router = support::cluster().await;
    let scenarios: &[&[(usize, &str)]] = &[
        // Another client's write to the watched key: EXEC answers null, nothing runs.
        &[
            (0, "SET {w}k 1"),
            (0, "WATCH {w}k"),
            (1, "SET {w}k 2"),
            (0, "MULTI"),
            (0, "SET {w}x 1"),
            (0, "EXEC"),
            (0, "EXISTS {w}x"),
        ],
        // A write to another key: EXEC runs.
        &[(0, "WATCH {w}k"), (1, "SET {w}other 1"), (0, "MULTI"), (0, "INCR {w}k"), (0, "EXEC")],
        // Typed values: HSET, LPUSH, ZADD, SADD on the watched key.
        &[(0, "WATCH {w}h"), (1, "HSET {w}h f v"), (0, "MULTI"), (0, "HGETALL {w}h"), (0, "EXEC")],
        &[(0, "WATCH {w}l"), (1, "LPUSH {w}l a"), (0, "MULTI"), (0, "LLEN {w}l"), (0, "EXEC")],
        &[(0, "WATCH {w}z"), (1, "ZADD {w}z 1 a"), (0, "MULTI"), (0, "ZCARD {w}z"), (0, "EXEC")],
        // DEL, EXPIRE, RENAME onto the key, FLUSHALL: changes.
        &[(0, "SET {w}d 1"), (0, "WATCH {w}d"), (1, "DEL {w}d"), (0, "MULTI"), (0, "GET {w}d"), (0, "EXEC")],
        &[
            (0, "SET {w}t 1"),
            (0, "WATCH {w}t"),
            (1, "EXPIRE {w}t 100"),
            (0, "MULTI"),
            (0, "TTL {w}t"),
            (0, "EXEC"),
        ],
        &[
            (0, "SET {w}src 1"),
            (0, "WATCH {w}dst"),
            (1, "RENAME {w}src {w}dst"),
            (0, "MULTI"),
            (0, "GET {w}dst"),
            (0, "EXEC"),
        ],
        &[(0, "SET {w}f 1"), (0, "WATCH {w}f"), (1, "FLUSHALL"), (0, "MULTI"), (0, "GET {w}f"), (0, "EXEC")],
        // Reads by another client change nothing.
        &[
            (0, "SET {w}r 1"),
            (0, "WATCH {w}r"),
            (1, "GET {w}r"),
            (1, "EXISTS {w}r"),
            (0, "MULTI"),
            (0, "GET {w}r"),
            (0, "EXEC"),
        ],
        // UNWATCH forgets; DISCARD forgets; a second WATCH adds keys.
        &[(0, "WATCH {w}u"), (0, "UNWATCH"), (1, "SET {w}u 1"), (0, "MULTI"), (0, "GET {w}u"), (0, "EXEC")],
        &[
            (0, "WATCH {w}v"),
            (0, "MULTI"),
            (0, "DISCARD"),
            (1, "SET {w}v 1"),
            (0, "MULTI"),
            (0, "GET {w}v"),
            (0, "EXEC"),
        ],
        &[
            (0, "WATCH {w}a"),
            (0, "WATCH {w}b"),
            (1, "SET {w}b 1"),
            (0, "MULTI"),
            (0, "GET {w}a"),
            (0, "EXEC"),
        ],
        // Two watchers of one key: one client's EXEC writes it, the other's then fails.
        &[
            (0, "WATCH {w}s"),
            (1, "WATCH {w}s"),
            (0, "MULTI"),
            (0, "SET {w}s 0"),
            (0, "EXEC"),
            (1, "MULTI"),
            (1, "SET {w}s 1"),
            (1, "EXEC"),
            (1, "GET {w}s"),
        ],
        // A TTL that runs out between WATCH and EXEC.
        &[
            (0, "SET {w}e 1 PX 40"),
            (0, "WATCH {w}e"),
            (2, "sleep"),
            (0, "MULTI"),
            (0, "GET {w}e"),
            (0, "EXEC"),
        ],
    ];
    compare_scenarios(redis_addr, router.resp_addr(), scenarios).await;
    router.shutdown().await;
}

/// WATCH and MULTI over keys of several nodes (no hash tags: `a`, `b`, `c` and `x` are spread
/// over the 3 nodes), byte-compared with redis-server: a change to any watched key, on any node,
/// aborts the whole; otherwise every node's part is applied, each command answered in its place
/// (a WRONGTYPE among them as Redis answers it); queueing errors abort the whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_over_several_nodes_match_redis() {
    let (_redis, redis_addr) = support::redis_server().await;
    let router = support::cluster().await;
    let mut c = Raw::connect(router.resp_addr()).await;
    assert_eq!(support::nodes_of(&mut c, &["a", "b", "c", "x"]).await, 3, "the keys are on every node");
    let scenarios: &[&[(usize, &str)]] = &[
        &[(0, "MULTI"), (0, "SET a 1"), (0, "INCR b"), (0, "LPUSH c x"), (0, "GET a"), (0, "EXEC")],
        &[
            (0, "MGET a b c"),
            (0, "SET a 1"),
            (0, "MULTI"),
            (0, "MSET a 2 b 2 x 2"),
            (0, "MGET a b x"),
            (0, "EXEC"),
        ],
        // A command error inside is that command's reply; the others are applied.
        &[
            (0, "LPUSH c x"),
            (0, "MULTI"),
            (0, "SET a 1"),
            (0, "INCR c"),
            (0, "SET x 1"),
            (0, "EXEC"),
            (0, "MGET a x"),
        ],
        // Watched keys on several nodes, one changed by another client: nothing runs.
        &[
            (0, "WATCH a b c"),
            (1, "SET c changed"),
            (0, "MULTI"),
            (0, "SET a 1"),
            (0, "SET x 1"),
            (0, "EXEC"),
            (0, "MGET a c x"),
        ],
        // ... none changed: it runs.
        &[(0, "WATCH a b c"), (1, "GET c"), (0, "MULTI"), (0, "SET a 1"), (0, "SET x 1"), (0, "EXEC")],
        // A watched key on a node the transaction does not write to.
        &[
            (0, "WATCH x"),
            (1, "DEL x"),
            (1, "SET x 5"),
            (0, "MULTI"),
            (0, "SET a 1"),
            (0, "EXEC"),
            (0, "GET a"),
        ],
        // Queueing errors abort the whole (EXECABORT), whatever the nodes.
        &[(0, "MULTI"), (0, "SET a 1"), (0, "SET b"), (0, "SET x 1"), (0, "EXEC"), (0, "EXISTS a x")],
        // Keyspace-wide commands inside: every node takes part.
        &[
            (0, "SET a 1"),
            (0, "SET b 1"),
            (0, "MULTI"),
            (0, "DBSIZE"),
            (0, "SET c 1"),
            (0, "DBSIZE"),
            (0, "EXEC"),
        ],
        &[(0, "SET a 1"), (0, "MULTI"), (0, "FLUSHALL"), (0, "SET b 2"), (0, "EXEC"), (0, "DBSIZE")],
    ];
    compare_scenarios(redis_addr, router.resp_addr(), scenarios).await;
    router.shutdown().await;
}

/// Runs each scenario on redis-server and on Shoal (two connections each, after a FLUSHALL; a
/// step of connection 2 is a 100 ms pause) and asserts byte-identical replies.
async fn compare_scenarios(
    redis_addr: std::net::SocketAddr,
    shoal_addr: std::net::SocketAddr,
    scenarios: &[&[(usize, &str)]],
) {
    for (n, steps) in scenarios.iter().enumerate() {
        let mut redis = [Raw::connect(redis_addr).await, Raw::connect(redis_addr).await];
        let mut shoal = [Raw::connect(shoal_addr).await, Raw::connect(shoal_addr).await];
        redis[0].cmd(&["FLUSHALL"]).await;
        shoal[0].cmd(&["FLUSHALL"]).await;
        for &(who, line) in steps.iter() {
            if who == 2 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            let args: Vec<&str> = line.split(' ').collect();
            let want = redis[who].cmd(&args).await;
            let got = shoal[who].cmd(&args).await;
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&want),
                "scenario {n}, client {who}: {line}"
            );
        }
    }
}

/// Transfers between two keys run as transactions from several clients at once, while other
/// clients read both keys in a transaction: every read sees the same total (no transaction's ops
/// interleave with another's), and no transfer is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transactions_do_not_interleave() {
    transfers_do_not_interleave(["{bank}a", "{bank}b", "{bank}transfers"]).await;
}

/// The same with the three keys on different nodes: no reader, itself a transaction over those
/// nodes, ever sees a transfer applied on one node and not yet on another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transactions_over_several_nodes_do_not_interleave() {
    transfers_do_not_interleave(["bank-a", "bank-b", "bank-transfers"]).await;
}

async fn transfers_do_not_interleave(keys: [&'static str; 3]) {
    let [key_a, key_b, key_n] = keys;
    let router = support::cluster().await;
    let addr = router.resp_addr();
    let mut admin = Raw::connect(addr).await;
    if !key_a.starts_with('{') {
        assert_eq!(support::nodes_of(&mut admin, &keys).await, 3, "the keys share a node");
    }
    admin.cmd(&["SET", key_a, "1000"]).await;
    admin.cmd(&["SET", key_b, "1000"]).await;
    let done = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4 {
        writers.push(tokio::spawn(async move {
            let mut c = Raw::connect(addr).await;
            for i in 0..150 {
                let (from, to) = if (w + i) % 2 == 0 { (key_a, key_b) } else { (key_b, key_a) };
                let exec =
                    multi_exec(&mut c, &[&["DECRBY", from, "7"], &["INCRBY", to, "7"], &["INCR", key_n]])
                        .await;
                assert!(exec.starts_with(b"*3\r\n:"), "{}", String::from_utf8_lossy(&exec));
            }
        }));
    }
    let mut readers = Vec::new();
    for _ in 0..2 {
        let done = done.clone();
        readers.push(tokio::spawn(async move {
            let mut c = Raw::connect(addr).await;
            let mut reads = 0u64;
            while !done.load(Ordering::Relaxed) && reads < 5000 {
                let exec =
                    String::from_utf8(multi_exec(&mut c, &[&["GET", key_a], &["GET", key_b]]).await).unwrap();
                let nums: Vec<i64> = exec.split("\r\n").filter_map(|l| l.parse().ok()).collect();
                assert_eq!(nums.len(), 2, "{exec}");
                assert_eq!(nums[0] + nums[1], 2000, "a read saw half a transfer: {exec}");
                reads += 1;
            }
            reads
        }));
    }
    let reads = join_then_stop(writers, &done, readers).await;
    assert!(reads > 10, "readers ran alongside the writers ({reads} reads)");
    assert_eq!(admin.cmd(&["GET", key_n]).await, support::bulk("600"));
    let a = admin.cmd(&["GET", key_a]).await;
    let b = admin.cmd(&["GET", key_b]).await;
    let num = |r: &[u8]| String::from_utf8_lossy(r).lines().nth(1).unwrap().parse::<i64>().unwrap();
    assert_eq!(num(&a) + num(&b), 2000);
    router.shutdown().await;
}

/// LMOVE and SMOVE between keys of different nodes (Redis Cluster answers CROSSSLOT) run as one
/// transaction over both nodes: while movers pass list elements round three lists and set
/// members between two sets, readers (transactions over the same nodes) always count every
/// element exactly once, and at the end each element is in exactly one place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moves_between_nodes_are_atomic() {
    const LISTS: [&str; 3] = ["ring-a", "ring-b", "ring-c"];
    const SETS: [&str; 2] = ["pool-a", "pool-b"];
    let router = support::cluster().await;
    let addr = router.resp_addr();
    let mut admin = Raw::connect(addr).await;
    let keys = [LISTS[0], LISTS[1], LISTS[2], SETS[0], SETS[1]];
    assert!(support::nodes_of(&mut admin, &keys).await > 1, "the keys share a node");
    let elements: Vec<String> = (0..60).map(|i| format!("e{i}")).collect();
    let members: Vec<String> = (0..30).map(|i| format!("m{i}")).collect();
    let mut push = vec!["RPUSH", LISTS[0]];
    push.extend(elements.iter().map(String::as_str));
    admin.cmd(&push).await;
    let mut add = vec!["SADD", SETS[0]];
    add.extend(members.iter().map(String::as_str));
    admin.cmd(&add).await;
    let done = Arc::new(AtomicBool::new(false));
    let mut movers = Vec::new();
    for w in 0..3usize {
        movers.push(tokio::spawn(async move {
            let mut c = Raw::connect(addr).await;
            for i in 0..100usize {
                let from = (w + i) % 3;
                let moved = c.cmd(&["LMOVE", LISTS[from], LISTS[(from + 1) % 3], "RIGHT", "LEFT"]).await;
                assert!(
                    moved.starts_with(b"$") || moved == b"$-1\r\n",
                    "{}",
                    String::from_utf8_lossy(&moved)
                );
                let member = format!("m{}", (w * 7 + i) % 30);
                let (src, dst) = if i % 2 == 0 { (SETS[0], SETS[1]) } else { (SETS[1], SETS[0]) };
                let moved = c.cmd(&["SMOVE", src, dst, &member]).await;
                assert!(moved == b":1\r\n" || moved == b":0\r\n", "{}", String::from_utf8_lossy(&moved));
            }
        }));
    }
    let mut readers = Vec::new();
    for _ in 0..2 {
        let done = done.clone();
        readers.push(tokio::spawn(async move {
            let mut c = Raw::connect(addr).await;
            let mut reads = 0u64;
            while !done.load(Ordering::Relaxed) && reads < 5000 {
                let counts: Vec<[&str; 2]> =
                    LISTS.iter().map(|l| ["LLEN", *l]).chain(SETS.iter().map(|s| ["SCARD", *s])).collect();
                let counts: Vec<&[&str]> = counts.iter().map(|c| &c[..]).collect();
                let exec = String::from_utf8(multi_exec(&mut c, &counts).await).unwrap();
                let n: Vec<i64> = exec.lines().skip(1).map(|l| l[1..].parse().unwrap()).collect();
                assert_eq!(n[0] + n[1] + n[2], 60, "a read saw an element in two lists or in none: {exec}");
                assert_eq!(n[3] + n[4], 30, "a read saw a member in two sets or in none: {exec}");
                reads += 1;
            }
            reads
        }));
    }
    let reads = join_then_stop(movers, &done, readers).await;
    assert!(reads > 10, "readers ran alongside the movers ({reads} reads)");
    let mut found = Vec::new();
    for l in LISTS {
        let range = String::from_utf8(admin.cmd(&["LRANGE", l, "0", "-1"]).await).unwrap();
        found.extend(range.lines().skip(2).step_by(2).map(str::to_string));
    }
    found.sort();
    let mut want = elements.clone();
    want.sort();
    assert_eq!(found, want, "every element in exactly one list");
    let union = String::from_utf8(admin.cmd(&["SUNION", SETS[0], SETS[1]]).await).unwrap();
    assert_eq!(union.lines().skip(2).step_by(2).count(), 30);
    let in_a = admin.cmd(&["SCARD", SETS[0]]).await;
    let in_b = admin.cmd(&["SCARD", SETS[1]]).await;
    let num = |r: &[u8]| String::from_utf8_lossy(&r[1..]).trim().parse::<i64>().unwrap();
    assert_eq!(num(&in_a) + num(&in_b), 30, "every member in exactly one set");
    router.shutdown().await;
}

/// Forty clients of one router each run transactions over the same two node processes (the
/// shape users deploy), one in flight: every EXEC commits. The router queues them for their
/// nodes in order of arrival (`router/src/keylocks.rs`); left to wait at the nodes' gates (which
/// serve whichever prepare asks next, and give up at 250 ms) some waited past their deadline
/// and answered TRYAGAIN (loadtest/bench/transactions.py did, at 50 clients).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_transactions_over_the_same_two_nodes_all_commit() {
    use support::procs::NodeProc;
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, list) = NodeProc::start_many(dir.path(), 3).await;
    let router = support::router(&["--nodes", &list]).await;
    every_transaction_commits(&[router.resp_addr()]).await;
    router.shutdown().await;
}

/// 40 clients, spread over `routers`, each run 25 MULTI/EXECs of INCRs of two keys on two
/// nodes; every EXEC must commit and every increment be applied once.
async fn every_transaction_commits(routers: &[std::net::SocketAddr]) {
    const CLIENTS: usize = 40;
    const EACH: usize = 25;
    let mut admin = Raw::connect(routers[0]).await;
    let (a, b) = ("tally-a", "tally-b2");
    assert_eq!(support::nodes_of(&mut admin, &[a, b]).await, 2, "the keys share a node");
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        let addr = routers[i % routers.len()];
        clients.push(tokio::spawn(async move {
            let mut c = Raw::connect(addr).await;
            for _ in 0..EACH {
                let exec = multi_exec(&mut c, &[&["INCR", a], &["INCR", b]]).await;
                let exec = String::from_utf8_lossy(&exec).into_owned();
                assert!(exec.starts_with("*2\r\n:"), "an EXEC did not commit: {exec}");
            }
        }));
    }
    for c in clients {
        tokio::time::timeout(Duration::from_secs(120), c).await.expect("clients finish").unwrap();
    }
    let n = (CLIENTS * EACH).to_string();
    for key in [a, b] {
        let got = String::from_utf8(admin.cmd(&["GET", key]).await).unwrap();
        assert_eq!(got, format!("${}\r\n{n}\r\n", n.len()), "every transaction applied once on {key}");
    }
}

/// The same over two router processes, half the clients on each: the routers' turns order only
/// their own transactions, so here the two routers' prepares meet at the nodes' gates, which
/// must serve both in time (every EXEC commits, none runs out of its deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_of_two_routers_transactions_over_the_same_two_nodes_all_commit() {
    use support::procs::{NodeProc, RouterProc};
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, list) = NodeProc::start_many(dir.path(), 3).await;
    let rt0 = RouterProc::start(dir.path(), "rt0", &["--nodes", &list]).await;
    let rt1 = RouterProc::start(dir.path(), "rt1", &["--nodes", &list]).await;
    every_transaction_commits(&[rt0.resp, rt1.resp]).await;
}

/// A router killed (SIGKILL) while clients pipeline transactions over several nodes through it:
/// every transaction is applied on all of its nodes or on none (the nodes finish what the router
/// left among themselves: a prepared node lets go at its lease, a participant whose coordinator
/// committed applies its part), every EXEC a client saw succeed is applied, and the nodes serve
/// another router's transactions again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_killed_mid_transaction_leaves_every_transaction_whole() {
    use support::procs::{NodeProc, RouterProc};
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, list) = NodeProc::start_many(dir.path(), 3).await;
    let doomed = RouterProc::start(dir.path(), "doomed", &["--nodes", &list]).await;
    let survivor = support::router(&["--nodes", &list]).await;
    let pairs = support::Pairs { n: 20, spread: true };
    let mut admin = Raw::connect(survivor.resp_addr()).await;
    support::transfer_pairs(&mut admin, pairs).await;
    let (acked, sent) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut clients = Vec::new();
    for w in 0..8usize {
        let (acked, sent, addr) = (acked.clone(), sent.clone(), doomed.resp);
        clients.push(tokio::spawn(async move {
            let mut c = Raw::connect(addr).await;
            let started = Instant::now();
            let mut i = w;
            // Until the router dies (its connection closes), at most 20 s: 4 transactions per
            // write, their replies read after.
            while started.elapsed() < Duration::from_secs(20) {
                let mut request = Vec::new();
                for _ in 0..4 {
                    let key = |k| support::pair_key(i % pairs.n, k, true);
                    request.extend(support::encode(&[b"MULTI"]));
                    request.extend(support::encode(&[b"DECRBY", key("a").as_bytes(), b"1"]));
                    request.extend(support::encode(&[b"INCRBY", key("b").as_bytes(), b"1"]));
                    request.extend(support::encode(&[b"INCR", key("n").as_bytes()]));
                    request.extend(support::encode(&[b"EXEC"]));
                    i += 8;
                }
                c.send(&request).await;
                sent.fetch_add(4, Ordering::Relaxed);
                for _ in 0..4 {
                    for _ in 0..4 {
                        if c.reply().await.is_none() {
                            return;
                        }
                    }
                    match c.reply().await {
                        Some(exec) if exec.starts_with(b"*3\r\n") => {
                            acked.fetch_add(1, Ordering::Relaxed);
                        }
                        Some(other) => panic!("EXEC answered {}", String::from_utf8_lossy(&other)),
                        None => return,
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    doomed.signal("-KILL");
    for c in clients {
        c.await.unwrap();
    }
    let (acked, sent) = (acked.load(Ordering::Relaxed), sent.load(Ordering::Relaxed));
    assert!(
        acked > 20 && sent > acked,
        "transactions ran, and some were in flight at the kill ({acked} of {sent})"
    );
    // The nodes finish what the router left: within a lease (1 s) and a question to the coordinator.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let counted = support::counted_transfers(&mut admin, pairs, "transaction").await;
    let logs: String = (0..3)
        .map(|i| std::fs::read_to_string(dir.path().join(format!("node{i}.log"))).unwrap_or_default())
        .collect();
    // What the nodes finished by themselves (1 to 3 of each per run on a 2-core machine).
    eprintln!(
        "participants decided by their coordinator: {}; coordinators aborted at their lease: {}",
        logs.matches("decided by its coordinator").count(),
        logs.matches("no decision within its lease").count()
    );
    assert!(counted as u64 >= acked, "{counted} applied, yet {acked} were acknowledged");
    assert!(counted as u64 <= sent, "{counted} applied of {sent} sent");
    // Nothing is held: another router's transaction over the same nodes runs.
    let keys: Vec<String> = ["a", "b", "n"].iter().map(|k| support::pair_key(0, k, true)).collect();
    let exec = multi_exec(&mut admin, &[&["GET", &keys[0]], &["GET", &keys[1]], &["GET", &keys[2]]]).await;
    assert!(exec.starts_with(b"*3\r\n"), "{}", String::from_utf8_lossy(&exec));
    survivor.shutdown().await;
}

/// A value larger than a transfer piece inside a transaction: the transaction op travels in
/// pieces and its reply comes back whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_values_inside_a_transaction() {
    let router = support::cluster().await;
    let mut c = Raw::connect(router.resp_addr()).await;
    let value = vec![b'x'; 3 << 20];
    let mut request = support::encode(&[b"MULTI"]);
    request.extend(support::encode(&[b"SET", b"{big}v", &value]));
    request.extend(support::encode(&[b"APPEND", b"{big}v", b"yz"]));
    request.extend(support::encode(&[b"GET", b"{big}v"]));
    request.extend(support::encode(&[b"EXEC"]));
    c.send(&request).await;
    for _ in 0..4 {
        c.reply().await.expect("queued");
    }
    let exec = c.reply().await.expect("exec");
    let len = value.len() + 2;
    let mut want = format!("*3\r\n+OK\r\n:{len}\r\n${len}\r\n").into_bytes();
    want.extend(&value);
    want.extend(b"yz\r\n");
    assert!(exec == want, "EXEC reply of {} bytes differs", exec.len());
    router.shutdown().await;
}

/// Transactions (transfers with a counter, and WATCH-guarded increments) keep running while the
/// cluster scales 3 → 5 → 2: each either applies whole or not at all, the totals add up, and
/// every EXEC a client saw succeed is counted exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_while_slots_move() {
    transfers_while_slots_move(false).await;
}

/// The same over keys of several nodes (`acctPa`, `acctPb`, `acctPn` without a hash tag): each
/// transaction is prepared on every node it touches and committed on all of them or none, while
/// slots move under it (`moved` and `try_again` abort what was prepared and go again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_over_several_nodes_while_slots_move() {
    transfers_while_slots_move(true).await;
}

async fn transfers_while_slots_move(spread: bool) {
    let router = support::router(&["--embedded-nodes", "3", "--deadline-ms", "5000"]).await;
    let addr = router.resp_addr();
    let mut admin = Raw::connect(addr).await;
    // Filler (12 MB), so that slots take a while to move and transactions meet them moving.
    support::fill(&mut admin, 3000, 4096).await;
    const PAIRS: usize = 40;
    let pairs = support::Pairs { n: PAIRS, spread };
    support::transfer_pairs(&mut admin, pairs).await;
    let stop = Arc::new(AtomicBool::new(false));
    let applied = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for w in 0..3usize {
        let (stop, applied) = (stop.clone(), applied.clone());
        clients.push(tokio::spawn(async move {
            let mut c = Raw::connect(addr).await;
            let mut errors = Vec::new();
            let started = Instant::now();
            let mut i = w;
            while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(120) {
                let p = i % PAIRS;
                i += 3;
                let key = |k| support::pair_key(p, k, spread);
                let (a, b, n) = (key("a"), key("b"), key("n"));
                // WATCH-guarded read-modify-write, as clients write optimistic locking.
                c.cmd(&["WATCH", &a]).await;
                let balance = c.cmd(&["GET", &a]).await;
                let balance: i64 = String::from_utf8_lossy(&balance).lines().nth(1).unwrap().parse().unwrap();
                let balance = (balance - 1).to_string();
                let exec = multi_exec(&mut c, &[&["SET", &a, &balance], &["INCR", &b], &["INCR", &n]]).await;
                if exec.starts_with(b"*3\r\n") {
                    applied.fetch_add(1, Ordering::Relaxed);
                } else if exec != b"*-1\r\n" {
                    errors.push(String::from_utf8_lossy(&exec).into_owned());
                }
            }
            errors
        }));
    }
    support::scale_during_transfers(
        &mut admin,
        router.http_addr(),
        clients,
        &stop,
        &applied,
        pairs,
        "transaction",
    )
    .await;
    router.shutdown().await;
}

/// CLIENT LIST shows an open transaction as Redis does: flag `x` and `multi=<queued>`, back to
/// `multi=-1` after EXEC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_list_shows_open_transactions_like_redis() {
    let (_redis, redis_addr) = support::redis_server().await;
    let router = support::cluster().await;
    for addr in [redis_addr, router.resp_addr()] {
        let mut t = Raw::connect(addr).await;
        let mut other = Raw::connect(addr).await;
        let id = String::from_utf8(t.cmd(&["CLIENT", "ID"]).await).unwrap();
        let id = id.trim_start_matches(':').trim_end().to_string();
        let line = |reply: Vec<u8>| {
            let s = String::from_utf8(reply).unwrap();
            let flags = s.split(' ').find(|f| f.starts_with("flags=")).unwrap().to_string();
            let multi = s.split(' ').find(|f| f.starts_with("multi=")).unwrap().to_string();
            (flags, multi)
        };
        t.cmd(&["MULTI"]).await;
        t.cmd(&["SET", "{c}a", "1"]).await;
        t.cmd(&["GET", "{c}a"]).await;
        let open = line(other.cmd(&["CLIENT", "LIST", "ID", &id]).await);
        assert_eq!(open, ("flags=x".to_string(), "multi=2".to_string()), "{addr}");
        t.cmd(&["EXEC"]).await;
        let closed = line(other.cmd(&["CLIENT", "LIST", "ID", &id]).await);
        assert_eq!(closed, ("flags=N".to_string(), "multi=-1".to_string()), "{addr}");
    }
    router.shutdown().await;
}

/// MULTI, `cmds`, EXEC in one write on `c`: EXEC's reply (MULTI's and the queued replies read past).
async fn multi_exec(c: &mut Raw, cmds: &[&[&str]]) -> Vec<u8> {
    let mut request = support::encode(&[b"MULTI"]);
    for cmd in cmds {
        let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
        request.extend(support::encode(&args));
    }
    request.extend(support::encode(&[b"EXEC"]));
    c.send(&request).await;
    for _ in 0..=cmds.len() {
        c.reply().await.expect("queued");
    }
    c.reply().await.expect("exec")
}

/// Waits for `workers`, then tells `readers` to stop (`done`) and returns how many reads they made.
async fn join_then_stop(
    workers: Vec<tokio::task::JoinHandle<()>>,
    done: &AtomicBool,
    readers: Vec<tokio::task::JoinHandle<u64>>,
) -> u64 {
    for w in workers {
        w.await.unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let mut reads = 0;
    for r in readers {
        reads += r.await.unwrap();
    }
    reads
}
