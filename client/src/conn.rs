//! One multiplexed connection: many tasks' requests share it, in flight together.
//!
//! ```text
//!  callers ──(frame, oneshot)──► mpsc ──► writer task ──one write per batch──► socket
//!                                            │ registers each oneshot (FIFO for RESP,
//!                                            ▼ by request id for the fast path)
//!  callers ◄──oneshot── reader task ◄── decode replies ◄───────────────────── socket
//! ```
//!
//! The writer registers a request's oneshot *before* writing its bytes, so the reader never
//! sees a reply it cannot match. A registration holds its request's slot under the in-flight
//! bound until its reply comes (or the connection closes), even after its caller timed out: a
//! server that stops answering fills the slots and new callers time out waiting for one, instead
//! of registrations piling up without bound. RESP answers in order, so RESP requests wait in a FIFO; the
//! fast path answers by id, possibly out of order, so the writer gives each frame an id (patched
//! into its header) and the reader looks it up. When either task hits an error or the end of the
//! stream, the connection is closed for good: every request in flight fails with that error, and
//! later ones fail with [`Error::Closed`] at once (the pool replaces the connection).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use shoal_wire::fast;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::error::{Error, Result};
use crate::resp::{self, Value};

/// Which protocol a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// RESP2 requests and replies, in order.
    Resp,
    /// The binary fast path ([`shoal_wire::fast`]), matched by id.
    Fast,
}

/// A reply as the reader hands it to its caller.
#[derive(Debug)]
pub(crate) enum Reply {
    Resp(Value),
    Fast(fast::Reply),
}

/// A registered request: where its answer goes, and its slot under the in-flight bound (freed
/// when the answer is delivered, or dropped with the connection's pending requests).
struct Waiter {
    tx: oneshot::Sender<Result<Reply>>,
    _slot: OwnedSemaphorePermit,
}

impl Waiter {
    /// Hands the caller its answer (a caller that gave up is simply not there to take it).
    fn answer(self, r: Result<Reply>) {
        let _ = self.tx.send(r);
    }
}

/// The requests a connection waits answers for.
struct Pending {
    fifo: VecDeque<Waiter>,
    by_id: HashMap<u32, Waiter>,
    next_id: u32,
    /// Set once the connection is done: requests registered after this fail at once.
    closed: Option<Error>,
}

impl Pending {
    fn fail_all(&mut self, err: Error) {
        for w in self.fifo.drain(..) {
            w.answer(Err(err.clone()));
        }
        for (_, w) in self.by_id.drain() {
            w.answer(Err(err.clone()));
        }
        self.closed.get_or_insert(err);
    }
}

/// A job for the writer: the encoded request (for the fast path its header's id is filled in by
/// the writer) and where its answer goes.
struct Job {
    frame: BytesMut,
    waiter: Waiter,
}

/// Tuning of one connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnOptions {
    pub max_in_flight: usize,
    pub max_reply: usize,
}

/// Most bytes the writer gathers into one write: enough to carry a deep pipeline of small
/// requests in one syscall, small enough not to hold up the first of them behind a huge batch.
const MAX_BATCH: usize = 256 * 1024;

/// A live connection (its two tasks end when it is dropped or the peer goes away).
pub(crate) struct Conn {
    protocol: Protocol,
    jobs: mpsc::UnboundedSender<Job>,
    in_flight: Arc<Semaphore>,
    max_in_flight: usize,
    closed: Arc<AtomicBool>,
    closed_notify: Arc<Notify>,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Conn {
    fn drop(&mut self) {
        // The reader would otherwise wait on the socket forever.
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Conn {
    /// Starts the reader and writer on an already handshaken stream. `leftover`: bytes read
    /// past the handshake.
    pub(crate) fn start<R, W>(
        protocol: Protocol,
        read: R,
        write: W,
        leftover: BytesMut,
        opts: ConnOptions,
    ) -> Conn
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let pending = Arc::new(Mutex::new(Pending {
            fifo: VecDeque::new(),
            by_id: HashMap::new(),
            // Id 0 was the HELLO of the handshake; any value works, the writer skips ids in use.
            next_id: 1,
            closed: None,
        }));
        let closed = Arc::new(AtomicBool::new(false));
        let closed_notify = Arc::new(Notify::new());
        let (jobs, rx) = mpsc::unbounded_channel();
        let done = Done { pending: pending.clone(), closed: closed.clone(), notify: closed_notify.clone() };
        let writer = tokio::spawn(write_loop(protocol, write, rx, done.clone()));
        let reader = tokio::spawn(read_loop(protocol, read, leftover, opts.max_reply, done));
        Conn {
            protocol,
            jobs,
            in_flight: Arc::new(Semaphore::new(opts.max_in_flight)),
            max_in_flight: opts.max_in_flight,
            closed,
            closed_notify,
            tasks: [writer, reader],
        }
    }

    pub(crate) fn protocol(&self) -> Protocol {
        self.protocol
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Resolves once the connection has closed.
    pub(crate) async fn closed(&self) {
        loop {
            let notified = self.closed_notify.notified();
            if self.is_closed() {
                return;
            }
            notified.await;
        }
    }

    /// Requests holding a slot: queued, or sent and not yet answered (also those whose callers
    /// timed out: the server still has them).
    pub(crate) fn load(&self) -> usize {
        self.max_in_flight - self.in_flight.available_permits()
    }

    /// Sends one request and waits for its reply until `deadline`.
    pub(crate) async fn call(&self, frame: BytesMut, deadline: tokio::time::Instant) -> Result<Reply> {
        let work = async {
            // The bound on requests in flight: a caller past it waits here, before anything is
            // queued, so a slow server pushes back instead of growing the queues.
            let slot = self.in_flight.clone().acquire_owned().await.map_err(|_| Error::Closed)?;
            if self.is_closed() {
                return Err(Error::Closed);
            }
            let (tx, rx) = oneshot::channel();
            self.jobs.send(Job { frame, waiter: Waiter { tx, _slot: slot } }).map_err(|_| Error::Closed)?;
            rx.await.map_err(|_| Error::Closed)?
        };
        // On a timeout the waiter stays registered, with its slot: its reply, when it comes,
        // still lines up the stream (RESP) or is dropped by id (fast path), and its id is not
        // reused before then. (One still queued when its caller gave up is not sent at all.)
        tokio::time::timeout_at(deadline, work).await.map_err(|_| Error::Timeout)?
    }
}

/// What both tasks share to close the connection.
#[derive(Clone)]
struct Done {
    /// A std mutex: held only to push or pop a waiter, never across an await.
    pending: Arc<Mutex<Pending>>,
    closed: Arc<AtomicBool>,
    notify: Arc<Notify>,
}

impl Done {
    fn close(&self, err: Error) {
        self.pending.lock().expect("pending lock").fail_all(err);
        self.closed.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    protocol: Protocol,
    mut write: W,
    mut rx: mpsc::UnboundedReceiver<Job>,
    done: Done,
) {
    let mut batch = BytesMut::with_capacity(64 * 1024);
    while let Some(job) = rx.recv().await {
        batch.clear();
        let mut next = Some(job);
        {
            let mut pending = done.pending.lock().expect("pending lock");
            // Everything already queued goes out in this one write (the coalescing that makes
            // many tasks' small requests cost one syscall).
            while let Some(Job { mut frame, waiter }) = next.take() {
                if let Some(err) = &pending.closed {
                    waiter.answer(Err(err.clone()));
                } else if waiter.tx.is_closed() {
                    // Its caller timed out while it was queued: nothing waits for its answer,
                    // so it is not sent (and its slot is free again).
                } else {
                    match protocol {
                        Protocol::Resp => pending.fifo.push_back(waiter),
                        Protocol::Fast => {
                            let mut id = pending.next_id;
                            while pending.by_id.contains_key(&id) {
                                id = id.wrapping_add(1);
                            }
                            pending.next_id = id.wrapping_add(1);
                            frame[4..8].copy_from_slice(&id.to_le_bytes());
                            pending.by_id.insert(id, waiter);
                        }
                    }
                    batch.extend_from_slice(&frame);
                }
                if batch.len() < MAX_BATCH {
                    next = rx.try_recv().ok();
                }
            }
        }
        if batch.is_empty() {
            continue;
        }
        if let Err(e) = write.write_all(&batch).await {
            done.close(e.into());
            return;
        }
    }
    // Every handle is gone: nothing more to send.
    let _ = write.shutdown().await;
}

async fn read_loop<R: AsyncRead + Unpin>(
    protocol: Protocol,
    mut read: R,
    mut buf: BytesMut,
    max_reply: usize,
    done: Done,
) {
    let err = loop {
        // Every complete reply in the buffer first, then read more.
        let step = match protocol {
            Protocol::Resp => resp_replies(&mut buf, max_reply, &done),
            Protocol::Fast => fast_replies(&mut buf, max_reply, &done),
        };
        if let Err(e) = step {
            break e;
        }
        if buf.capacity() - buf.len() < 16 * 1024 {
            buf.reserve(64 * 1024);
        }
        match read.read_buf(&mut buf).await {
            Ok(0) => break Error::Closed,
            Ok(_) => {}
            Err(e) => break e.into(),
        }
    };
    done.close(err);
}

fn resp_replies(buf: &mut BytesMut, max_reply: usize, done: &Done) -> Result<()> {
    while let Some(v) = resp::decode(buf, max_reply)? {
        let waiter = done.pending.lock().expect("pending lock").fifo.pop_front();
        match waiter {
            Some(w) => w.answer(Ok(Reply::Resp(v))),
            None => return Err(Error::Protocol(format!("a reply no request asked for: {v:?}"))),
        }
    }
    Ok(())
}

fn fast_replies(buf: &mut BytesMut, max_reply: usize, done: &Done) -> Result<()> {
    while let Some(r) = fast::decode_reply(buf, max_reply)? {
        // Every waiter stays registered until its reply comes, even after its caller timed out,
        // so an unknown id means the server is confused: the stream is not trustworthy.
        let waiter = done.pending.lock().expect("pending lock").by_id.remove(&r.id);
        match waiter {
            Some(w) => w.answer(Ok(Reply::Fast(r))),
            None => return Err(Error::Protocol(format!("a reply to unknown request id {}", r.id))),
        }
    }
    Ok(())
}

/// Encodes a fast-path request with id 0 (the writer assigns the real one).
pub(crate) fn fast_frame(op: fast::Op, flags: u8, key: &[u8], value: &[u8], arg: i64) -> BytesMut {
    let mut out = BytesMut::new();
    fast::put_request(&mut out, op, flags, 0, key, value, arg);
    out
}

/// Encodes a fast-path request whose value region is `items`, written in place after the header
/// (not built apart and copied in).
pub(crate) fn fast_items_frame<T: AsRef<[u8]>>(op: fast::Op, flags: u8, items: &[T]) -> BytesMut {
    let val_len = fast::items_len(items);
    let header = fast::RequestHeader {
        op: op as u8,
        flags,
        id: 0,
        key_len: 0,
        val_len: val_len as u32,
        arg: items.len() as i64,
    };
    let mut out = BytesMut::with_capacity(fast::HEADER_LEN + val_len);
    out.extend_from_slice(&header.encode());
    fast::put_items(&mut out, items);
    out
}

/// Encodes a RESP request.
pub(crate) fn resp_frame<A: AsRef<[u8]>>(args: &[A]) -> BytesMut {
    let mut out = BytesMut::new();
    resp::encode(&mut out, args);
    out
}

/// Reads at least `n` bytes into `buf` within `limit` (handshakes).
pub(crate) async fn read_at_least<R: AsyncRead + Unpin>(
    read: &mut R,
    buf: &mut BytesMut,
    n: usize,
    limit: Duration,
) -> Result<()> {
    let fill = async {
        while buf.len() < n {
            buf.reserve(n.max(4096));
            if read.read_buf(buf).await? == 0 {
                return Err(Error::Closed);
            }
        }
        Ok(())
    };
    tokio::time::timeout(limit, fill).await.map_err(|_| Error::Timeout)?
}

/// A body of bytes for error messages.
pub(crate) fn lossy(b: &Bytes) -> String {
    String::from_utf8_lossy(b).into_owned()
}
