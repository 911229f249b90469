//! SET and the commands built on it: SETNX, SETEX, PSETEX, GETSET.

use shoal_wire::command;

use super::spec::*;
use super::{Args, Ctx, Pending, one_key};

pub const SET: CommandSpec =
    CommandSpec { decl: &redis::SET, run: set, lane: LaneClass::OneKey, ..CommandSpec::DEFAULT };

pub const SETNX: CommandSpec =
    CommandSpec { decl: &redis::SETNX, run: setnx, lane: LaneClass::OneKey, ..CommandSpec::DEFAULT };

pub const SETEX: CommandSpec =
    CommandSpec { decl: &redis::SETEX, run: setex, lane: LaneClass::OneKey, ..CommandSpec::DEFAULT };

pub const PSETEX: CommandSpec =
    CommandSpec { decl: &redis::PSETEX, run: psetex, lane: LaneClass::OneKey, ..CommandSpec::DEFAULT };

pub const GETSET: CommandSpec = CommandSpec { decl: &redis::GETSET, run: getset, ..CommandSpec::DEFAULT };

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
