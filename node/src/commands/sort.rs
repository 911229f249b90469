//! SORT and SORT_RO, as Redis 7.0's `sortCommandGeneric`: lists, sets and sorted sets, numeric
//! (`strtod`, ties by the element's bytes) or ALPHA, DESC, LIMIT, BY a pattern (`*` replaced by the
//! element, `->field` for a hash field; a pattern without `*`, such as `nosort`, does not sort),
//! GET patterns (`#`: the element), STORE into a list.
//!
//! Pattern keys are read from this node's store one by one (each read is consistent on its own,
//! as on a Redis whose other keys may change between two commands; inside a script or a
//! transaction nothing else runs). The router brings the keys a pattern names to one node first
//! when they may live on several (`router/src/cmd/multi.rs`). The sort is stable (glibc's
//! `qsort`, as Redis is built on Debian), except BY with LIMIT, which is Redis's partial
//! quicksort step for step.

use std::cmp::Ordering;

use bytes::Bytes;

use super::error::{CmdError, CmdResult, NOT_INTEGER, SYNTAX};
use super::frame::F;
use crate::store::Store;
use crate::store::object::{List, Object, ValueType};

type Handler = fn(&Store, &[Bytes]) -> CmdResult;

pub static TABLE: &[(&str, Handler)] =
    &[("sort", |s, a| sort(s, a, false)), ("sort_ro", |s, a| sort(s, a, true))];

/// What SORT was asked.
struct Opts {
    desc: bool,
    alpha: bool,
    limit: (i64, i64),
    store: Option<Bytes>,
    by: Option<Bytes>,
    dontsort: bool,
    gets: Vec<Bytes>,
}

fn parse(args: &[Bytes], readonly: bool) -> Result<Opts, CmdError> {
    let mut o = Opts {
        desc: false,
        alpha: false,
        limit: (0, -1),
        store: None,
        by: None,
        dontsort: false,
        gets: Vec::new(),
    };
    let mut j = 2;
    let eq = |a: &Bytes, w: &str| a.eq_ignore_ascii_case(w.as_bytes());
    while j < args.len() {
        let left = args.len() - j - 1;
        let a = &args[j];
        if eq(a, "asc") {
            o.desc = false;
        } else if eq(a, "desc") {
            o.desc = true;
        } else if eq(a, "alpha") {
            o.alpha = true;
        } else if eq(a, "limit") && left >= 2 {
            let n = |b: &Bytes| shoal_wire::num::parse_i64(b).ok_or(NOT_INTEGER);
            o.limit = (n(&args[j + 1])?, n(&args[j + 2])?);
            j += 2;
        } else if !readonly && eq(a, "store") && left >= 1 {
            o.store = Some(args[j + 1].clone());
            j += 1;
        } else if eq(a, "by") && left >= 1 {
            o.by = Some(args[j + 1].clone());
            o.dontsort = !args[j + 1].contains(&b'*');
            j += 1;
        } else if eq(a, "get") && left >= 1 {
            o.gets.push(args[j + 1].clone());
            j += 1;
        } else {
            return Err(SYNTAX);
        }
        j += 1;
    }
    Ok(o)
}

/// The destination of `SORT ... STORE dst` (scripts record it as written).
pub fn store_key(args: &[Bytes]) -> Option<Bytes> {
    shoal_wire::sort::layout(args, false).and_then(|l| l.store).map(|i| args[i].clone())
}

/// The value a pattern names for `subst` (`#`: the element itself).
fn lookup(store: &Store, pattern: &[u8], subst: &Bytes) -> Option<Bytes> {
    if pattern == b"#" {
        return Some(subst.clone());
    }
    let (key, field) = shoal_wire::sort::pattern_key(pattern, subst)?;
    match field {
        None => store.read_string(&key, |v| v.map(Bytes::copy_from_slice)).ok().flatten(),
        Some(f) => store
            .read_object(&key, ValueType::Hash, |o| match o {
                Some(Object::Hash(h)) => h.get(&f).map(Bytes::copy_from_slice),
                _ => None,
            })
            .ok()
            .flatten(),
    }
}

/// C's `strtod` as SORT checks it: the whole text (up to a NUL) must be a number, not NaN, not
/// out of range (the empty text is 0).
fn strtod(b: &[u8]) -> Option<f64> {
    let b = &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())];
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() {
        // No conversion, and the end pointer is at the terminating NUL: 0, accepted.
        return Some(0.0);
    }
    let t = s.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    if t.is_empty() {
        return None;
    }
    let (neg, body) = match t.as_bytes()[0] {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let lower = body.to_ascii_lowercase();
    let v = if lower.starts_with("0x") {
        shoal_wire::num::parse_hex_float(body.as_bytes())?
    } else if lower == "inf" || lower == "infinity" {
        f64::INFINITY
    } else {
        if !body.bytes().next().is_some_and(|c| c.is_ascii_digit() || c == b'.') {
            return None;
        }
        let v: f64 = body.parse().ok()?;
        // Out of range (ERANGE): an overflow to infinity, or digits that came out as zero.
        if v.is_infinite()
            || (v == 0.0
                && body.bytes().take_while(|c| *c != b'e' && *c != b'E').any(|c| (b'1'..=b'9').contains(&c)))
        {
            return None;
        }
        v
    };
    if v.is_nan() {
        return None;
    }
    Some(if neg { -v } else { v })
}

/// A C-string comparison (`strcoll` in the C locale): bytes up to the first NUL.
fn cstr_cmp(a: &[u8], b: &[u8]) -> Ordering {
    fn cut(s: &[u8]) -> &[u8] {
        s.iter().position(|&c| c == 0).map_or(s, |i| &s[..i])
    }
    cut(a).cmp(cut(b))
}

struct Item {
    obj: Bytes,
    score: f64,
    cmp: Option<Bytes>,
}

fn sort(store: &Store, args: &[Bytes], readonly: bool) -> CmdResult {
    let mut o = parse(args, readonly)?;
    let key = &args[1];
    let t = match store.type_of(key) {
        "none" => None,
        "list" => Some(ValueType::List),
        "set" => Some(ValueType::Set),
        "zset" => Some(ValueType::ZSet),
        _ => return Err(crate::store::StoreError::WrongType.into()),
    };
    if o.dontsort && t == Some(ValueType::Set) && o.store.is_some() {
        // Redis sorts a set anyway when it stores the result (its order would be arbitrary).
        o.dontsort = false;
        o.alpha = true;
        o.by = None;
    }
    let len = match t {
        None => 0,
        Some(t) => store.read_object(key, t, |v| v.map_or(0, |v| v.len()))? as i64,
    };
    let mut start = o.limit.0.max(0).min(len);
    let count = o.limit.1.max(-1).min(len);
    let mut end = if count < 0 { len - 1 } else { start + count - 1 };
    if start >= len {
        start = len - 1;
        end = len - 2;
    }
    if end >= len {
        end = len - 1;
    }
    // Lists and sorted sets that are not sorted: only the asked range is read, in (reversed)
    // order, and the range then starts at 0.
    let ordered = o.dontsort && matches!(t, Some(ValueType::List | ValueType::ZSet));
    let take = if ordered && (start != 0 || end != len - 1) {
        (end - start + 1).max(0) as usize
    } else {
        len as usize
    };
    let from = start.max(0) as usize;
    let elements: Vec<Bytes> = match t {
        None => Vec::new(),
        Some(_) if ordered && t == Some(ValueType::List) && end < start => Vec::new(),
        Some(t) => store.read_object(key, t, |v| match v {
            Some(Object::List(l)) if ordered => {
                if o.desc {
                    l.iter().rev().skip(from).take(take).map(Bytes::copy_from_slice).collect()
                } else {
                    l.iter().skip(from).take(take).map(Bytes::copy_from_slice).collect()
                }
            }
            Some(Object::ZSet(z)) if ordered => {
                if o.desc {
                    z.iter().rev().skip(from).take(take).map(|(m, _)| Bytes::copy_from_slice(m)).collect()
                } else {
                    z.iter().skip(from).take(take).map(|(m, _)| Bytes::copy_from_slice(m)).collect()
                }
            }
            Some(Object::List(l)) => l.iter().map(Bytes::copy_from_slice).collect(),
            Some(Object::Set(s)) => s.iter().map(|m| Bytes::copy_from_slice(&m)).collect(),
            Some(Object::ZSet(z)) => z.iter().map(|(m, _)| Bytes::copy_from_slice(m)).collect(),
            _ => Vec::new(),
        })?,
    };
    if ordered && (t == Some(ValueType::ZSet) || end >= start) {
        end -= start;
        start = 0;
    }
    let mut items: Vec<Item> = elements.into_iter().map(|obj| Item { obj, score: 0.0, cmp: None }).collect();
    let converted = o.dontsort || order(store, &o, &mut items, start, end);
    if !converted {
        return Err(CmdError::Text("ERR One or more scores can't be converted into double"));
    }
    let range: &[Item] = if end >= start && start >= 0 { &items[start as usize..=end as usize] } else { &[] };
    answer(store, &o, range)
}

/// The sorted range (or its `GET` lookups), as the reply or stored in `STORE`'s list.
fn answer(store: &Store, o: &Opts, range: &[Item]) -> CmdResult {
    let Some(dst) = &o.store else {
        let mut out = Vec::new();
        for it in range {
            if o.gets.is_empty() {
                out.push(F::bulk(it.obj.clone()));
            }
            for g in &o.gets {
                out.push(F::bulk_or_nil(lookup(store, g, &it.obj).as_deref()));
            }
        }
        return Ok(F::array(out));
    };
    let mut values: Vec<Bytes> = Vec::new();
    for it in range {
        if o.gets.is_empty() {
            values.push(it.obj.clone());
        }
        for g in &o.gets {
            values.push(lookup(store, g, &it.obj).unwrap_or_default());
        }
    }
    let n = values.len() as i64;
    store.with_keys(&[&dst[..]], |l| -> Result<(), CmdError> {
        l.delete(dst);
        if n > 0 {
            l.write_object(dst, ValueType::List, |slot, limits| {
                let list = List::from_items(values.iter().map(|v| &v[..]), limits.list_max_listpack_size);
                *slot = Some(Box::new(Object::List(list)));
            })?;
        }
        Ok(())
    })?;
    Ok(F::int(n))
}

/// Scores (or comparison strings) for the items, then their order: all of them, or with `BY`
/// and a `LIMIT` only the asked range, as Redis's partial quicksort does. False when a score
/// did not read as a number (the command's error once everything was looked up).
fn order(store: &Store, o: &Opts, items: &mut [Item], start: i64, end: i64) -> bool {
    let mut converted = true;
    for it in items.iter_mut() {
        let byval = match &o.by {
            Some(p) => match lookup(store, p, &it.obj) {
                Some(v) => v,
                None => continue,
            },
            None => it.obj.clone(),
        };
        if o.alpha {
            if o.by.is_some() {
                it.cmp = Some(byval);
            }
        } else {
            match strtod(&byval) {
                Some(s) => it.score = s,
                None => converted = false,
            }
        }
    }
    let (alpha, by, stores) = (o.alpha, o.by.is_some(), o.store.is_some());
    let cmp = |a: &Item, b: &Item| -> Ordering {
        let c = if !alpha {
            a.score.partial_cmp(&b.score).unwrap_or(Ordering::Equal).then_with(|| a.obj.cmp(&b.obj))
        } else if by {
            match (&a.cmp, &b.cmp) {
                (None, None) => Ordering::Equal,
                (None, _) => Ordering::Less,
                (_, None) => Ordering::Greater,
                (Some(x), Some(y)) if stores => x.cmp(y),
                (Some(x), Some(y)) => cstr_cmp(x, y),
            }
        } else if stores {
            a.obj.cmp(&b.obj)
        } else {
            cstr_cmp(&a.obj, &b.obj)
        };
        if o.desc { c.reverse() } else { c }
    };
    if o.by.is_some() && (start != 0 || end != items.len() as i64 - 1) && !items.is_empty() {
        let as_int = |a: &Item, b: &Item| cmp(a, b) as i32;
        super::pqsort::pqsort_range(items, &as_int, start.max(0) as usize, end.max(0) as usize);
    } else {
        items.sort_by(cmp);
    }
    converted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strtod_takes_what_c_takes() {
        assert_eq!(strtod(b"12"), Some(12.0));
        assert_eq!(strtod(b" -1.5e2"), Some(-150.0));
        assert_eq!(strtod(b""), Some(0.0));
        assert_eq!(strtod(b"0x10"), Some(16.0));
        assert_eq!(strtod(b"-0x1.8p1"), Some(-3.0));
        assert_eq!(strtod(b"inf"), Some(f64::INFINITY));
        assert_eq!(strtod(b"12\0junk"), Some(12.0));
        for bad in [&b"abc"[..], b"1x", b"nan", b"1e400", b" ", b"1e-400"] {
            assert_eq!(strtod(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
