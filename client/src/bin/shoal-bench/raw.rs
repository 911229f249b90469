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

use super::load::{histogram, key_index};

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
    let mut c = Conn::new(load);
    loop {
        c.fill(issued);
        if !c.out.is_empty() {
            if let Err(e) = s.write_all(&c.out).await {
                c.fail(c.in_flight as u64, e.to_string());
                return c.m;
            }
            c.out.clear();
        }
        if c.in_flight == 0 {
            return c.m;
        }
        if let Err(e) = read_more(s, &mut c.input).await {
            c.fail(c.in_flight as u64, e);
            return c.m;
        }
        match c.take_replies() {
            Ok(answered) => done.fetch_add(answered, Ordering::Relaxed),
            Err(()) => return c.m,
        };
    }
}

/// One connection's requests in flight and what it measured.
struct Conn<'a> {
    load: &'a Load,
    m: Measured,
    rng: u64,
    out: BytesMut,
    input: BytesMut,
    key: Vec<u8>,
    /// Fast-path replies may come in any order: a request's id is its slot in `sent_at`.
    /// `None`: the id is not in flight (a reply for it would be a server bug).
    sent_at: Vec<Option<Instant>>,
    free: Vec<u32>,
    /// RESP replies come in order: the send time of each request in flight, oldest first.
    fifo: std::collections::VecDeque<Instant>,
    in_flight: usize,
    exhausted: bool,
    /// Requests this connection has claimed from the shared count and not sent yet (claimed a
    /// window at a time: one atomic add per batch, not per request).
    claimed: u64,
    /// The run-wide number of the next claimed request (keys in turn count by it).
    next: u64,
}

impl<'a> Conn<'a> {
    fn new(load: &'a Load) -> Conn<'a> {
        Conn {
            load,
            m: Measured { hist: histogram(), errors: 0, first_error: None },
            rng: load.seed | 1,
            out: BytesMut::with_capacity(64 * 1024),
            input: BytesMut::with_capacity(64 * 1024),
            key: Vec::with_capacity(load.prefix.len() + 20),
            sent_at: vec![None; load.pipeline],
            free: (0..load.pipeline as u32).rev().collect(),
            fifo: std::collections::VecDeque::new(),
            in_flight: 0,
            exhausted: false,
            claimed: 0,
            next: 0,
        }
    }

    fn fail(&mut self, requests: u64, why: String) {
        self.m.errors += requests;
        self.m.first_error.get_or_insert(why);
    }

    /// Encodes requests into `out` up to the pipeline depth (or until the count or the deadline
    /// is reached).
    fn fill(&mut self, issued: &AtomicU64) {
        let (load, now) = (self.load, Instant::now());
        while !self.exhausted
            && self.in_flight < load.pipeline
            && (self.in_flight == 0 || !self.out.is_empty())
        {
            if self.claimed == 0 {
                let want = load.pipeline as u64;
                let from = issued.fetch_add(want, Ordering::Relaxed);
                self.claimed = want.min(load.requests.saturating_sub(from));
                self.next = from;
            }
            if self.claimed == 0 || now >= load.end {
                self.exhausted = true;
                break;
            }
            self.claimed -= 1;
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            self.key.clear();
            self.key.extend_from_slice(&load.prefix);
            // Formatting into the reused buffer allocates nothing.
            let index = key_index(load.sequential, self.next, self.rng, load.keyspace.max(1));
            let _ = write!(self.key, "{index}");
            self.next += 1;
            let get = load.get_ratio >= 1.0 || ((self.rng >> 40) % 10_000) as f64 / 10_000.0 < load.get_ratio;
            if load.fast {
                let id = self.free.pop().expect("a free slot while under the window");
                self.sent_at[id as usize] = Some(now);
                if get {
                    fast::put_request(&mut self.out, Op::Get, 0, id, &self.key, b"", 0);
                } else {
                    fast::put_request(&mut self.out, Op::Set, 0, id, &self.key, &load.value, 0);
                }
            } else {
                self.fifo.push_back(now);
                if get {
                    resp::encode(&mut self.out, &[&b"GET"[..], &self.key]);
                } else {
                    resp::encode(&mut self.out, &[&b"SET"[..], &self.key, &load.value]);
                }
            }
            self.in_flight += 1;
        }
    }

    /// Takes every complete reply in `input`: how many; `Err` when the connection must stop.
    fn take_replies(&mut self) -> Result<u64, ()> {
        let arrived = Instant::now();
        let mut answered = 0u64;
        loop {
            let sent = if self.load.fast { self.fast_reply() } else { self.resp_reply() };
            match sent? {
                Some(at) => self.m.hist.saturating_record(arrived.duration_since(at).as_nanos() as u64),
                None => return Ok(answered),
            }
            self.in_flight -= 1;
            answered += 1;
        }
    }

    /// The next fast-path reply's send time (`None`: none complete).
    fn fast_reply(&mut self) -> Result<Option<Instant>, ()> {
        let r = match fast::decode_reply(&mut self.input, 1 << 30) {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(None),
            Err(e) => {
                self.fail(self.in_flight as u64, e.to_string());
                return Err(());
            }
        };
        let Some(at) = self.sent_at.get_mut(r.id as usize).and_then(Option::take) else {
            self.fail(1, format!("a reply for id {}, which is not in flight", r.id));
            return Err(());
        };
        self.free.push(r.id);
        if r.status == Status::Err {
            self.m.errors += 1;
            self.m.first_error.get_or_insert_with(|| String::from_utf8_lossy(&r.body).into_owned());
        }
        Ok(Some(at))
    }

    /// The next RESP reply's send time (`None`: none complete).
    fn resp_reply(&mut self) -> Result<Option<Instant>, ()> {
        let (len, error) = match resp_reply(&self.input) {
            Ok(Some(reply)) => reply,
            Ok(None) => return Ok(None),
            Err(e) => {
                self.fail(self.in_flight as u64, e);
                return Err(());
            }
        };
        let Some(at) = self.fifo.pop_front() else {
            self.fail(1, "a reply to no request".into());
            return Err(());
        };
        if error {
            self.m.errors += 1;
            let text = String::from_utf8_lossy(&self.input[1..len - 2]).into_owned();
            self.m.first_error.get_or_insert(text);
        }
        self.input.advance(len);
        Ok(Some(at))
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
