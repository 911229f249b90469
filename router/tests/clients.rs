//! CLIENT LIST, KILL, PAUSE/UNPAUSE and HELP over real loopback connections: what depends on
//! addresses, ids and timing is checked here; the deterministic replies (error texts, empty
//! lists, counts of 0) are compared byte for byte in `differential/clients.redis`.

mod support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::Raw;
use tokio::io::AsyncReadExt;

/// A single-node router is enough: these commands never reach a node.
async fn router() -> shoal_router::Router {
    support::router(&["--embedded-nodes", "1"]).await
}

/// The payload of a bulk string reply (RESP2), as text.
fn text(reply: &[u8]) -> String {
    let s = String::from_utf8_lossy(reply);
    assert!(s.starts_with('$'), "not a bulk string: {s:?}");
    let (_, body) = s.split_once("\r\n").unwrap();
    body.strip_suffix("\r\n").unwrap().to_string()
}

/// A CLIENT LIST / CLIENT INFO line as (key, value) pairs, in order.
fn fields(line: &str) -> Vec<(String, String)> {
    line.split(' ')
        .map(|f| {
            let (k, v) = f.split_once('=').unwrap_or_else(|| panic!("not key=value: {f:?} in {line:?}"));
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// CLIENT LIST as one map per line, keyed by the `id` field.
async fn client_list(con: &mut Raw, extra: &[&str]) -> HashMap<u64, HashMap<String, String>> {
    let mut args = vec!["CLIENT", "LIST"];
    args.extend_from_slice(extra);
    let body = text(&con.cmd(&args).await);
    body.lines()
        .map(|l| {
            let m: HashMap<String, String> = fields(l).into_iter().collect();
            (m["id"].parse().unwrap(), m)
        })
        .collect()
}

async fn client_id(con: &mut Raw) -> u64 {
    let r = String::from_utf8(con.cmd(&["CLIENT", "ID"]).await).unwrap();
    r.trim_start_matches(':').trim_end().parse().unwrap()
}

fn addr_of(con: &Raw) -> String {
    con.stream.local_addr().unwrap().to_string()
}

/// The server closed this connection: its next read is end-of-file, within 5 s.
async fn assert_closed(con: &mut Raw) {
    let mut buf = [0u8; 64];
    match tokio::time::timeout(Duration::from_secs(5), con.stream.read(&mut buf)).await {
        Ok(Ok(0)) => {}
        Ok(Ok(n)) => panic!("expected EOF, got {:?}", String::from_utf8_lossy(&buf[..n])),
        Ok(Err(e)) => panic!("expected EOF, got {e}"),
        Err(_) => panic!("connection still open after 5 s"),
    }
}

/// Nothing arrives on `con` for `d` (a held command has not been answered).
async fn assert_silent(con: &mut Raw, d: Duration) {
    let mut buf = [0u8; 64];
    if let Ok(r) = tokio::time::timeout(d, con.stream.read(&mut buf)).await {
        panic!("expected no reply yet, got {:?}", r.map(|n| String::from_utf8_lossy(&buf[..n]).into_owned()));
    }
}

async fn connect(addr: SocketAddr) -> Raw {
    Raw::connect(addr).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_list_shows_every_connection_with_redis_s_fields() {
    let router = router().await;
    let addr = router.resp_addr();
    let mut a = connect(addr).await;
    let mut b = connect(addr).await;
    let mut c = connect(addr).await;
    let mut me = connect(addr).await;
    assert_eq!(a.cmd(&["CLIENT", "SETNAME", "alpha"]).await, b"+OK\r\n");
    let hello = b.cmd(&["HELLO", "3", "SETNAME", "beta"]).await;
    assert!(hello.starts_with(b"%7\r\n"), "{}", String::from_utf8_lossy(&hello));
    assert_eq!(c.cmd(&["PING"]).await, b"+PONG\r\n");
    let ids = [client_id(&mut a).await, client_id(&mut b).await, client_id(&mut c).await];
    assert_eq!(a.cmd(&["CLIENT", "SETINFO", "LIB-NAME", "redis-py"]).await, b"+OK\r\n");
    let my_id = client_id(&mut me).await;

    let list = client_list(&mut me, &[]).await;
    assert_eq!(list.len(), 4, "{list:?}");
    for (con, id, name, cmd, resp) in [
        (&a, ids[0], "alpha", "client|setinfo", "2"),
        (&b, ids[1], "beta", "client|id", "3"),
        (&c, ids[2], "", "client|id", "2"),
        (&me, my_id, "", "client|list", "2"),
    ] {
        let line = &list[&id];
        assert_eq!(line["addr"], addr_of(con), "{line:?}");
        assert_eq!(line["laddr"], addr.to_string(), "{line:?}");
        assert_eq!(line["name"], name, "{line:?}");
        assert_eq!(line["cmd"], cmd, "{line:?}");
        assert_eq!(line["resp"], resp, "{line:?}");
        assert_eq!(line["flags"], "N", "{line:?}");
        assert_eq!(line["user"], "default", "{line:?}");
        assert_eq!(line["idle"], "0", "{line:?}");
    }
    assert_eq!(list[&ids[0]]["lib-name"], "redis-py");

    // Lines come in connection order; CLIENT INFO is the caller's own line.
    let body = text(&me.cmd(&["CLIENT", "LIST"]).await);
    let order: Vec<u64> = body.lines().map(|l| fields(l)[0].1.parse().unwrap()).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
    let info = text(&a.cmd(&["CLIENT", "INFO"]).await);
    let list_a = client_list(&mut me, &[]).await.remove(&ids[0]).unwrap();
    let info_a: HashMap<String, String> = fields(info.trim_end()).into_iter().collect();
    assert_eq!(info_a["cmd"], "client|info");
    assert_eq!(list_a["cmd"], "client|info");
    assert_eq!(info_a["addr"], list_a["addr"]);
    assert_eq!(
        fields(info.trim_end()).iter().map(|(k, _)| k).collect::<Vec<_>>(),
        fields(body.lines().next().unwrap()).iter().map(|(k, _)| k).collect::<Vec<_>>(),
        "CLIENT INFO and CLIENT LIST share one format"
    );

    // Filters: ID (repeats listed again, unknown ones skipped), TYPE.
    let one =
        text(&me.cmd(&["CLIENT", "LIST", "ID", &ids[1].to_string(), "999999", &ids[1].to_string()]).await);
    assert_eq!(one.lines().count(), 2, "{one}");
    assert!(one.lines().all(|l| l.starts_with(&format!("id={} ", ids[1]))), "{one}");
    assert_eq!(client_list(&mut me, &["TYPE", "normal"]).await.len(), 4);
    assert_eq!(me.cmd(&["CLIENT", "LIST", "TYPE", "pubsub"]).await, b"$0\r\n\r\n");

    // A closed connection leaves the list.
    drop(c);
    let start = Instant::now();
    while client_list(&mut me, &[]).await.contains_key(&ids[2]) {
        assert!(start.elapsed() < Duration::from_secs(5), "closed client still listed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_list_fields_are_redis_7_0_s_in_its_order() {
    let (_redis, redis_addr) = support::redis_server().await;
    let router = router().await;
    let keys =
        |line: &str| fields(line.lines().next().unwrap()).into_iter().map(|(k, _)| k).collect::<Vec<_>>();
    let theirs = keys(&text(&connect(redis_addr).await.cmd(&["CLIENT", "LIST"]).await));
    let ours = keys(&text(&connect(router.resp_addr()).await.cmd(&["CLIENT", "LIST"]).await));
    // Redis 7.2 added lib-name and lib-ver at the end, for CLIENT SETINFO, which Shoal accepts.
    let mut want = theirs.clone();
    want.extend(["lib-name".to_string(), "lib-ver".to_string()]);
    assert_eq!(ours, want, "redis-server's fields: {theirs:?}");
    router.shutdown().await;
}

/// Redis's help as blocks: a line that does not start with a space opens one.
fn help_blocks(reply: &[u8]) -> Vec<Vec<String>> {
    let s = String::from_utf8_lossy(reply);
    let mut blocks: Vec<Vec<String>> = Vec::new();
    for line in s.split("\r\n").filter(|l| l.starts_with('+')) {
        let line = line[1..].to_string();
        if line.starts_with(' ') {
            blocks.last_mut().unwrap().push(line);
        } else {
            blocks.push(vec![line]);
        }
    }
    blocks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_help_is_redis_s_for_the_subcommands_served() {
    let (_redis, redis_addr) = support::redis_server().await;
    let router = router().await;
    let theirs = help_blocks(&connect(redis_addr).await.cmd(&["CLIENT", "HELP"]).await);
    let ours = help_blocks(&connect(router.resp_addr()).await.cmd(&["CLIENT", "HELP"]).await);
    // Every subcommand of Redis 7.0's CLIENT is served (REPLY was the last).
    let word = |b: &Vec<String>| b[0].split(' ').next().unwrap().to_string();
    let want = theirs;
    // SETINFO is Redis 7.2's (listed after SETNAME, as 7.2 does).
    let setinfo = ours.iter().position(|b| word(b) == "SETINFO").expect("SETINFO listed");
    assert_eq!(word(&ours[setinfo - 1]), "SETNAME");
    let mut ours = ours;
    ours.remove(setinfo);
    assert_eq!(ours, want);
    // And every subcommand listed is served.
    let mut con = connect(router.resp_addr()).await;
    for sub in ours.iter().skip(1).map(word) {
        let reply = con.cmd(&["CLIENT", &sub, "x", "y", "z", "w"]).await;
        assert!(!String::from_utf8_lossy(&reply).contains("unknown subcommand '"), "{sub}");
    }
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_kill_closes_the_chosen_connections() {
    let router = router().await;
    let addr = router.resp_addr();
    let mut me = connect(addr).await;

    // By ID: the victim, idle, sees EOF; others stay.
    let mut victim = connect(addr).await;
    let mut bystander = connect(addr).await;
    let id = client_id(&mut victim).await.to_string();
    assert_eq!(me.cmd(&["CLIENT", "KILL", "ID", &id]).await, b":1\r\n");
    assert_closed(&mut victim).await;
    assert_eq!(bystander.cmd(&["PING"]).await, b"+PONG\r\n");
    assert_eq!(me.cmd(&["CLIENT", "KILL", "ID", &id]).await, b":0\r\n", "already gone");

    // By ADDR, combined with a matching and then a non-matching filter.
    let mut victim = connect(addr).await;
    let victim_addr = addr_of(&victim);
    assert_eq!(me.cmd(&["CLIENT", "KILL", "ADDR", &victim_addr, "ID", "999999"]).await, b":0\r\n");
    assert_eq!(
        me.cmd(&["CLIENT", "KILL", "ADDR", &victim_addr, "TYPE", "normal", "USER", "default"]).await,
        b":1\r\n"
    );
    assert_closed(&mut victim).await;

    // The old form: OK, or an error when no client has that address.
    let mut victim = connect(addr).await;
    assert_eq!(victim.cmd(&["PING"]).await, b"+PONG\r\n");
    assert_eq!(me.cmd(&["CLIENT", "KILL", &addr_of(&victim)]).await, b"+OK\r\n");
    assert_closed(&mut victim).await;
    assert_eq!(me.cmd(&["CLIENT", "KILL", &addr_of(&victim)]).await, b"-ERR No such client\r\n");

    // SKIPME: by default a filter never matches the caller; with `no` the caller gets its reply
    // and is closed, and a command pipelined after it is not run.
    let my_addr = addr_of(&me);
    assert_eq!(me.cmd(&["CLIENT", "KILL", "ADDR", &my_addr]).await, b":0\r\n");
    assert_eq!(me.cmd(&["CLIENT", "KILL", "ADDR", &my_addr, "SKIPME", "yes"]).await, b":0\r\n");
    me.send(b"CLIENT KILL ADDR ").await;
    me.send(format!("{my_addr} SKIPME no\r\nSET after-kill 1\r\n").as_bytes()).await;
    assert_eq!(me.reply().await.unwrap(), b":1\r\n");
    assert_closed(&mut me).await;
    let mut check = connect(addr).await;
    assert_eq!(check.cmd(&["EXISTS", "after-kill"]).await, b":0\r\n");

    // The old form can close the caller too (OK first).
    let check_addr = addr_of(&check);
    assert_eq!(check.cmd(&["CLIENT", "KILL", &check_addr]).await, b"+OK\r\n");
    assert_closed(&mut check).await;

    // LADDR matches every client of this listener: all but the caller.
    let mut me = connect(addr).await;
    let mut others = Vec::new();
    for _ in 0..3 {
        others.push(connect(addr).await);
    }
    for o in &mut others {
        assert_eq!(o.cmd(&["PING"]).await, b"+PONG\r\n");
    }
    let killed = me.cmd(&["CLIENT", "KILL", "LADDR", &addr.to_string()]).await;
    assert_eq!(killed, b":4\r\n", "the three, and `bystander`");
    for o in &mut others {
        assert_closed(o).await;
    }
    assert_closed(&mut bystander).await;
    assert_eq!(me.cmd(&["PING"]).await, b"+PONG\r\n");

    // USER: the clients authenticated as that ACL user, none of the others; an unknown user is
    // an error (redis-py's test_client_kill_filter_by_user).
    assert_eq!(me.cmd(&["ACL", "SETUSER", "worker", "on", "nopass", "~*", "+@all"]).await, b"+OK\r\n");
    let mut worker = connect(addr).await;
    assert_eq!(worker.cmd(&["AUTH", "worker", "x"]).await, b"+OK\r\n");
    let mut plain = connect(addr).await;
    assert_eq!(me.cmd(&["CLIENT", "KILL", "USER", "worker"]).await, b":1\r\n");
    assert_closed(&mut worker).await;
    assert_eq!(plain.cmd(&["PING"]).await, b"+PONG\r\n");
    assert_eq!(me.cmd(&["CLIENT", "KILL", "USER", "worker"]).await, b":0\r\n", "a user with no clients");
    assert_eq!(me.cmd(&["CLIENT", "KILL", "USER", "nosuch"]).await, b"-ERR No such user 'nosuch'\r\n");
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_write_holds_writes_while_reads_answer() {
    let router = router().await;
    let addr = router.resp_addr();
    let mut admin = connect(addr).await;
    let mut writer = connect(addr).await;
    let mut reader = connect(addr).await;
    assert_eq!(writer.cmd(&["SET", "k", "old"]).await, b"+OK\r\n");
    let writer_id = client_id(&mut writer).await;

    assert_eq!(admin.cmd(&["CLIENT", "PAUSE", "20000", "WRITE"]).await, b"+OK\r\n");
    // A pipeline: the GET before the SET is answered, the SET and the GET after it wait.
    writer.send(b"GET k\r\nSET k new\r\nGET k\r\n").await;
    assert_eq!(writer.reply().await.unwrap(), support::bulk("old"));
    assert_silent(&mut writer, Duration::from_millis(300)).await;
    assert_eq!(reader.cmd(&["GET", "k"]).await, support::bulk("old"), "reads answer");
    let held = &client_list(&mut admin, &[]).await[&writer_id];
    assert_eq!((held["flags"].as_str(), held["cmd"].as_str()), ("b", "set"), "{held:?}");
    // Errors from the gates are not held (Redis answers them before it checks the pause).
    assert_eq!(reader.cmd(&["SET", "k"]).await, b"-ERR wrong number of arguments for 'set' command\r\n");

    let unpaused = Instant::now();
    assert_eq!(admin.cmd(&["CLIENT", "UNPAUSE"]).await, b"+OK\r\n");
    assert_eq!(writer.reply().await.unwrap(), b"+OK\r\n");
    assert_eq!(writer.reply().await.unwrap(), support::bulk("new"));
    assert!(unpaused.elapsed() < Duration::from_secs(2));
    assert_eq!(client_list(&mut admin, &[]).await[&writer_id]["flags"], "N");

    // Without UNPAUSE, the timeout ends it.
    assert_eq!(admin.cmd(&["CLIENT", "PAUSE", "400", "WRITE"]).await, b"+OK\r\n");
    let start = Instant::now();
    writer.send(b"DEL k\r\n").await;
    assert_eq!(writer.reply().await.unwrap(), b":1\r\n");
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(4), "{waited:?}");

    // A held client can be killed.
    assert_eq!(admin.cmd(&["CLIENT", "PAUSE", "20000", "WRITE"]).await, b"+OK\r\n");
    writer.send(b"SET k again\r\n").await;
    assert_silent(&mut writer, Duration::from_millis(100)).await;
    let killed = admin.cmd(&["CLIENT", "KILL", "ID", &writer_id.to_string()]).await;
    assert_eq!(killed, b":1\r\n");
    assert_closed(&mut writer).await;
    assert_eq!(admin.cmd(&["CLIENT", "UNPAUSE"]).await, b"+OK\r\n");
    assert_eq!(reader.cmd(&["EXISTS", "k"]).await, b":0\r\n", "the killed client's SET never ran");
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_all_holds_every_command_until_it_ends() {
    let router = router().await;
    let addr = router.resp_addr();
    let mut admin = connect(addr).await;
    let mut reader = connect(addr).await;
    assert_eq!(admin.cmd(&["CLIENT", "PAUSE", "600", "ALL"]).await, b"+OK\r\n");
    let start = Instant::now();
    reader.send(b"GET k\r\n").await;
    // Under ALL even the pausing client waits (in Redis too: only time ends it, or a client
    // that is not held).
    admin.send(b"PING\r\n").await;
    assert_silent(&mut reader, Duration::from_millis(300)).await;
    assert_eq!(reader.reply().await.unwrap(), b"$-1\r\n");
    assert_eq!(admin.reply().await.unwrap(), b"+PONG\r\n");
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(500) && waited < Duration::from_secs(4), "{waited:?}");

    // Lifted from elsewhere (here, the router's own state): held commands run at once.
    assert_eq!(admin.cmd(&["CLIENT", "PAUSE", "60000"]).await, b"+OK\r\n");
    reader.send(b"GET k\r\n").await;
    assert_silent(&mut reader, Duration::from_millis(200)).await;
    // What the gates refuse is answered (Redis checks the pause after them).
    let mut other = connect(addr).await;
    assert_eq!(other.cmd(&["NOPE"]).await, b"-ERR unknown command 'NOPE', with args beginning with: \r\n");
    assert_eq!(other.cmd(&["GET"]).await, b"-ERR wrong number of arguments for 'get' command\r\n");
    router.state.pause.unpause();
    assert_eq!(reader.reply().await.unwrap(), b"$-1\r\n");
    router.shutdown().await;
}

/// The integer of a `:n` reply.
fn int(reply: &[u8]) -> i64 {
    let s = String::from_utf8_lossy(reply);
    s.strip_prefix(':')
        .and_then(|s| s.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("not an integer: {s:?}"))
}

/// CLIENT NO-TOUCH (Redis 7.2) across 3 nodes: reads of every kind (lane GET, MGET over nodes,
/// a typed read, a transaction) leave idle times and LFU counters alone; TOUCH still touches;
/// the `T` flag; OFF and RESET end it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_no_touch_leaves_access_times_alone() {
    let router = support::router(&["--embedded-nodes", "3"]).await;
    let mut plain = connect(router.resp_addr()).await;
    let mut quiet = connect(router.resp_addr()).await;
    let keys: Vec<String> = (0..8).map(|i| format!("nt:{i}")).collect();
    for k in &keys {
        plain.cmd(&["SET", k, "v"]).await;
    }
    plain.cmd(&["HSET", "nt:h", "f", "v"]).await;
    assert_eq!(quiet.cmd(&["CLIENT", "NO-TOUCH", "ON"]).await, b"+OK\r\n");
    assert_eq!(quiet.cmd(&["CLIENT", "NO-TOUCH", "maybe"]).await, b"-ERR syntax error\r\n");
    let info = String::from_utf8_lossy(&quiet.cmd(&["CLIENT", "INFO"]).await).into_owned();
    assert!(info.contains(" flags=T "), "{info}");
    tokio::time::sleep(Duration::from_millis(2100)).await;

    quiet.cmd(&["GET", &keys[0]]).await;
    let mut mget = vec!["MGET"];
    mget.extend(keys[1..6].iter().map(String::as_str));
    quiet.cmd(&mget).await;
    quiet.cmd(&["HGET", "nt:h", "f"]).await;
    quiet.cmd(&["MULTI"]).await;
    quiet.cmd(&["GET", &keys[6]]).await;
    assert_eq!(quiet.cmd(&["EXEC"]).await, b"*1\r\n$1\r\nv\r\n");
    for k in keys[..7].iter().map(String::as_str).chain(["nt:h"]) {
        let idle = int(&plain.cmd(&["OBJECT", "IDLETIME", k]).await);
        assert!(idle >= 2, "{k}: a NO-TOUCH read refreshed it (idle {idle})");
    }
    // TOUCH touches whoever sends it; so does any read of a client without NO-TOUCH.
    quiet.cmd(&["TOUCH", &keys[7]]).await;
    assert!(int(&plain.cmd(&["OBJECT", "IDLETIME", &keys[7]]).await) < 2);
    plain.cmd(&["GET", &keys[0]]).await;
    assert!(int(&plain.cmd(&["OBJECT", "IDLETIME", &keys[0]]).await) < 2);

    // Under an LFU policy the counter stays put for the NO-TOUCH client only. (A new key's
    // counter is at its initial value, where the first access always counts.)
    assert_eq!(plain.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"]).await, b"+OK\r\n");
    plain.cmd(&["SET", "nt:f", "v"]).await;
    let before = int(&plain.cmd(&["OBJECT", "FREQ", "nt:f"]).await);
    for _ in 0..50 {
        quiet.cmd(&["GET", "nt:f"]).await;
    }
    assert_eq!(int(&plain.cmd(&["OBJECT", "FREQ", "nt:f"]).await), before);
    plain.cmd(&["GET", "nt:f"]).await;
    assert!(int(&plain.cmd(&["OBJECT", "FREQ", "nt:f"]).await) > before);

    // OFF ends it, and so does RESET (as in Redis 7.2).
    assert_eq!(quiet.cmd(&["CLIENT", "NO-TOUCH", "OFF"]).await, b"+OK\r\n");
    let info = String::from_utf8_lossy(&quiet.cmd(&["CLIENT", "INFO"]).await).into_owned();
    assert!(info.contains(" flags=N "), "{info}");
    quiet.cmd(&["CLIENT", "NO-TOUCH", "ON"]).await;
    assert_eq!(quiet.cmd(&["RESET"]).await, b"+RESET\r\n");
    let info = String::from_utf8_lossy(&quiet.cmd(&["CLIENT", "INFO"]).await).into_owned();
    assert!(info.contains(" flags=N "), "{info}");
    plain.cmd(&["SET", "nt:g", "v"]).await;
    let before = int(&plain.cmd(&["OBJECT", "FREQ", "nt:g"]).await);
    quiet.cmd(&["GET", "nt:g"]).await;
    assert!(int(&plain.cmd(&["OBJECT", "FREQ", "nt:g"]).await) > before, "after RESET reads count again");
}

/// Two routers in front of the same three node processes: CLIENT LIST and CLIENT KILL through
/// either see the clients of both (BullMQ's `getWorkers()` counts workers by name, wherever a
/// load balancer put them), ids never repeat across the routers, and a kill through one router
/// closes a client of the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_list_and_kill_reach_the_clients_of_every_router() {
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, a, b) = support::pubsub::two_routers(dir.path()).await;

    let mut admin = connect(a.resp_addr()).await;
    let mut on_a = connect(a.resp_addr()).await;
    let mut on_b = connect(b.resp_addr()).await;
    let mut sub_b = connect(b.resp_addr()).await;
    assert_eq!(on_a.cmd(&["CLIENT", "SETNAME", "worker-a"]).await, b"+OK\r\n");
    assert_eq!(on_b.cmd(&["CLIENT", "SETNAME", "worker-b"]).await, b"+OK\r\n");
    assert!(sub_b.cmd(&["SUBSCRIBE", "jobs"]).await.starts_with(b"*3\r\n"));
    let (id_a, id_b) = (client_id(&mut on_a).await, client_id(&mut on_b).await);
    assert_ne!(id_a >> 32, id_b >> 32, "each router tags its ids");

    // Through either router: every client, each once, ids all different.
    let mut peek = connect(b.resp_addr()).await;
    for con in [&mut admin, &mut peek] {
        let all = client_list(con, &[]).await;
        assert_eq!(all.len(), 5, "admin, worker-a, worker-b, the subscriber, peek: {all:?}");
        assert_eq!(all[&id_a]["name"], "worker-a");
        assert_eq!(all[&id_b]["name"], "worker-b");
        assert_eq!(all[&id_b]["cmd"], "client|id", "the other router names its client's last command");
        let pubsub = client_list(con, &["TYPE", "pubsub"]).await;
        assert_eq!(pubsub.values().map(|c| c["sub"].as_str()).collect::<Vec<_>>(), ["1"], "{pubsub:?}");
    }
    let two = text(&admin.cmd(&["CLIENT", "LIST", "ID", &id_b.to_string(), &id_a.to_string(), "7"]).await);
    let ids: Vec<u64> = two.lines().map(|l| fields(l)[0].1.parse().unwrap()).collect();
    assert_eq!(ids.len(), 2, "{two}");
    assert!(ids.contains(&id_a) && ids.contains(&id_b), "{two}");
    assert_eq!(
        text(&admin.cmd(&["CLIENT", "LIST", "ID", "-1"]).await),
        "",
        "an id out of range matches none"
    );

    // A kill through router A closes router B's client; the count includes it.
    assert_eq!(admin.cmd(&["CLIENT", "KILL", "ID", &id_b.to_string()]).await, b":1\r\n");
    assert_closed(&mut on_b).await;
    assert_eq!(admin.cmd(&["CLIENT", "KILL", "ID", &id_b.to_string()]).await, b":0\r\n", "already gone");
    // The old form with an address only B has.
    let sub_addr = addr_of(&sub_b);
    assert_eq!(admin.cmd(&["CLIENT", "KILL", &sub_addr]).await, b"+OK\r\n");
    assert_closed(&mut sub_b).await;
    assert_eq!(admin.cmd(&["CLIENT", "KILL", &sub_addr]).await, b"-ERR No such client\r\n");
    // A filter matching clients on both routers counts them all (not the caller: SKIPME yes).
    let mut on_b = connect(b.resp_addr()).await;
    assert_eq!(on_b.cmd(&["PING"]).await, b"+PONG\r\n");
    assert_eq!(
        admin.cmd(&["CLIENT", "KILL", "TYPE", "normal"]).await,
        b":3\r\n",
        "worker-a, peek, the new one"
    );
    assert_closed(&mut on_a).await;
    assert_closed(&mut on_b).await;
    assert_closed(&mut peek).await;
    let left = client_list(&mut admin, &[]).await;
    assert_eq!(left.keys().copied().collect::<Vec<_>>(), [client_id(&mut admin).await], "{left:?}");
}

/// The relays behind CLIENT LIST and MONITOR when processes die (three router processes in
/// front of three node processes): a SIGKILLed router is left out of CLIENT LIST, whose every
/// answer comes within the asking router's deadline; a router restarted on its ports learns that
/// a router monitors and its commands reach the monitor again; with a node SIGKILLed, both go
/// through the other nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_list_and_monitor_outlive_killed_routers_and_nodes() {
    use support::procs::{NodeProc, RouterProc};
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, list) = NodeProc::start_many(dir.path(), 3).await;
    let args = ["--nodes", list.as_str(), "--deadline-ms", "1000"];
    let a = RouterProc::start(dir.path(), "a", &args).await;
    let mut b = RouterProc::start(dir.path(), "b", &args).await;
    let mut c = RouterProc::start(dir.path(), "c", &args).await;
    let mut admin = a.raw().await;
    let mut monitor = a.raw().await;
    assert_eq!(monitor.cmd(&["MONITOR"]).await, b"+OK\r\n");
    let mut on_c = c.raw().await;
    assert_eq!(on_c.cmd(&["CLIENT", "SETNAME", "worker-c"]).await, b"+OK\r\n");

    // Router B's commands reach A's monitor (B hears of it through a node: asked until it does).
    let mut on_b = b.raw().await;
    assert_eq!(on_b.cmd(&["CLIENT", "SETNAME", "worker-b"]).await, b"+OK\r\n");
    seen_by(&mut monitor, &mut on_b, "relay-1").await;
    listed(&mut admin, &["worker-b", "worker-c"]).await;

    // Router C SIGKILLed: CLIENT LIST through A goes on answering, without C's client.
    c.child.kill().unwrap();
    listed(&mut admin, &["worker-b"]).await;

    // Router B restarted on its ports: its new client is listed, its commands are monitored.
    b.restart(dir.path(), "b", &args).await;
    let mut on_b = b.raw().await;
    assert_eq!(on_b.cmd(&["CLIENT", "SETNAME", "worker-b2"]).await, b"+OK\r\n");
    seen_by(&mut monitor, &mut on_b, "relay-2").await;
    listed(&mut admin, &["worker-b2"]).await;

    // A node SIGKILLed: the relays go through the nodes left.
    nodes[0].kill();
    seen_by(&mut monitor, &mut on_b, "relay-3").await;
    listed(&mut admin, &["worker-b2"]).await;
}

/// Asks CLIENT LIST through `admin` until the named clients are `names` (at most 10 s: a router
/// that just started may not yet answer the node A asks), each answer within the router's
/// deadline (1 s) and a margin.
async fn listed(admin: &mut Raw, names: &[&str]) {
    let start = Instant::now();
    loop {
        let asked = Instant::now();
        let all = client_list(admin, &[]).await;
        assert!(asked.elapsed() < Duration::from_millis(2500), "CLIENT LIST took {:?}", asked.elapsed());
        let mut got: Vec<&str> = all.values().map(|m| m["name"].as_str()).filter(|n| !n.is_empty()).collect();
        got.sort();
        if got == names {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "CLIENT LIST names {got:?}, not {names:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends `ECHO word` through `client` (answered by its router, whatever node is down) every
/// 100 ms until `monitor` shows it, at most 15 s.
async fn seen_by(monitor: &mut Raw, client: &mut Raw, word: &str) {
    let start = Instant::now();
    loop {
        assert_eq!(client.cmd(&["ECHO", word]).await, support::bulk(word));
        while let Some(line) = monitor.reply_within(Duration::from_millis(100)).await {
            if String::from_utf8_lossy(&line).contains(&format!("\"ECHO\" \"{word}\"")) {
                return;
            }
        }
        assert!(start.elapsed() < Duration::from_secs(15), "the monitor never showed ECHO {word}");
    }
}
