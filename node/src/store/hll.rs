//! Redis's HyperLogLog, byte for byte: a string starting with the 16-byte header
//! `"HYLL" encoding 0 0 0 card[8]`, then 16384 six-bit registers, either dense (12288 bytes,
//! little-endian bit packing) or sparse (ZERO / XZERO / VAL run-length opcodes, promoted to dense
//! past `hll-sparse-max-bytes`). `card` caches the last count, little endian, with bit 7 of its
//! last byte set when stale.
//!
//! The layout, the hash (MurmurHash64A, seed 0xadc83b19), the sparse edits (which opcodes a
//! register update produces and which neighbours merge) and the estimator (Ertl's improved
//! estimator, as in Redis 7) follow redis-server 7.0 exactly, because clients see the value with
//! GET and may move it between Shoal and Redis with DUMP/RESTORE or plain SET.

/// Header bytes before the registers.
pub const HDR: usize = 16;
/// Number of registers (2^14).
pub const REGISTERS: usize = 1 << P;
/// Length of a dense HLL.
pub const DENSE_SIZE: usize = HDR + (REGISTERS * BITS).div_ceil(8);
/// Redis's `hll-sparse-max-bytes` default: a sparse HLL that would grow past it turns dense.
pub const SPARSE_MAX_BYTES: usize = 3000;

const P: usize = 14;
const Q: usize = 64 - P;
const BITS: usize = 6;
const REGISTER_MAX: u8 = (1 << BITS) - 1;
const DENSE: u8 = 0;
const SPARSE: u8 = 1;
/// Largest value and run a sparse VAL opcode holds; larger registers force the dense form.
const VAL_MAX_VALUE: u8 = 32;
const VAL_MAX_LEN: usize = 4;
const ZERO_MAX_LEN: usize = 64;
const XZERO_MAX_LEN: usize = 16384;
const SEED: u64 = 0xadc8_3b19;
/// 1 / (2 ln 2): the estimator's constant for m → ∞.
const ALPHA_INF: f64 = 0.721_347_520_444_481_7;

/// The value is corrupted (a sparse encoding that does not cover exactly 16384 registers):
/// Redis's `INVALIDOBJ`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt;

/// A sparse opcode, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// `00xxxxxx`: 1..=64 zero registers.
    Zero(usize),
    /// `01xxxxxx yyyyyyyy`: 1..=16384 zero registers.
    XZero(usize),
    /// `1vvvvvxx`: 1..=4 registers of value 1..=32.
    Val(u8, usize),
}

impl Op {
    /// Decodes the opcode at `b[p]`. An XZERO cut off by the end of the value reads its second
    /// byte as 0, as Redis does (it reads the string's NUL terminator).
    fn at(b: &[u8], p: usize) -> Op {
        let op = b[p];
        if op & 0xc0 == 0 {
            Op::Zero(usize::from(op & 0x3f) + 1)
        } else if op & 0x80 != 0 {
            Op::Val(((op >> 2) & 0x1f) + 1, usize::from(op & 0x3) + 1)
        } else {
            let lo = b.get(p + 1).copied().unwrap_or(0);
            Op::XZero(((usize::from(op & 0x3f) << 8) | usize::from(lo)) + 1)
        }
    }

    fn span(self) -> usize {
        match self {
            Op::Zero(n) | Op::XZero(n) | Op::Val(_, n) => n,
        }
    }

    fn bytes(self) -> usize {
        if matches!(self, Op::XZero(_)) { 2 } else { 1 }
    }
}

fn val_op(v: u8, len: usize) -> u8 {
    0x80 | ((v - 1) << 2) | (len as u8 - 1)
}

/// Appends the shortest zero run opcode for `len` registers (ZERO up to 64, else XZERO).
fn push_zeros(seq: &mut Vec<u8>, len: usize) {
    if len > ZERO_MAX_LEN {
        let l = len - 1;
        seq.push(0x40 | (l >> 8) as u8);
        seq.push((l & 0xff) as u8);
    } else {
        seq.push(len as u8 - 1);
    }
}

/// MurmurHash64A as Redis uses it (little-endian word reads).
pub fn murmur64a(data: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (data.len() as u64).wrapping_mul(M);
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let mut k = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate() {
            h ^= u64::from(b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register an element lands in and the value it proposes: the position of the first 1 bit
/// in the hash's remaining 50 bits, counting from 1 (at most 51).
pub fn pat_len(ele: &[u8]) -> (usize, u8) {
    let hash = murmur64a(ele, SEED);
    let index = (hash as usize) & (REGISTERS - 1);
    // The forced bit keeps the count within Q + 1.
    let rest = (hash >> P) | (1 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

/// Whether `b` is a value the PF commands accept (Redis's `isHLLObjectOrReply`): long enough
/// for the header, the magic, a known encoding, and the exact length if dense.
pub fn is_hll(b: &[u8]) -> bool {
    b.len() >= HDR && &b[..4] == b"HYLL" && b[4] <= SPARSE && (b[4] != DENSE || b.len() == DENSE_SIZE)
}

/// Stores `card` as the valid cached count of the HLL `b` (PFCOUNT writes it back in place).
pub fn set_cached(b: &mut [u8], card: u64) {
    b[8..HDR].copy_from_slice(&card.to_le_bytes());
}

fn dense_get(regs: &[u8], i: usize) -> u8 {
    let byte = i * BITS / 8;
    let fb = (i * BITS) & 7;
    let b0 = u16::from(regs[byte]);
    // The last register's spill byte lies past the registers: Redis reads its zero terminator.
    let b1 = u16::from(regs.get(byte + 1).copied().unwrap_or(0));
    (((b0 >> fb) | (b1 << (8 - fb))) as u8) & REGISTER_MAX
}

fn dense_set(regs: &mut [u8], i: usize, v: u8) {
    let byte = i * BITS / 8;
    let fb = (i * BITS) & 7;
    let v = u16::from(v);
    let max = u16::from(REGISTER_MAX);
    regs[byte] &= !((max << fb) as u8);
    regs[byte] |= (v << fb) as u8;
    if let Some(b) = regs.get_mut(byte + 1) {
        *b &= !((max >> (8 - fb)) as u8);
        *b |= (v >> (8 - fb)) as u8;
    }
}

/// An HLL value being read or changed (its bytes checked with [`is_hll`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hll(Vec<u8>);

impl Default for Hll {
    fn default() -> Self {
        Self::new()
    }
}

impl Hll {
    /// An empty HLL as Redis creates it: sparse, XZERO runs over every register, cached count 0.
    pub fn new() -> Hll {
        let mut v = Vec::with_capacity(HDR + 2 * REGISTERS.div_ceil(XZERO_MAX_LEN));
        v.extend_from_slice(b"HYLL");
        v.push(SPARSE);
        v.resize(HDR, 0);
        let mut left = REGISTERS;
        while left > 0 {
            let n = left.min(XZERO_MAX_LEN);
            push_zeros(&mut v, n);
            left -= n;
        }
        Hll(v)
    }

    /// `b` as an HLL, if it is one (see [`is_hll`]).
    pub fn from_bytes(b: &[u8]) -> Option<Hll> {
        is_hll(b).then(|| Hll(b.to_vec()))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn is_dense(&self) -> bool {
        self.0[4] == DENSE
    }

    /// The cached count, if valid.
    pub fn cached(&self) -> Option<u64> {
        let card = u64::from_le_bytes(self.0[8..HDR].try_into().expect("8 bytes"));
        (self.0[15] & 0x80 == 0).then_some(card)
    }

    pub fn set_cached(&mut self, card: u64) {
        set_cached(&mut self.0, card);
    }

    pub fn invalidate(&mut self) {
        self.0[15] |= 0x80;
    }

    /// Adds an element; whether a register changed. The cache is not touched (PFADD invalidates
    /// it once after all elements).
    pub fn add(&mut self, ele: &[u8]) -> Result<bool, Corrupt> {
        let (index, count) = pat_len(ele);
        self.set(index, count)
    }

    /// Raises register `index` to `count` if lower; whether it changed.
    pub fn set(&mut self, index: usize, count: u8) -> Result<bool, Corrupt> {
        if self.is_dense() {
            let regs = &mut self.0[HDR..];
            if dense_get(regs, index) < count {
                dense_set(regs, index, count);
                return Ok(true);
            }
            return Ok(false);
        }
        self.sparse_set(index, count)
    }

    /// Turns a sparse HLL dense (header, cache included, kept); a dense one is left as is.
    pub fn to_dense(&mut self) -> Result<(), Corrupt> {
        if self.is_dense() {
            return Ok(());
        }
        let mut dense = vec![0u8; DENSE_SIZE];
        dense[..HDR].copy_from_slice(&self.0[..HDR]);
        dense[4] = DENSE;
        let regs = &mut dense[HDR..];
        let mut idx = 0;
        let mut p = HDR;
        while p < self.0.len() {
            let op = Op::at(&self.0, p);
            if let Op::Val(v, n) = op {
                if idx + n > REGISTERS {
                    break;
                }
                for i in idx..idx + n {
                    dense_set(regs, i, v);
                }
            }
            idx += op.span();
            p += op.bytes();
        }
        if idx != REGISTERS {
            return Err(Corrupt);
        }
        self.0 = dense;
        Ok(())
    }

    /// Raises each of `max` to this HLL's register where that is higher (Redis's `hllMerge`).
    pub fn merge_into(&self, max: &mut [u8]) -> Result<(), Corrupt> {
        let regs = &self.0[HDR..];
        if self.is_dense() {
            for (i, m) in max.iter_mut().enumerate().take(REGISTERS) {
                *m = (*m).max(dense_get(regs, i));
            }
            return Ok(());
        }
        let mut idx = 0;
        let mut p = 0;
        while p < regs.len() {
            let op = Op::at(regs, p);
            if let Op::Val(v, n) = op {
                if idx + n > REGISTERS {
                    break;
                }
                for m in &mut max[idx..idx + n] {
                    *m = (*m).max(v);
                }
            }
            idx += op.span();
            p += op.bytes();
        }
        if idx != REGISTERS { Err(Corrupt) } else { Ok(()) }
    }

    /// The estimated cardinality (ignoring the cache).
    pub fn count(&self) -> Result<u64, Corrupt> {
        let mut histo = [0u32; 64];
        let regs = &self.0[HDR..];
        if self.is_dense() {
            for i in 0..REGISTERS {
                histo[usize::from(dense_get(regs, i))] += 1;
            }
        } else {
            let mut idx = 0;
            let mut p = 0;
            while p < regs.len() {
                let op = Op::at(regs, p);
                let v = if let Op::Val(v, _) = op { usize::from(v) } else { 0 };
                histo[v] += op.span() as u32;
                idx += op.span();
                p += op.bytes();
            }
            if idx != REGISTERS {
                return Err(Corrupt);
            }
        }
        Ok(estimate(&histo))
    }

    /// Redis's `hllSparseSet`: find the opcode covering `index`, split it into up to three
    /// opcodes with the new value in the middle, merge equal neighbouring VAL opcodes, and turn
    /// dense instead when the value does not fit a VAL opcode or the string would pass
    /// [`SPARSE_MAX_BYTES`].
    fn sparse_set(&mut self, index: usize, count: u8) -> Result<bool, Corrupt> {
        if count > VAL_MAX_VALUE {
            return self.promote_set(index, count);
        }
        let b = &mut self.0;
        let mut end = b.len();
        // Step 1: the opcode covering `index`, the one before it, and the first register it covers.
        let mut p = HDR;
        let mut first = 0;
        let mut prev = None;
        let mut op = None;
        while p < end {
            let o = Op::at(b, p);
            op = Some(o);
            if index < first + o.span() {
                break;
            }
            prev = Some(p);
            p += o.bytes();
            first += o.span();
        }
        let Some(op) = op.filter(|_| p < end) else { return Err(Corrupt) };
        if p + op.bytes() > end {
            return Err(Corrupt);
        }
        let span = op.span();
        let direct = match op {
            // Step 2: nothing to do if the register is already as high; a single-register VAL
            // is rewritten in place.
            Op::Val(old, _) if old >= count => return Ok(false),
            Op::Val(_, 1) => {
                b[p] = val_op(count, 1);
                true
            }
            _ => false,
        };
        if !direct {
            // Step 3: the run becomes [before] VAL(count, 1) [after].
            let last = first + span - 1;
            let mut seq = Vec::with_capacity(5);
            match op {
                Op::Val(cur, _) => {
                    if index != first {
                        seq.push(val_op(cur, index - first));
                    }
                    seq.push(val_op(count, 1));
                    if index != last {
                        seq.push(val_op(cur, last - index));
                    }
                }
                _ => {
                    if index != first {
                        push_zeros(&mut seq, index - first);
                    }
                    seq.push(val_op(count, 1));
                    if index != last {
                        push_zeros(&mut seq, last - index);
                    }
                }
            }
            let old_len = op.bytes();
            if seq.len() > old_len && end + seq.len() - old_len > SPARSE_MAX_BYTES {
                return self.promote_set(index, count);
            }
            end = end + seq.len() - old_len;
            b.splice(p..p + old_len, seq);
        }
        // Step 4: merge equal adjacent VAL opcodes, looking at up to five opcodes from the one
        // before the change (a merge counts as one look, as in Redis).
        let mut p = prev.unwrap_or(HDR);
        let mut looks = 5;
        while p < end && looks > 0 {
            looks -= 1;
            match Op::at(b, p) {
                Op::Val(v1, n1) => {
                    if p + 1 < end
                        && let Op::Val(v2, n2) = Op::at(b, p + 1)
                        && v1 == v2
                        && n1 + n2 <= VAL_MAX_LEN
                    {
                        b[p + 1] = val_op(v1, n1 + n2);
                        b.remove(p);
                        end -= 1;
                        continue;
                    }
                    p += 1;
                }
                o => p += o.bytes(),
            }
        }
        self.invalidate();
        Ok(true)
    }

    fn promote_set(&mut self, index: usize, count: u8) -> Result<bool, Corrupt> {
        self.to_dense()?;
        self.set(index, count)
    }
}

/// The estimated cardinality of a union of HLLs given as one byte per register (multi-key
/// PFCOUNT's scratch registers).
pub fn count_raw(regs: &[u8]) -> u64 {
    let mut histo = [0u32; 64];
    for &r in regs {
        histo[usize::from(r & 63)] += 1;
    }
    estimate(&histo)
}

/// Ertl's improved estimator ("New cardinality estimation algorithms for HyperLogLog
/// sketches", arXiv:1702.01284) over the register histogram, as Redis computes it.
fn estimate(histo: &[u32; 64]) -> u64 {
    let m = REGISTERS as f64;
    let mut z = m * tau((m - f64::from(histo[Q + 1])) / m);
    for j in (1..=Q).rev() {
        z += f64::from(histo[j]);
        z *= 0.5;
    }
    z += m * sigma(f64::from(histo[0]) / m);
    // C's llroundl: half away from zero; an all-zero HLL gives z = ∞ and 0.
    (ALPHA_INF * m * m / z).round() as u64
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let mut y = 1.0;
    let mut z = x;
    loop {
        x *= x;
        let z_prev = z;
        z += x * y;
        y += y;
        if z_prev == z {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let mut y = 1.0;
    let mut z = 1.0 - x;
    loop {
        x = x.sqrt();
        let z_prev = z;
        y *= 0.5;
        z -= (1.0 - x) * (1.0 - x) * y;
        if z_prev == z {
            return z / 3.0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs_of(h: &Hll) -> Vec<u8> {
        let mut max = vec![0u8; REGISTERS];
        h.merge_into(&mut max).unwrap();
        max
    }

    #[test]
    fn new_is_sparse_all_zero_with_a_valid_zero_cache() {
        let h = Hll::new();
        assert_eq!(h.as_bytes(), b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\0\x7f\xff");
        assert!(is_hll(h.as_bytes()));
        assert_eq!(h.cached(), Some(0));
        assert_eq!(h.count(), Ok(0));
    }

    #[test]
    fn bytes_match_redis() {
        // GET after `PFADD k a b c` on redis-server 7.0.15, then after `PFCOUNT k`.
        let mut h = Hll::new();
        for e in [&b"a"[..], b"b", b"c"] {
            assert_eq!(h.add(e), Ok(true));
        }
        h.invalidate();
        let regs = b"`\xf3\x80P\xb1\x84K\xfb\x80BZ";
        let mut want = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\x80".to_vec();
        want.extend_from_slice(regs);
        assert_eq!(h.as_bytes(), &want[..]);
        assert_eq!(h.count(), Ok(3));
        h.set_cached(3);
        want[8] = 3;
        want[15] = 0;
        assert_eq!(h.as_bytes(), &want[..]);
        assert_eq!(h.cached(), Some(3));
    }

    #[test]
    fn validity_checks() {
        assert!(!is_hll(b"abc"));
        assert!(!is_hll(b"HYLL\x02\0\0\0\0\0\0\0\0\0\0\0\x7f\xff"));
        let mut dense = Hll::new();
        dense.to_dense().unwrap();
        assert_eq!(dense.as_bytes().len(), DENSE_SIZE);
        assert!(is_hll(dense.as_bytes()));
        assert!(!is_hll(&dense.as_bytes()[..DENSE_SIZE - 1]));
    }

    #[test]
    fn dense_registers_round_trip_including_the_last() {
        let mut regs = vec![0u8; DENSE_SIZE - HDR];
        for i in 0..REGISTERS {
            dense_set(&mut regs, i, (i % 64) as u8);
        }
        for i in 0..REGISTERS {
            assert_eq!(dense_get(&regs, i), (i % 64) as u8, "register {i}");
        }
    }

    #[test]
    fn sparse_updates_split_and_merge_runs() {
        let mut h = Hll::new();
        assert_eq!(h.set(0, 3), Ok(true));
        // VAL(3,1) then XZERO(16383).
        assert_eq!(&h.as_bytes()[HDR..], &[0x88, 0x7f, 0xfe]);
        assert_eq!(h.cached(), None, "the cache is invalidated");
        assert_eq!(h.set(0, 2), Ok(false));
        assert_eq!(h.set(1, 3), Ok(true));
        // Equal neighbours merge into VAL(3,2).
        assert_eq!(&h.as_bytes()[HDR..], &[0x89, 0x7f, 0xfd]);
        assert_eq!(h.set(100, 1), Ok(true));
        // VAL(3,2) ZERO(98) as XZERO, VAL(1,1), XZERO(16283).
        assert_eq!(&h.as_bytes()[HDR..], &[0x89, 0x40, 97, 0x80, 0x7f, 0x9a]);
        assert_eq!(h.set(5, 1), Ok(true));
        assert_eq!(&h.as_bytes()[HDR..], &[0x89, 0x02, 0x80, 0x40, 93, 0x80, 0x7f, 0x9a]);
        let regs = regs_of(&h);
        assert_eq!((regs[0], regs[1], regs[5], regs[100], regs[2]), (3, 3, 1, 1, 0));
        // Raising the middle of a VAL run splits it.
        assert_eq!(h.set(0, 1), Ok(false));
        assert_eq!(h.set(1, 4), Ok(true));
        assert_eq!(&h.as_bytes()[HDR..HDR + 2], &[0x88, 0x8c]);
    }

    #[test]
    fn large_values_and_size_promote_to_dense() {
        let mut h = Hll::new();
        h.set(7, 2).unwrap();
        assert_eq!(h.set(9, 33), Ok(true));
        assert!(h.is_dense());
        let regs = regs_of(&h);
        assert_eq!((regs[7], regs[9], regs[8]), (2, 33, 0));

        let mut h = Hll::new();
        let mut i = 0;
        while !h.is_dense() {
            h.set(i * 3 % REGISTERS, 1 + (i % 5) as u8).unwrap();
            assert!(h.as_bytes().len() <= SPARSE_MAX_BYTES || h.is_dense());
            i += 1;
        }
        assert!(i > 100);
    }

    #[test]
    fn sparse_and_dense_agree() {
        let mut sparse = Hll::new();
        for n in 0..500u32 {
            sparse.add(&n.to_le_bytes()).unwrap();
        }
        assert!(!sparse.is_dense());
        let mut dense = sparse.clone();
        dense.to_dense().unwrap();
        assert_eq!(regs_of(&sparse), regs_of(&dense));
        assert_eq!(sparse.count(), dense.count());
        assert_eq!(count_raw(&regs_of(&sparse)), sparse.count().unwrap());
    }

    #[test]
    fn corrupt_sparse_is_detected() {
        let mut h = Hll::new();
        h.0.pop();
        assert_eq!(h.count(), Err(Corrupt));
        assert_eq!(h.merge_into(&mut [0; REGISTERS]), Err(Corrupt));
        let mut h = Hll::new();
        h.0.push(0x80);
        assert_eq!(h.count(), Err(Corrupt));
        // Like Redis, conversion and merging stop at a run past the last register and accept
        // what came before.
        assert_eq!(h.merge_into(&mut [0; REGISTERS]), Ok(()));
        assert_eq!(h.clone().to_dense(), Ok(()));
    }

    #[test]
    fn counts_are_within_the_standard_error() {
        let mut h = Hll::new();
        let mut checks = 0;
        for n in 1..=100_000u32 {
            h.add(format!("element:{n}").as_bytes()).unwrap();
            if n % 1000 == 0 || n <= 100 {
                let c = h.count().unwrap() as f64;
                let err = (c - f64::from(n)).abs() / f64::from(n);
                // 0.81% is one standard error; allow four.
                assert!(err < 0.0325, "{n} distinct counted as {c}");
                checks += 1;
            }
        }
        assert!(h.is_dense());
        assert!(checks > 100);
    }

    #[test]
    fn merge_takes_the_maximum() {
        let (mut a, mut b) = (Hll::new(), Hll::new());
        for n in 0..1000u32 {
            a.add(format!("a{n}").as_bytes()).unwrap();
            b.add(format!("b{n}").as_bytes()).unwrap();
        }
        let mut max = vec![0u8; REGISTERS];
        a.merge_into(&mut max).unwrap();
        b.merge_into(&mut max).unwrap();
        let c = count_raw(&max) as f64;
        assert!((c - 2000.0).abs() / 2000.0 < 0.0325, "{c}");
    }
}
