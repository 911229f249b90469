//! TYPE, APPEND, STRLEN, GETRANGE, SETRANGE.

use shoal_wire::command;

use super::spec::*;
use super::{Args, Ctx, Pending, one_key};

pub const APPEND: CommandSpec = CommandSpec {
    name: "append",
    arity: 3,
    flags: &["write", "denyoom", "fast"],
    keys: KeySpec::ONE,
    acl: WRITE_STRING_FAST,
    group: "string",
    since: "2.0.0",
    summary: "Append a value to a key",
    complexity: "O(1)",
    run: append,
    lane: LaneClass::OneKey,
    ..CommandSpec::DEFAULT
};

pub const STRLEN: CommandSpec = CommandSpec {
    name: "strlen",
    arity: 2,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: READ_STRING_FAST,
    group: "string",
    since: "2.2.0",
    summary: "Get the length of the value stored in a key",
    complexity: "O(1)",
    run: strlen,
    lane: LaneClass::OneKey,
    ..CommandSpec::DEFAULT
};

pub const GETRANGE: CommandSpec = CommandSpec {
    name: "getrange",
    arity: 4,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@string", "@slow"],
    group: "string",
    since: "2.4.0",
    summary: "Get a substring of the string stored at a key",
    complexity: "O(N) where N is the length of the returned string.",
    run: getrange,
    ..CommandSpec::DEFAULT
};

pub const SETRANGE: CommandSpec = CommandSpec {
    name: "setrange",
    arity: 4,
    flags: &["write", "denyoom"],
    keys: KeySpec::ONE,
    acl: WRITE_STRING_SLOW,
    group: "string",
    since: "2.2.0",
    summary: "Overwrite part of a string at key starting at the specified offset",
    complexity: "O(1), not counting the time taken to copy the new string in place.",
    run: setrange,
    ..CommandSpec::DEFAULT
};

pub const TYPE: CommandSpec = CommandSpec {
    name: "type",
    arity: 2,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: KEYSPACE_READ_FAST,
    group: "generic",
    since: "1.0.0",
    summary: "Determine the type stored at key",
    complexity: "O(1)",
    run: type_of,
    ..CommandSpec::DEFAULT
};

pub fn type_of(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::type_of)
}

pub fn append(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::append)
}

pub fn strlen(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::strlen)
}

pub fn getrange(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::getrange)
}

pub fn setrange(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::setrange)
}
