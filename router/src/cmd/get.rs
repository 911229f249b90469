//! GET and GETDEL.

use std::sync::Arc;

use bytes::Bytes;
use shoal_wire::command;
use shoal_wire::proto::{self, Op, op::Kind, reply};

use super::spec::*;
use super::{Args, Ctx, Pending, one_key, op, plain};
use crate::backend::Backend;
use crate::nearcache::{NearCache, Ticket};
use crate::resp::Reply;
use crate::state::ReadFrom;

pub const GET: CommandSpec = CommandSpec {
    name: "get",
    arity: 2,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: READ_STRING_FAST,
    group: "string",
    since: "1.0.0",
    summary: "Get the value of a key",
    complexity: "O(1)",
    run: get,
    ..CommandSpec::DEFAULT
};

pub const GETDEL: CommandSpec = CommandSpec {
    name: "getdel",
    arity: 2,
    flags: &["write", "fast"],
    keys: KeySpec::ONE,
    acl: WRITE_STRING_FAST,
    group: "string",
    since: "6.2.0",
    summary: "Get the value of a key and delete the key",
    complexity: "O(1)",
    run: getdel,
    ..CommandSpec::DEFAULT
};

pub fn get(args: &Args, ctx: &mut Ctx) -> Pending {
    if let Some(near) = near_cache(ctx) {
        return near_get(near, args, ctx);
    }
    one_key(args, ctx, command::get)
}

/// The near cache, if it may serve this command's reads: it is on, the read goes to the
/// primary (replica reads are not tracked) and the command is not being queued in MULTI.
pub(super) fn near_cache<'a>(ctx: &Ctx<'a>) -> Option<&'a Arc<NearCache>> {
    ctx.state.near.as_ref().filter(|_| ctx.read_from == ReadFrom::Primary && !ctx.routing.capturing)
}

/// What a miss of `key` needs: the op (tracked if the owner's invalidations flow) and the
/// ticket to insert its reply with. `None`: the key is in a moving slot (not cached).
pub(super) fn near_fetch(
    near: &NearCache,
    ctx: &Ctx,
    key: &Bytes,
    nil_if_not_string: bool,
) -> Option<(Op, Option<Ticket>)> {
    let (pos, moving) = ctx.routing.locate(key);
    if moving.is_some() {
        return None;
    }
    let ident = ctx.routing.nodes[pos].ident();
    let ticket = near.ticket(&near.lease_of(ident.id, &ident.addr), ctx.routing.version());
    let track = if ticket.is_some() { near.token } else { 0 };
    Some((op(Kind::Get(proto::Get { key: key.clone(), nil_if_not_string, track })), ticket))
}

/// A fetched reply: inserted if it was tracked (and nothing raced it); the client's value.
pub(super) fn near_settle(
    near: &NearCache,
    backend: &Backend,
    key: &Bytes,
    ticket: Option<&Ticket>,
    r: proto::Reply,
) -> proto::Reply {
    match r.kind {
        Some(reply::Kind::Tracked(t)) => {
            if let Some(ticket) = ticket {
                near.insert(key, &t.value, t.ttl_ms, ticket, backend.routing().version());
            }
            proto::Reply { kind: Some(reply::Kind::Value(t.value)) }
        }
        _ => r,
    }
}

fn near_get(near: &Arc<NearCache>, args: &Args, ctx: &mut Ctx) -> Pending {
    let key = &args[1];
    if let Some(v) = near.get(key, ctx.routing.version()) {
        return Reply::Bulk(v).into();
    }
    let Some((op, ticket)) = near_fetch(near, ctx, key, false) else {
        return one_key(args, ctx, command::get);
    };
    let call = ctx.call(key, op);
    let (near, backend, key) = (near.clone(), ctx.state.backend.clone(), key.clone());
    Pending::later(async move {
        match call.wait().await {
            Ok(r) => plain(near_settle(&near, &backend, &key, ticket.as_ref(), r)),
            Err(e) => e.into(),
        }
    })
}

pub fn getdel(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::getdel)
}
