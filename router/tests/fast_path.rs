//! The binary fast path (docs/fast-path.md) against a real router and a real embedded cluster,
//! over its Unix socket, with a small client built here on `shoal_wire::fast` (independent of
//! `shoal-client`): the same random operations over RESP and over the fast path give the same
//! answers; a long pipeline is answered once per id; HELLO gates everything as documented;
//! malformed frames close only their own connection; RESP clients share the socket.

mod support;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::BytesMut;
use shoal_router::Router;
use shoal_wire::fast::{self, Op, Preamble, Reply, Status, cmd_flags, set_flags};
use support::Raw;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

const WAIT: Duration = Duration::from_secs(5);

/// A fast-path connection: sends frames, reads replies.
struct Fast {
    s: UnixStream,
    buf: BytesMut,
    next_id: u32,
}

impl Fast {
    /// Connects and exchanges preambles (version 1).
    async fn connect(path: &Path) -> Fast {
        let mut f = Fast::open(path, fast::VERSION).await;
        let theirs = f.preamble().await.expect("the router's preamble");
        assert_eq!(theirs.version, fast::VERSION);
        f
    }

    /// Connects and sends a preamble asking for `version`, reading nothing.
    async fn open(path: &Path, version: u16) -> Fast {
        let mut s = UnixStream::connect(path).await.unwrap();
        s.write_all(&Preamble { version }.encode()).await.unwrap();
        Fast { s, buf: BytesMut::new(), next_id: 1 }
    }

    async fn preamble(&mut self) -> Option<Preamble> {
        loop {
            if self.buf.len() >= fast::PREAMBLE_LEN {
                return Preamble::decode(&mut self.buf).unwrap();
            }
            if !self.fill().await {
                return None;
            }
        }
    }

    /// Reads more; false once the router closed the connection.
    async fn fill(&mut self) -> bool {
        self.buf.reserve(64 * 1024);
        match tokio::time::timeout(WAIT, self.s.read_buf(&mut self.buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => false,
            Ok(Ok(_)) => true,
            Err(_) => panic!("no reply within {WAIT:?}"),
        }
    }

    fn put(&mut self, out: &mut BytesMut, op: Op, flags: u8, key: &[u8], value: &[u8], arg: i64) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        fast::put_request(out, op, flags, id, key, value, arg);
        id
    }

    /// The next reply (`None`: the router closed the connection).
    async fn recv(&mut self) -> Option<Reply> {
        loop {
            if let Some(r) = fast::decode_reply(&mut self.buf, 1 << 30).expect("a well-formed reply") {
                return Some(r);
            }
            if !self.fill().await {
                return None;
            }
        }
    }

    /// One request and its reply (checked to be for it).
    async fn call(&mut self, op: Op, flags: u8, key: &[u8], value: &[u8], arg: i64) -> Reply {
        let mut out = BytesMut::new();
        let id = self.put(&mut out, op, flags, key, value, arg);
        self.s.write_all(&out).await.unwrap();
        let r = self.recv().await.expect("a reply");
        assert_eq!(r.id, id);
        r
    }

    async fn hello(&mut self, user: &str, pass: &str) -> Reply {
        self.call(Op::Hello, 0, user.as_bytes(), pass.as_bytes(), 0).await
    }

    async fn items_call(&mut self, op: Op, flags: u8, items: &[Vec<u8>]) -> Reply {
        let mut region = BytesMut::new();
        fast::put_items(&mut region, items);
        self.call(op, flags, b"", &region, items.len() as i64).await
    }

    /// Everything until the router closes (bounded).
    async fn until_close(&mut self) -> Vec<Reply> {
        let mut got = Vec::new();
        while let Some(r) = self.recv().await {
            got.push(r);
        }
        got
    }
}

fn text(r: &Reply) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

/// Starts a 3-node embedded router with a Unix socket in `dir`.
async fn router(dir: &Path, extra: &[&str]) -> (Router, PathBuf) {
    let path = dir.join("shoal.sock");
    let mut args = vec!["--embedded-nodes", "3", "--unix-socket", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    (support::router(&args).await, path)
}

/// A reply as both protocols can say it, for comparing them.
#[derive(Debug, Clone, PartialEq)]
enum Norm {
    Ok,
    Nil,
    Int(i64),
    Val(Vec<u8>),
    Err(String),
    Arr(Vec<Option<Vec<u8>>>),
    Resp(Vec<u8>),
}

fn from_fast(r: &Reply) -> Norm {
    match r.status {
        Status::Ok => Norm::Ok,
        Status::Nil => Norm::Nil,
        Status::Int => Norm::Int(r.int),
        Status::Value => Norm::Val(r.body.to_vec()),
        Status::Err => Norm::Err(text(r)),
        Status::Array => Norm::Arr(r.items().unwrap().into_iter().map(|i| i.map(|b| b.to_vec())).collect()),
        Status::Resp => Norm::Resp(r.body.to_vec()),
    }
}

/// A RESP reply to a typed command, read as the fast path maps it.
fn from_resp(raw: &[u8]) -> Norm {
    let line_end = raw.windows(2).position(|w| w == b"\r\n").unwrap();
    let line = std::str::from_utf8(&raw[1..line_end]).unwrap();
    match raw[0] {
        b'+' => Norm::Ok,
        b'-' => Norm::Err(line.to_string()),
        b':' => Norm::Int(line.parse().unwrap()),
        b'$' if line == "-1" => Norm::Nil,
        b'$' => Norm::Val(raw[line_end + 2..raw.len() - 2].to_vec()),
        b'*' => {
            let n: usize = line.parse().unwrap();
            let mut at = line_end + 2;
            let mut items = Vec::new();
            for _ in 0..n {
                let len = support::frame_len(&raw[at..]).unwrap();
                items.push(match from_resp(&raw[at..at + len]) {
                    Norm::Nil => None,
                    Norm::Val(v) => Some(v),
                    other => panic!("unexpected MGET item {other:?}"),
                });
                at += len;
            }
            Norm::Arr(items)
        }
        other => panic!("unexpected RESP reply type {}", other as char),
    }
}

/// One random operation: its RESP arguments and its fast-path request, over keys named with
/// `prefix`.
struct Case {
    resp: Vec<Vec<u8>>,
    op: Op,
    flags: u8,
    key: Vec<u8>,
    value: Vec<u8>,
    arg: i64,
    /// CMD items (the value region is built from them).
    items: Option<Vec<Vec<u8>>>,
    /// A CMD in RESP3: compared with a RESP3 connection's bytes.
    resp3: bool,
}

fn random_case(rng: &mut fastrand::Rng, prefix: &str) -> Case {
    let key = |rng: &mut fastrand::Rng| format!("{prefix}{{t}}k{}", rng.usize(..50)).into_bytes();
    let value = |rng: &mut fastrand::Rng| match rng.u8(..4) {
        0 => rng.i64(-100..100).to_string().into_bytes(),
        1 => Vec::new(),
        2 => vec![b'v'; rng.usize(1..300)],
        _ => format!("val{}", rng.u32(..1000)).into_bytes(),
    };
    let b = |s: &str| s.as_bytes().to_vec();
    let typed = |resp: Vec<Vec<u8>>, op, flags, key: Vec<u8>, value: Vec<u8>, arg| Case {
        resp,
        op,
        flags,
        key,
        value,
        arg,
        items: None,
        resp3: false,
    };
    let cmd = |items: Vec<Vec<u8>>, resp3: bool| Case {
        resp: items.clone(),
        op: Op::Cmd,
        flags: if resp3 { cmd_flags::RESP3 } else { 0 },
        key: Vec::new(),
        value: Vec::new(),
        arg: 0,
        items: Some(items),
        resp3,
    };
    match rng.u8(..14) {
        0 | 1 => {
            let k = key(rng);
            typed(vec![b("GET"), k.clone()], Op::Get, 0, k, Vec::new(), 0)
        }
        2..=4 => {
            let (k, v) = (key(rng), value(rng));
            let mut resp = vec![b("SET"), k.clone(), v.clone()];
            let ttl = match rng.u8(..6) {
                0 => 100_000,
                1 => -5,
                _ => 0,
            };
            if ttl != 0 {
                resp.extend([b("PX"), ttl.to_string().into_bytes()]);
            }
            let mut flags = 0;
            for (bit, word, chance) in [
                (set_flags::NX, "NX", 6),
                (set_flags::XX, "XX", 6),
                (set_flags::KEEPTTL, "KEEPTTL", 8),
                (set_flags::GET, "GET", 4),
            ] {
                if rng.u8(..chance) == 0 {
                    flags |= bit;
                    resp.push(b(word));
                }
            }
            typed(resp, Op::Set, flags, k, v, ttl)
        }
        5 => {
            let k = key(rng);
            typed(vec![b("DEL"), k.clone()], Op::Del, 0, k, Vec::new(), 0)
        }
        6 | 7 => {
            let (k, by) = (key(rng), rng.i64(-10..10));
            typed(vec![b("INCRBY"), k.clone(), by.to_string().into_bytes()], Op::IncrBy, 0, k, Vec::new(), by)
        }
        8 => {
            let k = key(rng);
            let ms = [-1, 0, 100_000][rng.usize(..3)];
            typed(
                vec![b("PEXPIRE"), k.clone(), ms.to_string().into_bytes()],
                Op::Expire,
                0,
                k,
                Vec::new(),
                ms,
            )
        }
        9 => {
            let keys: Vec<Vec<u8>> = (0..rng.usize(1..5)).map(|_| key(rng)).collect();
            let mut c = cmd(keys.clone(), false);
            c.op = Op::MGet;
            c.resp = [vec![b("MGET")], keys].concat();
            c
        }
        10 => {
            let pairs: Vec<Vec<u8>> = (0..rng.usize(1..4)).flat_map(|_| [key(rng), value(rng)]).collect();
            let mut c = cmd(pairs.clone(), false);
            c.op = Op::MSet;
            c.resp = [vec![b("MSET")], pairs].concat();
            c
        }
        _ => {
            let k = key(rng);
            let items = match rng.u8(..8) {
                0 => vec![b("HSET"), k, b("f"), value(rng)],
                1 => vec![b("LPUSH"), k, value(rng)],
                2 => vec![b("LRANGE"), k, b("0"), b("-1")],
                3 => vec![b("TYPE"), k],
                4 => vec![b("APPEND"), k, value(rng)],
                5 => vec![b("HGETALL"), k],
                6 => vec![b("INCR"), k],
                // (No key: the error text quotes the arguments, and the namespaces differ.)
                _ => vec![b("NOSUCHCOMMAND"), b("x")],
            };
            cmd(items, rng.bool())
        }
    }
}

/// Sends a case over the fast path; its reply, normalized.
async fn run_fast(f: &mut Fast, c: &Case) -> Norm {
    let r = match (&c.items, c.op) {
        (Some(items), _) => f.items_call(c.op, c.flags, items).await,
        (None, op) => f.call(op, c.flags, &c.key, &c.value, c.arg).await,
    };
    from_fast(&r)
}

async fn run_resp<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    raw: &mut Raw<S>,
    c: &Case,
) -> Vec<u8> {
    let args: Vec<&[u8]> = c.resp.iter().map(|a| a.as_slice()).collect();
    raw.send(&support::encode(&args)).await;
    raw.reply().await.expect("a RESP reply")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_operations_answer_the_same_over_resp_and_the_fast_path() {
    let dir = tempfile::tempdir().unwrap();
    let (router, path) = router(dir.path(), &[]).await;
    let mut resp2 = Raw::from_stream(UnixStream::connect(&path).await.unwrap());
    let mut resp3 = Raw::from_stream(UnixStream::connect(&path).await.unwrap());
    assert!(resp3.cmd(&["HELLO", "3"]).await.starts_with(b"%"));
    let mut f = Fast::connect(&path).await;
    assert_eq!(f.hello("", "").await.status, Status::Ok, "no password: HELLO as default succeeds");
    let seed = fastrand::u64(..);
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut kinds = HashSet::new();
    for i in 0..2000 {
        // The same operation on two namespaces: `r:` over RESP, `f:` over the fast path.
        let state = rng.get_seed();
        let on_resp = random_case(&mut rng, "r:");
        rng.seed(state);
        let on_fast = random_case(&mut rng, "f:");
        let fast_reply = run_fast(&mut f, &on_fast).await;
        let resp_reply = if on_resp.resp3 {
            Norm::Resp(run_resp(&mut resp3, &on_resp).await)
        } else if on_resp.items.is_some() && on_resp.op == Op::Cmd {
            Norm::Resp(run_resp(&mut resp2, &on_resp).await)
        } else {
            from_resp(&run_resp(&mut resp2, &on_resp).await)
        };
        assert_eq!(
            fast_reply,
            resp_reply,
            "op {i} (seed {seed}): {:?}",
            on_fast.resp.iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect::<Vec<_>>()
        );
        kinds.insert(std::mem::discriminant(&fast_reply));
    }
    assert!(kinds.len() >= 6, "the run covered most reply kinds ({} of 7)", kinds.len());
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_of_1000_is_answered_once_per_id() {
    let dir = tempfile::tempdir().unwrap();
    let (router, path) = router(dir.path(), &[]).await;
    let mut f = Fast::connect(&path).await;
    // HELLO and everything after it in one write: requests after a HELLO are judged after it.
    let mut out = BytesMut::new();
    let hello = f.put(&mut out, Op::Hello, 0, b"", b"", 0);
    let mut expect = std::collections::HashMap::new();
    for i in 0..1000u32 {
        let key = format!("p{}", i / 2);
        let id = match i % 4 {
            0 | 2 => f.put(&mut out, Op::Set, 0, key.as_bytes(), key.as_bytes(), 0),
            1 => f.put(&mut out, Op::Get, 0, key.as_bytes(), b"", 0),
            _ => f.put(&mut out, Op::IncrBy, 0, b"counter", b"", 1),
        };
        expect.insert(id, i % 4);
    }
    f.s.write_all(&out).await.unwrap();
    let mut seen = HashSet::new();
    let mut counters = Vec::new();
    for _ in 0..1001 {
        let r = f.recv().await.expect("every reply");
        assert!(seen.insert(r.id), "id {} answered twice", r.id);
        if r.id == hello {
            assert_eq!(r.status, Status::Ok);
            continue;
        }
        match expect[&r.id] {
            0 | 2 => assert_eq!(r.status, Status::Ok),
            // A GET pipelined after its key's SET reads it: ops on one key keep their order.
            1 => assert_eq!((r.status, r.body.len() > 1), (Status::Value, true), "{r:?}"),
            _ => counters.push(r.int),
        }
    }
    counters.sort();
    assert_eq!(counters, (1..=250).collect::<Vec<i64>>());
    assert_eq!(seen.len(), 1001);
    let page = support::http_get(router.http_addr(), "/metrics").await;
    assert!(support::metric_sum(&page, "shoal_router_fast_requests_total") >= 1001.0);
    assert!(support::metric_sum(&page, "shoal_router_fast_connections_total") >= 1.0);
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_gates_the_connection_like_auth() {
    let dir = tempfile::tempdir().unwrap();
    let (router, path) = router(dir.path(), &["--requirepass", "s3cret"]).await;
    // Anything before HELLO: NOAUTH, and the connection closes.
    let mut f = Fast::connect(&path).await;
    let r = f.call(Op::Get, 0, b"k", b"", 0).await;
    assert_eq!((r.status, text(&r).starts_with("NOAUTH")), (Status::Err, true), "{r:?}");
    assert!(f.until_close().await.is_empty());
    // A wrong password: Redis's WRONGPASS; the client may try again.
    let mut f = Fast::connect(&path).await;
    let r = f.hello("", "nope").await;
    assert_eq!(
        (r.status, text(&r)),
        (Status::Err, "WRONGPASS invalid username-password pair or user is disabled.".into())
    );
    assert_eq!(f.hello("default", "s3cret").await.status, Status::Ok);
    assert_eq!(f.call(Op::Set, 0, b"a:1", b"x", 0).await.status, Status::Ok);
    // An ACL user: its rules apply with RESP's texts.
    let r = f
        .items_call(
            Op::Cmd,
            0,
            &[
                b"ACL".to_vec(),
                b"SETUSER".to_vec(),
                b"alice".to_vec(),
                b"on".to_vec(),
                b">pw".to_vec(),
                b"~a:*".to_vec(),
                b"+@all".to_vec(),
            ],
        )
        .await;
    assert_eq!((r.status, &r.body[..]), (Status::Resp, &b"+OK\r\n"[..]));
    let mut alice = Fast::connect(&path).await;
    assert_eq!(alice.hello("alice", "pw").await.status, Status::Ok);
    assert_eq!(&alice.call(Op::Get, 0, b"a:1", b"", 0).await.body[..], b"x");
    let denied = alice.call(Op::Get, 0, b"b:1", b"", 0).await;
    let mut resp = Raw::from_stream(UnixStream::connect(&path).await.unwrap());
    assert_eq!(resp.cmd(&["AUTH", "alice", "pw"]).await, b"+OK\r\n");
    let on_resp = resp.cmd(&["GET", "b:1"]).await;
    assert_eq!(from_fast(&denied), from_resp(&on_resp), "the same NOPERM text");
    // Before HELLO a frame over the pre-auth limit closes the connection.
    let mut f = Fast::connect(&path).await;
    let big = vec![b'p'; fast::UNAUTH_MAX_BODY + 1];
    let mut out = BytesMut::new();
    f.put(&mut out, Op::Hello, 0, b"default", &big, 0);
    f.s.write_all(&out).await.unwrap();
    let got = f.until_close().await;
    assert_eq!(got.len(), 1, "one error reply, then closed");
    assert!(text(&got[0]).contains("unauthenticated"), "{got:?}");
    let page = support::http_raw(
        router.http_addr(),
        b"GET /metrics HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer s3cret\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(support::metric_sum(&page, "shoal_router_auth_failures_total") >= 1.0, "{page}");
    assert!(support::metric_sum(&page, "shoal_router_fast_errors_total") >= 3.0);
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let (router, path) = router(dir.path(), &[]).await;
    let mut good = Fast::connect(&path).await;
    assert_eq!(good.hello("", "").await.status, Status::Ok);

    // Garbage after the magic byte: closed without a reply.
    let mut s = UnixStream::connect(&path).await.unwrap();
    s.write_all(&[0xF5, b'X', b'Y', b'Z', 1, 0, 0, 0]).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut got)).await.unwrap().unwrap();
    assert!(got.is_empty());

    // Another version: the router's preamble, then closed.
    let mut v2 = Fast::open(&path, 2).await;
    assert_eq!(v2.preamble().await, Some(Preamble { version: fast::VERSION }));
    assert!(v2.until_close().await.is_empty());

    // An unknown op: an error for its id, and the connection carries on.
    let mut f = Fast::connect(&path).await;
    assert_eq!(f.hello("", "").await.status, Status::Ok);
    let h = fast::RequestHeader { op: 0x7f, flags: 0, id: 77, key_len: 1, val_len: 0, arg: 0 };
    let mut out = BytesMut::from(&h.encode()[..]);
    out.extend_from_slice(b"k");
    f.s.write_all(&out).await.unwrap();
    let r = f.recv().await.unwrap();
    assert_eq!((r.id, r.status, text(&r)), (77, Status::Err, "ERR Protocol error: unknown op 0x7f".into()));
    assert_eq!(f.call(Op::Ping, 0, b"", b"", 0).await.status, Status::Ok);
    // Refused through CMD: connection-state and blocking commands.
    for c in [&["MULTI"][..], &["BLPOP", "l", "0"], &["SUBSCRIBE", "c"]] {
        let items: Vec<Vec<u8>> = c.iter().map(|a| a.as_bytes().to_vec()).collect();
        let r = f.items_call(Op::Cmd, 0, &items).await;
        assert_eq!(r.status, Status::Err);
        assert!(text(&r).contains("not available over the fast path"), "{}", text(&r));
    }
    // Reserved header bytes set: the error for its id, then closed.
    let mut bad =
        fast::RequestHeader { op: Op::Ping as u8, flags: 0, id: 78, key_len: 0, val_len: 0, arg: 0 }.encode();
    bad[2] = 1;
    f.s.write_all(&bad).await.unwrap();
    let got = f.until_close().await;
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].id, got[0].status), (78, Status::Err));

    // The others are unaffected: the fast client and RESP clients on the same socket.
    assert_eq!(good.call(Op::Set, 0, b"k", b"v", 0).await.status, Status::Ok);
    assert_eq!(&good.call(Op::Get, 0, b"k", b"", 0).await.body[..], b"v");
    let mut resp = Raw::from_stream(UnixStream::connect(&path).await.unwrap());
    assert_eq!(resp.cmd(&["GET", "k"]).await, support::bulk("v"));
    let cli =
        std::process::Command::new("redis-cli").args(["-s", path.to_str().unwrap(), "GET", "k"]).output();
    if let Ok(out) = cli {
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "v");
    }
    // The fast client is a client like any other: listed, and CLIENT KILL closes it.
    let id = good.items_call(Op::Cmd, 0, &[b"CLIENT".to_vec(), b"ID".to_vec()]).await;
    let id = std::str::from_utf8(&id.body[1..id.body.len() - 2]).unwrap().to_string();
    let list = String::from_utf8(resp.cmd(&["CLIENT", "LIST"]).await).unwrap();
    assert!(list.contains(&format!("id={id} ")), "{list}");
    assert_eq!(resp.cmd(&["CLIENT", "KILL", "ID", &id]).await, b":1\r\n");
    assert!(good.until_close().await.is_empty());
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_speaks_it_too_and_the_auth_timeout_applies() {
    let dir = tempfile::tempdir().unwrap();
    let (router, path) = router(dir.path(), &["--requirepass", "pw", "--auth-timeout-ms", "300"]).await;
    // Over TCP: the same negotiation (a loopback client, so protected mode does not apply).
    let mut tcp = tokio::net::TcpStream::connect(router.resp_addr()).await.unwrap();
    let mut out = BytesMut::from(&Preamble { version: fast::VERSION }.encode()[..]);
    fast::put_request(&mut out, Op::Hello, 0, 1, b"", b"pw", 0);
    fast::put_request(&mut out, Op::Ping, 0, 2, b"", b"", 0);
    tcp.write_all(&out).await.unwrap();
    let mut got = vec![0u8; fast::PREAMBLE_LEN + 2 * fast::HEADER_LEN];
    tokio::time::timeout(WAIT, tcp.read_exact(&mut got)).await.unwrap().unwrap();
    let mut buf = BytesMut::from(&got[fast::PREAMBLE_LEN..]);
    for id in [1, 2] {
        let r = fast::decode_reply(&mut buf, 1024).unwrap().unwrap();
        assert_eq!((r.id, r.status), (id, Status::Ok));
    }
    // No HELLO within --auth-timeout-ms: an Err with id 0, then closed.
    let mut idle = Fast::connect(&path).await;
    let got = idle.until_close().await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, 0);
    assert!(text(&got[0]).contains("authentication timeout"), "{got:?}");
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_values_and_client_pause_behave_as_on_resp() {
    let dir = tempfile::tempdir().unwrap();
    let (router, path) = router(dir.path(), &[]).await;
    let mut f = Fast::connect(&path).await;
    assert_eq!(f.hello("", "").await.status, Status::Ok);
    // A value over the node link's piece size (it travels in pieces: a barrier), pipelined
    // between small requests on the same key: each reads what the one before it wrote.
    let big: Vec<u8> = (0..3 << 20).map(|i| (i % 251) as u8).collect();
    let mut out = BytesMut::new();
    let set_small = f.put(&mut out, Op::Set, 0, b"big", b"small", 0);
    let set_big = f.put(&mut out, Op::Set, set_flags::GET, b"big", &big, 0);
    let get_big = f.put(&mut out, Op::Get, 0, b"big", b"", 0);
    let mut keys = BytesMut::new();
    fast::put_items(&mut keys, &[&b"big"[..], b"none"]);
    let mget = f.put(&mut out, Op::MGet, 0, b"", &keys, 2);
    f.s.write_all(&out).await.unwrap();
    let mut replies = std::collections::HashMap::new();
    for _ in 0..4 {
        let r = f.recv().await.unwrap();
        replies.insert(r.id, r);
    }
    assert_eq!(replies[&set_small].status, Status::Ok);
    assert_eq!((replies[&set_big].status, &replies[&set_big].body[..]), (Status::Value, &b"small"[..]));
    assert_eq!((replies[&get_big].status, replies[&get_big].body == big), (Status::Value, true));
    let items = replies[&mget].items().unwrap();
    assert_eq!((items[0].as_deref() == Some(&big[..]), items[1].is_none()), (true, true));

    // CLIENT PAUSE WRITE holds a fast-path SET until it ends; reads still run.
    let mut resp = Raw::from_stream(UnixStream::connect(&path).await.unwrap());
    assert_eq!(resp.cmd(&["CLIENT", "PAUSE", "400", "WRITE"]).await, b"+OK\r\n");
    let started = std::time::Instant::now();
    assert_eq!(f.call(Op::Get, 0, b"big", b"", 0).await.status, Status::Value);
    assert!(started.elapsed() < Duration::from_millis(300), "a read is not held");
    assert_eq!(f.call(Op::Set, 0, b"p", b"1", 0).await.status, Status::Ok);
    assert!(started.elapsed() >= Duration::from_millis(300), "the write waited for the pause");
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maxclients_counts_fast_clients_and_a_small_in_flight_bound_still_answers_all() {
    let dir = tempfile::tempdir().unwrap();
    let (router, path) = router(dir.path(), &["--maxclients", "1", "--fast-max-in-flight", "2"]).await;
    let mut f = Fast::connect(&path).await;
    assert_eq!(f.hello("", "").await.status, Status::Ok);
    // The one slot is the fast client's: a RESP client is refused as on any listener.
    let mut resp = Raw::from_stream(UnixStream::connect(&path).await.unwrap());
    assert_eq!(resp.until_close().await, b"-ERR max number of clients reached\r\n");
    // Two at a time, 300 pipelined: the router stops reading while two run, and answers all.
    let mut out = BytesMut::new();
    let ids: HashSet<u32> =
        (0..300).map(|i| f.put(&mut out, Op::IncrBy, 0, format!("c{}", i % 7).as_bytes(), b"", 1)).collect();
    f.s.write_all(&out).await.unwrap();
    let mut seen = HashSet::new();
    for _ in 0..300 {
        let r = f.recv().await.unwrap();
        assert_eq!(r.status, Status::Int);
        assert!(ids.contains(&r.id) && seen.insert(r.id));
    }
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_path_requests_feed_the_hot_keys() {
    let dir = tempfile::tempdir().unwrap();
    let (router, path) = router(dir.path(), &["--hotkeys-capacity", "256"]).await;
    let mut f = Fast::connect(&path).await;
    assert_eq!(f.hello("", "").await.status, Status::Ok);
    let big = vec![b'v'; 4096];
    // "hot" is read 60 times, "wide" 10 times with a 4 KiB value, "cold" keys once each.
    assert_eq!(f.call(Op::Set, 0, b"hot", b"1", 0).await.status, Status::Ok);
    assert_eq!(f.call(Op::Set, 0, b"wide", &big, 0).await.status, Status::Ok);
    for i in 0..60 {
        assert_eq!(f.call(Op::Get, 0, b"hot", b"", 0).await.status, Status::Value);
        if i % 6 == 0 {
            assert_eq!(f.call(Op::Get, 0, b"wide", b"", 0).await.body.len(), 4096);
        }
    }
    for i in 0..20 {
        f.items_call(Op::MGet, 0, &[format!("cold{i}").into_bytes()]).await;
    }
    let by_ops = hot_keys(&path, &["COUNT", "2"]).await;
    assert_eq!(by_ops[0].0, b"hot", "{by_ops:?}");
    assert!((61 - by_ops[0].2..=61).contains(&by_ops[0].1), "count within the error bound: {by_ops:?}");
    let by_bytes = hot_keys(&path, &["COUNT", "1", "BY", "BYTES"]).await;
    // The reply's value bytes count: 11 reads of 4 KiB outweigh 61 of one byte.
    assert_eq!(by_bytes[0].0, b"wide", "{by_bytes:?}");
    assert!(by_bytes[0].1 >= 11 * 4096, "{by_bytes:?}");
    router.shutdown().await;
}

/// Every fast-path request is counted in INFO commandstats and in the latency histogram, near
/// cache hits too (those of a read buffer are timed together, by one clock read before the
/// replies are written).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_path_requests_and_near_cache_hits_count_in_the_command_stats() {
    let dir = tempfile::tempdir().unwrap();
    let (router, path) = router(dir.path(), &["--near-cache", "64mb"]).await;
    let near = router.state.near.clone().expect("--near-cache is on");
    let mut f = Fast::connect(&path).await;
    assert_eq!(f.hello("", "").await.status, Status::Ok);
    assert_eq!(f.call(Op::Set, 0, b"k", b"v", 0).await.status, Status::Ok);
    // Pipelines of 100 GETs until 100 were hits (a fill waits for the node's lease).
    let mut gets = 0u64;
    let started = std::time::Instant::now();
    while near.metrics.hits.get() < 100 {
        assert!(started.elapsed() < WAIT * 2, "no near-cache hits");
        let mut out = BytesMut::new();
        for _ in 0..100 {
            f.put(&mut out, Op::Get, 0, b"k", b"", 0);
        }
        f.s.write_all(&out).await.unwrap();
        for _ in 0..100 {
            assert_eq!(&f.recv().await.expect("a reply").body[..], b"v");
        }
        gets += 100;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut resp = Raw::from_stream(UnixStream::connect(&path).await.unwrap());
    let info = String::from_utf8(resp.cmd(&["INFO", "commandstats"]).await).unwrap();
    let get = info.lines().find(|l| l.starts_with("cmdstat_get:")).unwrap_or_else(|| panic!("{info}"));
    assert!(get.starts_with(&format!("cmdstat_get:calls={gets},")), "{gets} GETs: {get}");
    assert!(get.contains("failed_calls=0"), "{get}");
    let page = support::http_get(router.http_addr(), "/metrics").await;
    // GETs, the SET, and this INFO (HELLO is AUTH's, counted too).
    let timed = support::metric_sum(&page, "shoal_router_command_duration_seconds_count");
    assert!(timed >= (gets + 2) as f64, "{timed} timed of {gets} GETs");
    router.shutdown().await;
}

/// SHOAL HOTKEYS with `args`, through the redis crate: (key, count, error) by rank.
async fn hot_keys(path: &Path, args: &[&str]) -> Vec<(Vec<u8>, i64, i64)> {
    let mut resp = redis::Client::open(format!("redis+unix://{}", path.display()))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("SHOAL").arg("HOTKEYS").arg(args).query_async(&mut resp).await.unwrap()
}

/// GETs of `key` on `f` until the router's near cache has answered `hits` more of them (a fill
/// waits for the node's lease); returns how many were sent.
async fn until_near_hits(
    f: &mut Fast,
    near: &shoal_router::nearcache::NearCache,
    key: &[u8],
    hits: u64,
) -> u64 {
    let (target, started) = (near.metrics.hits.get() + hits, std::time::Instant::now());
    let mut gets = 0;
    while near.metrics.hits.get() < target {
        assert!(started.elapsed() < WAIT * 2, "no near-cache hits");
        let mut out = BytesMut::new();
        for _ in 0..20 {
            f.put(&mut out, Op::Get, 0, key, b"", 0);
        }
        f.s.write_all(&out).await.unwrap();
        for _ in 0..20 {
            assert_eq!(f.recv().await.expect("a reply").status, Status::Value);
        }
        gets += 20;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    gets
}

/// A GET the near cache could answer is admitted as any GET: ACL rules refuse it, ACL SETUSER
/// and DELUSER apply at the next one, CLIENT PAUSE holds it, hot keys count it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_cache_hits_are_admitted_as_any_get() {
    let dir = tempfile::tempdir().unwrap();
    let acl = dir.path().join("users.acl");
    std::fs::write(&acl, "user default on nopass ~* &* +@all\nuser app on >pw ~app:* +@all\n").unwrap();
    let (guarded, path) =
        router(dir.path(), &["--near-cache", "64mb", "--aclfile", acl.to_str().unwrap()]).await;
    let near = guarded.state.near.clone().expect("--near-cache is on");
    let mut admin = Fast::connect(&path).await;
    assert_eq!(admin.hello("", "").await.status, Status::Ok);
    for key in [&b"secret"[..], &b"app:1"[..]] {
        assert_eq!(admin.call(Op::Set, 0, key, b"v", 0).await.status, Status::Ok);
        until_near_hits(&mut admin, &near, key, 20).await;
    }
    let mut app = Fast::connect(&path).await;
    assert_eq!(app.hello("app", "pw").await.status, Status::Ok);
    let hits = near.metrics.hits.get();
    let r = app.call(Op::Get, 0, b"secret", b"", 0).await;
    assert_eq!(
        (r.status, text(&r).as_str()),
        (Status::Err, "NOPERM this user has no permissions to access one of the keys used as arguments")
    );
    assert_eq!(text(&app.call(Op::Get, 0, b"app:1", b"", 0).await), "v");
    assert_eq!(near.metrics.hits.get(), hits + 1, "the allowed key was a hit");
    let mut resp = Raw::from_stream(UnixStream::connect(&path).await.unwrap());
    assert_eq!(resp.cmd(&["ACL", "SETUSER", "app", "-get"]).await, b"+OK\r\n");
    let r = app.call(Op::Get, 0, b"app:1", b"", 0).await;
    assert_eq!(
        (r.status, text(&r).as_str()),
        (Status::Err, "NOPERM this user has no permissions to run the 'get' command")
    );
    assert_eq!(resp.cmd(&["ACL", "SETUSER", "app", "+get"]).await, b"+OK\r\n");
    assert_eq!(text(&app.call(Op::Get, 0, b"app:1", b"", 0).await), "v");

    // CLIENT PAUSE ALL holds a read the cache holds, until the pause ends.
    assert_eq!(resp.cmd(&["CLIENT", "PAUSE", "300", "ALL"]).await, b"+OK\r\n");
    let started = std::time::Instant::now();
    assert_eq!(text(&admin.call(Op::Get, 0, b"secret", b"", 0).await), "v");
    assert!(started.elapsed() >= Duration::from_millis(250), "the read waited for the pause");

    // A deleted user's connection runs nothing more.
    assert_eq!(resp.cmd(&["ACL", "DELUSER", "app"]).await, b":1\r\n");
    let mut out = BytesMut::new();
    app.put(&mut out, Op::Get, 0, b"app:1", b"", 0);
    let _ = app.s.write_all(&out).await;
    let after = app.until_close().await;
    assert!(after.iter().all(|r| r.status == Status::Err), "{after:?}");
    guarded.shutdown().await;

    // Hot keys count the hits.
    let dir = tempfile::tempdir().unwrap();
    let (counting, path) = router(dir.path(), &["--near-cache", "64mb", "--hotkeys-capacity", "256"]).await;
    let near = counting.state.near.clone().expect("--near-cache is on");
    let mut f = Fast::connect(&path).await;
    assert_eq!(f.hello("", "").await.status, Status::Ok);
    assert_eq!(f.call(Op::Set, 0, b"hot", b"1", 0).await.status, Status::Ok);
    let gets = until_near_hits(&mut f, &near, b"hot", 100).await;
    let by_ops = hot_keys(&path, &["COUNT", "1"]).await;
    let (key, count, error) = (&by_ops[0].0[..], by_ops[0].1, by_ops[0].2);
    let sent = gets as i64 + 1;
    assert!(key == b"hot" && (sent - error..=sent).contains(&count), "{gets} GETs and a SET: {by_ops:?}");
    counting.shutdown().await;
}

/// A pipeline whose near-cache hits make more reply bytes than one write takes: the connection
/// writes what it has and takes the rest of the buffer up after, every request answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_cache_hits_past_a_writes_worth_are_all_answered() {
    let dir = tempfile::tempdir().unwrap();
    let (router, path) = router(dir.path(), &["--near-cache", "64mb"]).await;
    let near = router.state.near.clone().expect("--near-cache is on");
    let mut f = Fast::connect(&path).await;
    assert_eq!(f.hello("", "").await.status, Status::Ok);
    // Short values (copied from the entry) and long ones (shared), 2 KiB and 100 bytes.
    let (long, short) = (vec![b'l'; 2048], vec![b's'; 100]);
    assert_eq!(f.call(Op::Set, 0, b"long", &long, 0).await.status, Status::Ok);
    assert_eq!(f.call(Op::Set, 0, b"short", &short, 0).await.status, Status::Ok);
    until_near_hits(&mut f, &near, b"long", 20).await;
    until_near_hits(&mut f, &near, b"short", 20).await;
    // 600 GETs in one write: over 1 MiB of replies (the router writes at 256 KiB).
    let hits = near.metrics.hits.get();
    let mut out = BytesMut::new();
    let mut expect = std::collections::HashMap::new();
    for i in 0..600 {
        let (key, value) = if i % 3 == 2 { (&b"short"[..], &short) } else { (&b"long"[..], &long) };
        expect.insert(f.put(&mut out, Op::Get, 0, key, b"", 0), value.clone());
    }
    f.s.write_all(&out).await.unwrap();
    for _ in 0..600 {
        let r = f.recv().await.expect("a reply");
        let value =
            expect.remove(&r.id).unwrap_or_else(|| panic!("id {} answered twice or never sent", r.id));
        assert_eq!((r.status, r.body == value), (Status::Value, true));
    }
    assert!(expect.is_empty());
    assert_eq!(near.metrics.hits.get(), hits + 600, "every one a hit");
    router.shutdown().await;
}
