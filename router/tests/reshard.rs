//! Online resharding through the embedded cluster (SHOAL SCALE): data moves while clients keep
//! reading and writing, and they never see an error or lose a write. (`reshard_processes.rs` does
//! the same with separate node processes, the `shoal-router reshard` coordinator, and crashes.)

mod support;

use support::Raw;
use support::workload::{self, Workload};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_3_5_2_4_keeps_every_write_and_shows_no_errors() {
    let router = support::router(&["--embedded-nodes", "3", "--deadline-ms", "2000"]).await;
    let addr = router.resp_addr();
    let mut admin = Raw::connect(addr).await;
    workload::preload(addr).await;
    let mut load = Workload::start(addr, 3, 2).await;

    for n in [5, 2, 4] {
        let before = load.ops();
        assert_eq!(admin.cmd(&["SHOAL", "SCALE", &n.to_string()]).await, b"+OK\r\n");
        let topology = support::wait_scaled(&mut admin, n).await;
        let during = load.ops() - before;
        eprintln!("scaled to {n} with {during} client ops during the move:\n{topology}");
        assert!(during > 50, "clients kept working during the move");
        assert_eq!(router.node_states().await.len(), n, "nodes that left were stopped");
    }
    load.stop().await;

    // The moves show in the router's metrics, and in the nodes' (as the router reports them).
    let page = support::http_get(router.http_addr(), "/metrics").await;
    let m = |name| support::metric_sum(&page, name);
    assert!(m("shoal_router_topology_changes_total") >= 6.0, "two versions per step");
    assert_eq!(m("shoal_router_migrations"), 0.0);
    assert!(m("shoal_router_fallback_reads_total") + m("shoal_router_keys_copied_total") > 0.0);
    assert!(m("shoal_node_migrated_keys_total") > 0.0 && m("shoal_node_migrated_bytes_total") > 0.0);
    assert!(m("shoal_node_migrated_slots_total") >= 16384.0 * 0.4, "3→5 alone moves 2/5 of the slots");
    let version = m("shoal_router_topology_version");
    assert_eq!(m("shoal_node_topology_version"), 4.0 * version, "every node serves the router's version");
    let errors = load.errors();
    assert!(errors.is_empty(), "{} client errors, e.g. {:?}", errors.len(), &errors[..errors.len().min(5)]);
    let report = load.verify(addr, 0, &|_, _| false).await;
    assert!(report.lost_writes.is_empty() && report.lost_incrs == 0, "{report:?}");
    // Keys written while the moves ran (each writer step also changes a typed value, checked in
    // lost_incrs): enough that every node held some of them. (How many depends on the machine's
    // speed: a loaded 2-core machine wrote 252 in one run, so the bound is well below that.)
    assert!(report.keys_checked > 100, "{report:?}");
    router.shutdown().await;
}

/// Every type moves with the same no-loss rules as strings: small values of each type, values
/// far larger than a transfer piece (a hash of 200k fields is ~6 MB serialized), and writers that
/// keep changing typed values (HINCRBY, RPUSH, SADD, ZINCRBY) while slots move. Every
/// acknowledged change must be there after each step, and clients never see an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_values_move_whole_while_scaling() {
    use redis::AsyncCommands;
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let router = support::router(&["--embedded-nodes", "3", "--deadline-ms", "3000"]).await;
    let addr = router.resp_addr();
    let mut admin = Raw::connect(addr).await;
    let mut con = support::redis_conn(addr).await;

    const SMALL: usize = 200;
    for i in 0..SMALL {
        let _: () = redis::pipe()
            .hset_multiple(format!("h:{i}"), &[("a", i.to_string()), ("b", format!("v{i}"))])
            .ignore()
            .rpush(format!("l:{i}"), &[i, i + 1, i + 2])
            .ignore()
            .sadd(format!("s:{i}"), &[format!("m{i}"), "x".to_string()])
            .ignore()
            .zadd_multiple(format!("z:{i}"), &[(1.5, format!("p{i}")), (-2.0, "q".to_string())])
            .ignore()
            .expire(format!("h:{i}"), 100_000)
            .ignore()
            // A field time (HEXPIRE, Redis 7.4) travels inside the hash's value.
            .cmd("HPEXPIREAT")
            .arg(format!("h:{i}"))
            .arg(4_000_000_000_000u64 + i as u64)
            .arg("FIELDS")
            .arg(1)
            .arg("b")
            .ignore()
            .query_async(&mut con)
            .await
            .unwrap();
    }
    const BIG: usize = 200_000;
    for chunk in (0..BIG).collect::<Vec<_>>().chunks(5_000) {
        let fields: Vec<(String, String)> =
            chunk.iter().map(|i| (format!("field:{i}"), format!("value:{i:08}"))).collect();
        let _: () = con.hset_multiple("big:hash", &fields).await.unwrap();
        let members: Vec<(f64, String)> = chunk.iter().map(|&i| (i as f64, format!("member:{i}"))).collect();
        let _: () = con.zadd_multiple("big:zset", &members).await.unwrap();
        let items: Vec<String> = chunk.iter().map(|i| format!("item:{i}")).collect();
        let _: () = con.rpush("big:list", &items).await.unwrap();
        let _: () = con.sadd("big:set", &items).await.unwrap();
    }

    // Writers: each change is counted only once the router acknowledged it.
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..3 {
        let stop = stop.clone();
        let mut con = support::redis_conn(addr).await;
        writers.push(tokio::spawn(async move {
            let mut acked = 0usize;
            let mut errors = Vec::new();
            while !stop.load(Ordering::Relaxed) && acked < 200_000 {
                let k = acked % 50;
                let r: redis::RedisResult<()> = redis::pipe()
                    .hincr(format!("ctr:{w}:{k}"), "n", 1)
                    .ignore()
                    .rpush(format!("q:{w}:{k}"), acked)
                    .ignore()
                    .sadd(format!("seen:{w}:{k}"), acked)
                    .ignore()
                    .zincr(format!("board:{w}"), format!("p{k}"), 1)
                    .ignore()
                    .query_async(&mut con)
                    .await;
                match r {
                    Ok(()) => acked += 1,
                    Err(e) => errors.push(e.to_string()),
                }
            }
            (w, acked, errors)
        }));
    }

    let check = |con: &mut redis::aio::MultiplexedConnection| {
        let mut con = con.clone();
        async move {
            for i in (0..SMALL).step_by(7) {
                let h: BTreeMap<String, String> = con.hgetall(format!("h:{i}")).await.unwrap();
                assert_eq!(h, BTreeMap::from([("a".into(), i.to_string()), ("b".into(), format!("v{i}"))]));
                let ttl: i64 = con.ttl(format!("h:{i}")).await.unwrap();
                assert!(ttl > 90_000, "TTL moved with the hash: {ttl}");
                let times: Vec<i64> = redis::cmd("HPEXPIRETIME")
                    .arg(format!("h:{i}"))
                    .arg("FIELDS")
                    .arg(2)
                    .arg("a")
                    .arg("b")
                    .query_async(&mut con)
                    .await
                    .unwrap();
                assert_eq!(times, vec![-1, 4_000_000_000_000 + i as i64], "field times moved with h:{i}");
                let l: Vec<usize> = con.lrange(format!("l:{i}"), 0, -1).await.unwrap();
                assert_eq!(l, vec![i, i + 1, i + 2]);
                let s: BTreeSet<String> = con.smembers(format!("s:{i}")).await.unwrap();
                assert_eq!(s, BTreeSet::from([format!("m{i}"), "x".to_string()]));
                let z: Vec<(String, f64)> = con.zrange_withscores(format!("z:{i}"), 0, -1).await.unwrap();
                assert_eq!(z, vec![("q".to_string(), -2.0), (format!("p{i}"), 1.5)]);
            }
            let n: usize = con.hlen("big:hash").await.unwrap();
            assert_eq!(n, BIG);
            let v: String = con.hget("big:hash", "field:123456").await.unwrap();
            assert_eq!(v, "value:00123456");
            let n: usize = con.zcard("big:zset").await.unwrap();
            assert_eq!(n, BIG);
            let top: Vec<String> = con.zrevrange("big:zset", 0, 0).await.unwrap();
            assert_eq!(top, vec![format!("member:{}", BIG - 1)]);
            let n: usize = con.llen("big:list").await.unwrap();
            assert_eq!(n, BIG);
            let mid: String = con.lindex("big:list", 100_000).await.unwrap();
            assert_eq!(mid, "item:100000");
            let n: usize = con.scard("big:set").await.unwrap();
            assert_eq!(n, BIG);
        }
    };

    for n in [5, 2, 4] {
        assert_eq!(admin.cmd(&["SHOAL", "SCALE", &n.to_string()]).await, b"+OK\r\n");
        support::wait_scaled(&mut admin, n).await;
        check(&mut con).await;
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        let (w, acked, errors) = w.await.unwrap();
        assert!(
            errors.is_empty(),
            "writer {w}: {} errors, e.g. {:?}",
            errors.len(),
            &errors[..errors.len().min(3)]
        );
        assert!(acked > 100, "writer {w} kept working ({acked})");
        for k in 0..50usize {
            // Round k of every 50 went to key k.
            let expected = acked / 50 + usize::from(k < acked % 50);
            let ctr: usize = con.hget(format!("ctr:{w}:{k}"), "n").await.unwrap_or(0);
            assert_eq!(ctr, expected, "ctr:{w}:{k}: every acknowledged HINCRBY counted once");
            let q: usize = con.llen(format!("q:{w}:{k}")).await.unwrap();
            assert_eq!(q, expected, "q:{w}:{k}: every acknowledged RPUSH kept");
            let seen: usize = con.scard(format!("seen:{w}:{k}")).await.unwrap();
            assert_eq!(seen, expected, "seen:{w}:{k}");
            let score: Option<f64> = con.zscore(format!("board:{w}"), format!("p{k}")).await.unwrap();
            assert_eq!(score.unwrap_or(0.0) as usize, expected, "board:{w} p{k}");
        }
    }
    router.shutdown().await;
}
