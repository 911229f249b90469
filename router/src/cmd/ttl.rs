//! TTL, PTTL, EXPIRETIME, PEXPIRETIME. The node answers in milliseconds (-2 missing, -1 no TTL);
//! second variants round like Redis: `(ms + 500) / 1000`.

use shoal_wire::command;

use super::spec::*;
use super::{Args, Ctx, Pending, one_key};

pub const TTL: CommandSpec =
    CommandSpec { decl: &redis::TTL, run: ttl, lane: LaneClass::OneKey, ..CommandSpec::DEFAULT };

pub const PTTL: CommandSpec =
    CommandSpec { decl: &redis::PTTL, run: pttl, lane: LaneClass::OneKey, ..CommandSpec::DEFAULT };

pub const EXPIRETIME: CommandSpec =
    CommandSpec { decl: &redis::EXPIRETIME, run: expiretime, ..CommandSpec::DEFAULT };

pub const PEXPIRETIME: CommandSpec =
    CommandSpec { decl: &redis::PEXPIRETIME, run: pexpiretime, ..CommandSpec::DEFAULT };

pub fn ttl(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::ttl)
}

pub fn pttl(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::pttl)
}

pub fn expiretime(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::expiretime)
}

pub fn pexpiretime(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::pexpiretime)
}
