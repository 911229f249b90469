//! String commands. Each method is one Redis command's data semantics, applied atomically under
//! the key's shard lock; argument syntax was checked by the router.

use std::cell::RefCell;

use bytes::{Bytes, BytesMut};

use super::entry::{NOT_INT, lru_now};
use super::error::StoreError;
use super::float;
use super::object::ValueType;
use super::sharded::Store;

/// SET's NX / XX / IFEQ.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SetCondition {
    #[default]
    Always,
    IfAbsent,
    IfPresent,
    /// IFEQ (Valkey 8.1): the key holds a string equal to this one; another type is WRONGTYPE.
    IfEqual(Bytes),
}

/// What a SET does to the key's TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetExpiry {
    /// Plain SET: any TTL is removed.
    #[default]
    Clear,
    /// KEEPTTL.
    Keep,
    /// Expire at this Unix ms. A time already past stores nothing and removes the key, as Redis
    /// does for `SET ... EXAT <past>`.
    At(u64),
}

#[derive(Debug, Clone, Default)]
pub struct SetOptions {
    pub condition: SetCondition,
    pub expiry: SetExpiry,
    /// SET ... GET: return the old value.
    pub get: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetOutcome {
    /// Whether the condition held (the reply is OK rather than nil).
    pub stored: bool,
    /// The previous value, when `get` was asked for.
    pub old: Option<Bytes>,
}

/// Values up to this size leave the store in a shared chunk ([`value_out`]).
const SMALL_VALUE: usize = 256;
/// The size of each chunk.
const CHUNK: usize = 8 * 1024;

thread_local! {
    /// This thread's chunk: the room left after the values already handed out of it.
    static CHUNK_LEFT: RefCell<BytesMut> = RefCell::new(BytesMut::new());
}

/// A GET's value as a `Bytes` of its own. A small one (most GETs) is copied into this thread's
/// current chunk, which it shares with the values read after it: an allocation per chunk instead
/// of one per value (malloc and free were about a tenth of a fast-path GET's CPU). A value kept
/// keeps its whole chunk (at most [`CHUNK`] bytes) alive, so only short-lived holders should get
/// these: replies on their way to a client (the router copies small values into its output
/// buffers, and its near-cache stores a copy).
#[inline]
fn value_out(v: &[u8]) -> Bytes {
    if v.len() > SMALL_VALUE || v.is_empty() {
        return Bytes::copy_from_slice(v);
    }
    CHUNK_LEFT.with_borrow_mut(|chunk| shoal_wire::chunk::cut(chunk, v, CHUNK))
}

impl Store {
    /// A string's value as MGET sees it: nothing for a missing key or any other type.
    pub fn get(&self, key: &[u8]) -> Option<Bytes> {
        self.get_checked(key).ok().flatten()
    }

    /// GET: WRONGTYPE for a typed value.
    pub fn get_checked(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        self.with_shard(key, |s, h, now| {
            s.read(h, key, now, |v| string(v.value_type).map(|()| value_out(v.value))).transpose()
        })
    }

    /// GET for a router's near cache: the value and its expiry (Unix ms, 0: none); WRONGTYPE for
    /// a typed value.
    pub fn get_with_expiry(&self, key: &[u8]) -> Result<Option<(Bytes, u64)>, StoreError> {
        self.with_shard(key, |s, h, now| {
            s.read(h, key, now, |v| {
                string(v.value_type).map(|()| (Bytes::copy_from_slice(v.value), v.expire_at))
            })
            .transpose()
        })
    }

    pub fn set(&self, key: &[u8], value: &[u8], opts: SetOptions) -> Result<SetOutcome, StoreError> {
        self.check_len(key.len())?;
        self.check_len(value.len())?;
        self.make_room()?;
        self.with_shard(key, |s, h, now| {
            let pos = s.find_live(h, key, now);
            let compared = matches!(opts.condition, SetCondition::IfEqual(_));
            if (opts.get || compared)
                && let Some(p) = pos
            {
                string(s.entry(p).value_type())?;
            }
            let old = if opts.get { pos.map(|p| Bytes::copy_from_slice(s.entry(p).value())) } else { None };
            let allowed = match &opts.condition {
                SetCondition::Always => true,
                SetCondition::IfAbsent => pos.is_none(),
                SetCondition::IfPresent => pos.is_some(),
                SetCondition::IfEqual(v) => pos.is_some_and(|p| s.entry(p).value() == &v[..]),
            };
            if !allowed {
                return Ok(SetOutcome { stored: false, old });
            }
            let expire_at = match opts.expiry {
                SetExpiry::Clear => 0,
                SetExpiry::Keep => pos.map_or(0, |p| s.entry(p).expire_at),
                SetExpiry::At(at) if at <= now => {
                    if let Some(p) = pos {
                        s.delete(h, p);
                        self.events.changes.key(key);
                    }
                    return Ok(SetOutcome { stored: true, old });
                }
                SetExpiry::At(at) => at,
            };
            match pos {
                Some(p) => {
                    s.drop_object(p);
                    s.update(p, |e| e.set_value(value));
                    s.touch(p, now);
                    s.set_expire(h, p, expire_at);
                }
                None => {
                    s.insert_new(h, key, value, expire_at, lru_now(now));
                }
            }
            // Under the shard lock: the log holds this key's values in the order they applied.
            s.sets += 1;
            self.events.changes.value(key, value, expire_at);
            Ok(SetOutcome { stored: true, old })
        })
    }

    pub fn append(&self, key: &[u8], value: &[u8]) -> Result<usize, StoreError> {
        self.check_len(key.len())?;
        self.make_room()?;
        self.with_shard(key, |s, h, now| match s.find_live(h, key, now) {
            None => {
                self.check_len(value.len())?;
                s.insert_new(h, key, value, 0, lru_now(now));
                Ok(value.len())
            }
            Some(p) => {
                string(s.entry(p).value_type())?;
                let old_len = s.entry(p).value().len();
                let new_len = old_len.checked_add(value.len()).ok_or(StoreError::TooLarge)?;
                self.check_len(new_len)?;
                s.update(p, |e| e.value_resize(new_len)[old_len..].copy_from_slice(value));
                s.touch(p, now);
                Ok(new_len)
            }
        })
    }

    pub fn strlen(&self, key: &[u8]) -> Result<usize, StoreError> {
        self.with_shard(key, |s, h, now| {
            s.read(h, key, now, |v| string(v.value_type).map(|()| v.value.len())).unwrap_or(Ok(0))
        })
    }

    /// GETRANGE with Redis's index rules (negative from the end, clamped, empty when inverted).
    pub fn getrange(&self, key: &[u8], start: i64, end: i64) -> Result<Bytes, StoreError> {
        self.with_shard(key, |s, h, now| {
            s.read(h, key, now, |v| string(v.value_type).map(|()| range(v.value, start, end)))
                .unwrap_or(Ok(Bytes::new()))
        })
    }

    /// SETRANGE: overwrite from `offset`, zero-padding, creating the key unless `value` is empty.
    pub fn setrange(&self, key: &[u8], offset: i64, value: &[u8]) -> Result<usize, StoreError> {
        if offset < 0 {
            return Err(StoreError::OffsetOutOfRange);
        }
        let offset = offset as usize;
        self.check_len(key.len())?;
        self.make_room()?;
        self.with_shard(key, |s, h, now| {
            let pos = s.find_live(h, key, now);
            if let Some(p) = pos {
                string(s.entry(p).value_type())?;
            }
            let old_len = pos.map_or(0, |p| s.entry(p).value().len());
            if value.is_empty() {
                return Ok(old_len);
            }
            let end = offset.checked_add(value.len()).ok_or(StoreError::TooLarge)?;
            self.check_len(end)?;
            let new_len = end.max(old_len);
            let p = match pos {
                Some(p) => p,
                None => s.insert_new(h, key, b"", 0, lru_now(now)),
            };
            s.update(p, |e| e.value_resize(new_len)[offset..end].copy_from_slice(value));
            s.touch(p, now);
            Ok(new_len)
        })
    }

    /// INCRBY/DECRBY/INCR/DECR. The TTL is kept.
    pub fn incr_by(&self, key: &[u8], delta: i64) -> Result<i64, StoreError> {
        self.make_room()?;
        self.with_shard(key, |s, h, now| {
            let pos = s.find_live(h, key, now);
            if let Some(p) = pos {
                string(s.entry(p).value_type())?;
            }
            let current = match pos {
                Some(p) => shoal_wire::num::parse_i64(s.entry(p).value()).ok_or(StoreError::NotInteger)?,
                None => 0,
            };
            let next = current.checked_add(delta).ok_or(StoreError::Overflow)?;
            let text = next.to_string();
            match pos {
                Some(p) => {
                    s.update(p, |e| e.set_value(text.as_bytes()));
                    s.touch(p, now);
                }
                None => {
                    s.insert_new(h, key, text.as_bytes(), 0, lru_now(now));
                }
            }
            Ok(next)
        })
    }

    /// INCRBYFLOAT in 80-bit extended precision, like Redis. The TTL is kept.
    pub fn incr_by_float(&self, key: &[u8], increment: &[u8]) -> Result<Bytes, StoreError> {
        self.make_room()?;
        self.with_shard(key, |s, h, now| {
            let pos = s.find_live(h, key, now);
            if let Some(p) = pos {
                string(s.entry(p).value_type())?;
            }
            let current: &[u8] = match pos {
                Some(p) => s.entry(p).value(),
                None => b"0",
            };
            let next = float::incr_by_float(current, increment)?;
            let p = match pos {
                Some(p) => {
                    s.update(p, |e| e.set_value(&next));
                    s.touch(p, now);
                    p
                }
                None => s.insert_new(h, key, &next, 0, lru_now(now)),
            };
            s.update(p, |e| e.mark_string(NOT_INT));
            Ok(Bytes::from(next))
        })
    }

    pub fn getdel(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        self.with_shard(key, |s, h, now| {
            let Some(p) = s.lookup(h, key, now) else { return Ok(None) };
            string(s.entry(p).value_type())?;
            let value = Bytes::copy_from_slice(s.entry(p).value());
            s.delete(h, p);
            Ok(Some(value))
        })
    }

    /// GETEX: returns the value, then applies `expiry` (`Clear` = PERSIST, `Keep` = plain GET,
    /// `At(past)` deletes the key).
    pub fn getex(&self, key: &[u8], expiry: SetExpiry) -> Result<Option<Bytes>, StoreError> {
        self.with_shard(key, |s, h, now| {
            let Some(p) = s.lookup(h, key, now) else { return Ok(None) };
            string(s.entry(p).value_type())?;
            let value = Bytes::copy_from_slice(s.entry(p).value());
            s.touch(p, now);
            match expiry {
                SetExpiry::Keep => {}
                SetExpiry::Clear => s.set_expire(h, p, 0),
                SetExpiry::At(at) if at <= now => s.delete(h, p),
                SetExpiry::At(at) => s.set_expire(h, p, at),
            }
            Ok(Some(value))
        })
    }
}

/// Ok for a string; string commands answer WRONGTYPE on any other type.
fn string(t: ValueType) -> Result<(), StoreError> {
    if t == ValueType::String { Ok(()) } else { Err(StoreError::WrongType) }
}

/// GETRANGE's slice of `v`: negative indexes count from the end, both ends are clamped, and an
/// inverted or empty range is empty (Redis's rules).
fn range(v: &[u8], start: i64, end: i64) -> Bytes {
    let len = v.len() as i64;
    if start < 0 && end < 0 && start > end {
        return Bytes::new();
    }
    let start = if start < 0 { (len + start).max(0) } else { start };
    let end = if end < 0 { (len + end).max(0) } else { end }.min(len - 1);
    if start > end || len == 0 {
        return Bytes::new();
    }
    Bytes::copy_from_slice(&v[start as usize..=end as usize])
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::{Clock, ManualClock, StoreConfig, TtlState};

    fn store() -> (Store, ManualClock) {
        let clock = ManualClock::new(1_000_000);
        (Store::new(StoreConfig::default(), Arc::new(clock.clone())), clock)
    }

    fn set(s: &Store, k: &str, v: &str, opts: SetOptions) -> SetOutcome {
        s.set(k.as_bytes(), v.as_bytes(), opts).unwrap()
    }

    #[test]
    fn set_conditions_and_get() {
        let (s, _) = store();
        let nx = SetOptions { condition: SetCondition::IfAbsent, ..Default::default() };
        let xx = SetOptions { condition: SetCondition::IfPresent, get: true, ..Default::default() };
        assert!(!set(&s, "k", "1", xx.clone()).stored, "XX on a missing key");
        assert!(set(&s, "k", "1", nx.clone()).stored);
        assert!(!set(&s, "k", "2", nx).stored, "NX on a present key");
        let out = set(&s, "k", "3", xx);
        assert_eq!(out, SetOutcome { stored: true, old: Some(Bytes::from("1")) });
        assert_eq!(s.get(b"k").unwrap(), "3");
    }

    #[test]
    fn small_values_leave_in_shared_chunks_and_read_back_whole() {
        let (s, _) = store();
        let value = |i: usize| format!("{i:0>width$}", width = 1 + i % 200);
        for i in 0..2_000 {
            set(&s, &format!("k{i}"), &value(i), SetOptions::default());
        }
        set(&s, "big", &"b".repeat(SMALL_VALUE + 1), SetOptions::default());
        set(&s, "empty", "", SetOptions::default());
        // Many chunks' worth, read back whole, while the earlier values are still held.
        let got: Vec<Bytes> = (0..2_000).map(|i| s.get(format!("k{i}").as_bytes()).unwrap()).collect();
        for (i, v) in got.iter().enumerate() {
            assert_eq!(v, value(i).as_bytes(), "k{i}");
        }
        // Consecutive small values sit side by side in one chunk (one allocation for many)...
        let adjacent =
            got.windows(2).filter(|w| w[0].as_ptr().wrapping_add(w[0].len()) == w[1].as_ptr()).count();
        let chunks = got.iter().map(Bytes::len).sum::<usize>().div_ceil(CHUNK);
        assert!(adjacent >= got.len() - 2 * chunks - 1, "{adjacent} adjacent of {}", got.len());
        // ... a large one is a copy of its own, and an empty one shares nothing.
        let last = s.get(b"k1").unwrap();
        let big = s.get(b"big").unwrap();
        assert_eq!(big.len(), SMALL_VALUE + 1);
        assert_ne!(last.as_ptr().wrapping_add(last.len()), big.as_ptr());
        assert_eq!(s.get(b"empty").unwrap(), "");
    }

    #[test]
    fn warming_lookups_changes_nothing_a_read_would() {
        let (s, clock) = store();
        let now = clock.now_ms();
        let keys: Vec<String> = (0..200).map(|i| format!("key:{i}")).collect();
        for (i, k) in keys.iter().enumerate() {
            // Every third key expires soon: warming must not expire it (as a read would).
            let expiry = if i % 3 == 0 { SetExpiry::At(now + 1000) } else { SetExpiry::Clear };
            set(&s, k, "v", SetOptions { expiry, ..Default::default() });
        }
        clock.advance(60_000);
        let before = s.stats();
        let idle: Vec<_> =
            keys.iter().skip(1).step_by(3).map(|k| s.key_info(k.as_bytes()).unwrap().idle_secs).collect();
        let missing: Vec<String> = (0..50).map(|i| format!("nope:{i}")).collect();
        // Keys of every shard, some twice, some missing, in no particular order.
        s.warm(keys.iter().rev().chain(&keys).chain(&missing).map(|k| k.as_bytes()));
        assert_eq!(s.stats(), before, "no hit, miss or expiry counted, no key removed");
        assert_eq!(s.stats().expired_keys, 0);
        let after: Vec<_> =
            keys.iter().skip(1).step_by(3).map(|k| s.key_info(k.as_bytes()).unwrap().idle_secs).collect();
        assert_eq!(after, idle, "no LRU clock touched");
        assert!(idle.iter().all(|&i| i >= 60));
        // Every shard's lock was let go.
        assert_eq!(s.get(b"key:1").unwrap(), "v");
        assert_eq!(s.get(b"key:0"), None);
    }

    #[test]
    fn ttl_is_cleared_kept_or_set() {
        let (s, clock) = store();
        let now = clock.now_ms();
        set(&s, "k", "v", SetOptions { expiry: SetExpiry::At(now + 5000), ..Default::default() });
        assert_eq!(s.ttl(b"k"), TtlState::ExpiresAt(now + 5000));
        set(&s, "k", "v2", SetOptions { expiry: SetExpiry::Keep, ..Default::default() });
        assert_eq!(s.ttl(b"k"), TtlState::ExpiresAt(now + 5000), "KEEPTTL");
        set(&s, "k", "v3", SetOptions::default());
        assert_eq!(s.ttl(b"k"), TtlState::Persistent, "plain SET clears the TTL");
        set(&s, "k", "v4", SetOptions { expiry: SetExpiry::At(now - 1), ..Default::default() });
        assert_eq!(s.get(b"k"), None, "an expiry in the past removes the key");
    }

    #[test]
    fn keys_expire_by_the_clock() {
        let (s, clock) = store();
        let now = clock.now_ms();
        set(&s, "k", "v", SetOptions { expiry: SetExpiry::At(now + 100), ..Default::default() });
        clock.advance(99);
        assert_eq!(s.get(b"k").unwrap(), "v");
        clock.advance(1);
        assert_eq!(s.get(b"k"), None, "lazy expiry at exactly the deadline");
        assert_eq!(s.stats().expired_keys, 1);
    }

    #[test]
    fn active_expiry_is_bounded_per_tick() {
        let (s, clock) = store();
        let at = clock.now_ms() + 10;
        for i in 0..1000 {
            set(&s, &format!("k{i}"), "v", SetOptions { expiry: SetExpiry::At(at), ..Default::default() });
        }
        set(&s, "keep", "v", SetOptions::default());
        clock.advance(10);
        let shards = s.shard_count();
        let first = s.purge_expired(2);
        assert!(first <= 2 * shards, "budget respected: {first}");
        let mut total = first;
        while total < 1000 {
            let n = s.purge_expired(50);
            assert!(n > 0);
            total += n;
        }
        assert_eq!(s.stats().keys, 1);
        assert_eq!(s.stats().expired_keys, 1000);
    }

    #[test]
    fn append_strlen_getrange_setrange() {
        let (s, _) = store();
        assert_eq!(s.append(b"k", b"Hello").unwrap(), 5);
        assert_eq!(s.append(b"k", b" World").unwrap(), 11);
        assert_eq!(s.strlen(b"k"), Ok(11));
        assert_eq!(s.getrange(b"k", 0, 4).unwrap(), "Hello");
        assert_eq!(s.getrange(b"k", -5, -1).unwrap(), "World");
        assert_eq!(s.getrange(b"k", 5, 1).unwrap(), "");
        assert_eq!(s.getrange(b"k", -1, -5).unwrap(), "");
        assert_eq!(s.getrange(b"k", 0, 1000).unwrap(), "Hello World");
        assert_eq!(s.setrange(b"k", 6, b"Redis").unwrap(), 11);
        assert_eq!(s.get(b"k").unwrap(), "Hello Redis");
        assert_eq!(s.setrange(b"pad", 3, b"x").unwrap(), 4);
        assert_eq!(s.get(b"pad").unwrap(), &b"\0\0\0x"[..]);
        assert_eq!(s.setrange(b"none", 5, b"").unwrap(), 0);
        assert_eq!(s.get(b"none"), None, "empty SETRANGE does not create the key");
        assert_eq!(s.setrange(b"k", -1, b"x"), Err(StoreError::OffsetOutOfRange));
        assert_eq!(s.setrange(b"k", 512 * 1024 * 1024, b"x"), Err(StoreError::TooLarge));
    }

    #[test]
    fn set_if_equal() {
        let (s, _) = store();
        let ifeq = |v: &str, get| SetOptions {
            condition: SetCondition::IfEqual(Bytes::copy_from_slice(v.as_bytes())),
            get,
            ..Default::default()
        };
        assert!(!set(&s, "k", "v", ifeq("v", false)).stored, "a missing key is never equal");
        assert_eq!(s.get(b"k"), None);
        set(&s, "k", "a", SetOptions::default());
        assert!(!set(&s, "k", "b", ifeq("x", false)).stored);
        assert_eq!(s.get(b"k").unwrap(), "a");
        assert_eq!(set(&s, "k", "b", ifeq("a", true)), SetOutcome { stored: true, old: Some("a".into()) });
        assert_eq!(s.get(b"k").unwrap(), "b");
        s.write_object(b"h", ValueType::Hash, |slot, limits| {
            let o =
                slot.get_or_insert_with(|| Box::new(super::super::object::Object::empty(ValueType::Hash)));
            let super::super::object::Object::Hash(h) = &mut **o else { unreachable!() };
            h.set(b"f", b"v", limits)
        })
        .unwrap();
        assert_eq!(s.set(b"h", b"v", ifeq("v", false)), Err(StoreError::WrongType));
    }

    #[test]
    fn values_edited_in_place_are_raw_until_rewritten() {
        let (s, _) = store();
        let enc = |k: &[u8]| s.key_info(k).unwrap().encoding;
        set(&s, "k", "12", SetOptions::default());
        assert_eq!(enc(b"k"), "int");
        s.append(b"k", b"3").unwrap();
        assert_eq!(enc(b"k"), "raw");
        s.incr_by(b"k", 1).unwrap();
        assert_eq!(enc(b"k"), "int");
        s.setrange(b"k", 0, b"").unwrap();
        assert_eq!(enc(b"k"), "int", "an empty SETRANGE changes nothing");
        s.setrange(b"k", 0, b"9").unwrap();
        assert_eq!(enc(b"k"), "raw");
        set(&s, "k", "short", SetOptions::default());
        assert_eq!(enc(b"k"), "embstr");
        s.append(b"new", b"7").unwrap();
        assert_eq!(enc(b"new"), "int", "APPEND creating a key writes it whole");
        s.incr_by_float(b"new", b"1").unwrap();
        assert_eq!(s.get(b"new").unwrap(), "8");
        assert_eq!(enc(b"new"), "embstr", "INCRBYFLOAT never stores an integer");
        s.incr_by(b"new", 1).unwrap();
        assert_eq!(enc(b"new"), "int");
    }

    #[test]
    fn append_in_a_loop_stays_linear() {
        let (s, _) = store();
        let chunk = vec![b'x'; 4096];
        for _ in 0..2048 {
            s.append(b"big", &chunk).unwrap();
        }
        assert_eq!(s.strlen(b"big"), Ok(8 * 1024 * 1024));
    }

    #[test]
    fn incr_rules() {
        let (s, clock) = store();
        assert_eq!(s.incr_by(b"n", 5).unwrap(), 5);
        assert_eq!(s.incr_by(b"n", -7).unwrap(), -2);
        set(&s, "t", "10", SetOptions { expiry: SetExpiry::At(clock.now_ms() + 1000), ..Default::default() });
        assert_eq!(s.incr_by(b"t", 1).unwrap(), 11);
        assert!(matches!(s.ttl(b"t"), TtlState::ExpiresAt(_)), "INCR keeps the TTL");
        set(&s, "max", &i64::MAX.to_string(), SetOptions::default());
        assert_eq!(s.incr_by(b"max", 1), Err(StoreError::Overflow));
        for bad in ["abc", " 1", "01", "1.5", ""] {
            set(&s, "bad", bad, SetOptions::default());
            assert_eq!(s.incr_by(b"bad", 1), Err(StoreError::NotInteger), "{bad:?}");
        }
        assert_eq!(s.incr_by_float(b"f", b"10.5").unwrap(), "10.5");
        assert_eq!(s.incr_by_float(b"f", b"0.1").unwrap(), "10.6");
        assert_eq!(s.incr_by_float(b"bad", b"1"), Err(StoreError::Float(FloatErrorAlias::NotFloat)));
    }

    use crate::store::FloatError as FloatErrorAlias;

    #[test]
    fn getdel_and_getex() {
        let (s, clock) = store();
        set(&s, "k", "v", SetOptions::default());
        let now = clock.now_ms();
        assert_eq!(s.getex(b"k", SetExpiry::At(now + 100)).unwrap().unwrap(), "v");
        assert_eq!(s.ttl(b"k"), TtlState::ExpiresAt(now + 100));
        assert_eq!(s.getex(b"k", SetExpiry::Clear).unwrap().unwrap(), "v");
        assert_eq!(s.ttl(b"k"), TtlState::Persistent, "GETEX PERSIST");
        assert_eq!(s.getex(b"k", SetExpiry::At(now - 1)).unwrap().unwrap(), "v");
        assert_eq!(s.get(b"k"), None, "GETEX with a past time deletes after answering");
        set(&s, "d", "v", SetOptions::default());
        assert_eq!(s.getdel(b"d").unwrap().unwrap(), "v");
        assert_eq!(s.getdel(b"d"), Ok(None));
    }

    #[test]
    fn binary_safe_keys_and_values() {
        let (s, _) = store();
        let key = b"\0\r\n\xff{tag}".to_vec();
        let value: Vec<u8> = (0..=255).collect();
        s.set(&key, &value, SetOptions::default()).unwrap();
        assert_eq!(s.get(&key).unwrap(), &value[..]);
        let big = vec![7u8; 1 << 20];
        s.set(b"big", &big, SetOptions::default()).unwrap();
        assert_eq!(s.get(b"big").unwrap().len(), 1 << 20);
    }
}
