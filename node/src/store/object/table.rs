//! The large encoding of sets and hashes: items in a vector, with a hash index of positions over
//! it (as a shard keeps its entries). One allocation per item (a hash keeps field and value in
//! one, see [`PairKey`]) and a 4-byte index slot is what makes a million-field hash cost less
//! than Redis's dict; positions give O(1) uniform random picks (SPOP, SRANDMEMBER, HRANDFIELD)
//! and scan cursors.

use std::hash::BuildHasher;
use std::marker::PhantomData;

use hashbrown::{DefaultHashBuilder, HashTable};

use super::limits::alloc_size;

/// Where an item's key is inside the item's bytes.
pub trait KeyOf {
    fn key(item: &[u8]) -> &[u8];
}

/// A set member is its own key.
#[derive(Debug, Clone, Default)]
pub struct WholeKey;

impl KeyOf for WholeKey {
    fn key(item: &[u8]) -> &[u8] {
        item
    }
}

/// A hash pair `[field length (LEB128)][field][value]`: the key is the field.
#[derive(Debug, Clone, Default)]
pub struct PairKey;

impl PairKey {
    /// Packs a field and a value into one item.
    pub fn pack(field: &[u8], value: &[u8]) -> Box<[u8]> {
        let mut out = Vec::with_capacity(field.len() + value.len() + 2);
        super::pack::put(&mut out, field);
        out.extend_from_slice(value);
        out.into_boxed_slice()
    }

    /// An item's field and value.
    pub fn split(item: &[u8]) -> (&[u8], &[u8]) {
        let (len, i) = super::pack::read_len(item, 0);
        item[i..].split_at(len)
    }
}

impl KeyOf for PairKey {
    fn key(item: &[u8]) -> &[u8] {
        PairKey::split(item).0
    }
}

#[derive(Debug, Clone)]
pub struct Table<K> {
    items: Vec<Box<[u8]>>,
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
    /// Heap bytes of the items.
    bytes: usize,
    _key: PhantomData<K>,
}

impl<K> Default for Table<K> {
    fn default() -> Self {
        Table {
            items: Vec::new(),
            index: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            bytes: 0,
            _key: PhantomData,
        }
    }
}

/// Bytes per item besides its own allocation: the boxed-slice header and an index bucket.
const ITEM: usize = 16;
const BUCKET: usize = 4 + 1;

impl<K: KeyOf> Table<K> {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The position of the item with key `key`.
    pub fn find(&self, key: &[u8]) -> Option<usize> {
        let items = &self.items;
        self.index
            .find(self.hasher.hash_one(key), |&i| K::key(&items[i as usize]) == key)
            .map(|&i| i as usize)
    }

    pub fn item(&self, pos: usize) -> Option<&[u8]> {
        self.items.get(pos).map(|b| &**b)
    }

    /// Items in position order (insertion order, but for removals, which move the last item).
    pub fn items(&self) -> impl Iterator<Item = &[u8]> {
        self.items.iter().map(|b| &**b)
    }

    /// Adds an item whose key is not in the table yet.
    pub fn insert_new(&mut self, item: Box<[u8]>) {
        let pos = u32::try_from(self.items.len()).expect("a value holds fewer than 2^32 elements");
        let hash = self.hasher.hash_one(K::key(&item));
        self.bytes += alloc_size(item.len());
        self.items.push(item);
        let (items, hasher) = (&self.items, &self.hasher);
        self.index.insert_unique(hash, pos, |&i| hasher.hash_one(K::key(&items[i as usize])));
    }

    /// Replaces the item at `pos` with one of the same key.
    pub fn replace(&mut self, pos: usize, item: Box<[u8]>) {
        debug_assert_eq!(K::key(&item), K::key(&self.items[pos]));
        self.bytes = self.bytes + alloc_size(item.len()) - alloc_size(self.items[pos].len());
        self.items[pos] = item;
    }

    /// Removes the item with key `key` and answers it.
    pub fn remove(&mut self, key: &[u8]) -> Option<Box<[u8]>> {
        let hash = self.hasher.hash_one(key);
        let items = &self.items;
        let found = self.index.find_entry(hash, |&i| K::key(&items[i as usize]) == key).ok()?;
        let (pos, _) = found.remove();
        let last = self.items.len() as u32 - 1;
        if pos != last {
            // The last item moves into the hole; its index entry follows it.
            let moved_hash = self.hasher.hash_one(K::key(&self.items[last as usize]));
            if let Some(slot) = self.index.find_mut(moved_hash, |&i| i == last) {
                *slot = pos;
            }
        }
        let gone = self.items.swap_remove(pos as usize);
        self.bytes -= alloc_size(gone.len());
        if self.items.capacity() > 64 && self.items.len() * 4 < self.items.capacity() {
            self.items.shrink_to(self.items.len() * 2);
            let (items, hasher) = (&self.items, &self.hasher);
            self.index.shrink_to(self.items.len(), |&i| hasher.hash_one(K::key(&items[i as usize])));
        }
        Some(gone)
    }

    /// Heap bytes, with the table's own (boxed) header.
    pub fn mem(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.bytes
            + self.items.capacity() * ITEM
            + self.index.capacity() * BUCKET
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_split_and_removal_keeps_the_index_right() {
        let long = vec![b'f'; 200];
        assert_eq!(PairKey::split(&PairKey::pack(&long, b"v")), (&long[..], &b"v"[..]));
        assert_eq!(PairKey::split(&PairKey::pack(b"", b"")), (&b""[..], &b""[..]));
        let mut t: Table<PairKey> = Table::default();
        for i in 0..1000 {
            t.insert_new(PairKey::pack(format!("f{i}").as_bytes(), format!("v{i}").as_bytes()));
        }
        for i in (0..1000).step_by(3) {
            let gone = t.remove(format!("f{i}").as_bytes()).expect("present");
            assert_eq!(PairKey::split(&gone).1, format!("v{i}").as_bytes());
        }
        for i in 0..1000 {
            let found = t.find(format!("f{i}").as_bytes());
            assert_eq!(found.is_some(), i % 3 != 0, "f{i}");
            if let Some(pos) = found {
                assert_eq!(PairKey::split(t.item(pos).unwrap()).1, format!("v{i}").as_bytes());
            }
        }
        assert_eq!(t.len(), 666);
        let pos = t.find(b"f1").unwrap();
        t.replace(pos, PairKey::pack(b"f1", b"new"));
        assert_eq!(PairKey::split(t.item(t.find(b"f1").unwrap()).unwrap()).1, b"new");
        while let Some(item) = t.item(0).map(<[u8]>::to_vec) {
            assert!(t.remove(PairKey::key(&item)).is_some());
        }
        assert!(t.is_empty() && t.mem() < 4096, "{}", t.mem());
    }
}
