//! Colocation rules (`--colocate 'rq:*'`, issue 40): an application's keys share one slot by
//! their prefix, so the job queues' transactions and scripts over their default key names (RQ's
//! `rq:queue:default` with `rq:job:<id>`, BullMQ's `bull:<queue>:*`) run unchanged, as on one
//! Redis, and keep doing so while the cluster scales. Every router and node of a cluster gets the
//! same rules; here the nodes are embedded, so they share the router's process (and its rules: every
//! test in this file uses the same ones).

mod support;

use shoal_wire::slot::{crc16, hashtag};
use support::Raw;

const RULES: &str = "rq:*,bull:*";

fn text(b: Vec<u8>) -> String {
    String::from_utf8_lossy(&b).into_owned()
}

/// Keys of one application, spread over the three nodes by their plain CRC16 slots.
const RQ_KEYS: [&str; 4] = ["rq:queue:default", "rq:job:1", "rq:queues", "rq:wip:default"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applications_keys_share_a_slot_for_transactions_and_scripts_while_scaling() {
    // Without the rule these keys would be on different nodes of three (ranges of 5461 slots).
    let thirds: std::collections::BTreeSet<u16> =
        RQ_KEYS.iter().map(|k| (crc16(hashtag(k.as_bytes())) & 16383) / 5462).collect();
    assert!(thirds.len() > 1, "the test's keys span nodes by CRC16 alone");

    let router = support::router(&["--embedded-nodes", "3", "--colocate", RULES]).await;
    let mut c = Raw::connect(router.resp_addr()).await;
    let slot = text(c.cmd(&["CLUSTER", "KEYSLOT", "rq:"]).await);
    for k in RQ_KEYS {
        assert_eq!(text(c.cmd(&["CLUSTER", "KEYSLOT", k]).await), slot, "{k} hashes on its rule's prefix");
    }
    assert_eq!(
        text(c.cmd(&["CONFIG", "GET", "cluster-colocate"]).await),
        "*2\r\n$16\r\ncluster-colocate\r\n$11\r\nrq:* bull:*\r\n"
    );
    let refused = text(c.cmd(&["CONFIG", "SET", "cluster-colocate", "x:*"]).await);
    assert!(refused.contains("can't set immutable config"), "{refused}");

    for round in 0..3 {
        // RQ's enqueue: the job hash, the queue list and the queue set, in one transaction.
        let job = format!("rq:job:{round}");
        assert_eq!(text(c.cmd(&["MULTI"]).await), "+OK\r\n");
        for cmd in [
            vec!["HSET", &job, "status", "queued", "origin", "default"],
            vec!["RPUSH", "rq:queue:default", &job],
            vec!["SADD", "rq:queues", "rq:queue:default"],
        ] {
            assert_eq!(text(c.cmd(&cmd).await), "+QUEUED\r\n");
        }
        let exec = text(c.cmd(&["EXEC"]).await);
        assert!(exec.starts_with("*3\r\n:2\r\n:"), "round {round}: {exec}");
        // BullMQ-style: a script over keys it declares and one it computes from a prefix.
        let script = "redis.call('LPUSH', KEYS[1], ARGV[1]) \
                      redis.call('HSET', ARGV[2] .. ARGV[1], 'state', 'wait') \
                      return {redis.call('LLEN', KEYS[1]), redis.call('INCR', KEYS[2])}";
        let id = format!("{round}");
        let got =
            text(c.cmd(&["EVAL", script, "2", "bull:mail:wait", "bull:mail:id", &id, "bull:mail:"]).await);
        assert_eq!(got, format!("*2\r\n:{}\r\n:{}\r\n", round + 1, round + 1), "round {round}");
        // Keys outside every rule keep their CRC16 slots: two of them live on two nodes.
        if round == 0 {
            assert_eq!(support::nodes_of(&mut c, &["a", "b"]).await, 2);
        }
        // Move slots about: the prefix's slot moves whole.
        let n = [5, 2, 4][round];
        assert_eq!(text(c.cmd(&["SHOAL", "SCALE", &n.to_string()]).await), "+OK\r\n");
        support::wait_scaled(&mut c, n).await;
    }
    assert_eq!(text(c.cmd(&["LLEN", "rq:queue:default"]).await), ":3\r\n");
    assert_eq!(text(c.cmd(&["HGET", "rq:job:2", "status"]).await), "$6\r\nqueued\r\n");
    assert_eq!(text(c.cmd(&["GET", "bull:mail:id"]).await), "$1\r\n3\r\n");
    assert_eq!(text(c.cmd(&["SMEMBERS", "rq:queues"]).await), "*1\r\n$16\r\nrq:queue:default\r\n");
    router.shutdown().await;
}

#[test]
fn a_malformed_rule_is_refused_at_start() {
    let out = support::shoal("shoal-router")
        .args(["--embedded-nodes", "1", "--resp", "127.0.0.1:0", "--http", "off", "--colocate", "rq:*:x*"])
        .output()
        .expect("shoal-router runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("colocation rule \"rq:*:x*\" must be a key prefix followed by one '*'"), "{err}");
}
