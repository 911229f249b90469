//! Hashes: a pack of field, value pairs in insertion order while small (Redis's listpack, same
//! thresholds and the same order in replies), a table once a field count or length threshold is
//! passed (never converted back, as in Redis): each field and its value in one allocation, see
//! [`super::table`].
//!
//! Fields may expire on their own (Redis 7.4's HEXPIRE family): their times live beside the
//! fields in [`FieldTtls`], ordered by time so the earliest is at hand for active expiry. A small
//! hash with field times is Redis's `listpackex`: its fields with a time come first, earliest
//! first, then the others in insertion order (a field given a time moves into that order; one
//! that loses its time moves to the end), which is the order HGETALL and HKEYS answer in. The
//! store purges expired fields before any command sees the hash (`store/typed.rs`), so the
//! commands here never meet one.

use std::collections::BTreeSet;

use super::limits::Limits;
use super::pack::{Pack, PackError};
use super::table::{PairKey, Table};

#[derive(Debug, Clone, Default)]
pub struct Hash {
    fields: Fields,
    /// Boxed and absent until a field is given a time: a hash without them pays one pointer.
    ttls: Option<Box<FieldTtls>>,
}

#[derive(Debug, Clone)]
enum Fields {
    Pack(Pack),
    /// Boxed: a small hash's value then costs no more than its pack.
    Table(Box<Table<PairKey>>),
}

impl Default for Fields {
    fn default() -> Self {
        Fields::Pack(Pack::default())
    }
}

/// The expiry times (Unix ms) of a hash's fields, by field and in time order.
#[derive(Debug, Clone, Default)]
struct FieldTtls {
    by_field: hashbrown::HashMap<Box<[u8]>, u64>,
    by_time: BTreeSet<(u64, Box<[u8]>)>,
}

impl FieldTtls {
    fn get(&self, field: &[u8]) -> Option<u64> {
        self.by_field.get(field).copied()
    }

    fn set(&mut self, field: &[u8], at: u64) {
        self.remove(field);
        self.by_field.insert(field.into(), at);
        self.by_time.insert((at, field.into()));
    }

    fn remove(&mut self, field: &[u8]) -> bool {
        match self.by_field.remove(field) {
            Some(at) => {
                self.by_time.remove(&(at, Box::from(field)));
                true
            }
            None => false,
        }
    }

    fn mem(&self) -> usize {
        // Each field's name twice, its time twice, and the maps' own slots (approximate).
        self.by_field.keys().map(|f| 2 * (f.len() + 8 + 24)).sum::<usize>() + self.by_field.capacity() * 8
    }
}

/// The first byte of the element a serialized hash with field times ends with (after its pairs,
/// so a hash with one is an odd number of elements: a build that knows no field times refuses it
/// rather than reading a time as a field).
const TTL_MAGIC: &[u8] = b"\0hfe1";

impl Hash {
    pub fn len(&self) -> usize {
        match &self.fields {
            Fields::Pack(p) => p.len() / 2,
            Fields::Table(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the pairs are packed (Redis's listpack or listpackex).
    pub fn is_packed(&self) -> bool {
        matches!(self.fields, Fields::Pack(_))
    }

    pub fn encoding(&self) -> &'static str {
        match (&self.fields, &self.ttls) {
            (Fields::Pack(_), None) => "listpack",
            (Fields::Pack(_), Some(_)) => "listpackex",
            (Fields::Table(_), _) => "hashtable",
        }
    }

    pub fn get(&self, field: &[u8]) -> Option<&[u8]> {
        match &self.fields {
            Fields::Pack(p) => {
                let mut it = p.iter();
                while let (Some(f), Some(v)) = (it.next(), it.next()) {
                    if f == field {
                        return Some(v);
                    }
                }
                None
            }
            Fields::Table(t) => t.find(field).and_then(|pos| t.item(pos)).map(|item| PairKey::split(item).1),
        }
    }

    /// Field, value pairs in insertion order (after removals, a table moves its last pair into
    /// the removed one's place; a packed hash with field times puts those first, see above).
    pub fn iter(&self) -> Box<dyn Iterator<Item = (&[u8], &[u8])> + '_> {
        match &self.fields {
            Fields::Pack(p) => {
                let mut it = p.iter();
                Box::new(std::iter::from_fn(move || Some((it.next()?, it.next()?))))
            }
            Fields::Table(t) => Box::new(t.items().map(PairKey::split)),
        }
    }

    /// Sets `field` (HSET: a time it had is dropped, as Redis drops it); true if it is new.
    /// The pair at position `i` of a table-encoded hash (O(1)); `None` past its end or for a
    /// packed hash. HSCAN's cursor is such a position.
    pub fn table_pair(&self, i: usize) -> Option<(&[u8], &[u8])> {
        match &self.fields {
            Fields::Table(t) => t.item(i).map(PairKey::split),
            Fields::Pack(_) => None,
        }
    }

    pub fn set(&mut self, field: &[u8], value: &[u8], limits: &Limits) -> bool {
        let had_ttl = self.ttls.as_mut().is_some_and(|t| t.remove(field));
        if had_ttl && let Fields::Pack(p) = &mut self.fields {
            // It leaves the timed fields for the end, as a listpackex moves it.
            if let Some(i) = p.pair_position(field) {
                p.splice(2 * i, 2, &[]);
            }
        }
        // A field with a time existed: it is not new.
        self.set_keep_ttl(field, value, limits) && !had_ttl
    }

    /// Sets `field` keeping any time it has and its place (HINCRBY, HSETEX KEEPTTL).
    pub fn set_keep_ttl(&mut self, field: &[u8], value: &[u8], limits: &Limits) -> bool {
        if let Fields::Pack(p) = &mut self.fields {
            if field.len() > limits.hash_max_listpack_value || value.len() > limits.hash_max_listpack_value {
                self.convert();
            } else {
                let new = match p.pair_position(field) {
                    Some(i) => {
                        p.splice(2 * i + 1, 1, &[value]);
                        false
                    }
                    None => {
                        p.push(field);
                        p.push(value);
                        true
                    }
                };
                // Checked after an update too, as Redis does: a listpack longer than a limit
                // lowered since (CONFIG SET) converts on its next write.
                if p.len() / 2 > limits.hash_max_listpack_entries {
                    self.convert();
                }
                return new;
            }
        }
        let Fields::Table(t) = &mut self.fields else { unreachable!("converted above") };
        match t.find(field) {
            Some(pos) => {
                t.replace(pos, PairKey::pack(field, value));
                false
            }
            None => {
                t.insert_new(PairKey::pack(field, value));
                true
            }
        }
    }

    pub fn remove(&mut self, field: &[u8]) -> bool {
        if let Some(t) = &mut self.ttls {
            t.remove(field);
        }
        match &mut self.fields {
            Fields::Pack(p) => match p.pair_position(field) {
                Some(i) => {
                    p.splice(2 * i, 2, &[]);
                    p.shrink();
                    true
                }
                None => false,
            },
            Fields::Table(t) => t.remove(field).is_some(),
        }
    }

    /// Readies the hash for field times: a packed one becomes Redis's `listpackex` (Redis converts
    /// when a command may give a field a time, whether or not it then does).
    pub fn allow_field_ttls(&mut self) {
        if self.ttls.is_none() {
            self.ttls = Some(Box::default());
        }
    }

    /// The expiry time (Unix ms) of `field`, if it has one.
    pub fn field_ttl(&self, field: &[u8]) -> Option<u64> {
        self.ttls.as_ref()?.get(field)
    }

    /// Whether the hash keeps field times (Redis's `listpackex` when packed), even if none is set.
    pub fn has_field_ttls(&self) -> bool {
        self.ttls.is_some()
    }

    /// Records `at` as `field`'s time without moving the pair (a restored value arrives in the
    /// order it was kept in).
    pub fn restore_field_ttl(&mut self, field: &[u8], at: u64) {
        self.ttls.get_or_insert_with(Box::default).set(field, at);
    }

    /// The earliest expiry time of any field (what active expiry waits for).
    pub fn min_ttl(&self) -> Option<u64> {
        self.ttls.as_ref()?.by_time.first().map(|(at, _)| *at)
    }

    /// Gives the existing `field` the expiry time `at` (Unix ms). A packed hash moves the pair
    /// among its timed fields by time, before any with the same or a later time.
    pub fn set_field_ttl(&mut self, field: &[u8], at: u64) {
        let ttls = self.ttls.get_or_insert_with(Box::default);
        ttls.set(field, at);
        let Fields::Pack(p) = &mut self.fields else { return };
        let Some(i) = p.pair_position(field) else { return };
        let value = p.iter().nth(2 * i + 1).expect("pair").to_vec();
        p.splice(2 * i, 2, &[]);
        let mut to = 0;
        for f in p.iter().step_by(2) {
            match ttls.get(f) {
                Some(other) if other < at => to += 1,
                _ => break,
            }
        }
        p.splice(2 * to, 0, &[field, &value]);
    }

    /// Drops the expiry time of `field`; false if it had none. A packed hash moves the pair to
    /// the end, as a listpackex does.
    pub fn persist_field(&mut self, field: &[u8]) -> bool {
        if !self.ttls.as_mut().is_some_and(|t| t.remove(field)) {
            return false;
        }
        if let Fields::Pack(p) = &mut self.fields
            && let Some(i) = p.pair_position(field)
        {
            let value = p.iter().nth(2 * i + 1).expect("pair").to_vec();
            p.splice(2 * i, 2, &[]);
            p.push(field);
            p.push(&value);
        }
        true
    }

    /// Removes the fields whose time is at or before `now`; returns their names.
    pub fn purge_expired(&mut self, now: u64) -> Vec<Box<[u8]>> {
        let Some(ttls) = &mut self.ttls else { return Vec::new() };
        let mut gone = Vec::new();
        while let Some((at, _)) = ttls.by_time.first()
            && *at <= now
        {
            let (_, field) = ttls.by_time.pop_first().expect("first");
            ttls.by_field.remove(&field);
            gone.push(field);
        }
        for f in &gone {
            self.remove(f);
        }
        gone
    }

    fn convert(&mut self) {
        let Fields::Pack(p) = &self.fields else { return };
        let mut table = Fields::Table(Box::default());
        if let Fields::Table(t) = &mut table {
            let mut it = p.iter();
            while let (Some(f), Some(v)) = (it.next(), it.next()) {
                t.insert_new(PairKey::pack(f, v));
            }
        }
        self.fields = table;
    }

    /// Builds a hash from pairs (decoding a serialized value), choosing the encoding by `limits`;
    /// `None` if the elements are not pairs (with, last, the field times [`Self::serialize`]
    /// writes).
    pub fn from_pairs<'a>(items: impl Iterator<Item = &'a [u8]>, limits: &Limits) -> Option<Hash> {
        let mut h = Hash::default();
        let mut items = items.peekable();
        let mut ttls = None;
        while let Some(f) = items.next() {
            match items.next() {
                Some(v) => {
                    h.set_keep_ttl(f, v, limits);
                }
                None if f.starts_with(TTL_MAGIC) => ttls = Some(f),
                None => return None,
            }
        }
        if let Some(blob) = ttls {
            // The pairs came in the order they were kept in: set the times without moving any.
            let mut times = Box::<FieldTtls>::default();
            for (field, at) in decode_ttls(&blob[TTL_MAGIC.len()..]).ok()? {
                h.get(field)?; // a time for a field the hash lacks: not a hash this wrote
                times.set(field, at);
            }
            h.ttls = Some(times);
        }
        Some(h)
    }

    pub fn mem(&self) -> usize {
        let ttls = self.ttls.as_ref().map_or(0, |t| std::mem::size_of::<FieldTtls>() + t.mem());
        ttls + match &self.fields {
            Fields::Pack(p) => p.mem(),
            Fields::Table(t) => t.mem(),
        }
    }

    /// Field, value, field, value, ...; then, if any field has a time, one more element: the
    /// field times (see [`TTL_MAGIC`]).
    pub fn serialize(&self, out: &mut Vec<u8>) {
        for (f, v) in self.iter() {
            super::pack::put(out, f);
            super::pack::put(out, v);
        }
        if let Some(ttls) = &self.ttls {
            let mut blob = TTL_MAGIC.to_vec();
            for (at, field) in &ttls.by_time {
                blob.extend_from_slice(&at.to_le_bytes());
                super::pack::put(&mut blob, field);
            }
            super::pack::put(out, &blob);
        }
    }
}

/// The (field, time) list of a serialized hash's times element, checked.
fn decode_ttls(mut bytes: &[u8]) -> Result<Vec<(&[u8], u64)>, PackError> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let at = u64::from_le_bytes(bytes.get(..8).ok_or(PackError::Truncated)?.try_into().expect("8 bytes"));
        let (field, rest) = super::pack::next(bytes, 8)?;
        out.push((field, at));
        bytes = &bytes[rest..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(h: &Hash) -> Vec<String> {
        h.iter().map(|(f, _)| String::from_utf8_lossy(f).into_owned()).collect()
    }

    fn hash(pairs: &[&str]) -> Hash {
        let mut h = Hash::default();
        for f in pairs {
            h.set(f.as_bytes(), b"v", &Limits::default());
        }
        h
    }

    #[test]
    fn timed_fields_come_first_in_time_order_as_in_a_listpackex() {
        // The orders redis-server 8.0 answers HKEYS with after the same steps.
        let mut h = hash(&["a", "b", "c", "d"]);
        assert_eq!(h.encoding(), "listpack");
        h.set_field_ttl(b"a", 100);
        assert_eq!(
            (keys(&h), h.encoding()),
            (vec!["a", "b", "c", "d"].into_iter().map(String::from).collect(), "listpackex")
        );
        h.set_field_ttl(b"c", 50);
        assert_eq!(keys(&h), ["c", "a", "b", "d"]);
        h.set_field_ttl(b"b", 70);
        assert_eq!(keys(&h), ["c", "b", "a", "d"]);
        h.set_field_ttl(b"a", 20);
        assert_eq!(keys(&h), ["a", "c", "b", "d"]);
        h.set(b"e", b"5", &Limits::default());
        assert_eq!(keys(&h), ["a", "c", "b", "d", "e"]);
        h.set(b"c", b"9", &Limits::default());
        assert_eq!(
            (keys(&h), h.field_ttl(b"c")),
            (vec!["a", "b", "d", "e", "c"].into_iter().map(String::from).collect(), None)
        );
        assert!(h.persist_field(b"b"));
        assert!(!h.persist_field(b"b"));
        assert_eq!(keys(&h), ["a", "d", "e", "c", "b"]);
        h.set_keep_ttl(b"a", b"2", &Limits::default());
        assert_eq!(
            (keys(&h), h.field_ttl(b"a")),
            (vec!["a", "d", "e", "c", "b"].into_iter().map(String::from).collect(), Some(20))
        );
        assert_eq!(h.min_ttl(), Some(20));
    }

    #[test]
    fn expired_fields_are_purged_and_times_survive_serialization() {
        let limits = Limits::default();
        let mut h = hash(&["a", "b", "c"]);
        h.set_field_ttl(b"b", 10);
        h.set_field_ttl(b"c", 30);
        let mut bytes = Vec::new();
        h.serialize(&mut bytes);
        let pack = Pack::from_bytes(&bytes).unwrap();
        assert_eq!(pack.len(), 7, "three pairs and the times");
        let back = Hash::from_pairs(pack.iter(), &limits).unwrap();
        assert_eq!(
            (back.field_ttl(b"b"), back.field_ttl(b"c"), back.field_ttl(b"a")),
            (Some(10), Some(30), None)
        );
        assert_eq!(keys(&back), keys(&h));
        let mut h = back;
        assert_eq!(h.purge_expired(9), Vec::<Box<[u8]>>::new());
        assert_eq!(h.purge_expired(10), vec![Box::from(&b"b"[..])]);
        assert_eq!((h.len(), h.min_ttl()), (2, Some(30)));
        assert_eq!(h.purge_expired(u64::MAX).len(), 1);
        assert_eq!((keys(&h), h.min_ttl()), (vec!["a".to_string()], None));
        // A times element naming a field the hash lacks, or not one at all, is refused.
        let bad = Pack::from_items([&b"a"[..], b"v", b"\0hfe1\x01\0\0\0\0\0\0\0\x01z"]);
        assert!(Hash::from_pairs(bad.iter(), &limits).is_none());
        assert!(Hash::from_pairs(Pack::from_items([&b"a"[..]]).iter(), &limits).is_none());
    }

    #[test]
    fn a_table_keeps_its_field_times() {
        let limits = Limits { hash_max_listpack_entries: 2, ..Limits::default() };
        let mut h = Hash::default();
        h.set(b"a", b"1", &limits);
        h.set_field_ttl(b"a", 5);
        h.set(b"b", b"2", &limits);
        h.set(b"c", b"3", &limits);
        assert_eq!((h.encoding(), h.field_ttl(b"a")), ("hashtable", Some(5)));
        assert_eq!(h.purge_expired(5).len(), 1);
        assert_eq!(h.len(), 2);
    }
}
