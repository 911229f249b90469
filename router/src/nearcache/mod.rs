//! The router's near cache (`--near-cache <size>`): string values read by GET and MGET, kept in
//! the router's memory and served without a node hop, kept coherent by the nodes'
//! invalidations (node/src/store/tracking.rs). docs/near-cache.md states what a reader can see.
//!
//! - A miss is fetched with the router's tracking token (`Get.track`); the node registers the
//!   key for this router *before* reading it and answers `tracked` (value and remaining TTL) only
//!   if it did. Only such replies are inserted, with a local expiry no later than the key's.
//! - Invalidations come on the owner's `Subscribe` stream ([`crate::pubsub::link`]), a different
//!   stream from the reply's, so one may overtake a reply that read the old value. A fetch takes
//!   a [`Ticket`] first (the invalidation sequence number, the topology version, the owner
//!   stream's generation); the reply is inserted only if no invalidation of that key, no flush
//!   and no topology change happened since (invalidations are remembered per shard, a bounded
//!   ring of key hashes; a ticket older than the ring's oldest entry is refused).
//! - Writes through this router drop the key's entry before they are sent (also an invalidation
//!   in the above sense), so a client reads its own writes.
//! - Hits are served only while the owner's stream is fresh: the link pings the node on it every
//!   100 ms with this router's clock, and the node answers behind every invalidation it queued
//!   before; hits are allowed for a lease after the send time of the latest ping answered. So a
//!   value is never served longer than the lease after the node queued its invalidation,
//!   however the stream is delayed, with no clock shared between machines. A stream that broke
//!   empties that node's entries. Each entry carries the topology version it was read at: once
//!   any node reports a newer version no hit is served until the router routes by it, and then
//!   entries of slots whose owner changed (or that are moving) go, the others carry over; so
//!   entries never outlive an owner change, a failover or a slot move.
//! - Memory is bounded in bytes (keys, values and a fixed overhead per entry), per shard, with
//!   CLOCK eviction (an entry read since the hand last passed gets a second chance). An entry
//!   holds a copy of its key and value, in itself when they are short (up to 62 bytes together)
//!   or else in one allocation of its own: it pins no client read buffer or node reply it was
//!   cut from (so the bound counts what is held), and a hit's key compare and value copy read the
//!   same memory (hits on a large cache are cache misses, not instructions).
//!
//! Off (no `--near-cache`), the request path pays one `Option` check in GET, MGET and the
//! backend's write hook.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;

use hashbrown::HashTable;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use shoal_telemetry::metrics::Counter;

/// Bytes an entry costs besides its key and value: its table slot (the entry and a control
/// byte), its ring slot, and the allocator's header on its key-and-value allocation (counted for
/// short ones held in the entry too: the bound errs on the safe side).
pub const ENTRY_OVERHEAD: usize = std::mem::size_of::<Entry>() + 1 + std::mem::size_of::<(u64, u64)>() + 16;
/// Invalidations remembered per shard for the race check (older tickets are refused).
const RECENT: usize = 1024;
/// How often the links ping their node (`SubscribeRequest.ping`).
pub const PING_EVERY: Duration = Duration::from_millis(100);
/// Default lease: three ping periods.
pub const DEFAULT_LEASE: Duration = Duration::from_millis(300);
const SHARDS: usize = 16;
/// Values up to this size are copied out of a hit, larger ones shared ([`Entry::value`]).
pub const COPY_OUT: usize = 256;

/// Counters for /metrics.
#[derive(Debug, Default)]
pub struct NearMetrics {
    pub hits: Counter,
    pub misses: Counter,
    pub inserts: Counter,
    /// Replies not inserted because the key changed (or might have) while they were on the way.
    pub refused: Counter,
    /// Invalidations received from nodes (keys; an invalidate-all counts one).
    pub invalidations: Counter,
    pub evictions: Counter,
    pub bytes: AtomicUsize,
    pub entries: AtomicUsize,
}

/// What this router knows of one node's `Subscribe` stream: whether invalidations flow, and
/// when it last heard from it.
#[derive(Debug)]
pub struct NodeLease {
    /// The stream is open and the node has been asked to track.
    up: AtomicBool,
    /// When (ms since the cache's start) the latest ping the node answered was sent.
    heard: AtomicU64,
    /// Bumped when the stream breaks: entries and tickets of an older generation are void.
    generation: AtomicU64,
}

impl NodeLease {
    fn fresh(&self, now_ms: u64, lease_ms: u64) -> bool {
        self.up.load(Ordering::Acquire)
            && now_ms.saturating_sub(self.heard.load(Ordering::Acquire)) < lease_ms
    }
}

/// Taken before a miss is fetched: what must not have changed for its reply to be inserted.
#[derive(Debug, Clone)]
pub struct Ticket {
    seq: u64,
    version: u64,
    lease: Arc<NodeLease>,
    generation: u64,
    sent: Instant,
}

/// Key and value bytes up to this many live in the entry itself ([`Data::Inline`]): with the
/// rest of the entry that fills its two cache lines.
const INLINE: usize = 62;

/// An entry's `key ++ value`, copied (see the module docs).
#[derive(Debug)]
enum Data {
    /// Short ones in the entry itself: a hit then reads no memory but its table slot.
    Inline { len: u8, bytes: [u8; INLINE] },
    /// Longer ones in an allocation of their own.
    Heap(Bytes),
}

impl Data {
    fn new(key: &[u8], value: &[u8]) -> Data {
        let len = key.len() + value.len();
        if len <= INLINE {
            let mut bytes = [0u8; INLINE];
            bytes[..key.len()].copy_from_slice(key);
            bytes[key.len()..len].copy_from_slice(value);
            return Data::Inline { len: len as u8, bytes };
        }
        let mut data = Vec::with_capacity(len);
        data.extend_from_slice(key);
        data.extend_from_slice(value);
        Data::Heap(Bytes::from(data))
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Data::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Data::Heap(b) => b,
        }
    }
}

/// A hit's value as the cache hands it out: a short one to copy while its shard is locked, a
/// longer one shared.
#[derive(Debug)]
pub enum NearValue<'a> {
    Short(&'a [u8]),
    Shared(Bytes),
}

impl NearValue<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            NearValue::Short(v) => v.len(),
            NearValue::Shared(v) => v.len(),
        }
    }

    pub fn to_bytes(self) -> Bytes {
        match self {
            NearValue::Short(v) => Bytes::copy_from_slice(v),
            NearValue::Shared(v) => v,
        }
    }
}

/// Aligned to a cache line so that an entry (128 bytes) spans exactly two.
#[derive(Debug)]
#[repr(align(64))]
struct Entry {
    data: Data,
    key_len: usize,
    expires: Option<Instant>,
    version: u64,
    lease: Arc<NodeLease>,
    generation: u64,
    /// Read since the CLOCK hand last passed.
    referenced: bool,
    /// Tells this entry from an earlier one of the same key in the ring.
    id: u64,
}

fn cost(key: &[u8], value: &[u8]) -> usize {
    key.len() + value.len() + ENTRY_OVERHEAD
}

impl Entry {
    fn key(&self) -> &[u8] {
        &self.data.bytes()[..self.key_len]
    }

    /// A hit's value. Small ones are copied out: the copy reads memory the key compare just
    /// read, where sharing would touch the buffer's reference count, held apart from it (one more
    /// cache miss per hit on a large cache: measured, a copy of 32 bytes is cheaper).
    fn value(&self) -> NearValue<'_> {
        match &self.data {
            Data::Heap(b) if b.len() - self.key_len > COPY_OUT => NearValue::Shared(b.slice(self.key_len..)),
            data => NearValue::Short(&data.bytes()[self.key_len..]),
        }
    }

    fn cost(&self) -> usize {
        self.data.bytes().len() + ENTRY_OVERHEAD
    }
}

#[derive(Debug, Default)]
struct Shard {
    /// Entries by the key's hash ([`NearCache::locate`]'s: a hit hashes its key once; foldhash,
    /// as SipHash made hashing a tenth of a hit's cost). The shard was chosen by other bits of
    /// that hash than the table uses.
    map: HashTable<Entry>,
    /// CLOCK ring: (key hash, entry id) in insertion order (stale pairs are skipped).
    ring: VecDeque<(u64, u64)>,
    bytes: usize,
    /// (sequence number, key hash) of recent invalidations, oldest first.
    recent: VecDeque<(u64, u64)>,
    /// The newest sequence number that left `recent` (tickets older than it are refused).
    forgotten: u64,
    next_id: u64,
}

impl Shard {
    fn remove(&mut self, hash: u64, key: &[u8], metrics: &NearMetrics) -> bool {
        self.remove_where(hash, |e| e.key() == key, metrics)
    }

    fn remove_where(&mut self, hash: u64, is: impl FnMut(&Entry) -> bool, metrics: &NearMetrics) -> bool {
        match self.map.find_entry(hash, is) {
            Ok(found) => {
                let (e, _) = found.remove();
                self.forget(&e, metrics);
                true
            }
            Err(_) => false,
        }
    }

    /// Keeps the entries `keep` says so of (it may change them), and accounts for the others.
    fn retain(&mut self, metrics: &NearMetrics, mut keep: impl FnMut(&mut Entry) -> bool) {
        let mut gone = 0;
        self.map.retain(|e| {
            let k = keep(e);
            if !k {
                gone += e.cost();
                metrics.entries.fetch_sub(1, Ordering::Relaxed);
            }
            k
        });
        self.bytes -= gone;
        metrics.bytes.fetch_sub(gone, Ordering::Relaxed);
    }

    fn forget(&mut self, e: &Entry, metrics: &NearMetrics) {
        self.bytes -= e.cost();
        metrics.bytes.fetch_sub(e.cost(), Ordering::Relaxed);
        metrics.entries.fetch_sub(1, Ordering::Relaxed);
    }

    fn remember(&mut self, seq: u64, hash: u64) {
        self.recent.push_back((seq, hash));
        if self.recent.len() > RECENT
            && let Some((s, _)) = self.recent.pop_front()
        {
            self.forgotten = s;
        }
    }

    /// Evicts with the CLOCK hand until `need` more bytes fit in `cap`; false if they cannot.
    fn make_room(&mut self, need: usize, cap: usize, metrics: &NearMetrics) -> bool {
        if need > cap {
            return false;
        }
        // Each ring slot is visited at most twice (once to clear its bit, once to evict).
        let mut budget = self.ring.len() * 2 + 1;
        while self.bytes + need > cap && budget > 0 {
            budget -= 1;
            let Some((hash, id)) = self.ring.pop_front() else { break };
            match self.map.find_entry(hash, |e| e.id == id) {
                Ok(mut found) if found.get().referenced => {
                    found.get_mut().referenced = false;
                    self.ring.push_back((hash, id));
                }
                Ok(found) => {
                    let (e, _) = found.remove();
                    self.forget(&e, metrics);
                    metrics.evictions.inc();
                }
                Err(_) => {} // a stale slot: its entry went or was replaced
            }
        }
        self.bytes + need <= cap
    }
}

/// The near cache of one router.
#[derive(Debug)]
pub struct NearCache {
    shards: Box<[Mutex<Shard>]>,
    shard_cap: usize,
    hasher: hashbrown::DefaultHashBuilder,
    /// Invalidation sequence: every invalidation and flush takes the next number.
    seq: AtomicU64,
    /// The sequence number of the latest flush: tickets taken before it are void.
    flushed: AtomicU64,
    /// The newest topology version some node reported (hits wait until it is routed by).
    newest: AtomicU64,
    /// This router's identity in the nodes' tracking tables.
    pub token: u64,
    lease_ms: u64,
    start: Instant,
    leases: RwLock<HashMap<(u32, String), Arc<NodeLease>>>,
    pub metrics: NearMetrics,
}

impl NearCache {
    pub fn new(capacity: usize, lease: Duration) -> NearCache {
        NearCache {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            shard_cap: capacity / SHARDS,
            hasher: hashbrown::DefaultHashBuilder::default(),
            seq: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
            newest: AtomicU64::new(0),
            token: fastrand::u64(1..),
            lease_ms: lease.as_millis().max(1) as u64,
            start: Instant::now(),
            leases: RwLock::default(),
            metrics: NearMetrics::default(),
        }
    }

    pub fn capacity(&self) -> usize {
        self.shard_cap * SHARDS
    }

    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    fn now_ms(&self) -> u64 {
        self.ms_at(Instant::now())
    }

    fn ms_at(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.start).as_millis() as u64
    }

    /// The key's hash and shard. The shard is chosen by bits 32 and up: the shard's table uses
    /// the low bits (bucket) and the top 7 (tag), which must vary among a shard's keys.
    fn locate(&self, key: &[u8]) -> (u64, &Mutex<Shard>) {
        let h = self.hasher.hash_one(key);
        (h, &self.shards[Self::shard_index(h)])
    }

    fn shard_index(hash: u64) -> usize {
        ((hash >> 32) as usize) % SHARDS
    }

    /// The lease of node `id` at `addr` (created on first use).
    pub fn lease_of(&self, id: u32, addr: &str) -> Arc<NodeLease> {
        if let Some(l) = self.leases.read().get(&(id, addr.to_string())) {
            return l.clone();
        }
        self.leases
            .write()
            .entry((id, addr.to_string()))
            .or_insert_with(|| {
                Arc::new(NodeLease {
                    up: AtomicBool::new(false),
                    heard: AtomicU64::new(0),
                    generation: AtomicU64::new(0),
                })
            })
            .clone()
    }

    /// What to ping the node with now (this cache's clock, never 0).
    pub fn ping(&self) -> u64 {
        self.now_ms() + 1
    }

    /// The node answered `ping` (a value from [`ping`](Self::ping)): every invalidation it
    /// queued before the ping reached it has been applied here, so hits may be served until a
    /// lease after the ping was *sent* (a pong that took long buys little).
    pub fn pong(&self, lease: &NodeLease, ping: u64) {
        lease.heard.fetch_max(ping - 1, Ordering::AcqRel);
        lease.up.store(true, Ordering::Release);
    }

    /// The node's stream broke (or is being replaced): nothing of it is served any more, and
    /// fetches in flight are not inserted.
    pub fn node_down(&self, lease: &Arc<NodeLease>) {
        lease.up.store(false, Ordering::Release);
        lease.generation.fetch_add(1, Ordering::AcqRel);
        self.flushed.store(self.seq.fetch_add(1, Ordering::AcqRel) + 1, Ordering::Release);
        for shard in self.shards.iter() {
            shard.lock().retain(&self.metrics, |e| !Arc::ptr_eq(&e.lease, lease));
        }
    }

    /// A node serves topology `version`: until this router routes by it (or a newer one), no hit
    /// is served (slots may have changed owners, so a key's writes may go where its entry is not
    /// tracked), while what is cached stays for [`adopted`](Self::adopted) to sort out.
    pub fn saw_version(&self, version: u64) {
        self.newest.fetch_max(version, Ordering::AcqRel);
    }

    /// The router routes by `new` (after `old`): entries of slots whose owner did not change
    /// (`changed[slot]` false) carry over, the others go. Entries of any other version go too.
    pub fn adopted(&self, old: u64, new: u64, changed: &[bool]) {
        for shard in self.shards.iter() {
            shard.lock().retain(&self.metrics, |e| {
                if e.version == new {
                    return true;
                }
                let slot = usize::from(shoal_wire::key_slot(e.key()));
                let kept = e.version == old && !changed.get(slot).copied().unwrap_or(true);
                if kept {
                    e.version = new;
                }
                kept
            });
        }
    }

    /// A cached value of `key` to serve now (routed by topology `version`), if there is one.
    pub fn get(&self, key: &[u8], version: u64) -> Option<Bytes> {
        self.get_at(key, version, Instant::now())
    }

    /// [`get`](Self::get) with the TTL and the lease checked as of `now`, a time read shortly
    /// before: the fast path's lane passes the time it took up the read buffer the request came
    /// in (at most the work on that one buffer ago, never across an await), so that a hit costs
    /// no clock read.
    pub fn get_at(&self, key: &[u8], version: u64, now: Instant) -> Option<Bytes> {
        self.lookup(key, version, now, true, |v| v.to_bytes())
    }

    /// [`get_at`](Self::get_at) for a caller that writes the value out itself: `f` gets it while
    /// its shard is locked (a short one is copied once, into the reply). A miss is not counted:
    /// the caller then runs the request as usual, whose lookup counts it.
    pub fn hit_at<R>(
        &self,
        key: &[u8],
        version: u64,
        now: Instant,
        f: impl FnOnce(NearValue<'_>) -> R,
    ) -> Option<R> {
        self.lookup(key, version, now, false, f)
    }

    fn lookup<R>(
        &self,
        key: &[u8],
        version: u64,
        now: Instant,
        count_miss: bool,
        f: impl FnOnce(NearValue<'_>) -> R,
    ) -> Option<R> {
        let miss = || {
            if count_miss {
                self.metrics.misses.inc();
            }
            None
        };
        let (hash, shard) = self.locate(key);
        let mut s = shard.lock();
        let Some(e) = s.map.find_mut(hash, |e| e.key() == key) else {
            drop(s);
            return miss();
        };
        let expired = e.expires.is_some_and(|at| at <= now);
        let void = e.lease.generation.load(Ordering::Acquire) != e.generation;
        if expired || void {
            s.remove(hash, key, &self.metrics);
            drop(s);
            return miss();
        }
        // Another version: left for `adopted` (it carries entries of unchanged slots over).
        if e.version != version || version < self.newest.load(Ordering::Acquire) {
            drop(s);
            return miss();
        }
        if !e.lease.fresh(self.ms_at(now), self.lease_ms) {
            // Silent node: invalidations may be late; ask it (the reply replaces the entry).
            drop(s);
            return miss();
        }
        e.referenced = true;
        let r = f(e.value());
        drop(s);
        self.metrics.hits.inc();
        Some(r)
    }

    /// Touches the memory that looking `keys` up will read (table slot, entry, key bytes), shard
    /// by shard, one lock each: a read buffer's hits then find it in cache. Looked up one by one
    /// between the rest of each request's work, every hit's misses wait in turn; a tight loop
    /// of independent lookups lets the CPU overlap them. Changes nothing; returns how many of
    /// `keys` it found (a key given twice counts twice).
    pub fn warm<'a>(&self, keys: impl Iterator<Item = &'a [u8]>) -> usize {
        let mut located: Vec<(usize, u64, &[u8])> = keys
            .map(|key| {
                let h = self.hasher.hash_one(key);
                (Self::shard_index(h), h, key)
            })
            .collect();
        if located.len() < 2 {
            return 0;
        }
        located.sort_unstable_by_key(|&(shard, ..)| shard);
        let mut seen = 0u64;
        let mut found = 0;
        for run in located.chunk_by(|a, b| a.0 == b.0) {
            let s = self.shards[run[0].0].lock();
            for &(_, hash, key) in run {
                // The fields a hit reads, which may lie on the entry's other cache line.
                if let Some(e) = s.map.find(hash, |e| e.key() == key) {
                    seen ^= e.version ^ e.generation ^ e.expires.is_some() as u64;
                    found += 1;
                }
            }
        }
        std::hint::black_box(seen);
        found
    }

    /// Before fetching a miss from the node behind `lease` at topology `version`: the ticket
    /// its reply is inserted with, or `None` when that node's invalidations do not flow now
    /// (fetch without tracking; nothing is inserted).
    pub fn ticket(&self, lease: &Arc<NodeLease>, version: u64) -> Option<Ticket> {
        // The sequence number first: a stream break after it voids the ticket (it bumps the
        // generation and the flush number).
        let seq = self.seq.load(Ordering::Acquire);
        if !lease.up.load(Ordering::Acquire) {
            return None;
        }
        Some(Ticket {
            seq,
            version,
            lease: lease.clone(),
            generation: lease.generation.load(Ordering::Acquire),
            sent: Instant::now(),
        })
    }

    /// A tracked reply for `key` fetched with `ticket`, while routing by `version` now. Inserted
    /// unless something may have changed the key since the ticket was taken.
    pub fn insert(&self, key: &[u8], value: &[u8], ttl_ms: u64, ticket: &Ticket, version: u64) -> bool {
        let need = cost(key, value);
        let (hash, shard) = self.locate(key);
        let mut s = shard.lock();
        let raced = version != ticket.version
            || self.flushed.load(Ordering::Acquire) > ticket.seq
            || s.forgotten > ticket.seq
            || s.recent.iter().rev().take_while(|(seq, _)| *seq > ticket.seq).any(|(_, h)| *h == hash)
            || ticket.lease.generation.load(Ordering::Acquire) != ticket.generation;
        if raced {
            drop(s);
            self.metrics.refused.inc();
            return false;
        }
        s.remove(hash, key, &self.metrics);
        if !s.make_room(need, self.shard_cap, &self.metrics) {
            return false;
        }
        s.next_id += 1;
        let id = s.next_id;
        let entry = Entry {
            data: Data::new(key, value),
            key_len: key.len(),
            // From when the fetch was sent: never later than the node's expiry.
            expires: (ttl_ms != 0).then(|| ticket.sent + Duration::from_millis(ttl_ms)),
            version: ticket.version,
            lease: ticket.lease.clone(),
            generation: ticket.generation,
            referenced: false,
            id,
        };
        let hasher = &self.hasher;
        s.map.insert_unique(hash, entry, |e| hasher.hash_one(e.key()));
        s.ring.push_back((hash, id));
        // Keys invalidated and cached again leave stale ring slots; compact before they pile up.
        if s.ring.len() > 2 * s.map.len() + 64 {
            let Shard { ring, map, .. } = &mut *s;
            ring.retain(|(h, id)| map.find(*h, |e| e.id == *id).is_some());
        }
        s.bytes += need;
        drop(s);
        self.metrics.bytes.fetch_add(need, Ordering::Relaxed);
        self.metrics.entries.fetch_add(1, Ordering::Relaxed);
        self.metrics.inserts.inc();
        true
    }

    /// `key` changed (a node's invalidation, or a write through this router about to be sent).
    pub fn invalidate(&self, key: &[u8]) {
        let (hash, shard) = self.locate(key);
        let mut s = shard.lock();
        let seq = self.seq.fetch_add(1, Ordering::AcqRel) + 1;
        s.remember(seq, hash);
        s.remove(hash, key, &self.metrics);
    }

    /// Everything may have changed (FLUSHALL through this router, a node's invalidate-all).
    pub fn flush(&self) {
        self.flushed.store(self.seq.fetch_add(1, Ordering::AcqRel) + 1, Ordering::Release);
        for shard in self.shards.iter() {
            let mut s = shard.lock();
            s.retain(&self.metrics, |_| false);
            s.ring.clear();
        }
    }

    /// Nodes whose cached values may be served now (stream up, heard from within the lease).
    pub fn fresh_nodes(&self) -> usize {
        let now = self.now_ms();
        self.leases.read().values().filter(|l| l.fresh(now, self.lease_ms)).count()
    }

    pub fn hit_ratio(&self) -> f64 {
        let (h, m) = (self.metrics.hits.get() as f64, self.metrics.misses.get() as f64);
        if h + m == 0.0 { 0.0 } else { h / (h + m) }
    }
}

#[cfg(test)]
mod tests;
