//! TYPE, APPEND, STRLEN, GETRANGE, SETRANGE; DELIFEQ (Valkey 9.0), run by the key's node
//! (`node/src/commands/strings.rs`).

use shoal_wire::command;

use super::spec::*;
use super::typed::write_key;
use super::{Args, Ctx, Pending, one_key};

/// DELIFEQ is Valkey 9.0's (the lock release scripts used to do): declared as Valkey declares
/// it, with GETDEL's key spec (the key is read and deleted).
const DELIFEQ_DECL: RedisCommand = RedisCommand {
    name: "delifeq",
    id: None,
    arity: 3,
    flags: flag::WRITE | flag::FAST,
    categories: cat::WRITE | cat::STRING | cat::FAST,
    summary: "Delete key if value matches string.",
    since: "9.0.0",
    group: "string",
    complexity: "O(1)",
    ..redis::GETDEL
};

pub const DELIFEQ: CommandSpec = CommandSpec { decl: &DELIFEQ_DECL, run: write_key, ..CommandSpec::DEFAULT };

pub const APPEND: CommandSpec =
    CommandSpec { decl: &redis::APPEND, run: append, lane: LaneClass::OneKey, ..CommandSpec::DEFAULT };

pub const STRLEN: CommandSpec =
    CommandSpec { decl: &redis::STRLEN, run: strlen, lane: LaneClass::OneKey, ..CommandSpec::DEFAULT };

pub const GETRANGE: CommandSpec =
    CommandSpec { decl: &redis::GETRANGE, run: getrange, ..CommandSpec::DEFAULT };

pub const SETRANGE: CommandSpec =
    CommandSpec { decl: &redis::SETRANGE, run: setrange, ..CommandSpec::DEFAULT };

pub const TYPE: CommandSpec = CommandSpec { decl: &redis::TYPE, run: type_of, ..CommandSpec::DEFAULT };

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
