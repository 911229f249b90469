//! A key's value in Redis's DUMP payload: the RDB value encoding (a type byte, the value) that
//! DUMP writes and RESTORE reads, sealed with the RDB version and CRC64 (`crate::rdb`).
//!
//! Written as redis-server 7.0 writes the same value: a string as `rdbSaveRawString`; a list as
//! a quicklist of listpack nodes (type 18) split where 7.0's `_quicklistNodeAllowInsert` splits a
//! list built by RPUSH; a set of integers as an intset (11), any other set as its members (2); a
//! small hash or sorted set as a listpack (16, 17: scores as `d2string` prints them), a large
//! one as its pairs (4) or its members from the highest score down with binary scores (5); a
//! stream as its listpack nodes, counters and groups (19). Values small enough to be one node
//! come out byte for byte as Redis's; a large hash or set lists its members in Shoal's order
//! (Redis's is its hash table's, which differs between any two servers).
//!
//! Read: every type 7.0 reads except zipmaps (Redis 2.4 hashes) and modules: the 7.0 forms
//! above, and the older ones other servers still send (plain lists, sorted sets with text
//! scores, ziplist lists, hashes and sorted sets, quicklists of ziplists, streams without
//! counters). An empty collection, a duplicate member or field, a NaN score or a malformed
//! node is refused, as RESTORE's "Bad data format".

use crate::rdb::{self, RdbError, Reader, put_len, put_string};
use crate::store::object::listpack::{self, Ele};
use crate::store::object::stream::rdb::StreamRdbError;
use crate::store::object::{Hash, Limits, List, Object, Set, Stream, ZSet};

const STRING: u8 = 0;
const LIST: u8 = 1;
const SET: u8 = 2;
const ZSET: u8 = 3;
const HASH: u8 = 4;
const ZSET_2: u8 = 5;
const LIST_ZIPLIST: u8 = 10;
const SET_INTSET: u8 = 11;
const ZSET_ZIPLIST: u8 = 12;
const HASH_ZIPLIST: u8 = 13;
const LIST_QUICKLIST: u8 = 14;
const STREAM_LISTPACKS: u8 = 15;
const HASH_LISTPACK: u8 = 16;
const ZSET_LISTPACK: u8 = 17;
const LIST_QUICKLIST_2: u8 = 18;
const STREAM_LISTPACKS_2: u8 = 19;
/// Redis 7.2's small set (RDB 11), and 7.4's hashes with field times (RDB 12): a table's pairs
/// each behind its time, and a listpack of field, value, time triples, each after the earliest time.
const SET_LISTPACK: u8 = 20;
const HASH_METADATA: u8 = 24;
const HASH_LISTPACK_EX: u8 = 25;

/// A quicklist node holding one large element as it is, or a listpack of elements.
const CONTAINER_PLAIN: u64 = 1;
const CONTAINER_PACKED: u64 = 2;

/// Why a payload's value is refused (RESTORE answers "Bad data format" for each).
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    #[error(transparent)]
    Rdb(#[from] RdbError),
    #[error(transparent)]
    Stream(#[from] StreamRdbError),
    #[error("value type {0} is not read")]
    Type(u8),
    #[error("malformed value: {0}")]
    Bad(&'static str),
}

/// What a payload holds: a string's bytes, or a typed value.
pub enum Value {
    String(Vec<u8>),
    Object(Object),
}

/// DUMP of a string.
pub fn dump_string(v: &[u8]) -> Vec<u8> {
    let mut out = vec![STRING];
    put_string(&mut out, v);
    rdb::seal(&mut out);
    out
}

/// DUMP of a typed value.
pub fn dump_object(o: &Object) -> Vec<u8> {
    let mut out = Vec::new();
    match o {
        Object::List(l) => write_list(l, &mut out),
        Object::Set(Set::Ints(v)) => {
            out.push(SET_INTSET);
            put_string(&mut out, &intset(v));
        }
        Object::Set(s) => {
            out.push(SET);
            put_len(&mut out, s.len() as u64);
            for m in s.iter() {
                put_string(&mut out, &m);
            }
        }
        // A table keeping no time is 7.0's hash (the plain arm below, version 10), so that the
        // same value always dumps the same.
        Object::Hash(h) if h.has_field_ttls() && (h.is_packed() || h.min_ttl().is_some()) => {
            write_hash_with_times(h, &mut out);
            rdb::seal_as(&mut out, rdb::RDB_VERSION_FIELD_TTLS);
            return out;
        }
        Object::Hash(h) if h.is_packed() => {
            out.push(HASH_LISTPACK);
            let mut lp = listpack::new();
            for (f, v) in h.iter() {
                listpack::append_str(&mut lp, f);
                listpack::append_str(&mut lp, v);
            }
            put_string(&mut out, &lp);
        }
        Object::Hash(h) => {
            out.push(HASH);
            put_len(&mut out, h.len() as u64);
            for (f, v) in h.iter() {
                put_string(&mut out, f);
                put_string(&mut out, v);
            }
        }
        Object::ZSet(z @ ZSet::Pack(_)) => {
            out.push(ZSET_LISTPACK);
            let mut lp = listpack::new();
            for (m, score) in z.iter() {
                listpack::append_str(&mut lp, m);
                listpack::append_str(&mut lp, d2string(score).as_bytes());
            }
            put_string(&mut out, &lp);
        }
        Object::ZSet(z) => {
            out.push(ZSET_2);
            put_len(&mut out, z.len() as u64);
            for (m, score) in z.iter().rev() {
                put_string(&mut out, m);
                out.extend_from_slice(&score.to_le_bytes());
            }
        }
        Object::Stream(s) => {
            out.push(STREAM_LISTPACKS_2);
            s.write_rdb(&mut out);
        }
    }
    rdb::seal(&mut out);
    out
}

/// Redis's `d2string`: integral scores within ±2^62 as integers, others as `%.17g`.
fn d2string(d: f64) -> String {
    if d != 0.0 && d.fract() == 0.0 && d.abs() <= (i64::MAX / 2) as f64 {
        return (d as i64).to_string();
    }
    super::double::fmt_g17(d)
}

/// An intset blob: element width (2, 4 or 8 bytes), count, then the sorted values, little-endian.
fn intset(v: &[i64]) -> Vec<u8> {
    let width: usize = if v.iter().all(|&n| i16::try_from(n).is_ok()) {
        2
    } else if v.iter().all(|&n| i32::try_from(n).is_ok()) {
        4
    } else {
        8
    };
    let mut b = Vec::with_capacity(8 + width * v.len());
    b.extend_from_slice(&(width as u32).to_le_bytes());
    b.extend_from_slice(&(v.len() as u32).to_le_bytes());
    for n in v {
        b.extend_from_slice(&n.to_le_bytes()[..width]);
    }
    b
}

/// A list as 7.0's quicklist of listpacks, cut into nodes where pushing its elements one by one
/// at the tail cuts them (`list-max-listpack-size`: `fill`).
fn write_list(l: &List, out: &mut Vec<u8>) {
    let mut nodes: Vec<(Vec<u8>, usize)> = Vec::new();
    for v in l.iter() {
        match nodes.last_mut() {
            Some((lp, count)) if allow_insert(lp.len(), *count, l.fill, v.len()) => {
                listpack::append_str(lp, v);
                *count += 1;
            }
            _ => {
                let mut lp = listpack::new();
                listpack::append_str(&mut lp, v);
                nodes.push((lp, 1));
            }
        }
    }
    out.push(LIST_QUICKLIST_2);
    put_len(out, nodes.len() as u64);
    for (lp, _) in &nodes {
        put_len(out, CONTAINER_PACKED);
        put_string(out, lp);
    }
}

/// `_quicklistNodeAllowInsert` (7.0): whether a node of `size` bytes and `count` elements takes
/// one more element of `len` bytes.
fn allow_insert(size: usize, count: usize, fill: i64, len: usize) -> bool {
    const LEVELS: [usize; 5] = [4096, 8192, 16384, 32768, 65536];
    let new_size = size + len + 8;
    if fill < 0 && ((-fill - 1) as usize) < LEVELS.len() {
        return new_size <= LEVELS[(-fill - 1) as usize];
    }
    new_size <= 8192 && fill >= 0 && (count as i64) < fill
}

/// A hash with field times as Redis 7.4 writes it: packed (`listpackex`), the earliest time (0:
/// none) then a listpack of field, value, time (0: none) triples in the hash's order; else the
/// earliest time, the field count, and per field its time after the earliest plus one (0: none),
/// field and value.
fn write_hash_with_times(h: &Hash, out: &mut Vec<u8>) {
    let min = h.min_ttl().unwrap_or(0);
    if h.is_packed() {
        out.push(HASH_LISTPACK_EX);
        out.extend_from_slice(&min.to_le_bytes());
        let mut lp = listpack::new();
        for (f, v) in h.iter() {
            listpack::append_str(&mut lp, f);
            listpack::append_str(&mut lp, v);
            listpack::append_int(&mut lp, h.field_ttl(f).map_or(0, |at| at as i64));
        }
        put_string(out, &lp);
    } else {
        out.push(HASH_METADATA);
        out.extend_from_slice(&min.to_le_bytes());
        put_len(out, h.len() as u64);
        for (f, v) in h.iter() {
            put_len(out, h.field_ttl(f).map_or(0, |at| at - min + 1));
            put_string(out, f);
            put_string(out, v);
        }
    }
}

/// The latest field time a payload may carry (Redis's `EB_EXPIRE_TIME_MAX`, Unix ms).
const FIELD_TIME_MAX: u64 = 0x0000_FFFF_FFFF_FFFF;

/// A hash with field times from its payload (types 24 and 25).
fn read_hash_with_times(r: &mut Reader<'_>, packed: bool, limits: &Limits) -> Result<Object, PayloadError> {
    let min = u64::from_le_bytes(r.take(8)?.try_into().expect("8 bytes"));
    let mut h = Hash::default();
    h.allow_field_ttls();
    let add = |h: &mut Hash, f: &[u8], v: &[u8], at: u64| -> Result<(), PayloadError> {
        // Redis refuses a field time past its ebuckets' limit (2^48 - 1 ms) when it loads one.
        if at > FIELD_TIME_MAX {
            return Err(PayloadError::Bad("field time"));
        }
        if !h.set_keep_ttl(f, v, limits) {
            return Err(PayloadError::Bad("duplicate hash field"));
        }
        if at != 0 {
            h.restore_field_ttl(f, at);
        }
        Ok(())
    };
    if packed {
        let items = listpack_items(&r.string()?)?;
        if items.len() % 3 != 0 {
            return Err(PayloadError::Bad("listpackex element count"));
        }
        for t in items.chunks(3) {
            let at = shoal_wire::num::parse_i64(&t[2])
                .filter(|&n| n >= 0)
                .ok_or(PayloadError::Bad("field time"))?;
            add(&mut h, &t[0], &t[1], at as u64)?;
        }
    } else {
        for _ in 0..count(r)? {
            let ttl = r.read_len()?;
            let (f, v) = (r.string()?, r.string()?);
            let at =
                if ttl == 0 { 0 } else { min.checked_add(ttl - 1).ok_or(PayloadError::Bad("field time"))? };
            add(&mut h, &f, &v, at)?;
        }
    }
    Ok(Object::Hash(h))
}

/// RESTORE's reading of a payload: its version and checksum (`None`: wrong), then the value.
pub fn undump(payload: &[u8], limits: &Limits) -> Option<Result<Value, PayloadError>> {
    let (body, _version) = rdb::verify(payload)?;
    let mut r = Reader::new(body);
    Some(read_value(&mut r, limits))
}

fn read_value(r: &mut Reader<'_>, limits: &Limits) -> Result<Value, PayloadError> {
    let t = r.byte()?;
    let object = match t {
        STRING => return Ok(Value::String(r.string()?)),
        LIST => {
            let items = strings(r, 1)?;
            Object::List(List::from_items(items.iter().map(Vec::as_slice), limits.list_max_listpack_size))
        }
        SET => set_of(strings(r, 1)?.iter().map(Vec::as_slice), limits)?,
        HASH => hash_of(strings(r, 2)?.iter().map(Vec::as_slice), limits)?,
        ZSET | ZSET_2 => {
            let mut pairs = Vec::new();
            for _ in 0..count(r)? {
                let m = r.string()?;
                let score = if t == ZSET { text_double(r)? } else { binary_double(r)? };
                pairs.push((m, score));
            }
            zset_of(pairs, limits)?
        }
        LIST_ZIPLIST => {
            let items = ziplist(&r.string()?)?;
            Object::List(List::from_items(items.iter().map(Vec::as_slice), limits.list_max_listpack_size))
        }
        SET_INTSET => set_of(read_intset(&r.string()?)?.iter().map(Vec::as_slice), limits)?,
        ZSET_ZIPLIST => zset_of(score_pairs(ziplist(&r.string()?)?)?, limits)?,
        HASH_ZIPLIST => hash_of(ziplist(&r.string()?)?.iter().map(Vec::as_slice), limits)?,
        LIST_QUICKLIST | LIST_QUICKLIST_2 => read_quicklist(r, t == LIST_QUICKLIST_2, limits)?,
        HASH_LISTPACK => hash_of(listpack_items(&r.string()?)?.iter().map(Vec::as_slice), limits)?,
        HASH_METADATA | HASH_LISTPACK_EX => read_hash_with_times(r, t == HASH_LISTPACK_EX, limits)?,
        SET_LISTPACK => set_of(listpack_items(&r.string()?)?.iter().map(Vec::as_slice), limits)?,
        ZSET_LISTPACK => zset_of(score_pairs(listpack_items(&r.string()?)?)?, limits)?,
        STREAM_LISTPACKS | STREAM_LISTPACKS_2 => {
            return Ok(Value::Object(Object::Stream(Box::new(Stream::read_rdb(
                r,
                t == STREAM_LISTPACKS_2,
            )?))));
        }
        other => return Err(PayloadError::Type(other)),
    };
    if object.is_empty() {
        return Err(PayloadError::Bad("empty collection"));
    }
    Ok(Value::Object(object))
}

/// A count of items that follow, bounded by the bytes left (each takes at least one).
fn count(r: &mut Reader<'_>) -> Result<usize, PayloadError> {
    let n = r.read_len()?;
    if n > (r.b.len() - r.at.min(r.b.len())) as u64 {
        return Err(RdbError::Truncated.into());
    }
    Ok(n as usize)
}

/// `count` groups of `per` strings.
fn strings(r: &mut Reader<'_>, per: usize) -> Result<Vec<Vec<u8>>, PayloadError> {
    let n = count(r)?;
    let mut out = Vec::with_capacity(n * per);
    for _ in 0..n * per {
        out.push(r.string()?);
    }
    Ok(out)
}

/// `rdbLoadDoubleValue`: a length byte (253 NaN, 254 +inf, 255 -inf) and that many characters.
fn text_double(r: &mut Reader<'_>) -> Result<f64, PayloadError> {
    let d = match r.byte()? {
        253 => f64::NAN,
        254 => f64::INFINITY,
        255 => f64::NEG_INFINITY,
        n => parse_score(r.take(usize::from(n))?)?,
    };
    Ok(d)
}

fn binary_double(r: &mut Reader<'_>) -> Result<f64, PayloadError> {
    Ok(f64::from_le_bytes(r.take(8)?.try_into().expect("8 bytes")))
}

fn parse_score(b: &[u8]) -> Result<f64, PayloadError> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .ok_or(PayloadError::Bad("score is not a number"))
}

/// Member, score pairs from a ziplist's or listpack's flat elements.
fn score_pairs(items: Vec<Vec<u8>>) -> Result<Vec<(Vec<u8>, f64)>, PayloadError> {
    if !items.len().is_multiple_of(2) {
        return Err(PayloadError::Bad("odd sorted-set element count"));
    }
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut it = items.into_iter();
    while let (Some(m), Some(s)) = (it.next(), it.next()) {
        out.push((m, parse_score(&s)?));
    }
    Ok(out)
}

fn set_of<'a>(members: impl Iterator<Item = &'a [u8]>, limits: &Limits) -> Result<Object, PayloadError> {
    let mut s = Set::default();
    for m in members {
        if !s.add(m, limits) {
            return Err(PayloadError::Bad("duplicate set member"));
        }
    }
    Ok(Object::Set(s))
}

fn hash_of<'a>(mut items: impl Iterator<Item = &'a [u8]>, limits: &Limits) -> Result<Object, PayloadError> {
    let mut h = Hash::default();
    while let Some(f) = items.next() {
        let v = items.next().ok_or(PayloadError::Bad("odd hash element count"))?;
        if !h.set(f, v, limits) {
            return Err(PayloadError::Bad("duplicate hash field"));
        }
    }
    Ok(Object::Hash(h))
}

fn zset_of(pairs: Vec<(Vec<u8>, f64)>, limits: &Limits) -> Result<Object, PayloadError> {
    let mut z = ZSet::default();
    for (m, score) in pairs {
        if score.is_nan() {
            return Err(PayloadError::Bad("NaN score"));
        }
        if !z.insert(&m, score, limits) {
            return Err(PayloadError::Bad("duplicate sorted-set member"));
        }
    }
    Ok(Object::ZSet(z))
}

/// A quicklist: nodes of ziplists (type 14), or of listpacks or single plain elements (18).
fn read_quicklist(r: &mut Reader<'_>, v2: bool, limits: &Limits) -> Result<Object, PayloadError> {
    let mut items = Vec::new();
    for _ in 0..count(r)? {
        let container = if v2 { r.read_len()? } else { CONTAINER_PACKED };
        let node = r.string()?;
        match container {
            CONTAINER_PLAIN => items.push(node),
            CONTAINER_PACKED if v2 => items.extend(listpack_items(&node)?),
            CONTAINER_PACKED => items.extend(ziplist(&node)?),
            _ => return Err(PayloadError::Bad("quicklist container")),
        }
    }
    Ok(Object::List(List::from_items(items.iter().map(Vec::as_slice), limits.list_max_listpack_size)))
}

/// A listpack's elements (integers in decimal).
fn listpack_items(lp: &[u8]) -> Result<Vec<Vec<u8>>, PayloadError> {
    let bad = |_| PayloadError::Bad("listpack");
    listpack::validate(lp).map_err(bad)?;
    let mut out = Vec::new();
    let mut at = listpack::HEADER;
    while let Some((e, next)) = listpack::read(lp, at).map_err(bad)? {
        out.push(match e {
            Ele::Int(n) => n.to_string().into_bytes(),
            Ele::Str(s) => s.to_vec(),
        });
        at = next;
    }
    Ok(out)
}

/// An intset blob's members (in decimal): width 2, 4 or 8, sorted without repeats.
fn read_intset(b: &[u8]) -> Result<Vec<Vec<u8>>, PayloadError> {
    let bad = PayloadError::Bad("intset");
    if b.len() < 8 {
        return Err(bad);
    }
    let width = u32::from_le_bytes(b[..4].try_into().expect("4")) as usize;
    let n = u32::from_le_bytes(b[4..8].try_into().expect("4")) as usize;
    if !matches!(width, 2 | 4 | 8) || n.checked_mul(width) != Some(b.len() - 8) {
        return Err(bad);
    }
    let values: Vec<i64> = b[8..]
        .chunks_exact(width)
        .map(|c| match width {
            2 => i64::from(i16::from_le_bytes(c.try_into().expect("2"))),
            4 => i64::from(i32::from_le_bytes(c.try_into().expect("4"))),
            _ => i64::from_le_bytes(c.try_into().expect("8")),
        })
        .collect();
    if values.windows(2).any(|w| w[0] >= w[1]) {
        return Err(bad);
    }
    Ok(values.iter().map(|n| n.to_string().into_bytes()).collect())
}

/// A ziplist's elements (Redis before 7.0): header (bytes, tail offset, count), entries of
/// previous-length, encoding and data, and a 0xFF end.
fn ziplist(z: &[u8]) -> Result<Vec<Vec<u8>>, PayloadError> {
    let bad = PayloadError::Bad("ziplist");
    if z.len() < 11
        || u32::from_le_bytes(z[..4].try_into().expect("4")) as usize != z.len()
        || z[z.len() - 1] != 0xff
    {
        return Err(bad);
    }
    let mut out = Vec::new();
    let mut at = 10;
    let get = |from: usize, n: usize| {
        from.checked_add(n).and_then(|end| z.get(from..end)).ok_or(PayloadError::Bad("ziplist"))
    };
    while z[at] != 0xff {
        at += if z[at] == 0xfe { 5 } else { 1 };
        let enc = *z.get(at).ok_or(PayloadError::Bad("ziplist"))?;
        let (item, next) = match enc >> 6 {
            0 => {
                let n = usize::from(enc & 0x3f);
                (get(at + 1, n)?.to_vec(), at + 1 + n)
            }
            1 => {
                let n = usize::from(enc & 0x3f) << 8 | usize::from(*get(at + 1, 1)?.first().expect("1"));
                (get(at + 2, n)?.to_vec(), at + 2 + n)
            }
            2 => {
                let n = u32::from_be_bytes(get(at + 1, 4)?.try_into().expect("4")) as usize;
                (get(at + 5, n)?.to_vec(), at + 5 + n)
            }
            _ => {
                let (n, size): (i64, usize) = match enc {
                    0xc0 => (i64::from(i16::from_le_bytes(get(at + 1, 2)?.try_into().expect("2"))), 2),
                    0xd0 => (i64::from(i32::from_le_bytes(get(at + 1, 4)?.try_into().expect("4"))), 4),
                    0xe0 => (i64::from_le_bytes(get(at + 1, 8)?.try_into().expect("8")), 8),
                    0xf0 => {
                        let b = get(at + 1, 3)?;
                        (i64::from(i32::from_le_bytes([0, b[0], b[1], b[2]]) >> 8), 3)
                    }
                    0xfe => (i64::from(get(at + 1, 1)?[0] as i8), 1),
                    0xf1..=0xfd => (i64::from(enc & 0x0f) - 1, 0),
                    _ => return Err(bad),
                };
                (n.to_string().into_bytes(), at + 1 + size)
            }
        };
        out.push(item);
        at = next;
        if at >= z.len() {
            return Err(bad);
        }
    }
    if at != z.len() - 1 {
        return Err(bad);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(o: &Object) -> Object {
        let payload = dump_object(o);
        match undump(&payload, &Limits::default()).expect("checksum").expect("decodes") {
            Value::Object(o) => o,
            Value::String(_) => panic!("a typed value came back a string"),
        }
    }

    #[test]
    fn every_type_round_trips() {
        let limits = Limits::default();
        let small: Vec<Vec<u8>> = (0..10).map(|i| format!("v{i}").into_bytes()).collect();
        let big: Vec<Vec<u8>> =
            (0..3000).map(|i| format!("value-{i}-{}", "x".repeat(i % 40)).into_bytes()).collect();
        for items in [&small, &big] {
            let l = Object::List(List::from_items(items.iter().map(Vec::as_slice), -2));
            let Object::List(back) = round_trip(&l) else { panic!("type") };
            assert!(back.iter().eq(items.iter().map(Vec::as_slice)));
            let s = set_of(items.iter().map(Vec::as_slice), &limits).unwrap();
            assert_eq!(round_trip(&s).len(), items.len());
            let h = hash_of(items.iter().map(Vec::as_slice), &limits).unwrap();
            let Object::Hash(hb) = round_trip(&h) else { panic!("type") };
            assert_eq!(hb.get(&items[0]), Some(&items[1][..]));
            let pairs = items.iter().enumerate().map(|(i, m)| (m.clone(), i as f64 * 0.5 - 3.0)).collect();
            let z = zset_of(pairs, &limits).unwrap();
            let Object::ZSet(zb) = round_trip(&z) else { panic!("type") };
            assert_eq!(zb.score(&items[3]), Some(-1.5));
            assert_eq!(zb.len(), items.len());
        }
        let ints = set_of(["1", "-70000", "5"].iter().map(|s| s.as_bytes()), &limits).unwrap();
        let payload = dump_object(&ints);
        assert_eq!(payload[0], SET_INTSET);
        assert!(matches!(round_trip(&ints), Object::Set(Set::Ints(v)) if v == vec![-70000, 1, 5]));
    }

    #[test]
    fn a_list_splits_where_a_quicklist_of_8k_nodes_does() {
        // 8 KiB nodes: each 100-byte element costs 103 listpack bytes (2 header, 1 backlen), an
        // empty listpack 7; a node takes another while its bytes + 100 + 8 stay within 8192.
        let items: Vec<Vec<u8>> = (0..200).map(|_| vec![b'a'; 100]).collect();
        let l = List::from_items(items.iter().map(Vec::as_slice), -2);
        let mut out = Vec::new();
        write_list(&l, &mut out);
        let mut r = Reader::new(&out[1..]);
        let nodes = r.read_len().unwrap();
        let per_node = (8192 - 7 - 108) / 103 + 1;
        assert_eq!(per_node, 79);
        assert_eq!(nodes as usize, 200usize.div_ceil(per_node));
    }

    #[test]
    fn bad_payloads_are_refused() {
        let limits = Limits::default();
        let mut p = dump_string(b"hello");
        assert!(matches!(undump(&p, &limits), Some(Ok(Value::String(s))) if s == b"hello"));
        let last = p.len() - 1;
        p[last] ^= 1;
        assert!(undump(&p, &limits).is_none(), "checksum");
        let mut empty_set = vec![SET, 0];
        rdb::seal(&mut empty_set);
        assert!(matches!(undump(&empty_set, &limits), Some(Err(_))));
        let mut dup = vec![SET, 2];
        put_string(&mut dup, b"a");
        put_string(&mut dup, b"a");
        rdb::seal(&mut dup);
        assert!(matches!(undump(&dup, &limits), Some(Err(_))));
        let mut huge = vec![LIST, 0x80, 0xff, 0xff, 0xff, 0xff];
        rdb::seal(&mut huge);
        assert!(matches!(undump(&huge, &limits), Some(Err(_))));
    }

    #[test]
    fn ziplists_of_every_encoding_read() {
        // A ziplist of "ab", 7 (immediate), 300 (int16), -100000 (int24) and 2^40 (int64).
        let mut z = vec![0u8; 10];
        let entries: [&[u8]; 5] = [
            &[0, 0x02, b'a', b'b'],
            &[4, 0xf8],
            &[2, 0xc0, 0x2c, 0x01],
            &[4, 0xf0, 0x60, 0x79, 0xfe],
            &[5, 0xe0, 0, 0, 0, 0, 0, 1, 0, 0],
        ];
        for e in entries {
            z.extend_from_slice(e);
        }
        z.push(0xff);
        let len = z.len() as u32;
        z[..4].copy_from_slice(&len.to_le_bytes());
        let items = ziplist(&z).unwrap();
        let text: Vec<String> = items.iter().map(|i| String::from_utf8_lossy(i).into_owned()).collect();
        assert_eq!(text, ["ab", "7", "300", "-100000", "1099511627776"]);
        assert!(ziplist(&z[..z.len() - 1]).is_err());
    }
}
