//! ACL users end to end: the `--aclfile` followed on change, ACL SAVE/LOAD, ACL LOG's entries,
//! DELUSER closing its user's connections, ACL CAT against redis-server (as a set: Redis lists a
//! category in its hash table's order), and the HTTP API's Basic and Bearer users. The reply
//! texts themselves are compared byte for byte with redis-server by the differential script
//! `tests/differential/acl.redis`.

mod support;

use std::time::Duration;

use base64::Engine as _;
use support::Raw;

fn text(b: Vec<u8>) -> String {
    String::from_utf8_lossy(&b).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aclfile_is_loaded_followed_saved_and_reloaded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.acl");
    std::fs::write(
        &path,
        "user default on nopass ~* &* +@all\nuser app on >apppw ~app:* resetchannels -@all +get\n",
    )
    .unwrap();
    let router = support::router(&["--embedded-nodes", "1", "--aclfile", path.to_str().unwrap()]).await;
    let mut admin = Raw::connect(router.resp_addr()).await;
    let mut app = Raw::connect(router.resp_addr()).await;
    assert_eq!(text(app.cmd(&["AUTH", "app", "apppw"]).await), "+OK\r\n", "loaded at start");
    assert_eq!(text(app.cmd(&["GET", "app:1"]).await), "$-1\r\n");
    assert_eq!(
        text(app.cmd(&["GET", "other"]).await),
        "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"
    );

    // Another router (or an operator) rewrites the shared file: followed within about a second;
    // the connection of a user still defined keeps working under its new rules.
    std::fs::write(
        &path,
        "user default on nopass ~* &* +@all\nuser app on >apppw ~* resetchannels -@all +get\n",
    )
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        if text(app.cmd(&["GET", "other"]).await) == "$-1\r\n" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the changed file was not adopted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A bad file is refused: the users in force stay.
    std::fs::write(&path, "user app on +nosuch\n").unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(text(app.cmd(&["GET", "other"]).await), "$-1\r\n", "a bad file keeps the users in force");
    let err = text(admin.cmd(&["ACL", "LOAD"]).await);
    assert!(
        err.starts_with("-ERR ")
            && err.contains(":1: Unknown command or category name in ACL. WARNING: ACL errors detected"),
        "{err}"
    );

    // ACL SAVE writes what ACL LIST shows; ACL LOAD re-reads it and, as Redis, closes the
    // connections of every user but default.
    assert_eq!(text(admin.cmd(&["ACL", "SETUSER", "ops", "on", ">o", "+@all", "~*"]).await), "+OK\r\n");
    assert_eq!(text(admin.cmd(&["ACL", "SAVE"]).await), "+OK\r\n");
    let saved = std::fs::read_to_string(&path).unwrap();
    assert!(saved.contains("user ops on #") && saved.contains("user app on #"), "{saved}");
    assert_eq!(text(admin.cmd(&["ACL", "LOAD"]).await), "+OK\r\n");
    assert!(app.reply_within(Duration::from_secs(2)).await.is_none());
    let mut again = Raw::connect(router.resp_addr()).await;
    assert_eq!(text(again.cmd(&["AUTH", "ops", "o"]).await), "+OK\r\n");
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_save_and_load_without_a_file_answer_like_redis() {
    let (_redis, redis_addr) = support::redis_server().await;
    let router = support::router(&["--embedded-nodes", "1"]).await;
    let mut theirs = Raw::connect(redis_addr).await;
    let mut ours = Raw::connect(router.resp_addr()).await;
    for cmd in [&["ACL", "SAVE"][..], &["ACL", "LOAD"]] {
        assert_eq!(text(ours.cmd(cmd).await), text(theirs.cmd(cmd).await));
    }
    // ACL CAT <category>: the same commands (Redis's order is its hash table's).
    for category in ["read", "dangerous", "connection", "scripting"] {
        let mut want: Vec<String> =
            text(theirs.cmd(&["ACL", "CAT", category]).await).lines().map(String::from).collect();
        let mut got: Vec<String> =
            text(ours.cmd(&["ACL", "CAT", category]).await).lines().map(String::from).collect();
        want.sort();
        got.sort();
        assert!(want.len() > 4);
        assert_eq!(got, want, "@{category}");
    }
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_log_records_refusals_and_deluser_disconnects() {
    let router = support::router(&["--embedded-nodes", "1"]).await;
    let mut admin = Raw::connect(router.resp_addr()).await;
    admin.cmd(&["ACL", "SETUSER", "u", "on", ">pw", "~k*", "+@all", "-del"]).await;
    let mut u = Raw::connect(router.resp_addr()).await;
    assert_eq!(
        text(u.cmd(&["AUTH", "u", "wrong"]).await),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(text(u.cmd(&["AUTH", "u", "pw"]).await), "+OK\r\n");
    u.cmd(&["DEL", "k1"]).await;
    u.cmd(&["DEL", "k1"]).await;
    u.cmd(&["MULTI"]).await;
    assert_eq!(
        text(u.cmd(&["GET", "x"]).await),
        "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"
    );
    u.cmd(&["DISCARD"]).await;
    let log = text(admin.cmd(&["ACL", "LOG"]).await);
    // Newest first: the key in MULTI, the DELs grouped (count 2), the failed AUTH; each entry a
    // map of 7 fields (a flat array of 14 in RESP2).
    assert!(log.starts_with("*3\r\n"), "{log}");
    let entries: Vec<String> = log.split("*14\r\n").skip(1).map(|e| e.replace("\r\n", "|")).collect();
    let entry = |i: usize| entries[i].clone();
    assert!(
        entry(0).contains("$5|count|:1|$6|reason|$3|key|$7|context|$5|multi|$6|object|$1|x|$8|username|$1|u"),
        "{}",
        entry(0)
    );
    assert!(
        entry(1).contains("count|:2|$6|reason|$7|command|$7|context|$8|toplevel|$6|object|$3|del"),
        "{}",
        entry(1)
    );
    assert!(entry(2).contains("reason|$4|auth|") && entry(2).contains("object|$4|auth"), "{}", entry(2));
    assert!(entry(0).contains("user=u "), "client-info shows the user");
    assert_eq!(text(admin.cmd(&["ACL", "LOG", "RESET"]).await), "+OK\r\n");
    assert_eq!(text(admin.cmd(&["ACL", "LOG"]).await), "*0\r\n");

    assert!(text(admin.cmd(&["CLIENT", "LIST"]).await).contains(" user=u "));
    assert_eq!(text(admin.cmd(&["ACL", "DELUSER", "u"]).await), ":1\r\n");
    // Redis closes the connections of a deleted user.
    let closed = u.until_close().await;
    assert!(closed.is_empty() || !String::from_utf8_lossy(&closed).contains("+"), "{closed:?}");
    let genpass = text(admin.cmd(&["ACL", "GENPASS"]).await);
    assert_eq!(genpass.len(), "$64\r\n".len() + 64 + 2, "{genpass}");
    router.shutdown().await;
}

/// ACL LOG's entries without the fields that differ between two servers (age, client info):
/// `count reason context object username` each.
fn log_entries(log: &str) -> Vec<String> {
    log.split("*14\r\n")
        .skip(1)
        .map(|e| {
            let lines: Vec<&str> = e.split("\r\n").collect();
            let field = |name: &str| {
                let i = lines.iter().position(|l| *l == name).unwrap_or_else(|| panic!("{name} in {e}"));
                lines[i + 1].trim_start_matches(':').to_string()
            };
            let value = |name: &str| {
                let i = lines.iter().position(|l| *l == name).unwrap_or_else(|| panic!("{name} in {e}"));
                lines[i + 2].to_string()
            };
            format!(
                "{} {} {} {} {}",
                field("count"),
                value("reason"),
                value("context"),
                value("object"),
                value("username")
            )
        })
        .collect()
}

/// Refusals inside scripts (checked on the nodes) reach the router's ACL LOG with context `lua`,
/// grouped and ordered as redis-server groups and orders them; scripts of an unrestricted user
/// log nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_log_records_script_refusals_like_redis() {
    let (_redis, redis_addr) = support::redis_server().await;
    let router = support::router(&["--embedded-nodes", "3"]).await;
    let mut logs = Vec::new();
    for addr in [redis_addr, router.resp_addr()] {
        let mut admin = Raw::connect(addr).await;
        admin.cmd(&["ACL", "LOG", "RESET"]).await;
        admin.cmd(&["ACL", "SETUSER", "lu", "on", ">pw", "~k*", "&ch*", "+@all", "-set"]).await;
        let mut u = Raw::connect(addr).await;
        assert_eq!(text(u.cmd(&["AUTH", "lu", "pw"]).await), "+OK\r\n");
        for script in [
            "return redis.call('set','k1','v')",
            "return redis.pcall('get','x1')",
            "return redis.pcall('get','x1')",
            "return redis.call('publish','zz','m')",
            "return redis.call('get','k1')",
        ] {
            u.cmd(&["EVAL", script, "1", "k1"]).await;
        }
        u.cmd(&["MULTI"]).await;
        u.cmd(&["EVAL", "return redis.pcall('get','x2')", "1", "k1"]).await;
        u.cmd(&["EXEC"]).await;
        // The default user is unrestricted: its scripts are not checked, nothing is logged.
        admin.cmd(&["EVAL", "return redis.call('set','k1','v')", "1", "k1"]).await;
        let log = text(admin.cmd(&["ACL", "LOG"]).await);
        assert!(log.contains("id=") && log.contains(" user=lu "), "client info: {log}");
        logs.push(log_entries(&log));
        admin.cmd(&["ACL", "DELUSER", "lu"]).await;
        admin.cmd(&["DEL", "k1"]).await;
    }
    assert_eq!(
        logs[1],
        ["1 key lua x2 lu", "1 channel lua zz lu", "2 key lua x1 lu", "1 command lua set lu"],
        "Shoal's"
    );
    assert_eq!(logs[0], logs[1], "as redis-server");
    router.shutdown().await;
}

fn basic(user: &str, pass: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
}

async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    auth: Option<String>,
    body: &str,
) -> String {
    let auth = auth.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: t\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    support::http_raw(addr, req.as_bytes()).await
}

/// A router with `--requirepass rootpw`, a user `reader` (password `readpw`) who may read `pub:*`,
/// `pub:1` set to `hello`, and an admin connection signed in as the default user.
async fn router_with_a_reader() -> (shoal_router::Router, Raw) {
    let router = support::router(&["--embedded-nodes", "1", "--requirepass", "rootpw"]).await;
    let mut admin = Raw::connect(router.resp_addr()).await;
    admin.cmd(&["AUTH", "rootpw"]).await;
    admin.cmd(&["ACL", "SETUSER", "reader", "on", ">readpw", "%R~pub:*", "+@all"]).await;
    admin.cmd(&["SET", "pub:1", "hello"]).await;
    (router, admin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_basic_and_bearer_act_as_acl_users() {
    let (router, mut admin) = router_with_a_reader().await;
    admin.cmd(&["ACL", "SETUSER", "svc", "on", ">svc-token", "~*", "+@all", "-@write"]).await;
    let addr = router.http_addr();

    let r = http(addr, "GET", "/keys/pub:1", None, "").await;
    assert!(r.starts_with("HTTP/1.1 401"), "{r}");
    let r = http(addr, "GET", "/keys/pub:1", Some(format!("Basic {}", basic("reader", "readpw"))), "").await;
    assert!(r.starts_with("HTTP/1.1 200") && r.ends_with("hello"), "{r}");
    let r = http(addr, "GET", "/keys/pub:1", Some(format!("Basic {}", basic("reader", "nope"))), "").await;
    assert!(r.starts_with("HTTP/1.1 401"), "{r}");
    let r = http(addr, "PUT", "/keys/pub:1", Some(format!("Basic {}", basic("reader", "readpw"))), "x").await;
    assert!(r.starts_with("HTTP/1.1 403"), "{r}");
    assert!(
        r.contains("NOPERM this user has no permissions to access one of the keys used as arguments"),
        "{r}"
    );

    // Bearer: the token is a user's password.
    let r = http(addr, "GET", "/keys/pub:1", Some("Bearer svc-token".into()), "").await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let r = http(addr, "DELETE", "/keys/pub:1", Some("Bearer svc-token".into()), "").await;
    assert!(
        r.starts_with("HTTP/1.1 403")
            && r.contains("NOPERM this user has no permissions to run the 'del' command"),
        "{r}"
    );
    let r = http(addr, "GET", "/keys/pub:1", Some("Bearer wrong".into()), "").await;
    assert!(r.starts_with("HTTP/1.1 401"), "{r}");
    // --requirepass keeps working as the default user's password, as before.
    let r = http(addr, "DELETE", "/keys/pub:1", Some("Bearer rootpw".into()), "").await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let r = http(addr, "GET", "/keys/pub:1", Some(format!("Basic {}", basic("default", "rootpw"))), "").await;
    assert!(r.starts_with("HTTP/1.1 404"), "{r}");
    router.shutdown().await;
}

/// One keep-alive HTTP connection: requests go one after another, each response read whole by
/// its Content-Length.
struct KeepAlive(tokio::net::TcpStream);

impl KeepAlive {
    async fn request(&mut self, method: &str, path: &str, auth: Option<String>, body: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let auth = auth.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: t\r\n{auth}Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        self.0.write_all(req.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        let read = async {
            loop {
                let mut chunk = [0u8; 4096];
                let n = self.0.read(&mut chunk).await.unwrap();
                assert!(n > 0, "the connection closed: {}", String::from_utf8_lossy(&got));
                got.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&got).into_owned();
                if let Some(end) = text.find("\r\n\r\n") {
                    let length: usize = text[..end]
                        .lines()
                        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ")?.parse().ok())
                        .expect("a content-length");
                    if got.len() >= end + 4 + length {
                        return text;
                    }
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(5), read).await.expect("a response in 5 s")
    }
}

/// The requests of one HTTP connection share a session (it is made once per connection), yet
/// each acts as the user its own credentials name: a request never inherits the previous one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_requests_on_one_connection_each_act_as_their_own_user() {
    let (router, mut admin) = router_with_a_reader().await;
    let mut conn = KeepAlive(tokio::net::TcpStream::connect(router.http_addr()).await.unwrap());
    let reader = || Some(format!("Basic {}", basic("reader", "readpw")));
    let root = || Some("Bearer rootpw".to_string());

    let r = conn.request("GET", "/keys/pub:1", reader(), "").await;
    assert!(r.starts_with("HTTP/1.1 200") && r.ends_with("hello"), "{r}");
    let r = conn.request("PUT", "/keys/pub:1", reader(), "x").await;
    assert!(r.starts_with("HTTP/1.1 403"), "the reader may not write: {r}");
    let r = conn.request("PUT", "/keys/pub:1", root(), "by-root").await;
    assert!(r.starts_with("HTTP/1.1 200"), "the default user may, on the same connection: {r}");
    let r = conn.request("PUT", "/keys/pub:1", reader(), "x").await;
    assert!(r.starts_with("HTTP/1.1 403"), "the reader's next request is the reader's again: {r}");
    let r = conn.request("GET", "/keys/pub:1", None, "").await;
    assert!(r.starts_with("HTTP/1.1 401"), "no credentials, no user: {r}");
    let r = conn.request("GET", "/keys/pub:1", root(), "").await;
    assert!(r.starts_with("HTTP/1.1 200") && r.ends_with("by-root"), "{r}");
    // A user's rules changed between two requests of the connection apply to the second.
    admin.cmd(&["ACL", "SETUSER", "reader", "-get"]).await;
    let r = conn.request("GET", "/keys/pub:1", reader(), "").await;
    assert!(r.starts_with("HTTP/1.1 403") && r.contains("'get' command"), "{r}");
    // CLIENT LIST shows RESP connections only: the HTTP session is listed nowhere.
    let list = text(admin.cmd(&["CLIENT", "LIST"]).await);
    assert_eq!(list.matches("id=").count(), 1, "{list}");
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_file_without_a_default_user_keeps_the_requirepass_password() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("users.acl");
    std::fs::write(&file, "user app on >apppw ~app:* +@all\n").unwrap();
    let path = file.display().to_string();
    let router =
        support::router(&["--embedded-nodes", "1", "--requirepass", "rootpw", "--aclfile", &path]).await;
    let mut anonymous = Raw::connect(router.resp_addr()).await;
    assert_eq!(anonymous.cmd(&["GET", "app:1"]).await, b"-NOAUTH Authentication required.\r\n");
    assert_eq!(anonymous.cmd(&["AUTH", "rootpw"]).await, b"+OK\r\n", "the default user keeps its password");
    let mut app = Raw::connect(router.resp_addr()).await;
    assert_eq!(app.cmd(&["AUTH", "app", "apppw"]).await, b"+OK\r\n");
    assert_eq!(app.cmd(&["SET", "app:1", "v"]).await, b"+OK\r\n");
    let denied = app.cmd(&["SET", "other", "v"]).await;
    assert!(denied.starts_with(b"-NOPERM"), "{}", String::from_utf8_lossy(&denied));
    // A file that does define `default` replaces it, as in Redis.
    std::fs::write(&file, "user default on >filepw ~* +@all\nuser app on >apppw ~app:* +@all\n").unwrap();
    support::wait_until(Duration::from_secs(5), || {
        let mut c = std::net::TcpStream::connect(router.resp_addr()).unwrap();
        use std::io::{Read, Write};
        c.write_all(b"AUTH filepw\r\n").unwrap();
        let mut buf = [0u8; 64];
        let n = c.read(&mut buf).unwrap_or(0);
        &buf[..n] == b"+OK\r\n"
    })
    .await;
    router.shutdown().await;
}

/// CONFIG SET requirepass sets the default user's password, as Redis's does: new connections
/// must AUTH (with or without the user name), connections already in keep going, CONFIG GET shows
/// it, and an empty one opens the default user again. Every reply compared with redis-server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_set_requirepass_sets_the_default_users_password_like_redis() {
    let (_redis, redis_addr) = support::redis_server().await;
    let router = support::cluster().await;
    let mut got = Vec::new();
    for addr in [redis_addr, router.resp_addr()] {
        let mut replies = Vec::new();
        let mut admin = Raw::connect(addr).await;
        replies.push(admin.cmd(&["AUTH", "nosuchpass"]).await);
        replies.push(admin.cmd(&["CONFIG", "SET", "requirepass", "temp_pass"]).await);
        replies.push(admin.cmd(&["PING"]).await);
        replies.push(admin.cmd(&["CONFIG", "GET", "requirepass"]).await);
        let mut fresh = Raw::connect(addr).await;
        replies.push(fresh.cmd(&["GET", "k"]).await);
        replies.push(fresh.cmd(&["AUTH", "wrong"]).await);
        replies.push(fresh.cmd(&["AUTH", "temp_pass"]).await);
        replies.push(fresh.cmd(&["AUTH", "default", "temp_pass"]).await);
        replies.push(fresh.cmd(&["GET", "k"]).await);
        replies.push(admin.cmd(&["CONFIG", "SET", "requirepass", ""]).await);
        let mut open = Raw::connect(addr).await;
        replies.push(open.cmd(&["GET", "k"]).await);
        got.push(replies);
    }
    assert_eq!(got[1], got[0], "Shoal (left) against Redis (right)");
    router.shutdown().await;
}
