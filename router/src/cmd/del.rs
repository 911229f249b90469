//! DEL, UNLINK, EXISTS, TOUCH: per-key ops grouped per node, counted.

use bytes::Bytes;
use shoal_wire::proto::{self, Op, op::Kind};

use super::spec::*;
use super::{Args, Ctx, Pending, op, sum};

pub const DEL: CommandSpec = CommandSpec { decl: &redis::DEL, run: del, ..CommandSpec::DEFAULT };

pub const UNLINK: CommandSpec = CommandSpec { decl: &redis::UNLINK, run: unlink, ..CommandSpec::DEFAULT };

pub const EXISTS: CommandSpec = CommandSpec { decl: &redis::EXISTS, run: exists, ..CommandSpec::DEFAULT };

pub const TOUCH: CommandSpec = CommandSpec { decl: &redis::TOUCH, run: touch, ..CommandSpec::DEFAULT };

fn count(args: &Args, ctx: &mut Ctx, make: fn(Bytes) -> Op) -> Pending {
    let call = ctx.call_keys(args[1..].iter().map(|k| (k.clone(), make(k.clone()))));
    Pending::later(sum(call))
}

pub fn del(args: &Args, ctx: &mut Ctx) -> Pending {
    count(args, ctx, |key| op(Kind::Del(proto::Del { key })))
}

/// UNLINK: the same as DEL here; freeing memory never blocks a node's other shards.
pub fn unlink(args: &Args, ctx: &mut Ctx) -> Pending {
    del(args, ctx)
}

pub fn exists(args: &Args, ctx: &mut Ctx) -> Pending {
    count(args, ctx, |key| op(Kind::Exists(proto::Exists { key })))
}

pub fn touch(args: &Args, ctx: &mut Ctx) -> Pending {
    count(args, ctx, |key| op(Kind::Touch(proto::Touch { key })))
}
