//! Bitmap and string commands: SETBIT GETBIT BITCOUNT BITPOS BITFIELD BITFIELD_RO on one key,
//! and BITOP and LCS over several keys (run from [`super::multi`] with their keys locked).
//!
//! Argument checks happen in the order redis-server 7.0 makes them (some before the key is looked
//! up, some after), since the order decides which error or answer a client sees.

use bytes::Bytes;

use super::args::int_arg;
use super::error::{CmdError, CmdResult, SYNTAX, make_room};
use super::frame::F;
use crate::store::object::ValueType;
use crate::store::{Locked, Store};

type Handler = fn(&Store, &[Bytes]) -> CmdResult;

/// The commands of this family by name (lower case), for the node's command index (`super::index`).
pub static TABLE: &[(&str, Handler)] = &[
    ("setbit", setbit),
    ("getbit", getbit),
    ("bitcount", bitcount),
    ("bitpos", bitpos),
    ("bitfield", |s, a| bitfield(s, a, false)),
    ("bitfield_ro", |s, a| bitfield(s, a, true)),
];

const BAD_OFFSET: CmdError = CmdError::Text("ERR bit offset is not an integer or out of range");
const BAD_BIT: CmdError = CmdError::Text("ERR bit is not an integer or out of range");
const BAD_TYPE: CmdError = CmdError::Text(
    "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.",
);

/// A bit offset argument; `#n` (BITFIELD) means `n` fields of `bits` bits. Offsets whose byte
/// lies past `proto-max-bulk-len` are refused, as Redis refuses them.
fn bit_offset(arg: &[u8], bits: Option<u32>, max_len: usize) -> Result<u64, CmdError> {
    let (digits, times) = match (arg.first(), bits) {
        (Some(b'#'), Some(bits)) => (&arg[1..], i64::from(bits)),
        _ => (arg, 1),
    };
    let n = shoal_wire::num::parse_i64(digits).ok_or(BAD_OFFSET)?;
    // Redis multiplies in C (wrapping in practice) before the range check.
    let n = n.wrapping_mul(times);
    if n < 0 || (n >> 3) as u64 >= max_len as u64 {
        return Err(BAD_OFFSET);
    }
    Ok(n as u64)
}

fn bit_at(s: &[u8], offset: u64) -> u8 {
    let byte = (offset >> 3) as usize;
    s.get(byte).map_or(0, |b| (b >> (7 - (offset & 7))) & 1)
}

fn set_bit_at(s: &mut [u8], offset: u64, on: bool) {
    let byte = (offset >> 3) as usize;
    let mask = 1u8 << (7 - (offset & 7));
    if on {
        s[byte] |= mask;
    } else {
        s[byte] &= !mask;
    }
}

fn setbit(store: &Store, args: &[Bytes]) -> CmdResult {
    let offset = bit_offset(&args[2], None, store.config().max_value_len)?;
    let on = shoal_wire::num::parse_i64(&args[3]).ok_or(BAD_BIT)?;
    if on & !1 != 0 {
        return Err(BAD_BIT);
    }
    make_room(store)?;
    store
        .write_string(&args[1], |slot| {
            let len = slot.get().map_or(0, <[u8]>::len).max((offset >> 3) as usize + 1);
            slot.edit(len, |s| {
                let old = bit_at(s, offset);
                set_bit_at(s, offset, on == 1);
                F::int(i64::from(old))
            })
        })?
        .map_err(CmdError::from)
}

fn getbit(store: &Store, args: &[Bytes]) -> CmdResult {
    let offset = bit_offset(&args[2], None, store.config().max_value_len)?;
    Ok(store.read_string(&args[1], |v| F::int(i64::from(v.map_or(0, |s| bit_at(s, offset)))))?)
}

/// BITCOUNT/BITPOS units.
fn unit(arg: &[u8]) -> Result<bool, CmdError> {
    if arg.eq_ignore_ascii_case(b"bit") {
        Ok(true)
    } else if arg.eq_ignore_ascii_case(b"byte") {
        Ok(false)
    } else {
        Err(SYNTAX)
    }
}

/// Redis's range rules for BITCOUNT and BITPOS over a string of `len` bytes: negative indexes
/// count from the end, then both are clamped into the string. Returns the inclusive range in
/// bits, or `None` when it is empty.
fn bit_range(len: usize, start: i64, end: i64, in_bits: bool) -> Option<(u64, u64)> {
    let total = if in_bits { len as i64 * 8 } else { len as i64 };
    let fix = |i: i64| if i < 0 { (total + i).max(0) } else { i };
    let (start, end) = (fix(start), fix(end).min(total - 1));
    if start > end {
        return None;
    }
    let (start, end) = (start as u64, end as u64);
    Some(if in_bits { (start, end) } else { (start * 8, end * 8 + 7) })
}

/// The bits of byte `i` that lie inside the inclusive bit range `[from, to]`.
fn edge_mask(i: u64, from: u64, to: u64) -> u8 {
    let mut m = 0xFFu8;
    if i == from >> 3 {
        m &= 0xFF >> (from & 7);
    }
    if i == to >> 3 {
        m &= 0xFF << (7 - (to & 7));
    }
    m
}

/// The byte `i` of `s` with the bits outside `[from, to]` cleared.
fn masked(s: &[u8], i: u64, from: u64, to: u64) -> u8 {
    s[i as usize] & edge_mask(i, from, to)
}

/// Set bits in the inclusive bit range `[from, to]` of `s` (inside `s`).
fn count_ones(s: &[u8], from: u64, to: u64) -> i64 {
    let (first, last) = (from >> 3, to >> 3);
    let mut n = 0u64;
    if last > first + 1 {
        n += s[first as usize + 1..last as usize].iter().map(|b| u64::from(b.count_ones())).sum::<u64>();
    }
    n += u64::from(masked(s, first, from, to).count_ones());
    if last != first {
        n += u64::from(masked(s, last, from, to).count_ones());
    }
    n as i64
}

/// The first bit equal to `bit` in the inclusive bit range `[from, to]` of `s` (inside `s`).
fn first_bit(s: &[u8], bit: bool, from: u64, to: u64) -> Option<u64> {
    for i in from >> 3..=to >> 3 {
        // Looking for a zero is looking for a one in the flipped byte; masking after the flip
        // keeps the out-of-range bits from matching either way.
        let x = (if bit { s[i as usize] } else { !s[i as usize] }) & edge_mask(i, from, to);
        if x != 0 {
            return Some(i * 8 + u64::from(x.leading_zeros()));
        }
    }
    None
}

/// BITCOUNT over `s` with the optional `[start end [BYTE|BIT]]` already parsed.
pub fn bitcount_of(s: &[u8], range: Option<(i64, i64, bool)>) -> i64 {
    let (start, end, in_bits) = range.unwrap_or((0, -1, false));
    bit_range(s.len(), start, end, in_bits).map_or(0, |(from, to)| count_ones(s, from, to))
}

fn bitcount(store: &Store, args: &[Bytes]) -> CmdResult {
    // Redis 7.0 looks the key up before it reads the range: a missing key counts 0 whatever the
    // other arguments.
    store.read_string(&args[1], |v| {
        let Some(s) = v else { return Ok(F::int(0)) };
        let range = match args.len() {
            2 => None,
            4 | 5 => {
                let (start, end) = (int_arg(&args[2])?, int_arg(&args[3])?);
                if start < 0 && end < 0 && start > end {
                    return Ok(F::int(0));
                }
                let in_bits = match args.get(4) {
                    Some(u) => unit(u)?,
                    None => false,
                };
                Some((start, end, in_bits))
            }
            _ => return Err(SYNTAX),
        };
        Ok(F::int(bitcount_of(s, range)))
    })?
}

/// BITPOS over `s` for `bit`, with the optional start, end and unit already parsed.
pub fn bitpos_of(s: &[u8], bit: bool, start: Option<i64>, end: Option<i64>, in_bits: bool) -> i64 {
    let start = start.unwrap_or(0);
    let end_given = end.is_some();
    let end = end.unwrap_or(-1);
    let Some((from, to)) = bit_range(s.len(), start, end, in_bits) else { return -1 };
    match first_bit(s, bit, from, to) {
        Some(p) => p as i64,
        // Past the string, a missing end makes the value read as zero-padded to the right.
        None if !bit && !end_given => to as i64 + 1,
        None => -1,
    }
}

fn bitpos(store: &Store, args: &[Bytes]) -> CmdResult {
    let bit = int_arg(&args[2])?;
    if bit != 0 && bit != 1 {
        return Err(CmdError::Text("ERR The bit argument must be 1 or 0."));
    }
    let bit = bit == 1;
    store.read_string(&args[1], |v| {
        // A missing key is an endless run of zeros.
        let Some(s) = v else { return Ok(F::int(if bit { -1 } else { 0 })) };
        if args.len() > 6 {
            return Err(SYNTAX);
        }
        let start = args.get(3).map(|a| int_arg(a)).transpose()?;
        let in_bits = match args.get(5) {
            Some(u) => unit(u)?,
            None => false,
        };
        let end = args.get(4).map(|a| int_arg(a)).transpose()?;
        Ok(F::int(bitpos_of(s, bit, start, end, in_bits)))
    })?
}

// --- BITFIELD ------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Get,
    Set(i64),
    IncrBy(i64),
}

#[derive(Debug, Clone, Copy)]
struct FieldOp {
    op: Op,
    signed: bool,
    bits: u32,
    offset: u64,
    overflow: Overflow,
}

/// `i1`..`i64` or `u1`..`u63` (lowercase only, as Redis reads them).
fn field_type(arg: &[u8]) -> Result<(bool, u32), CmdError> {
    let signed = match arg.first() {
        Some(b'i') => true,
        Some(b'u') => false,
        _ => return Err(BAD_TYPE),
    };
    let bits = shoal_wire::num::parse_i64(&arg[1..]).ok_or(BAD_TYPE)?;
    if bits < 1 || bits > if signed { 64 } else { 63 } {
        return Err(BAD_TYPE);
    }
    Ok((signed, bits as u32))
}

/// The `bits`-bit unsigned field at bit `offset` of `s` (bits past the end read as zero).
fn get_unsigned(s: &[u8], offset: u64, bits: u32) -> u64 {
    (0..u64::from(bits)).fold(0, |v, j| (v << 1) | u64::from(bit_at(s, offset + j)))
}

fn get_signed(s: &[u8], offset: u64, bits: u32) -> i64 {
    let v = get_unsigned(s, offset, bits);
    if bits < 64 && v & (1 << (bits - 1)) != 0 { (v | (u64::MAX << bits)) as i64 } else { v as i64 }
}

fn set_field(s: &mut [u8], offset: u64, bits: u32, value: u64) {
    for j in 0..u64::from(bits) {
        set_bit_at(s, offset + j, (value >> (u64::from(bits) - 1 - j)) & 1 == 1);
    }
}

/// Redis's `checkUnsignedBitfieldOverflow`: whether `value + incr` leaves a `bits`-bit unsigned
/// field, and the value to store instead under `mode` (`None` for FAIL). The arithmetic wraps
/// where Redis's C does, so out-of-range inputs give Redis's answers.
pub fn unsigned_overflow(value: u64, incr: i64, bits: u32, mode: Overflow) -> Option<Option<u64>> {
    let max = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
    let max_incr = max.wrapping_sub(value) as i64;
    let min_incr = value.wrapping_neg() as i64;
    let limit = if value > max || (incr > 0 && incr > max_incr) {
        max
    } else if incr < 0 && incr < min_incr {
        0
    } else {
        return None;
    };
    Some(match mode {
        Overflow::Wrap => Some(value.wrapping_add(incr as u64) & !(u64::MAX << bits)),
        Overflow::Sat => Some(limit),
        Overflow::Fail => None,
    })
}

/// Redis's `checkSignedBitfieldOverflow` (see [`unsigned_overflow`]).
pub fn signed_overflow(value: i64, incr: i64, bits: u32, mode: Overflow) -> Option<Option<i64>> {
    let max = if bits == 64 { i64::MAX } else { (1i64 << (bits - 1)) - 1 };
    let min = -max - 1;
    let max_incr = (max as u64).wrapping_sub(value as u64) as i64;
    let min_incr = min.wrapping_sub(value);
    let limit =
        if value > max || (bits != 64 && incr > max_incr) || (value >= 0 && incr > 0 && incr > max_incr) {
            max
        } else if value < min || (bits != 64 && incr < min_incr) || (value < 0 && incr < 0 && incr < min_incr)
        {
            min
        } else {
            return None;
        };
    Some(match mode {
        Overflow::Wrap => {
            let mut c = (value as u64).wrapping_add(incr as u64);
            if bits < 64 {
                let mask = u64::MAX << bits;
                if c & (1 << (bits - 1)) != 0 {
                    c |= mask;
                } else {
                    c &= !mask;
                }
            }
            Some(c as i64)
        }
        Overflow::Sat => Some(limit),
        Overflow::Fail => None,
    })
}

/// Runs one SET or INCRBY on `s` (already long enough); its reply (nil: FAIL refused it).
fn apply(s: &mut [u8], f: &FieldOp) -> shoal_wire::proto::Frame {
    let (incr, is_set) = match f.op {
        Op::Set(v) => (v, true),
        Op::IncrBy(v) => (v, false),
        Op::Get => unreachable!("GET does not write"),
    };
    let (reply, new) = if f.signed {
        let old = get_signed(s, f.offset, f.bits);
        let (checked, plain) = if is_set {
            (signed_overflow(incr, 0, f.bits, f.overflow), incr)
        } else {
            (signed_overflow(old, incr, f.bits, f.overflow), old.wrapping_add(incr))
        };
        let new = match checked {
            None => plain,
            Some(Some(v)) => v,
            Some(None) => return F::nil(),
        };
        (if is_set { old } else { new }, new as u64)
    } else {
        let old = get_unsigned(s, f.offset, f.bits);
        let (checked, plain) = if is_set {
            (unsigned_overflow(incr as u64, 0, f.bits, f.overflow), incr as u64)
        } else {
            (unsigned_overflow(old, incr, f.bits, f.overflow), old.wrapping_add(incr as u64))
        };
        let new = match checked {
            None => plain,
            Some(Some(v)) => v,
            Some(None) => return F::nil(),
        };
        ((if is_set { old } else { new }) as i64, new)
    };
    set_field(s, f.offset, f.bits, new);
    F::int(reply)
}

fn get_field(s: &[u8], f: &FieldOp) -> shoal_wire::proto::Frame {
    F::int(if f.signed { get_signed(s, f.offset, f.bits) } else { get_unsigned(s, f.offset, f.bits) as i64 })
}

fn parse_fields(args: &[Bytes], max_len: usize) -> Result<Vec<FieldOp>, CmdError> {
    let mut ops = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < args.len() {
        let more = args.len() - j - 1;
        let sub = &args[j];
        let kind = if sub.eq_ignore_ascii_case(b"get") && more >= 2 {
            0
        } else if sub.eq_ignore_ascii_case(b"set") && more >= 3 {
            1
        } else if sub.eq_ignore_ascii_case(b"incrby") && more >= 3 {
            2
        } else if sub.eq_ignore_ascii_case(b"overflow") && more >= 1 {
            let how = &args[j + 1];
            overflow = if how.eq_ignore_ascii_case(b"wrap") {
                Overflow::Wrap
            } else if how.eq_ignore_ascii_case(b"sat") {
                Overflow::Sat
            } else if how.eq_ignore_ascii_case(b"fail") {
                Overflow::Fail
            } else {
                return Err(CmdError::Text("ERR Invalid OVERFLOW type specified"));
            };
            j += 2;
            continue;
        } else {
            return Err(SYNTAX);
        };
        let (signed, bits) = field_type(&args[j + 1])?;
        let offset = bit_offset(&args[j + 2], Some(bits), max_len)?;
        let op = match kind {
            0 => Op::Get,
            1 => Op::Set(int_arg(&args[j + 3])?),
            _ => Op::IncrBy(int_arg(&args[j + 3])?),
        };
        ops.push(FieldOp { op, signed, bits, offset, overflow });
        j += if kind == 0 { 3 } else { 4 };
    }
    Ok(ops)
}

fn bitfield(store: &Store, args: &[Bytes], read_only: bool) -> CmdResult {
    let ops = parse_fields(args, store.config().max_value_len)?;
    let highest = ops.iter().filter(|f| f.op != Op::Get).map(|f| f.offset + u64::from(f.bits) - 1).max();
    let Some(highest) = highest else {
        return Ok(store.read_string(&args[1], |v| {
            F::array(ops.iter().map(|f| get_field(v.unwrap_or_default(), f)).collect())
        })?);
    };
    if read_only {
        return Err(CmdError::Text("ERR BITFIELD_RO only supports the GET subcommand"));
    }
    make_room(store)?;
    // The string grows to the farthest bit written before any operation runs (even one that
    // FAIL then refuses), as in Redis.
    store
        .write_string(&args[1], |slot| {
            let len = slot.get().map_or(0, <[u8]>::len).max((highest >> 3) as usize + 1);
            slot.edit(len, |s| {
                F::array(
                    ops.iter().map(|f| if f.op == Op::Get { get_field(s, f) } else { apply(s, f) }).collect(),
                )
            })
        })?
        .map_err(CmdError::from)
}

// --- over several keys -----------------------------------------------------------------------

/// `BITOP op destkey key...`: keys are `args[2..]`.
pub fn bitop_keys(args: &[Bytes]) -> Result<Vec<Bytes>, CmdError> {
    Ok(args[2..].to_vec())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BitOp {
    And,
    Or,
    Xor,
    Not,
}

pub fn bitop(l: &mut Locked<'_>, args: &[Bytes]) -> CmdResult {
    let name = &args[1];
    let op = if name.eq_ignore_ascii_case(b"and") {
        BitOp::And
    } else if name.eq_ignore_ascii_case(b"or") {
        BitOp::Or
    } else if name.eq_ignore_ascii_case(b"xor") {
        BitOp::Xor
    } else if name.eq_ignore_ascii_case(b"not") {
        BitOp::Not
    } else {
        return Err(SYNTAX);
    };
    if op == BitOp::Not && args.len() != 4 {
        return Err(CmdError::Text("ERR BITOP NOT must be called with a single source key."));
    }
    let mut sources = Vec::with_capacity(args.len() - 3);
    for k in &args[3..] {
        // Missing keys are empty strings.
        sources.push(l.read_string(k, |v| v.map(<[u8]>::to_vec).unwrap_or_default())?);
    }
    let max = sources.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = vec![0u8; max];
    for (i, o) in out.iter_mut().enumerate() {
        let byte = |s: &Vec<u8>| s.get(i).copied().unwrap_or(0);
        let mut acc = byte(&sources[0]);
        match op {
            BitOp::Not => acc = !acc,
            BitOp::And => sources[1..].iter().for_each(|s| acc &= byte(s)),
            BitOp::Or => sources[1..].iter().for_each(|s| acc |= byte(s)),
            BitOp::Xor => sources[1..].iter().for_each(|s| acc ^= byte(s)),
        }
        *o = acc;
    }
    let dst = &args[2];
    // The destination is replaced whatever it held, its TTL cleared; an empty result deletes it.
    if max > 0 {
        l.restore(dst, &out, 0, ValueType::String)?;
        l.mark_raw(dst);
    } else {
        l.delete(dst);
    }
    Ok(F::int(max as i64))
}

pub fn lcs(l: &mut Locked<'_>, args: &[Bytes]) -> CmdResult {
    let (ka, kb) = (&args[1], &args[2]);
    if [ka, kb].iter().any(|k| l.value_type(k).is_some_and(|t| t != ValueType::String)) {
        return Err(CmdError::Text("ERR The specified keys must contain string values"));
    }
    let a = l.read_string(ka, |v| v.map(<[u8]>::to_vec).unwrap_or_default())?;
    let b = l.read_string(kb, |v| v.map(<[u8]>::to_vec).unwrap_or_default())?;
    let o = LcsOptions::parse(args)?;
    if o.get_idx && o.get_len {
        return Err(CmdError::Text("ERR If you want both the length and indexes, please just use IDX."));
    }
    if a.len() >= u32::MAX as usize - 1 || b.len() >= u32::MAX as usize - 1 {
        return Err(CmdError::Text("ERR String too long for LCS"));
    }
    let cells = (a.len() as u64 + 1) * (b.len() as u64 + 1);
    if cells * 4 > l.max_value_len() as u64 {
        return Err(CmdError::Text(
            "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        ));
    }
    let table = lcs_table(&a, &b);
    let total = table[b.len() + a.len() * (b.len() + 1)];
    if o.get_len {
        return Ok(F::int(i64::from(total)));
    }
    let (result, matches) = lcs_walk(&a, &b, &table, total, o);
    if o.get_idx {
        return Ok(F::map(vec![
            F::bulk_from(b"matches"),
            F::array(matches),
            F::bulk_from(b"len"),
            F::int(i64::from(total)),
        ]));
    }
    Ok(F::bulk(result))
}

/// LCS's options: LEN, IDX, WITHMATCHLEN, MINMATCHLEN n.
#[derive(Clone, Copy)]
struct LcsOptions {
    get_len: bool,
    get_idx: bool,
    with_len: bool,
    min_len: i64,
}

impl LcsOptions {
    fn parse(args: &[Bytes]) -> Result<LcsOptions, CmdError> {
        let mut o = LcsOptions { get_len: false, get_idx: false, with_len: false, min_len: 0 };
        let mut j = 3;
        while j < args.len() {
            let opt = &args[j];
            if opt.eq_ignore_ascii_case(b"idx") {
                o.get_idx = true;
            } else if opt.eq_ignore_ascii_case(b"len") {
                o.get_len = true;
            } else if opt.eq_ignore_ascii_case(b"withmatchlen") {
                o.with_len = true;
            } else if opt.eq_ignore_ascii_case(b"minmatchlen") && j + 1 < args.len() {
                o.min_len = int_arg(&args[j + 1])?.max(0);
                j += 1;
            } else {
                return Err(SYNTAX);
            }
            j += 1;
        }
        Ok(o)
    }
}

/// Walks `table` (see [`lcs_table`]) back from the end as Redis does: the common string of `a`
/// and `b` (`total` long) and, for IDX, the matching ranges, last first.
fn lcs_walk(
    a: &[u8],
    b: &[u8],
    table: &[u32],
    total: u32,
    o: LcsOptions,
) -> (Vec<u8>, Vec<shoal_wire::proto::Frame>) {
    let LcsOptions { get_idx, with_len, min_len, .. } = o;
    let w = b.len() + 1;
    let at = |i: usize, j: usize| table[j + i * w];
    let mut result = vec![0u8; total as usize];
    let mut idx = total as usize;
    let mut matches = Vec::new();
    let alen = a.len();
    let (mut a_start, mut a_end, mut b_start, mut b_end) = (alen, 0usize, 0usize, 0usize);
    let (mut i, mut j) = (a.len(), b.len());
    while i > 0 && j > 0 {
        let mut emit = false;
        if a[i - 1] == b[j - 1] {
            result[idx - 1] = a[i - 1];
            if a_start == alen {
                (a_start, a_end, b_start, b_end) = (i - 1, i - 1, j - 1, j - 1);
            } else if a_start == i && b_start == j {
                a_start -= 1;
                b_start -= 1;
            } else {
                emit = true;
            }
            if a_start == 0 || b_start == 0 {
                emit = true;
            }
            idx -= 1;
            i -= 1;
            j -= 1;
        } else {
            if at(i - 1, j) > at(i, j - 1) {
                i -= 1;
            } else {
                j -= 1;
            }
            if a_start != alen {
                emit = true;
            }
        }
        if emit {
            let match_len = (a_end - a_start + 1) as i64;
            if get_idx && (min_len == 0 || match_len >= min_len) {
                let mut m = vec![
                    F::array(vec![F::int(a_start as i64), F::int(a_end as i64)]),
                    F::array(vec![F::int(b_start as i64), F::int(b_end as i64)]),
                ];
                if with_len {
                    m.push(F::int(match_len));
                }
                matches.push(F::array(m));
            }
            a_start = alen;
        }
    }
    (result, matches)
}

/// The dynamic-programming table: `t[j + i*(b.len()+1)]` is the LCS length of `a[..i]` and
/// `b[..j]`.
fn lcs_table(a: &[u8], b: &[u8]) -> Vec<u32> {
    let w = b.len() + 1;
    let mut t = vec![0u32; (a.len() + 1) * w];
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            t[j + i * w] = if a[i - 1] == b[j - 1] {
                t[j - 1 + (i - 1) * w] + 1
            } else {
                t[j + (i - 1) * w].max(t[j - 1 + i * w])
            };
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned_fields_wrap_saturate_or_fail() {
        use Overflow::*;
        assert_eq!(unsigned_overflow(250, 5, 8, Wrap), None, "in range");
        assert_eq!(unsigned_overflow(250, 10, 8, Wrap), Some(Some(4)));
        assert_eq!(unsigned_overflow(250, 10, 8, Sat), Some(Some(255)));
        assert_eq!(unsigned_overflow(250, 10, 8, Fail), Some(None));
        assert_eq!(unsigned_overflow(3, -4, 8, Wrap), Some(Some(255)));
        assert_eq!(unsigned_overflow(3, -4, 8, Sat), Some(Some(0)));
        assert_eq!(unsigned_overflow(3, -3, 8, Sat), None);
        // SET checks the new value with no increment: -1 is u64::MAX, above any field.
        assert_eq!(unsigned_overflow(u64::MAX, 0, 8, Wrap), Some(Some(255)));
        assert_eq!(unsigned_overflow(u64::MAX, 0, 8, Sat), Some(Some(255)));
        assert_eq!(unsigned_overflow(0, i64::MAX, 63, Sat), None);
        assert_eq!(unsigned_overflow(1, i64::MAX, 63, Wrap), Some(Some(0)));
    }

    #[test]
    fn signed_fields_wrap_saturate_or_fail() {
        use Overflow::*;
        assert_eq!(signed_overflow(127, 1, 8, Wrap), Some(Some(-128)));
        assert_eq!(signed_overflow(127, 1, 8, Sat), Some(Some(127)));
        assert_eq!(signed_overflow(127, 1, 8, Fail), Some(None));
        assert_eq!(signed_overflow(-128, -1, 8, Wrap), Some(Some(127)));
        assert_eq!(signed_overflow(-128, -1, 8, Sat), Some(Some(-128)));
        assert_eq!(signed_overflow(-100, 50, 8, Sat), None);
        assert_eq!(signed_overflow(200, 0, 8, Wrap), Some(Some(-56)));
        assert_eq!(signed_overflow(i64::MAX, 1, 64, Wrap), Some(Some(i64::MIN)));
        assert_eq!(signed_overflow(i64::MAX, 1, 64, Sat), Some(Some(i64::MAX)));
        assert_eq!(signed_overflow(i64::MIN, -1, 64, Sat), Some(Some(i64::MIN)));
        assert_eq!(signed_overflow(-1, i64::MIN, 64, Fail), Some(None));
        assert_eq!(signed_overflow(0, i64::MIN, 64, Fail), None);
        // Redis's wrapping `max - value` sends the most negative SET to the top under SAT.
        assert_eq!(signed_overflow(i64::MIN, 0, 8, Sat), Some(Some(127)));
    }

    #[test]
    fn fields_read_and_write_across_bytes() {
        let mut s = vec![0u8; 3];
        set_field(&mut s, 5, 7, 0b101_1011);
        assert_eq!(s, [0b0000_0101, 0b1011_0000, 0]);
        assert_eq!(get_unsigned(&s, 5, 7), 0b101_1011);
        assert_eq!(get_signed(&s, 5, 7), 0b101_1011 - 128);
        assert_eq!(get_unsigned(&s, 20, 16), 0, "past the end reads zeros");
        let f = FieldOp { op: Op::IncrBy(-1), signed: false, bits: 4, offset: 0, overflow: Overflow::Fail };
        assert_eq!(apply(&mut s, &f), F::nil());
        assert_eq!(s[0], 0b0000_0101, "FAIL leaves the field alone");
    }

    #[test]
    fn bitcount_ranges_follow_redis() {
        let s = b"foobar";
        assert_eq!(bitcount_of(s, None), 26);
        assert_eq!(bitcount_of(s, Some((1, 1, false))), 6);
        assert_eq!(bitcount_of(s, Some((-2, -1, false))), 7);
        assert_eq!(bitcount_of(s, Some((3, 1, false))), 0);
        assert_eq!(bitcount_of(s, Some((5, 30, true))), 17);
        assert_eq!(bitcount_of(s, Some((-100, 100, false))), 26);
        assert_eq!(bitcount_of(s, Some((0, 0, true))), 0);
        assert_eq!(bitcount_of(b"", None), 0);
    }

    #[test]
    fn bitpos_ranges_follow_redis() {
        let s = b"\xff\xf0\x00";
        assert_eq!(bitpos_of(s, false, None, None, false), 12);
        assert_eq!(bitpos_of(s, true, Some(2), None, false), -1);
        assert_eq!(bitpos_of(s, false, Some(3), Some(7), true), -1);
        assert_eq!(bitpos_of(s, false, Some(3), Some(12), true), 12);
        let ones = b"\xff\xff";
        // No zero in the string: without an end the answer is the first bit past it.
        assert_eq!(bitpos_of(ones, false, None, None, false), 16);
        assert_eq!(bitpos_of(ones, false, Some(0), None, false), 16);
        assert_eq!(bitpos_of(ones, false, Some(0), Some(-1), false), -1);
        assert_eq!(bitpos_of(b"\x00\x01", true, Some(7), Some(14), true), -1);
        assert_eq!(bitpos_of(b"\x00\x01", true, Some(7), Some(15), true), 15);
        assert_eq!(bitpos_of(b"", false, None, None, false), -1);
    }
}
