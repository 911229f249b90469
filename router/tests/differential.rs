//! Differential test: the same bytes go to Debian's redis-server and to a 3-node Shoal cluster,
//! and the replies must be byte-identical, in RESP2 and again in RESP3 (each script runs twice,
//! the second time after `HELLO 3` on both connections).
//!
//! Command scripts live in `tests/differential/*.redis`: one command per line in redis-cli
//! syntax (quotes and `\xHH` escapes), `#` comments, and `!sleep MS` to let TTLs pass. Raw
//! protocol cases (malformed input, pipelines, inline commands) are listed below.

mod support;

use std::time::Duration;

use shoal_router::resp::parse::split_args;
use support::{Raw, encode};

async fn run_script(
    name: &str,
    text: &str,
    redis: std::net::SocketAddr,
    shoal: std::net::SocketAddr,
    resp3: bool,
) -> Vec<String> {
    let mut theirs = Raw::connect(redis).await;
    let mut ours = Raw::connect(shoal).await;
    theirs.cmd(&["FLUSHALL"]).await;
    ours.cmd(&["FLUSHALL"]).await;
    if resp3 {
        theirs.cmd(&["HELLO", "3"]).await;
        ours.cmd(&["HELLO", "3"]).await;
    }
    let name = if resp3 { format!("{name} (RESP3)") } else { name.to_string() };
    let mut mismatches = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(ms) = line.strip_prefix("!sleep ") {
            tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
            continue;
        }
        let args = split_args(line.as_bytes()).unwrap_or_else(|| panic!("{name}:{}: bad quoting", n + 1));
        let args: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
        let request = encode(&args);
        theirs.send(&request).await;
        ours.send(&request).await;
        let (want, got) = (theirs.reply().await, ours.reply().await);
        if want != got {
            mismatches.push(format!(
                "{name}:{}: {line}\n    redis: {:?}\n    shoal: {:?}",
                n + 1,
                want.as_deref().map(String::from_utf8_lossy),
                got.as_deref().map(String::from_utf8_lossy)
            ));
        }
    }
    mismatches
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_scripts_match_redis_byte_for_byte() {
    let (_redis, redis_addr) = support::redis_server().await;
    let router = support::cluster().await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/differential");
    let mut scripts: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    scripts.sort();
    assert!(scripts.len() >= 5, "scripts found in {}", dir.display());
    let mut mismatches = Vec::new();
    let mut commands = 0;
    for path in scripts {
        let text = std::fs::read_to_string(&path).unwrap();
        commands += text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')).count();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        for resp3 in [false, true] {
            mismatches.extend(run_script(&name, &text, redis_addr, router.resp_addr, resp3).await);
        }
    }
    assert!(commands > 300, "only {commands} commands compared");
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
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_protocol_matches_redis_byte_for_byte() {
    let (_redis, redis_addr) = support::redis_server().await;
    let router = support::cluster().await;
    let mut mismatches = Vec::new();
    for case in CLOSING_CASES.iter().chain(OPEN_CASES) {
        let mut theirs = Raw::connect(redis_addr).await;
        let mut ours = Raw::connect(router.resp_addr).await;
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
