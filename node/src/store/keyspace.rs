//! Key commands: existence, deletion, TTLs, iteration and whole-store operations.

use bytes::Bytes;

use super::entry::lru_now;
use super::error::StoreError;
use super::object::{Object, ValueType};
use super::shard::{Imported, Presence};
use super::sharded::Store;
use super::slots::BASE_MASKED;
use shoal_wire::glob::glob_match;

/// A key's TTL as TTL/PTTL/EXPIRETIME need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtlState {
    Missing,
    Persistent,
    ExpiresAt(u64),
}

/// EXPIRE's NX / XX / GT / LT, combinable as in Redis.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExpireFlags {
    pub nx: bool,
    pub xx: bool,
    pub gt: bool,
    pub lt: bool,
}

/// One step of a SCAN over this store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanPage {
    /// 0 when the scan is complete.
    pub cursor: u64,
    pub keys: Vec<Bytes>,
}

/// Cursor layout: shard index above bit 40, slab position below. Cursor 0 is the start.
const CURSOR_SHARD_SHIFT: u32 = 40;

impl Store {
    pub fn del(&self, key: &[u8]) -> bool {
        self.with_shard(key, |s, h, now| match s.find_live(h, key, now) {
            Some(p) => {
                s.delete(h, p);
                true
            }
            None => {
                s.record_delete(h, key);
                false
            }
        })
    }

    /// Whether `key` has a value, a recorded delete, or nothing here.
    pub fn presence(&self, key: &[u8]) -> Presence {
        self.with_shard(key, |s, h, now| s.presence(h, key, now))
    }

    /// A key's value (serialized, for a typed value), TTL and value type, to move it elsewhere.
    pub fn fetch(&self, key: &[u8]) -> Option<(Bytes, u64, ValueType)> {
        self.with_shard(key, |s, h, now| s.export_value(h, key, now))
    }

    /// Stores entries moved from another node where nothing is known about their key here yet
    /// (receiver wins): `(key, value, expire_at, value type number)`. Returns how many were
    /// stored; a typed value that does not decode is refused (and logged).
    pub fn import<'a>(&self, entries: impl IntoIterator<Item = (&'a [u8], &'a [u8], u64, u32)>) -> usize {
        let mut stored = 0;
        for (key, value, expire_at, value_type) in entries {
            let limits = self.limits();
            let imported = match ValueType::from_u32(value_type) {
                Some(ValueType::String) => Imported::String(value),
                Some(t) => match Object::deserialize(t, value, &limits) {
                    Ok(o) => Imported::Object(Box::new(o)),
                    Err(err) => {
                        tracing::error!(key = %String::from_utf8_lossy(key), %err, "refused an undecodable typed value");
                        continue;
                    }
                },
                None => {
                    tracing::error!(key = %String::from_utf8_lossy(key), value_type, "refused a value of unknown type");
                    continue;
                }
            };
            if self.with_shard(key, |s, h, now| s.import(h, key, imported, expire_at, now)) {
                stored += 1;
            }
        }
        stored
    }

    /// EXISTS (does not count as an access for LRU, as in Redis).
    pub fn exists(&self, key: &[u8]) -> bool {
        self.with_shard(key, |s, h, now| s.peek(h, key, now, false, |_| ()).is_some())
    }

    /// TOUCH: exists, and counts as an access for LRU.
    pub fn touch(&self, key: &[u8]) -> bool {
        self.with_shard(key, |s, h, now| s.read(h, key, now, |_| ()).is_some())
    }

    /// TYPE: every stored value is a string.
    pub fn type_of(&self, key: &[u8]) -> &'static str {
        self.with_shard(key, |s, h, now| s.peek(h, key, now, false, |v| v.value_type.name()))
            .unwrap_or("none")
    }

    /// EXPIRE/PEXPIRE/EXPIREAT/PEXPIREAT at absolute time `at` (ms; may be in the past or
    /// negative, which deletes the key). Returns whether the TTL was set (or the key deleted).
    pub fn expire(&self, key: &[u8], at: i64, flags: ExpireFlags) -> bool {
        self.with_shard(key, |s, h, now| {
            let Some(p) = s.find_live(h, key, now) else { return false };
            let current = s.entry(p).expire_at;
            let at_clamped = at.max(0) as u64;
            // No TTL counts as infinite: GT never beats it, LT always does. One clause per flag,
            // as Redis checks them, reads better than the minimal form.
            #[allow(clippy::nonminimal_bool)]
            let ok = !(flags.nx && current != 0)
                && !(flags.xx && current == 0)
                && !(flags.gt && (current == 0 || at <= current as i64))
                && !(flags.lt && current != 0 && at >= current as i64);
            if !ok {
                return false;
            }
            if at <= now as i64 {
                s.delete(h, p);
            } else {
                s.set_expire(h, p, at_clamped);
            }
            true
        })
    }

    pub fn persist(&self, key: &[u8]) -> bool {
        self.with_shard(key, |s, h, now| match s.find_live(h, key, now) {
            Some(p) if s.entry(p).expire_at != 0 => {
                s.set_expire(h, p, 0);
                true
            }
            _ => false,
        })
    }

    pub fn ttl(&self, key: &[u8]) -> TtlState {
        self.with_shard(key, |s, h, now| match s.peek(h, key, now, false, |v| v.expire_at) {
            None => TtlState::Missing,
            Some(0) => TtlState::Persistent,
            Some(at) => TtlState::ExpiresAt(at),
        })
    }

    /// One SCAN step visiting about `count` positions. `type_filter` is a Redis type name (empty
    /// for any); only `string` values exist here. Memory shards are walked first, then the base
    /// snapshot (skipping keys that memory holds or hides).
    pub fn scan(&self, cursor: u64, count: usize, pattern: Option<&[u8]>, type_filter: &str) -> ScanPage {
        let now = self.now_ms();
        let mut shard = (cursor >> CURSOR_SHARD_SHIFT) as usize;
        let mut pos = (cursor & ((1 << CURSOR_SHARD_SHIFT) - 1)) as usize;
        // A lone `*` means "no filter" (Redis special-cases it, so even the empty key matches).
        let pattern = pattern.filter(|p| *p != b"*");
        let wanted = |key: &[u8]| pattern.is_none_or(|p| glob_match(p, key));
        // An unknown type name matches nothing (as in Redis 7.0).
        let wanted_type = (!type_filter.is_empty()).then(|| ValueType::from_name(type_filter.as_bytes()));
        let type_ok = |t: ValueType| wanted_type.is_none_or(|w| w == Some(t));
        let mut budget = count.max(1);
        let mut keys = Vec::new();
        let cursor_at = |shard: usize, pos: usize| ((shard as u64) << CURSOR_SHARD_SHIFT) | pos as u64;
        while shard < self.shards.len() {
            let s = self.shards[shard].lock();
            let (next, visited) = s.scan(pos, budget, |e| {
                if type_ok(e.value_type()) && !e.is_expired(now) && wanted(e.key()) {
                    keys.push(Bytes::copy_from_slice(e.key()));
                }
            });
            drop(s);
            budget = budget.saturating_sub(visited);
            if let Some(p) = next {
                return ScanPage { cursor: cursor_at(shard, p), keys };
            }
            shard += 1;
            pos = 0;
            if budget == 0 {
                // Resume at the start of the next shard, or of the base (never cursor 0).
                return ScanPage { cursor: cursor_at(shard, 0), keys };
            }
        }
        if shard == self.shards.len()
            && let Some(base) = self.base()
        {
            let end = pos.saturating_add(budget).min(base.len());
            for i in pos..end {
                if let Some(e) = base.checked_entry(i)
                    && type_ok(ValueType::from_u32(e.value_type).unwrap_or(ValueType::String))
                    && wanted(e.key)
                    && self.base_visible(&e, now)
                {
                    keys.push(Bytes::copy_from_slice(e.key));
                }
            }
            if end < base.len() {
                return ScanPage { cursor: cursor_at(shard, end), keys };
            }
        }
        ScanPage { cursor: 0, keys }
    }

    /// Whether a base entry is the current, live value of its key.
    fn base_visible(&self, e: &crate::snapshot::EntryRef<'_>, now: u64) -> bool {
        !e.is_expired(now) && !self.slots.has(e.slot, BASE_MASKED) && !self.in_memory(e.key)
    }

    /// Whether memory holds `key` at all (a value, expired or not, or a tombstone): the base's
    /// entry for it is then not the current one.
    fn in_memory(&self, key: &[u8]) -> bool {
        let s = self.shards[self.shard_of(key)].lock();
        s.find(s.hash(key), key).is_some()
    }

    /// KEYS: every live key matching `pattern`.
    pub fn keys(&self, pattern: &[u8]) -> Vec<Bytes> {
        let now = self.now_ms();
        let wanted = |key: &[u8]| pattern == b"*" || glob_match(pattern, key);
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let s = shard.lock();
            out.extend(
                s.iter()
                    .filter(|e| !e.is_expired(now) && wanted(e.key()))
                    .map(|e| Bytes::copy_from_slice(e.key())),
            );
        }
        if let Some(base) = self.base() {
            for i in 0..base.len() {
                if let Some(e) = base.checked_entry(i)
                    && wanted(e.key)
                    && self.base_visible(&e, now)
                {
                    out.push(Bytes::copy_from_slice(e.key));
                }
            }
        }
        out
    }

    /// RANDOMKEY: a random live key, or `None` when the store is empty. Memory and the base are
    /// picked in proportion to the keys each holds.
    pub fn random_key(&self) -> Option<Bytes> {
        let mut rng = fastrand::Rng::new();
        let n = self.shards.len();
        let mem_values: usize = self.shards.iter().map(|s| s.lock().values()).sum();
        let base_visible = self.len().saturating_sub(mem_values);
        for _ in 0..4 * n + 64 {
            let total = mem_values + base_visible;
            if total == 0 {
                break;
            }
            let found = if rng.usize(..total) < mem_values {
                self.with_shard_at(rng.usize(..n), |s| {
                    let now = self.now_ms();
                    let p = s.random_pos(&mut rng)?;
                    let e = s.entry(p);
                    if e.is_expired(now) {
                        if !s.keeps_expired() {
                            let h = s.hash(e.key());
                            s.expire_at_pos(h, p, now, super::lag::Removal::Lazy);
                        }
                        return None;
                    }
                    Some(Bytes::copy_from_slice(e.key()))
                })
            } else {
                let base = self.base()?;
                let e = base.checked_entry(rng.usize(..base.len()))?;
                self.base_visible(&e, self.now_ms()).then(|| Bytes::copy_from_slice(e.key))
            };
            if found.is_some() {
                return found;
            }
        }
        // Sparse: fall back to the first live key in order.
        let now = self.now_ms();
        let in_mem = self.shards.iter().find_map(|shard| {
            let s = shard.lock();
            s.iter().find(|e| !e.is_expired(now)).map(|e| Bytes::copy_from_slice(e.key()))
        });
        in_mem.or_else(|| {
            let base = self.base()?;
            (0..base.len())
                .filter_map(|i| base.checked_entry(i))
                .find(|e| self.base_visible(e, now))
                .map(|e| Bytes::copy_from_slice(e.key))
        })
    }

    /// DBSIZE: memory values plus the base entries they do not replace or hide (keys past their
    /// TTL but not yet reclaimed are counted, as in Redis).
    pub fn len(&self) -> usize {
        let (values, shadowed) = self.shards.iter().fold((0, 0), |(v, sh), s| {
            let s = s.lock();
            (v + s.values(), sh + s.shadowed())
        });
        let base = self.base().map_or(0, |b| b.len());
        values + base.saturating_sub(shadowed + self.base_masked.load(std::sync::atomic::Ordering::Relaxed))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// FLUSHALL / FLUSHDB: memory and the base snapshot alike.
    pub fn flush(&self) -> usize {
        let n = self.len();
        // As Redis 7.0: the watched keys that exist change; a watched key that is not there is
        // not changed by a flush (WATCH x, FLUSHALL, then EXEC still runs when x never existed).
        if self.watches.active() {
            for key in self.watches.watched_keys() {
                if self.exists(&key) {
                    self.watches.touch_watched(&key);
                }
            }
        }
        self.base.write().take();
        for i in 0..self.shards.len() {
            self.with_shard_at(i, |s| s.clear());
        }
        self.watches.tracking.touch_all();
        self.events.changes.resync();
        n
    }

    /// MSETNX on this node: sets every pair only if none of the keys exists, atomically (all the
    /// shards involved are locked, in index order so concurrent calls cannot deadlock).
    pub fn mset_nx(&self, pairs: &[(&[u8], &[u8])]) -> Result<bool, StoreError> {
        for (k, v) in pairs {
            self.check_len(k.len())?;
            self.check_len(v.len())?;
        }
        self.make_room()?;
        let now = self.now_ms();
        let mut indices: Vec<usize> = pairs.iter().map(|(k, _)| self.shard_of(k)).collect();
        indices.sort_unstable();
        indices.dedup();
        let mut guards: Vec<_> = indices.iter().map(|&i| self.shards[i].lock()).collect();
        let before: usize = guards.iter().map(|g| g.mem()).sum();
        let guard_of = |key: &[u8]| indices.binary_search(&self.shard_of(key)).expect("locked");
        let any_exists = pairs.iter().any(|(k, _)| {
            let g = &mut guards[guard_of(k)];
            let h = g.hash(k);
            g.peek(h, k, now, false, |_| ()).is_some()
        });
        if !any_exists {
            for (k, v) in pairs {
                let g = &mut guards[guard_of(k)];
                let h = g.hash(k);
                match g.find_live(h, k, now) {
                    Some(p) => {
                        g.update(p, |e| e.set_value(v));
                        g.set_expire(h, p, 0);
                    }
                    None => {
                        g.insert_new(h, k, v, 0, lru_now(now));
                    }
                }
            }
        }
        let after: usize = guards.iter().map(|g| g.mem()).sum();
        drop(guards);
        self.settle(before, after);
        Ok(!any_exists)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;

    use super::*;
    use crate::store::{Clock, ManualClock, SetExpiry, SetOptions, StoreConfig};

    fn store() -> (Store, ManualClock) {
        let clock = ManualClock::new(1_000_000);
        (Store::new(StoreConfig { shards: 4, ..Default::default() }, Arc::new(clock.clone())), clock)
    }

    fn put(s: &Store, k: &str) {
        s.set(k.as_bytes(), b"v", SetOptions::default()).unwrap();
    }

    #[test]
    fn expire_conditions_follow_redis() {
        let (s, clock) = store();
        let now = clock.now_ms() as i64;
        put(&s, "k");
        let nx = ExpireFlags { nx: true, ..Default::default() };
        let xx = ExpireFlags { xx: true, ..Default::default() };
        let gt = ExpireFlags { gt: true, ..Default::default() };
        let lt = ExpireFlags { lt: true, ..Default::default() };
        let xx_lt = ExpireFlags { xx: true, lt: true, ..Default::default() };
        assert!(!s.expire(b"k", now + 100, xx), "XX needs a TTL");
        assert!(!s.expire(b"k", now + 100, gt), "GT never beats no TTL");
        assert!(!s.expire(b"k", now + 100, xx_lt), "XX LT needs a TTL too");
        assert!(s.expire(b"k", now + 100, lt), "LT beats no TTL");
        assert!(!s.expire(b"k", now + 200, nx));
        assert!(s.expire(b"k", now + 200, gt));
        assert!(!s.expire(b"k", now + 300, lt));
        assert!(!s.expire(b"k", now + 300, xx_lt));
        assert_eq!(s.ttl(b"k"), TtlState::ExpiresAt((now + 200) as u64));
        assert!(s.persist(b"k"));
        assert!(!s.persist(b"k"));
        assert!(s.expire(b"k", -5, ExpireFlags::default()), "a past time deletes");
        assert_eq!(s.ttl(b"k"), TtlState::Missing);
        assert!(!s.expire(b"missing", now + 1, ExpireFlags::default()));
    }

    #[test]
    fn scan_returns_every_stable_key_exactly_once_despite_churn() {
        let (s, _) = store();
        for i in 0..500 {
            put(&s, &format!("stable{i}"));
        }
        for i in 0..500 {
            put(&s, &format!("churn{i}"));
        }
        let mut seen = Vec::new();
        let mut cursor = 0;
        let mut round = 0;
        loop {
            let page = s.scan(cursor, 37, None, "");
            seen.extend(page.keys);
            // Delete and add keys between steps, as concurrent clients would.
            for j in 0..10 {
                s.del(format!("churn{}", round * 10 + j).as_bytes());
                put(&s, &format!("new{round}-{j}"));
            }
            round += 1;
            cursor = page.cursor;
            if cursor == 0 {
                break;
            }
        }
        let stable: Vec<_> = seen.iter().filter(|k| k.starts_with(b"stable")).collect();
        let unique: HashSet<_> = stable.iter().collect();
        assert_eq!(stable.len(), 500, "each stable key exactly once");
        assert_eq!(unique.len(), 500);
    }

    #[test]
    fn scan_match_type_and_keys() {
        let (s, clock) = store();
        for i in 0..50 {
            put(&s, &format!("user:{i}"));
            put(&s, &format!("item:{i}"));
        }
        let at = clock.now_ms() + 10;
        s.set(b"user:gone", b"v", SetOptions { expiry: SetExpiry::At(at), ..Default::default() }).unwrap();
        clock.advance(10);
        let mut found = 0;
        let mut cursor = 0;
        loop {
            let page = s.scan(cursor, 10, Some(b"user:*"), "");
            assert!(page.keys.iter().all(|k| k.starts_with(b"user:")));
            assert!(!page.keys.iter().any(|k| &k[..] == b"user:gone"), "expired keys are hidden");
            found += page.keys.len();
            cursor = page.cursor;
            if cursor == 0 {
                break;
            }
        }
        assert_eq!(found, 50);
        assert!(s.scan(0, 1000, None, "hash").keys.is_empty());
        assert_eq!(s.scan(0, 10_000, None, "STRING").keys.len(), 100, "type names are case-insensitive");
        assert_eq!(s.keys(b"item:1*").len(), 11);
        assert_eq!(s.keys(b"*").len(), 100);
    }

    #[test]
    fn random_key_and_flush() {
        let (s, _) = store();
        assert_eq!(s.random_key(), None);
        put(&s, "only");
        assert_eq!(s.random_key().unwrap(), "only");
        for i in 0..100 {
            put(&s, &format!("k{i}"));
        }
        assert_eq!(s.len(), 101);
        assert_eq!(s.flush(), 101);
        assert!(s.is_empty());
        assert_eq!(s.used_memory(), s.fixed_memory(), "flush returns every accounted byte");
    }

    #[test]
    fn mset_nx_is_all_or_nothing() {
        let (s, _) = store();
        assert!(s.mset_nx(&[(b"a", b"1"), (b"b", b"2"), (b"{x}c", b"3")]).unwrap());
        assert!(!s.mset_nx(&[(b"new", b"1"), (b"b", b"9")]).unwrap());
        assert_eq!(s.get(b"new"), None);
        assert_eq!(s.get(b"b").unwrap(), "2");
    }
}
