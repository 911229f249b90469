//! DEBUG with `--enable-debug-command` on, beside a redis-server run the same way: DEBUG OBJECT's
//! fields for every encoding (those that describe the value, compared with Redis's; the address
//! and clocks checked for shape), its errors, DEBUG ERROR's line, SET-ACTIVE-EXPIRE stopping and
//! restarting active expiry on every node, and that DEBUG OBJECT reads without touching. DEBUG
//! refused while off is compared byte for byte in `differential/server.redis`.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use support::Raw;

fn text(b: Vec<u8>) -> String {
    String::from_utf8_lossy(&b).into_owned()
}

/// A DEBUG OBJECT status line's `name:value` fields.
fn fields(line: &str) -> HashMap<String, String> {
    let body = line.strip_prefix('+').unwrap_or_else(|| panic!("not a status line: {line:?}")).trim_end();
    let body = body.strip_prefix("Value at:").expect("starts with the address");
    body.split(' ').skip(1).filter_map(|f| f.split_once(':')).map(|(k, v)| (k.into(), v.into())).collect()
}

/// The same commands on both servers.
async fn both(shoal: &mut Raw, redis: &mut Raw, cmd: &[&str]) -> (String, String) {
    (text(shoal.cmd(cmd).await), text(redis.cmd(cmd).await))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_object_describes_values_as_redis_does() {
    let (_redis, redis_addr) = support::redis_server_with(&["--enable-debug-command", "yes"]).await;
    let router = support::router(&["--embedded-nodes", "3", "--enable-debug-command", "yes"]).await;
    let mut shoal = Raw::connect(router.resp_addr()).await;
    let mut redis = Raw::connect(redis_addr).await;
    let long = "x".repeat(100);
    let setup: Vec<Vec<&str>> = vec![
        vec!["SET", "str", "hello"],
        vec!["SET", "int", "123"],
        vec!["SET", "bigint", "123456789"],
        vec!["SET", "long", &long],
        vec!["RPUSH", "list", "a", "b", "c"],
        vec!["HSET", "hash", "f1", "v1", "f2", "v2"],
        vec!["SADD", "intset", "1", "2", "3"],
        vec!["SADD", "set", "a", "b"],
        vec!["ZADD", "zset", "1", "a", "2", "b"],
    ];
    for cmd in &setup {
        let (s, r) = both(&mut shoal, &mut redis, cmd).await;
        assert_eq!(s, r, "{cmd:?}");
    }
    for key in ["str", "int", "bigint", "long", "list", "hash", "intset", "set", "zset"] {
        let (s, r) = both(&mut shoal, &mut redis, &["DEBUG", "OBJECT", key]).await;
        let (s, r) = (fields(&s), fields(&r));
        for f in [
            "refcount",
            "encoding",
            "serializedlength",
            "ql_nodes",
            "ql_avg_node",
            "ql_listpack_max",
            "ql_compressed",
        ] {
            assert_eq!(s.get(f), r.get(f), "{key}: field {f} (shoal {s:?}, redis {r:?})");
        }
        assert!(s["lru"].parse::<u32>().is_ok_and(|n| n < 1 << 24), "{key}: {s:?}");
        assert!(s["lru_seconds_idle"].parse::<u64>().is_ok(), "{key}: {s:?}");
    }
    for cmd in [
        vec!["DEBUG", "OBJECT", "missing"],
        vec!["DEBUG", "OBJECT"],
        vec!["DEBUG", "object", "str", "extra"],
        vec!["DEBUG", "nosuch"],
        vec!["DEBUG", "ERROR", "WRONGTYPE made up\r\nhere"],
        vec!["DEBUG", "ERROR", "no code"],
        vec!["DEBUG", "LOG", "from the test"],
        vec!["DEBUG", "SET-ACTIVE-EXPIRE"],
        vec!["DEBUG"],
    ] {
        let (s, r) = both(&mut shoal, &mut redis, &cmd).await;
        assert_eq!(s, r, "{cmd:?}");
    }
    let help = text(shoal.cmd(&["DEBUG", "HELP"]).await);
    assert!(help.contains("OBJECT <key>") && help.contains("SET-ACTIVE-EXPIRE <0|1>"), "{help}");
    assert!(text(shoal.cmd(&["DEBUG", "SLEEP", "0"]).await).starts_with("-ERR DEBUG SLEEP is not offered"));
    let (s, r) = both(&mut shoal, &mut redis, &["CONFIG", "GET", "enable-debug-command"]).await;
    assert_eq!(s, r);

    // DEBUG OBJECT looks without touching: the idle time keeps growing.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let idle = fields(&text(shoal.cmd(&["DEBUG", "OBJECT", "str"]).await))["lru_seconds_idle"].clone();
    assert!(idle.parse::<u64>().unwrap() >= 1, "{idle}");
    assert_eq!(text(shoal.cmd(&["OBJECT", "IDLETIME", "str"]).await), format!(":{idle}\r\n"));
}

/// The expired-keys counter of INFO stats.
async fn expired_keys(c: &mut Raw) -> u64 {
    let info = text(c.cmd(&["INFO", "stats"]).await);
    let line = info.lines().find(|l| l.starts_with("expired_keys:")).expect("expired_keys in INFO stats");
    line["expired_keys:".len()..].trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_active_expire_stops_and_restarts_expiry_on_every_node() {
    let router = support::router(&["--embedded-nodes", "3", "--enable-debug-command", "local"]).await;
    let mut c = Raw::connect(router.resp_addr()).await;
    assert_eq!(
        text(c.cmd(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]).await),
        "+OK\r\n",
        "a loopback client is local"
    );
    for i in 0..60 {
        assert_eq!(text(c.cmd(&["SET", &format!("exp:{i}"), "v", "PX", "20"]).await), "+OK\r\n");
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(expired_keys(&mut c).await, 0, "nothing expires actively while it is off");
    // A key read still expires.
    assert_eq!(text(c.cmd(&["GET", "exp:0"]).await), "$-1\r\n");
    assert_eq!(expired_keys(&mut c).await, 1);
    assert_eq!(text(c.cmd(&["DEBUG", "SET-ACTIVE-EXPIRE", "1"]).await), "+OK\r\n");
    let deadline = Instant::now() + Duration::from_secs(5);
    while expired_keys(&mut c).await < 60 {
        assert!(Instant::now() < deadline, "active expiry did not resume");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
