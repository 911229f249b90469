//! MGET: one group of GETs per node, merged back in argument order.

use shoal_wire::proto::{self, op::Kind, reply};

use super::spec::*;
use super::{Args, Ctx, Pending, gather, op};
use crate::resp::Reply;

pub const MGET: CommandSpec = CommandSpec {
    name: "mget",
    arity: -2,
    flags: &["readonly", "fast"],
    keys: KeySpec { first: 1, last: -1, step: 1 },
    acl: READ_STRING_FAST,
    group: "string",
    since: "1.0.0",
    summary: "Get the values of all the given keys",
    complexity: "O(N) where N is the number of keys to retrieve.",
    run: mget,
    ..CommandSpec::DEFAULT
};

pub fn mget(args: &Args, ctx: &mut Ctx) -> Pending {
    let call = ctx.call_keys(
        args[1..]
            .iter()
            .map(|k| (k.clone(), op(Kind::Get(proto::Get { key: k.clone(), nil_if_not_string: true })))),
    );
    Pending::later(async move {
        match gather(call).await {
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
