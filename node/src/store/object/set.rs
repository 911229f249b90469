//! Sets, encoded as Redis 7.0 encodes them: a sorted array of integers while every member is an
//! integer and there are at most `set-max-intset-entries` of them ("intset"), a hash table
//! otherwise ("hashtable"; never converted back).
//!
//! The table keeps members in a vector with a hash index of positions over it (as a shard keeps
//! its entries): SPOP and SRANDMEMBER pick uniformly in O(1), and SSCAN cursors are positions.

use super::limits::Limits;
use super::table::{Table, WholeKey};
use std::borrow::Cow;

#[derive(Debug, Clone)]
pub enum Set {
    Ints(Vec<i64>),
    /// Boxed: a small set's value then costs no more than its integers.
    Table(Box<Table<WholeKey>>),
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
            Set::Table(t) => t.len(),
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
            Set::Table(t) => Box::new(t.items().map(Cow::Borrowed)),
        }
    }

    /// The member at position `i` of [`iter`](Self::iter)'s order (O(1)), for random picks.
    pub fn nth(&self, i: usize) -> Option<Vec<u8>> {
        match self {
            Set::Ints(v) => v.get(i).map(|n| n.to_string().into_bytes()),
            Set::Table(t) => t.item(i).map(<[u8]>::to_vec),
        }
    }

    /// The member at position `i` of a table-encoded set (O(1), borrowed); `None` past its end or
    /// for an intset. SSCAN's cursor is such a position.
    pub fn table_member(&self, i: usize) -> Option<&[u8]> {
        match self {
            Set::Table(t) => t.item(i),
            Set::Ints(_) => None,
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
        let new = t.find(m).is_none();
        if new {
            t.insert_new(m.into());
        }
        new
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
            Set::Table(t) => t.remove(m).is_some(),
        }
    }

    fn convert(&mut self) {
        let Set::Ints(v) = self else { return };
        let mut t = Box::<Table<WholeKey>>::default();
        for n in v.iter() {
            t.insert_new(n.to_string().into_bytes().into());
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
            Set::Table(t) => t.mem(),
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
