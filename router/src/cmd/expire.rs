//! EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (with NX/XX/GT/LT) and PERSIST.

use shoal_wire::command;

use super::spec::*;
use super::{Args, Ctx, Pending, one_key};

pub const EXPIRE: CommandSpec =
    CommandSpec { decl: &redis::EXPIRE, run: expire, lane: LaneClass::OneKey, ..CommandSpec::DEFAULT };

pub const PEXPIRE: CommandSpec =
    CommandSpec { decl: &redis::PEXPIRE, run: pexpire, lane: LaneClass::OneKey, ..CommandSpec::DEFAULT };

pub const EXPIREAT: CommandSpec =
    CommandSpec { decl: &redis::EXPIREAT, run: expireat, ..CommandSpec::DEFAULT };

pub const PEXPIREAT: CommandSpec =
    CommandSpec { decl: &redis::PEXPIREAT, run: pexpireat, ..CommandSpec::DEFAULT };

pub const PERSIST: CommandSpec = CommandSpec { decl: &redis::PERSIST, run: persist, ..CommandSpec::DEFAULT };

pub fn expire(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::expire)
}

pub fn pexpire(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::pexpire)
}

pub fn expireat(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::expireat)
}

pub fn pexpireat(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::pexpireat)
}

pub fn persist(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::persist)
}
