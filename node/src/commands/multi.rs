//! Commands over several keys: set algebra (SINTER SUNION SDIFF and their STORE forms,
//! SINTERCARD, SMOVE), list moves (LMOVE RPOPLPUSH LMPOP), sorted-set algebra (ZUNION ZINTER
//! ZDIFF and their STORE forms, ZINTERCARD, ZMPOP, ZRANGESTORE), RENAME RENAMENX COPY, BITOP and
//! LCS (in [`super::bits`]), and PFCOUNT PFMERGE (in `hll`).
//!
//! Each runs with every shard its keys live on locked ([`Store::with_keys`]), so on one node it is
//! atomic. When the router finds the keys on different nodes it sends their values along and the
//! node runs the same code on a scratch store, then writes back the keys the command changes
//! (`run_with_inputs`).

use std::collections::HashMap;

use bytes::Bytes;

use super::args::int_arg;
use super::double::{double, parse_score};
use super::error::{CmdError, CmdResult, SYNTAX};
use super::frame::F;
use super::zset::{Dir, Kind, parse_query, select};
use crate::store::object::{Object, Set, ValueType, ZSet};
use crate::store::{Locked, StoreError};

pub type Handler = fn(&mut Locked<'_>, &[Bytes]) -> CmdResult;

pub type KeysOf = fn(&[Bytes]) -> Result<Vec<Bytes>, CmdError>;

/// The handler of a multi-key command and how to find its keys (which also checks `numkeys`).
/// The commands of this family by name (lower case), for the node's command index (`super::index`).
pub static TABLE: &[(&str, (KeysOf, Handler))] = &[
    ("sinter", (all_keys, |l, a| set_op(l, a, Op::Inter, false))),
    ("sunion", (all_keys, |l, a| set_op(l, a, Op::Union, false))),
    ("sdiff", (all_keys, |l, a| set_op(l, a, Op::Diff, false))),
    ("sinterstore", (all_keys, |l, a| set_op(l, a, Op::Inter, true))),
    ("sunionstore", (all_keys, |l, a| set_op(l, a, Op::Union, true))),
    ("sdiffstore", (all_keys, |l, a| set_op(l, a, Op::Diff, true))),
    ("sintercard", (numkeys_at_1, sintercard)),
    ("smove", (first_two, smove)),
    ("lmove", (first_two, lmove)),
    ("rpoplpush", (first_two, rpoplpush)),
    ("lmpop", (numkeys_at_1, |l, a| mpop(l, a, ValueType::List))),
    ("zmpop", (numkeys_at_1, |l, a| mpop(l, a, ValueType::ZSet))),
    ("zunion", (znumkeys_at_1, |l, a| zset_op(l, a, Op::Union, false, false))),
    ("zinter", (znumkeys_at_1, |l, a| zset_op(l, a, Op::Inter, false, false))),
    ("zdiff", (znumkeys_at_1, |l, a| zset_op(l, a, Op::Diff, false, false))),
    ("zintercard", (znumkeys_at_1, |l, a| zset_op(l, a, Op::Inter, false, true))),
    ("zunionstore", (znumkeys_at_2, |l, a| zset_op(l, a, Op::Union, true, false))),
    ("zinterstore", (znumkeys_at_2, |l, a| zset_op(l, a, Op::Inter, true, false))),
    ("zdiffstore", (znumkeys_at_2, |l, a| zset_op(l, a, Op::Diff, true, false))),
    ("zrangestore", (first_two, zrangestore)),
    ("rename", (first_two, |l, a| rename(l, a, false))),
    ("renamenx", (first_two, |l, a| rename(l, a, true))),
    ("copy", (first_two, copy)),
    ("bitop", (super::bits::bitop_keys, super::bits::bitop)),
    ("lcs", (first_two, super::bits::lcs)),
    ("pfcount", (all_keys, super::hll::pfcount)),
    ("pfmerge", (all_keys, super::hll::pfmerge)),
    // Blocking commands: one attempt (the router's `Block` call waits and tries again when a
    // key is written); nothing to take answers a null array, as Redis at a timeout.
    ("blpop", (all_but_last, |l, a| bpop(l, a, ValueType::List, true))),
    ("brpop", (all_but_last, |l, a| bpop(l, a, ValueType::List, false))),
    ("bzpopmin", (all_but_last, |l, a| bpop(l, a, ValueType::ZSet, true))),
    ("bzpopmax", (all_but_last, |l, a| bpop(l, a, ValueType::ZSet, false))),
    ("blmpop", (|a| numkeys_at_1(&a[1..]), |l, a| mpop(l, &a[1..], ValueType::List))),
    ("bzmpop", (|a| numkeys_at_1(&a[1..]), |l, a| mpop(l, &a[1..], ValueType::ZSet))),
    ("blmove", (first_two, |l, a| null_array_if_nil(lmove(l, a)))),
    ("brpoplpush", (first_two, |l, a| null_array_if_nil(rpoplpush(l, a)))),
];

// --- keys ----------------------------------------------------------------------------------------

fn all_keys(args: &[Bytes]) -> Result<Vec<Bytes>, CmdError> {
    Ok(args[1..].to_vec())
}

/// Every argument but the name and the last (BLPOP's keys before its timeout).
fn all_but_last(args: &[Bytes]) -> Result<Vec<Bytes>, CmdError> {
    Ok(args[1..args.len() - 1].to_vec())
}

pub(super) fn first_two(args: &[Bytes]) -> Result<Vec<Bytes>, CmdError> {
    Ok(args[1..3.min(args.len())].to_vec())
}

/// `numkeys key ...` at argument 1 (SINTERCARD, LMPOP, ZMPOP), with Redis's texts.
fn numkeys_at_1(args: &[Bytes]) -> Result<Vec<Bytes>, CmdError> {
    let err = CmdError::Text("ERR numkeys should be greater than 0");
    let n = shoal_wire::num::parse_i64(&args[1]).filter(|&n| n >= 1).ok_or(err)? as usize;
    if n > args.len() - 2 {
        return Err(if args[0].eq_ignore_ascii_case(b"sintercard") {
            CmdError::Text("ERR Number of keys can't be greater than number of args")
        } else {
            SYNTAX
        });
    }
    Ok(args[2..2 + n].to_vec())
}

/// `numkeys key ...` of the ZUNION family at `at` (1, or 2 after a destination).
fn znumkeys(args: &[Bytes], at: usize) -> Result<Vec<Bytes>, CmdError> {
    let n = int_arg(&args[at])?;
    if n < 1 {
        return Err(CmdError::Owned(format!(
            "ERR at least 1 input key is needed for '{}' command",
            String::from_utf8_lossy(&args[0]).to_ascii_lowercase()
        )));
    }
    if n as usize > args.len() - at - 1 {
        return Err(SYNTAX);
    }
    let mut keys = args[1..at].to_vec();
    keys.extend_from_slice(&args[at + 1..at + 1 + n as usize]);
    Ok(keys)
}

fn znumkeys_at_1(args: &[Bytes]) -> Result<Vec<Bytes>, CmdError> {
    znumkeys(args, 1)
}

fn znumkeys_at_2(args: &[Bytes]) -> Result<Vec<Bytes>, CmdError> {
    znumkeys(args, 2)
}

// --- helpers -------------------------------------------------------------------------------------

fn read_set(l: &mut Locked<'_>, key: &[u8]) -> Result<Option<Set>, CmdError> {
    Ok(l.read_object(key, ValueType::Set, |o| match o {
        Some(Object::Set(s)) => Some(s.clone()),
        _ => None,
    })?)
}

/// Replaces `key` with `value` (deleting it when empty), TTL cleared, as the STORE forms do.
pub(super) fn store_object(l: &mut Locked<'_>, key: &[u8], value: Object) -> Result<usize, CmdError> {
    let n = value.len();
    l.delete(key);
    if n > 0 {
        let t = value.value_type();
        l.write_object(key, t, |slot, _| *slot = Some(Box::new(value)))?;
    }
    Ok(n)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Inter,
    Union,
    Diff,
}

// --- sets ----------------------------------------------------------------------------------------

fn set_op(l: &mut Locked<'_>, args: &[Bytes], op: Op, store: bool) -> CmdResult {
    let (dst, keys) = if store { (Some(&args[1]), &args[2..]) } else { (None, &args[1..]) };
    let mut sets = Vec::with_capacity(keys.len());
    for k in keys {
        sets.push(read_set(l, k)?);
    }
    let limits = l.limits();
    let mut out = Set::default();
    match op {
        Op::Inter => {
            if sets.iter().all(Option::is_some) {
                let mut sets: Vec<Set> = sets.into_iter().flatten().collect();
                // Walk the smallest set, as Redis does (its order is the reply's).
                let smallest = (0..sets.len()).min_by_key(|&i| sets[i].len()).unwrap_or(0);
                let base = sets.swap_remove(smallest);
                for m in base.iter() {
                    if sets.iter().all(|s| s.contains(&m)) {
                        out.add(&m, &limits);
                    }
                }
            }
        }
        Op::Union => {
            for s in sets.iter().flatten() {
                for m in s.iter() {
                    out.add(&m, &limits);
                }
            }
        }
        Op::Diff => {
            if let Some(Some(first)) = sets.first() {
                for m in first.iter() {
                    if !sets[1..].iter().flatten().any(|s| s.contains(&m)) {
                        out.add(&m, &limits);
                    }
                }
            }
        }
    }
    match dst {
        Some(dst) => Ok(F::int(store_object(l, dst, Object::Set(out))? as i64)),
        None => Ok(F::set(super::set::members(&out))),
    }
}

fn sintercard(l: &mut Locked<'_>, args: &[Bytes]) -> CmdResult {
    let keys = numkeys_at_1(args)?;
    let mut limit = 0usize;
    let mut i = 2 + keys.len();
    while i < args.len() {
        if args[i].eq_ignore_ascii_case(b"limit") && i + 1 < args.len() {
            limit = super::args::non_negative(&args[i + 1], "ERR LIMIT can't be negative")?;
            i += 2;
        } else {
            return Err(SYNTAX);
        }
    }
    let mut sets = Vec::with_capacity(keys.len());
    for k in &keys {
        sets.push(read_set(l, k)?);
    }
    if sets.iter().any(Option::is_none) {
        return Ok(F::int(0));
    }
    let mut sets: Vec<Set> = sets.into_iter().flatten().collect();
    let smallest = (0..sets.len()).min_by_key(|&i| sets[i].len()).unwrap_or(0);
    let base = sets.swap_remove(smallest);
    let mut n = 0;
    for m in base.iter() {
        if sets.iter().all(|s| s.contains(&m)) {
            n += 1;
            if n == limit {
                break;
            }
        }
    }
    Ok(F::int(n as i64))
}

fn smove(l: &mut Locked<'_>, args: &[Bytes]) -> CmdResult {
    let (src, dst, m) = (&args[1], &args[2], &args[3]);
    match l.value_type(src) {
        None => return Ok(F::int(0)),
        Some(ValueType::Set) => {}
        Some(_) => return Err(StoreError::WrongType.into()),
    }
    if l.value_type(dst).is_some_and(|t| t != ValueType::Set) {
        return Err(StoreError::WrongType.into());
    }
    if src == dst {
        return Ok(F::int(i64::from(read_set(l, src)?.is_some_and(|s| s.contains(m)))));
    }
    let removed = l.write_object(src, ValueType::Set, |slot, _| match slot.as_deref_mut() {
        Some(Object::Set(s)) => s.remove(m),
        _ => false,
    })?;
    if !removed {
        return Ok(F::int(0));
    }
    l.write_object(dst, ValueType::Set, |slot, limits| {
        let o = slot.get_or_insert_with(|| Box::new(Object::empty(ValueType::Set)));
        if let Object::Set(s) = &mut **o {
            s.add(m, limits);
        }
    })?;
    Ok(F::int(1))
}

// --- lists ---------------------------------------------------------------------------------------

fn side(b: &[u8]) -> Result<bool, CmdError> {
    shoal_wire::cross::side(b).ok_or(SYNTAX)
}

fn lmove(l: &mut Locked<'_>, args: &[Bytes]) -> CmdResult {
    let (from_left, to_left) = (side(&args[3])?, side(&args[4])?);
    move_element(l, &args[1], &args[2], from_left, to_left)
}

fn rpoplpush(l: &mut Locked<'_>, args: &[Bytes]) -> CmdResult {
    move_element(l, &args[1], &args[2], false, true)
}

fn move_element(l: &mut Locked<'_>, src: &[u8], dst: &[u8], from_left: bool, to_left: bool) -> CmdResult {
    match l.value_type(src) {
        None => return Ok(F::nil()),
        Some(ValueType::List) => {}
        Some(_) => return Err(StoreError::WrongType.into()),
    }
    if l.value_type(dst).is_some_and(|t| t != ValueType::List) {
        return Err(StoreError::WrongType.into());
    }
    let v = l.write_object(src, ValueType::List, |slot, _| match slot.as_deref_mut() {
        Some(Object::List(list)) => list.pop(from_left),
        _ => None,
    })?;
    let Some(v) = v else { return Ok(F::nil()) };
    l.write_object(dst, ValueType::List, |slot, limits| {
        let o = slot.get_or_insert_with(|| Box::new(Object::empty(ValueType::List)));
        if let Object::List(list) = &mut **o {
            list.fill = limits.list_max_listpack_size;
            list.push(&v, to_left);
        }
    })?;
    Ok(F::bulk_from(&v))
}

/// LMPOP / ZMPOP: pop from the first non-empty key.
fn mpop(l: &mut Locked<'_>, args: &[Bytes], t: ValueType) -> CmdResult {
    let keys = numkeys_at_1(args)?;
    let at = 2 + keys.len();
    let Some(dir) = args.get(at) else { return Err(SYNTAX) };
    let front = match t {
        ValueType::List => side(dir)?,
        _ if dir.eq_ignore_ascii_case(b"min") => true,
        _ if dir.eq_ignore_ascii_case(b"max") => false,
        _ => return Err(SYNTAX),
    };
    let mut count = None;
    let mut j = at + 1;
    while j < args.len() {
        if count.is_none() && args[j].eq_ignore_ascii_case(b"count") && j + 1 < args.len() {
            let n = shoal_wire::num::parse_i64(&args[j + 1]).filter(|&n| n >= 1);
            count = Some(n.ok_or(CmdError::Text("ERR count should be greater than 0"))? as usize);
            j += 2;
        } else {
            return Err(SYNTAX);
        }
    }
    let count = count.unwrap_or(1);
    for k in &keys {
        match l.value_type(k) {
            None => continue,
            Some(found) if found != t => return Err(StoreError::WrongType.into()),
            Some(_) => {}
        }
        let popped = l.write_object(k, t, |slot, _| match slot.as_deref_mut() {
            Some(Object::List(list)) => {
                F::bulk_array(super::list::pop_n(list, count, front).iter().map(|v| &**v))
            }
            Some(Object::ZSet(z)) => {
                let mut items = Vec::new();
                for _ in 0..count {
                    let Some((m, s)) = z.pop(!front) else { break };
                    items.push(F::array(vec![F::bulk(m), double(s)]));
                }
                F::array(items)
            }
            _ => F::array(Vec::new()),
        })?;
        return Ok(F::array(vec![F::bulk_from(k), popped]));
    }
    Ok(F::null_array())
}

/// BLPOP, BRPOP, BZPOPMIN, BZPOPMAX: the first key (in argument order) that holds something
/// gives one element: `[key, element]`, or `[key, member, score]`; none: a null array.
fn bpop(l: &mut Locked<'_>, args: &[Bytes], t: ValueType, front: bool) -> CmdResult {
    for k in &args[1..args.len() - 1] {
        match l.value_type(k) {
            None => continue,
            Some(found) if found != t => return Err(StoreError::WrongType.into()),
            Some(_) => {}
        }
        let popped = l.write_object(k, t, |slot, _| match slot.as_deref_mut() {
            Some(Object::List(list)) => list.pop(front).map(|v| vec![F::bulk_from(&v)]),
            Some(Object::ZSet(z)) => z.pop(!front).map(|(m, s)| vec![F::bulk(m), double(s)]),
            _ => None,
        })?;
        if let Some(items) = popped {
            let mut reply = vec![F::bulk_from(k)];
            reply.extend(items);
            return Ok(F::array(reply));
        }
    }
    Ok(F::null_array())
}

/// A blocking move that found nothing answers a null array (Redis's timeout reply), not LMOVE's
/// null.
fn null_array_if_nil(r: CmdResult) -> CmdResult {
    use shoal_wire::proto::frame::Kind as K;
    r.map(|f| if matches!(f.kind, Some(K::Nil(_))) { F::null_array() } else { f })
}

// --- sorted sets ---------------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

/// The (member, score) pairs of a sorted set or a set (score 1), `None` when missing.
/// Members with their scores.
type Scored = Vec<(Vec<u8>, f64)>;

fn read_scored(l: &mut Locked<'_>, key: &[u8]) -> Result<Option<Scored>, CmdError> {
    match l.value_type(key) {
        None => Ok(None),
        Some(ValueType::ZSet) => Ok(l.read_object(key, ValueType::ZSet, |o| match o {
            Some(Object::ZSet(z)) => Some(z.iter().map(|(m, s)| (m.to_vec(), s)).collect()),
            _ => None,
        })?),
        Some(ValueType::Set) => Ok(l.read_object(key, ValueType::Set, |o| match o {
            Some(Object::Set(s)) => Some(s.iter().map(|m| (m.to_vec(), 1.0)).collect()),
            _ => None,
        })?),
        Some(_) => Err(StoreError::WrongType.into()),
    }
}

/// ZUNION, ZINTER, ZDIFF, their STORE forms and ZINTERCARD (`store`: the result goes to
/// `args[1]`; `card_only`: only its size is answered).
fn zset_op(l: &mut Locked<'_>, args: &[Bytes], op: Op, store: bool, card_only: bool) -> CmdResult {
    let at = if store { 2 } else { 1 };
    let keys = znumkeys(args, at)?;
    let sources = &keys[at - 1..];
    let mut inputs = Vec::with_capacity(sources.len());
    for k in sources {
        inputs.push(read_scored(l, k)?);
    }
    let o = ZOptions::parse(args, at + 1 + sources.len(), sources.len(), op, store, card_only)?;
    let result = combine(op, &inputs, &o, card_only);
    if card_only {
        return Ok(F::int(result.len() as i64));
    }
    let limits = l.limits();
    let mut z = ZSet::default();
    for (m, s) in &result {
        z.insert(m, *s, &limits);
    }
    if store {
        return Ok(F::int(store_object(l, &args[1], Object::ZSet(z))? as i64));
    }
    let mut flat = Vec::with_capacity(z.len() * 2);
    for (m, s) in z.iter() {
        flat.push(F::bulk_from(m));
        if o.with_scores {
            flat.push(double(s));
        }
    }
    Ok(if o.with_scores { F::pairs(flat) } else { F::array(flat) })
}

/// The options after a sorted-set operation's keys: WEIGHTS, AGGREGATE, WITHSCORES, LIMIT (each
/// where the command takes it).
struct ZOptions {
    weights: Vec<f64>,
    agg: Aggregate,
    with_scores: bool,
    limit: usize,
}

impl ZOptions {
    /// Reads the options from `args[j..]`, for `n` input keys.
    fn parse(
        args: &[Bytes],
        mut j: usize,
        n: usize,
        op: Op,
        store: bool,
        card_only: bool,
    ) -> Result<Self, CmdError> {
        let mut o = ZOptions { weights: vec![1.0; n], agg: Aggregate::Sum, with_scores: false, limit: 0 };
        while j < args.len() {
            let left = args.len() - j;
            let a = &args[j];
            if op != Op::Diff && !card_only && left > n && a.eq_ignore_ascii_case(b"weights") {
                for (i, w) in o.weights.iter_mut().enumerate() {
                    *w = parse_score(&args[j + 1 + i])
                        .ok_or(CmdError::Text("ERR weight value is not a float"))?;
                }
                j += 1 + n;
            } else if op != Op::Diff && !card_only && left >= 2 && a.eq_ignore_ascii_case(b"aggregate") {
                let how = &args[j + 1];
                o.agg = if how.eq_ignore_ascii_case(b"sum") {
                    Aggregate::Sum
                } else if how.eq_ignore_ascii_case(b"min") {
                    Aggregate::Min
                } else if how.eq_ignore_ascii_case(b"max") {
                    Aggregate::Max
                } else {
                    return Err(SYNTAX);
                };
                j += 2;
            } else if !store && !card_only && a.eq_ignore_ascii_case(b"withscores") {
                o.with_scores = true;
                j += 1;
            } else if card_only && left >= 2 && a.eq_ignore_ascii_case(b"limit") {
                o.limit = super::args::non_negative(&args[j + 1], "ERR LIMIT can't be negative")?;
                j += 2;
            } else {
                return Err(SYNTAX);
            }
        }
        Ok(o)
    }
}

/// The members of `op` over `inputs` (missing keys: `None`) with their weighed, aggregated
/// scores; ZINTERCARD's LIMIT stops the intersection early.
fn combine(op: Op, inputs: &[Option<Scored>], o: &ZOptions, card_only: bool) -> HashMap<Vec<u8>, f64> {
    let weigh = |s: f64, w: f64| {
        let v = s * w;
        if v.is_nan() { 0.0 } else { v }
    };
    let combine = |a: f64, b: f64| match o.agg {
        Aggregate::Sum => {
            let v = a + b;
            if v.is_nan() { 0.0 } else { v }
        }
        Aggregate::Min => a.min(b),
        Aggregate::Max => a.max(b),
    };
    let weights = &o.weights;
    let mut result: HashMap<Vec<u8>, f64> = HashMap::new();
    match op {
        Op::Union => {
            for (input, &w) in inputs.iter().zip(weights) {
                for (m, s) in input.iter().flatten() {
                    let v = weigh(*s, w);
                    result.entry(m.clone()).and_modify(|cur| *cur = combine(*cur, v)).or_insert(v);
                }
            }
        }
        Op::Inter => {
            if inputs.iter().all(Option::is_some) {
                let maps: Vec<HashMap<&[u8], f64>> = inputs
                    .iter()
                    .map(|i| i.as_ref().expect("checked").iter().map(|(m, s)| (&m[..], *s)).collect())
                    .collect();
                let first = inputs[0].as_ref().expect("checked");
                'members: for (m, s) in first {
                    let mut acc = weigh(*s, weights[0]);
                    for (map, &w) in maps.iter().zip(weights).skip(1) {
                        match map.get(&m[..]) {
                            Some(&s) => acc = combine(acc, weigh(s, w)),
                            None => continue 'members,
                        }
                    }
                    result.insert(m.clone(), acc);
                    if card_only && o.limit != 0 && result.len() == o.limit {
                        break;
                    }
                }
            }
        }
        Op::Diff => {
            if let Some(Some(first)) = inputs.first() {
                for (m, s) in first {
                    if !inputs[1..].iter().flatten().any(|i| i.iter().any(|(x, _)| x == m)) {
                        result.insert(m.clone(), *s);
                    }
                }
            }
        }
    }
    result
}

fn zrangestore(l: &mut Locked<'_>, args: &[Bytes]) -> CmdResult {
    let q = parse_query(args, 2, Kind::Auto, Dir::Auto, true)?;
    let limits = l.limits();
    let z = l.read_object(&args[2], ValueType::ZSet, |o| match o {
        Some(Object::ZSet(z)) => {
            let mut out = ZSet::default();
            for (m, s) in select(z, &q) {
                out.insert(m, s, &limits);
            }
            out
        }
        _ => ZSet::default(),
    })?;
    Ok(F::int(store_object(l, &args[1], Object::ZSet(z))? as i64))
}

// --- keyspace ------------------------------------------------------------------------------------

fn rename(l: &mut Locked<'_>, args: &[Bytes], nx: bool) -> CmdResult {
    let (src, dst) = (&args[1], &args[2]);
    let Some((value, expire_at, t)) = l.export(src) else {
        return Err(CmdError::Text("ERR no such key"));
    };
    if src == dst {
        return Ok(if nx { F::int(0) } else { F::ok() });
    }
    if nx && l.value_type(dst).is_some() {
        return Ok(F::int(0));
    }
    l.restore(dst, &value, expire_at, t)?;
    l.delete(src);
    Ok(if nx { F::int(1) } else { F::ok() })
}

fn copy(l: &mut Locked<'_>, args: &[Bytes]) -> CmdResult {
    let (src, dst) = (&args[1], &args[2]);
    let mut replace = false;
    let mut j = 3;
    while j < args.len() {
        if args[j].eq_ignore_ascii_case(b"replace") {
            replace = true;
            j += 1;
        } else if args[j].eq_ignore_ascii_case(b"db") && j + 1 < args.len() {
            let db = int_arg(&args[j + 1])?;
            if db != 0 {
                return Err(CmdError::Text("ERR DB index is out of range"));
            }
            j += 2;
        } else {
            return Err(SYNTAX);
        }
    }
    if src == dst {
        return Err(CmdError::Text("ERR source and destination objects are the same"));
    }
    let Some((value, expire_at, t)) = l.export(src) else { return Ok(F::int(0)) };
    if !replace && l.value_type(dst).is_some() {
        return Ok(F::int(0));
    }
    l.restore(dst, &value, expire_at, t)?;
    Ok(F::int(1))
}
