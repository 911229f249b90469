//! Sorted-set commands on one key: ZADD ZINCRBY ZREM ZSCORE ZMSCORE ZCARD ZCOUNT ZLEXCOUNT
//! ZRANGE (BYSCORE BYLEX REV LIMIT WITHSCORES) ZRANGEBYSCORE ZREVRANGEBYSCORE ZRANGEBYLEX
//! ZREVRANGEBYLEX ZREVRANGE ZRANK ZREVRANK ZPOPMIN ZPOPMAX ZRANDMEMBER ZREMRANGEBYRANK
//! ZREMRANGEBYSCORE ZREMRANGEBYLEX ZSCAN. Scores print as Redis prints doubles (`%.17g`).

use std::ops::Bound;

use bytes::Bytes;
use shoal_wire::proto::Frame;

use super::args::{int_arg, positive_count, range as rank_range};
use super::double::{double, not_float, parse_score};
use super::error::{CmdError, CmdResult, SYNTAX, make_room};
use super::frame::F;
use super::random::{self, Whole};
use crate::store::Store;
use crate::store::object::{Limits, Object, ValueType, ZSet};

type Handler = fn(&Store, &[Bytes]) -> CmdResult;

/// The commands of this family by name (lower case), for the node's command index (`super::index`).
pub static TABLE: &[(&str, Handler)] = &[
    ("zadd", zadd),
    ("zincrby", zincrby),
    ("zrem", zrem),
    ("zscore", zscore),
    ("zmscore", zmscore),
    ("zcard", zcard),
    ("zcount", zcount),
    ("zlexcount", zlexcount),
    ("zrange", |s, a| zrange(s, a, Kind::Auto, Dir::Auto)),
    ("zrangebyscore", |s, a| zrange(s, a, Kind::Score, Dir::Forward)),
    ("zrevrangebyscore", |s, a| zrange(s, a, Kind::Score, Dir::Reverse)),
    ("zrangebylex", |s, a| zrange(s, a, Kind::Lex, Dir::Forward)),
    ("zrevrangebylex", |s, a| zrange(s, a, Kind::Lex, Dir::Reverse)),
    ("zrevrange", |s, a| zrange(s, a, Kind::Rank, Dir::Reverse)),
    ("zrank", |s, a| zrank(s, a, false)),
    ("zrevrank", |s, a| zrank(s, a, true)),
    ("zpopmin", |s, a| zpop(s, a, false)),
    ("zpopmax", |s, a| zpop(s, a, true)),
    ("zrandmember", zrandmember),
    ("zremrangebyrank", |s, a| zremrange(s, a, Kind::Rank)),
    ("zremrangebyscore", |s, a| zremrange(s, a, Kind::Score)),
    ("zremrangebylex", |s, a| zremrange(s, a, Kind::Lex)),
    ("zscan", |s, a| super::scan::scan_value(s, a, ValueType::ZSet)),
];

/// One end of a score range: `(x` exclusive, `-inf`/`+inf`, else inclusive.
fn score_bound(b: &[u8]) -> Option<Bound<f64>> {
    match b.strip_prefix(b"(") {
        Some(rest) => parse_score(rest).map(Bound::Excluded),
        None => parse_score(b).map(Bound::Included),
    }
}

fn score_range(min: &[u8], max: &[u8]) -> Result<(Bound<f64>, Bound<f64>), CmdError> {
    match (score_bound(min), score_bound(max)) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => Err(CmdError::Text("ERR min or max is not a float")),
    }
}

/// One end of a lex range: `-`, `+`, `[x` inclusive, `(x` exclusive.
#[derive(Debug, Clone)]
enum Lex {
    Min,
    Max,
    In(Bytes),
    Ex(Bytes),
}

fn lex_bound(b: &Bytes) -> Option<Lex> {
    match b.first()? {
        b'-' if b.len() == 1 => Some(Lex::Min),
        b'+' if b.len() == 1 => Some(Lex::Max),
        b'[' => Some(Lex::In(b.slice(1..))),
        b'(' => Some(Lex::Ex(b.slice(1..))),
        _ => None,
    }
}

fn lex_range(min: &Bytes, max: &Bytes) -> Result<(Lex, Lex), CmdError> {
    match (lex_bound(min), lex_bound(max)) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => Err(CmdError::Text("ERR min or max not valid string range item")),
    }
}

fn lex_gte_min(m: &[u8], min: &Lex) -> bool {
    match min {
        Lex::Min => true,
        Lex::Max => false,
        Lex::In(x) => m >= &x[..],
        Lex::Ex(x) => m > &x[..],
    }
}

fn lex_lte_max(m: &[u8], max: &Lex) -> bool {
    match max {
        Lex::Min => false,
        Lex::Max => true,
        Lex::In(x) => m <= &x[..],
        Lex::Ex(x) => m < &x[..],
    }
}

// --- access ------------------------------------------------------------------------------------

pub(super) fn read<R>(store: &Store, key: &[u8], f: impl FnOnce(Option<&ZSet>) -> R) -> Result<R, CmdError> {
    Ok(store.read_object(key, ValueType::ZSet, |o| {
        f(o.map(|o| match o {
            Object::ZSet(z) => z,
            _ => unreachable!("type checked by the store"),
        }))
    })?)
}

fn write<R>(
    store: &Store,
    key: &[u8],
    create: bool,
    f: impl FnOnce(Option<&mut ZSet>, &Limits) -> R,
) -> Result<R, CmdError> {
    Ok(store.write_object(key, ValueType::ZSet, |slot, limits| {
        if create && slot.is_none() {
            *slot = Some(Box::new(Object::empty(ValueType::ZSet)));
        }
        match slot.as_deref_mut() {
            Some(Object::ZSet(z)) => f(Some(z), limits),
            _ => f(None, limits),
        }
    })?)
}

// --- ZADD, ZINCRBY -----------------------------------------------------------------------------

/// ZADD's options.
#[derive(Default)]
pub(crate) struct AddFlags {
    pub nx: bool,
    pub xx: bool,
    pub gt: bool,
    pub lt: bool,
    pub ch: bool,
    pub incr: bool,
}

/// ZADD's options (`args` is the whole command) and where its score/member pairs start: the
/// options are the arguments after the key up to the first that is not one.
pub(crate) fn add_flags(args: &[Bytes]) -> (AddFlags, usize) {
    let mut fl = AddFlags::default();
    let mut i = 2;
    while i < args.len() {
        let flag = match &args[i][..] {
            a if a.eq_ignore_ascii_case(b"nx") => &mut fl.nx,
            a if a.eq_ignore_ascii_case(b"xx") => &mut fl.xx,
            a if a.eq_ignore_ascii_case(b"gt") => &mut fl.gt,
            a if a.eq_ignore_ascii_case(b"lt") => &mut fl.lt,
            a if a.eq_ignore_ascii_case(b"ch") => &mut fl.ch,
            a if a.eq_ignore_ascii_case(b"incr") => &mut fl.incr,
            _ => break,
        };
        *flag = true;
        i += 1;
    }
    (fl, i)
}

pub(super) fn zadd(store: &Store, args: &[Bytes]) -> CmdResult {
    let (fl, i) = add_flags(args);
    let elements = args.len() - i;
    if elements % 2 == 1 || elements == 0 {
        return Err(SYNTAX);
    }
    if fl.nx && fl.xx {
        return Err(CmdError::Text("ERR XX and NX options at the same time are not compatible"));
    }
    if [fl.gt, fl.lt, fl.nx].iter().filter(|&&f| f).count() > 1 {
        return Err(CmdError::Text("ERR GT, LT, and/or NX options at the same time are not compatible"));
    }
    if fl.incr && elements > 2 {
        return Err(CmdError::Text("ERR INCR option supports a single increment-element pair"));
    }
    let mut pairs = Vec::with_capacity(elements / 2);
    for p in args[i..].chunks(2) {
        pairs.push((parse_score(&p[0]).ok_or_else(not_float)?, &p[1]));
    }
    make_room(store)?;
    write(store, &args[1], !fl.xx, |z, limits| {
        let Some(z) = z else {
            return Ok(if fl.incr { F::nil() } else { F::int(0) });
        };
        let (mut added, mut changed) = (0, 0);
        let mut incr_result = None;
        for (score, member) in pairs {
            let set = z.upsert(member, limits, |current| match current {
                Some(_) if fl.nx => Ok(None),
                None if fl.xx => Ok(None),
                None => Ok(Some(score)),
                Some(cur) => {
                    let new = if fl.incr { cur + score } else { score };
                    if new.is_nan() {
                        return Err(CmdError::Text("ERR resulting score is not a number (NaN)"));
                    }
                    let skip = (fl.gt && new <= cur) || (fl.lt && new >= cur);
                    // An unchanged score is still INCR's reply, but no change for CH.
                    Ok((!skip).then_some(new))
                }
            })?;
            match set {
                Some((None, new)) => {
                    added += 1;
                    incr_result = Some(new);
                }
                Some((Some(cur), new)) => {
                    if new != cur {
                        changed += 1;
                    }
                    incr_result = Some(new);
                }
                None => {}
            }
        }
        Ok(if fl.incr {
            incr_result.map_or_else(F::nil, double)
        } else {
            F::int(if fl.ch { added + changed } else { added })
        })
    })?
}

fn zincrby(store: &Store, args: &[Bytes]) -> CmdResult {
    let by = parse_score(&args[2]).ok_or_else(not_float)?;
    make_room(store)?;
    write(store, &args[1], true, |z, limits| {
        let z = z.expect("created");
        let set = z.upsert(&args[3], limits, |cur| {
            let new = cur.unwrap_or(0.0) + by;
            if new.is_nan() {
                return Err(CmdError::Text("ERR resulting score is not a number (NaN)"));
            }
            Ok(Some(new))
        })?;
        let (_, new) = set.expect("ZINCRBY always writes");
        Ok(double(new))
    })?
}

fn zrem(store: &Store, args: &[Bytes]) -> CmdResult {
    write(store, &args[1], false, |z, _| {
        F::int(z.map_or(0, |z| args[2..].iter().filter(|m| z.remove(m)).count() as i64))
    })
}

fn zscore(store: &Store, args: &[Bytes]) -> CmdResult {
    read(store, &args[1], |z| z.and_then(|z| z.score(&args[2])).map_or_else(F::nil, double))
}

fn zmscore(store: &Store, args: &[Bytes]) -> CmdResult {
    read(store, &args[1], |z| {
        F::array(args[2..].iter().map(|m| z.and_then(|z| z.score(m)).map_or_else(F::nil, double)).collect())
    })
}

fn zcard(store: &Store, args: &[Bytes]) -> CmdResult {
    read(store, &args[1], |z| F::int(z.map_or(0, |z| z.len() as i64)))
}

fn zcount(store: &Store, args: &[Bytes]) -> CmdResult {
    let (min, max) = score_range(&args[2], &args[3])?;
    read(store, &args[1], |z| F::int(z.map_or(0, |z| z.score_range(min, max).count() as i64)))
}

fn zlexcount(store: &Store, args: &[Bytes]) -> CmdResult {
    let (min, max) = lex_range(&args[2], &args[3])?;
    read(store, &args[1], |z| {
        F::int(z.map_or(0, |z| {
            z.iter().filter(|(m, _)| lex_gte_min(m, &min) && lex_lte_max(m, &max)).count() as i64
        }))
    })
}

// --- ZRANGE and its older forms ----------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Auto,
    Rank,
    Score,
    Lex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dir {
    Auto,
    Forward,
    Reverse,
}

/// A parsed range: which members, in which order, with or without scores.
enum Spec {
    Rank(i64, i64),
    Score(Bound<f64>, Bound<f64>),
    Lex(Lex, Lex),
}

pub(super) struct Query {
    spec: Spec,
    reverse: bool,
    offset: i64,
    limit: i64,
    with_scores: bool,
}

/// Parses `key min max [options]` from `args[at]` (Redis's `zrangeGenericCommand`, same order of
/// checks and texts).
pub(super) fn parse_query(
    args: &[Bytes],
    at: usize,
    mut kind: Kind,
    mut dir: Dir,
    store_form: bool,
) -> Result<Query, CmdError> {
    let (mut with_scores, mut offset, mut limit) = (false, 0i64, -1i64);
    let mut j = at + 3;
    while j < args.len() {
        let left = args.len() - j - 1;
        let a = &args[j];
        if !store_form && a.eq_ignore_ascii_case(b"withscores") {
            with_scores = true;
        } else if a.eq_ignore_ascii_case(b"limit") && left >= 2 {
            offset = int_arg(&args[j + 1])?;
            limit = int_arg(&args[j + 2])?;
            j += 2;
        } else if dir == Dir::Auto && a.eq_ignore_ascii_case(b"rev") {
            dir = Dir::Reverse;
        } else if kind == Kind::Auto && a.eq_ignore_ascii_case(b"bylex") {
            kind = Kind::Lex;
        } else if kind == Kind::Auto && a.eq_ignore_ascii_case(b"byscore") {
            kind = Kind::Score;
        } else {
            return Err(SYNTAX);
        }
        j += 1;
    }
    let reverse = dir == Dir::Reverse;
    let kind = if kind == Kind::Auto { Kind::Rank } else { kind };
    if limit != -1 && kind == Kind::Rank {
        return Err(CmdError::Text(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if with_scores && kind == Kind::Lex {
        return Err(CmdError::Text("ERR syntax error, WITHSCORES not supported in combination with BYLEX"));
    }
    let (mut lo, mut hi) = (&args[at + 1], &args[at + 2]);
    if reverse && kind != Kind::Rank {
        std::mem::swap(&mut lo, &mut hi);
    }
    let spec = match kind {
        Kind::Rank | Kind::Auto => Spec::Rank(int_arg(lo)?, int_arg(hi)?),
        Kind::Score => {
            let (a, b) = score_range(lo, hi)?;
            Spec::Score(a, b)
        }
        Kind::Lex => {
            let (a, b) = lex_range(lo, hi)?;
            Spec::Lex(a, b)
        }
    };
    Ok(Query { spec, reverse, offset, limit, with_scores })
}

/// The members (and scores) a query selects, in reply order.
pub(super) fn select<'a>(z: &'a ZSet, q: &Query) -> Vec<(&'a [u8], f64)> {
    match &q.spec {
        Spec::Rank(start, end) => {
            let Some((a, b)) = rank_range(z.len(), *start, *end) else { return Vec::new() };
            let n = z.len();
            if q.reverse {
                z.by_rank(n - 1 - b, n - a).rev().collect()
            } else {
                z.by_rank(a, b + 1).collect()
            }
        }
        Spec::Score(min, max) => {
            let it = z.score_range(*min, *max);
            limit(if q.reverse { Box::new(it.rev()) } else { it }, q.offset, q.limit)
        }
        Spec::Lex(min, max) => {
            let (min, max) = (min.clone(), max.clone());
            let it = z.iter().filter(move |(m, _)| lex_gte_min(m, &min) && lex_lte_max(m, &max));
            let it: Box<dyn Iterator<Item = (&[u8], f64)>> =
                if q.reverse { Box::new(it.collect::<Vec<_>>().into_iter().rev()) } else { Box::new(it) };
            limit(it, q.offset, q.limit)
        }
    }
}

fn limit<'a>(
    it: Box<dyn Iterator<Item = (&'a [u8], f64)> + 'a>,
    offset: i64,
    limit: i64,
) -> Vec<(&'a [u8], f64)> {
    if offset < 0 {
        return Vec::new();
    }
    let it = it.skip(offset as usize);
    if limit < 0 { it.collect() } else { it.take(limit as usize).collect() }
}

fn reply_members(items: &[(&[u8], f64)], with_scores: bool) -> Frame {
    if !with_scores {
        return F::bulk_array(items.iter().map(|(m, _)| &m[..]));
    }
    let mut flat = Vec::with_capacity(items.len() * 2);
    for (m, s) in items {
        flat.push(F::bulk_from(m));
        flat.push(double(*s));
    }
    F::pairs(flat)
}

fn zrange(store: &Store, args: &[Bytes], kind: Kind, dir: Dir) -> CmdResult {
    let q = parse_query(args, 1, kind, dir, false)?;
    read(store, &args[1], |z| match z {
        None => F::array(Vec::new()),
        Some(z) => reply_members(&select(z, &q), q.with_scores),
    })
}

/// `ZRANK`/`ZREVRANK key member [WITHSCORE]` (WITHSCORE is Redis 7.2's: the rank and the score,
/// or a null array).
fn zrank(store: &Store, args: &[Bytes], reverse: bool) -> CmdResult {
    let with_score = match args.get(3) {
        None => false,
        Some(_) if args.len() > 4 => return Err(super::error::wrong_arity(&args[0])),
        Some(a) if a.eq_ignore_ascii_case(b"withscore") => true,
        Some(_) => return Err(SYNTAX),
    };
    read(store, &args[1], |z| {
        let z = z?;
        let r = z.rank(&args[2])?;
        let rank = F::int(if reverse { z.len() - 1 - r } else { r } as i64);
        Some(match z.score(&args[2]) {
            Some(s) if with_score => F::array(vec![rank, double(s)]),
            _ => rank,
        })
    })
    .map(|f| f.unwrap_or_else(if with_score { F::null_array } else { F::nil }))
}

fn zpop(store: &Store, args: &[Bytes], max: bool) -> CmdResult {
    if args.len() > 3 {
        return Err(SYNTAX);
    }
    let count = args.get(2).map(|c| positive_count(c)).transpose()?;
    write(store, &args[1], false, |z, _| {
        let Some(z) = z else { return F::array(Vec::new()) };
        let n = count.unwrap_or(1);
        let mut flat = Vec::new();
        for _ in 0..n {
            let Some((m, s)) = z.pop(max) else { break };
            flat.push(F::bulk(m));
            flat.push(double(s));
        }
        if count.is_some() { F::pairs(flat) } else { F::array(flat) }
    })
}

fn zrandmember(store: &Store, args: &[Bytes]) -> CmdResult {
    if args.len() == 2 {
        return read(store, &args[1], |z| {
            let z = z.filter(|z| !z.is_empty())?;
            let i = fastrand::usize(..z.len());
            z.by_rank(i, i + 1).next().map(|(m, _)| F::bulk_from(m))
        })
        .map(|f| f.unwrap_or_else(F::nil));
    }
    let count = random::parse(args, Some(b"withscores"))?;
    let with_scores = count.with;
    read(store, &args[1], |z| {
        let Some(z) = z else { return F::array(Vec::new()) };
        let all: Vec<(&[u8], f64)> = z.iter().collect();
        let picked = match random::picks(count.n, all.len(), Whole::Reverse, false) {
            Ok(p) => p,
            Err(e) => return F::error(e.to_string()),
        };
        let items: Vec<(&[u8], f64)> = picked.into_iter().map(|i| all[i]).collect();
        reply_members(&items, with_scores)
    })
}

fn zremrange(store: &Store, args: &[Bytes], kind: Kind) -> CmdResult {
    let spec = match kind {
        Kind::Score => {
            let (a, b) = score_range(&args[2], &args[3])?;
            Spec::Score(a, b)
        }
        Kind::Lex => {
            let (a, b) = lex_range(&args[2], &args[3])?;
            Spec::Lex(a, b)
        }
        _ => Spec::Rank(int_arg(&args[2])?, int_arg(&args[3])?),
    };
    let q = Query { spec, reverse: false, offset: 0, limit: -1, with_scores: false };
    write(store, &args[1], false, |z, _| {
        let Some(z) = z else { return F::int(0) };
        let gone: Vec<Vec<u8>> = select(z, &q).into_iter().map(|(m, _)| m.to_vec()).collect();
        for m in &gone {
            z.remove(m);
        }
        F::int(gone.len() as i64)
    })
}
