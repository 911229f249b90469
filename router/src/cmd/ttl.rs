//! TTL, PTTL, EXPIRETIME, PEXPIRETIME. The node answers in milliseconds (-2 missing, -1 no TTL);
//! second variants round like Redis: `(ms + 500) / 1000`.

use shoal_wire::proto::{self, op::Kind, reply};

use super::spec::*;
use super::{Args, Ctx, Pending, op, plain};
use crate::resp::Reply;

pub const TTL: CommandSpec = CommandSpec {
    name: "ttl",
    arity: 2,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: KEYSPACE_READ_FAST,
    group: "generic",
    since: "1.0.0",
    summary: "Get the time to live for a key in seconds",
    complexity: "O(1)",
    run: ttl,
    ..CommandSpec::DEFAULT
};

pub const PTTL: CommandSpec = CommandSpec {
    name: "pttl",
    arity: 2,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: KEYSPACE_READ_FAST,
    group: "generic",
    since: "2.6.0",
    summary: "Get the time to live for a key in milliseconds",
    complexity: "O(1)",
    run: pttl,
    ..CommandSpec::DEFAULT
};

pub const EXPIRETIME: CommandSpec = CommandSpec {
    name: "expiretime",
    arity: 2,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: KEYSPACE_READ_FAST,
    group: "generic",
    since: "7.0.0",
    summary: "Get the expiration Unix timestamp for a key",
    complexity: "O(1)",
    run: expiretime,
    ..CommandSpec::DEFAULT
};

pub const PEXPIRETIME: CommandSpec = CommandSpec {
    name: "pexpiretime",
    arity: 2,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: KEYSPACE_READ_FAST,
    group: "generic",
    since: "7.0.0",
    summary: "Get the expiration Unix timestamp for a key in milliseconds",
    complexity: "O(1)",
    run: pexpiretime,
    ..CommandSpec::DEFAULT
};

fn ttl_generic(args: &Args, ctx: &mut Ctx, absolute: bool, convert: fn(proto::Reply) -> Reply) -> Pending {
    let key = args[1].clone();
    Pending::Call(ctx.call(&key, op(Kind::Ttl(proto::Ttl { key: key.clone(), absolute }))), convert)
}

fn to_seconds(r: proto::Reply) -> Reply {
    match r.kind {
        Some(reply::Kind::Int(ms)) if ms >= 0 => Reply::Int((ms + 500) / 1000),
        _ => plain(r),
    }
}

pub fn ttl(args: &Args, ctx: &mut Ctx) -> Pending {
    ttl_generic(args, ctx, false, to_seconds)
}

pub fn pttl(args: &Args, ctx: &mut Ctx) -> Pending {
    ttl_generic(args, ctx, false, plain)
}

pub fn expiretime(args: &Args, ctx: &mut Ctx) -> Pending {
    ttl_generic(args, ctx, true, to_seconds)
}

pub fn pexpiretime(args: &Args, ctx: &mut Ctx) -> Pending {
    ttl_generic(args, ctx, true, plain)
}
