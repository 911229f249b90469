//! Lists: a double-ended queue of separately allocated elements (O(1) at both ends and by
//! index). `OBJECT ENCODING` says "linkedlist", the Redis name for this layout; Redis 7.0's
//! quicklist packs elements more tightly (docs/compatibility.md).

use std::collections::VecDeque;

use super::alloc_size;

#[derive(Debug, Clone, Default)]
pub struct List {
    pub items: VecDeque<Box<[u8]>>,
    bytes: usize,
}

const ITEM: usize = 16;

impl List {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn encoding(&self) -> &'static str {
        "linkedlist"
    }

    pub fn push(&mut self, v: &[u8], front: bool) {
        self.bytes += alloc_size(v.len());
        if front { self.items.push_front(v.into()) } else { self.items.push_back(v.into()) }
    }

    pub fn pop(&mut self, front: bool) -> Option<Box<[u8]>> {
        let v = if front { self.items.pop_front() } else { self.items.pop_back() }?;
        self.bytes -= alloc_size(v.len());
        self.shrink();
        Some(v)
    }

    pub fn insert(&mut self, at: usize, v: &[u8]) {
        self.bytes += alloc_size(v.len());
        self.items.insert(at, v.into());
    }

    pub fn remove(&mut self, at: usize) -> Option<Box<[u8]>> {
        let v = self.items.remove(at)?;
        self.bytes -= alloc_size(v.len());
        Some(v)
    }

    pub fn set(&mut self, at: usize, v: &[u8]) {
        let old = std::mem::replace(&mut self.items[at], v.into());
        self.bytes = self.bytes - alloc_size(old.len()) + alloc_size(v.len());
    }

    /// Keeps elements `start..end` only.
    pub fn keep(&mut self, start: usize, end: usize) {
        let end = end.min(self.items.len());
        for v in self.items.drain(end..) {
            self.bytes -= alloc_size(v.len());
        }
        for v in self.items.drain(..start.min(end)) {
            self.bytes -= alloc_size(v.len());
        }
        self.shrink();
    }

    /// Removes elements for which `f` says so, in order; stops after `limit` removals.
    pub fn retain_count(&mut self, limit: usize, from_back: bool, mut f: impl FnMut(&[u8]) -> bool) -> usize {
        let mut removed = 0;
        let n = self.items.len();
        let mut keep = vec![true; n];
        let order: Box<dyn Iterator<Item = usize>> =
            if from_back { Box::new((0..n).rev()) } else { Box::new(0..n) };
        for i in order {
            if removed == limit {
                break;
            }
            if f(&self.items[i]) {
                keep[i] = false;
                removed += 1;
            }
        }
        if removed > 0 {
            let mut i = 0;
            let bytes = &mut self.bytes;
            self.items.retain(|v| {
                let k = keep[i];
                i += 1;
                if !k {
                    *bytes -= alloc_size(v.len());
                }
                k
            });
            self.shrink();
        }
        removed
    }

    fn shrink(&mut self) {
        if self.items.capacity() > 64 && self.items.len() < self.items.capacity() / 4 {
            self.items.shrink_to(self.items.len() * 2);
        }
    }

    pub fn from_items<'a>(items: impl Iterator<Item = &'a [u8]>) -> List {
        let mut l = List::default();
        for v in items {
            l.push(v, false);
        }
        l
    }

    pub fn mem(&self) -> usize {
        self.bytes + self.items.capacity() * ITEM
    }

    pub fn serialize(&self, out: &mut Vec<u8>) {
        for v in &self.items {
            super::pack::put(out, v);
        }
    }
}
