//! SHOAL HOTKEYS and SHOAL SLOT-STATS through a real router and its embedded nodes: a zipf-skewed
//! workload with an exact model beside it.

mod support;

use std::collections::HashMap;

use redis::Value;

const KEYS: usize = 400;
const OPS: usize = 20_000;
const PIPELINE: usize = 100;

fn key(i: usize) -> String {
    format!("hk:{i}")
}

/// Key `i`'s value: its own length, so byte weights differ per key.
fn value(i: usize) -> String {
    "v".repeat(i % 50 + 1)
}

/// The exact model: per key, commands and bytes (request arguments + encoded RESP2 reply), as the
/// router counts them; per slot, reads and writes.
#[derive(Default)]
struct Model {
    ops: HashMap<String, u64>,
    bytes: HashMap<String, u64>,
    reads: HashMap<u16, u64>,
    writes: HashMap<u16, u64>,
}

impl Model {
    fn set(&mut self, i: usize) {
        let (k, v) = (key(i), value(i));
        let bytes = (3 + k.len() + v.len() + "+OK\r\n".len()) as u64;
        self.count(k, bytes, true);
    }

    fn get(&mut self, i: usize) {
        let (k, v) = (key(i), value(i));
        let reply = format!("${}\r\n{v}\r\n", v.len());
        self.count(k, (3 + key(i).len() + reply.len()) as u64, false);
    }

    fn count(&mut self, k: String, bytes: u64, write: bool) {
        let slot = shoal_wire::key_slot(k.as_bytes());
        *if write { self.writes.entry(slot) } else { self.reads.entry(slot) }.or_default() += 1;
        *self.ops.entry(k.clone()).or_default() += 1;
        *self.bytes.entry(k).or_default() += bytes;
    }
}

/// Zipf (s = 1.2) ranks over `KEYS` keys, by inverse CDF.
fn zipf(rng: &mut fastrand::Rng) -> usize {
    thread_local! {
        static CDF: Vec<f64> = {
            let w: Vec<f64> = (1..=KEYS).map(|r| 1.0 / (r as f64).powf(1.2)).collect();
            let total: f64 = w.iter().sum();
            w.iter().scan(0.0, |acc, x| { *acc += x / total; Some(*acc) }).collect()
        };
    }
    let u = rng.f64();
    CDF.with(|c| c.partition_point(|&p| p < u).min(KEYS - 1))
}

fn map_of(v: &Value) -> HashMap<String, i64> {
    let Value::Array(items) = v else { panic!("not an array: {v:?}") };
    items
        .chunks(2)
        .map(|p| match (&p[0], &p[1]) {
            (Value::SimpleString(k), Value::Int(n)) => (k.clone(), *n),
            (Value::BulkString(k), Value::Int(n)) => (String::from_utf8_lossy(k).into_owned(), *n),
            other => panic!("unexpected field {other:?}"),
        })
        .collect()
}

/// `(slot, fields)` rows of a SLOT-STATS reply.
fn slot_rows(v: Value) -> Vec<(u16, HashMap<String, i64>)> {
    let Value::Array(rows) = v else { panic!("not an array: {v:?}") };
    rows.iter()
        .map(|r| match r {
            Value::Array(pair) => match &pair[..] {
                [Value::Int(slot), fields] => (*slot as u16, map_of(fields)),
                other => panic!("unexpected row {other:?}"),
            },
            other => panic!("unexpected row {other:?}"),
        })
        .collect()
}

fn check_top(reported: &[(Vec<u8>, i64, i64)], exact: &HashMap<String, u64>, what: &str) {
    assert!(!reported.is_empty(), "{what}: nothing reported");
    for (k, count, error) in reported {
        let k = String::from_utf8_lossy(k).into_owned();
        let truth = exact.get(&k).copied().unwrap_or(0) as i64;
        assert!(
            *count >= truth && count - error <= truth,
            "{what}: {k} is truly {truth}, reported {count} with error {error}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_keys_and_slot_stats_follow_a_skewed_workload() {
    // No decay: the counts must cover the whole run for the exact comparison.
    let router =
        support::router(&["--embedded-nodes", "3", "--hotkeys-capacity", "256", "--hotkeys-decay-secs", "0"])
            .await;
    let mut c = support::redis_conn(router.resp_addr()).await;
    let mut model = Model::default();

    // Slot traffic is counted only when asked for (as Redis 8's cluster-slot-stats-enabled):
    // off, ops leave the counters at zero; CONFIG SET turns it on on every node.
    let _: Option<String> = redis::cmd("GET").arg(key(0)).query_async(&mut c).await.unwrap();
    let off: Value = redis::cmd("SHOAL").arg("SLOT-STATS").query_async(&mut c).await.unwrap();
    assert!(slot_rows(off).iter().all(|(_, m)| m["reads"] == 0), "counted while off");
    let setting: Vec<String> =
        redis::cmd("CONFIG").arg("GET").arg("cluster-slot-stats-enabled").query_async(&mut c).await.unwrap();
    assert_eq!(setting, ["cluster-slot-stats-enabled", "no"]);
    let err = redis::cmd("CONFIG")
        .arg("SET")
        .arg("cluster-slot-stats-enabled")
        .arg("maybe")
        .query_async::<()>(&mut c)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("argument must be 'yes' or 'no'"), "{err}");
    let ok: String = redis::cmd("CONFIG")
        .arg("SET")
        .arg("cluster-slot-stats-enabled")
        .arg("yes")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(ok, "OK");
    // The probe above is not part of the workload the hot keys are checked against.
    let _: String = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut c).await.unwrap();

    // Every key first, so each GET finds its value and its reply size is known.
    let mut pipe = redis::pipe();
    for i in 0..KEYS {
        pipe.set(key(i), value(i)).ignore();
        model.set(i);
    }
    let () = pipe.query_async(&mut c).await.unwrap();

    let mut rng = fastrand::Rng::with_seed(17);
    let (mut gets, mut sets) = (0u64, KEYS as u64);
    for _ in 0..OPS / PIPELINE {
        let mut pipe = redis::pipe();
        for _ in 0..PIPELINE {
            let i = zipf(&mut rng);
            if rng.u8(..10) < 7 {
                pipe.get(key(i)).ignore();
                model.get(i);
                gets += 1;
            } else {
                pipe.set(key(i), value(i)).ignore();
                model.set(i);
                sets += 1;
            }
        }
        let () = pipe.query_async(&mut c).await.unwrap();
    }

    // Hot keys by commands: within their bounds, and the true top 5 are the top 5 listed.
    let by_ops: Vec<(Vec<u8>, i64, i64)> =
        redis::cmd("SHOAL").arg("HOTKEYS").arg("COUNT").arg(10).query_async(&mut c).await.unwrap();
    assert_eq!(by_ops.len(), 10);
    check_top(&by_ops, &model.ops, "by ops");
    let mut truth: Vec<(&String, &u64)> = model.ops.iter().collect();
    truth.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let listed: Vec<String> =
        by_ops.iter().take(5).map(|r| String::from_utf8_lossy(&r.0).into_owned()).collect();
    for (k, _) in truth.iter().take(5) {
        assert!(listed.contains(k), "true top key {k} not among {listed:?}");
    }
    assert_eq!(listed[0], key(0), "the zipf head is the hottest key");

    // By bytes: every reported key within its bound.
    let by_bytes: Vec<(Vec<u8>, i64, i64)> = redis::cmd("SHOAL")
        .arg("HOTKEYS")
        .arg("BY")
        .arg("bytes")
        .arg("COUNT")
        .arg(20)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(by_bytes.len(), 20);
    check_top(&by_bytes, &model.bytes, "by bytes");
    assert!(by_bytes.windows(2).all(|w| w[0].1 >= w[1].1), "heaviest first");

    let err = redis::cmd("SHOAL").arg("HOTKEYS").arg("BY").arg("weight").query_async::<Value>(&mut c).await;
    assert!(err.is_err(), "unknown ranking refused");

    // The top keys are series on /metrics.
    let page = support::http_get(router.http_addr(), "/metrics").await;
    let line = format!("shoal_router_hotkey_ops{{key=\"{}\"}} ", key(0));
    assert!(page.contains(&line), "no {line:?} in /metrics");
    assert!(page.lines().filter(|l| l.starts_with("shoal_router_hotkey_ops{")).count() <= 10);

    // SLOT-STATS over every slot: keys add up to DBSIZE, reads and writes to what was sent since
    // counting was turned on, slot by slot.
    let dbsize: i64 = redis::cmd("DBSIZE").query_async(&mut c).await.unwrap();
    assert_eq!(dbsize, KEYS as i64);
    let all: Value = redis::cmd("SHOAL")
        .arg("SLOT-STATS")
        .arg("SLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query_async(&mut c)
        .await
        .unwrap();
    let rows = slot_rows(all);
    assert_eq!(rows.len(), 16384, "every slot once, from its owner");
    let sum = |f: &str| rows.iter().map(|(_, m)| m[f]).sum::<i64>();
    assert_eq!(sum("key-count"), dbsize);
    assert_eq!(sum("reads"), gets as i64);
    assert_eq!(sum("writes"), sets as i64);
    for (slot, m) in &rows {
        assert_eq!(m["reads"] as u64, model.reads.get(slot).copied().unwrap_or(0), "reads of slot {slot}");
        assert_eq!(m["writes"] as u64, model.writes.get(slot).copied().unwrap_or(0), "writes of slot {slot}");
        let busy = m["reads"] + m["writes"] > 0;
        assert_eq!(m["network-bytes-in"] > 0, busy, "slot {slot}");
        assert_eq!(m["network-bytes-out"] > 0, busy, "slot {slot}");
    }

    // ORDERBY: the slot of the hottest key leads by reads.
    let top: Value = redis::cmd("SHOAL")
        .arg("SLOT-STATS")
        .arg("ORDERBY")
        .arg("reads")
        .arg("LIMIT")
        .arg(3)
        .query_async(&mut c)
        .await
        .unwrap();
    let top = slot_rows(top);
    assert_eq!(top.len(), 3);
    let busiest = model.reads.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0))).unwrap();
    assert_eq!((top[0].0, top[0].1["reads"] as u64), (*busiest.0, *busiest.1));
    assert!(top.windows(2).all(|w| w[0].1["reads"] >= w[1].1["reads"]));
    let asc: Value = redis::cmd("SHOAL")
        .arg("SLOT-STATS")
        .arg("ORDERBY")
        .arg("key-count")
        .arg("LIMIT")
        .arg(2)
        .arg("ASC")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(slot_rows(asc).iter().all(|(_, m)| m["key-count"] == 0));

    // CONFIG RESETSTAT starts every node's traffic counters again (the keys stay), as Redis 8's
    // resets CLUSTER SLOT-STATS; counting goes on from zero.
    let ok: String = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut c).await.unwrap();
    assert_eq!(ok, "OK");
    let _: Option<String> = redis::cmd("GET").arg(key(0)).query_async(&mut c).await.unwrap();
    let all: Value = redis::cmd("SHOAL").arg("SLOT-STATS").query_async(&mut c).await.unwrap();
    let rows = slot_rows(all);
    let sum = |f: &str| rows.iter().map(|(_, m)| m[f]).sum::<i64>();
    assert_eq!(sum("key-count"), dbsize, "keys are not counters");
    assert_eq!((sum("reads"), sum("writes")), (1, 0), "only the GET after the reset counts");
    let head_slot = rows.iter().find(|(_, m)| m["reads"] == 1).map(|(s, _)| *s);
    assert_eq!(head_slot, Some(shoal_wire::key_slot(key(0).as_bytes())));
    assert!(rows.iter().filter(|(_, m)| m["reads"] == 0).all(|(_, m)| m["network-bytes-in"] == 0));

    router.shutdown().await;
}
