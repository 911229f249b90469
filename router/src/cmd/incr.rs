//! INCR, DECR, INCRBY, DECRBY, INCRBYFLOAT.

use shoal_wire::command;

use super::spec::*;
use super::{Args, Ctx, Pending, one_key};

pub const INCR: CommandSpec =
    CommandSpec { decl: &redis::INCR, run: incr, lane: LaneClass::OneKey, ..CommandSpec::DEFAULT };

pub const DECR: CommandSpec =
    CommandSpec { decl: &redis::DECR, run: decr, lane: LaneClass::OneKey, ..CommandSpec::DEFAULT };

pub const INCRBY: CommandSpec =
    CommandSpec { decl: &redis::INCRBY, run: incrby, lane: LaneClass::OneKey, ..CommandSpec::DEFAULT };

pub const DECRBY: CommandSpec =
    CommandSpec { decl: &redis::DECRBY, run: decrby, lane: LaneClass::OneKey, ..CommandSpec::DEFAULT };

pub const INCRBYFLOAT: CommandSpec =
    CommandSpec { decl: &redis::INCRBYFLOAT, run: incrbyfloat, ..CommandSpec::DEFAULT };

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
