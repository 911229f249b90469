//! An ordered sequence with ranks: sorted blocks (deques, so both ends change in O(1)) of at most
//! [`MAX`] elements, the sort key of each block's last element ([`Keyed`]: a sorted set's score)
//! in a separate dense array (searched first, so a lookup touches one block and no element
//! outside it, and keeping it costs a copy, not a reference count), and a Fenwick tree of block
//! lengths for ranks. The sorted-set index ("skiplist" in Redis's words): insert,
//! remove, rank and access by rank are O(log n) plus a move of at most one block, where a B-tree
//! walks O(rank) to answer ZRANK or ZRANGE by index.
//!
//! A block that overflows splits in halves, except that appending past the last element (or
//! prepending before the first) starts a new block, so ascending inserts leave full blocks behind.
//! A block that falls under a quarter merges into a neighbour that has room.

use std::collections::VecDeque;

/// Elements per block at most.
pub const MAX: usize = 256;

/// An element's leading sort key: elements order by it first, and by the whole element between
/// equal keys.
pub trait Keyed: Ord {
    type Key: PartialOrd + Copy + std::fmt::Debug;
    fn key(&self) -> Self::Key;
}

impl Keyed for u32 {
    type Key = u32;
    fn key(&self) -> u32 {
        *self
    }
}

#[derive(Debug, Clone)]
pub struct Ordered<T: Keyed> {
    blocks: Vec<VecDeque<T>>,
    /// `lasts[b]` is the key of `blocks[b]`'s last element.
    lasts: Vec<T::Key>,
    /// Fenwick tree over block lengths (1-based).
    fenwick: Vec<usize>,
    len: usize,
}

impl<T: Keyed> Default for Ordered<T> {
    fn default() -> Self {
        Ordered { blocks: Vec::new(), lasts: Vec::new(), fenwick: vec![0], len: 0 }
    }
}

impl<T: Keyed> Ordered<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The block that holds `x` or would: the first whose last element is not below it. The key
    /// array decides, but between blocks whose last keys equal `x`'s (many equal scores) the
    /// blocks' last elements do.
    fn block_of(&self, x: &T) -> usize {
        let k = x.key();
        let lo = self.lasts.partition_point(|l| *l < k);
        let ties = self.lasts[lo..].partition_point(|l| *l <= k);
        if ties == 0 {
            return lo;
        }
        lo + self.blocks[lo..lo + ties].partition_point(|b| b.back().expect("blocks are never empty") < x)
    }

    /// How many elements are below `x`.
    pub fn rank(&self, x: &T) -> usize {
        let b = self.block_of(x);
        if b == self.blocks.len() {
            return self.len;
        }
        self.prefix(b) + self.blocks[b].partition_point(|y| y < x)
    }

    /// Inserts `x` (which must not be present).
    pub fn insert(&mut self, x: T) {
        if self.blocks.is_empty() {
            self.lasts.push(x.key());
            self.blocks.push(Self::block_with(x));
            self.len = 1;
            self.rebuild();
            return;
        }
        let b = self.block_of(&x).min(self.blocks.len() - 1);
        let at = self.blocks[b].partition_point(|y| y < &x);
        self.len += 1;
        if self.blocks[b].len() < MAX {
            self.blocks[b].insert(at, x);
            self.after_change(b);
            self.add(b, 1);
            return;
        }
        // A full block: past the very end or before the very start, a new block; else halves.
        if b + 1 == self.blocks.len() && at == MAX {
            self.lasts.push(x.key());
            self.blocks.push(Self::block_with(x));
        } else if b == 0 && at == 0 {
            self.lasts.insert(0, x.key());
            self.blocks.insert(0, Self::block_with(x));
        } else {
            let mut tail = VecDeque::with_capacity(MAX);
            tail.extend(self.blocks[b].drain(MAX / 2..));
            let (target, at) =
                if at <= MAX / 2 { (&mut self.blocks[b], at) } else { (&mut tail, at - MAX / 2) };
            target.insert(at, x);
            let tail_last = tail.back().expect("half a block").key();
            self.blocks.insert(b + 1, tail);
            self.lasts.insert(b + 1, tail_last);
            self.after_change(b);
        }
        self.rebuild();
    }

    /// Removes the element equal to `x`; false if there is none.
    pub fn remove(&mut self, x: &T) -> bool {
        let b = self.block_of(x);
        let Some(block) = self.blocks.get_mut(b) else { return false };
        let at = block.partition_point(|y| y < x);
        if block.get(at) != Some(x) {
            return false;
        }
        block.remove(at);
        self.removed(b);
        true
    }

    pub fn pop_first(&mut self) -> Option<T> {
        let x = self.blocks.first_mut()?.pop_front().expect("blocks are never empty");
        self.removed(0);
        Some(x)
    }

    pub fn pop_last(&mut self) -> Option<T> {
        let b = self.blocks.len().checked_sub(1)?;
        let x = self.blocks[b].pop_back().expect("blocks are never empty");
        self.removed(b);
        Some(x)
    }

    /// The element of rank `i`.
    pub fn get(&self, i: usize) -> Option<&T> {
        let (b, at) = self.locate(i)?;
        self.blocks[b].get(at)
    }

    /// Elements of rank `a..b` (clamped), in order; `.rev()` walks them backwards.
    pub fn range(&self, a: usize, b: usize) -> impl DoubleEndedIterator<Item = &T> + '_ {
        let b = b.min(self.len);
        let a = a.min(b);
        let (first, last) = match (self.locate(a), b.checked_sub(1).and_then(|l| self.locate(l))) {
            (Some(f), Some(l)) if a < b => (f, l),
            _ => ((0, 0), (0, 0)),
        };
        let empty = a >= b;
        let (fb, fi) = first;
        let (lb, li) = last;
        let head = (!empty)
            .then(|| if fb == lb { self.blocks[fb].range(fi..=li) } else { self.blocks[fb].range(fi..) });
        let middle: &[VecDeque<T>] = if empty || lb <= fb + 1 { &[] } else { &self.blocks[fb + 1..lb] };
        let tail = (!empty && fb != lb).then(|| self.blocks[lb].range(..=li));
        head.into_iter().flatten().chain(middle.iter().flatten()).chain(tail.into_iter().flatten())
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + '_ {
        self.blocks.iter().flatten()
    }

    /// Bytes held: block buffers and the arrays beside them. O(1) (the store asks after every
    /// write): every block is allocated for [`MAX`] elements and never grows past it.
    pub fn mem(&self) -> usize {
        let elem = std::mem::size_of::<T>();
        self.blocks.len() * MAX * elem
            + self.blocks.capacity() * std::mem::size_of::<VecDeque<T>>()
            + self.lasts.capacity() * std::mem::size_of::<T::Key>()
            + self.fenwick.capacity() * std::mem::size_of::<usize>()
    }

    fn block_with(x: T) -> VecDeque<T> {
        let mut v = VecDeque::with_capacity(MAX);
        v.push_back(x);
        v
    }

    /// Block `b` changed in place: its last element may have.
    fn after_change(&mut self, b: usize) {
        if let Some(l) = self.blocks[b].back() {
            self.lasts[b] = l.key();
        }
    }

    /// An element left block `b`: drop or merge the block if it got small.
    fn removed(&mut self, b: usize) {
        self.len -= 1;
        if self.blocks[b].is_empty() {
            self.blocks.remove(b);
            self.lasts.remove(b);
            self.rebuild();
            return;
        }
        self.after_change(b);
        self.add(b, -1);
        let small = self.blocks[b].len() < MAX / 4;
        // Merge into the next block if both fit in three quarters of one (else the previous).
        let fits =
            |o: usize| self.blocks.get(o).is_some_and(|n| n.len() + self.blocks[b].len() <= MAX * 3 / 4);
        if small && fits(b + 1) {
            let next = self.blocks.remove(b + 1);
            self.lasts.remove(b + 1);
            self.blocks[b].extend(next);
            self.after_change(b);
            self.rebuild();
        } else if small && b > 0 && fits(b - 1) {
            let cur = self.blocks.remove(b);
            self.lasts.remove(b);
            self.blocks[b - 1].extend(cur);
            self.after_change(b - 1);
            self.rebuild();
        }
        if self.blocks.capacity() > 16 && self.blocks.len() < self.blocks.capacity() / 4 {
            self.blocks.shrink_to(self.blocks.len() * 2);
            self.lasts.shrink_to(self.blocks.len() * 2);
        }
    }

    /// The Fenwick tree from the block lengths (after blocks were added or removed).
    fn rebuild(&mut self) {
        let n = self.blocks.len();
        self.fenwick.clear();
        self.fenwick.resize(n + 1, 0);
        for i in 1..=n {
            self.fenwick[i] += self.blocks[i - 1].len();
            let parent = i + (i & i.wrapping_neg());
            if parent <= n {
                self.fenwick[parent] += self.fenwick[i];
            }
        }
    }

    /// Adds `delta` to block `b`'s length in the Fenwick tree.
    fn add(&mut self, b: usize, delta: isize) {
        let mut i = b + 1;
        while i < self.fenwick.len() {
            self.fenwick[i] = self.fenwick[i].wrapping_add_signed(delta);
            i += i & i.wrapping_neg();
        }
    }

    /// Elements in blocks before `b`.
    fn prefix(&self, b: usize) -> usize {
        let (mut i, mut sum) = (b, 0);
        while i > 0 {
            sum += self.fenwick[i];
            i -= i & i.wrapping_neg();
        }
        sum
    }

    /// The block and position of rank `i`.
    fn locate(&self, i: usize) -> Option<(usize, usize)> {
        if i >= self.len {
            return None;
        }
        // Fenwick descent: the largest block prefix whose total is at most `i`.
        let n = self.blocks.len();
        let (mut pos, mut left) = (0, i);
        let mut step = n.next_power_of_two();
        while step > 0 {
            let next = pos + step;
            if next <= n && self.fenwick[next] <= left {
                pos = next;
                left -= self.fenwick[next];
            }
            step >>= 1;
        }
        Some((pos, left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(o: &Ordered<u32>, model: &std::collections::BTreeSet<u32>) {
        let want: Vec<u32> = model.iter().copied().collect();
        assert_eq!(o.len(), want.len());
        assert_eq!(o.iter().copied().collect::<Vec<_>>(), want);
        for (b, block) in o.blocks.iter().enumerate() {
            assert!(!block.is_empty() && block.len() <= MAX, "block {b} has {}", block.len());
            assert_eq!(block.capacity(), MAX, "mem() counts MAX per block");
            assert_eq!(o.lasts[b], block.back().unwrap().key());
            assert_eq!(o.prefix(b + 1) - o.prefix(b), block.len());
        }
    }

    #[test]
    fn agrees_with_a_model_set_under_random_changes() {
        let mut o = Ordered::default();
        let mut model = std::collections::BTreeSet::new();
        let mut seed = 11u64;
        for step in 0..40_000u32 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let r = (seed >> 33) as u32;
            let x = r % 5000;
            match r % 7 {
                0..=2 => {
                    if model.insert(x) {
                        o.insert(x);
                    }
                }
                3 | 4 => assert_eq!(o.remove(&x), model.remove(&x), "remove {x}"),
                5 => assert_eq!(o.pop_first(), model.pop_first()),
                _ => assert_eq!(o.pop_last(), model.pop_last()),
            }
            if step % 1000 == 0 {
                check(&o, &model);
            }
            let want: Vec<u32> = model.iter().copied().collect();
            let i = r as usize % (want.len() + 1);
            assert_eq!(o.get(i), want.get(i));
            assert_eq!(o.rank(&x), want.partition_point(|&y| y < x));
            let j = (i + (r as usize >> 8) % 700).min(want.len());
            assert!(o.range(i, j).copied().eq(want[i..j].iter().copied()), "range {i}..{j}");
            assert!(o.range(i, j).rev().copied().eq(want[i..j].iter().rev().copied()));
        }
        check(&o, &model);
    }

    #[test]
    fn ascending_inserts_fill_blocks_and_ranks_are_exact() {
        let mut o = Ordered::default();
        for x in 0..100_000u32 {
            o.insert(x);
        }
        assert!(o.blocks.iter().rev().skip(1).all(|b| b.len() == MAX), "full blocks behind an append");
        for x in (0..100_000u32).step_by(997) {
            assert_eq!(o.rank(&x), x as usize);
            assert_eq!(o.get(x as usize), Some(&x));
        }
        for x in (0..100_000u32).rev() {
            o.insert(x + 200_000);
        }
        assert_eq!(o.rank(&200_000), 100_000);
        assert_eq!(
            o.range(99_998, 100_002).copied().collect::<Vec<_>>(),
            vec![99_998, 99_999, 200_000, 200_001]
        );
        let before = o.mem();
        for x in 0..100_000u32 {
            assert!(o.remove(&(x + 200_000)));
        }
        assert!(o.mem() < before, "blocks go with their elements");
        assert_eq!(o.range(5, 3).count(), 0);
        assert_eq!(o.range(99_999, 500_000).count(), 1);
    }
}
