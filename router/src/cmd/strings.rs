//! TYPE, APPEND, STRLEN, GETRANGE, SETRANGE; DELIFEQ (Valkey 9.0), run by the key's node
//! (`node/src/commands/strings.rs`).

use shoal_wire::command;

use super::spec::*;
use super::typed::write_key;
use super::{Args, Ctx, Pending, one_key};

/// DELIFEQ (Valkey 9.0), as `shoal_wire::acl::newer` declares it.
pub const DELIFEQ: CommandSpec =
    CommandSpec { decl: &shoal_wire::acl::newer::DELIFEQ, run: write_key, ..CommandSpec::DEFAULT };

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
