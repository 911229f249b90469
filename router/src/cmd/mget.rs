//! MGET: one group of GETs per node, merged back in argument order.

use shoal_wire::proto::{self, op::Kind, reply};

use std::sync::Arc;

use super::near;
use super::spec::*;
use super::{Args, Ctx, Pending, gather, op};
use crate::nearcache::NearCache;
use crate::resp::Reply;

fn value_or_nil(r: proto::Reply) -> Reply {
    match r.kind {
        Some(reply::Kind::Value(v)) => Reply::Bulk(v),
        _ => Reply::Nil,
    }
}

/// MGET through the near cache: hits are answered from it, the misses fetched (tracked) in one
/// multi-key call and inserted.
fn near_mget(cache: &Arc<NearCache>, args: &Args, ctx: &mut Ctx) -> Pending {
    let version = ctx.routing.version();
    let mut out: Vec<Option<Reply>> = Vec::with_capacity(args.len() - 1);
    let mut misses = Vec::new();
    let mut tickets = Vec::new();
    for (i, key) in args[1..].iter().enumerate() {
        if let Some(v) = cache.get(key, version) {
            out.push(Some(Reply::Bulk(v)));
            continue;
        }
        out.push(None);
        let (op, ticket) = near::fetch(cache, ctx, key, true).unwrap_or_else(|| {
            (op(Kind::Get(proto::Get { key: key.clone(), nil_if_not_string: true, track: 0 })), None)
        });
        misses.push((key.clone(), op));
        tickets.push((i, key.clone(), ticket));
    }
    if misses.is_empty() {
        return Reply::Array(out.into_iter().map(|r| r.expect("every key hit")).collect()).into();
    }
    let call = ctx.call_keys(misses.into_iter());
    let (cache, backend) = (cache.clone(), ctx.state.backend.clone());
    Pending::later(async move {
        match gather(call).await {
            Ok(replies) => {
                for ((i, key, ticket), r) in tickets.into_iter().zip(replies) {
                    out[i] = Some(value_or_nil(near::settle(&cache, &backend, &key, ticket.as_ref(), r)));
                }
                Reply::Array(out.into_iter().map(|r| r.unwrap_or(Reply::Nil)).collect())
            }
            Err(e) => e,
        }
    })
}

pub const MGET: CommandSpec = CommandSpec { decl: &redis::MGET, run: mget, ..CommandSpec::DEFAULT };

pub fn mget(args: &Args, ctx: &mut Ctx) -> Pending {
    if let Some(cache) = near::cache(ctx) {
        return near_mget(cache, args, ctx);
    }
    let call = ctx.call_keys(args[1..].iter().map(|k| {
        (k.clone(), op(Kind::Get(proto::Get { key: k.clone(), nil_if_not_string: true, track: 0 })))
    }));
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
