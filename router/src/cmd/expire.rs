//! EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (with NX/XX/GT/LT) and PERSIST.

use shoal_wire::proto::{self, op::Kind};

use super::spec::*;
use super::{Args, Ctx, Pending, int_arg, op, plain};
use crate::resp::Reply;

pub const EXPIRE: CommandSpec = CommandSpec {
    name: "expire",
    arity: -3,
    flags: &["write", "fast"],
    keys: KeySpec::ONE,
    acl: KEYSPACE_WRITE_FAST,
    group: "generic",
    since: "1.0.0",
    summary: "Set a key's time to live in seconds",
    complexity: "O(1)",
    run: expire,
    ..CommandSpec::DEFAULT
};

pub const PEXPIRE: CommandSpec = CommandSpec {
    name: "pexpire",
    arity: -3,
    flags: &["write", "fast"],
    keys: KeySpec::ONE,
    acl: KEYSPACE_WRITE_FAST,
    group: "generic",
    since: "2.6.0",
    summary: "Set a key's time to live in milliseconds",
    complexity: "O(1)",
    run: pexpire,
    ..CommandSpec::DEFAULT
};

pub const EXPIREAT: CommandSpec = CommandSpec {
    name: "expireat",
    arity: -3,
    flags: &["write", "fast"],
    keys: KeySpec::ONE,
    acl: KEYSPACE_WRITE_FAST,
    group: "generic",
    since: "1.2.0",
    summary: "Set the expiration for a key as a UNIX timestamp",
    complexity: "O(1)",
    run: expireat,
    ..CommandSpec::DEFAULT
};

pub const PEXPIREAT: CommandSpec = CommandSpec {
    name: "pexpireat",
    arity: -3,
    flags: &["write", "fast"],
    keys: KeySpec::ONE,
    acl: KEYSPACE_WRITE_FAST,
    group: "generic",
    since: "2.6.0",
    summary: "Set the expiration for a key as a UNIX timestamp specified in milliseconds",
    complexity: "O(1)",
    run: pexpireat,
    ..CommandSpec::DEFAULT
};

pub const PERSIST: CommandSpec = CommandSpec {
    name: "persist",
    arity: 2,
    flags: &["write", "fast"],
    keys: KeySpec::ONE,
    acl: KEYSPACE_WRITE_FAST,
    group: "generic",
    since: "2.2.0",
    summary: "Remove the expiration from a key",
    complexity: "O(1)",
    run: persist,
    ..CommandSpec::DEFAULT
};

fn expire_generic(args: &Args, ctx: &mut Ctx, seconds: bool, relative: bool, name: &str) -> Pending {
    // Redis checks the options first, then the time, then overflow; all before the key.
    let flags = match parse_flags(&args[3..]) {
        Ok(f) => f,
        Err(e) => return e.into(),
    };
    let when = match int_arg(&args[2]) {
        Ok(w) => w,
        Err(e) => return e.into(),
    };
    let invalid = || Reply::error_fmt(format!("ERR invalid expire time in '{name}' command")).into();
    let ms = if seconds {
        if !(i64::MIN / 1000..=i64::MAX / 1000).contains(&when) {
            return invalid();
        }
        when * 1000
    } else {
        when
    };
    if relative && ms > i64::MAX - ctx.now_ms() {
        return invalid();
    }
    let key = args[1].clone();
    let o = op(Kind::Expire(proto::Expire {
        key: key.clone(),
        at: Some(proto::Expiry { ms, relative }),
        nx: flags.0,
        xx: flags.1,
        gt: flags.2,
        lt: flags.3,
    }));
    Pending::Call(ctx.call(&key, o), plain)
}

/// NX, XX, GT, LT in any case and order; Redis's texts for unknown and incompatible options.
fn parse_flags(opts: &[bytes::Bytes]) -> Result<(bool, bool, bool, bool), Reply> {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in opts {
        match opt.to_ascii_lowercase().as_slice() {
            b"nx" => nx = true,
            b"xx" => xx = true,
            b"gt" => gt = true,
            b"lt" => lt = true,
            _ => {
                return Err(Reply::error_fmt(format!(
                    "ERR Unsupported option {}",
                    String::from_utf8_lossy(opt)
                )));
            }
        }
    }
    if nx && (xx || gt || lt) {
        return Err(Reply::error("ERR NX and XX, GT or LT options at the same time are not compatible"));
    }
    if gt && lt {
        return Err(Reply::error("ERR GT and LT options at the same time are not compatible"));
    }
    Ok((nx, xx, gt, lt))
}

pub fn expire(args: &Args, ctx: &mut Ctx) -> Pending {
    expire_generic(args, ctx, true, true, "expire")
}

pub fn pexpire(args: &Args, ctx: &mut Ctx) -> Pending {
    expire_generic(args, ctx, false, true, "pexpire")
}

pub fn expireat(args: &Args, ctx: &mut Ctx) -> Pending {
    expire_generic(args, ctx, true, false, "expireat")
}

pub fn pexpireat(args: &Args, ctx: &mut Ctx) -> Pending {
    expire_generic(args, ctx, false, false, "pexpireat")
}

pub fn persist(args: &Args, ctx: &mut Ctx) -> Pending {
    let key = args[1].clone();
    Pending::Call(ctx.call(&key, op(Kind::Persist(proto::Persist { key: key.clone() }))), plain)
}
