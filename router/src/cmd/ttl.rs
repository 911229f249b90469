//! TTL, PTTL, EXPIRETIME, PEXPIRETIME. The node answers in milliseconds (-2 missing, -1 no TTL);
//! second variants round like Redis: `(ms + 500) / 1000`.

use shoal_wire::proto::{self, op::Kind, reply};

use super::{Args, Ctx, Pending, op, plain};
use crate::resp::Reply;

fn ttl_generic(args: &Args, ctx: &mut Ctx, absolute: bool, convert: fn(proto::Reply) -> Reply) -> Pending {
    let key = args[1].clone();
    Pending::Call(ctx.call(&key, op(Kind::Ttl(proto::Ttl { key: key.clone(), absolute }))), convert)
}

fn to_seconds(r: proto::Reply) -> Reply {
    match r.kind {
        Some(reply::Kind::Int(ms)) if ms >= 0 => Reply::Int((ms + 500) / 1000),
        _ => plain(r),
    }
}

pub fn ttl(args: &Args, ctx: &mut Ctx) -> Pending {
    ttl_generic(args, ctx, false, to_seconds)
}

pub fn pttl(args: &Args, ctx: &mut Ctx) -> Pending {
    ttl_generic(args, ctx, false, plain)
}

pub fn expiretime(args: &Args, ctx: &mut Ctx) -> Pending {
    ttl_generic(args, ctx, true, to_seconds)
}

pub fn pexpiretime(args: &Args, ctx: &mut Ctx) -> Pending {
    ttl_generic(args, ctx, true, plain)
}
