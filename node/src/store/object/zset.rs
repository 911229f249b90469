//! Sorted sets: a vector of (member, score) pairs kept in (score, member) order while small
//! (Redis's listpack, same thresholds, "listpack"), and past a threshold a member → score map
//! beside an ordered index of (score, member) with ranks ("skiplist": Redis's name for its
//! ordered index; ours is [`super::ordered`], sorted blocks). Each member lives in one shared
//! allocation with its score ([`Rec`]), which both the hash index and the ordered one point to.
//!
//! ZRANK, ZRANGE by index and score ranges are O(log n + k), as with Redis's skiplist.

use std::cmp::Ordering;
use std::hash::BuildHasher;
use std::ops::Bound;
use std::sync::Arc;

use hashbrown::{DefaultHashBuilder, HashTable};

use super::limits::{Limits, alloc_size};
use super::ordered::Ordered;

/// A score with the order Redis uses (never NaN; -0 equals 0, ties broken by member).
#[derive(Debug, Clone, Copy)]
pub struct Score(pub f64);

impl PartialEq for Score {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.partial_cmp(&other.0).unwrap_or(Ordering::Equal)
    }
}

#[derive(Debug, Clone)]
pub enum ZSet {
    Pack(Vec<(Box<[u8]>, f64)>),
    /// Boxed: a small sorted set's value then costs no more than its vector.
    Tree(Box<Tree>),
}

/// A member of a big sorted set: its score (8 bytes, little-endian IEEE) then its bytes, in one
/// allocation the index and the tree share.
#[derive(Debug, Clone)]
struct Rec(Arc<[u8]>);

impl Rec {
    fn new(m: &[u8], score: f64) -> Rec {
        // An exact-size iterator: the Arc is allocated once, at its final size.
        Rec(score.to_le_bytes().into_iter().chain(m.iter().copied()).collect())
    }

    fn score(&self) -> f64 {
        f64::from_le_bytes(self.0[..8].try_into().expect("a record starts with its score"))
    }

    fn member(&self) -> &[u8] {
        &self.0[8..]
    }
}

/// A tree entry: the score again beside the record, so that comparisons read the member's bytes
/// only between equal scores (8 bytes more per member, for a tree walk that does not chase a
/// pointer at every step).
#[derive(Debug, Clone)]
struct Ranked(f64, Rec);

impl Ranked {
    fn of(r: &Rec) -> Ranked {
        Ranked(r.score(), r.clone())
    }
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        key_order((self.1.member(), self.0), (other.1.member(), other.0))
    }
}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl super::ordered::Keyed for Ranked {
    type Key = f64;
    fn key(&self) -> f64 {
        self.0
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked {}

#[derive(Debug, Clone, Default)]
pub struct Tree {
    /// Member → record, hashed by the member's bytes.
    index: HashTable<Rec>,
    hasher: DefaultHashBuilder,
    order: Ordered<Ranked>,
    /// Heap bytes of the records.
    bytes: usize,
}

impl Tree {
    fn find(&self, m: &[u8]) -> Option<&Rec> {
        self.index.find(self.hasher.hash_one(m), |r| r.member() == m)
    }

    /// Takes `m`'s record out of the index (the caller takes it out of the tree).
    fn unindex(&mut self, m: &[u8]) -> Option<Rec> {
        let found = self.index.find_entry(self.hasher.hash_one(m), |r| r.member() == m).ok()?;
        let (rec, _) = found.remove();
        self.bytes -= Tree::record_size(m);
        if self.index.capacity() > 64 && self.index.len() * 4 < self.index.capacity() {
            let hasher = &self.hasher;
            self.index.shrink_to(self.index.len() * 2, |r| hasher.hash_one(r.member()));
        }
        Some(rec)
    }

    /// [`ZSet::upsert`] on the tree: one hash lookup.
    fn upsert<E>(
        &mut self,
        m: &[u8],
        f: impl FnOnce(Option<f64>) -> Result<Option<f64>, E>,
    ) -> Result<Option<(Option<f64>, f64)>, E> {
        let hash = self.hasher.hash_one(m);
        match self.index.find_mut(hash, |r| r.member() == m) {
            Some(slot) => {
                let old = slot.score();
                let Some(score) = f(Some(old))? else { return Ok(None) };
                if old.to_bits() != score.to_bits() {
                    self.order.remove(&Ranked::of(slot));
                    // The index holds the only reference now: the score changes in place
                    // (no new allocation), unless a reader elsewhere still shares the record.
                    match Arc::get_mut(&mut slot.0) {
                        Some(bytes) => bytes[..8].copy_from_slice(&score.to_le_bytes()),
                        None => *slot = Rec::new(m, score),
                    }
                    self.order.insert(Ranked::of(slot));
                }
                Ok(Some((Some(old), score)))
            }
            None => {
                let Some(score) = f(None)? else { return Ok(None) };
                let rec = Rec::new(m, score);
                self.bytes += Tree::record_size(m);
                self.order.insert(Ranked::of(&rec));
                let hasher = &self.hasher;
                self.index.insert_unique(hash, rec, |r| hasher.hash_one(r.member()));
                Ok(Some((None, score)))
            }
        }
    }

    fn record_size(m: &[u8]) -> usize {
        alloc_size(2 * 8 + 8 + m.len())
    }
}

/// Per member besides its record and its slot in the ordered index: an index bucket (pointer,
/// length, control byte).
const INDEX_BUCKET: usize = 17;
const PACK_ITEM: usize = 24;

impl Default for ZSet {
    fn default() -> Self {
        ZSet::Pack(Vec::new())
    }
}

/// The next representable double above `x` (x finite or -inf).
fn next_up(x: f64) -> f64 {
    if x == 0.0 {
        return f64::from_bits(1);
    }
    let bits = x.to_bits();
    f64::from_bits(if x > 0.0 { bits + 1 } else { bits - 1 })
}

fn key_order(a: (&[u8], f64), b: (&[u8], f64)) -> Ordering {
    Score(a.1).cmp(&Score(b.1)).then_with(|| a.0.cmp(b.0))
}

impl ZSet {
    pub fn len(&self) -> usize {
        match self {
            ZSet::Pack(v) => v.len(),
            ZSet::Tree(t) => t.index.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            ZSet::Pack(_) => "listpack",
            ZSet::Tree(_) => "skiplist",
        }
    }

    pub fn score(&self, m: &[u8]) -> Option<f64> {
        match self {
            ZSet::Pack(v) => v.iter().find(|(x, _)| &**x == m).map(|(_, s)| *s),
            ZSet::Tree(t) => t.find(m).map(Rec::score),
        }
    }

    /// Members in ascending (score, member) order; reverse it for descending.
    pub fn iter(&self) -> Box<dyn DoubleEndedIterator<Item = (&[u8], f64)> + '_> {
        match self {
            ZSet::Pack(v) => Box::new(v.iter().map(|(m, s)| (&**m, *s))),
            ZSet::Tree(t) => Box::new(t.order.iter().map(|r| (r.1.member(), r.0))),
        }
    }

    /// Members with `min <= score <= max` (bounds as given), ascending.
    pub fn score_range(
        &self,
        min: Bound<f64>,
        max: Bound<f64>,
    ) -> Box<dyn DoubleEndedIterator<Item = (&[u8], f64)> + '_> {
        match self {
            ZSet::Pack(_) => Box::new(self.iter().filter(move |&(_, s)| {
                let above = match min {
                    Bound::Included(x) => s >= x,
                    Bound::Excluded(x) => s > x,
                    Bound::Unbounded => true,
                };
                above
                    && match max {
                        Bound::Included(x) => s <= x,
                        Bound::Excluded(x) => s < x,
                        Bound::Unbounded => true,
                    }
            })),
            ZSet::Tree(t) => {
                // Tree bounds: the empty member sorts first among equal scores, so
                // (next score up, "") lies just past every member of a score.
                let at = |x: f64| Ranked(x, Rec::new(b"", x));
                // As ranks: the first member at or past the lower bound, and the first past the
                // upper one.
                let lower = match min {
                    Bound::Included(x) => t.order.rank(&at(x)),
                    Bound::Excluded(x) if x == f64::INFINITY => return Box::new(std::iter::empty()),
                    Bound::Excluded(x) => t.order.rank(&at(next_up(x))),
                    Bound::Unbounded => 0,
                };
                let upper = match max {
                    Bound::Included(x) if x == f64::INFINITY => t.order.len(),
                    Bound::Included(x) => t.order.rank(&at(next_up(x))),
                    Bound::Excluded(x) => t.order.rank(&at(x)),
                    Bound::Unbounded => t.order.len(),
                };
                Box::new(t.order.range(lower, upper).map(|r| (r.1.member(), r.0)))
            }
        }
    }

    /// 0-based rank of `m` in ascending order.
    pub fn rank(&self, m: &[u8]) -> Option<usize> {
        match self {
            ZSet::Pack(v) => v.iter().position(|(x, _)| &**x == m),
            ZSet::Tree(t) => Some(t.order.rank(&Ranked::of(t.find(m)?))),
        }
    }

    /// Members of ascending rank `a..b` (clamped); `.rev()` walks them from `b` down.
    pub fn by_rank(&self, a: usize, b: usize) -> Box<dyn DoubleEndedIterator<Item = (&[u8], f64)> + '_> {
        match self {
            ZSet::Pack(v) => {
                let b = b.min(v.len());
                Box::new(v[a.min(b)..b].iter().map(|(m, s)| (&**m, *s)))
            }
            ZSet::Tree(t) => Box::new(t.order.range(a, b).map(|r| (r.1.member(), r.0))),
        }
    }

    /// Adds or updates `m`; returns whether it was new.
    pub fn insert(&mut self, m: &[u8], score: f64, limits: &Limits) -> bool {
        let set = self.upsert(m, limits, |_| Ok::<_, std::convert::Infallible>(Some(score)));
        matches!(set, Ok(Some((None, _))))
    }

    /// Looks `m` up once and gives it the score `f(its current score)` (`None` from `f`: leave it
    /// as it is). Returns the old score (`None`: `m` was added) and the new one, or `None` if
    /// nothing was written. One lookup for ZADD and ZINCRBY's read-modify-write, where a score
    /// query then an insert would look the member up twice.
    pub fn upsert<E>(
        &mut self,
        m: &[u8],
        limits: &Limits,
        f: impl FnOnce(Option<f64>) -> Result<Option<f64>, E>,
    ) -> Result<Option<(Option<f64>, f64)>, E> {
        // Redis's listpack keeps an integral score as an integer, so -0 comes back as 0.
        let normal = |s: f64| if s == 0.0 { 0.0 } else { s };
        let (old, score) = match self {
            ZSet::Pack(v) => {
                let existing = v.iter().position(|(x, _)| &**x == m);
                let old = existing.map(|i| v[i].1);
                let Some(score) = f(old)?.map(normal) else { return Ok(None) };
                if m.len() <= limits.zset_max_listpack_value {
                    if let Some(i) = existing {
                        v.remove(i);
                    }
                    let at = v.partition_point(|(x, s)| key_order((x, *s), (m, score)) == Ordering::Less);
                    v.insert(at, (m.into(), score));
                    if v.len() > limits.zset_max_listpack_entries {
                        self.convert();
                    }
                    return Ok(Some((old, score)));
                }
                // A member too long for the listpack: the set becomes a tree, then takes it.
                self.convert();
                (old, score)
            }
            ZSet::Tree(t) => return t.upsert(m, |old| Ok(f(old)?.map(normal))),
        };
        let ZSet::Tree(t) = self else { unreachable!("converted above") };
        t.upsert(m, |_| Ok::<_, E>(Some(score)))?;
        Ok(Some((old, score)))
    }

    pub fn remove(&mut self, m: &[u8]) -> bool {
        match self {
            ZSet::Pack(v) => match v.iter().position(|(x, _)| &**x == m) {
                Some(i) => {
                    v.remove(i);
                    true
                }
                None => false,
            },
            ZSet::Tree(t) => match t.unindex(m) {
                Some(rec) => {
                    t.order.remove(&Ranked::of(&rec));
                    true
                }
                None => false,
            },
        }
    }

    /// Removes and returns the lowest (or highest) member.
    pub fn pop(&mut self, max: bool) -> Option<(Vec<u8>, f64)> {
        match self {
            ZSet::Pack(v) if v.is_empty() => None,
            ZSet::Pack(v) => {
                let (m, s) = if max { v.pop()? } else { v.remove(0) };
                Some((m.into_vec(), s))
            }
            ZSet::Tree(t) => {
                let Ranked(score, rec) = if max { t.order.pop_last() } else { t.order.pop_first() }?;
                t.unindex(rec.member());
                Some((rec.member().to_vec(), score))
            }
        }
    }

    fn convert(&mut self) {
        let ZSet::Pack(v) = self else { return };
        let mut t = ZSet::Tree(Box::default());
        for (m, s) in v.drain(..) {
            t.insert(&m, s, &Limits::ALWAYS_TABLE);
        }
        *self = t;
    }

    pub fn mem(&self) -> usize {
        match self {
            ZSet::Pack(v) => {
                v.capacity() * PACK_ITEM + v.iter().map(|(m, _)| alloc_size(m.len())).sum::<usize>()
            }
            ZSet::Tree(t) => {
                std::mem::size_of::<Tree>() + t.bytes + t.index.capacity() * INDEX_BUCKET + t.order.mem()
            }
        }
    }

    /// Serialized as member, score (8 bytes, little-endian IEEE) pairs, ascending.
    pub fn serialize(&self, out: &mut Vec<u8>) {
        for (m, s) in self.iter() {
            super::pack::put(out, m);
            super::pack::put(out, &s.to_le_bytes());
        }
    }

    pub fn from_pairs<'a>(mut items: impl Iterator<Item = &'a [u8]>, limits: &Limits) -> Option<ZSet> {
        let mut z = ZSet::default();
        while let Some(m) = items.next() {
            let s = f64::from_le_bytes(items.next()?.try_into().ok()?);
            if s.is_nan() {
                return None;
            }
            z.insert(m, s, limits);
        }
        Some(z)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_big_tree_answers_ranks_and_ranges_like_the_vector() {
        let flat = Limits {
            zset_max_listpack_entries: usize::MAX,
            zset_max_listpack_value: usize::MAX,
            ..Limits::default()
        };
        let (mut tree, mut vec) = (ZSet::Tree(Box::default()), ZSet::default());
        let mut seed = 5u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as usize
        };
        for step in 0..6000 {
            let r = next();
            // Few distinct scores, so ties (ordered by member) cross block edges.
            let (m, score) = (format!("m{}", r % 3000), (r % 40) as f64 - 20.0);
            if step % 5 == 4 {
                assert_eq!(tree.remove(m.as_bytes()), vec.remove(m.as_bytes()));
            } else {
                assert_eq!(tree.insert(m.as_bytes(), score, &flat), vec.insert(m.as_bytes(), score, &flat));
            }
        }
        assert_eq!((tree.encoding(), vec.encoding()), ("skiplist", "listpack"));
        assert!(tree.len() > 1000);
        let n = tree.len();
        for _ in 0..300 {
            let m = format!("m{}", next() % 3000);
            assert_eq!(tree.rank(m.as_bytes()), vec.rank(m.as_bytes()), "rank of {m}");
            let (a, b) = (next() % (n + 5), next() % (n + 5));
            assert!(tree.by_rank(a, b).eq(vec.by_rank(a, b)), "ranks {a}..{b}");
            assert!(tree.by_rank(a, b).rev().eq(vec.by_rank(a, b).rev()));
            let bound = |x: usize| match x % 3 {
                0 => Bound::Included((x % 44) as f64 - 22.0),
                1 => Bound::Excluded((x % 44) as f64 - 22.0),
                _ => Bound::Unbounded,
            };
            let (lo, hi) = (bound(next()), bound(next()));
            assert!(tree.score_range(lo, hi).eq(vec.score_range(lo, hi)), "{lo:?}..{hi:?}");
            assert!(tree.score_range(lo, hi).rev().eq(vec.score_range(lo, hi).rev()));
        }
        for max in [true, false, true] {
            assert_eq!(tree.pop(max), vec.pop(max));
        }
        assert!(tree.iter().eq(vec.iter()));
    }

    #[test]
    fn both_encodings_order_and_rank_alike() {
        let limits = Limits::default();
        let mut small = ZSet::default();
        let mut big = ZSet::Tree(Box::default());
        for (i, m) in ["c", "a", "b", "d"].iter().enumerate() {
            let s = if i == 3 { 1.0 } else { 2.0 };
            small.insert(m.as_bytes(), s, &limits);
            big.insert(m.as_bytes(), s, &limits);
        }
        for z in [&small, &big] {
            let order: Vec<&[u8]> = z.iter().map(|(m, _)| m).collect();
            assert_eq!(order, vec![&b"d"[..], b"a", b"b", b"c"], "{}", z.encoding());
            assert_eq!(z.rank(b"b"), Some(2));
            let r: Vec<&[u8]> =
                z.score_range(Bound::Excluded(1.0), Bound::Included(2.0)).map(|(m, _)| m).collect();
            assert_eq!(r, vec![&b"a"[..], b"b", b"c"]);
        }
        big.insert(b"a", -5.0, &limits);
        assert_eq!(big.rank(b"a"), Some(0));
        assert_eq!(big.pop(true), Some((b"c".to_vec(), 2.0)));
        assert_eq!(big.len(), 3);
    }
}
