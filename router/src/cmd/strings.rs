//! TYPE, APPEND, STRLEN, GETRANGE, SETRANGE.

use shoal_wire::proto::{self, op::Kind, reply};

use super::{Args, Ctx, Pending, int_arg, op, plain};
use crate::resp::Reply;

pub fn type_of(args: &Args, ctx: &mut Ctx) -> Pending {
    let key = args[1].clone();
    Pending::Call(ctx.call(&key, op(Kind::TypeOf(proto::TypeOf { key: key.clone() }))), |r| match r.kind {
        Some(reply::Kind::Value(v)) => Reply::Simple(String::from_utf8_lossy(&v).into_owned().into()),
        _ => plain(r),
    })
}

pub fn append(args: &Args, ctx: &mut Ctx) -> Pending {
    let key = args[1].clone();
    Pending::Call(
        ctx.call(&key, op(Kind::Append(proto::Append { key: key.clone(), value: args[2].clone() }))),
        plain,
    )
}

pub fn strlen(args: &Args, ctx: &mut Ctx) -> Pending {
    let key = args[1].clone();
    Pending::Call(ctx.call(&key, op(Kind::Strlen(proto::Strlen { key: key.clone() }))), plain)
}

pub fn getrange(args: &Args, ctx: &mut Ctx) -> Pending {
    let (start, end) = match (int_arg(&args[2]), int_arg(&args[3])) {
        (Ok(s), Ok(e)) => (s, e),
        (Err(e), _) | (_, Err(e)) => return e.into(),
    };
    let key = args[1].clone();
    Pending::Call(ctx.call(&key, op(Kind::GetRange(proto::GetRange { key: key.clone(), start, end }))), plain)
}

pub fn setrange(args: &Args, ctx: &mut Ctx) -> Pending {
    let offset = match int_arg(&args[2]) {
        Ok(o) if o < 0 => return Reply::error("ERR offset is out of range").into(),
        Ok(o) => o,
        Err(e) => return e.into(),
    };
    let key = args[1].clone();
    let o = op(Kind::SetRange(proto::SetRange { key: key.clone(), offset, value: args[3].clone() }));
    Pending::Call(ctx.call(&key, o), plain)
}
