//! Scripts over keys of several nodes (Redis Cluster answers CROSSSLOT or "non local key"): their
//! replies byte-compared with redis-server, declared keys and keys a script names itself (as
//! BullMQ and channels-redis do); and their atomicity while many clients run them at once, beside
//! transactions over the same nodes, each reader seeing every script whole.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use support::Raw;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Each step runs on redis-server and on a 3-node Shoal (after a FLUSHALL, scripts flushed);
/// every reply must be byte-identical.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_over_several_nodes_match_redis() {
    let (_redis, redis_addr) = support::redis_server().await;
    let router = support::cluster().await;
    let mut redis = Raw::connect(redis_addr).await;
    let mut shoal = Raw::connect(router.resp_addr()).await;
    assert_eq!(support::nodes_of(&mut shoal, &["acct:a", "acct:b", "acct:c"]).await, 3);
    let move_money = "local v = tonumber(redis.call('GET', KEYS[1]) or '0') \
        if v < tonumber(ARGV[1]) then return redis.error_reply('ERR not enough') end \
        redis.call('DECRBY', KEYS[1], ARGV[1]) redis.call('INCRBY', KEYS[2], ARGV[1]) \
        redis.call('RPUSH', KEYS[3], KEYS[1] .. '>' .. KEYS[2]) \
        return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2]), redis.call('LLEN', KEYS[3])}";
    // Keys named in ARGV, declared nowhere (channels-redis's EVAL with 0 keys).
    let undeclared = "redis.call('SET', ARGV[1], ARGV[3]) redis.call('SET', ARGV[2], ARGV[3]) \
        redis.call('SADD', 'seen', ARGV[1], ARGV[2]) \
        return {redis.call('MGET', ARGV[1], ARGV[2]), redis.call('SCARD', 'seen'), redis.call('DEL', ARGV[1], ARGV[2])}";
    // Reads on other nodes first, then a write (the script reaches before it writes).
    let read_then_write = "local n = 0 for i = 1, #ARGV do n = n + tonumber(redis.call('GET', ARGV[i]) or '0') end \
        redis.call('SET', 'total', n) return n";
    // A failing call mid-way: what was written before stands, as on Redis.
    let fails_midway = "redis.call('SET', KEYS[1], 'before') redis.call('LPUSH', KEYS[2], 'x') \
        redis.call('INCR', KEYS[2]) redis.call('SET', KEYS[3], 'after') return 1";
    let pcall = "redis.call('SET', KEYS[1], 1) local r = redis.pcall('INCR', KEYS[2]) \
        redis.call('SET', KEYS[3], 3) return r";
    let steps: Vec<Vec<&str>> = vec![
        vec!["SET", "acct:a", "100"],
        vec!["EVAL", move_money, "3", "acct:a", "acct:b", "acct:c", "30"],
        vec!["EVAL", move_money, "3", "acct:b", "acct:c", "acct:a", "20"],
        vec!["EVAL", move_money, "3", "acct:c", "acct:a", "acct:b", "500"],
        vec!["MGET", "acct:a", "acct:b", "acct:c"],
        vec!["EVAL", undeclared, "0", "job:1", "job:2", "v1"],
        vec!["EVAL", undeclared, "0", "job:3", "job:1", "v2"],
        vec!["MSET", "q:1", "5", "job:1", "7", "la", "11"],
        vec!["EVAL", read_then_write, "0", "q:1", "job:1", "la", "nothing"],
        vec!["EVAL", read_then_write, "0", "la", "q:1"],
        vec!["GET", "total"],
        vec!["EVAL", fails_midway, "3", "a", "b", "c"],
        vec!["MGET", "a", "c"],
        vec!["LRANGE", "b", "0", "-1"],
        vec!["EVAL", pcall, "3", "x", "b", "c"],
        vec!["MGET", "x", "c"],
        vec!["EVAL_RO", "return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2])}", "2", "x", "q:1"],
        vec!["EVAL_RO", "return redis.call('SET', KEYS[1], 1)", "2", "x", "q:1"],
        vec!["SCRIPT", "LOAD", move_money],
        vec!["EVALSHA", "f7d6c5e0b0e8e1f0a0b0c0d0e0f0a0b0c0d0e0f0", "2", "a", "b"],
        vec!["DBSIZE"],
    ];
    for (n, step) in steps.iter().enumerate() {
        if n == 0 {
            redis.cmd(&["FLUSHALL"]).await;
            shoal.cmd(&["FLUSHALL"]).await;
        }
        let want = redis.cmd(step).await;
        let got = shoal.cmd(step).await;
        assert_eq!(text(&got), text(&want), "step {n}: {step:?}");
    }
    // EVALSHA of the script loaded above, over keys of three nodes.
    let sha = text(&shoal.cmd(&["SCRIPT", "LOAD", move_money]).await);
    let sha = sha.lines().nth(1).unwrap().to_string();
    for c in [&mut redis, &mut shoal] {
        c.cmd(&["MSET", "acct:a", "10", "acct:b", "0"]).await;
    }
    let step = ["EVALSHA", &sha, "3", "acct:a", "acct:b", "acct:c", "4"];
    assert_eq!(text(&shoal.cmd(&step).await), text(&redis.cmd(&step).await));
    // A library function over keys of several nodes.
    let lib = "#!lua name=spread\nredis.register_function('swap', function(keys) \
        local a = redis.call('GET', keys[1]) redis.call('SET', keys[1], redis.call('GET', keys[2])) \
        redis.call('SET', keys[2], a) return {redis.call('GET', keys[1]), redis.call('GET', keys[2])} end)";
    for step in [
        vec!["FUNCTION", "LOAD", "REPLACE", lib],
        vec!["MSET", "q:1", "one", "job:2", "two"],
        vec!["FCALL", "swap", "2", "q:1", "job:2"],
        vec!["MGET", "q:1", "job:2"],
    ] {
        assert_eq!(text(&shoal.cmd(&step).await), text(&redis.cmd(&step).await), "{step:?}");
    }
    // A transaction holding scripts over keys of several nodes (RQ's and kombu's pipelines), with
    // WATCHes on several nodes: run whole, or not at all when a watched key changed.
    let mut redis2 = Raw::connect(redis_addr).await;
    let mut shoal2 = Raw::connect(router.resp_addr()).await;
    let steps: Vec<(usize, Vec<&str>)> = vec![
        (0, vec!["MSET", "acct:a", "50", "acct:b", "5", "acct:c", "0"]),
        (0, vec!["MULTI"]),
        (0, vec!["SET", "x", "in-tx"]),
        (0, vec!["EVAL", move_money, "3", "acct:a", "acct:b", "acct:c", "10"]),
        (0, vec!["EVAL", undeclared, "0", "job:1", "job:2", "v3"]),
        (0, vec!["INCR", "q:1"]),
        (0, vec!["MGET", "acct:a", "x"]),
        (0, vec!["EXEC"]),
        (0, vec!["WATCH", "acct:b", "la"]),
        (0, vec!["MULTI"]),
        (0, vec!["EVAL", move_money, "3", "acct:a", "acct:b", "acct:c", "1"]),
        (0, vec!["DEL", "x"]),
        (0, vec!["EXEC"]),
        (0, vec!["WATCH", "acct:b", "la"]),
        (1, vec!["SET", "la", "changed"]),
        (0, vec!["MULTI"]),
        (0, vec!["EVAL", move_money, "3", "acct:a", "acct:b", "acct:c", "1"]),
        (0, vec!["DEL", "x"]),
        (0, vec!["EXEC"]),
        (0, vec!["MGET", "acct:a", "acct:b", "acct:c", "x", "la"]),
        // Only scripts inside (each placed on the first of its keys' nodes, all on one).
        (0, vec!["MULTI"]),
        (0, vec!["EVAL", move_money, "3", "acct:b", "acct:a", "acct:c", "2"]),
        (0, vec!["EVAL", move_money, "3", "acct:b", "acct:c", "acct:a", "1"]),
        (0, vec!["EXEC"]),
        (0, vec!["MGET", "acct:a", "acct:b", "acct:c"]),
    ];
    for (n, (who, step)) in steps.iter().enumerate() {
        let (want, got) = if *who == 0 {
            (redis.cmd(step).await, shoal.cmd(step).await)
        } else {
            (redis2.cmd(step).await, shoal2.cmd(step).await)
        };
        assert_eq!(text(&got), text(&want), "transaction step {n}: {step:?}");
    }
    // One command over keys of two nodes inside a script (BullMQ's RPOPLPUSH from a queue's wait
    // list to its active list, its RENAME on pause): done in steps under the script's holds, with
    // Redis's replies and errors. `{acct:a}...` lives with acct:a, and so on: three nodes.
    let call = "return redis.call(unpack(ARGV))";
    let (la, lb, str_a, none_a) = ("{acct:a}:l", "{acct:b}:l", "{acct:a}:str", "{acct:a}:none");
    let (sa, sb, sc) = ("{acct:a}:s", "{acct:b}:s", "{acct:c}:s");
    let (ra, rb, rc) = ("{acct:a}:r", "{acct:b}:r", "{acct:c}:r");
    let (za, zb, zc) = ("{acct:a}:z", "{acct:b}:z", "{acct:c}:z");
    let steps: Vec<Vec<&str>> = vec![
        vec!["RPUSH", la, "1", "2", "3"],
        vec!["RPUSH", lb, "x"],
        vec!["SET", str_a, "s"],
        vec!["EVAL", call, "2", la, lb, "RPOPLPUSH", la, lb],
        vec!["EVAL", call, "0", "LMOVE", la, lb, "LEFT", "RIGHT"],
        vec!["EVAL", call, "0", "LMOVE", la, lb, "UP", "RIGHT"],
        vec!["EVAL", call, "0", "RPOPLPUSH", str_a, lb],
        vec!["EVAL", call, "0", "RPOPLPUSH", lb, str_a],
        vec!["EVAL", call, "0", "RPOPLPUSH", none_a, lb],
        vec!["LRANGE", la, "0", "-1"],
        vec!["LRANGE", lb, "0", "-1"],
        vec!["EVAL", call, "0", "LMOVE", la, lb, "RIGHT", "LEFT"],
        vec!["EVAL", call, "0", "RPOPLPUSH", la, lb],
        vec!["EXISTS", la],
        vec!["LRANGE", lb, "0", "-1"],
        vec!["SADD", sa, "m1", "m2"],
        vec!["EVAL", call, "0", "SMOVE", sa, sb, "m1"],
        vec!["EVAL", call, "0", "SMOVE", sa, sb, "nope"],
        vec!["EVAL", call, "0", "SMOVE", sa, str_a, "m2"],
        vec!["EVAL", call, "0", "SMOVE", none_a, sb, "m2"],
        vec!["SISMEMBER", sb, "m1"],
        vec!["SCARD", sa],
        vec!["SET", ra, "v", "EX", "1000"],
        vec!["EVAL", call, "0", "RENAME", ra, rb],
        vec!["MGET", ra, rb],
        vec!["EVAL", call, "0", "RENAME", ra, rb],
        vec!["SET", rc, "there"],
        vec!["EVAL", call, "0", "RENAMENX", rb, rc],
        vec!["EVAL", call, "0", "COPY", rb, rc],
        vec!["EVAL", call, "0", "COPY", rb, rc, "REPLACE"],
        vec!["MGET", rb, rc],
        vec!["EVAL", call, "0", "SUNIONSTORE", sc, sa, sb],
        vec!["SCARD", sc],
        vec!["EVAL", call, "0", "SINTERCARD", "2", sa, sc],
        vec!["EVAL", call, "0", "SUNIONSTORE", sc, sa, str_a],
        vec!["RPUSH", la, "p", "q"],
        vec!["EVAL", call, "0", "LMPOP", "3", none_a, sb, la, "LEFT", "COUNT", "5"],
        vec!["EVAL", call, "0", "LMPOP", "2", none_a, la, "LEFT"],
        vec!["ZADD", za, "1", "a", "2", "b"],
        vec!["ZADD", zb, "5", "b"],
        vec!["EVAL", call, "0", "ZUNIONSTORE", zc, "2", za, zb, "WEIGHTS", "2", "1"],
        vec!["ZRANGE", zc, "0", "-1", "WITHSCORES"],
        vec!["EVAL", call, "0", "ZINTER", "2", za, zb, "WITHSCORES"],
        // Blocking commands never block in a script: over several nodes, key by key (or a move).
        vec!["RPUSH", lb, "b1", "b2", "b3"],
        vec!["EVAL", call, "0", "BLPOP", none_a, lb, "0"],
        vec!["EVAL", call, "0", "BRPOPLPUSH", lb, la, "0"],
        vec!["EVAL", call, "0", "BLMOVE", none_a, lb, "LEFT", "RIGHT", "0"],
        vec!["EVAL", call, "0", "BLMOVE", lb, la, "RIGHT", "LEFT", "1"],
        vec!["EVAL", call, "0", "BZPOPMIN", none_a, zb, "0"],
        vec!["EVAL", call, "0", "BLMPOP", "0", "2", none_a, la, "RIGHT", "COUNT", "2"],
        vec!["EVAL", call, "0", "BRPOP", none_a, sb, "0"],
        vec!["LRANGE", la, "0", "-1"],
        vec!["DBSIZE"],
    ];
    for (n, step) in steps.iter().enumerate() {
        assert_eq!(text(&shoal.cmd(step).await), text(&redis.cmd(step).await), "spread step {n}: {step:?}");
    }
    // RENAME kept the value's TTL on the other node, and COPY its own.
    let ttl = text(&shoal.cmd(&["TTL", rb]).await);
    let ttl: i64 = ttl.trim_start_matches(':').trim().parse().unwrap();
    assert!((990..=1000).contains(&ttl), "TTL after RENAME over two nodes: {ttl}");
    router.shutdown().await;
}

/// Transfers between three keys of three nodes, as scripts (declared keys, and keys named in
/// ARGV) from several clients at once, while readers check the total with a script over the
/// same keys and with a transaction over their nodes: no reader ever sees part of a transfer, no
/// transfer is lost, and the scripts that named undeclared keys were learned (their node held
/// every node for them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_over_several_nodes_are_atomic_and_isolated() {
    const KEYS: [&str; 3] = ["acct:a", "acct:b", "acct:c"];
    let router = support::cluster().await;
    let addr = router.resp_addr();
    let mut admin = Raw::connect(addr).await;
    assert_eq!(support::nodes_of(&mut admin, &KEYS).await, 3);
    for k in KEYS {
        admin.cmd(&["SET", k, "1000"]).await;
    }
    let transfer = "redis.call('DECRBY', KEYS[1], ARGV[1]) redis.call('INCRBY', KEYS[2], ARGV[1]) \
        return redis.call('INCR', KEYS[3] .. ':n')";
    let transfer_undeclared = "redis.call('DECRBY', ARGV[1], ARGV[3]) redis.call('INCRBY', ARGV[2], ARGV[3]) \
        return redis.call('INCR', 'acct:n')";
    let done = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4usize {
        writers.push(tokio::spawn(async move {
            let mut c = Raw::connect(addr).await;
            for i in 0..100usize {
                let (from, to) = (KEYS[(w + i) % 3], KEYS[(w + i + 1) % 3]);
                let r = if w % 2 == 0 {
                    c.cmd(&["EVAL", transfer, "3", from, to, "acct", "7"]).await
                } else {
                    c.cmd(&["EVAL", transfer_undeclared, "0", from, to, "7"]).await
                };
                assert!(r.starts_with(b":"), "writer {w}, transfer {i}: {}", text(&r));
            }
        }));
    }
    let mut readers = Vec::new();
    for r in 0..2usize {
        let done = done.clone();
        readers.push(tokio::spawn(async move {
            let mut c = Raw::connect(addr).await;
            let mut reads = 0u64;
            while !done.load(Ordering::Relaxed) && reads < 3000 {
                let out = if r == 0 {
                    let sum = "return tonumber(redis.call('GET', KEYS[1])) + tonumber(redis.call('GET', KEYS[2])) \
                        + tonumber(redis.call('GET', KEYS[3]))";
                    text(&c.cmd(&["EVAL", sum, "3", KEYS[0], KEYS[1], KEYS[2]]).await)
                } else {
                    c.cmd(&["MULTI"]).await;
                    for k in KEYS {
                        c.cmd(&["GET", k]).await;
                    }
                    let exec = text(&c.cmd(&["EXEC"]).await);
                    let sum: i64 = exec.lines().filter_map(|l| l.parse::<i64>().ok()).sum();
                    if sum == 3000 { format!(":{sum}\r\n") } else { exec }
                };
                assert_eq!(out, ":3000\r\n", "reader {r} saw part of a transfer (read {reads})");
                reads += 1;
            }
            reads
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let mut reads = 0;
    for r in readers {
        reads += r.await.unwrap();
    }
    assert!(reads > 10, "readers ran alongside the writers ({reads} reads)");
    assert_eq!(admin.cmd(&["GET", "acct:n"]).await, support::bulk("400"), "every transfer counted once");
    let values: Vec<i64> = text(&admin.cmd(&["MGET", KEYS[0], KEYS[1], KEYS[2]]).await)
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect();
    assert_eq!(values.iter().sum::<i64>(), 3000, "{values:?}");
    router.shutdown().await;
}
