//! Pub/sub while the cluster changes: subscribers on two routers connected throughout a 3 -> 5
//! -> 2 scale receive every message published during it, once, in order per publisher and
//! channel; and after a node is killed and restarted, its channels deliver again (what was
//! published to it meanwhile failed loudly, or reached nobody while the routers re-registered:
//! docs/compatibility.md).

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::Raw;
use support::procs::NodeProc;
use support::pubsub::{Sub, parse_message, wait_links};

const CHANNELS: usize = 8;

/// Reads messages in the background until `target` (set once known) have arrived, or a minute
/// passes after it was set.
fn collect(mut sub: Sub, target: Arc<AtomicUsize>) -> tokio::task::JoinHandle<Vec<(String, String)>> {
    tokio::spawn(async move {
        let mut set_at: Option<Instant> = None;
        loop {
            let want = target.load(Ordering::Acquire);
            if want != 0 {
                let since = *set_at.get_or_insert_with(Instant::now);
                if sub.got.len() >= want || since.elapsed() > Duration::from_secs(60) {
                    return sub.got;
                }
            }
            if let Some(frame) = sub.conn.reply_within(Duration::from_millis(100)).await {
                sub.got.push(parse_message(&frame));
            }
        }
    })
}

/// Per (publisher, channel), the rounds received must be 0, 1, ... `rounds`-1: none missing,
/// none twice, in order. Returns the problems found.
fn check(who: &str, got: &[(String, String)], rounds: &HashMap<String, usize>) -> Vec<String> {
    let mut seen: HashMap<(String, String), Vec<usize>> = HashMap::new();
    for (channel, payload) in got {
        // `<publisher>:<channel>:<round>`
        let p = payload.split(':').next().unwrap().to_string();
        let r = payload.rsplit(':').next().unwrap().parse().unwrap();
        seen.entry((p, channel.clone())).or_default().push(r);
    }
    let mut problems = Vec::new();
    for (publisher, &n) in rounds {
        for c in 0..CHANNELS {
            let key = (publisher.clone(), format!("ch:{c}"));
            let list = seen.remove(&key).unwrap_or_default();
            if list != (0..n).collect::<Vec<_>>() {
                let missing = (0..n).filter(|r| !list.contains(r)).count();
                let disorder = list.windows(2).filter(|w| w[1] <= w[0]).count();
                problems.push(format!(
                    "{who} {key:?}: {} of {n}, {missing} missing, {disorder} out of order",
                    list.len()
                ));
            }
        }
    }
    problems
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_on_two_routers_get_every_message_while_scaling_3_5_2() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap().to_string();
    let a = support::router(&["--embedded-nodes", "3", "--data-dir", &data, "--deadline-ms", "3000"]).await;
    // The second router follows the embedded cluster's topology file.
    let topology = dir.path().join("topology.json");
    let b = support::router(&["--topology-file", topology.to_str().unwrap(), "--deadline-ms", "3000"]).await;
    wait_links(&a).await;
    wait_links(&b).await;
    // Data to move, so each step takes a while (about 30 MB at the default pull rate).
    let mut loader = Raw::connect(a.resp_addr()).await;
    let value = "v".repeat(100);
    for chunk in (0..300_000).collect::<Vec<usize>>().chunks(2000) {
        let mut request = Vec::new();
        for i in chunk {
            request.extend(support::encode(&[b"SET", format!("k:{i}").as_bytes(), value.as_bytes()]));
        }
        loader.send(&request).await;
        for _ in chunk {
            assert_eq!(loader.reply().await.unwrap(), b"+OK\r\n");
        }
    }

    let channels: Vec<String> = (0..CHANNELS).map(|c| format!("ch:{c}")).collect();
    let names: Vec<&str> = channels.iter().map(String::as_str).collect();
    let target = Arc::new(AtomicUsize::new(0));
    let collectors = vec![
        ("a-channels", collect(Sub::new(a.resp_addr(), &names, &[]).await, target.clone())),
        ("a-pattern", collect(Sub::new(a.resp_addr(), &[], &["ch:*"]).await, target.clone())),
        ("b-channels", collect(Sub::new(b.resp_addr(), &names, &[]).await, target.clone())),
    ];

    // Two publishers, one per router: each round publishes to every channel (one node each,
    // spread over the cluster), pipelined; every reply is kept.
    let stop = Arc::new(AtomicBool::new(false));
    let mut publishers = Vec::new();
    for (name, addr) in [("A", a.resp_addr()), ("B", b.resp_addr())] {
        let (stop, channels) = (stop.clone(), channels.clone());
        publishers.push(tokio::spawn(async move {
            let mut c = Raw::connect(addr).await;
            let mut rounds = 0;
            let mut bad = Vec::new();
            let start = Instant::now();
            while !stop.load(Ordering::Relaxed)
                && rounds < 20_000
                && start.elapsed() < Duration::from_secs(180)
            {
                let mut request = Vec::new();
                for ch in &channels {
                    let payload = format!("{name}:{ch}:{rounds}");
                    request.extend(support::encode(&[b"PUBLISH", ch.as_bytes(), payload.as_bytes()]));
                }
                c.send(&request).await;
                for ch in &channels {
                    let r = c.reply().await.expect("a reply");
                    if r != b":3\r\n" {
                        bad.push(format!("{name} {ch} round {rounds}: {}", String::from_utf8_lossy(&r)));
                    }
                }
                rounds += 1;
            }
            eprintln!("publisher {name}: {rounds} rounds in {:?}", start.elapsed());
            (name.to_string(), rounds, bad)
        }));
    }

    let mut admin = Raw::connect(a.resp_addr()).await;
    for n in [5, 2] {
        assert_eq!(admin.cmd(&["SHOAL", "SCALE", &n.to_string()]).await, b"+OK\r\n");
        let out = support::wait_scaled(&mut admin, n).await;
        eprintln!("scaled to {n}:\n{out}");
    }
    // Router B has followed the file to the final topology too.
    let version = a.state.backend.version();
    support::wait_until(Duration::from_secs(10), || b.state.backend.version() == version).await;
    stop.store(true, Ordering::Relaxed);
    let mut rounds = HashMap::new();
    let mut bad = Vec::new();
    for p in publishers {
        let (name, n, problems) = p.await.unwrap();
        assert!(n > 20, "publisher {name} kept publishing during the moves ({n} rounds)");
        rounds.insert(name, n);
        bad.extend(problems);
    }
    assert!(bad.is_empty(), "{} PUBLISH replies were not 3, e.g. {:?}", bad.len(), &bad[..bad.len().min(5)]);
    let total: usize = rounds.values().sum::<usize>() * CHANNELS;
    target.store(total, Ordering::Release);
    let mut problems = Vec::new();
    for (who, c) in collectors {
        let got = c.await.unwrap();
        problems.extend(check(who, &got, &rounds));
    }
    assert!(problems.is_empty(), "{} streams wrong:\n{}", problems.len(), problems.join("\n"));
    eprintln!("{total} messages per subscriber, all delivered in order: {rounds:?}");
    a.shutdown().await;
    b.shutdown().await;
}

/// A node killed and restarted: its channels' publishes fail while it is down (an error, not a
/// silent loss), other nodes' channels keep delivering, and once the router has registered with
/// the restarted node again, its channels deliver again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_node_restart_its_channels_deliver_again() {
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, list) = NodeProc::start_many(dir.path(), 3).await;
    let router = support::router(&["--nodes", &list, "--deadline-ms", "500"]).await;
    wait_links(&router).await;
    // A channel on node 1 (the one restarted) and one on node 0.
    let routing = router.state.backend.routing();
    let on = |node: usize| {
        (0..).map(|i| format!("c{i}")).find(|c| routing.locate(c.as_bytes()).0 == node).unwrap()
    };
    let (victim, steady) = (on(1), on(0));
    let mut sub = Sub::new(router.resp_addr(), &[&victim, &steady], &[]).await;
    let mut c = Raw::connect(router.resp_addr()).await;
    assert_eq!(c.cmd(&["PUBLISH", &victim, "before"]).await, b":1\r\n");
    // (A message the node acknowledged but had not sent on yet would die with it: wait.)
    sub.until(1, Duration::from_secs(5)).await;

    nodes[1].kill();
    let addr = nodes[1].addr.clone();
    let start = Instant::now();
    loop {
        let r = c.cmd(&["PUBLISH", &victim, "while-down"]).await;
        if r.starts_with(b"-ERR node 1") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{}", String::from_utf8_lossy(&r));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(c.cmd(&["PUBLISH", &steady, "during"]).await, b":1\r\n", "other nodes are unaffected");

    nodes[1] = NodeProc::start_at(dir.path(), "node1", &addr, &[]).await;
    // Until the router has registered again, the restarted node knows no subscriber (0).
    let start = Instant::now();
    let mut unheard = 0;
    loop {
        let r = c.cmd(&["PUBLISH", &victim, "after"]).await;
        if r == b":1\r\n" {
            break;
        }
        unheard += usize::from(r == b":0\r\n");
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "not delivering again: {}",
            String::from_utf8_lossy(&r)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("{unheard} publishes reached the restarted node before the router registered again");
    sub.until(3, Duration::from_secs(5)).await;
    // Two nodes delivered these, so only each channel's own order is defined.
    let mut got = sub.got.clone();
    got.sort();
    let mut want = vec![
        (steady.clone(), "during".to_string()),
        (victim.clone(), "before".to_string()),
        (victim.clone(), "after".to_string()),
    ];
    want.sort();
    assert_eq!(got, want);
    let on_victim: Vec<&str> =
        sub.got.iter().filter(|(c, _)| *c == victim).map(|(_, p)| p.as_str()).collect();
    assert_eq!(on_victim, ["before", "after"]);
    sub.drain(Duration::from_millis(200)).await;
    assert_eq!(sub.got.len(), 3, "nothing published while it was down arrives later");
    router.shutdown().await;
}
