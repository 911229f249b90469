//! Hash field expiry, Redis 7.4's: HEXPIRE HPEXPIRE HEXPIREAT HPEXPIREAT HTTL HPTTL HEXPIRETIME
//! HPEXPIRETIME HPERSIST; and Redis 8.0's HGETDEL HGETEX HSETEX. Replies, error texts and the
//! order of their checks are redis-server 8.0's (`router/tests/differential/redis8/`).
//!
//! The times live in the hash itself (`store/object/hash.rs`); the store removes a hash's expired
//! fields before any command sees it and actively in the background (`store/shard.rs`), so the
//! commands here never meet one.

use bytes::Bytes;

use super::args::int_arg;
use super::error::{CmdError, CmdResult, make_room, wrong_arity};
use super::frame::F;
use crate::store::Store;
use crate::store::object::{Hash, Object, ValueType};

type Handler = fn(&Store, &[Bytes]) -> CmdResult;

pub static TABLE: &[(&str, Handler)] = &[
    ("hexpire", |s, a| expire(s, a, Unit::Seconds, true)),
    ("hpexpire", |s, a| expire(s, a, Unit::Millis, true)),
    ("hexpireat", |s, a| expire(s, a, Unit::Seconds, false)),
    ("hpexpireat", |s, a| expire(s, a, Unit::Millis, false)),
    ("httl", |s, a| ttl(s, a, Unit::Seconds, true)),
    ("hpttl", |s, a| ttl(s, a, Unit::Millis, true)),
    ("hexpiretime", |s, a| ttl(s, a, Unit::Seconds, false)),
    ("hpexpiretime", |s, a| ttl(s, a, Unit::Millis, false)),
    ("hpersist", persist),
    ("hgetdel", getdel),
    ("hgetex", getex),
    ("hsetex", setex),
];

/// The latest field time Redis accepts (its `HFE_MAX_ABS_TIME_MSEC`, Unix ms).
const MAX_TIME_MS: u64 = 0x0000_FFFF_FFFF_FFFF >> 2;

/// Per-field answers (Redis's `HFE_*` / `HSETEX_*` codes).
const NO_FIELD: i64 = -2;
const NO_TTL: i64 = -1;
const NOT_MET: i64 = 0;
const DONE: i64 = 1;
const DELETED: i64 = 2;

const FIELDS_MISSING: CmdError =
    CmdError::Text("ERR Mandatory argument FIELDS is missing or not at the right position");
const FIELDS_MISMATCH: CmdError =
    CmdError::Text("ERR The `numfields` parameter must match the number of arguments");
const FIELDS_POSITIVE: &str = "ERR Number of fields must be a positive integer";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Unit {
    Seconds,
    Millis,
}

/// HEXPIRE's condition on a field's current time.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cond {
    Always,
    Nx,
    Xx,
    Gt,
    Lt,
}

/// A field time argument as Unix ms: relative to `base` (0 for the `AT` forms), checked as Redis
/// checks it (`parseExpireTime`).
fn expire_time(name: &[u8], arg: &[u8], unit: Unit, base: u64) -> Result<u64, CmdError> {
    let val = int_arg(arg)?;
    if val < 0 {
        return Err(CmdError::Text("ERR invalid expire time, must be >= 0"));
    }
    let invalid = || {
        CmdError::Owned(format!(
            "ERR invalid expire time in '{}' command",
            String::from_utf8_lossy(name).to_ascii_lowercase()
        ))
    };
    let mut ms = val as u64;
    if unit == Unit::Seconds {
        if ms > MAX_TIME_MS / 1000 {
            return Err(invalid());
        }
        ms *= 1000;
    }
    if ms > MAX_TIME_MS.saturating_sub(base) {
        return Err(invalid());
    }
    Ok(ms + base)
}

/// HGETEX's and HSETEX's time options: EX and PX count from `now`, EXAT and PXAT from 0.
fn time_option(word: &[u8], now: u64) -> Option<(Unit, u64)> {
    [
        (&b"EX"[..], Unit::Seconds, now),
        (b"PX", Unit::Millis, now),
        (b"EXAT", Unit::Seconds, 0),
        (b"PXAT", Unit::Millis, 0),
    ]
    .into_iter()
    .find(|(w, ..)| word.eq_ignore_ascii_case(w))
    .map(|(_, unit, base)| (unit, base))
}

/// `FIELDS numfields field ...` with FIELDS at `at`: the fields, checked in Redis's order.
fn fields_at<'a>(args: &'a [Bytes], at: usize, count_error: &'static str) -> Result<&'a [Bytes], CmdError> {
    if !args.get(at).is_some_and(|a| a.eq_ignore_ascii_case(b"FIELDS")) {
        return Err(FIELDS_MISSING);
    }
    let n = args.get(at + 1).and_then(|a| shoal_wire::num::parse_i64(a));
    let Some(n) = n.filter(|&n| n >= 1) else { return Err(CmdError::Text(count_error)) };
    if n as usize != args.len().saturating_sub(at + 2) {
        return Err(FIELDS_MISMATCH);
    }
    Ok(&args[at + 2..])
}

fn hash_of(slot: &mut Option<Box<Object>>) -> Option<&mut Hash> {
    match slot.as_deref_mut() {
        Some(Object::Hash(h)) => Some(h),
        _ => None,
    }
}

fn ints(codes: impl Iterator<Item = i64>) -> shoal_wire::proto::Frame {
    F::array(codes.map(F::int).collect())
}

/// Gives `field` the time `at` under `cond` (Redis's `hashTypeSetEx`): a time at or before `now`
/// deletes the field instead.
fn set_time(h: &mut Hash, field: &[u8], at: u64, cond: Cond, now: u64) -> i64 {
    if h.get(field).is_none() {
        return NO_FIELD;
    }
    let not_met = match (h.field_ttl(field), cond) {
        (None, Cond::Xx | Cond::Gt) => true,
        (Some(_), Cond::Nx) => true,
        (Some(prev), Cond::Gt) => prev >= at,
        (Some(prev), Cond::Lt) => prev <= at,
        _ => false,
    };
    if not_met {
        return NOT_MET;
    }
    if at <= now {
        h.remove(field);
        return DELETED;
    }
    h.set_field_ttl(field, at);
    DONE
}

/// `HEXPIRE key time [NX|XX|GT|LT] FIELDS numfields field ...` and its three siblings.
fn expire(store: &Store, args: &[Bytes], unit: Unit, relative: bool) -> CmdResult {
    let now = store.now_ms();
    store.write_object(&args[1], ValueType::Hash, |slot, _| {
        let at = expire_time(&args[0], &args[2], unit, if relative { now } else { 0 })?;
        let word = |w: &[u8]| args[3].eq_ignore_ascii_case(w);
        let cond = [(b"NX", Cond::Nx), (b"XX", Cond::Xx), (b"GT", Cond::Gt), (b"LT", Cond::Lt)]
            .into_iter()
            .find_map(|(w, c)| word(w).then_some(c))
            .unwrap_or(Cond::Always);
        let at_fields = if cond == Cond::Always { 3 } else { 4 };
        let fields = fields_at(args, at_fields, "ERR Parameter `numFields` should be greater than 0")?;
        let Some(h) = hash_of(slot) else { return Ok(ints(fields.iter().map(|_| NO_FIELD))) };
        h.allow_field_ttls();
        Ok(ints(fields.iter().map(|f| set_time(h, f, at, cond, now))))
    })?
}

/// `HTTL key FIELDS numfields field ...` and its three siblings (`relative`: a TTL from now,
/// else the Unix time). Seconds round up, as Redis rounds them.
fn ttl(store: &Store, args: &[Bytes], unit: Unit, relative: bool) -> CmdResult {
    let now = store.now_ms();
    let base = if relative { now } else { 0 };
    store.read_object(&args[1], ValueType::Hash, |o| {
        let fields = fields_at(args, 2, FIELDS_POSITIVE)?;
        let h = match o {
            Some(Object::Hash(h)) => h,
            _ => return Ok(ints(fields.iter().map(|_| NO_FIELD))),
        };
        Ok(ints(fields.iter().map(|f| match (h.get(f), h.field_ttl(f)) {
            (None, _) => NO_FIELD,
            (Some(_), None) => NO_TTL,
            (Some(_), Some(at)) if at <= now => NO_FIELD,
            (Some(_), Some(at)) if unit == Unit::Seconds => ((at + 999 - base) / 1000) as i64,
            (Some(_), Some(at)) => (at - base) as i64,
        })))
    })?
}

/// `HPERSIST key FIELDS numfields field ...`: 1 per field whose time is dropped, -1 for one
/// without a time, -2 for a missing one.
fn persist(store: &Store, args: &[Bytes]) -> CmdResult {
    store.write_object(&args[1], ValueType::Hash, |slot, _| {
        let fields = fields_at(args, 2, FIELDS_POSITIVE)?;
        let Some(h) = hash_of(slot) else { return Ok(ints(fields.iter().map(|_| NO_FIELD))) };
        Ok(ints(fields.iter().map(|f| {
            if h.get(f).is_none() {
                NO_FIELD
            } else if h.persist_field(f) {
                DONE
            } else {
                NO_TTL
            }
        })))
    })?
}

/// `HGETDEL key FIELDS numfields field ...` (Redis 8.0): the values, then the fields deleted.
fn getdel(store: &Store, args: &[Bytes]) -> CmdResult {
    store.write_object(&args[1], ValueType::Hash, |slot, _| {
        let fields = fields_at(args, 2, FIELDS_POSITIVE)?;
        let mut h = hash_of(slot);
        let values = fields.iter().map(|f| {
            let h = h.as_deref_mut()?;
            let v = h.get(f).map(Bytes::copy_from_slice);
            h.remove(f);
            v
        });
        Ok(F::array(values.map(|v| v.map_or_else(F::nil, F::bulk)).collect()))
    })?
}

/// What HGETEX does to the fields it returns.
#[derive(Clone, Copy)]
enum GetExAction {
    Nothing,
    Persist,
    Expire(u64),
}

/// `HGETEX key [EX s|PX ms|EXAT ts|PXAT ts|PERSIST] FIELDS numfields field ...` (Redis 8.0).
fn getex(store: &Store, args: &[Bytes]) -> CmdResult {
    let now = store.now_ms();
    store.write_object(&args[1], ValueType::Hash, |slot, _| {
        let word = |w: &[u8]| args[2].eq_ignore_ascii_case(w);
        let (action, at_fields) = match time_option(&args[2], now) {
            Some((unit, base)) => (GetExAction::Expire(expire_time(&args[0], &args[3], unit, base)?), 4),
            None if word(b"PERSIST") => (GetExAction::Persist, 3),
            None => (GetExAction::Nothing, 2),
        };
        if at_fields + 1 >= args.len() {
            return Err(wrong_arity(&args[0]));
        }
        let fields = fields_at(args, at_fields, FIELDS_POSITIVE)?;
        let Some(h) = hash_of(slot) else { return Ok(F::array(fields.iter().map(|_| F::nil()).collect())) };
        if !matches!(action, GetExAction::Nothing) {
            h.allow_field_ttls();
        }
        let mut out = Vec::with_capacity(fields.len());
        for f in fields {
            let Some(v) = h.get(f).map(Bytes::copy_from_slice) else {
                out.push(F::nil());
                continue;
            };
            match action {
                GetExAction::Nothing => {}
                GetExAction::Persist => {
                    h.persist_field(f);
                }
                GetExAction::Expire(at) => {
                    set_time(h, f, at, Cond::Always, now);
                }
            }
            out.push(F::bulk(v));
        }
        Ok(F::array(out))
    })?
}

/// HSETEX's options, parsed before the key is looked at (as Redis parses them).
struct SetEx<'a> {
    /// FNX (`Some(false)`: set only if no field exists) or FXX (`Some(true)`: only if all do).
    exist: Option<bool>,
    keep_ttl: bool,
    at: Option<u64>,
    pairs: &'a [Bytes],
}

fn parse_setex<'a>(args: &'a [Bytes], now: u64) -> Result<SetEx<'a>, CmdError> {
    const ONE_TIME: CmdError =
        CmdError::Text("ERR Only one of EX, PX, EXAT, PXAT or KEEPTTL arguments can be specified");
    let mut o = SetEx { exist: None, keep_ttl: false, at: None, pairs: &[] };
    let mut i = 2;
    while i < args.len() {
        let word = |w: &[u8]| args[i].eq_ignore_ascii_case(w);
        let timed = time_option(&args[i], now);
        if word(b"FIELDS") {
            if i + 3 >= args.len() {
                return Err(wrong_arity(&args[0]));
            }
            let n =
                shoal_wire::num::parse_i64(&args[i + 1]).filter(|n| (1..=i64::from(i32::MAX)).contains(n));
            let Some(n) = n else { return Err(CmdError::Text("ERR invalid number of fields")) };
            let remaining = args.len() - i - 2;
            if !remaining.is_multiple_of(2) || n as usize != remaining / 2 {
                return Err(wrong_arity(&args[0]));
            }
            o.pairs = &args[i + 2..];
            return Ok(o);
        } else if let Some((unit, base)) = timed {
            if o.at.is_some() || o.keep_ttl {
                return Err(ONE_TIME);
            }
            let Some(arg) = args.get(i + 1) else {
                return Err(CmdError::Text("ERR missing expire time"));
            };
            o.at = Some(expire_time(&args[0], arg, unit, base)?);
            i += 1;
        } else if word(b"KEEPTTL") {
            if o.at.is_some() || o.keep_ttl {
                return Err(ONE_TIME);
            }
            o.keep_ttl = true;
        } else if word(b"FXX") || word(b"FNX") {
            if o.exist.is_some() {
                return Err(CmdError::Text("ERR Only one of FXX or FNX arguments can be specified"));
            }
            o.exist = Some(word(b"FXX"));
        } else {
            return Err(CmdError::Owned(format!(
                "ERR unknown argument: {}",
                String::from_utf8_lossy(&args[i])
            )));
        }
        i += 1;
    }
    Err(super::error::SYNTAX)
}

/// `HSETEX key [FNX|FXX] [EX s|PX ms|EXAT ts|PXAT ts|KEEPTTL] FIELDS numfields field value ...`
/// (Redis 8.0): 1 when the fields were set, 0 when FNX/FXX held them back.
fn setex(store: &Store, args: &[Bytes]) -> CmdResult {
    make_room(store)?;
    let now = store.now_ms();
    let o = parse_setex(args, now)?;
    store
        .write_object(&args[1], ValueType::Hash, |slot, limits| {
            if slot.is_none() && o.exist == Some(true) {
                return F::int(0);
            }
            let h = match slot.get_or_insert_with(|| Box::new(Object::empty(ValueType::Hash))).as_mut() {
                Object::Hash(h) => h,
                _ => unreachable!("type checked by the store"),
            };
            if let Some(all) = o.exist {
                let found = o.pairs.iter().step_by(2).filter(|f| h.get(f).is_some()).count();
                let wanted = if all { o.pairs.len() / 2 } else { 0 };
                if found != wanted {
                    return F::int(0);
                }
            }
            if o.at.is_some() {
                h.allow_field_ttls();
            }
            for p in o.pairs.chunks(2) {
                if o.at.is_some() || o.keep_ttl {
                    h.set_keep_ttl(&p[0], &p[1], limits);
                } else {
                    h.set(&p[0], &p[1], limits);
                }
                if let Some(at) = o.at {
                    set_time(h, &p[0], at, Cond::Always, now);
                }
            }
            F::int(1)
        })
        .map_err(CmdError::from)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::{ManualClock, StoreConfig};

    fn run(store: &Store, args: &[&str]) -> CmdResult {
        let args: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a.as_bytes())).collect();
        let (_, f) =
            TABLE.iter().find(|(n, _)| n.as_bytes().eq_ignore_ascii_case(&args[0])).expect("a command here");
        f(store, &args)
    }

    #[test]
    fn field_times_follow_the_clock_and_travel_with_the_value() {
        let clock = Arc::new(ManualClock::new(1_000_000));
        let store = Store::new(StoreConfig::default(), clock.clone());
        let h = |args: &[&str]| {
            super::super::dispatch::frame_of(
                &store,
                &args.iter().map(|a| Bytes::copy_from_slice(a.as_bytes())).collect::<Vec<_>>(),
            )
        };
        h(&["hset", "h", "a", "1", "b", "2", "c", "3"]);
        assert_eq!(
            run(&store, &["hpexpire", "h", "500", "FIELDS", "2", "a", "zz"]).unwrap(),
            ints([1, -2].into_iter())
        );
        assert_eq!(
            run(&store, &["hpexpireat", "h", "4000000000000", "FIELDS", "1", "b"]).unwrap(),
            ints([1].into_iter())
        );
        assert_eq!(
            run(&store, &["hpttl", "h", "FIELDS", "3", "a", "b", "c"]).unwrap(),
            ints([500, 4_000_000_000_000 - 1_000_000, -1].into_iter())
        );
        // What a replica, a slot's new owner or a snapshot gets holds the times.
        let (value, _, t) = store.fetch(b"h").unwrap();
        let copy = Store::new(StoreConfig::default(), clock.clone());
        assert_eq!(copy.with_keys(&[b"h"], |l| l.restore(b"h", &value, 0, t)), Ok(()));
        assert_eq!(
            run(&copy, &["hpexpiretime", "h", "FIELDS", "2", "a", "b"]).unwrap(),
            ints([1_000_500, 4_000_000_000_000].into_iter())
        );
        // At its time the field is gone from every read; the last one takes the hash with it.
        clock.set(1_000_500);
        assert_eq!(run(&store, &["httl", "h", "FIELDS", "1", "a"]).unwrap(), ints([-2].into_iter()));
        assert_eq!(store.stats().expired_subkeys, 1);
        assert_eq!(
            run(&store, &["hgetdel", "h", "FIELDS", "2", "b", "c"]).unwrap(),
            F::array(vec![F::bulk("2"), F::bulk("3")])
        );
        assert!(!store.exists(b"h"));
    }
}
