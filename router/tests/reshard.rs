//! Online resharding through the embedded cluster (SHOAL SCALE): data moves while clients keep
//! reading and writing, and they never see an error or lose a write.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use support::Raw;

/// Waits until the cluster has `n` nodes, no migration in flight and no scaling running.
async fn wait_scaled(c: &mut Raw, n: usize) -> String {
    let start = Instant::now();
    loop {
        let out = String::from_utf8(c.cmd(&["SHOAL", "TOPOLOGY"]).await).unwrap();
        let first = out.lines().nth(1).unwrap_or_default().to_string();
        if first.contains(&format!(" nodes={n} migrations=0 ")) && first.ends_with("scaling=no") {
            return out;
        }
        assert!(!first.contains("scaling=failed"), "{out}");
        assert!(start.elapsed() < Duration::from_secs(120), "not scaled to {n}: {out}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[derive(Default)]
struct Errors(Mutex<Vec<String>>);

impl Errors {
    fn check(&self, what: &str, reply: &[u8]) {
        if reply.starts_with(b"-") {
            self.0.lock().push(format!("{what}: {}", String::from_utf8_lossy(reply)));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_3_5_2_4_keeps_every_write_and_shows_no_errors() {
    let router = support::router(&["--embedded-nodes", "3", "--deadline-ms", "2000"]).await;
    let addr = router.resp_addr;
    let mut admin = Raw::connect(addr).await;

    // Data that must come through every move unchanged (and deleted keys that must stay deleted).
    let mut setup = Raw::connect(addr).await;
    let mut pipeline = Vec::new();
    for i in 0..3000 {
        pipeline.extend(support::encode(&[
            b"SET",
            format!("stable:{i}").as_bytes(),
            format!("v{i}").as_bytes(),
        ]));
    }
    for i in 0..300 {
        pipeline.extend(support::encode(&[b"SET", format!("gone:{i}").as_bytes(), b"x"]));
        pipeline.extend(support::encode(&[b"DEL", format!("gone:{i}").as_bytes()]));
        pipeline.extend(support::encode(&[b"SET", format!("ttl:{i}").as_bytes(), b"t", b"EX", b"1000"]));
    }
    setup.send(&pipeline).await;
    for _ in 0..3900 {
        let r = setup.reply().await.unwrap();
        assert!(r == b"+OK\r\n" || r == b":1\r\n", "{}", String::from_utf8_lossy(&r));
    }

    // Traffic during every move: writers own their keys (so the model is exact), readers check
    // stable data, everything counts errors.
    let errors = Arc::new(Errors::default());
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let model: Arc<Mutex<BTreeMap<String, Option<String>>>> = Arc::default();
    let mut tasks = Vec::new();
    for w in 0..3 {
        let (errors, stop, ops, model) = (errors.clone(), stop.clone(), ops.clone(), model.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = Raw::connect(addr).await;
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("w{w}:{}", i % 500);
                if i % 7 == 3 {
                    let r = c.cmd(&["DEL", &key]).await;
                    errors.check("DEL", &r);
                    model.lock().insert(key, None);
                } else if i.is_multiple_of(5) {
                    // A pipelined burst of SETs.
                    let mut burst = Vec::new();
                    let keys: Vec<String> = (0..10).map(|j| format!("w{w}:p{}", (i + j) % 300)).collect();
                    for k in &keys {
                        burst.extend(support::encode(&[b"SET", k.as_bytes(), format!("{k}@{i}").as_bytes()]));
                    }
                    c.send(&burst).await;
                    for k in keys {
                        let r = c.reply().await.unwrap();
                        errors.check("pipelined SET", &r);
                        if r == b"+OK\r\n" {
                            let v = format!("{k}@{i}");
                            model.lock().insert(k, Some(v));
                        }
                    }
                } else {
                    let v = format!("{key}@{i}");
                    let r = c.cmd(&["SET", &key, &v]).await;
                    errors.check("SET", &r);
                    model.lock().insert(key, Some(v));
                }
                let r = c.cmd(&["INCR", &format!("counter:{w}")]).await;
                errors.check("INCR", &r);
                i += 1;
                ops.fetch_add(2, Ordering::Relaxed);
            }
            i
        }));
    }
    for r in 0..2 {
        let (errors, stop, ops) = (errors.clone(), stop.clone(), ops.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = Raw::connect(addr).await;
            let mut i = r * 1000;
            while !stop.load(Ordering::Relaxed) {
                let n = i % 3000;
                let got = c.cmd(&["GET", &format!("stable:{n}")]).await;
                if got != support::bulk(&format!("v{n}")) {
                    errors.0.lock().push(format!("stable:{n} read {}", String::from_utf8_lossy(&got)));
                }
                let gone = c.cmd(&["GET", &format!("gone:{}", i % 300)]).await;
                if gone != b"$-1\r\n" {
                    errors.0.lock().push(format!(
                        "gone:{} came back: {}",
                        i % 300,
                        String::from_utf8_lossy(&gone)
                    ));
                }
                let ttl = c.cmd(&["TTL", &format!("ttl:{}", i % 300)]).await;
                errors.check("TTL", &ttl);
                i += 1;
                ops.fetch_add(3, Ordering::Relaxed);
            }
            0
        }));
    }

    for n in [5, 2, 4] {
        let before = ops.load(Ordering::Relaxed);
        assert_eq!(admin.cmd(&["SHOAL", "SCALE", &n.to_string()]).await, b"+OK\r\n");
        let topology = wait_scaled(&mut admin, n).await;
        let during = ops.load(Ordering::Relaxed) - before;
        eprintln!("scaled to {n} with {during} client ops during the move:\n{topology}");
        assert!(during > 50, "clients kept working during the move");
        assert_eq!(router.node_states().await.len(), n, "nodes that left were stopped");
    }
    stop.store(true, Ordering::Relaxed);
    let mut incrs = Vec::new();
    for t in tasks {
        incrs.push(t.await.unwrap());
    }
    let errors = errors.0.lock().clone();
    assert!(errors.is_empty(), "{} client errors, e.g. {:?}", errors.len(), &errors[..errors.len().min(5)]);

    // Every acknowledged write, in its last acknowledged state.
    let mut c = Raw::connect(addr).await;
    for i in 0..3000 {
        assert_eq!(c.cmd(&["GET", &format!("stable:{i}")]).await, support::bulk(&format!("v{i}")));
    }
    for i in 0..300 {
        assert_eq!(c.cmd(&["EXISTS", &format!("gone:{i}")]).await, b":0\r\n", "deleted keys never come back");
        let ttl: i64 =
            String::from_utf8_lossy(&c.cmd(&["TTL", &format!("ttl:{i}")]).await)[1..].trim().parse().unwrap();
        assert!((900..=1000).contains(&ttl), "TTL moved with the key: {ttl}");
    }
    let model = model.lock().clone();
    for (k, v) in &model {
        let got = c.cmd(&["GET", k]).await;
        let want = match v {
            Some(v) => support::bulk(v),
            None => b"$-1\r\n".to_vec(),
        };
        assert_eq!(got, want, "{k}");
    }
    for (w, n) in incrs.iter().take(3).enumerate() {
        assert_eq!(c.cmd(&["GET", &format!("counter:{w}")]).await, support::bulk(&n.to_string()));
    }
    let live_model = model.values().filter(|v| v.is_some()).count();
    let dbsize: usize = String::from_utf8_lossy(&c.cmd(&["DBSIZE"]).await)[1..].trim().parse().unwrap();
    assert_eq!(dbsize, 3000 + 300 + live_model + 3, "DBSIZE counts every key once after the moves");
    router.shutdown().await;
}
