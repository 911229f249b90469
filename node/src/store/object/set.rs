//! Sets, encoded as Redis 7.0 encodes them: a sorted array of integers while every member is an
//! integer and there are at most `set-max-intset-entries` of them ("intset"), a hash table
//! otherwise ("hashtable"; never converted back).

use hashbrown::HashSet;

use super::{Limits, alloc_size};

#[derive(Debug, Clone)]
pub enum Set {
    Ints(Vec<i64>),
    Table { set: HashSet<Box<[u8]>>, bytes: usize },
}

/// A table bucket besides the member's bytes: a boxed-slice header and a control byte.
const TABLE_ENTRY: usize = 16 + 1;

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
            Set::Table { set, .. } => set.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            Set::Ints(_) => "intset",
            Set::Table { .. } => "hashtable",
        }
    }

    pub fn contains(&self, m: &[u8]) -> bool {
        match self {
            Set::Ints(v) => as_int(m).is_some_and(|n| v.binary_search(&n).is_ok()),
            Set::Table { set, .. } => set.contains(m),
        }
    }

    /// Members: ascending for an intset, table order after.
    pub fn iter(&self) -> Box<dyn Iterator<Item = std::borrow::Cow<'_, [u8]>> + '_> {
        match self {
            Set::Ints(v) => Box::new(v.iter().map(|n| std::borrow::Cow::Owned(n.to_string().into_bytes()))),
            Set::Table { set, .. } => Box::new(set.iter().map(|m| std::borrow::Cow::Borrowed(&**m))),
        }
    }

    /// The member at position `i` of [`iter`](Self::iter)'s order, for random picks.
    pub fn nth(&self, i: usize) -> Option<Vec<u8>> {
        match self {
            Set::Ints(v) => v.get(i).map(|n| n.to_string().into_bytes()),
            Set::Table { set, .. } => set.iter().nth(i).map(|m| m.to_vec()),
        }
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
        let Set::Table { set, bytes } = self else { unreachable!("converted above") };
        if set.contains(m) {
            return false;
        }
        *bytes += alloc_size(m.len());
        set.insert(m.into());
        true
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
            Set::Table { set, bytes } => {
                let removed = set.remove(m);
                if removed {
                    *bytes -= alloc_size(m.len());
                    if set.capacity() > 64 && set.len() * 4 < set.capacity() {
                        set.shrink_to(set.len() * 2);
                    }
                }
                removed
            }
        }
    }

    fn convert(&mut self) {
        let Set::Ints(v) = self else { return };
        let mut set = HashSet::with_capacity(v.len());
        let mut bytes = 0;
        for n in v.iter() {
            let m = n.to_string().into_bytes().into_boxed_slice();
            bytes += alloc_size(m.len());
            set.insert(m);
        }
        *self = Set::Table { set, bytes };
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
            Set::Table { set, bytes } => bytes + set.capacity() * TABLE_ENTRY,
        }
    }

    pub fn serialize(&self, out: &mut Vec<u8>) {
        for m in self.iter() {
            super::pack::put(out, &m);
        }
    }
}
