//! INCR, DECR, INCRBY, DECRBY, INCRBYFLOAT.

use shoal_wire::command;

use super::spec::*;
use super::{Args, Ctx, Pending, one_key};

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
    lane: LaneClass::OneKey,
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
    lane: LaneClass::OneKey,
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
    lane: LaneClass::OneKey,
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
    lane: LaneClass::OneKey,
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

pub fn incr(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::incr)
}

pub fn decr(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::decr)
}

pub fn incrby(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::incrby)
}

pub fn decrby(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::decrby)
}

pub fn incrbyfloat(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::incrbyfloat)
}
