//! Pub/sub through routers, end to end: messages cross routers in publish order, reach every
//! subscriber through resharding and after a node restart, a subscriber that does not read is
//! cut off without hurting the others, PUBLISH over HTTP, the `redis` crate's async pub/sub, and
//! the `evicted` keyspace notification. (Framing byte for byte against redis-server:
//! `tests/differential/pubsub.redis` and `notifications.redis`.)

mod support;

use std::time::{Duration, Instant};

use support::Raw;
use support::pubsub::{Sub, in_order, publish_all};

/// Two routers in front of the same three nodes: messages published through either reach the
/// subscribers of both, each subscriber gets every message once per matching subscription, and
/// one publisher's messages arrive in the order it sent them. PUBLISH answers Redis's count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_reach_subscribers_on_every_router_in_publish_order() {
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, a, b) = support::pubsub::two_routers(dir.path()).await;

    let mut a_channel = Sub::new(a.resp_addr(), &["news"], &[]).await;
    let mut a_pattern = Sub::new(a.resp_addr(), &[], &["n*"]).await;
    let mut b_channel = Sub::new(b.resp_addr(), &["news"], &[]).await;
    let mut b_both = Sub::new(b.resp_addr(), &["news"], &["ne*"]).await;

    const N: usize = 1000;
    let mut publishers = Vec::new();
    for (name, addr) in [("A", a.resp_addr()), ("B", b.resp_addr())] {
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
    let mut admin = Raw::connect(a.resp_addr()).await;
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
    support::pubsub::wait_links(&router).await;
    let mut sub = Sub::new(router.resp_addr(), &["alerts"], &[]).await;
    let request =
        "POST /channels/alerts HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nConnection: close\r\n\r\nfire!";
    let response = support::http_raw(router.http_addr(), request.as_bytes()).await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.ends_with("{\"receivers\":1}"), "{response}");
    sub.until(1, Duration::from_secs(5)).await;
    assert_eq!(sub.got[0], ("alerts".to_string(), "fire!".to_string()));
    let response = support::http_get(router.http_addr(), "/channels/alerts").await;
    assert!(response.starts_with("HTTP/1.1 400") && response.contains("use RESP"), "{response}");
    router.shutdown().await;
}

/// The `redis` crate's async pub/sub (its own connection type, RESP2) against a router.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_crate_async_pubsub() {
    use redis::AsyncCommands;
    use tokio_stream::StreamExt;

    let router = support::cluster().await;
    support::pubsub::wait_links(&router).await;
    let client = redis::Client::open(support::redis_url(router.resp_addr())).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.subscribe("orders").await.unwrap();
    pubsub.psubscribe("order*").await.unwrap();
    let mut con = support::redis_conn(router.resp_addr()).await;
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

/// A subscriber that never reads is disconnected once what waits for it passes the hard limit
/// of `client-output-buffer-limit pubsub`; a subscriber that reads gets every message, and the
/// router's memory for the slow one is bounded by the limit, not by what was published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_does_not_read_is_cut_off_and_others_are_not() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let router = support::cluster().await;
    support::pubsub::wait_links(&router).await;
    let mut admin = Raw::connect(router.resp_addr()).await;
    assert_eq!(
        admin.cmd(&["CONFIG", "SET", "client-output-buffer-limit", "pubsub 4mb 0 0"]).await,
        b"+OK\r\n"
    );
    // The slow one: subscribes, then never reads (a small receive buffer, so the kernel does not
    // hold megabytes on its behalf).
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(16 * 1024).unwrap();
    let mut slow = socket.connect(router.resp_addr()).await.unwrap();
    slow.write_all(&support::encode(&[b"SUBSCRIBE", b"firehose"])).await.unwrap();
    let mut confirmation = vec![0u8; 64];
    let n = slow.read(&mut confirmation).await.unwrap();
    assert!(confirmation[..n].starts_with(b"*3\r\n$9\r\nsubscribe"));
    let fast = Sub::new(router.resp_addr(), &["firehose"], &[]).await;

    // 64 MiB in 64 KiB messages, far past what the slow client's socket and limit can hold. The
    // reader counts fixed-size frames instead of parsing them, to keep up in a debug build.
    const MESSAGES: usize = 1024;
    let payload = |i: usize| format!("P:{i:06}:{}", "x".repeat(64 * 1024));
    let frame_len = support::encode(&[b"message", b"firehose", payload(0).as_bytes()]).len();
    // How many the reader has: the publisher keeps at most 32 messages (2 MiB) ahead of it, so
    // the reader stays within its limit however busy the machine is; the slow one never reads.
    let received = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let reader = tokio::spawn({
        let received = received.clone();
        async move {
            let mut stream = fast.conn.stream;
            let mut buf = Vec::with_capacity(1 << 20);
            let mut seqs = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(60);
            while seqs.len() < MESSAGES {
                let left = deadline.saturating_duration_since(Instant::now());
                match tokio::time::timeout(left, stream.read_buf(&mut buf)).await {
                    Ok(Ok(n)) if n > 0 => {}
                    other => panic!("reader stopped after {} messages: {other:?}", seqs.len()),
                }
                let whole = buf.len() / frame_len * frame_len;
                for frame in buf[..whole].chunks(frame_len) {
                    let at = frame.windows(2).position(|w| w == b"P:").expect("a payload");
                    seqs.push(std::str::from_utf8(&frame[at + 2..at + 8]).unwrap().parse::<usize>().unwrap());
                }
                buf.drain(..whole);
                received.store(seqs.len(), std::sync::atomic::Ordering::Release);
            }
            (seqs, stream)
        }
    });
    let mut c = Raw::connect(router.resp_addr()).await;
    let payloads: Vec<String> = (0..MESSAGES).map(payload).collect();
    let mut counts = Vec::new();
    for (i, chunk) in payloads.chunks(16).enumerate() {
        let start = Instant::now();
        while received.load(std::sync::atomic::Ordering::Acquire) + 32 < i * 16 {
            assert!(start.elapsed() < Duration::from_secs(30), "the reader stopped reading");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        counts.extend(publish_all(&mut c, "firehose", chunk).await);
    }
    let (seqs, _still_subscribed) = reader.await.unwrap();
    assert_eq!(seqs, (0..MESSAGES).collect::<Vec<_>>(), "the reader got everything, in order");
    assert_eq!(counts[0], 2, "both subscribed at first");
    assert_eq!(*counts.last().unwrap(), 1, "only the reader is left at the end");

    // The slow client's connection was closed: reading drains what the kernel holds, then ends.
    let mut drained = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, slow.read(&mut buf)).await.expect("the slow client is closed") {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
    assert!(drained < 24 << 20, "what reached the slow client is bounded ({drained} bytes)");
    let page = support::http_get(router.http_addr(), "/metrics").await;
    assert_eq!(support::metric_sum(&page, "shoal_router_pubsub_disconnected_total"), 1.0);
    let listed = String::from_utf8(admin.cmd(&["CLIENT", "LIST", "TYPE", "pubsub"]).await).unwrap();
    assert_eq!(listed.matches("sub=1").count(), 1, "only the reader is subscribed: {listed}");
    router.shutdown().await;
}

/// `evicted` is raised where the eviction happens (on the node, under `maxmemory`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evictions_raise_evicted() {
    let router = support::router(&["--embedded-nodes", "1"]).await;
    support::pubsub::wait_links(&router).await;
    let mut c = Raw::connect(router.resp_addr()).await;
    assert_eq!(c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "Ee"]).await, b"+OK\r\n");
    let mut sub = Sub::new(router.resp_addr(), &["__keyevent@0__:evicted"], &[]).await;
    assert_eq!(c.cmd(&["SET", "victim", "v"]).await, b"+OK\r\n");
    let value = "x".repeat(1024);
    for i in 0..200 {
        c.cmd(&["SET", &format!("filler:{i}"), &value]).await;
    }
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-random", "maxmemory", "64kb"]).await,
        b"+OK\r\n"
    );
    c.cmd(&["SET", "one-more", &value]).await;
    sub.until(1, Duration::from_secs(10)).await;
    let (channel, key) = &sub.got[0];
    assert_eq!(channel, "__keyevent@0__:evicted");
    assert!(key == "victim" || key.starts_with("filler:") || key == "one-more", "{key}");
    assert_eq!(c.cmd(&["EXISTS", key]).await, b":0\r\n", "the key the event names is gone");
    router.shutdown().await;
}

/// MONITOR through one router shows the commands of every router of the cluster and the calls
/// of scripts on the nodes (`[0 lua]`), each once; when its last monitor leaves, the other
/// routers stop sending their lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitor_shows_every_router_s_commands_and_scripts_calls() {
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, a, b) = support::pubsub::two_routers(dir.path()).await;

    let mut monitor = Raw::connect(a.resp_addr()).await;
    assert_eq!(monitor.cmd(&["MONITOR"]).await, b"+OK\r\n");
    // B hears from the nodes that a router monitors.
    support::wait_until(Duration::from_secs(10), || b.state.pubsub.monitoring()).await;
    let mut on_a = Raw::connect(a.resp_addr()).await;
    let mut on_b = Raw::connect(b.resp_addr()).await;
    let b_addr = on_b.stream.local_addr().unwrap().to_string();
    assert_eq!(on_b.cmd(&["SET", "mon:k", "v"]).await, b"+OK\r\n");
    assert_eq!(on_b.cmd(&["EVAL", "return redis.call('GET', KEYS[1])", "1", "mon:k"]).await, b"$1\r\nv\r\n");
    assert_eq!(on_a.cmd(&["GET", "mon:k"]).await, b"$1\r\nv\r\n");

    let mut lines = Vec::new();
    while lines.len() < 3 {
        let Some(line) = monitor.reply_within(Duration::from_secs(5)).await else { break };
        let text = String::from_utf8_lossy(&line).into_owned();
        lines.push(text.split_once(" [").map(|(_, rest)| format!("[{}", rest.trim_end())).unwrap_or(text));
    }
    // Anything more within a while would be a line shown twice. (EVAL itself is not shown:
    // Redis flags it `skip_monitor` and shows the script's calls instead.)
    assert_eq!(monitor.reply_within(Duration::from_millis(500)).await, None, "{lines:?}");
    let mut want = vec![
        format!("[0 {b_addr}] \"SET\" \"mon:k\" \"v\""),
        "[0 lua] \"GET\" \"mon:k\"".to_string(),
        format!("[0 {}] \"GET\" \"mon:k\"", on_a.stream.local_addr().unwrap()),
    ];
    lines.sort();
    want.sort();
    assert_eq!(lines, want);

    // The monitor leaves: the next line B sends finds nobody at A, and B is told to stop.
    assert_eq!(monitor.cmd(&["RESET"]).await, b"+RESET\r\n");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while b.state.pubsub.monitoring() {
        assert!(std::time::Instant::now() < deadline, "router B still sends its lines");
        on_b.cmd(&["PING"]).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    support::wait_until(Duration::from_secs(10), || !a.state.pubsub.monitoring()).await;
}
