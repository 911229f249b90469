//! Lists: a deque of chunks, each a run of elements packed end to end (Redis's quicklist of
//! listpacks, and `OBJECT ENCODING` says "quicklist" as Redis 7.0 does). Packing is what makes a
//! list of short strings cost a dozen bytes per element instead of an allocation each.
//!
//! In a chunk every element is `[length][bytes][length backwards]`: the leading LEB128 length
//! lets a reader walk forwards, the trailing one (the same groups in reverse order) backwards, so
//! both ends pop in O(1). A chunk keeps free room before its first element (`start`), which makes
//! LPUSH and LPOP O(1) as well; RPUSH and RPOP work at the `Vec`'s end. A chunk holds at most
//! what `list-max-listpack-size` allows (`fill`: a count, or -1..-5 for 4..64 KiB) unless one
//! element alone is larger. Indexing walks chunk counts from the nearer end, then elements.

use std::collections::VecDeque;

/// One chunk: elements packed in `buf[start..]`.
#[derive(Debug, Clone, Default)]
struct Chunk {
    buf: Vec<u8>,
    start: usize,
    count: usize,
}

/// Bytes a chunk's header costs inside the deque.
const CHUNK: usize = std::mem::size_of::<Chunk>();

/// A chunk's count limit for a positive fill also stops at these bytes (Redis's safety limit).
const SAFETY_BYTES: usize = 8192;

fn varint_len(n: usize) -> usize {
    let bits = usize::BITS - n.leading_zeros();
    (bits.max(1) as usize).div_ceil(7)
}

/// The packed size of element `v`.
fn packed_len(v: &[u8]) -> usize {
    2 * varint_len(v.len()) + v.len()
}

/// Writes element `v` packed into `out` (exactly `packed_len(v)` bytes).
fn write_packed(out: &mut [u8], v: &[u8]) {
    let n = varint_len(v.len());
    let mut len = v.len();
    for i in 0..n {
        let more = if i + 1 < n { 0x80 } else { 0 };
        let group = (len & 0x7f) as u8;
        out[i] = group | more;
        // The backward length: the same groups, the first one last.
        out[out.len() - 1 - i] = group | more;
        len >>= 7;
    }
    out[n..n + v.len()].copy_from_slice(v);
}

/// The element starting at `at` in well-formed chunk bytes, and where the next one starts.
fn read_forward(buf: &[u8], at: usize) -> (&[u8], usize) {
    let (len, i) = super::pack::read_len(buf, at);
    let n = i - at;
    (&buf[i..i + len], i + len + n)
}

/// The element ending at `end` in well-formed chunk bytes, and where it starts.
fn read_backward(buf: &[u8], end: usize) -> (&[u8], usize) {
    let (mut len, mut shift, mut i) = (0usize, 0, end);
    loop {
        i -= 1;
        let b = buf[i];
        len |= usize::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            break;
        }
    }
    let n = end - i;
    let data = i - len;
    (&buf[data..i], data - n)
}

impl Chunk {
    fn used(&self) -> usize {
        self.buf.len() - self.start
    }

    /// A chunk for pushes at the front: all its room is before the (future) first element.
    fn for_front(room: usize) -> Chunk {
        Chunk { buf: vec![0; room], start: room, count: 0 }
    }

    fn push_back(&mut self, v: &[u8]) {
        let at = self.buf.len();
        self.buf.resize(at + packed_len(v), 0);
        write_packed(&mut self.buf[at..], v);
        self.count += 1;
    }

    fn push_front(&mut self, v: &[u8]) {
        let need = packed_len(v);
        if self.start < need {
            // Make room before the elements: what is needed plus half the contents again, so a
            // run of LPUSHes moves the bytes a logarithmic number of times.
            let room = need + self.used() / 2;
            let mut buf = Vec::with_capacity(room + self.used());
            buf.resize(room, 0);
            buf.extend_from_slice(&self.buf[self.start..]);
            self.buf = buf;
            self.start = room;
        }
        self.start -= need;
        write_packed(&mut self.buf[self.start..self.start + need], v);
        self.count += 1;
    }

    fn pop_front(&mut self) -> Box<[u8]> {
        let (v, next) = read_forward(&self.buf, self.start);
        let v = v.into();
        self.start = next;
        self.count -= 1;
        if self.start > 1024 && self.start > self.used() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        v
    }

    fn pop_back(&mut self) -> Box<[u8]> {
        let (v, at) = read_backward(&self.buf, self.buf.len());
        let v = v.into();
        self.buf.truncate(at);
        self.count -= 1;
        v
    }

    fn iter(&self) -> ChunkIter<'_> {
        ChunkIter { buf: &self.buf, front: self.start, back: self.buf.len(), left: self.count }
    }

    /// Byte span `(start, end)` of element `i`.
    fn span(&self, i: usize) -> (usize, usize) {
        if i < self.count / 2 {
            let mut at = self.start;
            for _ in 0..i {
                at = read_forward(&self.buf, at).1;
            }
            (at, read_forward(&self.buf, at).1)
        } else {
            let mut end = self.buf.len();
            for _ in 0..self.count - 1 - i {
                end = read_backward(&self.buf, end).1;
            }
            (read_backward(&self.buf, end).1, end)
        }
    }

    fn get(&self, i: usize) -> &[u8] {
        let (a, _) = self.span(i);
        read_forward(&self.buf, a).0
    }

    /// Replaces elements `i..i + remove` with `with` (positions inside the chunk).
    fn splice(&mut self, i: usize, remove: usize, with: &[&[u8]]) {
        let a = if i == self.count { self.buf.len() } else { self.span(i).0 };
        let mut b = a;
        for _ in 0..remove {
            b = read_forward(&self.buf, b).1;
        }
        let mut new = vec![0u8; with.iter().map(|v| packed_len(v)).sum()];
        let mut at = 0;
        for v in with {
            let n = packed_len(v);
            write_packed(&mut new[at..at + n], v);
            at += n;
        }
        self.buf.splice(a..b, new);
        self.count = self.count - remove + with.len();
    }

    /// Splits off the elements from position `i` on into a new chunk.
    fn split_off(&mut self, i: usize) -> Chunk {
        let at = if i == self.count { self.buf.len() } else { self.span(i).0 };
        let tail = Chunk { buf: self.buf[at..].to_vec(), start: 0, count: self.count - i };
        self.buf.truncate(at);
        self.buf.shrink_to_fit();
        self.count = i;
        tail
    }

    fn mem(&self) -> usize {
        self.buf.capacity()
    }
}

/// Walks one chunk's elements from either end.
#[derive(Debug, Clone)]
struct ChunkIter<'a> {
    buf: &'a [u8],
    front: usize,
    back: usize,
    left: usize,
}

impl<'a> Iterator for ChunkIter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let (v, next) = read_forward(self.buf, self.front);
        self.front = next;
        Some(v)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl DoubleEndedIterator for ChunkIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let (v, at) = read_backward(self.buf, self.back);
        self.back = at;
        Some(v)
    }
}

#[derive(Debug, Clone)]
pub struct List {
    chunks: VecDeque<Chunk>,
    len: usize,
    /// Heap bytes of the chunks' buffers, kept as they change (`mem()` is asked after every write).
    heap: usize,
    /// `list-max-listpack-size` as of the last write (commands set it from the node's limits).
    pub fill: i64,
}

impl Default for List {
    fn default() -> Self {
        List { chunks: VecDeque::new(), len: 0, heap: 0, fill: -2 }
    }
}

impl List {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn encoding(&self) -> &'static str {
        "quicklist"
    }

    /// Its chunks (Redis's quicklist nodes) and their packed bytes, for DEBUG OBJECT.
    pub fn chunk_stats(&self) -> (usize, usize) {
        (self.chunks.len(), self.chunks.iter().map(Chunk::used).sum())
    }

    /// The byte budget of one chunk and its count limit.
    fn budget(&self) -> (usize, usize) {
        match self.fill {
            f if f > 0 => (SAFETY_BYTES, f as usize),
            f => (4096 << (f.unsigned_abs().clamp(1, 5) - 1), usize::MAX),
        }
    }

    /// Whether `chunk` can take `more` packed bytes as one more element.
    fn fits(&self, chunk: &Chunk, more: usize) -> bool {
        let (bytes, count) = self.budget();
        chunk.count < count && chunk.used() + more <= bytes
    }

    pub fn push(&mut self, v: &[u8], front: bool) {
        let need = packed_len(v);
        let end = if front { self.chunks.front() } else { self.chunks.back() };
        if !end.is_some_and(|c| self.fits(c, need)) {
            // A new chunk at a list's end that already has full chunks gets a byte budget's
            // room at once (it will fill up); a list's first chunk, and chunks under a count
            // limit, grow with their contents.
            let room = if self.chunks.is_empty() || self.fill > 0 { 0 } else { self.budget().0 };
            if front {
                self.add_chunk(0, Chunk::for_front(room.max(need)));
            } else {
                self.add_chunk(
                    self.chunks.len(),
                    Chunk { buf: Vec::with_capacity(room), start: 0, count: 0 },
                );
            }
        }
        if front {
            self.touch(0, |c| c.push_front(v));
        } else {
            self.touch(self.chunks.len() - 1, |c| c.push_back(v));
        }
        self.len += 1;
    }

    /// Runs `f` on chunk `c`, keeping the heap count right.
    fn touch<R>(&mut self, c: usize, f: impl FnOnce(&mut Chunk) -> R) -> R {
        let chunk = &mut self.chunks[c];
        let before = chunk.mem();
        let r = f(chunk);
        self.heap = self.heap + chunk.mem() - before;
        r
    }

    fn add_chunk(&mut self, at: usize, chunk: Chunk) {
        self.heap += chunk.mem();
        self.chunks.insert(at, chunk);
    }

    fn drop_chunk(&mut self, at: usize) {
        if let Some(gone) = self.chunks.remove(at) {
            self.heap -= gone.mem();
        }
    }

    pub fn pop(&mut self, front: bool) -> Option<Box<[u8]>> {
        let c = if front { 0 } else { self.chunks.len().checked_sub(1)? };
        let v = self.touch(c, |chunk| if front { chunk.pop_front() } else { chunk.pop_back() });
        if self.chunks[c].count == 0 {
            self.drop_chunk(c);
            self.shrink();
        }
        self.len -= 1;
        Some(v)
    }

    /// The chunk holding element `i` and `i`'s position in it, walking from the nearer end.
    fn locate(&self, i: usize) -> (usize, usize) {
        if i < self.len / 2 {
            let mut i = i;
            for (c, chunk) in self.chunks.iter().enumerate() {
                if i < chunk.count {
                    return (c, i);
                }
                i -= chunk.count;
            }
        } else {
            let mut from_end = self.len - 1 - i;
            for (c, chunk) in self.chunks.iter().enumerate().rev() {
                if from_end < chunk.count {
                    return (c, chunk.count - 1 - from_end);
                }
                from_end -= chunk.count;
            }
        }
        unreachable!("index {i} checked against the length {}", self.len)
    }

    /// Element `i` (which must be inside the list).
    pub fn get(&self, i: usize) -> &[u8] {
        let (c, at) = self.locate(i);
        self.chunks[c].get(at)
    }

    /// Elements from the head (`DoubleEndedIterator`: `.rev()` walks from the tail).
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &[u8]> + '_ {
        self.chunks.iter().flat_map(Chunk::iter)
    }

    /// Elements `a..=b` (inside the list), reaching `a` chunk by chunk.
    pub fn range(&self, a: usize, b: usize) -> impl Iterator<Item = &[u8]> + '_ {
        let (c, at) = self.locate(a);
        self.chunks.range(c..).flat_map(Chunk::iter).skip(at).take(b + 1 - a)
    }

    /// Inserts `v` so that it becomes element `at` (`at == len` appends).
    pub fn insert(&mut self, at: usize, v: &[u8]) {
        if at == 0 || at == self.len {
            return self.push(v, at == 0);
        }
        let (c, i) = self.locate(at);
        self.touch(c, |chunk| chunk.splice(i, 0, &[v]));
        self.len += 1;
        self.split_if_over(c);
    }

    /// Removes element `at`.
    pub fn remove(&mut self, at: usize) -> Option<Box<[u8]>> {
        if at >= self.len {
            return None;
        }
        let (c, i) = self.locate(at);
        let v = self.touch(c, |chunk| {
            let v: Box<[u8]> = chunk.get(i).into();
            chunk.splice(i, 1, &[]);
            v
        });
        self.len -= 1;
        if self.chunks[c].count == 0 {
            self.drop_chunk(c);
        }
        Some(v)
    }

    /// Replaces element `at` (inside the list).
    pub fn set(&mut self, at: usize, v: &[u8]) {
        let (c, i) = self.locate(at);
        self.touch(c, |chunk| chunk.splice(i, 1, &[v]));
        self.split_if_over(c);
    }

    /// Splits chunk `c` in halves while it holds more than its budget (and more than one element).
    fn split_if_over(&mut self, c: usize) {
        let (bytes, count) = self.budget();
        let chunk = &self.chunks[c];
        if chunk.count > 1 && (chunk.used() > bytes || chunk.count > count) {
            let tail = self.touch(c, |chunk| chunk.split_off(chunk.count / 2));
            self.add_chunk(c + 1, tail);
            self.split_if_over(c + 1);
            self.split_if_over(c);
        }
    }

    /// Keeps elements `start..end` only.
    pub fn keep(&mut self, start: usize, end: usize) {
        let end = end.min(self.len);
        let start = start.min(end);
        while self.len > end {
            // Whole chunks go at once; the boundary chunk loses elements one by one.
            match self.chunks.back() {
                Some(c) if self.len - c.count >= end => {
                    self.len -= c.count;
                    self.drop_chunk(self.chunks.len() - 1);
                }
                _ => {
                    self.pop(false);
                }
            }
        }
        let mut drop = start;
        while drop > 0 {
            match self.chunks.front() {
                Some(c) if c.count <= drop => {
                    drop -= c.count;
                    self.len -= c.count;
                    self.drop_chunk(0);
                }
                _ => {
                    self.pop(true);
                    drop -= 1;
                }
            }
        }
        self.shrink();
    }

    /// Removes elements for which `f` says so, in order; stops after `limit` removals. Chunks are
    /// rebuilt from the kept elements (merging neighbours that fit one budget).
    pub fn retain_count(&mut self, limit: usize, from_back: bool, mut f: impl FnMut(&[u8]) -> bool) -> usize {
        let mut drop = vec![false; self.len];
        let mut removed = 0;
        let mut mark = |i: usize, v: &[u8], removed: &mut usize| {
            if *removed < limit && f(v) {
                drop[i] = true;
                *removed += 1;
            }
        };
        if from_back {
            for (k, v) in self.iter().rev().enumerate() {
                mark(self.len - 1 - k, v, &mut removed);
            }
        } else {
            for (i, v) in self.iter().enumerate() {
                mark(i, v, &mut removed);
            }
        }
        if removed > 0 {
            let mut kept = List { fill: self.fill, ..List::default() };
            for (v, gone) in self.iter().zip(drop) {
                if !gone {
                    kept.push(v, false);
                }
            }
            *self = kept;
        }
        removed
    }

    fn shrink(&mut self) {
        if self.chunks.capacity() > 16 && self.chunks.len() < self.chunks.capacity() / 4 {
            self.chunks.shrink_to(self.chunks.len() * 2);
        }
    }

    pub fn from_items<'a>(items: impl Iterator<Item = &'a [u8]>, fill: i64) -> List {
        let mut l = List { fill, ..List::default() };
        for v in items {
            l.push(v, false);
        }
        l
    }

    pub fn mem(&self) -> usize {
        self.heap + self.chunks.capacity() * CHUNK
    }

    pub fn serialize(&self, out: &mut Vec<u8>) {
        for v in self.iter() {
            super::pack::put(out, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(l: &List) -> Vec<Vec<u8>> {
        l.iter().map(<[u8]>::to_vec).collect()
    }

    #[test]
    fn packed_lengths_read_both_ways() {
        for n in [0usize, 1, 127, 128, 300, 16_383, 16_384, 70_000] {
            let v = vec![b'x'; n];
            let mut buf = vec![0u8; packed_len(&v)];
            write_packed(&mut buf, &v);
            assert_eq!(read_forward(&buf, 0), (&v[..], buf.len()), "forward, {n} bytes");
            assert_eq!(read_backward(&buf, buf.len()), (&v[..], 0), "backward, {n} bytes");
        }
    }

    #[test]
    fn a_model_deque_agrees_under_every_fill() {
        for fill in [1, 2, 3, 5, -1, -2] {
            let mut l = List { fill, ..List::default() };
            let mut m: VecDeque<Vec<u8>> = VecDeque::new();
            let mut seed = 7u64;
            for step in 0..3000 {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let r = (seed >> 33) as usize;
                let v = vec![b'a' + (step % 26) as u8; r % 300];
                match r % 9 {
                    0 | 1 => {
                        l.push(&v, true);
                        m.push_front(v);
                    }
                    2 | 3 => {
                        l.push(&v, false);
                        m.push_back(v);
                    }
                    4 => assert_eq!(
                        l.pop(r.is_multiple_of(2)).map(|b| b.to_vec()),
                        if r.is_multiple_of(2) { m.pop_front() } else { m.pop_back() }
                    ),
                    5 if !m.is_empty() => {
                        let at = r % (m.len() + 1);
                        l.insert(at, &v);
                        m.insert(at, v);
                    }
                    6 if !m.is_empty() => {
                        let at = r % m.len();
                        assert_eq!(l.remove(at).map(|b| b.to_vec()), m.remove(at));
                    }
                    7 if !m.is_empty() => {
                        let at = r % m.len();
                        l.set(at, &v);
                        m[at] = v;
                    }
                    8 if m.len() > 10 => {
                        let (a, b) = (r % 5, m.len() - (r >> 4) % 5);
                        l.keep(a, b);
                        m = m.into_iter().skip(a).take(b - a).collect();
                    }
                    _ => {}
                }
                assert_eq!(l.len(), m.len(), "fill {fill}, step {step}");
                assert_eq!(
                    l.heap,
                    l.chunks.iter().map(Chunk::mem).sum::<usize>(),
                    "fill {fill}, step {step}"
                );
                if step % 97 == 0 || m.len() < 5 {
                    assert_eq!(contents(&l), Vec::from(m.clone()), "fill {fill}, step {step}");
                    let back: Vec<Vec<u8>> = l.iter().rev().map(<[u8]>::to_vec).collect();
                    assert_eq!(back, m.iter().rev().cloned().collect::<Vec<_>>());
                    if !m.is_empty() {
                        let i = r % m.len();
                        assert_eq!(l.get(i), &m[i][..]);
                        let j = (i + r % 7).min(m.len() - 1);
                        let got: Vec<&[u8]> = l.range(i, j).collect();
                        let want: Vec<&[u8]> = m.range(i..=j).map(|v| &v[..]).collect();
                        assert_eq!(got, want);
                    }
                }
            }
            let (bytes, count) = l.budget();
            for c in &l.chunks {
                assert!(c.count >= 1 && c.count <= count, "fill {fill}: a chunk of {} elements", c.count);
                assert!(c.count == 1 || c.used() <= bytes, "fill {fill}: a chunk of {} bytes", c.used());
            }
        }
    }

    #[test]
    fn lrem_rebuilds_and_short_strings_pack_tightly() {
        let mut l = List::default();
        for i in 0..100_000 {
            l.push(format!("v{:08}", i % 10).as_bytes(), false);
        }
        assert!(l.mem() < 100_000 * 13, "about 11 bytes per 9-byte element, got {}", l.mem());
        assert_eq!(l.retain_count(3, true, |v| v == b"v00000004"), 3);
        assert_eq!(l.len(), 99_997);
        // The fourth from the tail was 35 from it; three elements before it went.
        assert_eq!(l.iter().rev().position(|v| v == b"v00000004"), Some(32));
        assert_eq!(l.retain_count(usize::MAX, false, |v| v != b"v00000001"), 99_997 - 10_000);
        assert!(l.iter().all(|v| v == b"v00000001"));
    }
}
