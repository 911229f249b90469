//! The records of transactions over several nodes on this node (the state machine of
//! [`crate::twophase`]): one entry per transaction prepared here, from the prepare until some
//! minutes after its decision, so that a late `Decide` or a participant's `Decision` question finds
//! the answer.
//!
//! An entry moves Held -> Committing -> Committed, or Held -> Aborted, each step under one lock:
//! the router's decision, the holder's lease running out and a participant's question race, and
//! whichever takes the lock first decides. On the coordinator that is the transaction's decision
//! (docs/architecture.md, "Transactions over several nodes").

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use shoal_wire::proto::{self, Reply, reply};
use tokio::sync::oneshot;

/// How long a decided transaction's record is kept: past every participant's questions (they ask
/// at their lease, 1 s by default, and give up after `twophase::GIVE_UP`, 30 s).
const KEEP: Duration = Duration::from_secs(60);

/// What the thread holding a prepared transaction is told.
#[derive(Debug)]
pub enum Order {
    /// Apply, and send the replies here.
    Commit(oneshot::Sender<Reply>),
    Abort,
}

#[derive(Debug)]
enum Entry {
    /// Prepared: the holder waits for an order on this channel.
    Held(mpsc::Sender<Order>),
    /// A commit order was sent; the holder is applying it.
    Committing,
    /// Applied; with its replies when no router order asked for them yet (a participant that
    /// applied on its coordinator's word), for a late Decide.
    Committed(Option<Reply>, Instant),
    Aborted(Instant),
}

/// What [`Decisions::decide`] answers: a reply now, or the commit's replies once applied.
#[derive(Debug)]
pub enum Decided {
    Now(Reply),
    Later(oneshot::Receiver<Reply>),
}

#[derive(Debug, Default)]
pub struct Decisions {
    entries: Mutex<Table>,
    /// Holder threads alive (`twophase` bounds them).
    pub holders: std::sync::atomic::AtomicUsize,
}

#[derive(Debug, Default)]
struct Table {
    map: HashMap<Bytes, Entry>,
    /// Decided transactions, oldest first: swept after [`KEEP`] (amortized O(1) per decision).
    decided: VecDeque<(Instant, Bytes)>,
}

impl Table {
    fn decide(&mut self, txid: &[u8], entry: Entry) {
        let now = Instant::now();
        while let Some((at, _)) = self.decided.front()
            && now.duration_since(*at) >= KEEP
        {
            let (_, old) = self.decided.pop_front().expect("a front");
            if matches!(self.map.get(&old), Some(Entry::Committed(..) | Entry::Aborted(_))) {
                self.map.remove(&old);
            }
        }
        let txid = Bytes::copy_from_slice(txid);
        self.decided.push_back((now, txid.clone()));
        self.map.insert(txid, entry);
    }
}

fn ok() -> Reply {
    Reply { kind: Some(reply::Kind::Ok(proto::Empty {})), ..Default::default() }
}

fn error(text: &str) -> Reply {
    Reply { kind: Some(reply::Kind::Error(text.to_string())), ..Default::default() }
}

impl Decisions {
    /// A transaction was prepared here; its holder takes orders on `to_holder`. False if it was
    /// already decided (a participant's question got here first: then it is aborted).
    pub fn hold(&self, txid: Bytes, to_holder: mpsc::Sender<Order>) -> bool {
        let mut table = self.entries.lock();
        if table.map.contains_key(&txid) {
            return false;
        }
        table.map.insert(txid, Entry::Held(to_holder));
        true
    }

    /// The router's decision.
    pub fn decide(&self, txid: &[u8], commit: bool) -> Decided {
        let mut t = self.entries.lock();
        let Some(entry) = t.map.remove(txid) else {
            if commit {
                return Decided::Now(error("ERR no such prepared transaction (its node restarted?)"));
            }
            t.decide(txid, Entry::Aborted(Instant::now()));
            return Decided::Now(ok());
        };
        let keep = |t: &mut Table, e: Entry| drop(t.map.insert(Bytes::copy_from_slice(txid), e));
        match (entry, commit) {
            (Entry::Held(to_holder), true) => {
                let (tx, rx) = oneshot::channel();
                if to_holder.send(Order::Commit(tx)).is_err() {
                    t.decide(txid, Entry::Aborted(Instant::now()));
                    return Decided::Now(error("ERR the transaction's holder is gone"));
                }
                keep(&mut t, Entry::Committing);
                Decided::Later(rx)
            }
            (Entry::Held(to_holder), false) => {
                let _ = to_holder.send(Order::Abort);
                t.decide(txid, Entry::Aborted(Instant::now()));
                Decided::Now(ok())
            }
            (Entry::Committing, _) => {
                keep(&mut t, Entry::Committing);
                Decided::Now(error("ERR the transaction is being committed"))
            }
            (Entry::Committed(replies, at), true) => {
                keep(&mut t, Entry::Committed(None, at));
                Decided::Now(replies.unwrap_or_else(|| {
                    error("ERR the transaction was committed; its replies went to the first commit")
                }))
            }
            (Entry::Committed(replies, at), false) => {
                keep(&mut t, Entry::Committed(replies, at));
                Decided::Now(error("ERR the transaction was committed"))
            }
            (Entry::Aborted(at), true) => {
                keep(&mut t, Entry::Aborted(at));
                Decided::Now(error("ERR the transaction was aborted: no decision came within its lease"))
            }
            (Entry::Aborted(at), false) => {
                keep(&mut t, Entry::Aborted(at));
                Decided::Now(ok())
            }
        }
    }

    /// The coordinator's answer to a participant's question: whether the transaction committed.
    /// One still held is aborted by the question (the answer is final); one never seen is
    /// recorded as aborted, so a prepare arriving after the question is refused.
    pub fn question(&self, txid: &[u8]) -> bool {
        let mut t = self.entries.lock();
        match t.map.get(txid) {
            Some(Entry::Committing | Entry::Committed(..)) => true,
            Some(Entry::Aborted(_)) => false,
            Some(Entry::Held(_)) | None => {
                if let Some(Entry::Held(to_holder)) = t.map.remove(txid) {
                    let _ = to_holder.send(Order::Abort);
                }
                t.decide(txid, Entry::Aborted(Instant::now()));
                false
            }
        }
    }

    /// The holder's lease ran out (on the coordinator), or its prepare could not be answered:
    /// aborted unless a commit order is on its way (false: the holder then takes that order).
    pub fn lapse(&self, txid: &[u8]) -> bool {
        self.learned(txid, false)
    }

    /// A participant learned the coordinator's decision. True: the holder acts on it itself
    /// (applies, or lets go); false: a router's order already came and is in the holder's channel.
    pub fn learned(&self, txid: &[u8], committed: bool) -> bool {
        let mut t = self.entries.lock();
        match t.map.get(txid) {
            Some(Entry::Held(_)) if committed => {
                t.map.insert(Bytes::copy_from_slice(txid), Entry::Committing);
                true
            }
            Some(Entry::Held(_)) => {
                t.decide(txid, Entry::Aborted(Instant::now()));
                true
            }
            Some(Entry::Aborted(_)) | None => true,
            Some(Entry::Committing | Entry::Committed(..)) => false,
        }
    }

    /// The holder applied the transaction; `replies` (when no router order has taken them yet)
    /// are what a late commit order answers.
    pub fn committed(&self, txid: &[u8], replies: Option<Reply>) {
        self.entries.lock().decide(txid, Entry::Committed(replies, Instant::now()));
    }

    /// How many transactions are prepared and not yet decided here.
    pub fn held(&self) -> usize {
        self.entries.lock().map.values().filter(|e| matches!(e, Entry::Held(_) | Entry::Committing)).count()
    }

    /// How many records are kept (held and decided).
    pub fn records(&self) -> usize {
        self.entries.lock().map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(d: &Decisions, id: &'static [u8]) -> mpsc::Receiver<Order> {
        let (tx, rx) = mpsc::channel();
        assert!(d.hold(Bytes::from_static(id), tx));
        rx
    }

    #[test]
    fn the_first_to_decide_wins() {
        let d = Decisions::default();
        // The router commits first: a question then says committed.
        let rx = held(&d, b"a");
        let Decided::Later(_replies) = d.decide(b"a", true) else { panic!("a held commit waits") };
        assert!(matches!(rx.try_recv(), Ok(Order::Commit(_))));
        assert!(d.question(b"a"));
        assert!(!d.lapse(b"a"), "a lapse after the commit order leaves it to the holder");
        // A question first: aborted, and the router's commit is refused.
        let rx = held(&d, b"b");
        assert!(!d.question(b"b"));
        assert!(matches!(rx.try_recv(), Ok(Order::Abort)));
        let Decided::Now(r) = d.decide(b"b", true) else { panic!("decided already") };
        assert!(matches!(r.kind, Some(reply::Kind::Error(e)) if e.contains("aborted")));
        // A question about a transaction never prepared here: aborted, and its prepare refused.
        assert!(!d.question(b"c"));
        let (tx, _rx) = mpsc::channel();
        assert!(!d.hold(Bytes::from_static(b"c"), tx));
    }

    #[test]
    fn a_committed_transaction_answers_its_replies_again() {
        let d = Decisions::default();
        let _rx = held(&d, b"a");
        assert!(d.learned(b"a", true), "the holder commits on the coordinator's word");
        assert_eq!(d.held(), 1);
        d.committed(b"a", Some(ok()));
        assert_eq!(d.held(), 0);
        let Decided::Now(r) = d.decide(b"a", true) else { panic!("decided") };
        assert_eq!(r, ok());
        // The replies go once; a second commit order learns that it was committed.
        let Decided::Now(r) = d.decide(b"a", true) else { panic!("decided") };
        assert!(matches!(r.kind, Some(reply::Kind::Error(e)) if e.contains("committed")));
        assert!(d.question(b"a"));
    }

    #[test]
    fn decided_records_are_swept_after_a_while_and_held_ones_never() {
        let d = Decisions::default();
        let _rx = held(&d, b"held");
        d.committed(b"old", None);
        // Age the old record past KEEP (as if decided long ago).
        d.entries.lock().decided[0].0 = Instant::now() - KEEP - Duration::from_secs(1);
        d.committed(b"new", None);
        assert_eq!(d.records(), 2, "the old record went, the held one and the new one stay");
        assert!(d.question(b"new"));
        assert_eq!(d.held(), 1);
    }
}
