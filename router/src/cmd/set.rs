//! SET and the commands built on it: SETNX, SETEX, PSETEX, GETSET.

use shoal_wire::command;

use super::spec::*;
use super::{Args, Ctx, Pending, one_key};

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
    lane: LaneClass::OneKey,
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
    lane: LaneClass::OneKey,
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
    lane: LaneClass::OneKey,
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
    lane: LaneClass::OneKey,
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

/// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT ts|PXAT ts|KEEPTTL]`
pub fn set(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::set)
}

/// `SETNX key value`: 1 if set, 0 if the key existed.
pub fn setnx(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::setnx)
}

/// `SETEX key seconds value`
pub fn setex(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::setex)
}

/// `PSETEX key milliseconds value`
pub fn psetex(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::psetex)
}

/// `GETSET key value`: SET ... GET, which also clears the TTL.
pub fn getset(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::getset)
}
