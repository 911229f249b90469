//! Hash field expiry (Redis 7.4's HEXPIRE family; HGETDEL/HGETEX/HSETEX of 8.0) end to end
//! through a router of 3 embedded nodes, beyond the replies `tests/differential/redis8/` compares
//! with redis-server 8.0: active expiry removes fields (and the emptied hash) that nothing reads,
//! on every node; the keyspace events; the field times inside MULTI; ACL key rules and COMMAND
//! GETKEYS for commands Redis 7.0's table lacks.

mod support;

use std::time::{Duration, Instant};

use support::Raw;

fn text(b: Vec<u8>) -> String {
    String::from_utf8_lossy(&b).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_fields_are_removed_on_every_node_without_being_read() {
    let router = support::router(&["--embedded-nodes", "3"]).await;
    let mut c = Raw::connect(router.resp_addr()).await;
    // Enough keys that every node holds some: one field expires, one stays; a hash whose only
    // field expires goes with it.
    for i in 0..24 {
        let (keep, gone) = (format!("h:{i}"), format!("g:{i}"));
        assert_eq!(text(c.cmd(&["HSET", &keep, "short", "1", "long", "2", "plain", "3"]).await), ":3\r\n");
        assert_eq!(text(c.cmd(&["HSET", &gone, "only", "1"]).await), ":1\r\n");
        assert_eq!(text(c.cmd(&["HPEXPIRE", &keep, "150", "FIELDS", "1", "short"]).await), "*1\r\n:1\r\n");
        assert_eq!(text(c.cmd(&["HEXPIRE", &keep, "1000", "FIELDS", "1", "long"]).await), "*1\r\n:1\r\n");
        assert_eq!(text(c.cmd(&["HPEXPIRE", &gone, "150", "FIELDS", "1", "only"]).await), "*1\r\n:1\r\n");
    }
    assert_eq!(text(c.cmd(&["DBSIZE"]).await), ":48\r\n");
    // DBSIZE and EXISTS read no field: only active expiry can make the emptied hashes go.
    let start = Instant::now();
    while text(c.cmd(&["DBSIZE"]).await) != ":24\r\n" {
        assert!(start.elapsed() < Duration::from_secs(5), "active expiry removed the emptied hashes");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for i in 0..24 {
        let keep = format!("h:{i}");
        assert_eq!(text(c.cmd(&["EXISTS", &format!("g:{i}")]).await), ":0\r\n");
        assert_eq!(text(c.cmd(&["HLEN", &keep]).await), ":2\r\n", "{keep}");
        assert_eq!(
            text(c.cmd(&["HTTL", &keep, "FIELDS", "3", "short", "long", "plain"]).await),
            "*3\r\n:-2\r\n:1000\r\n:-1\r\n"
        );
    }
    let info = text(c.cmd(&["INFO", "stats"]).await);
    assert!(info.contains("expired_subkeys:48\r\n"), "{info}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_expiry_raises_its_keyspace_events() {
    let router = support::router(&["--embedded-nodes", "3"]).await;
    let mut c = Raw::connect(router.resp_addr()).await;
    assert_eq!(text(c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "Kh"]).await), "+OK\r\n");
    let mut sub = Raw::connect(router.resp_addr()).await;
    sub.cmd(&["PSUBSCRIBE", "__keyspace@0__:ev*"]).await;
    let steps: &[(&[&str], &[&str])] = &[
        (&["HSET", "ev", "a", "1", "b", "2", "c", "3"], &["hset"]),
        (&["HEXPIRE", "ev", "100", "FIELDS", "2", "a", "nope"], &["hexpire"]),
        (&["HEXPIRE", "ev", "100", "NX", "FIELDS", "1", "a"], &[]),
        (&["HPERSIST", "ev", "FIELDS", "1", "a"], &["hpersist"]),
        (&["HEXPIRE", "ev", "0", "FIELDS", "1", "a"], &["hdel"]),
        (&["HGETDEL", "ev", "FIELDS", "1", "b"], &["hdel"]),
        (&["HSETEX", "ev", "PX", "100000", "FIELDS", "1", "d", "4"], &["hset", "hexpire"]),
        (&["HPEXPIRE", "ev", "40", "FIELDS", "1", "c"], &["hexpire"]),
    ];
    for (cmd, events) in steps {
        c.cmd(cmd).await;
        for e in *events {
            let got = text(sub.reply_within(Duration::from_secs(2)).await.unwrap_or_default());
            assert!(got.ends_with(&format!("${}\r\n{e}\r\n", e.len())), "{cmd:?}: want {e}, got {got:?}");
        }
    }
    // The field that expires raises `hexpired` when active expiry removes it.
    let got = text(sub.reply_within(Duration::from_secs(3)).await.unwrap_or_default());
    assert!(got.ends_with("$8\r\nhexpired\r\n"), "{got:?}");
    assert_eq!(text(c.cmd(&["HKEYS", "ev"]).await), "*1\r\n$1\r\nd\r\n");
    assert_eq!(sub.reply_within(Duration::from_millis(200)).await, None, "nothing more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_times_in_transactions_acl_and_command_info() {
    let router = support::router(&["--embedded-nodes", "3"]).await;
    let mut c = Raw::connect(router.resp_addr()).await;
    assert_eq!(text(c.cmd(&["MULTI"]).await), "+OK\r\n");
    assert_eq!(
        text(c.cmd(&["HSETEX", "tx", "PXAT", "4000000000000", "FIELDS", "1", "f", "v"]).await),
        "+QUEUED\r\n"
    );
    assert_eq!(text(c.cmd(&["HPEXPIRETIME", "tx", "FIELDS", "1", "f"]).await), "+QUEUED\r\n");
    assert_eq!(text(c.cmd(&["HGETEX", "tx", "PERSIST", "FIELDS", "1", "f"]).await), "+QUEUED\r\n");
    assert_eq!(text(c.cmd(&["HTTL", "tx", "FIELDS", "1", "f"]).await), "+QUEUED\r\n");
    assert_eq!(
        text(c.cmd(&["EXEC"]).await),
        "*4\r\n:1\r\n*1\r\n:4000000000000\r\n*1\r\n$1\r\nv\r\n*1\r\n:-1\r\n"
    );

    // Commands newer than Redis 7.0's table are allowed as commands added later are: by `+@all`
    // (and no denied category of theirs); their keys by the key patterns.
    assert_eq!(text(c.cmd(&["ACL", "SETUSER", "app", "on", "nopass", "~app:*", "+@all"]).await), "+OK\r\n");
    let mut app = Raw::connect(router.resp_addr()).await;
    assert_eq!(text(app.cmd(&["AUTH", "app", "x"]).await), "+OK\r\n");
    assert_eq!(text(app.cmd(&["HSET", "app:h", "f", "v"]).await), ":1\r\n");
    assert_eq!(text(app.cmd(&["HEXPIRE", "app:h", "100", "FIELDS", "1", "f"]).await), "*1\r\n:1\r\n");
    let denied = text(app.cmd(&["HEXPIRE", "tx", "100", "FIELDS", "1", "f"]).await);
    assert!(denied.starts_with("-NOPERM"), "{denied}");
    assert_eq!(text(app.cmd(&["HTTL", "tx", "FIELDS", "1", "f"]).await).get(..7), Some("-NOPERM"));
    assert_eq!(text(c.cmd(&["ACL", "SETUSER", "app", "-@hash"]).await), "+OK\r\n");
    let denied = text(app.cmd(&["HTTL", "app:h", "FIELDS", "1", "f"]).await);
    assert!(denied.starts_with("-NOPERM this user has no permissions to run the 'httl' command"), "{denied}");

    assert_eq!(
        text(c.cmd(&["COMMAND", "GETKEYS", "HEXPIRE", "k", "10", "FIELDS", "1", "f"]).await),
        "*1\r\n$1\r\nk\r\n"
    );
    let info = text(c.cmd(&["COMMAND", "INFO", "hsetex"]).await);
    assert!(info.starts_with("*1\r\n*10\r\n$6\r\nhsetex\r\n:-6\r\n"), "{info}");
    assert!(info.contains("+denyoom\r\n"), "{info}");
}
