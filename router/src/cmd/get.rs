//! GET and GETDEL.

use shoal_wire::proto::{self, op::Kind};

use super::{Args, Ctx, Pending, op, plain};

pub fn get(args: &Args, ctx: &mut Ctx) -> Pending {
    let key = args[1].clone();
    Pending::Call(ctx.call(&key, op(Kind::Get(proto::Get { key: key.clone() }))), plain)
}

pub fn getdel(args: &Args, ctx: &mut Ctx) -> Pending {
    let key = args[1].clone();
    Pending::Call(ctx.call(&key, op(Kind::GetDel(proto::GetDel { key: key.clone() }))), plain)
}
