//! Sets, encoded as Redis 7.0 encodes them: a sorted array of integers while every member is an
//! integer and there are at most `set-max-intset-entries` of them ("intset"), a hash table
//! otherwise ("hashtable"; never converted back).
//!
//! The table keeps members in a vector with a hash index of positions over it (as a shard keeps
//! its entries): SPOP and SRANDMEMBER pick uniformly in O(1), and SSCAN cursors are positions.

use std::borrow::Cow;
use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

use super::{Limits, alloc_size};

#[derive(Debug, Clone)]
pub enum Set {
    Ints(Vec<i64>),
    Table(Table),
}

#[derive(Debug, Clone, Default)]
pub struct Table {
    items: Vec<Box<[u8]>>,
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
    bytes: usize,
}

/// Bytes per member besides its own: the boxed-slice header and an index bucket.
const ITEM: usize = 16;
const BUCKET: usize = 4 + 1;

impl Table {
    fn find(&self, m: &[u8]) -> Option<u32> {
        let items = &self.items;
        self.index.find(self.hasher.hash_one(m), |&i| &*items[i as usize] == m).copied()
    }

    fn insert(&mut self, m: &[u8]) -> bool {
        if self.find(m).is_some() {
            return false;
        }
        let pos = self.items.len() as u32;
        self.bytes += alloc_size(m.len());
        self.items.push(m.into());
        let (items, hasher) = (&self.items, &self.hasher);
        self.index.insert_unique(hasher.hash_one(m), pos, |&i| hasher.hash_one(&*items[i as usize]));
        true
    }

    fn remove(&mut self, m: &[u8]) -> bool {
        let hash = self.hasher.hash_one(m);
        let items = &self.items;
        let Ok(found) = self.index.find_entry(hash, |&i| &*items[i as usize] == m) else { return false };
        let (pos, _) = found.remove();
        let last = self.items.len() as u32 - 1;
        if pos != last {
            // The last member moves into the hole; its index entry follows it.
            let moved_hash = self.hasher.hash_one(&*self.items[last as usize]);
            if let Some(slot) = self.index.find_mut(moved_hash, |&i| i == last) {
                *slot = pos;
            }
        }
        let gone = self.items.swap_remove(pos as usize);
        self.bytes -= alloc_size(gone.len());
        if self.items.capacity() > 64 && self.items.len() * 4 < self.items.capacity() {
            self.items.shrink_to(self.items.len() * 2);
            let (items, hasher) = (&self.items, &self.hasher);
            self.index.shrink_to(self.items.len(), |&i| hasher.hash_one(&*items[i as usize]));
        }
        true
    }
}

impl Default for Set {
    fn default() -> Self {
        Set::Ints(Vec::new())
    }
}

/// A member as an intset holds it: only Redis's canonical integer text qualifies.
pub fn as_int(m: &[u8]) -> Option<i64> {
    shoal_wire::num::parse_i64(m).filter(|n| n.to_string().as_bytes() == m)
}

impl Set {
    pub fn len(&self) -> usize {
        match self {
            Set::Ints(v) => v.len(),
            Set::Table(t) => t.items.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            Set::Ints(_) => "intset",
            Set::Table(_) => "hashtable",
        }
    }

    pub fn contains(&self, m: &[u8]) -> bool {
        match self {
            Set::Ints(v) => as_int(m).is_some_and(|n| v.binary_search(&n).is_ok()),
            Set::Table(t) => t.find(m).is_some(),
        }
    }

    /// Members: ascending for an intset, position order for a table.
    pub fn iter(&self) -> Box<dyn Iterator<Item = Cow<'_, [u8]>> + '_> {
        match self {
            Set::Ints(v) => Box::new(v.iter().map(|n| Cow::Owned(n.to_string().into_bytes()))),
            Set::Table(t) => Box::new(t.items.iter().map(|m| Cow::Borrowed(&**m))),
        }
    }

    /// The member at position `i` of [`iter`](Self::iter)'s order (O(1)), for random picks.
    pub fn nth(&self, i: usize) -> Option<Vec<u8>> {
        match self {
            Set::Ints(v) => v.get(i).map(|n| n.to_string().into_bytes()),
            Set::Table(t) => t.items.get(i).map(|m| m.to_vec()),
        }
    }

    /// A uniformly random member.
    pub fn random(&self) -> Option<Vec<u8>> {
        if self.is_empty() { None } else { self.nth(fastrand::usize(..self.len())) }
    }

    /// Adds `m`; true if it is new.
    pub fn add(&mut self, m: &[u8], limits: &Limits) -> bool {
        if let Set::Ints(v) = self {
            match as_int(m) {
                Some(n) => {
                    return match v.binary_search(&n) {
                        Ok(_) => false,
                        Err(at) => {
                            v.insert(at, n);
                            if v.len() > limits.set_max_intset_entries {
                                self.convert();
                            }
                            true
                        }
                    };
                }
                None => self.convert(),
            }
        }
        let Set::Table(t) = self else { unreachable!("converted above") };
        t.insert(m)
    }

    pub fn remove(&mut self, m: &[u8]) -> bool {
        match self {
            Set::Ints(v) => match as_int(m).map(|n| v.binary_search(&n)) {
                Some(Ok(at)) => {
                    v.remove(at);
                    true
                }
                _ => false,
            },
            Set::Table(t) => t.remove(m),
        }
    }

    fn convert(&mut self) {
        let Set::Ints(v) = self else { return };
        let mut t = Table::default();
        for n in v.iter() {
            t.insert(n.to_string().as_bytes());
        }
        *self = Set::Table(t);
    }

    pub fn from_members<'a>(items: impl Iterator<Item = &'a [u8]>, limits: &Limits) -> Set {
        let mut s = Set::default();
        for m in items {
            s.add(m, limits);
        }
        s
    }

    pub fn mem(&self) -> usize {
        match self {
            Set::Ints(v) => v.capacity() * 8,
            Set::Table(t) => t.bytes + t.items.capacity() * ITEM + t.index.capacity() * BUCKET,
        }
    }

    pub fn serialize(&self, out: &mut Vec<u8>) {
        for m in self.iter() {
            super::pack::put(out, &m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_removal_keeps_the_index_right() {
        let limits = Limits::default();
        let mut s = Set::default();
        for i in 0..1000 {
            s.add(format!("m{i}").as_bytes(), &limits);
        }
        assert_eq!(s.encoding(), "hashtable");
        for i in (0..1000).step_by(3) {
            assert!(s.remove(format!("m{i}").as_bytes()));
        }
        for i in 0..1000 {
            assert_eq!(s.contains(format!("m{i}").as_bytes()), i % 3 != 0, "m{i}");
        }
        assert_eq!(s.len(), 666);
        assert_eq!(s.iter().count(), 666);
        while let Some(m) = s.random() {
            assert!(s.remove(&m));
        }
        assert!(s.is_empty() && s.mem() < 4096, "{}", s.mem());
    }
}
