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
    /// The node gave these slots away (`kept: false`) or took them back (`kept: true`, their
    /// leftovers reclaimed). A replica does the same at the same point of the stream, never by
    /// its own reading of the topology, which reaches it in no fixed order with the stream.
    Slots { kept: bool, slots: Vec<u16> },
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

/// The held changes, encoded one after another in one ring of bytes: no allocation per change,
/// and the backlog's bound is about the memory it takes (the ring grows by doubling up to it).
/// A change is a tag byte and then:
/// - `TAG_KEY`: key length (u32 LE), key;
/// - `TAG_VALUE`: key length, value length (u32 LE each), expiry (u64 LE), key, value;
/// - `TAG_UNIT`: key count (u32 LE), then each key as a `TAG_KEY` body;
/// - `TAG_RESYNC`: nothing;
/// - `TAG_DROPPED` / `TAG_KEPT`: slot count (u32 LE), then each slot (u16 LE).
#[derive(Debug, Default)]
struct Inner {
    /// Offset of the first change held.
    first: u64,
    data: VecDeque<u8>,
    /// Absolute byte position of `data[0]` (bytes ever dropped from the front).
    start: u64,
    /// Each held change's absolute end position, in order.
    ends: VecDeque<u64>,
    /// The backlog's bound, as of the last change recorded.
    cap: usize,
}

const TAG_KEY: u8 = 0;
const TAG_VALUE: u8 = 1;
const TAG_UNIT: u8 = 2;
const TAG_RESYNC: u8 = 3;
const TAG_DROPPED: u8 = 4;
const TAG_KEPT: u8 = 5;
/// What each held change costs besides its encoding (its entry in `ends`).
const PER_CHANGE: usize = 8;

impl Inner {
    fn end(&self) -> u64 {
        self.first + self.ends.len() as u64
    }

    /// Bytes held, as counted against the backlog.
    fn size(&self) -> usize {
        self.data.len() + self.ends.len() * PER_CHANGE
    }

    fn put(&mut self, bytes: &[u8]) {
        let need = self.data.len() + bytes.len();
        if need > self.data.capacity() {
            // Doubling, as a VecDeque grows, but not past the backlog (plus the change being
            // written, which may overshoot it until trimmed): the ring stays about its bound.
            let want = (self.data.capacity() * 2).min(self.cap.max(need) + bytes.len()).max(need);
            self.data.reserve_exact(want - self.data.len());
        }
        self.data.extend(bytes);
    }

    fn put_key(&mut self, key: &[u8]) {
        self.put(&(key.len() as u32).to_le_bytes());
        self.put(key);
    }

    /// Ends the change encoded since the last one.
    fn close(&mut self) {
        self.ends.push_back(self.start + self.data.len() as u64);
    }

    /// Drops the oldest changes until at most `cap` bytes are held (always keeping the newest).
    fn trim(&mut self, cap: usize) {
        while self.size() > cap && self.ends.len() > 1 {
            let end = self.ends.pop_front().expect("not empty");
            self.data.drain(..(end - self.start) as usize);
            self.start = end;
            self.first += 1;
        }
    }

    /// A copy of the encoded changes `skip..skip + n` (n > 0).
    fn copy(&self, skip: usize, n: usize) -> Vec<u8> {
        let from = if skip == 0 { self.start } else { self.ends[skip - 1] };
        let (a, b) = ((from - self.start) as usize, (self.ends[skip + n - 1] - self.start) as usize);
        let (front, back) = self.data.as_slices();
        let mut out = Vec::with_capacity(b - a);
        if a < front.len() {
            out.extend_from_slice(&front[a..b.min(front.len())]);
        }
        if b > front.len() {
            out.extend_from_slice(&back[a.saturating_sub(front.len())..b - front.len()]);
        }
        out
    }
}

/// Decodes `n` changes from `buf` (as [`Inner`] encodes them); their keys and values are slices
/// of it.
fn decode(buf: Bytes, n: usize) -> Vec<Change> {
    let u32_at = |at: usize| u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes")) as usize;
    let mut at = 0;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let tag = buf[at];
        at += 1;
        let change = match tag {
            TAG_KEY => {
                let len = u32_at(at);
                at += 4 + len;
                Change::Key(buf.slice(at - len..at))
            }
            TAG_VALUE => {
                let (klen, vlen) = (u32_at(at), u32_at(at + 4));
                let expire_at = u64::from_le_bytes(buf[at + 8..at + 16].try_into().expect("8 bytes"));
                at += 16;
                let key = buf.slice(at..at + klen);
                let value = buf.slice(at + klen..at + klen + vlen);
                at += klen + vlen;
                Change::Value(Recorded { key, value, expire_at })
            }
            TAG_UNIT => {
                let count = u32_at(at);
                at += 4;
                let mut keys = Vec::with_capacity(count);
                for _ in 0..count {
                    let len = u32_at(at);
                    at += 4 + len;
                    keys.push(buf.slice(at - len..at));
                }
                Change::Unit(keys)
            }
            TAG_RESYNC => Change::Resync,
            TAG_DROPPED | TAG_KEPT => {
                let count = u32_at(at);
                at += 4;
                let slots =
                    (0..count).map(|i| u16::from_le_bytes([buf[at + 2 * i], buf[at + 2 * i + 1]])).collect();
                at += 2 * count;
                Change::Slots { kept: tag == TAG_KEPT, slots }
            }
            other => unreachable!("the log never writes tag {other}"),
        };
        out.push(change);
    }
    out
}

#[derive(Debug)]
pub struct ChangeLog {
    active: AtomicBool,
    backlog_bytes: AtomicUsize,
    inner: Mutex<Inner>,
    /// Wakes the feeds when a change arrives.
    pub appended: tokio::sync::Notify,
    /// Changes recorded since the node started, log on or off, SETs aside (Redis's `dirty`, with
    /// `Shard::sets`: see `Store::dirty`).
    dirty: Dirty,
}

/// A counter striped over cache lines: each writer thread adds to its own line, so the
/// commonest writes never contend for one.
#[derive(Debug, Default)]
struct Dirty([Stripe; STRIPES]);

const STRIPES: usize = 8;

#[derive(Debug, Default)]
#[repr(align(128))]
struct Stripe(std::sync::atomic::AtomicU64);

impl Dirty {
    #[inline]
    fn add(&self) {
        let i = STRIPE.with(|s| *s);
        self.0[i].0.fetch_add(1, Ordering::Relaxed);
    }

    fn sum(&self) -> u64 {
        self.0.iter().map(|s| s.0.load(Ordering::Relaxed)).sum()
    }
}

impl Default for ChangeLog {
    fn default() -> Self {
        ChangeLog {
            active: AtomicBool::new(false),
            backlog_bytes: AtomicUsize::new(DEFAULT_BACKLOG_BYTES),
            inner: Mutex::default(),
            appended: tokio::sync::Notify::new(),
            dirty: Dirty::default(),
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

    /// Changes since the node started: each SET, expiry, eviction and FLUSHALL recorded here,
    /// and each other write op ([`ChangeLog::count`]).
    pub fn dirty(&self) -> u64 {
        self.dirty.sum()
    }

    /// Counts a write op whose keys are recorded with [`ChangeLog::keys`] (or not at all, the
    /// log being off): one per op, whether or not it changed anything (Redis counts changes,
    /// so its count stays put for a DEL of a missing key; this one does not).
    #[inline]
    pub fn count(&self) {
        self.dirty.add();
    }

    /// `key` changed (call after the change is applied).
    #[inline]
    pub fn key(&self, key: &[u8]) {
        self.dirty.add();
        if self.active() && !in_unit(|unit| unit.push(Bytes::copy_from_slice(key))) {
            self.push_keys(&[key]);
        }
    }

    /// `key` now holds the string `value`, expiring at `expire_at` (0: never). Call under the
    /// key's shard lock, after the change, so that the log holds a key's recorded values in the
    /// order they were applied. Inside a unit, or for a value over [`RECORDED_VALUE_MAX`], only
    /// the key is recorded.
    #[inline]
    /// The caller counts the change (`Shard::sets`).
    pub fn value(&self, key: &[u8], value: &[u8], expire_at: u64) {
        if !self.active() || in_unit(|unit| unit.push(Bytes::copy_from_slice(key))) {
            return;
        }
        if value.len() > RECORDED_VALUE_MAX {
            return self.push_keys(&[key]);
        }
        self.push(|inner| {
            inner.put(&[TAG_VALUE]);
            inner.put(&(key.len() as u32).to_le_bytes());
            inner.put(&(value.len() as u32).to_le_bytes());
            inner.put(&expire_at.to_le_bytes());
            inner.put(key);
            inner.put(value);
            inner.close();
        });
    }

    /// `keys` changed (one op's keys, already copied: recorded under one lock).
    pub fn keys(&self, keys: Vec<Bytes>) {
        if !self.active() || keys.is_empty() {
            return;
        }
        let mut keys = Some(keys);
        if !in_unit(|unit| unit.extend(keys.take().expect("once"))) {
            self.push_keys(&keys.expect("not taken"));
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
        self.dirty.add();
        if self.active() {
            self.push(|inner| {
                inner.put(&[TAG_RESYNC]);
                inner.close();
            });
        }
    }

    /// This node gave `slots` away (`kept: false`) or took them back (see [`Change::Slots`]).
    pub fn slots(&self, kept: bool, slots: &[u16]) {
        if slots.is_empty() || !self.active() {
            return;
        }
        self.push(|inner| {
            inner.put(&[if kept { TAG_KEPT } else { TAG_DROPPED }]);
            inner.put(&(slots.len() as u32).to_le_bytes());
            slots.iter().for_each(|s| inner.put(&s.to_le_bytes()));
            inner.close();
        });
    }

    /// Records each of `keys` as a change of its own.
    fn push_keys(&self, keys: &[impl AsRef<[u8]>]) {
        self.push(|inner| {
            for key in keys {
                inner.put(&[TAG_KEY]);
                inner.put_key(key.as_ref());
                inner.close();
            }
        });
    }

    /// Records `keys` as one unit.
    fn push_unit(&self, keys: &[Bytes]) {
        self.push(|inner| {
            inner.put(&[TAG_UNIT]);
            inner.put(&(keys.len() as u32).to_le_bytes());
            keys.iter().for_each(|k| inner.put_key(k));
            inner.close();
        });
    }

    /// Appends what `encode` writes (whole changes), then trims the backlog.
    fn push(&self, encode: impl FnOnce(&mut Inner)) {
        let cap = self.backlog_bytes.load(Ordering::Relaxed);
        {
            let mut inner = self.inner.lock();
            inner.cap = cap;
            encode(&mut inner);
            inner.trim(cap);
        }
        self.appended.notify_waiters();
    }

    /// The offset the next change will have (the offset of everything applied so far).
    pub fn end(&self) -> u64 {
        self.inner.lock().end()
    }

    /// Whether a replica at `offset` can continue from the backlog.
    pub fn holds(&self, offset: u64) -> bool {
        let inner = self.inner.lock();
        (inner.first..=inner.end()).contains(&offset)
    }

    /// Up to `max` changes from `from` on, taking up to `max_bytes` in the log (at least one
    /// change, whatever its size), and the offset after them. The bytes bound keeps the copy made
    /// under the log's lock, which writers wait for, short.
    pub fn read(&self, from: u64, max: usize, max_bytes: usize) -> Result<(Vec<Change>, u64), Behind> {
        let inner = self.inner.lock();
        if from < inner.first {
            return Err(Behind);
        }
        let skip = (from - inner.first) as usize;
        let mut n = inner.ends.len().saturating_sub(skip).min(max);
        if n == 0 {
            return Ok((Vec::new(), from));
        }
        let begin = if skip == 0 { inner.start } else { inner.ends[skip - 1] };
        let within = inner.ends.partition_point(|&end| end <= begin.saturating_add(max_bytes as u64));
        n = n.min(within.saturating_sub(skip).max(1));
        // One copy under the lock; decoded after it, into slices of that copy.
        let copy = inner.copy(skip, n);
        drop(inner);
        Ok((decode(Bytes::from(copy), n), from + n as u64))
    }
}

static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's line of [`Dirty`] (threads take them in turn).
    static STRIPE: usize = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES;
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
            1 => self.log.push_keys(&keys),
            _ => self.log.push_unit(&keys),
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
        let (changes, _) = log.read(0, 10, usize::MAX).unwrap();
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
        assert_eq!(
            log.read(4, 10, usize::MAX).unwrap().0,
            vec![Change::Key(b("alone"))],
            "a unit of one key is a key"
        );
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
        let (changes, _) = log.read(0, 10, usize::MAX).unwrap();
        assert_eq!(
            changes,
            vec![
                Change::Value(Recorded { key: b(b"k"), value: b(b"v1"), expire_at: 1234 }),
                Change::Key(b(b"big")),
                Change::Unit(vec![b(b"t"), b(b"u")]),
            ]
        );
    }

    /// A change's size in the ring (see [`Inner`]).
    fn encoded(c: &Change) -> usize {
        match c {
            Change::Key(k) => 1 + 4 + k.len(),
            Change::Value(v) => 1 + 16 + v.key.len() + v.value.len(),
            Change::Unit(keys) => 1 + 4 + keys.iter().map(|k| 4 + k.len()).sum::<usize>(),
            Change::Resync => 1,
            Change::Slots { slots, .. } => 1 + 4 + 2 * slots.len(),
        }
    }

    #[test]
    fn reads_give_back_what_was_recorded_across_the_rings_wrap_and_trims() {
        // A small backlog, so that the ring wraps and drops changes many times over; every read
        // of a held range must give back exactly the changes recorded there.
        let log = ChangeLog::default();
        log.set_backlog_bytes(700);
        log.activate();
        let mut model: Vec<Change> = Vec::new();
        let mut rng = fastrand::Rng::with_seed(7);
        let key =
            |rng: &mut fastrand::Rng| Bytes::from(format!("k{}", rng.u32(..1000)).repeat(rng.usize(1..4)));
        for _ in 0..3000 {
            let change = match rng.u8(..10) {
                0..=3 => {
                    let k = key(&mut rng);
                    log.key(&k);
                    Change::Key(k)
                }
                4..=7 => {
                    let (k, v, at) =
                        (key(&mut rng), Bytes::from(vec![rng.u8(..); rng.usize(..40)]), rng.u64(..));
                    log.value(&k, &v, at);
                    Change::Value(Recorded { key: k, value: v, expire_at: at })
                }
                8 => {
                    let mut keys: Vec<Bytes> =
                        (0..rng.usize(2..5)).map(|i| Bytes::from(format!("u{i}"))).collect();
                    keys.sort_unstable();
                    {
                        let _unit = log.unit();
                        keys.iter().for_each(|k| log.key(k));
                    }
                    Change::Unit(keys)
                }
                9 if rng.bool() => {
                    log.resync();
                    Change::Resync
                }
                _ => {
                    let (kept, slots): (bool, Vec<u16>) =
                        (rng.bool(), (0..rng.usize(1..6)).map(|_| rng.u16(..16384)).collect());
                    log.slots(kept, &slots);
                    Change::Slots { kept, slots }
                }
            };
            model.push(change);
            let end = log.end();
            assert_eq!(end, model.len() as u64);
            let first = (0..=end).find(|&o| log.holds(o)).expect("the newest change is held");
            assert!(end - first < 200, "the backlog bound drops old changes");
            let from = rng.u64(first..=end);
            let max = rng.usize(1..20);
            let want = &model[from as usize..(from as usize + max).min(model.len())];
            let (changes, next) = log.read(from, max, usize::MAX).expect("held");
            assert_eq!(changes, want);
            assert_eq!(next, from + want.len() as u64);
            // With a bytes bound: the longest prefix that fits, but never nothing.
            let bound = rng.usize(1..200);
            let (changes, next) = log.read(from, max, bound).expect("held");
            let mut fits = 0;
            let mut used = 0;
            for c in want {
                used += encoded(c);
                if used > bound && fits > 0 {
                    break;
                }
                fits += 1;
            }
            let fits = fits.min(want.len());
            assert_eq!(changes, &want[..fits], "bound {bound}");
            assert_eq!(next, from + fits as u64);
            if first > 0 {
                assert_eq!(log.read(first - 1, 1, usize::MAX), Err(Behind));
            }
        }
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
        let (changes, next) = log.read(1, 10, usize::MAX).unwrap();
        assert_eq!(changes, vec![Change::Resync, Change::Key(Bytes::from_static(b"b"))]);
        assert_eq!(next, 3);
        let (changes, next) = log.read(0, 1, usize::MAX).unwrap();
        assert_eq!((changes.len(), next), (1, 1));
    }

    #[test]
    fn a_reader_behind_the_backlog_is_told_so() {
        let log = ChangeLog::default();
        // A change of a one-byte key: tag, length, key, its end position.
        log.set_backlog_bytes(3 * (1 + 4 + 1 + PER_CHANGE));
        log.activate();
        for k in [b"a", b"b", b"c", b"d", b"e"] {
            log.key(k);
        }
        assert_eq!(log.end(), 5);
        assert_eq!(log.read(0, 10, usize::MAX), Err(Behind));
        assert!(!log.holds(1) && log.holds(2) && log.holds(5) && !log.holds(6));
        let (changes, _) = log.read(2, 10, usize::MAX).unwrap();
        assert_eq!(changes.len(), 3);
    }
}
