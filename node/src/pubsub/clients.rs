//! CLIENT LIST / CLIENT KILL over every router: the node as the meeting point.
//!
//! Routers do not know each other, but each keeps a `Subscribe` stream to every node (see
//! [`super`]). A router that serves CLIENT LIST or CLIENT KILL answers for its own clients and
//! asks one node for the others' ([`super::PubSub::ask_clients`]): the node puts the question on
//! the stream of every other router (one stream per router, its newest), and [`Gathers`]
//! collects their answers until all have come or the asker's wait ends. A router that does not
//! answer in time (busy, its stream breaking) is counted as missing, never waited for longer; a
//! stream that ends is struck off at once.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use shoal_wire::proto::{ClientsAnswer, ClientsReply};
use tokio::sync::oneshot;

/// The longest a question waits for the routers' answers, whatever the asker allows.
pub const MAX_WAIT: Duration = Duration::from_secs(5);
/// The wait when the asker names none.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(1);
/// The most a question gathers of the routers' lines: what would take a reply past gRPC's
/// message limit (`shoal_wire::client::MAX_MESSAGE_BYTES`, 64 MiB) would fail it whole, and a
/// node's memory is its data's. A router's answer that would pass it is left out and counted
/// among the routers that did not answer (tens of thousands of clients fit).
pub const MAX_LINES: usize = 32 << 20;

/// One question on its way: the streams that still owe an answer, and what came.
#[derive(Debug)]
struct Gather {
    waiting: HashSet<u64>,
    lines: Vec<u8>,
    killed: u64,
    /// Answers left out: their lines would have passed [`MAX_LINES`].
    left_out: u32,
    done: Option<oneshot::Sender<()>>,
}

impl Gather {
    fn finish_if_complete(&mut self) {
        if self.waiting.is_empty()
            && let Some(done) = self.done.take()
        {
            let _ = done.send(());
        }
    }
}

/// The questions of this node that wait for answers, by id.
#[derive(Debug)]
pub struct Gathers {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Gather>>,
    /// [`MAX_LINES`] (smaller in tests).
    cap: usize,
}

impl Default for Gathers {
    fn default() -> Gathers {
        Gathers { next: AtomicU64::new(0), open: Mutex::default(), cap: MAX_LINES }
    }
}

impl Gathers {
    /// Opens a question to the given streams: its id, and what completes when all answered.
    pub fn open(&self, streams: impl IntoIterator<Item = u64>) -> (u64, oneshot::Receiver<()>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = oneshot::channel();
        let mut gather = Gather {
            waiting: streams.into_iter().collect(),
            lines: Vec::new(),
            killed: 0,
            left_out: 0,
            done: Some(tx),
        };
        gather.finish_if_complete();
        self.open.lock().insert(id, gather);
        (id, rx)
    }

    /// Stream `stream` answered (an answer to a question that ended, or from a stream not asked,
    /// is dropped).
    pub fn answered(&self, stream: u64, answer: ClientsAnswer) {
        let mut open = self.open.lock();
        let Some(gather) = open.get_mut(&answer.query) else { return };
        if !gather.waiting.remove(&stream) {
            return;
        }
        if gather.lines.len() + answer.lines.len() <= self.cap {
            gather.lines.extend_from_slice(&answer.lines);
        } else {
            gather.left_out += 1;
        }
        // A KILL's count stands whatever its lines' size (a kill answers none).
        gather.killed += answer.killed;
        gather.finish_if_complete();
    }

    /// Stream `stream` ended: it answers nothing more.
    pub fn gone(&self, stream: u64) {
        for gather in self.open.lock().values_mut() {
            if gather.waiting.remove(&stream) {
                gather.finish_if_complete();
            }
        }
    }

    /// Ends question `id`: what came, and how many streams did not answer.
    pub fn close(&self, id: u64) -> ClientsReply {
        match self.open.lock().remove(&id) {
            Some(Gather { waiting, lines, killed, left_out, .. }) => {
                ClientsReply { lines: lines.into(), killed, missing: waiting.len() as u32 + left_out }
            }
            None => ClientsReply::default(),
        }
    }
}

/// A question open in [`Gathers`]: closed when dropped, so that a call cancelled mid-wait (the
/// asking router gave up or went away) leaves nothing behind.
#[derive(Debug)]
pub struct Question<'a> {
    gathers: &'a Gathers,
    id: u64,
    closed: bool,
}

impl<'a> Question<'a> {
    pub fn new(gathers: &'a Gathers, id: u64) -> Question<'a> {
        Question { gathers, id, closed: false }
    }

    /// What came, and how many streams did not answer.
    pub fn close(mut self) -> ClientsReply {
        self.closed = true;
        self.gathers.close(self.id)
    }
}

impl Drop for Question<'_> {
    fn drop(&mut self) {
        if !self.closed {
            self.gathers.close(self.id);
        }
    }
}

/// How long a question waits, from what the asker allows (0: the default).
pub fn wait_of(wait_ms: u32) -> Duration {
    match wait_ms {
        0 => DEFAULT_WAIT,
        ms => Duration::from_millis(ms.into()).min(MAX_WAIT),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(query: u64, lines: &str, killed: u64) -> ClientsAnswer {
        ClientsAnswer { query, lines: lines.as_bytes().to_vec().into(), killed }
    }

    #[tokio::test]
    async fn answers_gather_until_every_stream_asked_has_answered() {
        let g = Gathers::default();
        let (id, mut done) = g.open([1, 2]);
        g.answered(1, answer(id, "id=1\n", 1));
        // A stream not asked, and an unknown question, change nothing.
        g.answered(3, answer(id, "id=3\n", 5));
        g.answered(1, answer(id + 7, "id=9\n", 5));
        assert!(done.try_recv().is_err(), "stream 2 still owes its answer");
        // A second answer of stream 1 (a repeat) counts once.
        g.answered(1, answer(id, "id=1\n", 1));
        g.answered(2, answer(id, "id=2\n", 2));
        done.await.expect("complete once both answered");
        let reply = g.close(id);
        assert_eq!((&reply.lines[..], reply.killed, reply.missing), (&b"id=1\nid=2\n"[..], 3, 0));
        assert_eq!(g.close(id), ClientsReply::default(), "a closed question is gone");
    }

    #[tokio::test]
    async fn a_stream_that_ends_is_struck_off_and_silent_ones_are_counted_missing() {
        let g = Gathers::default();
        let (id, mut done) = g.open([1, 2, 3]);
        g.answered(2, answer(id, "id=2\n", 0));
        g.gone(1);
        assert!(done.try_recv().is_err(), "stream 3 has not answered");
        let reply = g.close(id);
        assert_eq!((&reply.lines[..], reply.missing), (&b"id=2\n"[..], 1));
        let (_, done) = g.open([]);
        done.await.expect("a question to nobody is complete at once");
    }

    #[test]
    fn a_question_dropped_unanswered_is_closed() {
        let g = Gathers::default();
        let (id, _done) = g.open([1]);
        drop(Question::new(&g, id));
        assert!(g.open.lock().is_empty(), "nothing left behind");
        let (id, _done) = g.open([1]);
        g.answered(1, answer(id, "id=1\n", 0));
        assert_eq!(&Question::new(&g, id).close().lines[..], b"id=1\n");
        assert!(g.open.lock().is_empty());
    }

    #[tokio::test]
    async fn lines_past_the_cap_are_left_out_and_counted_missing() {
        let g = Gathers { cap: 20, ..Gathers::default() };
        let (id, done) = g.open([1, 2, 3]);
        g.answered(1, answer(id, "id=1 name=a\n", 0));
        // 12 + 12 bytes would pass 20: left out, but its kills still count.
        g.answered(2, answer(id, "id=2 name=b\n", 4));
        // 12 + 8 is exactly the cap: kept.
        g.answered(3, answer(id, "id=3 ab\n", 1));
        done.await.expect("every stream answered");
        let reply = g.close(id);
        assert_eq!(&reply.lines[..], b"id=1 name=a\nid=3 ab\n");
        assert_eq!((reply.killed, reply.missing), (5, 1));
        assert_eq!(Gathers::default().cap, MAX_LINES);
    }

    #[test]
    fn the_wait_is_bounded() {
        assert_eq!(wait_of(0), DEFAULT_WAIT);
        assert_eq!(wait_of(250), Duration::from_millis(250));
        assert_eq!(wait_of(u32::MAX), MAX_WAIT);
    }
}
