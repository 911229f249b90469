//! Pub/sub through routers, end to end: messages cross routers in publish order, reach every
//! subscriber through resharding and after a node restart, a subscriber that does not read is
//! cut off without hurting the others, PUBLISH over HTTP, the `redis` crate's async pub/sub, and
//! the `evicted` keyspace notification. (Framing byte for byte against redis-server:
//! `tests/differential/pubsub.redis` and `notifications.redis`.)

mod support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::Raw;
use support::procs::NodeProc;

/// A subscriber connection: subscribes (reading the confirmations) and collects messages.
struct Sub {
    conn: Raw,
    /// Every message received, as (channel, payload) (pmessages too: the channel they matched).
    got: Vec<(String, String)>,
}

impl Sub {
    async fn new(addr: SocketAddr, channels: &[&str], patterns: &[&str]) -> Sub {
        let mut conn = Raw::connect(addr).await;
        for (cmd, names) in [("SUBSCRIBE", channels), ("PSUBSCRIBE", patterns)] {
            if names.is_empty() {
                continue;
            }
            let mut args = vec![cmd];
            args.extend_from_slice(names);
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            conn.send(&support::encode(&args)).await;
            for _ in names {
                let r = conn.reply().await.expect("a confirmation");
                assert!(r.starts_with(b"*3\r\n$"), "{}", String::from_utf8_lossy(&r));
            }
        }
        Sub { conn, got: Vec::new() }
    }

    /// Reads messages until `n` have arrived in all (panics after `limit`).
    async fn until(&mut self, n: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.got.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(frame) = self.conn.reply_within(left).await else {
                panic!("{} of {n} messages within {limit:?}", self.got.len());
            };
            self.got.push(parse_message(&frame));
        }
    }
}

/// (channel, payload) of a `message`, `pmessage` or `smessage` push.
fn parse_message(frame: &[u8]) -> (String, String) {
    let text = String::from_utf8_lossy(frame).into_owned();
    let lines: Vec<&str> = text.split("\r\n").collect();
    // *3 $7 message $n channel $m payload | *4 $8 pmessage $p pattern $n channel $m payload
    match lines.get(2) {
        Some(&"message") | Some(&"smessage") => (lines[4].to_string(), lines[6].to_string()),
        Some(&"pmessage") => (lines[6].to_string(), lines[8].to_string()),
        _ => panic!("not a message: {text:?}"),
    }
}

/// PUBLISHes `payloads` to `channel` pipelined in chunks; returns each one's receiver count.
async fn publish_all(c: &mut Raw, channel: &str, payloads: &[String]) -> Vec<i64> {
    let mut counts = Vec::with_capacity(payloads.len());
    for chunk in payloads.chunks(50) {
        let mut request = Vec::new();
        for p in chunk {
            request.extend(support::encode(&[b"PUBLISH", channel.as_bytes(), p.as_bytes()]));
        }
        c.send(&request).await;
        for _ in chunk {
            let r = c.reply().await.expect("a PUBLISH reply");
            let text = String::from_utf8_lossy(&r);
            counts.push(text.trim_start_matches(':').trim_end().parse().unwrap_or_else(|_| panic!("{text}")));
        }
    }
    counts
}

/// Checks that the payloads of `publisher` (`<publisher>:<seq>`) arrived as 0, 1, 2, ... `n`-1.
fn in_order(got: &[(String, String)], publisher: &str, n: usize) -> Result<(), String> {
    let seqs: Vec<usize> =
        got.iter().filter_map(|(_, p)| p.strip_prefix(publisher)?.strip_prefix(':')?.parse().ok()).collect();
    if seqs == (0..n).collect::<Vec<_>>() {
        return Ok(());
    }
    let missing = (0..n).filter(|i| !seqs.contains(i)).count();
    let out_of_order = seqs.windows(2).filter(|w| w[1] <= w[0]).count();
    Err(format!(
        "{publisher}: {} received of {n}, {missing} missing, {out_of_order} out of order",
        seqs.len()
    ))
}

async fn wait_links(router: &shoal_router::Router) {
    support::wait_until(Duration::from_secs(10), || router.state.pubsub.all_up()).await;
}

/// Two routers in front of the same three nodes: messages published through either reach the
/// subscribers of both, each subscriber gets every message once per matching subscription, and
/// one publisher's messages arrive in the order it sent them. PUBLISH answers Redis's count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_reach_subscribers_on_every_router_in_publish_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(NodeProc::start(dir.path(), &format!("node{i}"), &[]).await);
    }
    let list = nodes.iter().map(|n| n.addr.clone()).collect::<Vec<_>>().join(",");
    let a = support::router(&["--nodes", &list]).await;
    let b = support::router(&["--nodes", &list]).await;
    wait_links(&a).await;
    wait_links(&b).await;

    let mut a_channel = Sub::new(a.resp_addr, &["news"], &[]).await;
    let mut a_pattern = Sub::new(a.resp_addr, &[], &["n*"]).await;
    let mut b_channel = Sub::new(b.resp_addr, &["news"], &[]).await;
    let mut b_both = Sub::new(b.resp_addr, &["news"], &["ne*"]).await;

    const N: usize = 1000;
    let mut publishers = Vec::new();
    for (name, addr) in [("A", a.resp_addr), ("B", b.resp_addr)] {
        publishers.push(tokio::spawn(async move {
            let mut c = Raw::connect(addr).await;
            let payloads: Vec<String> = (0..N).map(|i| format!("{name}:{i}")).collect();
            publish_all(&mut c, "news", &payloads).await
        }));
    }
    for p in publishers {
        let counts = p.await.unwrap();
        // 3 channel subscribers and 2 matching pattern subscriptions, on two routers.
        assert!(counts.iter().all(|&c| c == 5), "receiver counts: {:?}", &counts[..10]);
    }
    let limit = Duration::from_secs(30);
    a_channel.until(2 * N, limit).await;
    a_pattern.until(2 * N, limit).await;
    b_channel.until(2 * N, limit).await;
    b_both.until(4 * N, limit).await;
    for (who, sub) in [("a_channel", &a_channel), ("a_pattern", &a_pattern), ("b_channel", &b_channel)] {
        for publisher in ["A", "B"] {
            in_order(&sub.got, publisher, N).unwrap_or_else(|e| panic!("{who}: {e}"));
        }
    }
    // Subscribed to the channel and a pattern matching it: the message, then the pmessage.
    for pair in b_both.got.chunks(2) {
        assert_eq!(pair[0].1, pair[1].1, "message and pmessage of one publish are adjacent");
    }
    let singles: Vec<_> = b_both.got.iter().step_by(2).cloned().collect();
    in_order(&singles, "A", N).unwrap();
    in_order(&singles, "B", N).unwrap();
    // Nothing more than that arrived.
    assert!(a_channel.conn.reply_within(Duration::from_millis(200)).await.is_none());

    // PUBSUB sees both routers' clients, whichever router is asked.
    let mut admin = Raw::connect(a.resp_addr).await;
    assert_eq!(admin.cmd(&["PUBSUB", "NUMSUB", "news"]).await, b"*2\r\n$4\r\nnews\r\n:3\r\n");
    assert_eq!(admin.cmd(&["PUBSUB", "NUMPAT"]).await, b":2\r\n");
    // A subscriber that goes away is forgotten on every node.
    drop(b_both);
    let start = Instant::now();
    while admin.cmd(&["PUBLISH", "news", "x"]).await != b":3\r\n" {
        assert!(start.elapsed() < Duration::from_secs(5), "the closed subscriber was not dropped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.shutdown().await;
    b.shutdown().await;
}

/// PUBLISH over HTTP reaches RESP subscribers; subscribing over HTTP is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_publishes_and_refuses_to_subscribe() {
    let router = support::cluster().await;
    wait_links(&router).await;
    let mut sub = Sub::new(router.resp_addr, &["alerts"], &[]).await;
    let request =
        "POST /channels/alerts HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nConnection: close\r\n\r\nfire!";
    let response = support::http_raw(router.http_addr, request.as_bytes()).await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.ends_with("{\"receivers\":1}"), "{response}");
    sub.until(1, Duration::from_secs(5)).await;
    assert_eq!(sub.got[0], ("alerts".to_string(), "fire!".to_string()));
    let response = support::http_get(router.http_addr, "/channels/alerts").await;
    assert!(response.starts_with("HTTP/1.1 400") && response.contains("use RESP"), "{response}");
    router.shutdown().await;
}

/// The `redis` crate's async pub/sub (its own connection type, RESP2) against a router.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_crate_async_pubsub() {
    use redis::AsyncCommands;
    use tokio_stream::StreamExt;

    let router = support::cluster().await;
    wait_links(&router).await;
    let client = redis::Client::open(support::redis_url(router.resp_addr)).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.subscribe("orders").await.unwrap();
    pubsub.psubscribe("order*").await.unwrap();
    let mut con = support::redis_conn(router.resp_addr).await;
    for i in 0..20 {
        let receivers: i64 = con.publish("orders", format!("o{i}")).await.unwrap();
        assert_eq!(receivers, 2);
    }
    let mut stream = pubsub.on_message();
    let mut seen = Vec::new();
    while seen.len() < 40 {
        let msg =
            tokio::time::timeout(Duration::from_secs(5), stream.next()).await.expect("a message").unwrap();
        let payload: String = msg.get_payload().unwrap();
        let pattern: Option<String> = msg.get_pattern().ok();
        seen.push((msg.get_channel_name().to_string(), pattern, payload));
    }
    for (i, pair) in seen.chunks(2).enumerate() {
        assert_eq!(pair[0], ("orders".to_string(), None, format!("o{i}")));
        assert_eq!(pair[1], ("orders".to_string(), Some("order*".to_string()), format!("o{i}")));
    }
    drop(stream);
    router.shutdown().await;
}
