//! `shoal-bench --engine raw`: one task per connection keeps `-P` requests in flight with
//! hand-encoded frames, the way redis-benchmark drives a server. Measuring a server's CPU per
//! request at deep pipelines needs a load generator much cheaper per request than the server;
//! the client library's engine (a task and a reply channel per request) is not.
//!
//! Each round writes `-P` requests in one write and reads until all `-P` replies are in, as
//! redis-benchmark's `-P` does: the server reads whole batches, which is what deep pipelining
//! is for. Latency is taken per read: a request's time is from the write it went out in to the
//! read its reply came in.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::{Buf, BytesMut};
use hdrhistogram::Histogram;
use shoal_client::resp;
use shoal_wire::fast::{self, Op, Preamble, Status};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// What one connection measured.
pub struct Measured {
    pub hist: Histogram<u64>,
    pub errors: u64,
    pub first_error: Option<String>,
}

/// The load one connection sends.
pub struct Load {
    pub fast: bool,
    pub pipeline: usize,
    pub requests: u64,
    pub end: Instant,
    pub keyspace: u64,
    /// Keys in turn (`--sequential`).
    pub sequential: bool,
    pub prefix: Vec<u8>,
    pub value: Vec<u8>,
    /// Share of GETs (1.0: all GETs, 0.0: all SETs).
    pub get_ratio: f64,
    pub seed: u64,
    pub user: Option<String>,
    pub password: Option<String>,
}

/// Opens the protocol (fast-path preamble and HELLO, or RESP AUTH) on `s`.
pub async fn open<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, load: &Load) -> Result<(), String> {
    let mut input = BytesMut::with_capacity(4096);
    let user = load.user.as_deref().unwrap_or("");
    let pass = load.password.as_deref().unwrap_or("");
    if load.fast {
        let mut out = BytesMut::new();
        out.extend_from_slice(&Preamble { version: fast::VERSION }.encode());
        fast::put_request(&mut out, Op::Hello, 0, 0, user.as_bytes(), pass.as_bytes(), 0);
        s.write_all(&out).await.map_err(|e| e.to_string())?;
        loop {
            if input.len() >= fast::PREAMBLE_LEN {
                break;
            }
            read_more(s, &mut input).await?;
        }
        Preamble::decode(&mut input).map_err(|e| e.to_string())?;
        loop {
            if let Some(r) = fast::decode_reply(&mut input, 1 << 20).map_err(|e| e.to_string())? {
                return match r.status {
                    Status::Ok => Ok(()),
                    _ => Err(format!("HELLO refused: {}", String::from_utf8_lossy(&r.body))),
                };
            }
            read_more(s, &mut input).await?;
        }
    }
    if load.password.is_some() {
        let mut out = BytesMut::new();
        let args: Vec<&[u8]> = if user.is_empty() {
            vec![b"AUTH", pass.as_bytes()]
        } else {
            vec![b"AUTH", user.as_bytes(), pass.as_bytes()]
        };
        resp::encode(&mut out, &args);
        s.write_all(&out).await.map_err(|e| e.to_string())?;
        loop {
            match resp_reply(&input)? {
                Some((len, error)) => {
                    if error {
                        return Err(format!("AUTH refused: {}", String::from_utf8_lossy(&input[1..len - 2])));
                    }
                    return Ok(());
                }
                None => read_more(s, &mut input).await?,
            }
        }
    }
    Ok(())
}

async fn read_more<S: AsyncRead + Unpin>(s: &mut S, input: &mut BytesMut) -> Result<(), String> {
    input.reserve(64 * 1024);
    match s.read_buf(input).await {
        Ok(0) => Err("the server closed the connection".into()),
        Ok(_) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// Drives one connection until `issued` reaches the request count or the deadline passes, and
/// every request it sent is answered.
pub async fn drive<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    load: &Load,
    issued: &AtomicU64,
    done: &Arc<AtomicU64>,
) -> Measured {
    let mut m = Measured { hist: crate::histogram(), errors: 0, first_error: None };
    let mut rng = load.seed | 1;
    let mut out = BytesMut::with_capacity(64 * 1024);
    let mut input = BytesMut::with_capacity(64 * 1024);
    let mut key = Vec::with_capacity(load.prefix.len() + 20);
    // Fast-path replies may come in any order: a request's id is its slot in `sent_at`.
    // `None`: the id is not in flight (a reply for it would be a server bug).
    let mut sent_at: Vec<Option<Instant>> = vec![None; load.pipeline];
    let mut free: Vec<u32> = (0..load.pipeline as u32).rev().collect();
    // RESP replies come in order: the send time of each request in flight, oldest first.
    let mut fifo: std::collections::VecDeque<Instant> = std::collections::VecDeque::new();
    let mut in_flight = 0usize;
    let mut exhausted = false;
    // Requests this connection has claimed from the shared count and not sent yet (claimed a
    // window at a time: one atomic add per batch, not per request).
    let mut claimed = 0u64;
    // The run-wide number of the next claimed request (keys in turn count by it).
    let mut next = 0u64;
    loop {
        let now = Instant::now();
        while !exhausted && in_flight < load.pipeline && (in_flight == 0 || !out.is_empty()) {
            if claimed == 0 {
                let want = load.pipeline as u64;
                let from = issued.fetch_add(want, Ordering::Relaxed);
                claimed = want.min(load.requests.saturating_sub(from));
                next = from;
            }
            if claimed == 0 || now >= load.end {
                exhausted = true;
                break;
            }
            claimed -= 1;
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            key.clear();
            key.extend_from_slice(&load.prefix);
            // Formatting into the reused buffer allocates nothing.
            let _ = write!(key, "{}", crate::key_index(load.sequential, next, rng, load.keyspace.max(1)));
            next += 1;
            let get = load.get_ratio >= 1.0 || ((rng >> 40) % 10_000) as f64 / 10_000.0 < load.get_ratio;
            if load.fast {
                let id = free.pop().expect("a free slot while under the window");
                sent_at[id as usize] = Some(now);
                if get {
                    fast::put_request(&mut out, Op::Get, 0, id, &key, b"", 0);
                } else {
                    fast::put_request(&mut out, Op::Set, 0, id, &key, &load.value, 0);
                }
            } else {
                fifo.push_back(now);
                if get {
                    resp::encode(&mut out, &[&b"GET"[..], &key]);
                } else {
                    resp::encode(&mut out, &[&b"SET"[..], &key, &load.value]);
                }
            }
            in_flight += 1;
        }
        if !out.is_empty() {
            if let Err(e) = s.write_all(&out).await {
                m.errors += in_flight as u64;
                m.first_error.get_or_insert(e.to_string());
                return m;
            }
            out.clear();
        }
        if in_flight == 0 {
            return m;
        }
        if let Err(e) = read_more(s, &mut input).await {
            m.errors += in_flight as u64;
            m.first_error.get_or_insert(e);
            return m;
        }
        let arrived = Instant::now();
        let mut answered = 0u64;
        loop {
            if load.fast {
                match fast::decode_reply(&mut input, 1 << 30) {
                    Ok(Some(r)) => {
                        let Some(at) = sent_at.get_mut(r.id as usize).and_then(Option::take) else {
                            m.errors += 1;
                            m.first_error
                                .get_or_insert(format!("a reply for id {}, which is not in flight", r.id));
                            return m;
                        };
                        m.hist.saturating_record(arrived.duration_since(at).as_nanos() as u64);
                        free.push(r.id);
                        if r.status == Status::Err {
                            m.errors += 1;
                            m.first_error
                                .get_or_insert_with(|| String::from_utf8_lossy(&r.body).into_owned());
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        m.errors += in_flight as u64;
                        m.first_error.get_or_insert(e.to_string());
                        return m;
                    }
                }
            } else {
                let (len, error) = match resp_reply(&input) {
                    Ok(Some(reply)) => reply,
                    Ok(None) => break,
                    Err(e) => {
                        m.errors += in_flight as u64;
                        m.first_error.get_or_insert(e);
                        return m;
                    }
                };
                let Some(at) = fifo.pop_front() else {
                    m.errors += 1;
                    m.first_error.get_or_insert("a reply to no request".into());
                    return m;
                };
                if error {
                    m.errors += 1;
                    m.first_error
                        .get_or_insert_with(|| String::from_utf8_lossy(&input[1..len - 2]).into_owned());
                }
                input.advance(len);
                m.hist.saturating_record(arrived.duration_since(at).as_nanos() as u64);
            }
            in_flight -= 1;
            answered += 1;
        }
        done.fetch_add(answered, Ordering::Relaxed);
    }
}

/// The length of the first complete reply in `buf` and whether it is an error (`Ok(None)`:
/// incomplete; `Err`: not RESP), by the client crate's own RESP framing.
fn resp_reply(buf: &[u8]) -> Result<Option<(usize, bool)>, String> {
    match resp::frame_len(buf, usize::MAX) {
        Ok(Some(len)) => Ok(Some((len, buf[0] == b'-'))),
        Ok(None) => Ok(None),
        Err(e) => Err(format!("malformed reply: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp_replies_are_delimited() {
        assert_eq!(resp_reply(b"+OK\r\n$3\r\n"), Ok(Some((5, false))));
        assert_eq!(resp_reply(b"$3\r\nabc\r\n+OK"), Ok(Some((9, false))));
        assert_eq!(resp_reply(b"$3\r\nab"), Ok(None));
        assert_eq!(resp_reply(b"$-1\r\n"), Ok(Some((5, false))));
        assert_eq!(resp_reply(b"-ERR x\r\n"), Ok(Some((8, true))));
        assert_eq!(resp_reply(b"+O"), Ok(None));
        assert!(resp_reply(b"?what\r\n").is_err(), "not RESP: an error, not a wait for more");
    }
}
