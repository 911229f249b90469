//! Hashes: a pack of field, value pairs in insertion order while small (Redis's listpack, same
//! thresholds and the same order in replies), a table once a field count or length threshold is
//! passed (never converted back, as in Redis): each field and its value in one allocation, see
//! [`super::table`].

use super::limits::Limits;
use super::pack::Pack;
use super::table::{PairKey, Table};

#[derive(Debug, Clone)]
pub enum Hash {
    Pack(Pack),
    /// Boxed: a small hash's value then costs no more than its pack.
    Table(Box<Table<PairKey>>),
}

impl Default for Hash {
    fn default() -> Self {
        Hash::Pack(Pack::default())
    }
}

impl Hash {
    pub fn len(&self) -> usize {
        match self {
            Hash::Pack(p) => p.len() / 2,
            Hash::Table(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            Hash::Pack(_) => "listpack",
            Hash::Table(_) => "hashtable",
        }
    }

    pub fn get(&self, field: &[u8]) -> Option<&[u8]> {
        match self {
            Hash::Pack(p) => {
                let mut it = p.iter();
                while let (Some(f), Some(v)) = (it.next(), it.next()) {
                    if f == field {
                        return Some(v);
                    }
                }
                None
            }
            Hash::Table(t) => t.find(field).and_then(|pos| t.item(pos)).map(|item| PairKey::split(item).1),
        }
    }

    /// Field, value pairs in insertion order (after removals, a table moves its last pair into
    /// the removed one's place).
    pub fn iter(&self) -> Box<dyn Iterator<Item = (&[u8], &[u8])> + '_> {
        match self {
            Hash::Pack(p) => {
                let mut it = p.iter();
                Box::new(std::iter::from_fn(move || Some((it.next()?, it.next()?))))
            }
            Hash::Table(t) => Box::new(t.items().map(PairKey::split)),
        }
    }

    /// Sets `field`; true if it is new.
    pub fn set(&mut self, field: &[u8], value: &[u8], limits: &Limits) -> bool {
        if let Hash::Pack(p) = self {
            if field.len() > limits.hash_max_listpack_value || value.len() > limits.hash_max_listpack_value {
                self.convert();
            } else {
                let found = p.iter().step_by(2).position(|f| f == field);
                let new = match found {
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
        let Hash::Table(t) = self else { unreachable!("converted above") };
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
        match self {
            Hash::Pack(p) => match p.iter().step_by(2).position(|f| f == field) {
                Some(i) => {
                    p.splice(2 * i, 2, &[]);
                    p.shrink();
                    true
                }
                None => false,
            },
            Hash::Table(t) => t.remove(field).is_some(),
        }
    }

    fn convert(&mut self) {
        let Hash::Pack(p) = self else { return };
        let mut table = Hash::Table(Box::default());
        let mut it = p.iter();
        let limits = Limits::ALWAYS_TABLE;
        while let (Some(f), Some(v)) = (it.next(), it.next()) {
            table.set(f, v, &limits);
        }
        *self = table;
    }

    /// Builds a hash from pairs (decoding a serialized value), choosing the encoding by `limits`.
    pub fn from_pairs<'a>(mut items: impl Iterator<Item = &'a [u8]>, limits: &Limits) -> Option<Hash> {
        let mut h = Hash::default();
        while let Some(f) = items.next() {
            h.set(f, items.next()?, limits);
        }
        Some(h)
    }

    pub fn mem(&self) -> usize {
        match self {
            Hash::Pack(p) => p.mem(),
            Hash::Table(t) => t.mem(),
        }
    }

    pub fn serialize(&self, out: &mut Vec<u8>) {
        for (f, v) in self.iter() {
            super::pack::put(out, f);
            super::pack::put(out, v);
        }
    }
}
