//! One shard of the store: a slab of entries, a hash index over it, an expiry min-heap, and the
//! read-only snapshot underneath.
//!
//! One concept: every insert, delete, TTL change and base promotion updates the slab, the index,
//! the heap, the memory count and the tombstone/shadow counts together, and each keeps the
//! others' invariants; split across files, each half would call into the other.
//!
//! Entries live in a slab (`Vec<Option<Entry>>`) and never move once placed, which is what makes
//! SCAN cursors (slab positions) keep Redis's guarantee: a key present for a whole scan is returned.
//! Freed positions are reused by later inserts. The index is a `HashTable<u32>` of slab positions:
//! 4 bytes + 1 control byte per bucket instead of a full entry per bucket.
//!
//! The expiry heap holds `(expire_at, key hash)` pairs. It is never updated in place: an entry whose
//! TTL changes or that is deleted leaves a stale pair behind, which is recognised and dropped when it
//! reaches the top (the entry is gone or has another `expire_at`). The heap is rebuilt when stale
//! pairs outnumber live ones. Hash field expiry (HEXPIRE) has a heap of its own, of `(earliest field
//! time, slab position)` pairs for the hashes whose fields have times, with the same stale-pair rule.
//!
//! Two layers: memory (this slab) over the base snapshot the node started from. Reads look in
//! memory, then in the base. Writes first copy a base-only key into memory ("promote"), so every
//! change happens in memory. Removing a key the base still holds leaves a *tombstone* in memory,
//! so the base's copy never comes back (after a DEL, an expiry or an eviction alike).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hashbrown::DefaultHashBuilder;
use hashbrown::HashTable;
use shoal_wire::notify;

use super::entry::{ENTRY_SIZE, Entry, IN_BASE, LOW_FLAGS, TOMBSTONE};
use super::events::Events;
use super::lag::{ExpiryLag, Removal};
use super::object::{Limits, Object, ValueType};
use super::slots::{BASE_MASKED, DROPPING, INCOMING, SlotFlags};
use super::watch::Watches;
use crate::snapshot::{EntryRef, Lookup, Snapshot};

/// A value moved in from a slot's old owner.
pub enum Imported<'a> {
    String(&'a [u8]),
    Object(Box<Object>),
}

/// Whether a key has anything here, for reads that may fall back to a slot's old owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    Value,
    /// A delete (or expiry) is recorded: the key is definitely gone.
    Tombstone,
    /// Nothing is known about the key here.
    Absent,
}

/// What memory holds for a key (see `Shard::in_memory`).
enum InMemory {
    /// A live entry at this position.
    Live(u32),
    /// A recorded delete.
    Tombstone,
    /// An entry that had expired and was just removed.
    Expired,
    /// An expired entry left in place: a replica keeps what its primary holds
    /// until the primary removes it (see [`Shard::keeps_expired`]).
    Kept,
    /// Nothing: the base may still hold the key.
    Missing,
}

/// Bytes of index per bucket: the `u32` position plus hashbrown's control byte.
const INDEX_BUCKET_SIZE: usize = std::mem::size_of::<u32>() + 1;
const HEAP_ITEM_SIZE: usize = std::mem::size_of::<Reverse<(u64, u64)>>();
/// An object table bucket: the position, the box pointer and a control byte.
const OBJECT_SLOT_SIZE: usize = 4 + 8 + 1 + 3;

/// A key's current value, wherever it lives.
#[derive(Debug, Clone, Copy)]
pub struct Value<'a> {
    /// A string's bytes (empty for other types).
    pub value: &'a [u8],
    pub expire_at: u64,
    pub value_type: ValueType,
}

pub struct Shard {
    hasher: DefaultHashBuilder,
    index: HashTable<u32>,
    slab: Vec<Option<Entry>>,
    free: Vec<u32>,
    /// Typed values (hashes, lists, sets) by the slab position of their entry.
    objects: hashbrown::HashMap<u32, Box<Object>>,
    /// Encoding thresholds for typed values.
    pub limits: Limits,
    expiry: BinaryHeap<Reverse<(u64, u64)>>,
    /// `(expire_at, base index)` of the base's keys with a TTL (see `add_base_expiry`).
    base_expiry: BinaryHeap<Reverse<(u64, u32)>>,
    /// Hash field expiry (HEXPIRE): the earliest field time registered for each slab position
    /// holding a hash with field times, and a heap of `(time, position)` pairs for active expiry.
    /// Stale pairs (the hash's earliest time changed, the entry is gone) are dropped when they
    /// reach the top, as the key expiry heap's are.
    field_min: hashbrown::HashMap<u32, u64>,
    field_expiry: BinaryHeap<Reverse<(u64, u32)>>,
    /// Hash fields removed because their time passed (INFO's `expired_subkeys`).
    pub expired_fields: u64,
    /// Entries with a TTL, and the sum of their expiry times (INFO keyspace's `avg_ttl`).
    volatile: usize,
    expire_sum: u128,
    /// Sum of `Entry::heap_size` over live entries.
    heap_bytes: usize,
    base: Option<Arc<Snapshot>>,
    slots: Arc<SlotFlags>,
    /// Keys removed here (expired, evicted, deleted, moved away) are touched.
    watches: Arc<Watches>,
    /// Keyspace notifications: the shard raises `expired` and `evicted` itself.
    pub events: Arc<Events>,
    /// How late expired keys are removed (shared by the store's shards).
    pub lag: Arc<ExpiryLag>,
    /// Set while the node is a replica (shared by the store's shards): see
    /// [`keeps_expired`](Self::keeps_expired).
    pub follower: Arc<AtomicBool>,
    /// Whether accesses count for LFU, and how (shared by the store's shards).
    pub lfu: Arc<super::lfu::LfuSettings>,
    /// Memory entries that are tombstones.
    tombstones: usize,
    /// Memory entries (values or tombstones) whose key the base also holds.
    shadowed: usize,
    pub expired: u64,
    pub evicted: u64,
    pub hits: u64,
    pub misses: u64,
    /// SETs applied here: their part of Redis's `dirty` (see `Store::dirty`), counted under this
    /// lock, which a SET holds anyway (a shared atomic cost every SET a few percent).
    pub sets: u64,
}

thread_local! {
    /// Set while an op of a CLIENT NO-TOUCH client runs on this thread ([`without_touching`]):
    /// [`Shard::touch`] then leaves access times as they were. A thread-local rather than a
    /// parameter because every read path of every type touches, and an op runs on one thread
    /// from start to end.
    static NO_TOUCH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` (one op of a CLIENT NO-TOUCH client) with access times left alone.
pub fn without_touching<R>(f: impl FnOnce() -> R) -> R {
    /// Puts back what was set before (a scope inside another keeps the outer one's setting).
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            NO_TOUCH.set(self.0);
        }
    }
    let _restore = Restore(NO_TOUCH.replace(true));
    f()
}

impl Shard {
    pub fn new(hasher: DefaultHashBuilder, slots: Arc<SlotFlags>, watches: Arc<Watches>) -> Shard {
        Shard {
            slots,
            watches,
            events: Arc::default(),
            lag: Arc::default(),
            follower: Arc::default(),
            lfu: Arc::default(),
            hasher,
            index: HashTable::new(),
            slab: Vec::new(),
            free: Vec::new(),
            objects: hashbrown::HashMap::new(),
            limits: Limits::default(),
            expiry: BinaryHeap::new(),
            base_expiry: BinaryHeap::new(),
            field_min: hashbrown::HashMap::new(),
            field_expiry: BinaryHeap::new(),
            expired_fields: 0,
            volatile: 0,
            expire_sum: 0,
            heap_bytes: 0,
            base: None,
            tombstones: 0,
            shadowed: 0,
            expired: 0,
            evicted: 0,
            hits: 0,
            misses: 0,
            sets: 0,
        }
    }

    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Installs the base snapshot. Only on an empty shard (at start) or to drop it (`None`).
    pub fn set_base(&mut self, base: Option<Arc<Snapshot>>) {
        debug_assert!(base.is_none() || self.index.is_empty());
        if base.is_none() {
            self.base_expiry = BinaryHeap::new();
        }
        self.base = base;
    }

    /// Schedules base keys with a TTL for active expiry, like memory keys: an expired base key is
    /// never served, but until something records its removal it is still counted (DBSIZE).
    pub fn add_base_expiry(&mut self, items: Vec<Reverse<(u64, u32)>>) {
        self.base_expiry.extend(items);
    }

    pub fn base(&self) -> Option<&Arc<Snapshot>> {
        self.base.as_ref()
    }

    /// A key's current value for moving it elsewhere: a string's bytes or a typed value's
    /// serialized form, its TTL and its type (memory over base; no LRU touch, no counting).
    pub fn export_value(
        &mut self,
        hash: u64,
        key: &[u8],
        now: u64,
    ) -> Option<(bytes::Bytes, u64, ValueType)> {
        match self.in_memory(hash, key, now) {
            InMemory::Live(pos) => {
                let e = self.entry(pos);
                Some(match self.object(pos) {
                    Some(o) => (o.serialize().into(), e.expire_at, o.value_type()),
                    None => (bytes::Bytes::copy_from_slice(e.value()), e.expire_at, ValueType::String),
                })
            }
            InMemory::Tombstone | InMemory::Expired | InMemory::Kept => None,
            InMemory::Missing => self.base_live(key, now).map(|b| {
                let t = ValueType::from_u32(b.value_type).unwrap_or(ValueType::String);
                (bytes::Bytes::copy_from_slice(b.value), b.expire_at, t)
            }),
        }
    }

    /// Memory entries holding a value (not tombstones).
    pub fn values(&self) -> usize {
        self.index.len() - self.tombstones
    }

    /// Memory entries that hide or replace a base entry.
    pub fn shadowed(&self) -> usize {
        self.shadowed
    }

    pub fn volatile(&self) -> usize {
        self.volatile
    }

    /// The sum of the volatile entries' expiry times (Unix ms).
    pub fn expire_sum(&self) -> u128 {
        self.expire_sum
    }

    /// Bytes this shard accounts for: entry allocations plus the slab, index, free list and heap
    /// at their current capacities. This is what `maxmemory` is compared against. (The base is a
    /// file mapping, paged in and out by the kernel, and is not counted.)
    pub fn mem(&self) -> usize {
        self.heap_bytes
            + self.slab.capacity() * ENTRY_SIZE
            + self.index.num_buckets() * INDEX_BUCKET_SIZE
            + self.free.capacity() * std::mem::size_of::<u32>()
            + self.expiry.capacity() * HEAP_ITEM_SIZE
            + self.objects.capacity() * OBJECT_SLOT_SIZE
    }

    /// The typed value of the entry at `pos`, if it has one.
    pub fn object(&self, pos: u32) -> Option<&Object> {
        self.objects.get(&pos).map(|o| &**o)
    }

    /// Takes the typed value of the entry at `pos` out for a change; give it back with
    /// [`put_object`](Self::put_object) (or let it go: the entry is then deleted or retyped).
    pub fn take_object(&mut self, pos: u32) -> Option<Box<Object>> {
        // Every delete and overwrite asks; a shard of strings only answers without hashing.
        if self.objects.is_empty() {
            return None;
        }
        let o = self.objects.remove(&pos)?;
        self.heap_bytes -= o.mem();
        Some(o)
    }

    /// Makes `o` the value of the entry at `pos`.
    pub fn put_object(&mut self, pos: u32, o: Box<Object>) {
        self.entry_mut(pos).set_value_type(o.value_type());
        self.heap_bytes += o.mem();
        if let Object::Hash(h) = &*o
            && let Some(at) = h.min_ttl()
            && self.field_min.insert(pos, at) != Some(at)
        {
            self.field_expiry.push(Reverse((at, pos)));
        }
        if let Some(old) = self.objects.insert(pos, o) {
            self.heap_bytes -= old.mem();
        }
    }

    /// Runs `f` on the typed value of the entry at `pos` where it lies in `objects`: one lookup,
    /// where [`take_object`](Self::take_object) then [`put_object`](Self::put_object) hash and
    /// probe twice and move the box out and back (a typed write's common case, LPUSH or HSET on
    /// a key that exists). `f` may change, empty, replace or drop the value; an emptied value
    /// leaves `objects` at once. The memory count and the hash field-time index follow what `f`
    /// left. Returns `f`'s result and whether the entry is left without a value (the caller
    /// deletes it, as for an emptied [`take_object`](Self::take_object)).
    pub fn edit_object<R>(&mut self, pos: u32, f: impl FnOnce(&mut Option<Box<Object>>) -> R) -> (R, bool) {
        use hashbrown::hash_map::Entry as Slot;
        let Slot::Occupied(found) = self.objects.entry(pos) else {
            let mut slot = None;
            let r = f(&mut slot);
            return match slot.filter(|o| !o.is_empty()) {
                Some(o) => {
                    self.put_object(pos, o);
                    (r, false)
                }
                None => (r, true),
            };
        };
        let (mut r, mut before, mut after) = (None, 0, None);
        found.replace_entry_with(|_, o| {
            before = o.mem();
            let mut slot = Some(o);
            r = Some(f(&mut slot));
            let kept = slot.filter(|o| !o.is_empty());
            after = kept.as_ref().map(|o| {
                let field_min = match &**o {
                    Object::Hash(h) => h.min_ttl(),
                    _ => None,
                };
                (o.mem(), o.value_type(), field_min)
            });
            kept
        });
        let r = r.expect("replace_entry_with runs its closure on an occupied entry");
        self.heap_bytes -= before;
        let Some((mem, value_type, field_min)) = after else { return (r, true) };
        self.heap_bytes += mem;
        let entry = self.entry_mut(pos);
        if entry.value_type() != value_type {
            entry.set_value_type(value_type);
        }
        if let Some(at) = field_min
            && self.field_min.insert(pos, at) != Some(at)
        {
            self.field_expiry.push(Reverse((at, pos)));
        }
        (r, false)
    }

    /// Drops the typed value of the entry at `pos`, making it an (empty) string.
    pub fn drop_object(&mut self, pos: u32) {
        if self.take_object(pos).is_some() {
            self.entry_mut(pos).set_value_type(ValueType::String);
        }
    }

    #[inline]
    pub fn entry(&self, pos: u32) -> &Entry {
        self.slab[pos as usize].as_ref().expect("index points at a live entry")
    }

    #[inline]
    pub fn entry_mut(&mut self, pos: u32) -> &mut Entry {
        self.slab[pos as usize].as_mut().expect("index points at a live entry")
    }

    /// Position of `key` in memory (a value or a tombstone, expired or not).
    pub fn find(&self, hash: u64, key: &[u8]) -> Option<u32> {
        let slab = &self.slab;
        self.index.find(hash, |&pos| slab[pos as usize].as_ref().is_some_and(|e| e.key() == key)).copied()
    }

    /// The base's entry for `key` if it may be served at `now` (never for a slot given away).
    fn base_live(&self, key: &[u8], now: u64) -> Option<EntryRef<'_>> {
        let slot = shoal_wire::key_slot(key);
        if self.slots.has(slot, BASE_MASKED) {
            return None;
        }
        match self.base.as_ref()?.get(slot, key) {
            Lookup::Found(e) if !e.is_expired(now) => Some(e),
            _ => None,
        }
    }

    fn base_has(&self, key: &[u8]) -> bool {
        let slot = shoal_wire::key_slot(key);
        !self.slots.has(slot, BASE_MASKED) && self.base.as_ref().is_some_and(|b| b.contains(slot, key))
    }

    /// Whether the key has a value, a recorded delete, or nothing here (lazy expiry applies).
    pub fn presence(&mut self, hash: u64, key: &[u8], now: u64) -> Presence {
        match self.in_memory(hash, key, now) {
            InMemory::Live(_) => Presence::Value,
            InMemory::Tombstone | InMemory::Kept => Presence::Tombstone,
            // Expiring a key may leave a tombstone (one in the base, or in a slot moving in).
            InMemory::Expired if self.find(hash, key).is_some() => Presence::Tombstone,
            InMemory::Expired => Presence::Absent,
            InMemory::Missing if self.base_live(key, now).is_some() => Presence::Value,
            InMemory::Missing => Presence::Absent,
        }
    }

    /// Whether expired entries stay until something else removes them: on a replica, whose copy
    /// is its primary's. The primary expires keys by its own clock and sends their removal; a
    /// replica that removed them by its clock (ahead of the primary's, or jumped) would lose keys
    /// its primary still serves, and a replica promoted after its clock was corrected would lack
    /// them. Reads still see an expired entry as gone (as Redis's replicas answer); the entry
    /// stays, and active expiry skips the store, until the primary's removal arrives.
    pub fn keeps_expired(&self) -> bool {
        self.follower.load(Ordering::Relaxed)
    }

    /// An entry [`keeps_expired`](Self::keeps_expired) left in place, for a change that replaces
    /// or removes `key` whatever its expiry (a replica applying its primary's write or delete).
    /// None at once on a shard that keeps nothing expired (a primary's DEL of a missing key, RENAME:
    /// no second lookup).
    pub fn kept(&self, hash: u64, key: &[u8]) -> Option<u32> {
        if !self.keeps_expired() {
            return None;
        }
        self.find(hash, key).filter(|&pos| !self.entry(pos).is_tombstone())
    }

    /// Where `key` stands in memory at `now`. An expired entry is deleted on the spot (lazy
    /// expiry), which the caller learns as [`InMemory::Expired`], unless the shard
    /// [keeps expired entries](Self::keeps_expired).
    fn in_memory(&mut self, hash: u64, key: &[u8], now: u64) -> InMemory {
        let Some(pos) = self.find(hash, key) else { return InMemory::Missing };
        let e = self.entry(pos);
        if e.is_tombstone() {
            return InMemory::Tombstone;
        }
        if e.is_expired(now) {
            if self.keeps_expired() {
                return InMemory::Kept;
            }
            self.expire_at_pos(hash, pos, now, Removal::Lazy);
            return InMemory::Expired;
        }
        InMemory::Live(pos)
    }

    /// Records the delete of a key that has nothing here, in a slot moving in: the tombstone keeps
    /// the old owner's copy, still on its way, from arriving later.
    pub fn record_delete(&mut self, hash: u64, key: &[u8]) {
        if self.find(hash, key).is_none() && self.slots.has(shoal_wire::key_slot(key), INCOMING) {
            let tomb = Entry::tombstone(key, self.base_has(key));
            self.insert_raw(hash, tomb);
        }
    }

    /// Stores an entry moved from a slot's old owner, unless the key already has anything here (a
    /// value written since, a recorded delete, or the base's own copy): the receiver wins.
    pub fn import(&mut self, hash: u64, key: &[u8], value: Imported<'_>, expire_at: u64, now: u64) -> bool {
        if (expire_at != 0 && expire_at <= now)
            || self.find(hash, key).is_some()
            || self.base_live(key, now).is_some()
        {
            return false;
        }
        let lru = super::entry::lru_now(now);
        self.watches.touch(key);
        match value {
            Imported::String(v) => {
                self.insert_new(hash, key, v, expire_at, lru);
            }
            Imported::Object(o) => {
                let pos = self.insert_new(hash, key, b"", expire_at, lru);
                self.put_object(pos, o);
            }
        }
        true
    }

    /// Reclaims memory entries of slots being dropped, from slab position `from`, visiting at most
    /// `limit` positions. Returns where to continue (`None`: done with this shard).
    pub fn purge_dropping(&mut self, from: usize, limit: usize) -> Option<usize> {
        let end = from.saturating_add(limit).min(self.slab.len());
        for pos in from..end {
            let Some(e) = self.slab[pos].as_ref() else { continue };
            if self.slots.has(shoal_wire::key_slot(e.key()), DROPPING) {
                let hash = self.hash(e.key());
                self.remove(hash, pos as u32);
            }
        }
        (end < self.slab.len()).then_some(end)
    }

    /// Removes tombstones that no longer hide anything: not in the base, in a slot that is not
    /// moving in. Same walking contract as [`purge_dropping`](Self::purge_dropping).
    pub fn purge_tombstones(&mut self, from: usize, limit: usize) -> Option<usize> {
        let end = from.saturating_add(limit).min(self.slab.len());
        for pos in from..end {
            let Some(e) = self.slab[pos].as_ref() else { continue };
            if e.is_tombstone() && !e.in_base() && !self.slots.has(shoal_wire::key_slot(e.key()), INCOMING) {
                let hash = self.hash(e.key());
                self.remove(hash, pos as u32);
            }
        }
        (end < self.slab.len()).then_some(end)
    }

    /// Whether memory entry `e` belongs to a slot being dropped (hidden from listings).
    pub fn is_dropping(&self, e: &Entry) -> bool {
        self.slots.has(shoal_wire::key_slot(e.key()), DROPPING)
    }

    /// Reads `key` at `now` from memory, else from the base, counting a hit or miss; `f` sees the
    /// value. A read refreshes the LRU clock of a memory entry.
    pub fn read<R>(&mut self, hash: u64, key: &[u8], now: u64, f: impl FnOnce(Value<'_>) -> R) -> Option<R> {
        let r = self.peek(hash, key, now, true, f);
        if r.is_some() {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
        r
    }

    /// Like [`read`](Self::read) without counting, and touching the LRU clock only if asked.
    pub fn peek<R>(
        &mut self,
        hash: u64,
        key: &[u8],
        now: u64,
        touch: bool,
        f: impl FnOnce(Value<'_>) -> R,
    ) -> Option<R> {
        match self.in_memory(hash, key, now) {
            InMemory::Live(pos) => {
                if touch {
                    self.touch(pos, now);
                }
                let e = self.entry(pos);
                Some(f(Value { value: e.value(), expire_at: e.expire_at, value_type: e.value_type() }))
            }
            InMemory::Tombstone | InMemory::Expired | InMemory::Kept => None,
            InMemory::Missing => self.base_live(key, now).map(|e| {
                let value_type = ValueType::from_u32(e.value_type).unwrap_or(ValueType::String);
                let value = if value_type == ValueType::String { e.value } else { &[] };
                f(Value { value, expire_at: e.expire_at, value_type })
            }),
        }
    }

    /// The memory position of `key` if it is live at `now`, for a change: a key that only the
    /// base holds is first copied into memory. Expired memory entries are removed on the spot
    /// (lazy expiry).
    pub fn find_live(&mut self, hash: u64, key: &[u8], now: u64) -> Option<u32> {
        match self.in_memory(hash, key, now) {
            InMemory::Live(pos) => return Some(pos),
            InMemory::Tombstone | InMemory::Expired | InMemory::Kept => return None,
            InMemory::Missing => {}
        }
        let (promoted, object) = self.base_live(key, now).map(|b| {
            let value_type = ValueType::from_u32(b.value_type).unwrap_or(ValueType::String);
            if value_type == ValueType::String {
                let mut e = Entry::new(b.key, b.value, b.expire_at, super::entry::lru_now(now));
                e.flags = (e.flags & !LOW_FLAGS) | IN_BASE;
                return (e, None);
            }
            let mut e = Entry::new(b.key, b"", b.expire_at, super::entry::lru_now(now));
            e.flags = (e.flags & !LOW_FLAGS) | IN_BASE;
            // The snapshot reader has checked the entry's checksum; a value that still does not
            // decode is served as empty rather than not at all (and logged).
            let o = Object::deserialize(value_type, b.value, &self.limits).unwrap_or_else(|err| {
                tracing::error!(key = %String::from_utf8_lossy(b.key), %err, "undecodable typed value in the base snapshot");
                Object::empty(value_type)
            });
            (e, Some(Box::new(o)))
        })?;
        let pos = self.insert_raw(hash, promoted);
        if let Some(o) = object {
            self.put_object(pos, o);
        }
        Some(pos)
    }

    /// Like [`find_live`](Self::find_live), counting a keyspace hit or miss.
    pub fn lookup(&mut self, hash: u64, key: &[u8], now: u64) -> Option<u32> {
        let found = self.find_live(hash, key, now);
        if found.is_some() {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
        found
    }

    /// Stores a value for a key that is not live (reusing its tombstone, if it has one).
    /// Returns its position.
    pub fn insert_new(&mut self, hash: u64, key: &[u8], value: &[u8], expire_at: u64, lru: u32) -> u32 {
        if let Some(pos) = self.find(hash, key) {
            // A tombstone (find_live already removed anything else): becomes the value.
            debug_assert!(self.entry(pos).is_tombstone());
            self.tombstones -= 1;
            self.update(pos, |e| {
                e.set_value(value);
                e.flags &= !TOMBSTONE;
                e.lru = lru;
                e.set_lfu_bits(super::lfu::initial(lru));
            });
            self.set_expire(hash, pos, expire_at);
            return pos;
        }
        let mut entry = Entry::new(key, value, expire_at, lru);
        if self.base_has(key) {
            entry.flags |= IN_BASE;
        }
        self.insert_raw(hash, entry)
    }

    fn insert_raw(&mut self, hash: u64, entry: Entry) -> u32 {
        let expire_at = entry.expire_at;
        self.heap_bytes += entry.heap_size();
        if entry.in_base() {
            self.shadowed += 1;
        }
        if entry.is_tombstone() {
            self.tombstones += 1;
        }
        let pos = match self.free.pop() {
            Some(pos) => {
                self.slab[pos as usize] = Some(entry);
                pos
            }
            None => {
                if self.slab.len() == self.slab.capacity() {
                    // Grow by a quarter rather than doubling: at millions of keys per shard a
                    // doubling would strand up to half the slab (40 bytes a key) as slack.
                    self.slab.reserve_exact((self.slab.capacity() / 4).max(16));
                }
                self.slab.push(Some(entry));
                (self.slab.len() - 1) as u32
            }
        };
        let (hasher, slab) = (&self.hasher, &self.slab);
        self.index
            .insert_unique(hash, pos, |&p| hasher.hash_one(slab[p as usize].as_ref().expect("live").key()));
        if expire_at != 0 {
            self.volatile += 1;
            self.expire_sum += u128::from(expire_at);
            self.push_expiry(expire_at, hash);
        }
        pos
    }

    /// Removes the key at `pos` (whose key hashes to `hash`): the entry goes, or becomes a
    /// tombstone if a copy could otherwise come back (the base still holds one, or the slot is
    /// moving in and the old owner's copy may still arrive). A base copy that has expired by now
    /// gets a tombstone too: it is never served, but only a tombstone takes it out of the count
    /// (its own turn in active expiry was skipped while this entry replaced it).
    pub fn delete(&mut self, hash: u64, pos: u32) {
        let e = self.entry(pos);
        if e.is_tombstone() {
            return;
        }
        self.watches.touch(e.key());
        let incoming = self.slots.has(shoal_wire::key_slot(e.key()), INCOMING);
        if incoming || (e.in_base() && self.base_has(e.key())) {
            let tomb = Entry::tombstone(e.key(), e.in_base());
            self.take_object(pos);
            self.set_expire(hash, pos, 0);
            self.update(pos, |e| *e = tomb);
            self.tombstones += 1;
            return;
        }
        self.remove(hash, pos);
    }

    /// Removes the key at `pos` because its TTL has passed (found at `now`, by `how`): counted in
    /// `expired_keys` and in the lateness histograms, and the `expired` keyspace event (Redis
    /// raises it after the delete).
    pub fn expire_at_pos(&mut self, hash: u64, pos: u32, now: u64, how: Removal) {
        self.lag.record(how, self.entry(pos).expire_at, now);
        let key = (self.events.wants(notify::EXPIRED) || self.events.changes.active())
            .then(|| self.entry(pos).key().to_vec());
        self.delete(hash, pos);
        self.expired += 1;
        if let Some(key) = key {
            self.events.emit(notify::EXPIRED, "expired", &key);
            self.events.changes.key(&key);
        }
    }

    /// Removes the fields of the hash at `pos` whose time has passed at `now` (lazily, before a
    /// command sees the hash, and by active expiry): counted in `expired_subkeys`, the
    /// `hexpired` event, the key recorded for replicas; a hash left empty is deleted (`del`).
    /// Returns whether the key is gone. A replica removes nothing (its primary's removal comes
    /// down the feed), as it keeps expired keys.
    pub fn purge_fields(&mut self, pos: u32, now: u64) -> bool {
        if self.keeps_expired() {
            return false;
        }
        let Some(Object::Hash(h)) = self.objects.get_mut(&pos).map(|o| &mut **o) else { return false };
        if h.min_ttl().is_none_or(|at| at > now) {
            return false;
        }
        let before = h.mem();
        let gone = h.purge_expired(now).len() as u64;
        let (after, empty, next) = (h.mem(), h.is_empty(), h.min_ttl());
        self.heap_bytes = self.heap_bytes + after - before;
        self.expired_fields += gone;
        match next {
            Some(at) if self.field_min.insert(pos, at) != Some(at) => {
                self.field_expiry.push(Reverse((at, pos)))
            }
            Some(_) => {}
            None => {
                self.field_min.remove(&pos);
            }
        }
        let key = self.entry(pos).key().to_vec();
        self.events.emit(notify::HASH, "hexpired", &key);
        if empty {
            let hash = self.hash(&key);
            self.delete(hash, pos);
            self.events.emit(notify::GENERIC, "del", &key);
        }
        self.events.changes.key(&key);
        empty
    }

    /// Active expiry of hash fields: purges up to `budget` hashes whose earliest field time is
    /// at or before `now`. Returns how many hashes it purged.
    fn purge_expired_fields(&mut self, now: u64, budget: usize) -> usize {
        let mut purged = 0;
        let mut work = 0;
        while purged < budget && work < budget * 4 {
            let Some(&Reverse((at, pos))) = self.field_expiry.peek() else { break };
            if at > now {
                break;
            }
            self.field_expiry.pop();
            work += 1;
            if self.field_min.get(&pos) != Some(&at) {
                continue; // stale: the hash's earliest time changed, or the entry is gone
            }
            let current = match self.objects.get(&pos).map(|o| &**o) {
                Some(Object::Hash(h)) => h.min_ttl(),
                _ => None,
            };
            if current != Some(at) {
                self.field_min.remove(&pos);
                continue;
            }
            self.purge_fields(pos, now);
            purged += 1;
        }
        if self.field_expiry.is_empty() {
            self.field_expiry.shrink_to(64);
        }
        purged
    }

    /// Takes the entry at `pos` out of memory entirely.
    fn remove(&mut self, hash: u64, pos: u32) -> Entry {
        if let Ok(found) = self.index.find_entry(hash, |&p| p == pos) {
            found.remove();
        }
        self.take_object(pos);
        self.field_min.remove(&pos);
        let entry = self.slab[pos as usize].take().expect("removing a live entry");
        if !entry.is_tombstone() {
            self.watches.touch(entry.key());
        }
        if pos as usize + 1 == self.slab.len() {
            self.slab.pop();
        } else {
            self.free.push(pos);
        }
        self.heap_bytes -= entry.heap_size();
        if entry.expire_at != 0 {
            self.volatile -= 1;
            self.expire_sum -= u128::from(entry.expire_at);
        }
        if entry.in_base() {
            self.shadowed -= 1;
        }
        if entry.is_tombstone() {
            self.tombstones -= 1;
        }
        entry
    }

    /// Runs `f` on the entry at `pos`, keeping the byte count right if `f` resizes the value.
    /// Records an access to the entry at `pos`: its LRU clock, and its LFU counter while an LFU
    /// policy is set (`super::lfu`).
    #[inline]
    pub fn touch(&mut self, pos: u32, now: u64) {
        if NO_TOUCH.get() {
            return;
        }
        let lfu = self.lfu.get();
        self.entry_mut(pos).touch(now, lfu);
    }

    pub fn update<R>(&mut self, pos: u32, f: impl FnOnce(&mut Entry) -> R) -> R {
        let entry = self.slab[pos as usize].as_mut().expect("live");
        let before = entry.heap_size();
        let r = f(entry);
        let after = entry.heap_size();
        self.heap_bytes = self.heap_bytes + after - before;
        r
    }

    /// Sets or clears (`at == 0`) the TTL of the entry at `pos`.
    pub fn set_expire(&mut self, hash: u64, pos: u32, at: u64) {
        let entry = self.entry_mut(pos);
        let old = std::mem::replace(&mut entry.expire_at, at);
        match (old != 0, at != 0) {
            (false, true) => self.volatile += 1,
            (true, false) => self.volatile -= 1,
            _ => {}
        }
        self.expire_sum = self.expire_sum + u128::from(at) - u128::from(old);
        if at != 0 && at != old {
            self.push_expiry(at, hash);
        }
    }

    fn push_expiry(&mut self, at: u64, hash: u64) {
        self.expiry.push(Reverse((at, hash)));
        // Stale pairs (TTL changed, key deleted) only leave the heap when they reach the top;
        // rebuild once they dominate so the heap stays proportional to the volatile keys.
        if self.expiry.len() > 1024 && self.expiry.len() > 2 * self.volatile {
            self.rebuild_expiry();
        }
    }

    fn rebuild_expiry(&mut self) {
        let hasher = &self.hasher;
        let live: Vec<Reverse<(u64, u64)>> = self
            .slab
            .iter()
            .flatten()
            .filter(|e| e.expire_at != 0)
            .map(|e| Reverse((e.expire_at, hasher.hash_one(e.key()))))
            .collect();
        self.expiry = BinaryHeap::from(live);
    }

    /// The live entry whose key hashes to `hash` and whose TTL is exactly `at`, if any.
    fn find_by_expiry(&self, hash: u64, at: u64) -> Option<u32> {
        let (hasher, slab) = (&self.hasher, &self.slab);
        self.index
            .find(hash, |&p| {
                slab[p as usize]
                    .as_ref()
                    .is_some_and(|e| e.expire_at == at && hasher.hash_one(e.key()) == hash)
            })
            .copied()
    }

    /// Active expiry: removes up to `budget` entries whose TTL is at or before `now`, soonest
    /// first. Returns how many it removed. Bounded so a mass expiry never stalls the shard. A
    /// shard that [keeps expired entries](Self::keeps_expired) removes none.
    pub fn purge_expired(&mut self, now: u64, budget: usize) -> usize {
        if self.keeps_expired() {
            return 0;
        }
        let mut removed = self.purge_expired_fields(now, budget);
        let mut work = 0;
        while removed < budget && work < budget * 4 {
            let Some(&Reverse((at, hash))) = self.expiry.peek() else { break };
            if at > now {
                break;
            }
            self.expiry.pop();
            work += 1;
            if let Some(pos) = self.find_by_expiry(hash, at) {
                self.expire_at_pos(hash, pos, now, Removal::Active);
                removed += 1;
            }
        }
        if self.expiry.is_empty() {
            self.expiry.shrink_to(64);
        }
        // Base keys: removal is recorded as a tombstone that hides the base's copy, unless
        // memory already has something for the key (a newer value or delete governs).
        if let Some(base) = self.base.clone() {
            while removed < budget && work < budget * 4 {
                let Some(&Reverse((at, i))) = self.base_expiry.peek() else { break };
                if at > now {
                    break;
                }
                self.base_expiry.pop();
                work += 1;
                let Some(e) = base.entry(i as usize) else { continue };
                let hash = self.hash(e.key);
                if self.slots.has(e.slot, BASE_MASKED) || self.find(hash, e.key).is_some() {
                    continue;
                }
                self.insert_raw(hash, Entry::tombstone(e.key, true));
                self.lag.record(Removal::Active, at, now);
                self.expired += 1;
                self.events.emit(notify::EXPIRED, "expired", e.key);
                self.events.changes.key(e.key);
                removed += 1;
            }
        }
        removed
    }

    /// The expiry time of the key that has been overdue longest at `now` (still stored past its
    /// TTL: active expiry has not reached it yet), memory or base; `None` when none is. Drops the
    /// stale heap pairs it meets on the way (they would be dropped by the next purge anyway).
    pub fn oldest_overdue(&mut self, now: u64) -> Option<u64> {
        let memory =
            self.soonest_expiring().map(|(_, pos)| self.entry(pos).expire_at).filter(|&at| at <= now);
        let mut base_due = None;
        if let Some(base) = self.base.clone() {
            while let Some(&Reverse((at, i))) = self.base_expiry.peek() {
                if at > now {
                    break;
                }
                // As purge_expired judges it: a base key masked or governed by memory is not due.
                let live = base.entry(i as usize).is_some_and(|e| {
                    !self.slots.has(e.slot, BASE_MASKED) && self.find(self.hash(e.key), e.key).is_none()
                });
                if live {
                    base_due = Some(at);
                    break;
                }
                self.base_expiry.pop();
            }
        }
        memory.into_iter().chain(base_due).min()
    }

    /// The volatile entry that expires soonest (for `volatile-ttl` eviction), dropping stale pairs.
    pub fn soonest_expiring(&mut self) -> Option<(u64, u32)> {
        while let Some(&Reverse((at, hash))) = self.expiry.peek() {
            if let Some(pos) = self.find_by_expiry(hash, at) {
                return Some((hash, pos));
            }
            self.expiry.pop();
        }
        None
    }

    /// A uniformly random memory value's position, if the shard has any. Tries random slab
    /// positions first (the slab is dense unless many keys were deleted), then the index.
    pub fn random_pos(&self, rng: &mut fastrand::Rng) -> Option<u32> {
        if self.values() == 0 {
            return None;
        }
        for _ in 0..16 {
            let pos = rng.usize(..self.slab.len());
            if self.slab[pos].as_ref().is_some_and(|e| !e.is_tombstone()) {
                return Some(pos as u32);
            }
        }
        let skip = rng.usize(..self.values().min(64));
        let slab = &self.slab;
        self.index
            .iter()
            .copied()
            .filter(|&p| !slab[p as usize].as_ref().is_some_and(Entry::is_tombstone))
            .nth(skip)
    }

    /// A random entry with a TTL (from the expiry heap), for `volatile-*` eviction.
    pub fn random_volatile_pos(&self, rng: &mut fastrand::Rng) -> Option<(u64, u32)> {
        let heap = self.expiry.as_slice();
        if heap.is_empty() || self.volatile == 0 {
            return None;
        }
        for _ in 0..16 {
            let Reverse((at, hash)) = heap[rng.usize(..heap.len())];
            if let Some(pos) = self.find_by_expiry(hash, at) {
                return Some((hash, pos));
            }
        }
        None
    }

    /// Calls `visit` on memory values from slab position `from`, visiting at most `limit`
    /// positions. Returns where to continue (`None` at the end of the slab) and how many positions
    /// were visited.
    pub fn scan(&self, from: usize, limit: usize, mut visit: impl FnMut(&Entry)) -> (Option<usize>, usize) {
        let start = from.min(self.slab.len());
        let end = start.saturating_add(limit).min(self.slab.len());
        for entry in
            self.slab[start..end].iter().flatten().filter(|e| !e.is_tombstone() && !self.is_dropping(e))
        {
            visit(entry);
        }
        ((end < self.slab.len()).then_some(end), end - start)
    }

    /// Adds, per slot, this shard's memory values in slab positions `from..from + limit` and
    /// subtracts the entries that hide or replace a base entry (so that memory plus the base
    /// counts every key once, as `Store::len` does). Returns where to continue.
    pub fn count_slots(&self, from: usize, limit: usize, counts: &mut [i64]) -> Option<usize> {
        let start = from.min(self.slab.len());
        let end = start.saturating_add(limit).min(self.slab.len());
        for e in self.slab[start..end].iter().flatten() {
            let slot = usize::from(shoal_wire::key_slot(e.key()));
            if !e.is_tombstone() && !self.is_dropping(e) {
                counts[slot] += 1;
            }
            if e.in_base() {
                counts[slot] -= 1;
            }
        }
        (end < self.slab.len()).then_some(end)
    }

    /// Every memory entry (tombstones included), in slab order, with its position.
    pub fn entries(&self) -> impl Iterator<Item = (u32, &Entry)> {
        self.slab.iter().enumerate().filter_map(|(i, e)| e.as_ref().map(|e| (i as u32, e)))
    }

    /// Every memory value (no tombstones, nothing in a slot being dropped), in slab order.
    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.slab.iter().flatten().filter(|e| !e.is_tombstone() && !self.is_dropping(e))
    }

    /// The entry at `pos` if there is one (positions from an earlier walk may have been freed).
    pub fn entry_at(&self, pos: u32) -> Option<&Entry> {
        self.slab.get(pos as usize).and_then(Option::as_ref)
    }

    /// Drops everything, the base included, returning the number of memory values dropped.
    pub fn clear(&mut self) -> usize {
        // Watchers and tracking routers hear of a flush from `Store::flush`, not once per shard.
        let n = self.values();
        let (expired, evicted, hits, misses, sets) =
            (self.expired, self.evicted, self.hits, self.misses, self.sets);
        *self = Shard {
            expired,
            evicted,
            hits,
            misses,
            sets,
            limits: self.limits.clone(),
            events: self.events.clone(),
            lag: self.lag.clone(),
            follower: self.follower.clone(),
            lfu: self.lfu.clone(),
            ..Shard::new(self.hasher.clone(), self.slots.clone(), self.watches.clone())
        };
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard() -> Shard {
        Shard::new(DefaultHashBuilder::default(), Arc::default(), Arc::default())
    }

    fn put(s: &mut Shard, key: &str, expire_at: u64) -> u32 {
        let h = s.hash(key.as_bytes());
        s.insert_new(h, key.as_bytes(), b"v", expire_at, 0)
    }

    fn del(s: &mut Shard, key: &str) {
        let h = s.hash(key.as_bytes());
        let p = s.find(h, key.as_bytes()).unwrap();
        s.delete(h, p);
    }

    #[test]
    fn positions_are_stable_and_reused() {
        let mut s = shard();
        let a = put(&mut s, "a", 0);
        let b = put(&mut s, "b", 0);
        let c = put(&mut s, "c", 0);
        del(&mut s, "b");
        assert_eq!(s.find(s.hash(b"a"), b"a"), Some(a));
        assert_eq!(s.find(s.hash(b"c"), b"c"), Some(c), "removing b did not move c");
        let d = put(&mut s, "d", 0);
        assert_eq!(d, b, "freed position reused");
        assert_eq!(s.values(), 3);
    }

    #[test]
    fn purge_respects_budget_and_stale_pairs() {
        let mut s = shard();
        for i in 0..10 {
            put(&mut s, &format!("k{i}"), 100 + i);
        }
        // Change one TTL (leaves a stale pair) and delete another.
        let h = s.hash(b"k0");
        let p = s.find(h, b"k0").unwrap();
        s.set_expire(h, p, 10_000);
        del(&mut s, "k1");
        assert_eq!(s.purge_expired(105, 3), 3);
        assert_eq!(s.purge_expired(105, 100), 1, "k2..k5 expire at 102..105; k2..k4 already gone");
        assert!(s.find(h, b"k0").is_some(), "k0's stale pair did not expire it");
        assert_eq!(s.purge_expired(1_000, 100), 4);
        assert_eq!(s.values(), 1);
        assert_eq!(s.volatile(), 1);
        assert_eq!(s.expired, 8);
    }

    #[test]
    fn lazy_expiry_on_lookup() {
        let mut s = shard();
        put(&mut s, "x", 50);
        let h = s.hash(b"x");
        assert!(s.lookup(h, b"x", 49).is_some());
        assert!(s.lookup(h, b"x", 50).is_none());
        assert_eq!(s.values(), 0);
        assert_eq!((s.hits, s.misses, s.expired), (1, 1, 1));
    }

    #[test]
    fn objects_edited_in_place_keep_the_count_the_type_and_the_field_times() {
        let mut s = shard();
        let limits = Limits::default();
        let p = put(&mut s, "k", 0);
        let strings_only = s.heap_bytes;
        let mut list = Object::empty(ValueType::List);
        let Object::List(l) = &mut list else { unreachable!() };
        l.push(b"a", true);
        s.put_object(p, Box::new(list));
        // Grown in place: counted as take/put would have counted it.
        let (len, emptied) = s.edit_object(p, |slot| {
            let Some(Object::List(l)) = slot.as_deref_mut() else { panic!("the list is there") };
            for i in 0..100 {
                l.push(format!("element {i}").as_bytes(), true);
            }
            l.len()
        });
        assert_eq!((len, emptied), (101, false));
        assert_eq!(s.heap_bytes, strings_only + s.object(p).unwrap().mem());
        assert_eq!(s.entry(p).value_type(), ValueType::List);
        // Replaced by a hash with a field time: the entry's type and the field-time index follow.
        let (_, emptied) = s.edit_object(p, |slot| {
            let mut hash = Object::empty(ValueType::Hash);
            let Object::Hash(h) = &mut hash else { unreachable!() };
            h.set(b"f", b"v", &limits);
            h.set_field_ttl(b"f", 5_000);
            *slot = Some(Box::new(hash));
        });
        assert!(!emptied);
        assert_eq!(s.entry(p).value_type(), ValueType::Hash);
        assert_eq!(s.heap_bytes, strings_only + s.object(p).unwrap().mem());
        assert_eq!(s.field_min.get(&p), Some(&5_000));
        assert_eq!(s.field_expiry.peek(), Some(&Reverse((5_000, p))));
        // Emptied: the value leaves `objects` and its bytes the count; the caller deletes the key.
        let (_, emptied) = s.edit_object(p, |slot| {
            let Some(Object::Hash(h)) = slot.as_deref_mut() else { panic!("the hash is there") };
            h.remove(b"f");
        });
        assert!(emptied);
        assert!(s.object(p).is_none());
        assert_eq!(s.heap_bytes, strings_only);
        // Dropped outright (`*slot = None`) counts the same.
        let p2 = put(&mut s, "k2", 0);
        let with_k2 = s.heap_bytes;
        let mut set = Object::empty(ValueType::Set);
        let Object::Set(members) = &mut set else { unreachable!() };
        members.add(b"m", &limits);
        s.put_object(p2, Box::new(set));
        assert!(s.heap_bytes > with_k2);
        let (_, emptied) = s.edit_object(p2, |slot| *slot = None);
        assert!(emptied);
        assert_eq!(s.heap_bytes, with_k2);
    }

    #[test]
    fn mem_tracks_entries() {
        let mut s = shard();
        let empty = s.mem();
        for i in 0..100 {
            put(&mut s, &format!("key{i}"), 0);
        }
        assert!(s.mem() > empty + 100 * (ENTRY_SIZE + 5));
        for i in 0..100 {
            del(&mut s, &format!("key{i}"));
        }
        assert_eq!(s.heap_bytes, 0);
    }
}
