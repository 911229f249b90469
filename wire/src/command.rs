//! The one-key string and keyspace commands that travel as typed ops (GET, SET, INCRBY, EXPIRE,
//! TTL, ...): their arguments read with Redis's rules and error texts, and how the client's reply
//! is made from the node's. The router builds these ops for its clients; a node running a Lua
//! script builds the same ops from `redis.call`'s arguments, so both accept and refuse exactly
//! the same arguments and answer alike.
//!
//! A builder takes the command's arguments (name first; the caller has checked the arity) and
//! the current Unix time in ms (to refuse relative expiries that would overflow).

use std::borrow::Cow;

use bytes::Bytes;

use crate::num::parse_i64;
use crate::proto::{self, GetExMode, Op, SetCondition, op::Kind};

/// A refused command: its Redis error line, without the leading `-`.
pub type ArgError = Cow<'static, str>;

/// How the client's reply is made from the node's reply to the op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// `ok` → `+OK`, `nil` → null, `value` → bulk, `int` → integer, `error` → error.
    Plain,
    /// SETNX: `ok` → 1, `nil` → 0.
    StoredAsInt,
    /// TYPE: the value is a status line (`+string`).
    Status,
    /// TTL, EXPIRETIME: milliseconds rounded to seconds (negative codes pass as they are).
    Seconds,
}

/// A one-key command's op, the key it is about, and how its reply reads.
#[derive(Debug, Clone)]
pub struct OneKey {
    pub key: Bytes,
    pub op: Op,
    pub answer: Answer,
}

/// A builder: arguments (name first) and the time now in Unix ms → the op.
pub type Builder = fn(&[Bytes], i64) -> Result<OneKey, ArgError>;

/// The builder of the one-key command `name` (lowercase), if it is one built here.
pub fn builder(name: &[u8]) -> Option<Builder> {
    Some(match name {
        b"get" => get,
        b"getdel" => getdel,
        b"set" => set,
        b"setnx" => setnx,
        b"setex" => setex,
        b"psetex" => psetex,
        b"getset" => getset,
        b"getex" => getex,
        b"append" => append,
        b"strlen" => strlen,
        b"getrange" => getrange,
        b"setrange" => setrange,
        b"incr" => incr,
        b"decr" => decr,
        b"incrby" => incrby,
        b"decrby" => decrby,
        b"incrbyfloat" => incrbyfloat,
        b"type" => type_of,
        b"expire" => expire,
        b"pexpire" => pexpire,
        b"expireat" => expireat,
        b"pexpireat" => pexpireat,
        b"persist" => persist,
        b"ttl" => ttl,
        b"pttl" => pttl,
        b"expiretime" => expiretime,
        b"pexpiretime" => pexpiretime,
        _ => return None,
    })
}

pub const SYNTAX: &str = "ERR syntax error";
pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";

#[inline]
fn op(kind: Kind) -> Op {
    Op { kind: Some(kind), ..Default::default() }
}

#[inline]
fn one(args: &[Bytes], kind: Kind, answer: Answer) -> Result<OneKey, ArgError> {
    Ok(OneKey { key: args[1].clone(), op: op(kind), answer })
}

/// A Redis integer argument.
pub fn int_arg(b: &[u8]) -> Result<i64, ArgError> {
    parse_i64(b).ok_or(Cow::Borrowed(NOT_INTEGER))
}

/// (Inlined into a router's GET handler, which then builds the op where its reply goes.)
#[inline]
pub fn get(args: &[Bytes], _now: i64) -> Result<OneKey, ArgError> {
    one(args, Kind::Get(proto::Get { key: args[1].clone(), ..Default::default() }), Answer::Plain)
}

pub fn getdel(args: &[Bytes], _now: i64) -> Result<OneKey, ArgError> {
    one(args, Kind::GetDel(proto::GetDel { key: args[1].clone() }), Answer::Plain)
}

// --- SET and its kin -----------------------------------------------------------------------------

/// The unit and base of an expiry option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpireUnit {
    Ex,
    Px,
    Exat,
    Pxat,
}

/// Options shared by SET and GETEX, parsed with exactly Redis's acceptance rules
/// (`parseExtendedStringArgumentsOrReply`): which combinations are refused, and that a repeated
/// expiry option of the same kind simply replaces the earlier one.
#[derive(Debug, Default)]
pub struct ExtendedOptions {
    pub nx: bool,
    pub xx: bool,
    pub get: bool,
    pub keep_ttl: bool,
    pub persist: bool,
    pub expire: Option<(ExpireUnit, Bytes)>,
    /// `IFEQ value` (Valkey 8.1): set only when the key holds this string.
    pub ifeq: Option<Bytes>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionsFor {
    Set,
    GetEx,
}

pub fn parse_extended(opts: &[Bytes], command: OptionsFor) -> Result<ExtendedOptions, ArgError> {
    let mut o = ExtendedOptions::default();
    let is_set = command == OptionsFor::Set;
    let mut j = 0;
    while j < opts.len() {
        let opt = &opts[j][..];
        let next = opts.get(j + 1);
        let has = |u: ExpireUnit| matches!(o.expire, Some((x, _)) if x == u);
        let eq = |name: &[u8]| opt.eq_ignore_ascii_case(name);
        let conditioned = o.nx || o.xx || o.ifeq.is_some();
        if eq(b"NX") && !o.xx && o.ifeq.is_none() && is_set {
            o.nx = true;
        } else if eq(b"XX") && !o.nx && o.ifeq.is_none() && is_set {
            o.xx = true;
        } else if let Some(value) = next.filter(|_| eq(b"IFEQ") && !conditioned && is_set) {
            o.ifeq = Some(value.clone());
            j += 1;
        } else if eq(b"GET") && is_set {
            o.get = true;
        } else if eq(b"KEEPTTL") && !o.persist && o.expire.is_none() && is_set {
            o.keep_ttl = true;
        } else if eq(b"PERSIST") && !is_set && o.expire.is_none() && !o.keep_ttl {
            o.persist = true;
        } else if let (Some(unit), Some(value)) = (expire_unit(opt), next) {
            let conflict = o.keep_ttl || o.persist || o.expire.as_ref().is_some_and(|_| !has(unit));
            if conflict {
                return Err(SYNTAX.into());
            }
            o.expire = Some((unit, value.clone()));
            j += 1;
        } else {
            return Err(SYNTAX.into());
        }
        j += 1;
    }
    Ok(o)
}

fn expire_unit(opt: &[u8]) -> Option<ExpireUnit> {
    [
        (b"EX" as &[u8], ExpireUnit::Ex),
        (b"PX", ExpireUnit::Px),
        (b"EXAT", ExpireUnit::Exat),
        (b"PXAT", ExpireUnit::Pxat),
    ]
    .into_iter()
    .find(|(name, _)| opt.eq_ignore_ascii_case(name))
    .map(|(_, u)| u)
}

/// Validates an expiry argument as Redis's `getExpireMillisecondsOrReply` does and turns it into
/// a wire expiry (relative expiries are resolved by the node's clock).
pub fn expiry(unit: ExpireUnit, arg: &[u8], command: &str, now_ms: i64) -> Result<proto::Expiry, ArgError> {
    let n = int_arg(arg)?;
    let invalid = || Cow::Owned(format!("ERR invalid expire time in '{command}' command"));
    let seconds = matches!(unit, ExpireUnit::Ex | ExpireUnit::Exat);
    if n <= 0 || (seconds && n > i64::MAX / 1000) {
        return Err(invalid());
    }
    let ms = if seconds { n * 1000 } else { n };
    let relative = matches!(unit, ExpireUnit::Ex | ExpireUnit::Px);
    if relative && ms.checked_add(now_ms).is_none() {
        return Err(invalid());
    }
    Ok(proto::Expiry { ms, relative })
}

/// The wire op for a SET with these options.
pub fn set_op(key: Bytes, value: Bytes, o: &ExtendedOptions, expiry: Option<proto::Expiry>) -> Op {
    let condition = match (o.nx, o.xx, &o.ifeq) {
        (true, _, _) => SetCondition::SetIfAbsent,
        (_, true, _) => SetCondition::SetIfPresent,
        (_, _, Some(_)) => SetCondition::SetIfEqual,
        _ => SetCondition::SetAlways,
    };
    let set =
        proto::Set { key, value, expiry, condition: condition as i32, keep_ttl: o.keep_ttl, get: o.get };
    match &o.ifeq {
        None => op(Kind::Set(set)),
        Some(compare) => {
            op(Kind::SetIfEqual(Box::new(proto::SetIfEqual { set: Some(set), compare: compare.clone() })))
        }
    }
}

fn set_with(args: &[Bytes], o: &ExtendedOptions, expiry: Option<proto::Expiry>, answer: Answer) -> OneKey {
    let key = args[1].clone();
    OneKey { op: set_op(key.clone(), args[2].clone(), o, expiry), key, answer }
}

/// `SET key value [NX|XX|IFEQ value] [GET] [EX s|PX ms|EXAT ts|PXAT ts|KEEPTTL]` (IFEQ: Valkey 8.1)
pub fn set(args: &[Bytes], now: i64) -> Result<OneKey, ArgError> {
    let o = parse_extended(&args[3..], OptionsFor::Set)?;
    let expiry = match &o.expire {
        Some((unit, arg)) => Some(expiry(*unit, arg, "set", now)?),
        None => None,
    };
    Ok(set_with(args, &o, expiry, Answer::Plain))
}

/// `SETNX key value`: 1 if set, 0 if the key existed.
pub fn setnx(args: &[Bytes], _now: i64) -> Result<OneKey, ArgError> {
    Ok(set_with(args, &ExtendedOptions { nx: true, ..Default::default() }, None, Answer::StoredAsInt))
}

/// `SETEX key seconds value`
pub fn setex(args: &[Bytes], now: i64) -> Result<OneKey, ArgError> {
    set_with_ttl(args, now, ExpireUnit::Ex, "setex")
}

/// `PSETEX key milliseconds value`
pub fn psetex(args: &[Bytes], now: i64) -> Result<OneKey, ArgError> {
    set_with_ttl(args, now, ExpireUnit::Px, "psetex")
}

fn set_with_ttl(args: &[Bytes], now: i64, unit: ExpireUnit, name: &str) -> Result<OneKey, ArgError> {
    let e = expiry(unit, &args[2], name, now)?;
    let key = args[1].clone();
    let op = set_op(key.clone(), args[3].clone(), &ExtendedOptions::default(), Some(e));
    Ok(OneKey { key, op, answer: Answer::Plain })
}

/// `GETSET key value`: SET ... GET, which also clears the TTL.
pub fn getset(args: &[Bytes], _now: i64) -> Result<OneKey, ArgError> {
    Ok(set_with(args, &ExtendedOptions { get: true, ..Default::default() }, None, Answer::Plain))
}

/// `GETEX key [EX s|PX ms|EXAT ts|PXAT ts|PERSIST]`. Option syntax is checked here; the expiry
/// value is checked by the node after it finds the key, because Redis answers nil for a missing
/// key whatever the value.
pub fn getex(args: &[Bytes], _now: i64) -> Result<OneKey, ArgError> {
    let o = parse_extended(&args[2..], OptionsFor::GetEx)?;
    let (mode, expire_arg) = match (&o.expire, o.persist) {
        (Some((unit, arg)), _) => {
            let mode = match unit {
                ExpireUnit::Ex => GetExMode::GetexEx,
                ExpireUnit::Px => GetExMode::GetexPx,
                ExpireUnit::Exat => GetExMode::GetexExat,
                ExpireUnit::Pxat => GetExMode::GetexPxat,
            };
            (mode, arg.clone())
        }
        (None, true) => (GetExMode::GetexPersist, Bytes::new()),
        (None, false) => (GetExMode::GetexGet, Bytes::new()),
    };
    one(
        args,
        Kind::GetEx(proto::GetEx { key: args[1].clone(), mode: mode as i32, expire_arg }),
        Answer::Plain,
    )
}

// --- other string commands -----------------------------------------------------------------------

pub fn append(args: &[Bytes], _now: i64) -> Result<OneKey, ArgError> {
    one(args, Kind::Append(proto::Append { key: args[1].clone(), value: args[2].clone() }), Answer::Plain)
}

pub fn strlen(args: &[Bytes], _now: i64) -> Result<OneKey, ArgError> {
    one(args, Kind::Strlen(proto::Strlen { key: args[1].clone() }), Answer::Plain)
}

pub fn getrange(args: &[Bytes], _now: i64) -> Result<OneKey, ArgError> {
    let (start, end) = (int_arg(&args[2])?, int_arg(&args[3])?);
    one(args, Kind::GetRange(proto::GetRange { key: args[1].clone(), start, end }), Answer::Plain)
}

pub fn setrange(args: &[Bytes], _now: i64) -> Result<OneKey, ArgError> {
    let offset = int_arg(&args[2])?;
    if offset < 0 {
        return Err("ERR offset is out of range".into());
    }
    let kind = Kind::SetRange(proto::SetRange { key: args[1].clone(), offset, value: args[3].clone() });
    one(args, kind, Answer::Plain)
}

fn incr_by(args: &[Bytes], delta: i64) -> Result<OneKey, ArgError> {
    one(args, Kind::IncrBy(proto::IncrBy { key: args[1].clone(), delta }), Answer::Plain)
}

pub fn incr(args: &[Bytes], _now: i64) -> Result<OneKey, ArgError> {
    incr_by(args, 1)
}

pub fn decr(args: &[Bytes], _now: i64) -> Result<OneKey, ArgError> {
    incr_by(args, -1)
}

pub fn incrby(args: &[Bytes], _now: i64) -> Result<OneKey, ArgError> {
    incr_by(args, int_arg(&args[2])?)
}

pub fn decrby(args: &[Bytes], _now: i64) -> Result<OneKey, ArgError> {
    match int_arg(&args[2])? {
        // Negating i64::MIN overflows; Redis refuses it before touching the key.
        i64::MIN => Err("ERR decrement would overflow".into()),
        n => incr_by(args, -n),
    }
}

/// The increment is passed as text: the node parses it with the same 80-bit rules as the value.
pub fn incrbyfloat(args: &[Bytes], _now: i64) -> Result<OneKey, ArgError> {
    let kind = Kind::IncrByFloat(proto::IncrByFloat { key: args[1].clone(), increment: args[2].clone() });
    one(args, kind, Answer::Plain)
}

pub fn type_of(args: &[Bytes], _now: i64) -> Result<OneKey, ArgError> {
    one(args, Kind::TypeOf(proto::TypeOf { key: args[1].clone() }), Answer::Status)
}

// --- TTLs ----------------------------------------------------------------------------------------

fn expire_generic(
    args: &[Bytes],
    now: i64,
    seconds: bool,
    relative: bool,
    name: &str,
) -> Result<OneKey, ArgError> {
    // Redis checks the options first, then the time, then overflow; all before the key.
    let (nx, xx, gt, lt) = parse_expire_flags(&args[3..])?;
    let when = int_arg(&args[2])?;
    let invalid = || Cow::Owned(format!("ERR invalid expire time in '{name}' command"));
    let ms = if seconds {
        if !(i64::MIN / 1000..=i64::MAX / 1000).contains(&when) {
            return Err(invalid());
        }
        when * 1000
    } else {
        when
    };
    if relative && ms > i64::MAX - now {
        return Err(invalid());
    }
    let at = Some(proto::Expiry { ms, relative });
    one(args, Kind::Expire(proto::Expire { key: args[1].clone(), at, nx, xx, gt, lt }), Answer::Plain)
}

/// NX, XX, GT, LT in any case and order; Redis's texts for unknown and incompatible options.
fn parse_expire_flags(opts: &[Bytes]) -> Result<(bool, bool, bool, bool), ArgError> {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in opts {
        match opt.to_ascii_lowercase().as_slice() {
            b"nx" => nx = true,
            b"xx" => xx = true,
            b"gt" => gt = true,
            b"lt" => lt = true,
            _ => return Err(format!("ERR Unsupported option {}", String::from_utf8_lossy(opt)).into()),
        }
    }
    if nx && (xx || gt || lt) {
        return Err("ERR NX and XX, GT or LT options at the same time are not compatible".into());
    }
    if gt && lt {
        return Err("ERR GT and LT options at the same time are not compatible".into());
    }
    Ok((nx, xx, gt, lt))
}

pub fn expire(args: &[Bytes], now: i64) -> Result<OneKey, ArgError> {
    expire_generic(args, now, true, true, "expire")
}

pub fn pexpire(args: &[Bytes], now: i64) -> Result<OneKey, ArgError> {
    expire_generic(args, now, false, true, "pexpire")
}

pub fn expireat(args: &[Bytes], now: i64) -> Result<OneKey, ArgError> {
    expire_generic(args, now, true, false, "expireat")
}

pub fn pexpireat(args: &[Bytes], now: i64) -> Result<OneKey, ArgError> {
    expire_generic(args, now, false, false, "pexpireat")
}

pub fn persist(args: &[Bytes], _now: i64) -> Result<OneKey, ArgError> {
    one(args, Kind::Persist(proto::Persist { key: args[1].clone() }), Answer::Plain)
}

fn ttl_generic(args: &[Bytes], absolute: bool, answer: Answer) -> Result<OneKey, ArgError> {
    one(args, Kind::Ttl(proto::Ttl { key: args[1].clone(), absolute }), answer)
}

pub fn ttl(args: &[Bytes], _now: i64) -> Result<OneKey, ArgError> {
    ttl_generic(args, false, Answer::Seconds)
}

pub fn pttl(args: &[Bytes], _now: i64) -> Result<OneKey, ArgError> {
    ttl_generic(args, false, Answer::Plain)
}

pub fn expiretime(args: &[Bytes], _now: i64) -> Result<OneKey, ArgError> {
    ttl_generic(args, true, Answer::Seconds)
}

pub fn pexpiretime(args: &[Bytes], _now: i64) -> Result<OneKey, ArgError> {
    ttl_generic(args, true, Answer::Plain)
}

/// Milliseconds to seconds as TTL and EXPIRETIME answer (rounded; negative codes unchanged).
pub fn ms_to_seconds(ms: i64) -> i64 {
    if ms >= 0 { (ms + 500) / 1000 } else { ms }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<Bytes> {
        a.iter().map(|s| Bytes::from(s.to_string())).collect()
    }

    fn parse(opts: &[&str], f: OptionsFor) -> Result<ExtendedOptions, ArgError> {
        parse_extended(&args(opts), f)
    }

    #[test]
    fn accepted_and_refused_combinations_like_redis() {
        use OptionsFor::*;
        assert!(parse(&["NX", "GET", "EX", "10"], Set).is_ok());
        assert!(parse(&["EX", "10", "EX", "20"], Set).is_ok(), "a repeated EX replaces the first");
        assert_eq!(parse(&["EX", "10", "EX", "20"], Set).unwrap().expire.unwrap().1, "20");
        assert!(parse(&["GET", "GET"], Set).is_ok());
        assert!(parse(&["NX", "XX"], Set).is_err());
        assert!(parse(&["KEEPTTL", "EX", "1"], Set).is_err());
        assert!(parse(&["EX", "1", "PX", "1"], Set).is_err());
        assert!(parse(&["EX"], Set).is_err(), "an expiry option needs its value");
        assert!(parse(&["PERSIST"], Set).is_err(), "PERSIST is GETEX-only");
        assert!(parse(&["PERSIST"], GetEx).is_ok());
        assert!(parse(&["NX"], GetEx).is_err());
        assert!(parse(&["PERSIST", "EX", "1"], GetEx).is_err());
        // IFEQ (Valkey 8.1) excludes NX and XX in either order, once, and needs its value.
        assert_eq!(parse(&["IFEQ", "v", "GET", "EX", "1"], Set).unwrap().ifeq.unwrap(), "v");
        assert!(parse(&["NX", "IFEQ", "v"], Set).is_err());
        assert!(parse(&["IFEQ", "v", "XX"], Set).is_err());
        assert!(parse(&["IFEQ", "a", "IFEQ", "b"], Set).is_err());
        assert!(parse(&["IFEQ"], Set).is_err());
        assert!(parse(&["IFEQ", "v"], GetEx).is_err());
    }

    #[test]
    fn expiry_validation() {
        let now = 1_700_000_000_000;
        let bad = |u, a: &str| expiry(u, a.as_bytes(), "set", now).unwrap_err();
        assert_eq!(bad(ExpireUnit::Ex, "0"), "ERR invalid expire time in 'set' command");
        assert_eq!(bad(ExpireUnit::Px, "-5"), "ERR invalid expire time in 'set' command");
        assert_eq!(bad(ExpireUnit::Ex, "9223372036854775"), "ERR invalid expire time in 'set' command");
        assert_eq!(bad(ExpireUnit::Ex, "x"), NOT_INTEGER);
        assert_eq!(
            expiry(ExpireUnit::Ex, b"10", "set", now).unwrap(),
            proto::Expiry { ms: 10_000, relative: true }
        );
        assert_eq!(
            expiry(ExpireUnit::Pxat, b"10", "set", now).unwrap(),
            proto::Expiry { ms: 10, relative: false }
        );
    }

    #[test]
    fn builders_by_name_build_their_ops() {
        let now = 1_700_000_000_000;
        let b = builder(b"incrby").unwrap()(&args(&["INCRBY", "k", "5"]), now).unwrap();
        assert_eq!(b.key, "k");
        assert!(matches!(b.op.kind, Some(Kind::IncrBy(proto::IncrBy { delta: 5, .. }))));
        assert_eq!(
            builder(b"decrby").unwrap()(&args(&["DECRBY", "k", "-9223372036854775808"]), now).unwrap_err(),
            "ERR decrement would overflow"
        );
        assert_eq!(builder(b"ttl").unwrap()(&args(&["TTL", "k"]), now).unwrap().answer, Answer::Seconds);
        assert_eq!(builder(b"type").unwrap()(&args(&["TYPE", "k"]), now).unwrap().answer, Answer::Status);
        assert_eq!(
            builder(b"expire").unwrap()(&args(&["EXPIRE", "k", "1", "nx", "xx"]), now).unwrap_err(),
            "ERR NX and XX, GT or LT options at the same time are not compatible"
        );
        assert!(builder(b"hset").is_none(), "typed commands are the node's own");
        assert_eq!(ms_to_seconds(1_499), 1);
        assert_eq!(ms_to_seconds(-2), -2);
    }
}
