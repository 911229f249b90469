//! The store's entry points for typed values: commands on hashes, lists and sets
//! (`crate::commands`) read or change a key's [`Object`] through these, under its shard's lock, so
//! each command is atomic. Type checks (WRONGTYPE), lazy expiry, promotion from the base snapshot,
//! creation of missing keys, deletion of emptied ones and the memory account are handled here
//! once.

use super::entry::lru_now;
use super::object::{Limits, Object, ValueType};
use super::{Store, StoreError};

/// A key's value as `OBJECT`, `MEMORY USAGE` and `TYPE` see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    pub value_type: ValueType,
    pub encoding: &'static str,
    /// Bytes the key costs: entry, key, value.
    pub memory: usize,
    /// Seconds since the last access.
    pub idle_secs: u64,
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
        self.with_shard(key, |s, h, now| {
            match s.peek(h, key, now, false, |v| v.value_type) {
                None => {
                    s.misses += 1;
                    return Ok(f(None));
                }
                Some(found) if found != t => return Err(StoreError::WrongType),
                Some(_) => {}
            }
            let pos = s.lookup(h, key, now).expect("present a moment ago, under the same lock");
            s.entry_mut(pos).lru = lru_now(now);
            Ok(f(s.object(pos)))
        })
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
        self.with_shard(key, |s, h, now| {
            let pos = s.find_live(h, key, now);
            if let Some(p) = pos
                && s.entry(p).value_type() != t
            {
                return Err(StoreError::WrongType);
            }
            let limits = s.limits.clone();
            let mut slot = pos.and_then(|p| s.take_object(p));
            let r = f(&mut slot, &limits);
            match (pos, slot) {
                (Some(p), Some(o)) if !o.is_empty() => {
                    s.put_object(p, o);
                    s.entry_mut(p).lru = lru_now(now);
                }
                (Some(p), _) => s.delete(h, p),
                (None, Some(o)) if !o.is_empty() => {
                    let p = s.insert_new(h, key, b"", 0, lru_now(now));
                    s.put_object(p, o);
                }
                (None, _) => {}
            }
            Ok(r)
        })
    }

    /// What `key` holds, for OBJECT and MEMORY USAGE (no LRU touch).
    pub fn key_info(&self, key: &[u8]) -> Option<KeyInfo> {
        self.with_shard(key, |s, h, now| {
            let value_type = s.peek(h, key, now, false, |v| v.value_type)?;
            let pos = s.find_live(h, key, now)?;
            let e = s.entry(pos);
            let idle_secs = u64::from(lru_now(now).wrapping_sub(e.lru)) / 100;
            let base = super::entry::ENTRY_SIZE + e.heap_size();
            Some(match s.object(pos) {
                Some(o) => KeyInfo { value_type, encoding: o.encoding(), memory: base + o.mem(), idle_secs },
                None => KeyInfo { value_type, encoding: string_encoding(e.value()), memory: base, idle_secs },
            })
        })
    }
}

/// Redis's string encodings: "int" for a canonical integer, "embstr" up to 44 bytes, "raw".
fn string_encoding(v: &[u8]) -> &'static str {
    if v.len() <= 20 && super::object::set::as_int(v).is_some() {
        "int"
    } else if v.len() <= 44 {
        "embstr"
    } else {
        "raw"
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::object::Hash;
    use crate::store::{ManualClock, StoreConfig};

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
        let _ = Hash::default();
    }
}
