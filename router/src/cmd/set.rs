//! SET and the commands built on it: SETNX, SETEX, PSETEX, GETSET.

use bytes::Bytes;
use shoal_wire::proto::{self, SetCondition, op::Kind};

use super::spec::*;
use super::{Args, Ctx, Pending, int_arg, op, plain, syntax_error};
use crate::resp::Reply;

pub const SET: CommandSpec = CommandSpec {
    name: "set",
    arity: -3,
    flags: &["write", "denyoom"],
    keys: KeySpec::ONE,
    acl: WRITE_STRING_SLOW,
    group: "string",
    since: "1.0.0",
    summary: "Set the string value of a key",
    complexity: "O(1)",
    run: set,
    ..CommandSpec::DEFAULT
};

pub const SETNX: CommandSpec = CommandSpec {
    name: "setnx",
    arity: 3,
    flags: &["write", "denyoom", "fast"],
    keys: KeySpec::ONE,
    acl: WRITE_STRING_FAST,
    group: "string",
    since: "1.0.0",
    summary: "Set the value of a key, only if the key does not exist",
    complexity: "O(1)",
    run: setnx,
    ..CommandSpec::DEFAULT
};

pub const SETEX: CommandSpec = CommandSpec {
    name: "setex",
    arity: 4,
    flags: &["write", "denyoom"],
    keys: KeySpec::ONE,
    acl: WRITE_STRING_SLOW,
    group: "string",
    since: "2.0.0",
    summary: "Set the value and expiration of a key",
    complexity: "O(1)",
    run: setex,
    ..CommandSpec::DEFAULT
};

pub const PSETEX: CommandSpec = CommandSpec {
    name: "psetex",
    arity: 4,
    flags: &["write", "denyoom"],
    keys: KeySpec::ONE,
    acl: WRITE_STRING_SLOW,
    group: "string",
    since: "2.6.0",
    summary: "Set the value and expiration in milliseconds of a key",
    complexity: "O(1)",
    run: psetex,
    ..CommandSpec::DEFAULT
};

pub const GETSET: CommandSpec = CommandSpec {
    name: "getset",
    arity: 3,
    flags: &["write", "denyoom", "fast"],
    keys: KeySpec::ONE,
    acl: WRITE_STRING_FAST,
    group: "string",
    since: "1.0.0",
    summary: "Set the string value of a key and return its old value",
    complexity: "O(1)",
    run: getset,
    ..CommandSpec::DEFAULT
};

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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionsFor {
    Set,
    GetEx,
}

pub fn parse_extended(opts: &[Bytes], command: OptionsFor) -> Result<ExtendedOptions, Reply> {
    let mut o = ExtendedOptions::default();
    let is_set = command == OptionsFor::Set;
    let mut j = 0;
    while j < opts.len() {
        let opt = &opts[j][..];
        let next = opts.get(j + 1);
        let has = |u: ExpireUnit| matches!(o.expire, Some((x, _)) if x == u);
        let eq = |name: &[u8]| opt.eq_ignore_ascii_case(name);
        if eq(b"NX") && !o.xx && is_set {
            o.nx = true;
        } else if eq(b"XX") && !o.nx && is_set {
            o.xx = true;
        } else if eq(b"GET") && is_set {
            o.get = true;
        } else if eq(b"KEEPTTL") && !o.persist && o.expire.is_none() && is_set {
            o.keep_ttl = true;
        } else if eq(b"PERSIST") && !is_set && o.expire.is_none() && !o.keep_ttl {
            o.persist = true;
        } else if let (Some(unit), Some(value)) = (expire_unit(opt), next) {
            let conflict = o.keep_ttl || o.persist || o.expire.as_ref().is_some_and(|_| !has(unit));
            if conflict {
                return Err(syntax_error());
            }
            o.expire = Some((unit, value.clone()));
            j += 1;
        } else {
            return Err(syntax_error());
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
pub fn expiry(unit: ExpireUnit, arg: &[u8], command: &str, now_ms: i64) -> Result<proto::Expiry, Reply> {
    let n = int_arg(arg)?;
    let invalid = || Reply::error_fmt(format!("ERR invalid expire time in '{command}' command"));
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
pub fn set_op(key: Bytes, value: Bytes, o: &ExtendedOptions, expiry: Option<proto::Expiry>) -> proto::Op {
    let condition = match (o.nx, o.xx) {
        (true, _) => SetCondition::SetIfAbsent,
        (_, true) => SetCondition::SetIfPresent,
        _ => SetCondition::SetAlways,
    };
    op(Kind::Set(proto::Set {
        key,
        value,
        expiry,
        condition: condition as i32,
        keep_ttl: o.keep_ttl,
        get: o.get,
    }))
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT ts|PXAT ts|KEEPTTL]`
pub fn set(args: &Args, ctx: &mut Ctx) -> Pending {
    let o = match parse_extended(&args[3..], OptionsFor::Set) {
        Ok(o) => o,
        Err(e) => return e.into(),
    };
    let expiry = match &o.expire {
        Some((unit, arg)) => match expiry(*unit, arg, "set", ctx.now_ms()) {
            Ok(e) => Some(e),
            Err(e) => return e.into(),
        },
        None => None,
    };
    let key = args[1].clone();
    Pending::Call(ctx.call(&key, set_op(key.clone(), args[2].clone(), &o, expiry)), plain)
}

/// `SETNX key value`: 1 if set, 0 if the key existed.
pub fn setnx(args: &Args, ctx: &mut Ctx) -> Pending {
    let o = ExtendedOptions { nx: true, ..Default::default() };
    let key = args[1].clone();
    Pending::Call(ctx.call(&key, set_op(key.clone(), args[2].clone(), &o, None)), stored_as_int)
}

fn stored_as_int(r: proto::Reply) -> Reply {
    match plain(r) {
        Reply::Nil => Reply::Int(0),
        Reply::Simple(_) => Reply::Int(1),
        other => other,
    }
}

/// `SETEX key seconds value`
pub fn setex(args: &Args, ctx: &mut Ctx) -> Pending {
    set_with_ttl(args, ctx, ExpireUnit::Ex, "setex")
}

/// `PSETEX key milliseconds value`
pub fn psetex(args: &Args, ctx: &mut Ctx) -> Pending {
    set_with_ttl(args, ctx, ExpireUnit::Px, "psetex")
}

fn set_with_ttl(args: &Args, ctx: &mut Ctx, unit: ExpireUnit, name: &str) -> Pending {
    let e = match expiry(unit, &args[2], name, ctx.now_ms()) {
        Ok(e) => e,
        Err(e) => return e.into(),
    };
    let key = args[1].clone();
    Pending::Call(
        ctx.call(&key, set_op(key.clone(), args[3].clone(), &ExtendedOptions::default(), Some(e))),
        plain,
    )
}

/// `GETSET key value`: SET ... GET, which also clears the TTL.
pub fn getset(args: &Args, ctx: &mut Ctx) -> Pending {
    let o = ExtendedOptions { get: true, ..Default::default() };
    let key = args[1].clone();
    Pending::Call(ctx.call(&key, set_op(key.clone(), args[2].clone(), &o, None)), plain)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(opts: &[&str], f: OptionsFor) -> Result<ExtendedOptions, Reply> {
        let v: Vec<Bytes> = opts.iter().map(|s| Bytes::from(s.to_string())).collect();
        parse_extended(&v, f)
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
    }

    #[test]
    fn expiry_validation() {
        let now = 1_700_000_000_000;
        let bad = |u, a: &str| expiry(u, a.as_bytes(), "set", now).unwrap_err();
        assert_eq!(bad(ExpireUnit::Ex, "0"), Reply::error("ERR invalid expire time in 'set' command"));
        assert_eq!(bad(ExpireUnit::Px, "-5"), Reply::error("ERR invalid expire time in 'set' command"));
        assert_eq!(
            bad(ExpireUnit::Ex, "9223372036854775"),
            Reply::error("ERR invalid expire time in 'set' command")
        );
        assert_eq!(bad(ExpireUnit::Ex, "x"), Reply::error("ERR value is not an integer or out of range"));
        assert_eq!(
            expiry(ExpireUnit::Ex, b"10", "set", now).unwrap(),
            proto::Expiry { ms: 10_000, relative: true }
        );
        assert_eq!(
            expiry(ExpireUnit::Pxat, b"10", "set", now).unwrap(),
            proto::Expiry { ms: 10, relative: false }
        );
    }
}
