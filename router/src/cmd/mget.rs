//! MGET: one group of GETs per node, merged back in argument order.

use shoal_wire::proto::{self, op::Kind, reply};

use super::{Args, Ctx, Pending, fan_out, op};
use crate::resp::Reply;

pub fn mget(args: &Args, ctx: &mut Ctx) -> Pending {
    let calls =
        fan_out(ctx, args[1..].iter().map(|k| (k.clone(), op(Kind::Get(proto::Get { key: k.clone() })))));
    Pending::later(async move {
        match calls.gather().await {
            Ok(replies) => Reply::Array(
                replies
                    .into_iter()
                    .map(|r| match r.kind {
                        Some(reply::Kind::Value(v)) => Reply::Bulk(v),
                        _ => Reply::Nil,
                    })
                    .collect(),
            ),
            Err(e) => e,
        }
    })
}
