//! Pool, pipelining and timeout logic against in-test fake servers (pure client logic: the
//! real router is exercised by tests/).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};
use shoal_wire::fast;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};

use crate::resp::{self, Value};
use crate::{Client, Config, Endpoint, Error, Protocol};

/// A fake RESP server's connection: answers PING, ECHO x, SLOW (after 1200 ms), HANG (never
/// answers, keeps reading) and CLOSE (closes the connection); counts the requests it has read in `seen`.
async fn fake_resp<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, seen: Arc<AtomicUsize>) {
    let mut buf = BytesMut::new();
    loop {
        while let Ok(Some(v)) = resp::decode(&mut buf, 1 << 20) {
            seen.fetch_add(1, Ordering::SeqCst);
            let Value::Array(args) = v else { return };
            let name = args[0].as_bytes().unwrap().to_vec();
            let out: Vec<u8> = match &name[..] {
                b"PING" => b"+PONG\r\n".to_vec(),
                b"ECHO" => {
                    let a = args[1].as_bytes().unwrap();
                    [format!("${}\r\n", a.len()).as_bytes(), a, b"\r\n"].concat()
                }
                b"HANG" => continue,
                b"SLOW" => {
                    tokio::time::sleep(Duration::from_millis(1200)).await;
                    b"+SLOW\r\n".to_vec()
                }
                b"CLOSE" => return,
                _ => b"-ERR unknown command\r\n".to_vec(),
            };
            if s.write_all(&out).await.is_err() {
                return;
            }
        }
        match s.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

async fn tcp_server(seen: Arc<AtomicUsize>) -> Endpoint {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(fake_resp(s, seen.clone()));
        }
    });
    Endpoint::Tcp(addr.to_string())
}

fn config(endpoint: Endpoint, protocol: Protocol) -> Config {
    Config::new(endpoint, protocol)
        .timeout(Duration::from_secs(2))
        .backoff(Duration::from_millis(10), Duration::from_millis(50))
}

#[tokio::test]
async fn concurrent_requests_on_one_connection_get_their_own_replies() {
    let seen = Arc::new(AtomicUsize::new(0));
    let client = Client::connect(config(tcp_server(seen.clone()).await, Protocol::Resp)).await.unwrap();
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let c = client.clone();
            tokio::spawn(async move { (i, c.cmd(&["ECHO", &format!("v{i}")]).await.unwrap()) })
        })
        .collect();
    for t in tasks {
        let (i, v) = t.await.unwrap();
        assert_eq!(v.as_bytes(), Some(format!("v{i}").as_bytes()));
    }
    assert_eq!(seen.load(Ordering::SeqCst), 200);
    // A top-level error reply is a typed server error with Redis's text.
    match client.cmd(&["NOPE"]).await {
        Err(Error::Server(e)) => assert_eq!(e, "ERR unknown command"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_request_without_an_answer_times_out_and_the_connection_stays_usable() {
    let seen = Arc::new(AtomicUsize::new(0));
    let ep = tcp_server(seen.clone()).await;
    let client = Client::connect(config(ep.clone(), Protocol::Resp).timeout(Duration::from_millis(200)))
        .await
        .unwrap();
    let start = Instant::now();
    assert!(matches!(client.cmd(&["HANG"]).await, Err(Error::Timeout)));
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(190) && took < Duration::from_secs(2), "{took:?}");
    assert_eq!(client.live_connections(), 1, "a timeout does not tear the connection down");
    // A late reply still lines up the stream: the timed-out SLOW's answer is consumed by its
    // (abandoned) waiter, and the ECHO after it gets its own answer, not SLOW's.
    // (A fresh client: the fake never answers HANG, and RESP's replies come in order.) SLOW
    // answers 200 ms after its 1 s deadline, so ECHO, queued behind it, has 800 ms to spare even
    // on a loaded machine.
    let client =
        Client::connect(config(ep, Protocol::Resp).timeout(Duration::from_millis(1000))).await.unwrap();
    assert!(matches!(client.cmd(&["SLOW"]).await, Err(Error::Timeout)));
    let v = client.cmd(&["ECHO", "mine"]).await.unwrap();
    assert_eq!(v.as_bytes(), Some(&b"mine"[..]));
    assert_eq!(client.live_connections(), 1);
}

#[tokio::test]
async fn in_flight_requests_fail_closed_and_new_ones_wait_for_the_reconnect() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fake.sock");
    let seen = Arc::new(AtomicUsize::new(0));
    let serve = |path: std::path::PathBuf, seen: Arc<AtomicUsize>| {
        let l = UnixListener::bind(&path).unwrap();
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                tokio::spawn(fake_resp(s, seen.clone()));
            }
        })
    };
    let server = serve(path.clone(), seen.clone());
    let client = Client::connect(config(Endpoint::Unix(path.clone()), Protocol::Resp)).await.unwrap();
    client.ping().await.unwrap();

    // A request in flight when the server closes fails at once with Closed, not a timeout.
    let hung = tokio::spawn({
        let c = client.clone();
        async move { c.cmd(&["HANG"]).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let start = Instant::now();
    // The server goes away entirely (listener and socket file), then comes back later.
    server.abort();
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(client.cmd(&["CLOSE"]).await, Err(Error::Closed)));
    assert!(matches!(hung.await.unwrap(), Err(Error::Closed)));
    assert!(start.elapsed() < Duration::from_secs(1));

    // While it is down a request waits (bounded by its timeout) and succeeds once it is back.
    let waiting = tokio::spawn({
        let c = client.clone();
        async move { c.ping().await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(client.live_connections(), 0);
    let _server = serve(path.clone(), seen.clone());
    waiting.await.unwrap().expect("the waiting request is served after the reconnect");
    assert_eq!(client.live_connections(), 1);

    // With the server down longer than the timeout, a request fails with Timeout, in time.
    let quick = Client::lazy(
        config(Endpoint::Unix(dir.path().join("none.sock")), Protocol::Resp)
            .timeout(Duration::from_millis(150)),
    );
    let start = Instant::now();
    assert!(matches!(quick.ping().await, Err(Error::Timeout)));
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn in_flight_bound_holds_callers_back() {
    let seen = Arc::new(AtomicUsize::new(0));
    let ep = tcp_server(seen.clone()).await;
    let client =
        Client::connect(config(ep, Protocol::Resp).max_in_flight(3).timeout(Duration::from_millis(300)))
            .await
            .unwrap();
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let c = client.clone();
            tokio::spawn(async move { c.cmd(&["HANG"]).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(seen.load(Ordering::SeqCst), 3, "only max_in_flight requests reach the server");
    for t in tasks {
        assert!(matches!(t.await.unwrap(), Err(Error::Timeout)));
    }
}

#[tokio::test]
async fn requests_that_timed_out_keep_their_slots_until_answered() {
    // A server that never answers: a timed-out request stays registered (its answer may yet
    // come) and keeps its slot, so only max_in_flight of them ever reach it and the later ones
    // time out waiting for a slot: the registrations stay bounded.
    let seen = Arc::new(AtomicUsize::new(0));
    let ep = tcp_server(seen.clone()).await;
    let client =
        Client::connect(config(ep, Protocol::Resp).max_in_flight(2).timeout(Duration::from_millis(100)))
            .await
            .unwrap();
    for _ in 0..5 {
        assert!(matches!(client.cmd(&["HANG"]).await, Err(Error::Timeout)));
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(seen.load(Ordering::SeqCst), 2, "only max_in_flight requests reach the server");
}

#[tokio::test]
async fn the_least_loaded_connection_is_picked() {
    let seen = Arc::new(AtomicUsize::new(0));
    let ep = tcp_server(seen.clone()).await;
    let client = Client::connect(config(ep, Protocol::Resp).connections(2).max_in_flight(1)).await.unwrap();
    // One connection is busy with a request that never ends; every later request still finds
    // the idle one (with round-robin alone, every other one would wait and time out).
    let _busy = tokio::spawn({
        let c = client.clone();
        async move { c.cmd(&["HANG"]).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    for i in 0..10 {
        let v = client.cmd(&["ECHO", &i.to_string()]).await.unwrap();
        assert_eq!(v.as_bytes(), Some(i.to_string().as_bytes()));
    }
}

/// A fake fast-path server: checks the preamble and HELLO (password "pw"), then answers
/// requests in reverse order of arrival, in batches of `batch`: GET k → Value k, anything
/// else → Err.
async fn fake_fast<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, batch: usize) {
    let mut buf = BytesMut::new();
    while buf.len() < fast::PREAMBLE_LEN {
        if s.read_buf(&mut buf).await.unwrap() == 0 {
            return;
        }
    }
    fast::Preamble::decode(&mut buf).unwrap().unwrap();
    s.write_all(&fast::Preamble { version: fast::VERSION }.encode()).await.unwrap();
    let limits = fast::Limits { authenticated: true, max_bulk: 1 << 20, max_items: 100 };
    let mut held = Vec::new();
    let mut authed = false;
    loop {
        while let Some(req) = fast::decode_request(&mut buf, &limits).unwrap() {
            let reply = |status, body: &[u8]| {
                let mut out = BytesMut::new();
                let h = fast::ReplyHeader { status, id: req.id, body_len: body.len() as u32, int: 0 };
                out.put_slice(&h.encode());
                out.put_slice(body);
                out
            };
            if !authed {
                assert_eq!(req.op, Ok(fast::Op::Hello));
                if &req.value[..] != b"pw" {
                    let out = reply(fast::Status::Err, b"WRONGPASS invalid username-password pair");
                    s.write_all(&out).await.unwrap();
                    return;
                }
                authed = true;
                s.write_all(&reply(fast::Status::Ok, b"")).await.unwrap();
                continue;
            }
            held.push(match req.op {
                Ok(fast::Op::Get) => reply(fast::Status::Value, &req.key),
                _ => reply(fast::Status::Err, b"ERR unsupported by the fake"),
            });
            if held.len() == batch {
                let out: Vec<u8> = held.drain(..).rev().flat_map(|b| b.to_vec()).collect();
                s.write_all(&out).await.unwrap();
            }
        }
        match s.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

#[tokio::test]
async fn fast_path_replies_out_of_order_reach_their_callers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fast.sock");
    let l = UnixListener::bind(&path).unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(fake_fast(s, 4));
        }
    });
    let ep = Endpoint::Unix(path);
    let bad = Client::connect(config(ep.clone(), Protocol::Fast).auth(None, Some("nope".into()))).await;
    assert!(matches!(&bad, Err(Error::Server(e)) if e.starts_with("WRONGPASS")), "{bad:?}");

    let client = Client::connect(config(ep, Protocol::Fast).auth(None, Some("pw".into()))).await.unwrap();
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let c = client.clone();
            tokio::spawn(async move { (i, c.get(format!("key{i}")).await.unwrap()) })
        })
        .collect();
    for t in tasks {
        let (i, v) = t.await.unwrap();
        assert_eq!(v.as_deref(), Some(format!("key{i}").as_bytes()));
    }
    // Server errors keep Redis's text.
    let err = tokio::join!(client.del("a"), client.del("b"), client.del("c"), client.del("d"));
    assert!(matches!(err.0, Err(Error::Server(e)) if e == "ERR unsupported by the fake"));
}

#[tokio::test]
async fn a_router_without_the_fast_path_is_a_clear_error() {
    // A RESP-only server answers the preamble (once a line ends) with an error line; here it
    // answers at once, as a router that rejects a non-RESP first byte would.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        s.write_all(b"-ERR Protocol error: invalid first byte\r\n").await.unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
    });
    let r = Client::connect(config(Endpoint::Tcp(addr.to_string()), Protocol::Fast)).await;
    assert!(matches!(&r, Err(Error::Protocol(e)) if e.contains("does not speak the fast path")), "{r:?}");
}
