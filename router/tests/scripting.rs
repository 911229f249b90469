//! Scripts with several clients and processes (one-connection cases, byte-compared with
//! redis-server, are in differential/scripting.redis): a long script makes its node answer BUSY
//! while other nodes keep serving, SCRIPT KILL stops it (and refuses one that wrote); EVALSHA
//! through a router that never saw the script, after the node restarted and lost its cache; the
//! `redis` crate's `Script` (EVALSHA, then EVAL on NOSCRIPT); scripts and transactions are atomic
//! against concurrent writers.

mod support;

use std::time::{Duration, Instant};

use support::procs::{NodeProc, RouterProc};

const SPIN: &str = "local i = 0 while true do i = i + 1 end";

fn text(b: Vec<u8>) -> String {
    String::from_utf8_lossy(&b).into_owned()
}

/// `n` keys the topology gives to node `id`.
fn keys_on(topology: &shoal_wire::Topology, id: u32, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("k{i}"))
        .filter(|k| topology.owner_of(shoal_wire::key_slot(k.as_bytes())) == Some(id))
        .take(n)
        .collect()
}

/// Three node processes and two routers in front of them.
async fn two_routers(dir: &std::path::Path) -> (Vec<NodeProc>, RouterProc, RouterProc, shoal_wire::Topology) {
    let (nodes, list) = NodeProc::start_many(dir, 3).await;
    let a = RouterProc::start(dir, "router-a", &["--nodes", &list]).await;
    let b = RouterProc::start(dir, "router-b", &["--nodes", &list]).await;
    let addrs: Vec<String> = nodes.iter().map(|n| n.addr.clone()).collect();
    (nodes, a, b, shoal_wire::Topology::even(&addrs))
}

/// A script past busy-reply-threshold: its node answers BUSY to every other command, through any
/// router (through its own router too: the node defers the script's reply and lets the commands
/// behind it on the stream go on), other nodes serve as ever, nothing times out, and SCRIPT KILL
/// through any router stops it; one that wrote is UNKILLABLE and runs to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_script_makes_its_node_busy_and_script_kill_stops_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, a, b, topology) = two_routers(dir.path()).await;
    let same = keys_on(&topology, 1, 2);
    let other = keys_on(&topology, 2, 1);
    let mut admin = b.raw().await;
    assert_eq!(admin.cmd(&["CONFIG", "SET", "busy-reply-threshold", "1500"]).await, b"+OK\r\n");
    assert_eq!(
        text(admin.cmd(&["CONFIG", "GET", "lua-time-limit"]).await),
        "*2\r\n$14\r\nlua-time-limit\r\n$4\r\n1500\r\n"
    );
    assert_eq!(admin.cmd(&["SET", &same[0], "before"]).await, b"+OK\r\n");
    assert_eq!(admin.cmd(&["SCRIPT", "KILL"]).await, b"-NOTBUSY No scripts in execution right now.\r\n");

    let mut spinner = a.raw().await;
    spinner.send(&support::encode(&[b"EVAL", SPIN.as_bytes(), b"1", same[1].as_bytes()])).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // A command through the same router, behind the script on its node's stream.
    let mut queued = a.raw().await;
    let queued_at = Instant::now();
    queued.send(&support::encode(&[b"GET", same[0].as_bytes()])).await;

    // Through the other router: other nodes serve at once while the script runs.
    let mut c = b.raw().await;
    let started = Instant::now();
    assert_eq!(c.cmd(&["SET", &other[0], "x"]).await, b"+OK\r\n");
    assert!(started.elapsed() < Duration::from_millis(500), "another node is not held by the script");
    // Its own node holds the command until busy-reply-threshold (past the router's 1 s call
    // deadline: the node keeps the stream alive), then answers BUSY, and at once from then on.
    let busy = text(c.cmd(&["GET", &same[0]]).await);
    assert_eq!(
        busy,
        "-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n"
    );
    assert!(started.elapsed() >= Duration::from_millis(1200), "BUSY only past the threshold");
    assert_eq!(text(c.cmd(&["GET", &same[0]]).await), busy);
    assert_eq!(text(queued.reply().await.expect("the queued GET")), busy, "its own router's too");
    assert!(queued_at.elapsed() >= Duration::from_millis(1200), "past the threshold, not before");
    assert_eq!(text(queued.cmd(&["GET", &same[0]]).await), busy);
    assert_eq!(queued.cmd(&["GET", &other[0]]).await, b"$1\r\nx\r\n", "other nodes through the same router");
    // EXEC refused while the script runs discards its transaction, as Redis's does: EXECABORT
    // with the reason, nothing applied, and the connection is out of MULTI.
    assert_eq!(c.cmd(&["MULTI"]).await, b"+OK\r\n");
    assert_eq!(c.cmd(&["SET", &same[0], "from-exec"]).await, b"+QUEUED\r\n");
    assert_eq!(
        text(c.cmd(&["EXEC"]).await),
        format!("-EXECABORT Transaction discarded because of: {}", &busy[1..])
    );
    assert_eq!(c.cmd(&["MULTI"]).await, b"+OK\r\n", "no longer in MULTI");
    assert_eq!(c.cmd(&["DISCARD"]).await, b"+OK\r\n");

    assert_eq!(admin.cmd(&["SCRIPT", "KILL"]).await, b"+OK\r\n");
    let killed = text(spinner.reply().await.expect("the script's reply"));
    assert!(
        killed.starts_with("-ERR Script killed by user with SCRIPT KILL... script: ")
            && killed.ends_with(", on @user_script:1.\r\n"),
        "{killed}"
    );
    assert_eq!(c.cmd(&["GET", &same[0]]).await, b"$6\r\nbefore\r\n", "served again");
    assert_eq!(queued.cmd(&["GET", &same[0]]).await, b"$6\r\nbefore\r\n", "through both routers");

    // A script that wrote cannot be killed: it runs to its end (bounded by the node's clock).
    let writer = "redis.call('set', KEYS[1], 'written') local t = redis.call('time') \
                  local stop = t[1] * 1000000 + t[2] + 1500000 \
                  while true do t = redis.call('time') if t[1] * 1000000 + t[2] > stop then return 'done' end end";
    spinner.send(&support::encode(&[b"EVAL", writer.as_bytes(), b"1", same[0].as_bytes()])).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused = text(admin.cmd(&["SCRIPT", "KILL"]).await);
    assert!(refused.starts_with("-UNKILLABLE Sorry the script already executed write commands"), "{refused}");
    assert_eq!(spinner.reply().await.expect("the script's reply"), b"$4\r\ndone\r\n", "not cut short");
    assert_eq!(c.cmd(&["GET", &same[0]]).await, b"$7\r\nwritten\r\n");
}

/// Polls PING on `c` until its answer starts with `prefix` (bounded).
async fn ping_until(c: &mut support::Raw, prefix: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let got = text(c.cmd(&["PING"]).await);
        if got.starts_with(prefix) {
            return;
        }
        assert!(Instant::now() < deadline, "PING answered {got:?}, not {prefix}..., within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What the commands of another client get while a script (then a library function) loops past
/// busy-reply-threshold, and after SCRIPT KILL / FUNCTION KILL: the replies in order. `also`,
/// while each one loops: a check of another router's answers (given "SCRIPT" or "FUNCTION").
async fn busy_story(addr: std::net::SocketAddr, also: impl AsyncFn(&str)) -> Vec<String> {
    let mut admin = support::Raw::connect(addr).await;
    let mut other = support::Raw::connect(addr).await;
    let mut spinner = support::Raw::connect(addr).await;
    let mut seen = Vec::new();
    macro_rules! step {
        ($c:expr, $args:expr) => {
            seen.push(text($c.cmd($args).await))
        };
    }
    step!(admin, &["CONFIG", "SET", "busy-reply-threshold", "100"]);
    step!(admin, &["SET", "xx", "1"]);
    let lib = "#!lua name=spinlib\nredis.register_function('spin', function() local i = 0 while true do i = i + 1 end end)";
    step!(admin, &["FUNCTION", "LOAD", "REPLACE", lib]);
    for (start, kill) in [(["EVAL", SPIN, "0"], "SCRIPT"), (["FCALL", "spin", "0"], "FUNCTION")] {
        spinner.send(&support::encode(&start.map(str::as_bytes))).await;
        ping_until(&mut admin, "-BUSY", Duration::from_secs(5)).await;
        // Everything but what Redis lets through (MULTI, WATCH, ...) is answered BUSY, keys and
        // PING alike; inside MULTI a refused command flags the transaction, and EXEC refused
        // discards it.
        for args in
            [&["PING"][..], &["GET", "xx"], &["MULTI"], &["INCR", "xx"], &["EXEC"], &["ECHO", "after"]]
        {
            step!(other, args);
        }
        also(kill).await;
        step!(admin, &[kill, "KILL"]);
        let killed = text(spinner.reply().await.expect("the script's reply"));
        seen.push(killed.split("...").next().unwrap_or_default().to_string());
        ping_until(&mut other, "+PONG", Duration::from_secs(3)).await;
        step!(other, &["INCR", "xx"]);
    }
    step!(admin, &["FUNCTION", "DELETE", "spinlib"]);
    seen
}

/// `--busy-reply-scope cluster`: while a script or a function runs past busy-reply-threshold on
/// one node, the router answers every command as redis-server does while one runs there (BUSY,
/// EXECABORT, ...: byte for byte, beside redis-server 7.0.15), until SCRIPT KILL / FUNCTION KILL;
/// a router with the default scope, in front of the same nodes, meanwhile answers PING and
/// serves keys of the other nodes as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_script_holds_every_command_with_busy_reply_scope_cluster() {
    let (_redis, redis_addr) = support::redis_server().await;
    let expected = busy_story(redis_addr, async |_| {}).await;
    assert!(
        expected[3].starts_with("-BUSY Redis is busy running a script. You can only call SCRIPT KILL"),
        "{expected:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let (a, b) =
        support::two_routers(&dir, &["--embedded-nodes", "3", "--busy-reply-scope", "cluster"], &[]).await;
    let b_addr = b.resp_addr();
    let got = busy_story(a.resp_addr(), async |kill| {
        let mut c = support::Raw::connect(b_addr).await;
        assert_eq!(c.cmd(&["PING"]).await, b"+PONG\r\n", "the node scope's router answers PING itself");
        // A script's first run holds every node (to learn which keys it reaches), so every key
        // is the script's: each is answered BUSY at once, naming the right KILL, on the nodes
        // held as on the script's own (held nodes once kept them waiting while the script ran).
        let started = Instant::now();
        for i in 0..30 {
            let got = text(c.cmd(&["EXISTS", &format!("k{i}")]).await);
            assert!(
                got.starts_with("-BUSY") && got.contains(&format!("{kill} KILL")),
                "EXISTS k{i}: {got:?}"
            );
        }
        assert!(started.elapsed() < Duration::from_secs(2), "answered at once: {:?}", started.elapsed());
    })
    .await;
    assert_eq!(got, expected);
}

/// A script and a transaction each run whole: no other client's write lands in the middle of
/// one. Scripts bump two keys through one router while transactions bump them through another
/// (the node's other stream); readers on both, with a script and with MULTI/EXEC, always see
/// the two keys equal. A script that let a transaction's INCR in between its own two (or the
/// reverse) would show them apart.
/// A script returning a table that nests itself (Redis nests the reply 7,995 deep, then answers
/// `reached lua stack limit`; Shoal a few levels sooner) is answered so, and the ops other
/// clients have in flight on the same node's stream at that moment (the same router's) are
/// answered as ever. (Issue 38: such a reply once failed to decode on the router and failed the
/// node's stream under everyone.)
/// Hostile MessagePack (arrays nested 200,000 deep, a length past the input) given to
/// `cmsgpack.unpack` fails that script with Redis's text; the node keeps serving.
/// Three `shoal-node` processes serving an even topology, kept in a file in `dir`: the topology,
/// the file's path (for routers' `--topology-file`) and the nodes. Nodes reach each other through
/// the topology they share (a static `--nodes` list has none), as scripts over nodes need.
async fn three_node_processes(dir: &std::path::Path) -> (shoal_wire::Topology, String, Vec<NodeProc>) {
    let addrs: Vec<String> = (0..3).map(|_| format!("127.0.0.1:{}", support::free_port())).collect();
    let topology = shoal_wire::Topology::even(&addrs);
    let file = dir.join("topology.json");
    std::fs::write(&file, topology.to_json()).unwrap();
    let file = file.to_str().unwrap().to_string();
    let mut nodes = Vec::new();
    for (i, addr) in addrs.iter().enumerate() {
        nodes.push(NodeProc::start_at(dir, &format!("node{i}"), addr, &["--topology-file", &file]).await);
    }
    (topology, file, nodes)
}

/// A script over keys of two nodes, its own node SIGKILLed mid-run: the node it held lets go as
/// soon as the connection drops (its other clients, held meanwhile, are answered then, not
/// before), what the script wrote there stands (docs/architecture.md, "What a death leaves"),
/// the third node's clients never waited, and the script's client gets an error, not a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_s_node_killed_mid_run_lets_the_node_it_held_go() {
    let dir = tempfile::tempdir().unwrap();
    let (topology, file, mut nodes) = three_node_processes(dir.path()).await;
    let a = RouterProc::start(dir.path(), "router", &["--topology-file", &file]).await;
    let (first, held, free) = (keys_on(&topology, 0, 1), keys_on(&topology, 1, 2), keys_on(&topology, 2, 1));
    // Writes the held node's key, then spins ARGV[1] seconds, then writes its own node's key.
    let script = "redis.call('SET', KEYS[2], 'from-script') local t = tonumber(redis.call('TIME')[1]) \
        while tonumber(redis.call('TIME')[1]) < t + tonumber(ARGV[1]) do end \
        redis.call('SET', KEYS[1], 'end') return 1";
    let mut c = a.raw().await;
    // A first short run: a script's first run on a node holds every node; the long run below
    // holds only the node of its declared keys.
    assert_eq!(c.cmd(&["EVAL", script, "2", &first[0], &held[0], "0"]).await, b":1\r\n");
    assert_eq!(c.cmd(&["DEL", &held[0]]).await, b":1\r\n");
    let (resp, script_owned) = (a.resp, script.to_string());
    let (k1, k2) = (first[0].clone(), held[0].clone());
    let running = tokio::spawn(async move {
        let mut c = support::Raw::connect(resp).await;
        tokio::time::timeout(Duration::from_secs(20), c.cmd(&["EVAL", &script_owned, "2", &k1, &k2, "3"]))
            .await
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    // A client of the held node waits for the script; one of the third node does not.
    let held_key = held[1].clone();
    let writer = tokio::spawn(async move {
        let mut c = support::Raw::connect(resp).await;
        let reply = c.cmd(&["SET", &held_key, "after"]).await;
        (reply, Instant::now())
    });
    let started = Instant::now();
    assert_eq!(c.cmd(&["SET", &free[0], "x"]).await, b"+OK\r\n");
    assert!(started.elapsed() < Duration::from_millis(1500), "the third node's client waited");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!writer.is_finished(), "the held node served another client while the script held it");
    let killed = Instant::now();
    nodes[0].kill();
    let (reply, answered) =
        tokio::time::timeout(Duration::from_secs(10), writer).await.expect("held node let go").unwrap();
    assert_eq!(reply, b"+OK\r\n");
    assert!(answered >= killed, "answered before the script's node died");
    assert!(answered - killed < Duration::from_secs(5), "the held node let go after {:?}", answered - killed);
    let script_reply = running.await.unwrap().expect("the script's client got an answer");
    assert!(script_reply.starts_with(b"-"), "{}", text(script_reply));
    assert_eq!(c.cmd(&["GET", &held[0]]).await, b"$11\r\nfrom-script\r\n", "the held node's write stands");
    assert_eq!(c.cmd(&["GET", &free[0]]).await, b"$1\r\nx\r\n");
}

/// With `--busy-reply-scope cluster`, a node told the router a script there is busy, then died
/// (SIGKILL) without ever saying it ended: the router stops answering BUSY as soon as that node's
/// stream ends (the busy mark goes with the link), so PING and the other nodes' keys are served
/// again within seconds, and the script's client gets an error, not a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_script_s_node_killed_ends_the_cluster_scope_busy() {
    let dir = tempfile::tempdir().unwrap();
    let (topology, file, mut nodes) = three_node_processes(dir.path()).await;
    let a =
        RouterProc::start(dir.path(), "router", &["--topology-file", &file, "--busy-reply-scope", "cluster"])
            .await;
    let (own, other) = (keys_on(&topology, 0, 1), keys_on(&topology, 1, 1));
    let mut c = a.raw().await;
    assert_eq!(c.cmd(&["CONFIG", "SET", "busy-reply-threshold", "100"]).await, b"+OK\r\n");
    // Spins ARGV[1] seconds. A first short run: a script's first run on a node holds every node;
    // the long run below holds only its own node.
    let script = "local t = tonumber(redis.call('TIME')[1]) \
        while tonumber(redis.call('TIME')[1]) < t + tonumber(ARGV[1]) do end return 1";
    assert_eq!(c.cmd(&["EVAL", script, "1", &own[0], "0"]).await, b":1\r\n");
    let (resp, script_owned, key) = (a.resp, script.to_string(), own[0].clone());
    let running = tokio::spawn(async move {
        let mut c = support::Raw::connect(resp).await;
        tokio::time::timeout(Duration::from_secs(30), c.cmd(&["EVAL", &script_owned, "1", &key, "20"])).await
    });
    // The router hears the node is busy: PING, which the router answers itself, says BUSY.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = text(c.cmd(&["PING"]).await);
        if got.starts_with("-BUSY") {
            break;
        }
        assert_eq!(got, "+PONG\r\n");
        assert!(Instant::now() < deadline, "PING never answered BUSY while the script ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got = text(c.cmd(&["SET", &other[0], "x"]).await);
    assert!(got.starts_with("-BUSY"), "another node's key in the cluster scope: {got:?}");
    let killed = Instant::now();
    nodes[0].kill();
    // The dead node's busy mark goes with its stream.
    loop {
        let got = text(c.cmd(&["PING"]).await);
        if got == "+PONG\r\n" {
            break;
        }
        assert!(got.starts_with("-BUSY"), "{got:?}");
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "still BUSY {:?} after the node died",
            killed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(c.cmd(&["SET", &other[0], "x"]).await, b"+OK\r\n");
    assert_eq!(c.cmd(&["GET", &other[0]]).await, b"$1\r\nx\r\n");
    let script_reply = running.await.unwrap().expect("the script's client got an answer");
    assert!(script_reply.starts_with(b"-"), "{}", text(script_reply));
    assert!(killed.elapsed() < Duration::from_secs(15), "the script's client waited {:?}", killed.elapsed());
}

/// A script or function that catches the kill with `pcall` in a loop (`while 1 do pcall(f) end`)
/// still stops at SCRIPT KILL / FUNCTION KILL, with Redis's reply, byte for byte: after a kill the
/// hook fires at every instruction, so the error meets the script outside its pcall (Valkey's
/// scripting unit, "Timedout read-only scripts can be killed by SCRIPT KILL even when use
/// pcall", looped forever here). The next FUNCTION LOAD and a long script run whole after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_that_catches_the_kill_with_pcall_still_stops() {
    let (_redis, redis_addr) = support::redis_server().await;
    let router = support::cluster().await;
    let body = "local f = function() while 1 do redis.call('ping') end end while 1 do pcall(f) end";
    let lib = format!("#!lua name=t\nredis.register_function('t', function(KEYS, ARGV)\n {body} \nend)");
    let mut got = Vec::new();
    for addr in [redis_addr, router.resp_addr()] {
        let mut admin = support::Raw::connect(addr).await;
        assert_eq!(admin.cmd(&["CONFIG", "SET", "lua-time-limit", "10"]).await, b"+OK\r\n");
        let mut story = Vec::new();
        for (run, kill) in [(vec!["EVAL", body, "0"], "SCRIPT"), (vec!["FCALL", "t", "0"], "FUNCTION")] {
            if kill == "FUNCTION" {
                story.push(text(admin.cmd(&["FUNCTION", "LOAD", "REPLACE", &lib]).await));
            }
            let mut spinner = support::Raw::connect(addr).await;
            let args: Vec<&[u8]> = run.iter().map(|a| a.as_bytes()).collect();
            spinner.send(&support::encode(&args)).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            story.push(text(admin.cmd(&[kill, "KILL"]).await));
            let reply = tokio::time::timeout(Duration::from_secs(10), spinner.reply()).await;
            story.push(text(reply.expect("the script stopped").expect("a reply")));
        }
        story.push(text(
            admin.cmd(&["EVAL", "local x = 0 for i=1,3000000 do x = x + 1 end return x", "0"]).await,
        ));
        got.push(story);
    }
    assert_eq!(got[1], got[0]);
    assert!(got[0][1].starts_with("-ERR Script killed by user"), "{:?}", got[0]);
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_msgpack_fails_its_script_and_hurts_no_node() {
    let router = support::cluster().await;
    let mut c = support::Raw::connect(router.resp_addr()).await;
    let nested = "return cmsgpack.unpack(string.rep(string.char(0x91), 200000) .. string.char(0x90))";
    let long = "return cmsgpack.unpack(string.char(0xdb, 0xff, 0xff, 0xff, 0xff) .. 'x')";
    for (script, error) in [(nested, "Bad data format in input."), (long, "Missing bytes in input.")] {
        let reply = text(c.cmd(&["EVAL", script, "1", "{m}k"]).await);
        assert!(reply.starts_with("-ERR user_script:1: ") && reply.contains(error), "{reply}");
        assert_eq!(c.cmd(&["SET", "{m}k", "v"]).await, b"+OK\r\n", "the script's node still serves");
    }
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deeply_nested_script_reply_hurts_no_other_client() {
    use redis::AsyncCommands;
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, a, _b, _) = two_routers(dir.path()).await;
    let deep = "local a = {}; local b = {a}; a[1] = b; return a";
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut others = Vec::new();
    for writer in 0..4 {
        let (mut con, stop) = (support::redis_conn(a.resp).await, stop.clone());
        others.push(tokio::spawn(async move {
            let mut done = 0u32;
            // Keys beside the script's key ({deep}): on its node, so on its stream.
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && done < 20_000 {
                let key = format!("{{deep}}w{writer}");
                let set: Result<(), _> = con.set(&key, done).await;
                set.unwrap_or_else(|e| panic!("another client's SET failed: {e}"));
                let got: Result<u32, _> = con.get(&key).await;
                assert_eq!(got.unwrap_or_else(|e| panic!("another client's GET failed: {e}")), done);
                done += 1;
            }
            done
        }));
    }
    let mut raw = support::Raw::connect(a.resp).await;
    let hello = raw.cmd(&["HELLO", "3"]).await;
    assert!(hello.starts_with(b"%"), "{}", text(hello));
    for _ in 0..5 {
        let reply = raw.cmd(&["EVAL", deep, "1", "{deep}k"]).await;
        let error = b"-ERR reached lua stack limit\r\n";
        let (arrays, tail) = reply.split_at(reply.len() - error.len());
        assert_eq!(tail, error, "{}", text(reply[reply.len().saturating_sub(64)..].to_vec()));
        assert!(arrays.chunks(4).all(|c| c == b"*1\r\n"), "nested one-element arrays down to the error");
        // Redis stops at 7,995 (Lua's stack); Shoal a few levels sooner (docs/compatibility.md).
        assert!((7_600..=7_995).contains(&(arrays.len() / 4)), "{} levels", arrays.len() / 4);
        assert_eq!(raw.cmd(&["PING"]).await, b"+PONG\r\n", "the connection still serves");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in others {
        assert!(t.await.unwrap() > 0, "each other client got answers");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_run_whole_among_concurrent_writers() {
    use redis::AsyncCommands;
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, a, b, _) = two_routers(dir.path()).await;
    let mut on_a = support::redis_conn(a.resp).await;
    let mut on_b = support::redis_conn(b.resp).await;
    let bump = redis::Script::new(
        "local a = redis.call('incr', KEYS[1]) local b = redis.call('incr', KEYS[2]) return {a, b}",
    );
    let check = redis::Script::new("return {redis.call('get', KEYS[1]), redis.call('get', KEYS[2])}");
    let mut tasks = Vec::new();
    for writer in 0..4 {
        let (mut con, bump) = (if writer % 2 == 0 { on_a.clone() } else { on_b.clone() }, bump.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..200 {
                let (x, y): (i64, i64) = if writer % 2 == 0 {
                    bump.key("{pair}a").key("{pair}b").invoke_async(&mut con).await.unwrap()
                } else {
                    redis::pipe()
                        .atomic()
                        .incr("{pair}a", 1)
                        .incr("{pair}b", 1)
                        .query_async(&mut con)
                        .await
                        .unwrap()
                };
                assert_eq!(x, y, "both keys moved together");
            }
        }));
    }
    let mut reads = 0;
    while tasks.iter().any(|t| !t.is_finished()) && reads < 5_000 {
        let (x, y): (Option<i64>, Option<i64>) =
            check.key("{pair}a").key("{pair}b").invoke_async(&mut on_a).await.unwrap();
        assert_eq!(x, y, "a script never sees one increment without the other");
        let (x, y): (Option<i64>, Option<i64>) =
            redis::pipe().atomic().get("{pair}a").get("{pair}b").query_async(&mut on_b).await.unwrap();
        assert_eq!(x, y, "nor does a transaction");
        reads += 1;
    }
    for t in tasks {
        t.await.unwrap();
    }
    let total: i64 = on_a.get("{pair}a").await.unwrap();
    assert_eq!(total, 800, "every increment counted once");
    assert!(reads > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evalsha_survives_a_node_that_lost_its_scripts() {
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, a, b, topology) = two_routers(dir.path()).await;
    let key = keys_on(&topology, 1, 1).remove(0);
    let body = "return redis.call('incr', KEYS[1])";
    let sha = shoal_wire::script::sha1_hex(body.as_bytes());

    let mut ca = a.raw().await;
    assert_eq!(text(ca.cmd(&["SCRIPT", "LOAD", body]).await), format!("$40\r\n{sha}\r\n"));
    let mut cb = b.raw().await;
    assert_eq!(cb.cmd(&["EVALSHA", &sha, "1", &key]).await, b":1\r\n", "loaded on every node");

    // Node 1 restarts (no data dir): its script cache is empty.
    let addr1 = nodes[1].addr.clone();
    nodes[1].kill();
    nodes[1] = NodeProc::start_at(dir.path(), "node1-again", &addr1, &[]).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    let reply = loop {
        let r = cb.cmd(&["EVALSHA", &sha, "1", &key]).await;
        if !r.starts_with(b"-ERR node") || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The restarted node 1 does not know the script: router B fetched it from node 0 or 2.
    assert_eq!(reply, b":1\r\n", "{}", text(reply.clone()));
    assert_eq!(ca.cmd(&["EVALSHA", &sha, "1", &key]).await, b":2\r\n");
    assert_eq!(text(cb.cmd(&["SCRIPT", "EXISTS", &sha, &"0".repeat(40)]).await), "*2\r\n:1\r\n:0\r\n");

    // Flushed from every node: NOSCRIPT, and the redis crate's Script falls back to EVAL.
    assert_eq!(ca.cmd(&["SCRIPT", "FLUSH"]).await, b"+OK\r\n");
    assert_eq!(
        cb.cmd(&["EVALSHA", &sha, "1", &key]).await,
        b"-NOSCRIPT No matching script. Please use EVAL.\r\n"
    );
    let mut con = support::redis_conn(b.resp).await;
    let n: i64 = redis::Script::new(body).key(&key).invoke_async(&mut con).await.unwrap();
    assert_eq!(n, 3);
}

/// EVALSHA inside MULTI where the transaction's node never had the script (an EVAL on another
/// node's key loaded it there only; ioredis sends EVALSHA once a connection has sent the body,
/// inside MULTI too, as BullMQ's FlowProducer does): the node refuses the transaction before
/// running anything, the router fetches the body and sends it again, and EXEC answers as Redis
/// does. A script no node knows answers NOSCRIPT in its place, the rest of the transaction runs.
/// (`b` and `c` hash to slots 3300 and 7365: nodes 0 and 1 of the embedded cluster.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evalsha_inside_multi_finds_a_script_only_another_node_has() {
    let (_redis, redis_addr) = support::redis_server().await;
    let router = support::cluster().await;
    let body = "return redis.call('incr', KEYS[1])";
    let sha = shoal_wire::script::sha1_hex(body.as_bytes());
    let unknown = "f".repeat(40);
    let mut answers = Vec::new();
    for addr in [redis_addr, router.resp_addr()] {
        let mut c = support::Raw::connect(addr).await;
        let mut out = Vec::new();
        for line in [
            vec!["FLUSHALL"],
            vec!["SCRIPT", "FLUSH"],
            vec!["EVAL", body, "1", "b"],
            vec!["MULTI"],
            vec!["SET", "c", "5"],
            vec!["EVALSHA", &sha, "1", "c"],
            vec!["EVALSHA", &unknown, "1", "c"],
            vec!["GET", "c"],
            vec!["EXEC"],
            vec!["WATCH", "c"],
            vec!["MULTI"],
            vec!["EVALSHA", &unknown, "1", "c"],
            vec!["EXEC"],
            vec!["GET", "c"],
        ] {
            out.push(text(c.cmd(&line).await));
        }
        answers.push(out);
    }
    assert_eq!(answers[1], answers[0], "Shoal's answers (right) against redis-server's (left)");
    assert!(answers[1][8].contains(":6\r\n"), "the script ran: {}", answers[1][8]);
    assert!(answers[1][8].contains("NOSCRIPT"), "{}", answers[1][8]);
}

/// Scripts while the cluster scales 3 → 5 → 2: each applies whole or not at all, exactly once
/// (the three counters of a pair always agree), clients see no error, and nodes that join
/// after SCRIPT LOAD get the script from the others when EVALSHA first reaches them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_apply_whole_while_the_cluster_scales() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let router = support::router(&["--embedded-nodes", "3", "--deadline-ms", "5000"]).await;
    let addr = router.resp_addr();
    let mut admin = support::Raw::connect(addr).await;
    // Filler (12 MB), so that slots take a while to move and scripts meet them moving.
    support::fill(&mut admin, 3000, 4096).await;
    const PAIRS: usize = 40;
    let pairs = support::Pairs { n: PAIRS, spread: false };
    support::transfer_pairs(&mut admin, pairs).await;
    let transfer =
        "redis.call('decr', KEYS[1]) redis.call('incr', KEYS[2]) return redis.call('incr', KEYS[3])";
    let sha = shoal_wire::script::sha1_hex(transfer.as_bytes());
    assert_eq!(text(admin.cmd(&["SCRIPT", "LOAD", transfer]).await), format!("$40\r\n{sha}\r\n"));
    let stop = Arc::new(AtomicBool::new(false));
    let applied = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for w in 0..3usize {
        let (stop, applied, sha) = (stop.clone(), applied.clone(), sha.clone());
        clients.push(tokio::spawn(async move {
            let mut c = support::Raw::connect(addr).await;
            let mut errors = Vec::new();
            let started = Instant::now();
            let mut i = w;
            while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(120) {
                let p = i % PAIRS;
                i += 3;
                let keys = [format!("{{acct{p}}}a"), format!("{{acct{p}}}b"), format!("{{acct{p}}}n")];
                let reply = c.cmd(&["EVALSHA", &sha, "3", &keys[0], &keys[1], &keys[2]]).await;
                if reply.starts_with(b":") {
                    applied.fetch_add(1, Ordering::Relaxed);
                } else {
                    errors.push(text(reply));
                }
            }
            errors
        }));
    }
    support::scale_during_transfers(
        &mut admin,
        router.http_addr(),
        clients,
        &stop,
        &applied,
        pairs,
        "script",
    )
    .await;
    router.shutdown().await;
}

/// `cmdstat_<name>`'s calls, rejected_calls and failed_calls from INFO commandstats.
fn cmdstat(info: &str, name: &str) -> Option<(u64, u64, u64)> {
    let line = info.lines().find(|l| l.starts_with(&format!("cmdstat_{name}:")))?;
    let field = |f: &str| {
        line.split([':', ',']).find_map(|kv| kv.strip_prefix(&format!("{f}="))).and_then(|v| v.parse().ok())
    };
    Some((field("calls")?, field("rejected_calls")?, field("failed_calls")?))
}

/// INFO commandstats counts the commands scripts call (EVAL and FCALL), run on the node, as
/// redis-server does: compared with it after the same commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commandstats_count_the_calls_scripts_make_like_redis() {
    let (_redis, redis_addr) = support::redis_server().await;
    let router = support::router(&["--embedded-nodes", "3"]).await;
    let mut shoal = support::Raw::connect(router.resp_addr()).await;
    let mut redis = support::Raw::connect(redis_addr).await;
    let script = "redis.call('set', KEYS[1], 0) redis.call('expire', KEYS[1], 100) \
                  redis.call('geoadd', KEYS[1] .. 'g', 0, 0, 'bar') redis.pcall('incr', KEYS[1] .. 'g') \
                  return redis.call('get', KEYS[1])";
    let library = "#!lua name=statslib\nredis.register_function('f', function(keys) \
                   return redis.call('hset', keys[1], 'f', 'v') end)";
    for cmd in [
        vec!["CONFIG", "RESETSTAT"],
        vec!["SET", "{s}key", "v"],
        vec!["EVAL", script, "1", "{s}key"],
        vec!["EVAL", script, "1", "{s}key"],
        vec!["FUNCTION", "LOAD", "REPLACE", library],
        vec!["FCALL", "f", "1", "{s}hash"],
    ] {
        let (s, r) = (text(shoal.cmd(&cmd).await), text(redis.cmd(&cmd).await));
        assert_eq!(s, r, "{cmd:?}");
    }
    let (s, r) =
        (text(shoal.cmd(&["INFO", "commandstats"]).await), text(redis.cmd(&["INFO", "commandstats"]).await));
    for name in ["set", "expire", "geoadd", "incr", "get", "eval", "hset", "fcall"] {
        assert_eq!(cmdstat(&s, name), cmdstat(&r, name), "cmdstat_{name}\nshoal:\n{s}\nredis:\n{r}");
    }
    assert_eq!(cmdstat(&s, "set"), Some((3, 0, 0)), "one SET sent, two called by scripts");
    assert_eq!(cmdstat(&s, "incr"), Some((2, 0, 2)), "INCR of a sorted set fails: failed_calls");
}
