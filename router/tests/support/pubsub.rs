//! Pub/sub helpers for the router's tests: a subscriber connection that collects messages, a
//! pipelined publisher, and order checks.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::Raw;

/// A subscriber connection: subscribes (reading the confirmations) and collects messages.
pub struct Sub {
    pub conn: Raw,
    /// Every message received, as (channel, payload) (pmessages too: the channel they matched).
    pub got: Vec<(String, String)>,
}

impl Sub {
    pub async fn new(addr: SocketAddr, channels: &[&str], patterns: &[&str]) -> Sub {
        let mut conn = Raw::connect(addr).await;
        for (cmd, names) in [("SUBSCRIBE", channels), ("PSUBSCRIBE", patterns)] {
            if names.is_empty() {
                continue;
            }
            let mut args = vec![cmd];
            args.extend_from_slice(names);
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            conn.send(&super::encode(&args)).await;
            for _ in names {
                let r = conn.reply().await.expect("a confirmation");
                assert!(r.starts_with(b"*3\r\n$"), "{}", String::from_utf8_lossy(&r));
            }
        }
        Sub { conn, got: Vec::new() }
    }

    /// Reads messages until `n` have arrived in all (panics after `limit`).
    pub async fn until(&mut self, n: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.got.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(frame) = self.conn.reply_within(left).await else {
                panic!("{} of {n} messages within {limit:?}: {:?}", self.got.len(), self.got);
            };
            self.got.push(parse_message(&frame));
        }
    }

    /// Reads whatever arrives within `quiet` of the last message.
    pub async fn drain(&mut self, quiet: Duration) {
        while let Some(frame) = self.conn.reply_within(quiet).await {
            self.got.push(parse_message(&frame));
        }
    }
}

/// (channel, payload) of a `message`, `pmessage` or `smessage` push.
pub fn parse_message(frame: &[u8]) -> (String, String) {
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
pub async fn publish_all(c: &mut Raw, channel: &str, payloads: &[String]) -> Vec<i64> {
    let mut counts = Vec::with_capacity(payloads.len());
    for chunk in payloads.chunks(50) {
        let mut request = Vec::new();
        for p in chunk {
            request.extend(super::encode(&[b"PUBLISH", channel.as_bytes(), p.as_bytes()]));
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
pub fn in_order(got: &[(String, String)], publisher: &str, n: usize) -> Result<(), String> {
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

/// Waits until the router's pub/sub links to every node are up.
pub async fn wait_links(router: &shoal_router::Router) {
    super::wait_until(Duration::from_secs(10), || router.state.pubsub.all_up()).await;
}

/// Two routers (in this process) in front of the same three node processes, their pub/sub
/// links to every node up: the shape for what must reach across routers.
pub async fn two_routers(
    dir: &std::path::Path,
) -> (Vec<super::procs::NodeProc>, shoal_router::Router, shoal_router::Router) {
    let (nodes, list) = super::procs::NodeProc::start_many(dir, 3).await;
    let a = super::router(&["--nodes", &list]).await;
    let b = super::router(&["--nodes", &list]).await;
    wait_links(&a).await;
    wait_links(&b).await;
    (nodes, a, b)
}
