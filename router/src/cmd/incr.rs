//! INCR, DECR, INCRBY, DECRBY, INCRBYFLOAT.

use shoal_wire::proto::{self, op::Kind};

use super::spec::*;
use super::{Args, Ctx, Pending, int_arg, op, plain};
use crate::resp::Reply;

pub const INCR: CommandSpec = CommandSpec {
    name: "incr",
    arity: 2,
    flags: &["write", "denyoom", "fast"],
    keys: KeySpec::ONE,
    acl: WRITE_STRING_FAST,
    group: "string",
    since: "1.0.0",
    summary: "Increment the integer value of a key by one",
    complexity: "O(1)",
    run: incr,
    ..CommandSpec::DEFAULT
};

pub const DECR: CommandSpec = CommandSpec {
    name: "decr",
    arity: 2,
    flags: &["write", "denyoom", "fast"],
    keys: KeySpec::ONE,
    acl: WRITE_STRING_FAST,
    group: "string",
    since: "1.0.0",
    summary: "Decrement the integer value of a key by one",
    complexity: "O(1)",
    run: decr,
    ..CommandSpec::DEFAULT
};

pub const INCRBY: CommandSpec = CommandSpec {
    name: "incrby",
    arity: 3,
    flags: &["write", "denyoom", "fast"],
    keys: KeySpec::ONE,
    acl: WRITE_STRING_FAST,
    group: "string",
    since: "1.0.0",
    summary: "Increment the integer value of a key by the given amount",
    complexity: "O(1)",
    run: incrby,
    ..CommandSpec::DEFAULT
};

pub const DECRBY: CommandSpec = CommandSpec {
    name: "decrby",
    arity: 3,
    flags: &["write", "denyoom", "fast"],
    keys: KeySpec::ONE,
    acl: WRITE_STRING_FAST,
    group: "string",
    since: "1.0.0",
    summary: "Decrement the integer value of a key by the given number",
    complexity: "O(1)",
    run: decrby,
    ..CommandSpec::DEFAULT
};

pub const INCRBYFLOAT: CommandSpec = CommandSpec {
    name: "incrbyfloat",
    arity: 3,
    flags: &["write", "denyoom", "fast"],
    keys: KeySpec::ONE,
    acl: WRITE_STRING_FAST,
    group: "string",
    since: "2.6.0",
    summary: "Increment the float value of a key by the given amount",
    complexity: "O(1)",
    run: incrbyfloat,
    ..CommandSpec::DEFAULT
};

fn incr_by(args: &Args, ctx: &mut Ctx, delta: i64) -> Pending {
    let key = args[1].clone();
    Pending::Call(ctx.call(&key, op(Kind::IncrBy(proto::IncrBy { key: key.clone(), delta }))), plain)
}

pub fn incr(args: &Args, ctx: &mut Ctx) -> Pending {
    incr_by(args, ctx, 1)
}

pub fn decr(args: &Args, ctx: &mut Ctx) -> Pending {
    incr_by(args, ctx, -1)
}

pub fn incrby(args: &Args, ctx: &mut Ctx) -> Pending {
    match int_arg(&args[2]) {
        Ok(n) => incr_by(args, ctx, n),
        Err(e) => e.into(),
    }
}

pub fn decrby(args: &Args, ctx: &mut Ctx) -> Pending {
    match int_arg(&args[2]) {
        // Negating i64::MIN overflows; Redis refuses it before touching the key.
        Ok(i64::MIN) => Reply::error("ERR decrement would overflow").into(),
        Ok(n) => incr_by(args, ctx, -n),
        Err(e) => e.into(),
    }
}

/// The increment is passed as text: the node parses it with the same 80-bit rules as the value.
pub fn incrbyfloat(args: &Args, ctx: &mut Ctx) -> Pending {
    let key = args[1].clone();
    let o = op(Kind::IncrByFloat(proto::IncrByFloat { key: key.clone(), increment: args[2].clone() }));
    Pending::Call(ctx.call(&key, o), plain)
}
