//! Valkey's compare-and-write commands end to end through a router of 3 embedded nodes: SET ...
//! IFEQ (Valkey 8.1; its replies are compared byte for byte with valkey-server 8.1 by
//! `tests/differential/newer/strings.redis`) and DELIFEQ (Valkey 9.0, which no oracle installed
//! here serves: checked against Valkey's documented replies). Beyond the replies: keys on every
//! node, inside MULTI, the `del`/`set` keyspace events, ACL key permissions of a command Redis
//! 7.0's table lacks, and COMMAND INFO/GETKEYS.

mod support;

use support::Raw;

fn text(b: Vec<u8>) -> String {
    String::from_utf8_lossy(&b).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delifeq_releases_only_the_holders_lock_on_every_node() {
    let router = support::router(&["--embedded-nodes", "3"]).await;
    let mut c = Raw::connect(router.resp_addr()).await;
    // Enough keys that every node holds some.
    for i in 0..30 {
        let key = format!("lock:{i}");
        assert_eq!(text(c.cmd(&["SET", &key, "owner-a", "NX", "PX", "60000"]).await), "+OK\r\n");
        assert_eq!(text(c.cmd(&["DELIFEQ", &key, "owner-b"]).await), ":0\r\n", "{key}: not the holder");
        assert_eq!(text(c.cmd(&["GET", &key]).await), "$7\r\nowner-a\r\n");
        assert_eq!(text(c.cmd(&["DELIFEQ", &key, "owner-a"]).await), ":1\r\n", "{key}: the holder");
        assert_eq!(text(c.cmd(&["EXISTS", &key]).await), ":0\r\n");
        assert_eq!(text(c.cmd(&["DELIFEQ", &key, "owner-a"]).await), ":0\r\n", "{key}: already gone");
    }
    assert_eq!(text(c.cmd(&["SET", "lock:x", "owner-a"]).await), "+OK\r\n");
    assert_eq!(text(c.cmd(&["delifeq", "lock:x", "OWNER-A"]).await), ":0\r\n", "compared byte for byte");
    assert_eq!(text(c.cmd(&["RPUSH", "queue", "owner-a"]).await), ":1\r\n");
    assert_eq!(
        text(c.cmd(&["DELIFEQ", "queue", "owner-a"]).await),
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
    );
    assert_eq!(
        text(c.cmd(&["DELIFEQ", "lock:x"]).await),
        "-ERR wrong number of arguments for 'delifeq' command\r\n"
    );
    assert_eq!(text(c.cmd(&["LLEN", "queue"]).await), ":1\r\n", "WRONGTYPE changes nothing");

    // In a transaction, after a SET IFEQ that moved the lock to its next holder.
    assert_eq!(text(c.cmd(&["MULTI"]).await), "+OK\r\n");
    assert_eq!(text(c.cmd(&["SET", "lock:x", "owner-b", "IFEQ", "owner-a"]).await), "+QUEUED\r\n");
    assert_eq!(text(c.cmd(&["DELIFEQ", "lock:x", "owner-a"]).await), "+QUEUED\r\n");
    assert_eq!(text(c.cmd(&["GET", "lock:x"]).await), "+QUEUED\r\n");
    assert_eq!(text(c.cmd(&["EXEC"]).await), "*3\r\n+OK\r\n:0\r\n$7\r\nowner-b\r\n");

    // Scripts call it too (declared with the newer commands, `shoal_wire::acl::newer`).
    assert_eq!(text(c.cmd(&["SET", "lock:s", "me"]).await), "+OK\r\n");
    let release = "return redis.call('DELIFEQ', KEYS[1], ARGV[1])";
    assert_eq!(text(c.cmd(&["EVAL", release, "1", "lock:s", "other"]).await), ":0\r\n");
    assert_eq!(text(c.cmd(&["EVAL", release, "1", "lock:s", "me"]).await), ":1\r\n");
    assert_eq!(text(c.cmd(&["EXISTS", "lock:s"]).await), ":0\r\n");

    // How clients and proxies learn where its key is.
    assert_eq!(
        text(c.cmd(&["COMMAND", "GETKEYS", "DELIFEQ", "lock:x", "v"]).await),
        "*1\r\n$6\r\nlock:x\r\n"
    );
    let info = text(c.cmd(&["COMMAND", "INFO", "delifeq"]).await);
    assert!(info.starts_with("*1\r\n*10\r\n$7\r\ndelifeq\r\n:3\r\n"), "{info}");
    assert!(info.contains("+write\r\n") && info.contains("+fast\r\n"), "{info}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_writes_raise_events_only_when_they_write() {
    let router = support::router(&["--embedded-nodes", "3"]).await;
    let mut c = Raw::connect(router.resp_addr()).await;
    assert_eq!(text(c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "KEA"]).await), "+OK\r\n");
    let mut sub = Raw::connect(router.resp_addr()).await;
    sub.cmd(&["PSUBSCRIBE", "__keyspace@0__:k*"]).await;
    // The router opens its pub/sub links to the nodes as it starts, and a PSUBSCRIBE waits for a
    // link still opening at most the request deadline (a node that is down must not hold it up);
    // on a busy machine a link can take longer. The subscription reaches that node once it is
    // open: write until an event arrives, then let any late one in before the checks below.
    let mut armed = false;
    for _ in 0..50 {
        c.cmd(&["SET", "k1", "a"]).await;
        if let Some(event) = sub.reply_within(std::time::Duration::from_millis(200)).await {
            assert!(text(event).ends_with("$3\r\nset\r\n"));
            armed = true;
            break;
        }
    }
    assert!(armed, "no keyspace event within 10 s of PSUBSCRIBE");
    while sub.reply_within(std::time::Duration::from_millis(300)).await.is_some() {}
    // Not equal: nothing written, nothing raised (with GET as without).
    assert_eq!(text(c.cmd(&["SET", "k1", "b", "IFEQ", "zz"]).await), "$-1\r\n");
    assert_eq!(text(c.cmd(&["SET", "k1", "b", "IFEQ", "zz", "GET"]).await), "$1\r\na\r\n");
    assert_eq!(text(c.cmd(&["DELIFEQ", "k1", "zz"]).await), ":0\r\n");
    assert_eq!(sub.reply_within(std::time::Duration::from_millis(300)).await, None);
    // Equal: `set`, then `del`.
    assert_eq!(text(c.cmd(&["SET", "k1", "b", "IFEQ", "a", "GET"]).await), "$1\r\na\r\n");
    assert!(text(sub.reply().await.unwrap()).ends_with("$3\r\nset\r\n"));
    assert_eq!(text(c.cmd(&["DELIFEQ", "k1", "b"]).await), ":1\r\n");
    assert!(text(sub.reply().await.unwrap()).ends_with("$3\r\ndel\r\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delifeq_is_held_to_the_users_key_patterns() {
    let router = support::router(&["--embedded-nodes", "1"]).await;
    let mut admin = Raw::connect(router.resp_addr()).await;
    let rules = ["ACL", "SETUSER", "app", "on", ">pw", "~app:*", "%R~shared:*", "+@all"];
    assert_eq!(text(admin.cmd(&rules).await), "+OK\r\n");
    let rules = ["ACL", "SETUSER", "nostring", "on", ">pw", "~*", "+@all", "-@string"];
    assert_eq!(text(admin.cmd(&rules).await), "+OK\r\n");
    admin.cmd(&["SET", "app:lock", "t"]).await;
    admin.cmd(&["SET", "shared:lock", "t"]).await;
    admin.cmd(&["SET", "other:lock", "t"]).await;
    let mut app = Raw::connect(router.resp_addr()).await;
    assert_eq!(text(app.cmd(&["AUTH", "app", "pw"]).await), "+OK\r\n");
    let no_key = "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n";
    assert_eq!(text(app.cmd(&["DELIFEQ", "other:lock", "t"]).await), no_key);
    assert_eq!(text(app.cmd(&["DELIFEQ", "shared:lock", "t"]).await), no_key, "read-only keys");
    assert_eq!(text(app.cmd(&["DELIFEQ", "app:lock", "t"]).await), ":1\r\n");
    let mut nostring = Raw::connect(router.resp_addr()).await;
    assert_eq!(text(nostring.cmd(&["AUTH", "nostring", "pw"]).await), "+OK\r\n");
    assert_eq!(
        text(nostring.cmd(&["DELIFEQ", "other:lock", "t"]).await),
        "-NOPERM this user has no permissions to run the 'delifeq' command\r\n"
    );
    assert_eq!(
        text(admin.cmd(&["EXISTS", "other:lock", "shared:lock"]).await),
        ":2\r\n",
        "refusals changed nothing"
    );
}
