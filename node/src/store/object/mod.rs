//! Typed values: what a key holds when it is not a string.
//!
//! - [`pack`]: the compact encoding of small values, and the serialized form of every typed value
//!   (snapshots, slot transfers, `Fetch`).
//! - [`hash`], [`set`], [`list`], [`zset`]: each type's encodings and the primitive operations the commands
//!   (`crate::commands`) are written over.
//! - [`stream`]: streams in Redis's node layout ([`listpack`], byte for byte) and consumer groups.
//! - [`table`]: the large encoding of sets and hashes (items in a vector, a hash index over it).
//! - [`ordered`]: sorted blocks with ranks, the ordered index of large sorted sets.
//! - [`limits`]: the encoding thresholds and allocation sizes every encoding above is built by.
//!
//! A typed value lives in its shard's object table, next to the entry that holds its key, TTL and
//! LRU clock (the entry's flags carry the [`ValueType`]); its memory is counted with the shard's.

pub mod hash;
pub mod limits;
pub mod list;
pub mod listpack;
pub mod ordered;
pub mod pack;
pub mod set;
pub mod stream;
pub mod table;
pub mod zset;

pub use hash::Hash;
pub use limits::{Limits, alloc_size};
pub use list::List;
pub use pack::{Pack, PackError};
pub use set::Set;
pub use stream::Stream;
pub use zset::ZSet;

/// The type of a key's value, as `TYPE` names it. The number is what entry flags, snapshot index
/// flags and `ExportEntry.value_type` carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    String = 0,
    Hash = 1,
    List = 2,
    Set = 3,
    ZSet = 4,
    Stream = 5,
}

impl ValueType {
    pub fn from_u32(n: u32) -> Option<ValueType> {
        Some(match n {
            0 => ValueType::String,
            1 => ValueType::Hash,
            2 => ValueType::List,
            3 => ValueType::Set,
            4 => ValueType::ZSet,
            5 => ValueType::Stream,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            ValueType::String => "string",
            ValueType::Hash => "hash",
            ValueType::List => "list",
            ValueType::Set => "set",
            ValueType::ZSet => "zset",
            ValueType::Stream => "stream",
        }
    }

    pub fn from_name(name: &[u8]) -> Option<ValueType> {
        [
            ValueType::String,
            ValueType::Hash,
            ValueType::List,
            ValueType::Set,
            ValueType::ZSet,
            ValueType::Stream,
        ]
        .into_iter()
        .find(|t| t.name().as_bytes().eq_ignore_ascii_case(name))
    }
}

#[derive(Debug, Clone)]
pub enum Object {
    Hash(Hash),
    List(List),
    Set(Set),
    ZSet(ZSet),
    /// Boxed: a stream's counters and maps would make every other value's slot larger.
    Stream(Box<Stream>),
}

impl Object {
    /// An empty value of type `t` (not for strings, which live in their entry).
    pub fn empty(t: ValueType) -> Object {
        match t {
            ValueType::Hash => Object::Hash(Hash::default()),
            ValueType::List => Object::List(List::default()),
            ValueType::ZSet => Object::ZSet(ZSet::default()),
            ValueType::Stream => Object::Stream(Box::default()),
            ValueType::Set | ValueType::String => Object::Set(Set::default()),
        }
    }

    pub fn value_type(&self) -> ValueType {
        match self {
            Object::Hash(_) => ValueType::Hash,
            Object::List(_) => ValueType::List,
            Object::Set(_) => ValueType::Set,
            Object::ZSet(_) => ValueType::ZSet,
            Object::Stream(_) => ValueType::Stream,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Object::Hash(h) => h.len(),
            Object::List(l) => l.len(),
            Object::Set(s) => s.len(),
            Object::ZSet(z) => z.len(),
            Object::Stream(s) => s.len(),
        }
    }

    /// Whether the value is an emptied collection, which Redis deletes. A stream is never
    /// one: it stays, with its ID counters and groups, when its last entry goes.
    pub fn is_empty(&self) -> bool {
        !matches!(self, Object::Stream(_)) && self.len() == 0
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            Object::Hash(h) => h.encoding(),
            Object::List(l) => l.encoding(),
            Object::Set(s) => s.encoding(),
            Object::ZSet(z) => z.encoding(),
            Object::Stream(_) => "stream",
        }
    }

    /// Heap bytes held (what `maxmemory` counts and `MEMORY USAGE` reports).
    pub fn mem(&self) -> usize {
        std::mem::size_of::<Object>()
            + match self {
                Object::Hash(h) => h.mem(),
                Object::List(l) => l.mem(),
                Object::Set(s) => s.mem(),
                Object::ZSet(z) => z.mem(),
                Object::Stream(s) => s.mem(),
            }
    }

    /// The serialized form: a pack of the elements (hash: field, value, field, value, ...).
    pub fn serialize(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Object::Hash(h) => h.serialize(&mut out),
            Object::List(l) => l.serialize(&mut out),
            Object::Set(s) => s.serialize(&mut out),
            Object::ZSet(z) => z.serialize(&mut out),
            Object::Stream(s) => s.serialize(&mut out),
        }
        out
    }

    /// Reads a serialized value of type `t`, checking it; encodings are chosen by `limits`.
    pub fn deserialize(t: ValueType, bytes: &[u8], limits: &Limits) -> Result<Object, PackError> {
        if t == ValueType::Stream {
            return Ok(Object::Stream(Box::new(Stream::deserialize(bytes)?)));
        }
        let pack = Pack::from_bytes(bytes)?;
        Ok(match t {
            ValueType::Hash => {
                // Pairs, and (an odd count) the field times last: `Hash::from_pairs` checks both.
                Object::Hash(Hash::from_pairs(pack.iter(), limits).ok_or(PackError::BadCount(pack.len()))?)
            }
            ValueType::List => Object::List(List::from_items(pack.iter(), limits.list_max_listpack_size)),
            ValueType::Set => Object::Set(Set::from_members(pack.iter(), limits)),
            ValueType::ZSet => {
                Object::ZSet(ZSet::from_pairs(pack.iter(), limits).ok_or(PackError::BadElement("score"))?)
            }
            ValueType::String => return Err(PackError::BadElement("typed value")),
            ValueType::Stream => unreachable!("read above"),
        })
    }
}

/// The decoding fuzz property (`fuzz/fuzz_targets/typed_decode.rs` and the regression test that
/// replays saved inputs): any bytes, read as a serialized value of any type under any limits,
/// decode or are refused without a panic; a decoded value serializes to bytes that decode to the
/// same contents again. The first input byte picks the type (low 3 bits) and the limits.
#[doc(hidden)]
pub fn fuzz_check_decode(data: &[u8]) {
    let Some((&control, bytes)) = data.split_first() else { return };
    let Some(t) = ValueType::from_u32(u32::from(control & 7)) else { return };
    let limits = match control >> 6 {
        0 => Limits::default(),
        1 => Limits::TINY,
        _ => Limits::ALWAYS_TABLE,
    };
    let Ok(value) = Object::deserialize(t, bytes, &limits) else { return };
    assert_ne!(t, ValueType::String, "a string is not a typed value");
    assert_eq!(value.value_type(), t);
    let again = Object::deserialize(t, &value.serialize(), &limits).expect("a re-serialized value decodes");
    assert_eq!(again.len(), value.len());
    assert_eq!(fuzz_contents(&again), fuzz_contents(&value), "contents changed through the serialized form");
    let _ = value.mem();
}

/// A value's contents in a canonical order (hash and set tables iterate in no fixed order).
fn fuzz_contents(o: &Object) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = match o {
        Object::Hash(h) => h.iter().map(|(f, v)| [&f.len().to_le_bytes()[..], f, v].concat()).collect(),
        Object::Set(s) => s.iter().map(|m| m.into_owned()).collect(),
        Object::List(l) => return l.iter().map(|v| v.to_vec()).collect(),
        Object::ZSet(z) => {
            return z.iter().map(|(m, s)| [m, &s.to_bits().to_le_bytes()[..]].concat()).collect();
        }
        Object::Stream(s) => {
            return s
                .entries()
                .iter()
                .map(|e| [&e.id.ms.to_le_bytes()[..], &e.fields.concat()].concat())
                .collect();
        }
    };
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_round_trips_through_its_serialized_form() {
        let limits = Limits::default();
        let mut h = Hash::default();
        for i in 0..600 {
            h.set(format!("f{i}").as_bytes(), format!("v{i}").as_bytes(), &limits);
        }
        assert_eq!(h.encoding(), "hashtable", "converted past 512 fields");
        let o = Object::Hash(h);
        let back = Object::deserialize(ValueType::Hash, &o.serialize(), &limits).unwrap();
        let Object::Hash(b) = &back else { panic!() };
        assert_eq!(b.len(), 600);
        assert_eq!(b.get(b"f150"), Some(&b"v150"[..]));
        let s = Object::Set(Set::from_members([&b"3"[..], b"1", b"2"].into_iter(), &limits));
        assert_eq!(s.encoding(), "intset");
        let back = Object::deserialize(ValueType::Set, &s.serialize(), &limits).unwrap();
        assert_eq!(back.len(), 3);
        assert!(
            Object::deserialize(ValueType::Hash, Pack::from_items([&b"odd"[..]]).bytes(), &limits).is_err()
        );
    }

    #[test]
    fn memory_follows_the_contents() {
        let limits = Limits::default();
        let mut h = Hash::default();
        for i in 0..1000 {
            h.set(format!("field:{i}").as_bytes(), &[b'x'; 100], &limits);
        }
        let full = h.mem();
        assert!(full > 1000 * 100, "counts the values ({full})");
        for i in 0..1000 {
            h.remove(format!("field:{i}").as_bytes());
        }
        assert!(h.mem() < full / 4, "falls when fields go");
    }
}
