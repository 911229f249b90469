//! The store's entry points for typed values: commands on hashes, lists and sets
//! (`crate::commands`) read or change a key's [`Object`] through these, under its shard's lock, so
//! each command is atomic. Type checks (WRONGTYPE), lazy expiry, promotion from the base snapshot,
//! creation of missing keys, deletion of emptied ones and the memory account are handled here
//! once.

use super::entry::lru_now;
use super::error::StoreError;
use super::object::{Limits, Object, ValueType};
use super::shard::Shard;
use super::sharded::Store;

/// A key's value as `OBJECT`, `MEMORY USAGE` and `TYPE` see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    pub value_type: ValueType,
    pub encoding: &'static str,
    /// Bytes the key costs: entry, key, value.
    pub memory: usize,
    /// Seconds since the last access.
    pub idle_secs: u64,
    /// The LFU counter, decayed (`None`: no LFU policy, counters are not kept).
    pub freq: Option<u32>,
    /// The LRU clock of the last access, in seconds on a 24-bit clock as Redis's DEBUG OBJECT
    /// shows it (`lru:`).
    pub lru_secs: u32,
}

impl Store {
    /// Runs `f` on the value of `key` if it has type `t` (`None` if the key does not exist).
    /// A read refreshes the key's LRU clock and counts a keyspace hit or miss.
    pub fn read_object<R>(
        &self,
        key: &[u8],
        t: ValueType,
        f: impl FnOnce(Option<&Object>) -> R,
    ) -> Result<R, StoreError> {
        self.with_shard(key, |s, h, now| read_in(s, h, key, now, t, f))
    }

    /// The last ID of the stream at `key` (`None`: no stream there): what XREAD's `$` stands for.
    pub fn last_stream_id(&self, key: &[u8]) -> Option<super::object::stream::StreamId> {
        self.read_object(key, ValueType::Stream, |o| match o {
            Some(Object::Stream(s)) => Some(s.last_id),
            _ => None,
        })
        .ok()
        .flatten()
    }

    /// Runs `f` on the value of `key` for a change. `f` sees `None` for a missing key and may put
    /// a new value there (`Object::empty(t)`, then filled); a value `f` leaves empty deletes the
    /// key, as Redis deletes emptied collections. The TTL is kept.
    pub fn write_object<R>(
        &self,
        key: &[u8],
        t: ValueType,
        f: impl FnOnce(&mut Option<Box<Object>>, &Limits) -> R,
    ) -> Result<R, StoreError> {
        self.check_len(key.len())?;
        self.with_shard(key, |s, h, now| write_in(s, h, key, now, t, f))
    }

    /// Runs `f` on the string at `key` (`None`: no such key); WRONGTYPE for any other type. A read
    /// refreshes the LRU clock and counts a hit or miss (GETBIT, BITCOUNT, PFCOUNT, ...).
    pub fn read_string<R>(&self, key: &[u8], f: impl FnOnce(Option<&[u8]>) -> R) -> Result<R, StoreError> {
        self.with_shard(key, |s, h, now| read_string_in(s, h, key, now, f))
    }

    /// Runs `f` with the string at `key` open for change (SETBIT, BITFIELD, PFADD, ...);
    /// WRONGTYPE for any other type. The TTL is kept.
    pub fn write_string<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(&mut StrSlot<'_>) -> R,
    ) -> Result<R, StoreError> {
        self.check_len(key.len())?;
        let max = self.config.max_value_len;
        self.with_shard(key, |s, h, now| write_string_in(s, h, key, now, max, f))
    }

    /// What `key` holds, for OBJECT and MEMORY USAGE (no LRU touch).
    pub fn key_info(&self, key: &[u8]) -> Option<KeyInfo> {
        self.with_shard(key, |s, h, now| {
            let value_type = s.peek(h, key, now, false, |v| v.value_type)?;
            let pos = s.find_live(h, key, now)?;
            let e = s.entry(pos);
            let idle_secs = u64::from(lru_now(now).wrapping_sub(e.lru)) / 100;
            let freq = s.lfu.get().map(|l| l.decayed(e.lfu_bits(), lru_now(now)));
            let base = super::entry::ENTRY_SIZE + e.heap_size();
            let lru_secs = (e.lru / 100) & 0xFF_FFFF;
            Some(match s.object(pos) {
                Some(o) => KeyInfo {
                    value_type,
                    encoding: o.encoding(),
                    memory: base + o.mem(),
                    idle_secs,
                    freq,
                    lru_secs,
                },
                None => KeyInfo {
                    value_type,
                    encoding: e.string_encoding(),
                    memory: base,
                    idle_secs,
                    freq,
                    lru_secs,
                },
            })
        })
    }

    /// Locks the shards of `keys` (in shard order, so two such calls never deadlock) and runs `f`
    /// with them: a command over several keys of this node is atomic, as in Redis.
    pub fn with_keys<R>(&self, keys: &[&[u8]], f: impl FnOnce(&mut Locked<'_>) -> R) -> R {
        let mut indices: Vec<usize> = keys.iter().map(|k| self.shard_of(k)).collect();
        indices.sort_unstable();
        indices.dedup();
        let guards: Vec<_> = indices.iter().map(|&i| self.shards[i].lock()).collect();
        let before: usize = guards.iter().map(|g| g.mem()).sum();
        let mut locked = Locked { store: self, indices, guards, now: self.clock.now_ms() };
        let r = f(&mut locked);
        let after: usize = locked.guards.iter().map(|g| g.mem()).sum();
        drop(locked);
        self.settle(before, after);
        r
    }

    /// Stores replicated entries (key, serialized value, type, absolute expiry), each replacing
    /// what its key held, as [`Locked::restore`] does, locking each shard once for all of its keys
    /// rather than once per key: a replica applies its primary's cuts this way. Entries of one
    /// key keep their order. All or nothing: every value is decoded and checked first, and if
    /// any cannot be stored, none is, and the ones that cannot are returned with why (a cut is a
    /// unit: a transaction's or script's writes are stored whole or not at all).
    pub fn restore_all<'e>(&self, entries: &[Restore<'e>]) -> Vec<(&'e [u8], StoreError)> {
        let mut checked = Vec::with_capacity(entries.len());
        let mut failed = Vec::new();
        for e in entries {
            match self.check_restore(e.key, e.value, e.value_type) {
                Ok(object) => checked.push(Some(object)),
                Err(err) => failed.push((e.key, err)),
            }
        }
        if !failed.is_empty() {
            return failed;
        }
        let mut by_shard: Vec<Vec<usize>> = vec![Vec::new(); self.shards.len()];
        for (i, e) in entries.iter().enumerate() {
            by_shard[self.shard_of(e.key)].push(i);
        }
        for group in by_shard.iter().filter(|g| !g.is_empty()) {
            // Every key of the group lives in the first one's shard: one lock serves them all.
            self.with_keys(&[entries[group[0]].key], |l| {
                for &i in group {
                    let (e, object) = (&entries[i], checked[i].take().expect("checked once"));
                    l.put_restored(e.key, e.value, e.expire_at, object);
                }
            });
        }
        failed
    }

    /// A value about to be restored, decoded (a typed one) and checked against the limits.
    fn check_restore(
        &self,
        key: &[u8],
        value: &[u8],
        t: ValueType,
    ) -> Result<Option<Box<Object>>, StoreError> {
        let object = match t {
            ValueType::String => None,
            t => Some(Box::new(
                Object::deserialize(t, value, &self.limits()).map_err(|_| StoreError::BadValue)?,
            )),
        };
        self.check_len(key.len())?;
        self.check_len(value.len())?;
        Ok(object)
    }
}

/// The shards of a multi-key command, locked (see [`Store::with_keys`]). Every key the command
/// touches must have been named when locking.
pub struct Locked<'a> {
    store: &'a Store,
    indices: Vec<usize>,
    guards: Vec<parking_lot::MutexGuard<'a, Shard>>,
    now: u64,
}

/// One replicated entry for [`Store::restore_all`].
#[derive(Debug, Clone, Copy)]
pub struct Restore<'e> {
    pub key: &'e [u8],
    /// The value as the primary serialized it (a string's bytes as they are).
    pub value: &'e [u8],
    pub value_type: ValueType,
    /// Absolute expiry time in ms (0: none).
    pub expire_at: u64,
}

impl Locked<'_> {
    fn shard(&mut self, key: &[u8]) -> (&mut Shard, u64, u64) {
        let i = self.indices.binary_search(&self.store.shard_of(key)).expect("key locked by with_keys");
        let s = &mut *self.guards[i];
        let h = s.hash(key);
        (s, h, self.now)
    }

    pub fn read_object<R>(
        &mut self,
        key: &[u8],
        t: ValueType,
        f: impl FnOnce(Option<&Object>) -> R,
    ) -> Result<R, StoreError> {
        let (s, h, now) = self.shard(key);
        read_in(s, h, key, now, t, f)
    }

    pub fn write_object<R>(
        &mut self,
        key: &[u8],
        t: ValueType,
        f: impl FnOnce(&mut Option<Box<Object>>, &Limits) -> R,
    ) -> Result<R, StoreError> {
        self.store.check_len(key.len())?;
        let (s, h, now) = self.shard(key);
        write_in(s, h, key, now, t, f)
    }

    pub fn read_string<R>(
        &mut self,
        key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> R,
    ) -> Result<R, StoreError> {
        let (s, h, now) = self.shard(key);
        read_string_in(s, h, key, now, f)
    }

    pub fn write_string<R>(
        &mut self,
        key: &[u8],
        f: impl FnOnce(&mut StrSlot<'_>) -> R,
    ) -> Result<R, StoreError> {
        self.store.check_len(key.len())?;
        let max = self.store.config.max_value_len;
        let (s, h, now) = self.shard(key);
        write_string_in(s, h, key, now, max, f)
    }

    /// The type of `key`'s value, if it exists (no LRU touch, no counting).
    pub fn value_type(&mut self, key: &[u8]) -> Option<ValueType> {
        let (s, h, now) = self.shard(key);
        s.peek(h, key, now, false, |v| v.value_type)
    }

    /// A copy of `key`'s value (serialized if typed), TTL and type (RENAME, COPY).
    pub fn export(&mut self, key: &[u8]) -> Option<(bytes::Bytes, u64, ValueType)> {
        let (s, h, now) = self.shard(key);
        s.export_value(h, key, now)
    }

    /// Deletes `key`; whether it existed.
    pub fn delete(&mut self, key: &[u8]) -> bool {
        let (s, h, now) = self.shard(key);
        // An expired entry a replica keeps goes too: this is its primary's removal arriving.
        match s.find_live(h, key, now).or_else(|| s.kept(h, key)) {
            Some(p) => {
                s.delete(h, p);
                true
            }
            None => false,
        }
    }

    /// Makes `key` hold exactly `value` of type `t` with absolute expiry `expire_at` (0: none),
    /// whatever it held before (RENAME, COPY ... REPLACE, results written back by a cross-node
    /// command). A typed value that does not decode is refused.
    pub fn restore(
        &mut self,
        key: &[u8],
        value: &[u8],
        expire_at: u64,
        t: ValueType,
    ) -> Result<(), StoreError> {
        let object = self.store.check_restore(key, value, t)?;
        self.put_restored(key, value, expire_at, object);
        Ok(())
    }

    /// Makes `key` hold the decoded value `object` (or, when `None`, the string `value`) with
    /// absolute expiry `expire_at` (0: none), whatever it held before (RESTORE).
    pub fn restore_value(
        &mut self,
        key: &[u8],
        value: &[u8],
        object: Option<Box<Object>>,
        expire_at: u64,
    ) -> Result<(), StoreError> {
        self.store.check_len(key.len())?;
        self.store.check_len(value.len())?;
        self.put_restored(key, value, expire_at, object);
        Ok(())
    }

    /// Makes `key` look idle for `secs` seconds (RESTORE ... IDLETIME, OBJECT IDLETIME's view).
    pub fn set_idle(&mut self, key: &[u8], secs: u64) {
        let (s, h, now) = self.shard(key);
        if let Some(p) = s.find_live(h, key, now) {
            let lru = lru_now(now).wrapping_sub(secs.saturating_mul(100).min(u64::from(u32::MAX / 2)) as u32);
            s.update(p, |e| e.lru = lru);
        }
    }

    /// Marks `key`'s string as built in place, which Redis reports `raw` (BITOP's destination).
    pub fn mark_raw(&mut self, key: &[u8]) {
        let (s, h, now) = self.shard(key);
        if let Some(p) = s.find_live(h, key, now) {
            s.update(p, |e| e.mark_string(super::entry::RAW));
        }
    }

    /// Sets `key`'s LFU counter (RESTORE ... FREQ).
    pub fn set_freq(&mut self, key: &[u8], freq: u8) {
        let (s, h, now) = self.shard(key);
        if let Some(p) = s.find_live(h, key, now) {
            s.update(p, |e| e.set_lfu_bits(super::lfu::with_counter(lru_now(now), freq)));
        }
    }

    /// [`Locked::restore`]'s write, of a value [`Store::check_restore`] passed.
    fn put_restored(&mut self, key: &[u8], value: &[u8], expire_at: u64, object: Option<Box<Object>>) {
        let (s, h, now) = self.shard(key);
        if let Some(p) = s.find_live(h, key, now).or_else(|| s.kept(h, key)) {
            s.delete(h, p);
        }
        // Already expired by this clock: gone, except on a replica, which stores what its primary
        // sends (its primary's clock decides; see `Store::set_follower`).
        if expire_at != 0 && expire_at <= now && !s.keeps_expired() {
            return;
        }
        match object {
            None => {
                s.insert_new(h, key, value, expire_at, lru_now(now));
            }
            Some(o) if o.is_empty() => {}
            Some(o) => {
                let p = s.insert_new(h, key, b"", expire_at, lru_now(now));
                s.put_object(p, o);
            }
        }
    }

    /// `proto-max-bulk-len`: the longest value (LCS bounds its working memory by it).
    pub fn max_value_len(&self) -> usize {
        self.store.config.max_value_len
    }

    /// The node's encoding thresholds now (what a value built by a command, say a STORE
    /// destination, is encoded by).
    pub fn limits(&self) -> super::object::Limits {
        self.store.limits()
    }

    /// Unix ms by the store's clock, fixed for the command.
    pub fn now_ms(&self) -> u64 {
        self.now
    }
}

/// A string key open for change (see [`Store::write_string`]).
pub struct StrSlot<'a> {
    s: &'a mut Shard,
    h: u64,
    key: &'a [u8],
    now: u64,
    pos: Option<u32>,
    max_len: usize,
}

impl StrSlot<'_> {
    /// The current value (`None`: the key does not exist).
    pub fn get(&self) -> Option<&[u8]> {
        self.pos.map(|p| self.s.entry(p).value())
    }

    /// Makes the value `len` bytes long (zero-filled where new; creating the key if missing)
    /// and runs `f` on it. Refuses lengths past `proto-max-bulk-len`.
    pub fn edit<R>(&mut self, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> Result<R, StoreError> {
        if len > self.max_len {
            return Err(StoreError::TooLarge);
        }
        let pos = match self.pos {
            Some(p) => p,
            None => {
                let p = self.s.insert_new(self.h, self.key, b"", 0, lru_now(self.now));
                self.pos = Some(p);
                p
            }
        };
        let r = self.s.update(pos, |e| f(e.value_resize(len)));
        self.s.touch(pos, self.now);
        Ok(r)
    }

    /// Replaces the value (creating the key if missing).
    pub fn set(&mut self, value: &[u8]) -> Result<(), StoreError> {
        self.edit(value.len(), |v| v.copy_from_slice(value))
    }
}

fn read_string_in<R>(
    s: &mut Shard,
    h: u64,
    key: &[u8],
    now: u64,
    f: impl FnOnce(Option<&[u8]>) -> R,
) -> Result<R, StoreError> {
    match s.peek(h, key, now, false, |v| v.value_type) {
        None => {
            s.misses += 1;
            return Ok(f(None));
        }
        Some(t) if t != ValueType::String => return Err(StoreError::WrongType),
        Some(_) => {}
    }
    Ok(s.read(h, key, now, |v| f(Some(v.value))).expect("present a moment ago, under the same lock"))
}

fn write_string_in<R>(
    s: &mut Shard,
    h: u64,
    key: &[u8],
    now: u64,
    max_len: usize,
    f: impl FnOnce(&mut StrSlot<'_>) -> R,
) -> Result<R, StoreError> {
    let pos = s.find_live(h, key, now);
    if let Some(p) = pos
        && s.entry(p).value_type() != ValueType::String
    {
        return Err(StoreError::WrongType);
    }
    let mut slot = StrSlot { s, h, key, now, pos, max_len };
    Ok(f(&mut slot))
}

fn read_in<R>(
    s: &mut Shard,
    h: u64,
    key: &[u8],
    now: u64,
    t: ValueType,
    f: impl FnOnce(Option<&Object>) -> R,
) -> Result<R, StoreError> {
    match s.peek(h, key, now, false, |v| v.value_type) {
        None => {
            s.misses += 1;
            return Ok(f(None));
        }
        Some(found) if found != t => return Err(StoreError::WrongType),
        Some(_) => {}
    }
    let pos = s.lookup(h, key, now).expect("present a moment ago, under the same lock");
    // A hash's fields past their time are removed before anything reads it (Redis's lazy field
    // expiry); one whose every field had expired is gone.
    if t == ValueType::Hash && s.purge_fields(pos, now) {
        return Ok(f(None));
    }
    s.touch(pos, now);
    Ok(f(s.object(pos)))
}

fn write_in<R>(
    s: &mut Shard,
    h: u64,
    key: &[u8],
    now: u64,
    t: ValueType,
    f: impl FnOnce(&mut Option<Box<Object>>, &Limits) -> R,
) -> Result<R, StoreError> {
    let mut pos = s.find_live(h, key, now);
    if let Some(p) = pos
        && s.entry(p).value_type() != t
    {
        return Err(StoreError::WrongType);
    }
    if t == ValueType::Hash
        && let Some(p) = pos
        && s.purge_fields(p, now)
    {
        pos = None; // every field had expired: the hash is gone, as for read_in
    }
    let limits = s.limits.clone();
    let Some(p) = pos else {
        let mut slot = None;
        let r = f(&mut slot, &limits);
        if let Some(o) = slot.filter(|o| !o.is_empty()) {
            let p = s.insert_new(h, key, b"", 0, lru_now(now));
            s.put_object(p, o);
        }
        return Ok(r);
    };
    // The value is changed where it lies (`Shard::edit_object`); an emptied one deletes its key.
    let (r, emptied) = s.edit_object(p, |slot| f(slot, &limits));
    if emptied {
        s.delete(h, p);
    } else {
        s.touch(p, now);
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::{ManualClock, StoreConfig, TtlState};

    fn hset(store: &Store, key: &str, f: &str, v: &str) -> Result<bool, StoreError> {
        store.write_object(key.as_bytes(), ValueType::Hash, |slot, limits| {
            let o = slot.get_or_insert_with(|| Box::new(Object::empty(ValueType::Hash)));
            let Object::Hash(h) = &mut **o else { unreachable!() };
            h.set(f.as_bytes(), v.as_bytes(), limits)
        })
    }

    #[test]
    fn typed_values_are_created_checked_emptied_and_counted() {
        let store = Store::new(StoreConfig::default(), Arc::new(ManualClock::new(1_000)));
        let before = store.used_memory();
        assert_eq!(hset(&store, "h", "f", "v"), Ok(true));
        assert!(store.used_memory() > before, "the new hash is counted");
        assert_eq!(store.type_of(b"h"), "hash");
        assert_eq!(store.get_checked(b"h"), Err(StoreError::WrongType));
        assert_eq!(store.get(b"h"), None, "MGET's view");
        assert!(store.set(b"s", b"x", Default::default()).is_ok());
        assert_eq!(hset(&store, "s", "f", "v"), Err(StoreError::WrongType));
        let got = store.read_object(b"h", ValueType::Hash, |o| match o {
            Some(Object::Hash(h)) => h.get(b"f").map(<[u8]>::to_vec),
            _ => None,
        });
        assert_eq!(got, Ok(Some(b"v".to_vec())));
        // Emptying deletes the key and gives its memory back.
        store
            .write_object(b"h", ValueType::Hash, |slot, _| {
                let Some(o) = slot else { panic!() };
                let Object::Hash(h) = &mut **o else { panic!() };
                h.remove(b"f")
            })
            .unwrap();
        assert_eq!(store.type_of(b"h"), "none");
        assert!(!store.exists(b"h"));
        // SET replaces a typed value whatever it was.
        hset(&store, "h2", "f", "v").unwrap();
        store.set(b"h2", b"plain", Default::default()).unwrap();
        assert_eq!(store.get(b"h2"), Some("plain".into()));
        assert_eq!(store.key_info(b"h2").unwrap().encoding, "embstr");
    }

    #[test]
    fn replicated_entries_are_restored_shard_by_shard_in_order_and_failures_named() {
        let store =
            Store::new(StoreConfig { shards: 8, ..Default::default() }, Arc::new(ManualClock::new(1_000)));
        let mut hash = Object::empty(ValueType::Hash);
        let Object::Hash(h) = &mut hash else { unreachable!() };
        assert!(h.set(b"f", b"v", &store.limits()));
        let hash = hash.serialize();
        let keys: Vec<String> = (0..40).map(|i| format!("key:{i}")).collect();
        fn string<'a>(key: &'a str, value: &'a str) -> Restore<'a> {
            Restore {
                key: key.as_bytes(),
                value: value.as_bytes(),
                value_type: ValueType::String,
                expire_at: 0,
            }
        }
        // The keys spread over every shard; key:7 twice (the later one wins), key:8 with an
        // expiry, a hash, and a value its type cannot read.
        let mut entries: Vec<Restore<'_>> = keys.iter().map(|k| string(k, "first")).collect();
        entries.push(string("key:7", "second"));
        entries.push(Restore { expire_at: 61_000, ..string("key:8", "expiring") });
        entries.push(Restore { key: b"h", value: &hash, value_type: ValueType::Hash, expire_at: 0 });
        entries.push(Restore { key: b"bad", value: b"\xff\x00", value_type: ValueType::Hash, expire_at: 0 });
        let failed = store.restore_all(&entries);
        assert_eq!(failed, vec![(&b"bad"[..], StoreError::BadValue)]);
        assert_eq!(store.len(), 0, "a unit with a value that cannot be stored is stored not at all");
        entries.pop();
        assert!(store.restore_all(&entries).is_empty());
        assert_eq!(store.get(b"key:0"), Some("first".into()));
        assert_eq!(store.get(b"key:39"), Some("first".into()));
        assert_eq!(store.get(b"key:7"), Some("second".into()));
        assert_eq!(store.get(b"key:8"), Some("expiring".into()));
        assert_eq!(store.ttl(b"key:8"), TtlState::ExpiresAt(61_000));
        assert_eq!(store.type_of(b"h"), "hash");
        assert!(!store.exists(b"bad"));
        assert_eq!(store.len(), 41, "the 40 keys and the hash");
    }

    #[test]
    fn changed_limits_apply_to_the_next_conversion() {
        let store = Store::new(StoreConfig::default(), Arc::new(ManualClock::new(1_000)));
        let encoding = |key: &str| store.key_info(key.as_bytes()).unwrap().encoding;
        for f in ["a", "b", "c"] {
            hset(&store, "before", f, "v").unwrap();
        }
        assert_eq!(encoding("before"), "listpack");
        let limits = Limits { hash_max_listpack_entries: 2, ..store.limits() };
        store.set_limits(limits.clone());
        assert_eq!(store.limits(), limits);
        assert_eq!(encoding("before"), "listpack", "a stored value keeps its encoding");
        hset(&store, "before", "a", "w").unwrap();
        assert_eq!(
            encoding("before"),
            "hashtable",
            "its next write converts it, an update too (as in Redis)"
        );
        for f in ["a", "b"] {
            hset(&store, "after", f, "v").unwrap();
        }
        assert_eq!(encoding("after"), "listpack");
        hset(&store, "after", "c", "v").unwrap();
        assert_eq!(encoding("after"), "hashtable");
        // A value built outside a shard (RESTORE, imports) follows the new limits too.
        assert_eq!(store.scratch().limits(), limits);
    }
}
