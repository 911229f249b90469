//! A model-checked client workload for resharding tests.
//!
//! Fixed data is loaded first (`preload`: values that never change, keys deleted for good, keys
//! with a long TTL). Then writers and readers run until stopped: each writer owns its keys (so the
//! order of writes per key is known exactly) and mixes plain SETs, pipelined bursts of SETs, SETs
//! with a long or a short TTL, DELs and INCRs of its own counter; readers check the fixed data with
//! the `redis` crate. Every write is logged with when it was sent and whether it was acknowledged.
//!
//! A *strict* workload ([`Workload::strict`], for tests where nothing may be lost) also APPENDs to
//! keys of its own and EXPIREs its keys, and checks as it goes: every reply must match the model
//! of the writer's own keys (APPEND's new length, EXPIRE's 0/1, and a GET of the key just written
//! must read exactly what was acknowledged: an undone DEL or a lost SET shows at once, with the
//! moment it happened).
//!
//! Every step also changes one of the writer's typed values (HINCRBY of a hash field, RPUSH to a
//! list, SADD of a new member, ZINCRBY of a member), so every type moves between nodes under
//! load; the counts they must add up to are checked like the INCR counter's (in strict mode each
//! reply is checked at once too).
//!
//! `verify` then reads every key back and checks it against the log: the value of the last
//! acknowledged write (or nothing, for a delete or an expired short TTL), or the value of a write
//! that got an error (it may or may not have happened). A test that kills a node says which writes
//! were at risk (`risk`), and for those the state from before the first write at risk is allowed
//! too; the report lists the writes actually lost.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::task::JoinHandle;

use super::{Raw, bulk, encode};

pub const STABLE: usize = 3000;
pub const GONE: usize = 300;
pub const LONG_TTL: usize = 300;
/// The short TTL writers use: long gone by the time `verify` reads.
const SHORT_TTL_MS: u64 = 200;
const WRITER_KEYS: u64 = 500;

/// Loads the fixed data: `stable:{i}` = `v{i}`, `gone:{i}` set then deleted, `ttl:{i}` with a
/// 1000 s TTL.
pub async fn preload(addr: SocketAddr) {
    let mut c = Raw::connect(addr).await;
    let mut pipeline = Vec::new();
    for i in 0..STABLE {
        pipeline.extend(encode(&[b"SET", format!("stable:{i}").as_bytes(), format!("v{i}").as_bytes()]));
    }
    for i in 0..GONE {
        pipeline.extend(encode(&[b"SET", format!("gone:{i}").as_bytes(), b"x"]));
        pipeline.extend(encode(&[b"DEL", format!("gone:{i}").as_bytes()]));
    }
    for i in 0..LONG_TTL {
        pipeline.extend(encode(&[b"SET", format!("ttl:{i}").as_bytes(), b"t", b"EX", b"1000"]));
    }
    c.send(&pipeline).await;
    for _ in 0..STABLE + 2 * GONE + LONG_TTL {
        let r = c.reply().await.unwrap();
        assert!(r == b"+OK\r\n" || r == b":1\r\n", "{}", String::from_utf8_lossy(&r));
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ttl {
    None,
    Long,
    Short,
}

#[derive(Debug, Clone)]
struct Write {
    sent: Instant,
    done: Instant,
    value: Option<String>,
    ttl: Ttl,
    acked: bool,
}

#[derive(Default)]
struct Shared {
    ops: AtomicU64,
    errors: Mutex<Vec<(Instant, String)>>,
    /// Per key, its writes in the order they were sent.
    writes: Mutex<HashMap<String, Vec<Write>>>,
    /// Per writer, its counter's INCRs.
    incrs: Mutex<Vec<Changes>>,
    /// Per writer and typed value (TYPED order), its changes.
    typed: Mutex<Vec<[Changes; 4]>>,
}

/// Changes to one value: when each was sent and whether it was acknowledged.
type Changes = Vec<(Instant, bool)>;

/// The typed values each writer changes: key suffix, and the command reading back how many
/// changes it holds.
const TYPED: [(&str, &str); 4] = [("h", "HGET"), ("l", "LLEN"), ("s", "SCARD"), ("z", "ZSCORE")];

fn typed_key(w: usize, kind: usize) -> String {
    format!("typed:{w}:{}", TYPED[kind].0)
}

/// The command that makes change number `n` (0-based) to typed value `kind` of writer `w`.
fn typed_change(w: usize, kind: usize, n: u64) -> Vec<String> {
    let key = typed_key(w, kind);
    match kind {
        0 => vec!["HINCRBY".into(), key, "n".into(), "1".into()],
        1 => vec!["RPUSH".into(), key, n.to_string()],
        2 => vec!["SADD".into(), key, format!("m{n}")],
        _ => vec!["ZINCRBY".into(), key, "1".into(), "m".into()],
    }
}

/// How many changes typed value `kind` holds, as read back (0 when missing).
async fn typed_count(c: &mut Raw, w: usize, kind: usize) -> u64 {
    let key = typed_key(w, kind);
    let r = match kind {
        0 => c.cmd(&["HGET", &key, "n"]).await,
        1 => c.cmd(&["LLEN", &key]).await,
        2 => c.cmd(&["SCARD", &key]).await,
        _ => c.cmd(&["ZSCORE", &key, "m"]).await,
    };
    let text = String::from_utf8_lossy(&r).to_string();
    match text.as_bytes().first() {
        Some(b':') => text[1..].trim().parse().unwrap(),
        Some(b'$') if text.starts_with("$-1") => 0,
        Some(b'$') => text.split("\r\n").nth(1).unwrap().parse().unwrap(),
        _ => panic!("reading {key}: {text}"),
    }
}

impl Shared {
    fn error(&self, what: String) {
        self.errors.lock().push((Instant::now(), what));
    }

    /// The state the last write of `key` left if it was acknowledged (`None` when the key has
    /// no acknowledged last write).
    fn state(&self, key: &str) -> Option<Option<String>> {
        let writes = self.writes.lock();
        let last = writes.get(key)?.last()?;
        last.acked.then(|| last.value.clone())
    }

    fn log(&self, key: &str, w: Write) {
        self.writes.lock().entry(key.to_string()).or_default().push(w);
    }
}

pub struct Workload {
    shared: Arc<Shared>,
    /// When the workload started (the fixed data was loaded just before).
    started: Instant,
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
    writers: usize,
}

/// What `verify` found.
#[derive(Debug, Default)]
pub struct Report {
    /// Keys whose last acknowledged write did not survive (allowed only where at risk).
    pub lost_writes: Vec<String>,
    /// Acknowledged INCRs and typed changes that did not survive.
    pub lost_incrs: u64,
    pub keys_checked: usize,
}

fn ok_reply(r: &[u8]) -> bool {
    r == b"+OK\r\n"
}

impl Workload {
    /// Starts `writers` writers and `readers` readers against the router at `addr`.
    pub async fn start(addr: SocketAddr, writers: usize, readers: usize) -> Workload {
        Workload::run(addr, writers, readers, false).await
    }

    /// Like [`start`](Self::start), with APPENDs, EXPIREs and reads checked as they happen (see
    /// the module docs): for tests in which no acknowledged write may be lost.
    pub async fn strict(addr: SocketAddr, writers: usize, readers: usize) -> Workload {
        Workload::run(addr, writers, readers, true).await
    }

    async fn run(addr: SocketAddr, writers: usize, readers: usize, strict: bool) -> Workload {
        let shared = Arc::new(Shared::default());
        shared.incrs.lock().resize(writers, Vec::new());
        shared.typed.lock().resize_with(writers, Default::default);
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for w in 0..writers {
            let mut c = Raw::connect(addr).await;
            let (shared, stop) = (shared.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    writer_step(&mut c, &shared, w, i, strict).await;
                    i += 1;
                }
            }));
        }
        for r in 0..readers {
            let mut c = super::redis_conn(addr).await;
            let (shared, stop) = (shared.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = r * 997;
                while !stop.load(Ordering::Relaxed) {
                    let n = i % STABLE;
                    match redis::cmd("GET")
                        .arg(format!("stable:{n}"))
                        .query_async::<Option<String>>(&mut c)
                        .await
                    {
                        Ok(Some(v)) if v == format!("v{n}") => {}
                        other => shared.error(format!("GET stable:{n}: {other:?}")),
                    }
                    let g = i % GONE;
                    match redis::cmd("GET")
                        .arg(format!("gone:{g}"))
                        .query_async::<Option<String>>(&mut c)
                        .await
                    {
                        Ok(None) => {}
                        other => shared.error(format!("GET gone:{g} (deleted): {other:?}")),
                    }
                    let t = i % LONG_TTL;
                    match redis::cmd("TTL").arg(format!("ttl:{t}")).query_async::<i64>(&mut c).await {
                        Ok(s) if s > 0 => {}
                        other => shared.error(format!("TTL ttl:{t}: {other:?}")),
                    }
                    shared.ops.fetch_add(3, Ordering::Relaxed);
                    i += 1;
                }
            }));
        }
        Workload { shared, started: Instant::now(), stop, tasks, writers }
    }

    /// Client operations so far.
    pub fn ops(&self) -> u64 {
        self.shared.ops.load(Ordering::Relaxed)
    }

    /// Errors clients saw so far, with when they saw them.
    pub fn errors(&self) -> Vec<(Instant, String)> {
        self.shared.errors.lock().clone()
    }

    pub async fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks.drain(..) {
            t.await.unwrap();
        }
    }

    /// Reads everything back through `addr` and checks it against the log (see the module docs).
    /// `risk(key, sent)`: whether a write to `key` sent at `sent` may be lost. `other_keys`: keys
    /// the test stored besides the workload's (for the DBSIZE check).
    pub async fn verify(
        &self,
        addr: SocketAddr,
        other_keys: usize,
        risk: &dyn Fn(&str, Instant) -> bool,
    ) -> Report {
        let settle = Duration::from_millis(SHORT_TTL_MS + 300);
        tokio::time::sleep(settle).await;
        let mut c = Raw::connect(addr).await;
        let mut report = Report::default();
        for i in 0..STABLE {
            assert_eq!(c.cmd(&["GET", &format!("stable:{i}")]).await, bulk(&format!("v{i}")), "stable:{i}");
        }
        for i in 0..GONE {
            assert_eq!(
                c.cmd(&["EXISTS", &format!("gone:{i}")]).await,
                b":0\r\n",
                "deleted keys never come back"
            );
        }
        for i in 0..LONG_TTL {
            let ttl = ttl_of(&mut c, &format!("ttl:{i}")).await;
            // Loaded (with a 1000 s TTL) just before the workload started.
            let floor = 1000 - self.started.elapsed().as_secs() as i64 - 60;
            assert!((floor..=1000).contains(&ttl), "the TTL of ttl:{i} moved with it: {ttl}");
        }

        let writes = self.shared.writes.lock().clone();
        let now = Instant::now();
        let mut live = 0;
        let mut finals: HashMap<String, Option<String>> = HashMap::new();
        for (key, log) in &writes {
            let got = c.cmd(&["GET", key]).await;
            let got = if got == b"$-1\r\n" {
                None
            } else {
                assert!(got.starts_with(b"$"), "GET {key}: {}", String::from_utf8_lossy(&got));
                let text = String::from_utf8(got).unwrap();
                Some(text.split("\r\n").nth(1).unwrap().to_string())
            };
            live += usize::from(got.is_some());
            finals.insert(key.clone(), got.clone());
            // The state a write leaves, as of now (short TTLs have run out).
            let state = |w: &Write| {
                if w.ttl == Ttl::Short && now > w.done + settle / 2 { None } else { w.value.clone() }
            };
            let last_acked = log.iter().rposition(|w| w.acked);
            let mut allowed: Vec<Option<String>> = vec![last_acked.and_then(|i| state(&log[i]))];
            let after = last_acked.map_or(0, |i| i + 1);
            allowed.extend(log[after..].iter().map(state));
            if let Some(first_risky) = log.iter().position(|w| risk(key, w.sent)) {
                let before = first_risky.checked_sub(1).and_then(|i| state(&log[i]));
                allowed.push(before);
                allowed.extend(log[first_risky..].iter().map(state));
            }
            assert!(
                allowed.contains(&got),
                "{key}: read {got:?}, but its writes allow only {allowed:?}; log: {log:?}"
            );
            if got != allowed[0] {
                report.lost_writes.push(key.clone());
            }
            if got.is_some() && last_acked.is_some_and(|i| log[i].value == got) {
                let ttl = ttl_of(&mut c, key).await;
                match log[last_acked.unwrap()].ttl {
                    Ttl::None => assert_eq!(ttl, -1, "{key} has no TTL"),
                    Ttl::Long => {
                        let floor = 1000 - log[last_acked.unwrap()].sent.elapsed().as_secs() as i64 - 2;
                        assert!((floor..=1000).contains(&ttl), "{key}: TTL {ttl}, at least {floor} expected")
                    }
                    Ttl::Short => {}
                }
            }
            report.keys_checked += 1;
        }

        let incrs = self.shared.incrs.lock().clone();
        let mut counters = 0;
        for (w, log) in incrs.iter().enumerate() {
            let key = format!("counter:{w}");
            let acked = log.iter().filter(|(_, ok)| *ok).count() as u64;
            let unacked = log.len() as u64 - acked;
            let risky = log.iter().filter(|(sent, ok)| *ok && risk(&key, *sent)).count() as u64;
            let got = c.cmd(&["GET", &key]).await;
            let value: u64 = if got == b"$-1\r\n" {
                0
            } else {
                counters += 1;
                String::from_utf8(got).unwrap().split("\r\n").nth(1).unwrap().parse().unwrap()
            };
            assert!(
                (acked - risky..=acked + unacked).contains(&value),
                "{key} = {value}: {acked} INCRs acknowledged ({risky} at risk), {unacked} failed"
            );
            report.lost_incrs += acked.saturating_sub(value);
        }

        let typed = self.shared.typed.lock().clone();
        let mut typed_keys = 0;
        for (w, kinds) in typed.iter().enumerate() {
            for (kind, log) in kinds.iter().enumerate() {
                let key = typed_key(w, kind);
                let acked = log.iter().filter(|(_, ok)| *ok).count() as u64;
                let unacked = log.len() as u64 - acked;
                let risky = log.iter().filter(|(sent, ok)| *ok && risk(&key, *sent)).count() as u64;
                let value = typed_count(&mut c, w, kind).await;
                typed_keys += usize::from(value > 0);
                assert!(
                    (acked - risky..=acked + unacked).contains(&value),
                    "{key} holds {value} changes: {acked} acknowledged ({risky} at risk), {unacked} failed"
                );
                report.lost_incrs += acked.saturating_sub(value);
            }
        }

        // Old owners reclaim the slots they gave away in the background (until then DBSIZE counts
        // those keys twice), and expired keys go when active expiry gets to them.
        let expected =
            format!(":{}\r\n", STABLE + LONG_TTL + live + counters + typed_keys + other_keys).into_bytes();
        let start = Instant::now();
        loop {
            let dbsize = c.cmd(&["DBSIZE"]).await;
            if dbsize == expected {
                break;
            }
            if start.elapsed() > Duration::from_secs(10) {
                // Which keys are extra or stored twice?
                let all = String::from_utf8(c.cmd(&["KEYS", "*"]).await).unwrap();
                let mut seen: HashMap<&str, usize> = HashMap::new();
                for k in all.split("\r\n").filter(|l| !l.starts_with(['*', '$']) && !l.is_empty()) {
                    *seen.entry(k).or_default() += 1;
                }
                let odd: Vec<_> = seen
                    .iter()
                    .filter(|(k, n)| {
                        **n > 1 || k.starts_with("gone:") || finals.get(**k).is_some_and(|v| v.is_none())
                    })
                    .map(|(k, n)| (k.to_string(), *n, writes.get(*k).cloned()))
                    .take(5)
                    .collect();
                panic!(
                    "DBSIZE {} but {} keys live: every key must be stored once after the moves; odd keys: {odd:?}",
                    String::from_utf8_lossy(&dbsize),
                    String::from_utf8_lossy(&expected)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(self.writers, incrs.len());
        report
    }
}

async fn ttl_of(c: &mut Raw, key: &str) -> i64 {
    let r = c.cmd(&["TTL", key]).await;
    String::from_utf8_lossy(&r)[1..].trim().parse().unwrap()
}

/// One step of writer `w`: a write (plain, pipelined burst, TTL'd, a delete of the key written
/// three steps earlier, or in strict mode an APPEND or EXPIRE), then an INCR; in strict mode the
/// key written is then read back and must hold exactly what the model says.
async fn writer_step(c: &mut Raw, shared: &Shared, w: usize, i: u64, strict: bool) {
    let key = format!("w{w}:{}", i % WRITER_KEYS);
    let sent = Instant::now();
    let logged = |value: Option<String>, ttl: Ttl, reply: &[u8], acked: bool| {
        if !acked {
            shared.error(format!("writer {w}: {}", String::from_utf8_lossy(reply)));
        }
        Write { sent, done: Instant::now(), value, ttl, acked }
    };
    // The key whose state a strict writer checks afterwards.
    let mut check = None;
    match i % 12 {
        3 | 9 => {
            // The key written three steps ago: deletes race that write's journey between nodes.
            let key = format!("w{w}:{}", (i + WRITER_KEYS - 3) % WRITER_KEYS);
            let r = c.cmd(&["DEL", &key]).await;
            let acked = r == b":0\r\n" || r == b":1\r\n";
            if strict && acked {
                let existed = shared.state(&key).is_some_and(|v| v.is_some());
                if r != if existed { &b":1\r\n"[..] } else { &b":0\r\n"[..] } {
                    shared.error(format!("DEL {key} answered {} (existed: {existed})", show(&r)));
                }
            }
            shared.log(&key, logged(None, Ttl::None, &r, acked));
            check = Some(key);
        }
        0 | 6 => {
            // A pipelined burst over other keys of this writer.
            let keys: Vec<String> = (0..10).map(|j| format!("w{w}:p{}", (i * 3 + j) % 300)).collect();
            let mut burst = Vec::new();
            for k in &keys {
                burst.extend(encode(&[b"SET", k.as_bytes(), format!("{k}@{i}").as_bytes()]));
            }
            c.send(&burst).await;
            for k in keys {
                let r = c.reply().await.unwrap();
                let w = logged(Some(format!("{k}@{i}")), Ttl::None, &r, ok_reply(&r));
                shared.log(&k, w);
            }
        }
        4 => {
            let v = format!("{key}@{i}");
            let r = c.cmd(&["SET", &key, &v, "EX", "1000"]).await;
            shared.log(&key, logged(Some(v), Ttl::Long, &r, ok_reply(&r)));
            check = Some(key);
        }
        8 => {
            let short = format!("w{w}:short:{}", i % 50);
            let v = format!("{short}@{i}");
            let r = c.cmd(&["SET", &short, &v, "PX", &SHORT_TTL_MS.to_string()]).await;
            shared.log(&short, logged(Some(v), Ttl::Short, &r, ok_reply(&r)));
        }
        10 if strict => {
            // APPEND: the new length must be the model's, and the value its concatenation.
            let key = format!("w{w}:app:{}", i % 20);
            let piece = format!("{i};");
            let before = shared.state(&key).flatten().unwrap_or_default();
            let r = c.cmd(&["APPEND", &key, &piece]).await;
            let want = format!(":{}\r\n", before.len() + piece.len());
            if r.starts_with(b":") && r != want.as_bytes() {
                shared.error(format!("APPEND {key} answered {}, the model says {want:?}", show(&r)));
            }
            shared.log(&key, logged(Some(before + &piece), Ttl::None, &r, r.starts_with(b":")));
            check = Some(key);
        }
        11 if strict => {
            // EXPIRE answers whether the key exists: a deleted key that answers 1 came back.
            let existed = shared.state(&key).is_some_and(|v| v.is_some());
            let r = c.cmd(&["EXPIRE", &key, "1000"]).await;
            let want: &[u8] = if existed { b":1\r\n" } else { b":0\r\n" };
            if r != want {
                shared.error(format!("EXPIRE {key} answered {} (existed: {existed})", show(&r)));
            } else if existed {
                let value = shared.state(&key).flatten();
                shared.log(&key, logged(value, Ttl::Long, &r, true));
            }
            check = Some(key);
        }
        _ => {
            let v = format!("{key}@{i}");
            let r = c.cmd(&["SET", &key, &v]).await;
            shared.log(&key, logged(Some(v), Ttl::None, &r, ok_reply(&r)));
            check = Some(key);
        }
    }
    let sent = Instant::now();
    let r = c.cmd(&["INCR", &format!("counter:{w}")]).await;
    let acked = r.starts_with(b":");
    if !acked {
        shared.error(format!("writer {w} INCR: {}", String::from_utf8_lossy(&r)));
    }
    shared.incrs.lock()[w].push((sent, acked));
    // One typed change per step, the kinds in turn.
    let kind = (i % 4) as usize;
    let n = shared.typed.lock()[w][kind].len() as u64;
    let change = typed_change(w, kind, n);
    let args: Vec<&str> = change.iter().map(String::as_str).collect();
    let sent = Instant::now();
    let r = c.cmd(&args).await;
    let acked = r.starts_with(b":") || (kind == 3 && r.starts_with(b"$"));
    if !acked {
        shared.error(format!("writer {w} {}: {}", change[0], show(&r)));
    } else if strict {
        // Every earlier change was acknowledged (a strict test allows no errors), so the reply
        // is the count after this one (SADD answers 1: every member is new).
        let count = shared.typed.lock()[w][kind].iter().filter(|(_, ok)| *ok).count() + 1;
        let want = match kind {
            2 => ":1\r\n".to_string(),
            3 => format!("${}\r\n{count}\r\n", count.to_string().len()),
            _ => format!(":{count}\r\n"),
        };
        if r != want.as_bytes() {
            shared.error(format!(
                "{} answered {}, the model says {}",
                change.join(" "),
                show(&r),
                want.trim_end()
            ));
        }
    }
    shared.typed.lock()[w][kind].push((sent, acked));
    shared.ops.fetch_add(3, Ordering::Relaxed);
    if let (true, Some(key)) = (strict, check)
        && let Some(want) = shared.state(&key)
    {
        let got = c.cmd(&["GET", &key]).await;
        let want_bytes = want.as_deref().map_or_else(|| b"$-1\r\n".to_vec(), super::bulk);
        if got != want_bytes {
            shared.error(format!("GET {key} read {}, the last acknowledged write left {want:?}", show(&got)));
        }
        shared.ops.fetch_add(1, Ordering::Relaxed);
    }
}

fn show(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).trim_end().to_string()
}
