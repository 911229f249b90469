//! INCR, DECR, INCRBY, DECRBY, INCRBYFLOAT.

use shoal_wire::proto::{self, op::Kind};

use super::{Args, Ctx, Pending, int_arg, op, plain};
use crate::resp::Reply;

fn incr_by(args: &Args, ctx: &mut Ctx, delta: i64) -> Pending {
    let key = args[1].clone();
    Pending::Call(ctx.call(&key, op(Kind::IncrBy(proto::IncrBy { key: key.clone(), delta }))), plain)
}

pub fn incr(args: &Args, ctx: &mut Ctx) -> Pending {
    incr_by(args, ctx, 1)
}

pub fn decr(args: &Args, ctx: &mut Ctx) -> Pending {
    incr_by(args, ctx, -1)
}

pub fn incrby(args: &Args, ctx: &mut Ctx) -> Pending {
    match int_arg(&args[2]) {
        Ok(n) => incr_by(args, ctx, n),
        Err(e) => e.into(),
    }
}

pub fn decrby(args: &Args, ctx: &mut Ctx) -> Pending {
    match int_arg(&args[2]) {
        // Negating i64::MIN overflows; Redis refuses it before touching the key.
        Ok(i64::MIN) => Reply::error("ERR decrement would overflow").into(),
        Ok(n) => incr_by(args, ctx, -n),
        Err(e) => e.into(),
    }
}

/// The increment is passed as text: the node parses it with the same 80-bit rules as the value.
pub fn incrbyfloat(args: &Args, ctx: &mut Ctx) -> Pending {
    let key = args[1].clone();
    let o = op(Kind::IncrByFloat(proto::IncrByFloat { key: key.clone(), increment: args[2].clone() }));
    Pending::Call(ctx.call(&key, o), plain)
}
