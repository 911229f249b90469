//! RESP3 CLIENT TRACKING through the router (router/src/tracking.rs): invalidation pushes for
//! writes through another router and through this one, NOLOOP, OPTIN with CLIENT CACHING YES,
//! REDIRECT to a RESP2 subscriber of `__redis__:invalidate`, BCAST with PREFIX, FLUSHALL, the
//! table bound, and redis-py's client-side cache (redis-py 5.1+, which the CI installs).

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use support::Raw;
use support::pubsub::wait_links;

/// What Redis pushes when `key` changed.
fn inv(key: &str) -> Vec<u8> {
    format!(">2\r\n$10\r\ninvalidate\r\n*1\r\n${}\r\n{key}\r\n", key.len()).into_bytes()
}

/// What Redis pushes when everything may have changed (FLUSHALL).
const FLUSH: &[u8] = b">2\r\n$10\r\ninvalidate\r\n_\r\n";

/// How long "no push" is waited for.
const QUIET: Duration = Duration::from_millis(300);
/// How long a push may take to arrive (a loaded 2-core machine).
const ARRIVES: Duration = Duration::from_secs(5);

/// A connection that sets pushes aside while it waits for a reply.
struct Client {
    raw: Raw,
    pushes: Vec<Vec<u8>>,
}

impl Client {
    async fn connect(addr: SocketAddr, resp3: bool) -> Client {
        let mut c = Client { raw: Raw::connect(addr).await, pushes: Vec::new() };
        if resp3 {
            c.cmd(&["HELLO", "3"]).await;
        }
        c
    }

    async fn cmd(&mut self, args: &[&str]) -> Vec<u8> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.raw.send(&support::encode(&args)).await;
        self.reply().await
    }

    /// The next reply; pushes read meanwhile are kept for `expect_push`.
    async fn reply(&mut self) -> Vec<u8> {
        loop {
            let r = self.raw.reply().await.expect("a reply");
            if r.starts_with(b">") {
                self.pushes.push(r);
            } else {
                return r;
            }
        }
    }

    async fn ok(&mut self, args: &[&str]) {
        let r = self.cmd(args).await;
        assert_eq!(r, b"+OK\r\n", "{args:?}: {}", String::from_utf8_lossy(&r));
    }

    /// The next push (or message), if one arrives within `limit`.
    async fn push_within(&mut self, limit: Duration) -> Option<Vec<u8>> {
        if !self.pushes.is_empty() {
            return Some(self.pushes.remove(0));
        }
        self.raw.reply_within(limit).await
    }

    async fn expect_push(&mut self, want: &[u8]) {
        let got = self.push_within(ARRIVES).await;
        assert_eq!(
            got.as_deref().map(String::from_utf8_lossy),
            Some(String::from_utf8_lossy(want)),
            "expected an invalidation"
        );
    }

    async fn expect_quiet(&mut self) {
        let got = self.push_within(QUIET).await;
        assert!(
            got.is_none(),
            "unexpected push: {:?}",
            got.map(|g| String::from_utf8_lossy(&g).into_owned())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_through_another_router_invalidates_a_client_tracking_through_this_one() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = support::two_routers(&dir, &["--embedded-nodes", "3"], &[]).await;
    let mut wa = Client::connect(a.resp_addr(), false).await;
    let mut rb = Client::connect(b.resp_addr(), true).await;
    rb.ok(&["CLIENT", "TRACKING", "ON"]).await;
    wa.ok(&["SET", "k", "v0"]).await;
    assert_eq!(wa.cmd(&["HSET", "h", "f", "1"]).await, b":1\r\n");
    assert_eq!(rb.cmd(&["GET", "k"]).await, b"$2\r\nv0\r\n");
    assert_eq!(rb.cmd(&["HGET", "h", "f"]).await, b"$1\r\n1\r\n", "any read command is tracked");
    wa.ok(&["SET", "k", "v1"]).await;
    rb.expect_push(&inv("k")).await;
    assert_eq!(wa.cmd(&["HSET", "h", "f", "2"]).await, b":0\r\n");
    rb.expect_push(&inv("h")).await;
    // One invalidation per read: the next write is not announced until the key is read again.
    wa.ok(&["SET", "k", "v2"]).await;
    rb.expect_quiet().await;
    assert_eq!(rb.cmd(&["GET", "k"]).await, b"$2\r\nv2\r\n");
    wa.ok(&["SET", "k", "v3"]).await;
    rb.expect_push(&inv("k")).await;
    // MGET, and a key that does not exist yet (its creation is a change too).
    assert_eq!(rb.cmd(&["MGET", "m1", "m2"]).await, b"*2\r\n_\r\n_\r\n");
    wa.ok(&["SET", "m2", "x"]).await;
    rb.expect_push(&inv("m2")).await;
    // FLUSHALL: the null invalidation (one per node whose keys were flushed).
    assert_eq!(rb.cmd(&["GET", "k"]).await, b"$2\r\nv3\r\n");
    wa.ok(&["FLUSHALL"]).await;
    rb.expect_push(FLUSH).await;
    let info = String::from_utf8(rb.cmd(&["CLIENT", "INFO"]).await).unwrap();
    assert!(info.contains(" flags=t ") && info.contains(" redir=0 "), "{info}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noloop_optin_redirect_and_bcast() {
    let r = support::cluster().await;
    wait_links(&r).await;
    let addr = r.resp_addr();
    let mut writer = Client::connect(addr, false).await;

    // NOLOOP: not told of its own writes; others holding the key are.
    let mut quiet = Client::connect(addr, true).await;
    let mut other = Client::connect(addr, true).await;
    quiet.ok(&["CLIENT", "TRACKING", "ON", "NOLOOP"]).await;
    other.ok(&["CLIENT", "TRACKING", "ON"]).await;
    writer.ok(&["SET", "n", "1"]).await;
    quiet.cmd(&["GET", "n"]).await;
    other.cmd(&["GET", "n"]).await;
    quiet.ok(&["SET", "n", "2"]).await;
    other.expect_push(&inv("n")).await;
    quiet.expect_quiet().await;
    // Without NOLOOP a client is told of its own write (before the reply, as in Redis).
    other.cmd(&["GET", "n"]).await;
    other.ok(&["SET", "n", "3"]).await;
    other.expect_push(&inv("n")).await;

    // RESP2 without REDIRECT: no pushes (they would corrupt its replies), as in Redis.
    let mut resp2 = Client::connect(addr, false).await;
    resp2.ok(&["CLIENT", "TRACKING", "ON"]).await;
    resp2.cmd(&["GET", "q"]).await;
    writer.ok(&["SET", "q", "1"]).await;
    resp2.expect_quiet().await;
    assert_eq!(resp2.cmd(&["PING"]).await, b"+PONG\r\n");

    // Reads queued in MULTI are tracked when EXEC runs them.
    other.ok(&["MULTI"]).await;
    assert_eq!(other.cmd(&["GET", "tx"]).await, b"+QUEUED\r\n");
    assert_eq!(other.cmd(&["EXEC"]).await, b"*1\r\n_\r\n");
    writer.ok(&["SET", "tx", "1"]).await;
    other.expect_push(&inv("tx")).await;

    // OPTIN: only reads after CLIENT CACHING YES are tracked (the next command only).
    let mut optin = Client::connect(addr, true).await;
    optin.ok(&["CLIENT", "TRACKING", "ON", "OPTIN"]).await;
    optin.cmd(&["GET", "o"]).await;
    writer.ok(&["SET", "o", "1"]).await;
    optin.expect_quiet().await;
    optin.ok(&["CLIENT", "CACHING", "YES"]).await;
    optin.cmd(&["GET", "o"]).await;
    optin.cmd(&["GET", "o2"]).await;
    writer.ok(&["SET", "o2", "1"]).await;
    writer.ok(&["SET", "o", "2"]).await;
    optin.expect_push(&inv("o")).await;
    optin.expect_quiet().await;

    // OPTOUT: every read is tracked except the one command after CLIENT CACHING NO.
    let mut optout = Client::connect(addr, true).await;
    optout.ok(&["CLIENT", "TRACKING", "ON", "OPTOUT"]).await;
    optout.ok(&["CLIENT", "CACHING", "NO"]).await;
    optout.cmd(&["GET", "x1"]).await;
    optout.cmd(&["GET", "x2"]).await;
    writer.ok(&["SET", "x1", "1"]).await;
    writer.ok(&["SET", "x2", "1"]).await;
    optout.expect_push(&inv("x2")).await;
    optout.expect_quiet().await;

    // REDIRECT to a RESP2 connection subscribed to __redis__:invalidate.
    let mut sink = Client::connect(addr, false).await;
    let id = String::from_utf8(sink.cmd(&["CLIENT", "ID"]).await).unwrap();
    let id = id.trim_start_matches(':').trim().to_string();
    sink.cmd(&["SUBSCRIBE", "__redis__:invalidate"]).await;
    let mut redirected = Client::connect(addr, false).await;
    redirected.ok(&["CLIENT", "TRACKING", "ON", "REDIRECT", &id]).await;
    assert_eq!(redirected.cmd(&["CLIENT", "GETREDIR"]).await, format!(":{id}\r\n").into_bytes());
    let info = String::from_utf8(redirected.cmd(&["CLIENT", "INFO"]).await).unwrap();
    assert!(info.contains(" flags=t ") && info.contains(&format!(" redir={id} ")), "{info}");
    redirected.cmd(&["GET", "rk"]).await;
    writer.ok(&["SET", "rk", "1"]).await;
    let got = sink.push_within(ARRIVES).await.expect("a redirected invalidation");
    assert_eq!(got, b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$2\r\nrk\r\n");

    // BCAST with PREFIX: every change of a matching key, read or not, wherever written.
    let mut bcast = Client::connect(addr, true).await;
    bcast.ok(&["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "user:"]).await;
    let info = String::from_utf8(bcast.cmd(&["CLIENT", "INFO"]).await).unwrap();
    assert!(info.contains(" flags=tB "), "{info}");
    writer.ok(&["SET", "user:1", "x"]).await;
    bcast.expect_push(&inv("user:1")).await;
    writer.ok(&["SET", "other", "x"]).await;
    writer.ok(&["SET", "user:1", "y"]).await;
    bcast.expect_push(&inv("user:1")).await;
    bcast.expect_quiet().await;
    bcast.ok(&["SET", "user:2", "z"]).await;
    bcast.expect_push(&inv("user:2")).await;
    // Default-mode clients keep working beside BCAST (the router tracks keys and prefixes).
    other.cmd(&["GET", "plain"]).await;
    writer.ok(&["SET", "plain", "1"]).await;
    other.expect_push(&inv("plain")).await;
}

/// A tracking client that pipelines a write and then a read of the same key is told of the next
/// change by someone else, and not of its own earlier write: its read registers after its write
/// reached the node (the registration must not overtake the write).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelined_write_then_read_registers_after_the_write() {
    let r = support::cluster().await;
    wait_links(&r).await;
    let addr = r.resp_addr();
    let mut writer = Client::connect(addr, false).await;
    let mut c = Client::connect(addr, true).await;
    c.ok(&["CLIENT", "TRACKING", "ON"]).await;
    for round in 0..20 {
        let key = format!("pw{round}");
        let mut pipeline = support::encode(&[b"SET", key.as_bytes(), b"mine"]);
        pipeline.extend(support::encode(&[b"GET", key.as_bytes()]));
        c.raw.send(&pipeline).await;
        assert_eq!(c.reply().await, b"+OK\r\n");
        assert_eq!(c.reply().await, b"$4\r\nmine\r\n");
        c.expect_quiet().await;
        writer.ok(&["SET", &key, "theirs"]).await;
        c.expect_push(&inv(&key)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_whose_target_is_gone_is_reported_as_redis_does() {
    let r = support::cluster().await;
    wait_links(&r).await;
    let addr = r.resp_addr();
    let mut writer = Client::connect(addr, false).await;
    // A target that has a push queue (it subscribed), then goes away.
    let mut target = Client::connect(addr, false).await;
    let id = String::from_utf8(target.cmd(&["CLIENT", "ID"]).await).unwrap();
    let id = id.trim_start_matches(':').trim().to_string();
    target.cmd(&["SUBSCRIBE", "__redis__:invalidate"]).await;
    let mut c = Client::connect(addr, true).await;
    c.ok(&["CLIENT", "TRACKING", "ON", "REDIRECT", &id]).await;
    c.cmd(&["GET", "gone"]).await;
    drop(target);
    let list = || r.state.clients.get(id.parse().unwrap()).is_none();
    support::wait_until(ARRIVES, list).await;
    // Before the write: nothing broken yet.
    let info = String::from_utf8(c.cmd(&["CLIENT", "INFO"]).await).unwrap();
    assert!(info.contains(" flags=t "), "{info}");
    writer.ok(&["SET", "gone", "1"]).await;
    // Redis's `sendTrackingMessage`: the invalidation is dropped and the RESP3 client told.
    c.expect_push(format!(">2\r\n$21\r\ntracking-redir-broken\r\n:{id}\r\n").as_bytes()).await;
    c.expect_quiet().await;
    let info = String::from_utf8(c.cmd(&["CLIENT", "INFO"]).await).unwrap();
    assert!(info.contains(" flags=tR ") && info.contains(&format!(" redir={id} ")), "{info}");
    let tracking = String::from_utf8(c.cmd(&["CLIENT", "TRACKINGINFO"]).await).unwrap();
    assert!(tracking.contains("$15\r\nbroken_redirect\r\n"), "{tracking}");
    // Turning tracking on again (without the redirect) clears the flag, and pushes come home.
    c.ok(&["CLIENT", "TRACKING", "ON"]).await;
    let info = String::from_utf8(c.cmd(&["CLIENT", "INFO"]).await).unwrap();
    assert!(info.contains(" flags=t "), "{info}");
    c.cmd(&["GET", "gone"]).await;
    writer.ok(&["SET", "gone", "2"]).await;
    c.expect_push(&inv("gone")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_table_invalidates_its_oldest_keys() {
    let r = support::cluster().await;
    // A node link that bounces (CI once saw one under load) makes the router flush every
    // tracking client, as Redis does on FLUSHALL: that run proves nothing about the table, so it
    // is run again (three runs at most).
    for _ in 0..3 {
        wait_links(&r).await;
        if full_table_run(&r).await {
            return;
        }
    }
    panic!("three runs in a row were flushed by a bouncing node link");
}

/// One run of the test above; `false` when a flush-all invalidation voided it.
async fn full_table_run(r: &shoal_router::Router) -> bool {
    let mut c = Client::connect(r.resp_addr(), true).await;
    c.ok(&["CONFIG", "SET", "tracking-table-max-keys", "2"]).await;
    c.ok(&["CLIENT", "TRACKING", "ON"]).await;
    c.cmd(&["MGET", "a", "b"]).await;
    let voided = |got: &Option<Vec<u8>>| got.as_deref() == Some(FLUSH);
    let got = c.push_within(QUIET).await;
    if voided(&got) {
        return false;
    }
    assert!(got.is_none(), "unexpected push: {:?}", got.map(|g| String::from_utf8_lossy(&g).into_owned()));
    c.cmd(&["GET", "c"]).await;
    let got = c.push_within(ARRIVES).await;
    if voided(&got) {
        return false;
    }
    assert_eq!(got, Some(inv("a")), "the oldest key is invalidated when the table is full");
    let got = c.push_within(QUIET).await;
    if voided(&got) {
        return false;
    }
    assert!(got.is_none(), "unexpected push: {:?}", got.map(|g| String::from_utf8_lossy(&g).into_owned()));
    let tracked = r.state.pubsub.tracking.len();
    // The evicted key is forgotten; the others are still tracked.
    let mut w = Client::connect(r.resp_addr(), false).await;
    w.ok(&["SET", "a", "1"]).await;
    w.ok(&["SET", "b", "1"]).await;
    let got = c.push_within(ARRIVES).await;
    if voided(&got) {
        return false;
    }
    assert_eq!(tracked, 2);
    assert_eq!(got, Some(inv("b")), "a tracked key's write invalidates it");
    let got = c.push_within(QUIET).await;
    if voided(&got) {
        return false;
    }
    assert!(got.is_none(), "unexpected push: {:?}", got.map(|g| String::from_utf8_lossy(&g).into_owned()));
    c.ok(&["CONFIG", "SET", "tracking-table-max-keys", "0"]).await;
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_client_side_cache_is_invalidated_by_another_client() {
    // redis-py is a test dependency like in tests/redis_py.rs (the CI installs it): missing or
    // too old (client-side caching came in 5.1) fails the test instead of skipping it.
    let out = std::process::Command::new("python3")
        .args(["-c", "import redis; print(redis.__version__)"])
        .output()
        .expect("python3 runs");
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let parts: Vec<u32> = v.split('.').filter_map(|p| p.parse().ok()).collect();
    assert!(
        out.status.success() && parts.len() >= 2 && (parts[0], parts[1]) >= (5, 1),
        "redis-py 5.1+ is needed (python3 -m pip install 'redis>=5.1'); found {v:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = support::cluster().await;
    wait_links(&r).await;
    let script = r#"
import sys, time, redis
from redis.cache import CacheConfig
import redis.connection
# redis-py turns client-side caching on only for servers reporting 7.4+ (a policy, not a protocol
# need); the router reports 7.0.15, whose CLIENT TRACKING it implements (docs/near-cache.md).
redis.connection.CacheProxyConnection.MIN_ALLOWED_VERSION = "7.0.0"
host, port = sys.argv[1], int(sys.argv[2])
cached = redis.Redis(host=host, port=port, protocol=3, cache_config=CacheConfig())
other = redis.Redis(host=host, port=port)
other.set("pyk", "v1")
assert cached.get("pyk") == b"v1"
assert cached.get("pyk") == b"v1"
cache = cached.get_cache()
assert cache.size >= 1, "the value is cached"
other.set("pyk", "v2")
deadline = time.time() + 5
while time.time() < deadline:
    if cached.get("pyk") == b"v2":
        print("ok")
        sys.exit(0)
    time.sleep(0.01)
sys.exit("the cached value was never invalidated")
"#;
    let port = r.resp_addr().port().to_string();
    // A blocking child on a blocking thread: the router keeps serving on the runtime.
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3").args(["-c", script, "127.0.0.1", &port]).output().unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_node_stream_flushes_tracking_clients() {
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, list) = support::procs::NodeProc::start_many(dir.path(), 2).await;
    let r = support::router(&["--nodes", &list, "--deadline-ms", "500"]).await;
    wait_links(&r).await;
    let mut c = Client::connect(r.resp_addr(), true).await;
    c.ok(&["CLIENT", "TRACKING", "ON"]).await;
    c.cmd(&["GET", "k"]).await;
    // The node's invalidations stop with its stream: the client must drop everything, since a
    // write it would not hear of may follow.
    nodes[1].kill();
    c.expect_push(FLUSH).await;
    assert_eq!(r.state.pubsub.tracking.len(), 0);
}
