//! Recorded client histories for fault tests (issue 38): clients that survive any fault (every
//! call bounded in time, a broken connection replaced), record every operation with its
//! invocation and completion times and its outcome as JSON lines, and `shoal-checker`
//! (loadtest/checker, built by `.ci/tools/install checker`) to check the whole history.
//!
//! Outcomes follow what Shoal promises (docs/architecture.md, "What a client can rely on"): a
//! write is `ok` only when acknowledged *and* confirmed by `WAIT 1` (the writes Shoal keeps
//! through a failover; a transaction client may count EXEC's answer instead, [`Confirm::Exec`],
//! where no node is killed and none has replicas); acknowledged without that, or answered with an
//! error, or not answered in time, it is `unknown` (it may or may not have applied, and may be lost). A read is `ok` with
//! what it read, or `fail` (a read that failed had no effect).

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Writes the history, one JSON line per completed operation; times are nanoseconds since the
/// recorder was made (one clock for every client).
#[derive(Clone)]
pub struct Recorder {
    pub start: Instant,
    out: Arc<Mutex<std::io::BufWriter<std::fs::File>>>,
    pub path: PathBuf,
}

/// One operation as the checker reads it (loadtest/checker/history.go).
pub struct Rec<'a> {
    pub process: usize,
    pub op: &'a str,
    pub key: &'a str,
    pub value: Option<&'a str>,
    pub read: Option<Option<String>>,
    pub list: Option<Vec<String>>,
    /// A transaction's keys and what it read of each (`mappend`, `mread`).
    pub keys: Option<Vec<String>>,
    pub lists: Option<Vec<Vec<String>>>,
    pub invoke: Instant,
    pub outcome: &'a str,
}

impl Recorder {
    pub fn new(path: &Path) -> Recorder {
        let file = std::fs::File::create(path).unwrap();
        Recorder {
            start: Instant::now(),
            out: Arc::new(Mutex::new(std::io::BufWriter::new(file))),
            path: path.into(),
        }
    }

    /// Which generation of keys clients use now: a key gets a new suffix every [`KEY_EPOCH`],
    /// so in a long run lists stay short enough to read whole (LRANGE) and each register's
    /// history short enough for Porcupine (a 100k-op key took it gigabytes).
    pub fn epoch(&self) -> u64 {
        self.start.elapsed().as_secs() / KEY_EPOCH.as_secs()
    }

    /// Records `r`, completed now.
    pub fn record(&self, r: Rec) {
        let mut line = serde_json::json!({
            "process": r.process, "op": r.op, "key": r.key,
            "invoke": (r.invoke - self.start).as_nanos() as u64,
            "complete": self.start.elapsed().as_nanos() as u64,
            "outcome": r.outcome,
        });
        if let Some(v) = r.value {
            line["value"] = v.into();
        }
        if let Some(read) = r.read {
            line["read"] = read.into();
        }
        if let Some(list) = r.list {
            line["list"] = list.into();
        }
        if let Some(keys) = r.keys {
            line["keys"] = keys.into();
        }
        if let Some(lists) = r.lists {
            line["lists"] = lists.into();
        }
        let mut out = self.out.lock().unwrap();
        writeln!(out, "{line}").unwrap();
    }

    pub fn flush(&self) {
        self.out.lock().unwrap().flush().unwrap();
    }
}

/// A RESP connection that never panics: a call that fails or takes longer than its limit breaks
/// the connection, and the next call makes a new one.
pub struct Conn {
    addr: SocketAddr,
    stream: Option<TcpStream>,
    buf: Vec<u8>,
}

/// A reply, parsed as far as these clients need.
#[derive(Debug, PartialEq)]
pub enum Reply {
    Ok,
    Int(i64),
    Bulk(Option<String>),
    Array(Vec<String>),
    /// EXEC's reply: one list per queued command (an integer reply as a list of one).
    Exec(Vec<Vec<String>>),
    Error(String),
}

impl Conn {
    pub fn new(addr: SocketAddr) -> Conn {
        Conn { addr, stream: None, buf: Vec::new() }
    }

    /// Sends one command and waits at most `limit` for its reply; `None`: no answer (the
    /// connection is dropped, its late reply can never be taken for another command's).
    pub async fn call(&mut self, args: &[&str], limit: Duration) -> Option<Reply> {
        let got = tokio::time::timeout(limit, self.exchange(args)).await.ok().flatten();
        if got.is_none() {
            self.stream = None;
            self.buf.clear();
        }
        got
    }

    async fn exchange(&mut self, args: &[&str]) -> Option<Reply> {
        if self.stream.is_none() {
            self.stream = Some(TcpStream::connect(self.addr).await.ok()?);
        }
        let stream = self.stream.as_mut()?;
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        stream.write_all(&super::encode(&args)).await.ok()?;
        loop {
            if let Some(n) = super::frame_len(&self.buf) {
                let frame: Vec<u8> = self.buf.drain(..n).collect();
                return Some(parse(&frame));
            }
            self.buf.reserve(64 * 1024);
            if stream.read_buf(&mut self.buf).await.ok()? == 0 {
                return None;
            }
        }
    }
}

fn parse(frame: &[u8]) -> Reply {
    let text = String::from_utf8_lossy(frame);
    let (head, rest) = text.split_once("\r\n").unwrap_or((&text, ""));
    match head.as_bytes().first() {
        Some(b'+') => Reply::Ok,
        Some(b':') => Reply::Int(head[1..].parse().unwrap_or(-1)),
        Some(b'$') if head == "$-1" => Reply::Bulk(None),
        Some(b'$') => Reply::Bulk(Some(rest.trim_end_matches("\r\n").to_string())),
        Some(b'*') if head == "*-1" => Reply::Error("EXEC aborted".into()),
        // EXEC's array of arrays (LRANGEs) or of integers (RPUSHes).
        Some(b'*') if rest.starts_with('*') || rest.starts_with(':') => Reply::Exec(exec_items(rest)),
        // An array of bulk strings (LRANGE): every other line after the header is an item.
        Some(b'*') => Reply::Array(rest.split("\r\n").skip(1).step_by(2).map(str::to_string).collect()),
        _ => Reply::Error(head.to_string()),
    }
}

/// The items of EXEC's reply (after its header): each an array of bulk strings or an integer.
fn exec_items(rest: &str) -> Vec<Vec<String>> {
    let lines: Vec<&str> = rest.split("\r\n").collect();
    let (mut out, mut i) = (Vec::new(), 0);
    while i < lines.len() && out.len() < 64 {
        let line = lines[i];
        if let Some(n) = line.strip_prefix('*').and_then(|n| n.parse::<usize>().ok()) {
            out.push((0..n).filter_map(|k| lines.get(i + 2 + 2 * k).map(|v| v.to_string())).collect());
            i += 1 + 2 * n;
        } else if let Some(v) = line.strip_prefix(':') {
            out.push(vec![v.to_string()]);
            i += 1;
        } else {
            break;
        }
    }
    out
}

/// See [`Recorder::epoch`].
pub const KEY_EPOCH: Duration = Duration::from_secs(20);

/// `base` in key generation `epoch`.
pub fn epoch_key(base: &str, epoch: u64) -> String {
    format!("{base}.{epoch}")
}

/// How long a client waits for any reply: past the routers' deadline (2 s in the chaos tests),
/// so a reply that comes is taken, and a missing one is an unknown outcome.
pub const REPLY_LIMIT: Duration = Duration::from_secs(4);

/// A write (`args`), then `WAIT 1 <ms>` if it was acknowledged: "ok" only if WAIT answered 1.
pub async fn confirmed_write(c: &mut Conn, args: &[&str]) -> &'static str {
    if c.call(args, REPLY_LIMIT).await.is_some_and(|r| matches!(r, Reply::Ok | Reply::Int(_)))
        && c.call(&["WAIT", "1", "1000"], REPLY_LIMIT).await == Some(Reply::Int(1))
    {
        "ok"
    } else {
        "unknown"
    }
}

/// What one client does, until `stop_at` (and at most 10 million operations): on registers,
/// SET of a unique value (confirmed by WAIT, 55%) or GET; on lists, RPUSH of a unique value (confirmed by WAIT, 70%) or LRANGE 0 -1; keys of the current epoch ([`Recorder::epoch`]). After an
/// operation that failed it pauses 50 ms, so a fault does not turn into a flood of failures.
pub struct Client {
    pub process: usize,
    pub addr: SocketAddr,
    pub keys: Vec<String>,
    pub lists: bool,
    pub seed: u64,
}

impl Client {
    pub async fn run(self, rec: Recorder, stop_at: Instant) {
        let Client { process, addr, keys, lists, seed } = self;
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut c = Conn::new(addr);
        for n in 0..10_000_000u64 {
            if Instant::now() >= stop_at {
                break;
            }
            let key = epoch_key(&keys[rng.usize(..keys.len())], rec.epoch());
            let value = format!("{process}-{n}");
            let invoke = Instant::now();
            // Lists are read whole, so they are read less often (a run's history stays small).
            let outcome = match (lists, rng.u8(..100) < if lists { 70 } else { 55 }) {
                (lists, true) => {
                    let (command, op) = if lists { ("RPUSH", "append") } else { ("SET", "set") };
                    let outcome = confirmed_write(&mut c, &[command, &key, &value]).await;
                    rec.record(Rec {
                        process,
                        op,
                        key: &key,
                        value: Some(value.as_str()),
                        read: None,
                        list: None,
                        keys: None,
                        lists: None,
                        invoke,
                        outcome,
                    });
                    outcome
                }
                (_, false) => read(&mut c, process, &key, lists, &rec).await,
            };
            if outcome != "ok" {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// One GET (`lists`: LRANGE 0 -1) of `key`, recorded; its outcome.
pub async fn read(c: &mut Conn, process: usize, key: &str, lists: bool, rec: &Recorder) -> &'static str {
    let invoke = Instant::now();
    let args: &[&str] = if lists { &["LRANGE", key, "0", "-1"] } else { &["GET", key] };
    let (op, read, list, outcome) = match (lists, c.call(args, REPLY_LIMIT).await) {
        (false, Some(Reply::Bulk(v))) => ("get", Some(v), None, "ok"),
        (true, Some(Reply::Array(items))) => ("read", None, Some(items), "ok"),
        (false, _) => ("get", None, None, "fail"),
        (true, _) => ("read", None, None, "fail"),
    };
    rec.record(Rec { process, op, key, value: None, read, list, keys: None, lists: None, invoke, outcome });
    outcome
}

/// The `shoal-checker` binary: on PATH, else in the tools cache (`.ci/tools/install checker`).
pub fn checker() -> PathBuf {
    let in_cache = super::clients::tools_cache().join("bin/shoal-checker");
    if in_cache.exists() {
        return in_cache;
    }
    let on_path = std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| Path::new(d).join("shoal-checker"))
        .find(|p| p.exists());
    on_path.unwrap_or_else(|| panic!("shoal-checker not found: run `.ci/tools/install checker`"))
}

/// Porcupine's time per register key unless `SHOAL_CHECKER_TIMEOUT` says otherwise: above the
/// checker's own 60 s, which a chaos run's key with hundreds of writes of unknown outcome (timed
/// out under faults) can need: one of a CI run (seed 1464671974046266038, 351 such writes) took
/// about 80 s to decide on a quiet machine (sound) and was left undecided at 60 s.
pub const CHECK_TIMEOUT: &str = "4m";

/// Runs the checker over the history; its report, and whether it found the history sound.
/// Porcupine gets up to [`CHECK_TIMEOUT`] per register key (`SHOAL_CHECKER_TIMEOUT`, a Go
/// duration, sets another): a key it cannot decide in time fails the run without an anomaly.
pub fn check(history: &Path) -> (String, bool) {
    let mut cmd = std::process::Command::new(checker());
    let timeout = std::env::var("SHOAL_CHECKER_TIMEOUT").unwrap_or_else(|_| CHECK_TIMEOUT.to_string());
    cmd.args(["-timeout", &timeout]);
    let out = cmd.arg(history).output().unwrap();
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (report, out.status.success())
}

/// When a transaction client counts an appending transaction as done ("ok").
#[derive(Clone, Copy, PartialEq)]
pub enum Confirm {
    /// Once `WAIT 1` after EXEC answered 1: the writes Shoal keeps through a failover.
    Wait,
    /// Once EXEC answered: for a cluster without replicas whose nodes are never killed, where an
    /// acknowledged write is kept.
    Exec,
}

/// A transaction client, until `stop_at` (at most 10 million transactions): MULTI, RPUSH of one
/// unique value to every list of a group, EXEC, then (with [`Confirm::Wait`]) `WAIT 1` ("ok"
/// only if it answered 1) as `mappend`; or MULTI, LRANGE of every list of the group, EXEC as
/// `mread`. Every transaction appends to all of a group's lists, so a read that finds them
/// different saw part of a transaction. A group's keys may share a node (a `{hashtag}`) or not.
pub async fn transactions(
    process: usize,
    addr: SocketAddr,
    groups: Vec<Vec<String>>,
    rec: Recorder,
    stop_at: Instant,
    seed: u64,
    confirm: Confirm,
) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut c = Conn::new(addr);
    for n in 0..10_000_000u64 {
        if Instant::now() >= stop_at {
            break;
        }
        let keys: Vec<String> =
            groups[rng.usize(..groups.len())].iter().map(|k| epoch_key(k, rec.epoch())).collect();
        let value = format!("{process}-{n}");
        let invoke = Instant::now();
        let outcome = if rng.u8(..100) < 70 {
            let cmds: Vec<Vec<&str>> =
                keys.iter().map(|k| vec!["RPUSH", k.as_str(), value.as_str()]).collect();
            let outcome = match exec(&mut c, &cmds).await {
                Some(r) if r.len() == keys.len() => {
                    let confirmed = confirm == Confirm::Exec
                        || c.call(&["WAIT", "1", "1000"], REPLY_LIMIT).await == Some(Reply::Int(1));
                    if confirmed { "ok" } else { "unknown" }
                }
                _ => "unknown",
            };
            let (key, value) = (&keys.join(","), Some(value.as_str()));
            let keys = Some(keys.clone());
            rec.record(Rec {
                process,
                op: "mappend",
                key,
                value,
                read: None,
                list: None,
                keys,
                lists: None,
                invoke,
                outcome,
            });
            outcome
        } else {
            read_group(&mut c, process, &keys, &rec).await
        };
        if outcome != "ok" {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// MULTI, LRANGE 0 -1 of every list of `keys`, EXEC, recorded as an `mread`: the read that shows
/// part of a transaction (the checker compares the lists it holds); its outcome.
pub async fn read_group(c: &mut Conn, process: usize, keys: &[String], rec: &Recorder) -> &'static str {
    let invoke = Instant::now();
    let cmds: Vec<Vec<&str>> = keys.iter().map(|k| vec!["LRANGE", k.as_str(), "0", "-1"]).collect();
    let (lists, outcome) = match exec(c, &cmds).await {
        Some(r) if r.len() == keys.len() => (Some(r), "ok"),
        _ => (None, "fail"),
    };
    let key = &keys.join(",");
    let keys = Some(keys.to_vec());
    rec.record(Rec {
        process,
        op: "mread",
        key,
        value: None,
        read: None,
        list: None,
        keys,
        lists,
        invoke,
        outcome,
    });
    outcome
}

/// MULTI, `cmds`, EXEC on `c`: EXEC's items, or `None` if any step failed (the connection is then
/// dropped, so it is never left inside a MULTI).
async fn exec(c: &mut Conn, cmds: &[Vec<&str>]) -> Option<Vec<Vec<String>>> {
    let mut ok = c.call(&["MULTI"], REPLY_LIMIT).await == Some(Reply::Ok);
    for cmd in cmds {
        ok = ok && c.call(cmd, REPLY_LIMIT).await == Some(Reply::Ok);
    }
    let reply = if ok { c.call(&["EXEC"], REPLY_LIMIT).await } else { None };
    match reply {
        Some(Reply::Exec(items)) => Some(items),
        _ => {
            c.stream = None;
            c.buf.clear();
            None
        }
    }
}
