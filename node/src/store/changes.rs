//! The change log replicas follow: which keys changed, in the order they changed, each change
//! numbered by an offset.
//!
//! The log mostly holds key *names*, not values: a replica's feed (`node/src/replication`) reads
//! each key's state when it ships the change, so whatever a write did (a list push, a script, a
//! transaction, a random SPOP, an expiry or an eviction) the replica ends up with the state the
//! primary has. Every change is recorded *after* it is applied, so the state read for it is at
//! least as new as the change. A FLUSHALL is recorded as [`Change::Resync`]: the feed sends a
//! full copy again from there (reading states after the flush record cannot mistake a key
//! written before the flush for one written after it).
//!
//! The one exception is the commonest write: a string SET records the state it left
//! ([`Change::Value`], for values up to [`RECORDED_VALUE_MAX`] bytes), so the feed need not look
//! the key up again (that second lookup, a cache miss on a large keyspace, was most of what
//! feeding a replica cost a primary). It is recorded under the key's shard lock, so a key's
//! recorded values are in the log in the order they were applied; a feed that also meets a
//! name-only change of the key reads the store instead, which is never older (see
//! `replication/feed.rs`).
//!
//! A transaction or a script records its keys as one [`Change::Unit`] (they are collected on
//! the thread that runs it while a [`UnitGuard`] lives), so that a feed never ships part of one:
//! the feed reads every change up to the log's end and their keys' states while no transaction
//! or script can run, and the replica applies what it gets as one unit.
//!
//! The log is off until the first replica connects (then each change costs a lock and a copy of
//! the key, and of a SET's value; off, one relaxed load). It keeps at most `backlog_bytes` of key
//! names and values: a replica whose offset has left the backlog gets a full sync instead.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;

/// Default backlog: key names and recorded values worth this many bytes (Redis's
/// repl-backlog-size is 1mb of commands; most changes here are a key name, smaller than the
/// command that changed it, or a small SET's key and value, about its size).
pub const DEFAULT_BACKLOG_BYTES: usize = 16 << 20;

/// A SET of a larger value records only its key (the feed reads the value from the store): the
/// log never holds a second copy of a large value.
pub const RECORDED_VALUE_MAX: usize = 4 << 10;

/// Per-change overhead counted against the backlog besides the key itself.
const CHANGE_OVERHEAD: usize = 32;

/// What a change counts against the backlog.
fn size(change: &Change) -> usize {
    match change {
        Change::Key(k) => k.len() + CHANGE_OVERHEAD,
        Change::Value(v) => v.key.len() + v.value.len() + CHANGE_OVERHEAD,
        Change::Unit(keys) => keys.iter().map(|k| k.len() + CHANGE_OVERHEAD).sum(),
        Change::Resync => CHANGE_OVERHEAD,
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// This key changed (it may no longer exist).
    Key(Bytes),
    /// A string SET left this state (recorded under the key's shard lock).
    Value(Recorded),
    /// These keys changed together (a transaction or a script): shipped together.
    Unit(Vec<Bytes>),
    /// Everything changed (FLUSHALL): send everything again.
    Resync,
}

/// The state a string SET left: its key, value and expiry (Unix ms, 0: none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub key: Bytes,
    pub value: Bytes,
    pub expire_at: u64,
}

/// The replica's offset has left the backlog: it needs a full sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Behind;

#[derive(Debug, Default)]
struct Inner {
    /// Offset of `changes[0]`.
    first: u64,
    changes: VecDeque<Change>,
    bytes: usize,
}

#[derive(Debug)]
pub struct ChangeLog {
    active: AtomicBool,
    backlog_bytes: AtomicUsize,
    inner: Mutex<Inner>,
    /// Wakes the feeds when a change arrives.
    pub appended: tokio::sync::Notify,
}

impl Default for ChangeLog {
    fn default() -> Self {
        ChangeLog {
            active: AtomicBool::new(false),
            backlog_bytes: AtomicUsize::new(DEFAULT_BACKLOG_BYTES),
            inner: Mutex::default(),
            appended: tokio::sync::Notify::new(),
        }
    }
}

impl ChangeLog {
    /// Whether changes are being recorded (a replica has connected since the node started).
    #[inline]
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Starts recording (the first replica connects); whether it was off until now. Changes
    /// before this are in no log: the replica's full sync, which starts after this, covers them.
    pub fn activate(&self) -> bool {
        !self.active.swap(true, Ordering::SeqCst)
    }

    pub fn set_backlog_bytes(&self, bytes: usize) {
        self.backlog_bytes.store(bytes.max(1), Ordering::Relaxed);
    }

    /// `key` changed (call after the change is applied).
    #[inline]
    pub fn key(&self, key: &[u8]) {
        if self.active() && !in_unit(|unit| unit.push(Bytes::copy_from_slice(key))) {
            self.push(std::iter::once(Change::Key(Bytes::copy_from_slice(key))));
        }
    }

    /// `key` now holds the string `value`, expiring at `expire_at` (0: never). Call under the
    /// key's shard lock, after the change, so that the log holds a key's recorded values in the
    /// order they were applied. Inside a unit, or for a value over [`RECORDED_VALUE_MAX`], only
    /// the key is recorded.
    #[inline]
    pub fn value(&self, key: &[u8], value: &[u8], expire_at: u64) {
        if !self.active() || in_unit(|unit| unit.push(Bytes::copy_from_slice(key))) {
            return;
        }
        let change = if value.len() <= RECORDED_VALUE_MAX {
            // One allocation for both.
            let both = Bytes::from([key, value].concat());
            Change::Value(Recorded {
                key: both.slice(..key.len()),
                value: both.slice(key.len()..),
                expire_at,
            })
        } else {
            Change::Key(Bytes::copy_from_slice(key))
        };
        self.push(std::iter::once(change));
    }

    /// `keys` changed (one op's keys, already copied: recorded under one lock).
    pub fn keys(&self, keys: Vec<Bytes>) {
        if !self.active() || keys.is_empty() {
            return;
        }
        let mut keys = Some(keys);
        if !in_unit(|unit| unit.extend(keys.take().expect("once"))) {
            self.push(keys.expect("not taken").into_iter().map(Change::Key));
        }
    }

    /// Collects the changes recorded on this thread until the guard drops, then records them as
    /// one [`Change::Unit`] (a transaction or a script; take it under the store's exclusive gate
    /// and drop it before the gate). A guard taken inside another adds to the outer one.
    pub fn unit(&self) -> UnitGuard<'_> {
        let outer = UNIT.with(|u| {
            let mut u = u.borrow_mut();
            u.is_none().then(|| *u = Some(Vec::new())).is_some()
        });
        UnitGuard { log: self, outer }
    }

    /// Every key changed (FLUSHALL; call after it is applied).
    pub fn resync(&self) {
        if self.active() {
            self.push(std::iter::once(Change::Resync));
        }
    }

    #[cold]
    fn push(&self, changes: impl Iterator<Item = Change>) {
        let cap = self.backlog_bytes.load(Ordering::Relaxed);
        {
            let mut inner = self.inner.lock();
            for change in changes {
                inner.bytes += size(&change);
                inner.changes.push_back(change);
            }
            while inner.bytes > cap && inner.changes.len() > 1 {
                let dropped = inner.changes.pop_front().expect("not empty");
                inner.first += 1;
                inner.bytes -= size(&dropped);
            }
        }
        self.appended.notify_waiters();
    }

    /// The offset the next change will have (the offset of everything applied so far).
    pub fn end(&self) -> u64 {
        let inner = self.inner.lock();
        inner.first + inner.changes.len() as u64
    }

    /// Whether a replica at `offset` can continue from the backlog.
    pub fn holds(&self, offset: u64) -> bool {
        let inner = self.inner.lock();
        (inner.first..=inner.first + inner.changes.len() as u64).contains(&offset)
    }

    /// Up to `max` changes from `from` on, and the offset after them.
    pub fn read(&self, from: u64, max: usize) -> Result<(Vec<Change>, u64), Behind> {
        let inner = self.inner.lock();
        if from < inner.first {
            return Err(Behind);
        }
        let skip = (from - inner.first) as usize;
        let out: Vec<Change> = inner.changes.iter().skip(skip).take(max).cloned().collect();
        let next = from + out.len() as u64;
        Ok((out, next))
    }
}

thread_local! {
    /// The keys of the unit this thread is running, if any (see [`ChangeLog::unit`]).
    static UNIT: RefCell<Option<Vec<Bytes>>> = const { RefCell::new(None) };
}

/// Runs `add` on this thread's unit; false if no unit is open.
fn in_unit(add: impl FnOnce(&mut Vec<Bytes>)) -> bool {
    UNIT.with(|u| match u.borrow_mut().as_mut() {
        Some(unit) => {
            add(unit);
            true
        }
        None => false,
    })
}

/// An open unit (see [`ChangeLog::unit`]).
pub struct UnitGuard<'a> {
    log: &'a ChangeLog,
    outer: bool,
}

impl Drop for UnitGuard<'_> {
    fn drop(&mut self) {
        if !self.outer {
            return;
        }
        let mut keys = UNIT.with(|u| u.borrow_mut().take()).unwrap_or_default();
        keys.sort_unstable();
        keys.dedup();
        match keys.len() {
            0 => {}
            1 => self.log.push(keys.into_iter().map(Change::Key)),
            _ => self.log.push(std::iter::once(Change::Unit(keys))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_is_one_change_and_other_threads_are_not_in_it() {
        let log = std::sync::Arc::new(ChangeLog::default());
        log.activate();
        log.key(b"before");
        {
            let _unit = log.unit();
            log.key(b"b");
            log.keys(vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")]);
            {
                let _inner = log.unit();
                log.key(b"c");
            }
            // Another thread's change (an expiry, say) is its own.
            let other = log.clone();
            std::thread::spawn(move || other.key(b"elsewhere")).join().unwrap();
            assert_eq!(log.end(), 2, "nothing of the unit is recorded before it ends");
        }
        log.key(b"after");
        let (changes, _) = log.read(0, 10).unwrap();
        let b = |s: &'static str| Bytes::from_static(s.as_bytes());
        assert_eq!(
            changes,
            vec![
                Change::Key(b("before")),
                Change::Key(b("elsewhere")),
                Change::Unit(vec![b("a"), b("b"), b("c")]),
                Change::Key(b("after")),
            ]
        );
        {
            let _unit = log.unit();
            log.key(b"alone");
        }
        assert_eq!(log.read(4, 10).unwrap().0, vec![Change::Key(b("alone"))], "a unit of one key is a key");
    }

    #[test]
    fn a_set_records_its_value_except_in_a_unit_or_when_large() {
        let log = ChangeLog::default();
        log.value(b"off", b"v", 0);
        assert_eq!(log.end(), 0, "nothing recorded before a replica connects");
        log.activate();
        log.value(b"k", b"v1", 1234);
        let big = vec![7u8; RECORDED_VALUE_MAX + 1];
        log.value(b"big", &big, 0);
        {
            let _unit = log.unit();
            log.value(b"t", b"x", 0);
            log.value(b"u", b"y", 0);
        }
        let b = |s: &'static [u8]| Bytes::from_static(s);
        let (changes, _) = log.read(0, 10).unwrap();
        assert_eq!(
            changes,
            vec![
                Change::Value(Recorded { key: b(b"k"), value: b(b"v1"), expire_at: 1234 }),
                Change::Key(b(b"big")),
                Change::Unit(vec![b(b"t"), b(b"u")]),
            ]
        );
    }

    #[test]
    fn records_only_once_active_and_numbers_changes() {
        let log = ChangeLog::default();
        log.key(b"before");
        assert_eq!(log.end(), 0, "nothing recorded before a replica connects");
        log.activate();
        log.key(b"a");
        log.resync();
        log.key(b"b");
        assert_eq!(log.end(), 3);
        let (changes, next) = log.read(1, 10).unwrap();
        assert_eq!(changes, vec![Change::Resync, Change::Key(Bytes::from_static(b"b"))]);
        assert_eq!(next, 3);
        let (changes, next) = log.read(0, 1).unwrap();
        assert_eq!((changes.len(), next), (1, 1));
    }

    #[test]
    fn a_reader_behind_the_backlog_is_told_so() {
        let log = ChangeLog::default();
        log.set_backlog_bytes(3 * (CHANGE_OVERHEAD + 1));
        log.activate();
        for k in [b"a", b"b", b"c", b"d", b"e"] {
            log.key(k);
        }
        assert_eq!(log.end(), 5);
        assert_eq!(log.read(0, 10), Err(Behind));
        assert!(!log.holds(1) && log.holds(2) && log.holds(5) && !log.holds(6));
        let (changes, _) = log.read(2, 10).unwrap();
        assert_eq!(changes.len(), 3);
    }
}
