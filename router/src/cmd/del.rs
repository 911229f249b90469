//! DEL, UNLINK, EXISTS, TOUCH: per-key ops grouped per node, counted.

use bytes::Bytes;
use shoal_wire::proto::{self, Op, op::Kind};

use super::{Args, Ctx, Pending, fan_out, op};

fn count(args: &Args, ctx: &mut Ctx, make: fn(Bytes) -> Op) -> Pending {
    let calls = fan_out(ctx, args[1..].iter().map(|k| (k.clone(), make(k.clone()))));
    Pending::later(calls.sum())
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
