//! Reads through the near cache (`--near-cache`), as GET (a step of `crate::pipeline`) and MGET
//! (its own handler) make them: whether the cache may serve a command's reads, the op a miss
//! fetches (tracked, so the owner invalidates it) and the ticket to insert its reply with, and
//! the insertion once the reply is in.

use std::sync::Arc;

use bytes::Bytes;
use shoal_wire::proto::{self, Op, op::Kind, reply};

use super::{Ctx, op};
use crate::backend::Backend;
use crate::backend::ReadFrom;
use crate::nearcache::{NearCache, Ticket};

/// The near cache, if it may serve this command's reads: it is on, the read goes to the
/// primary (replica reads are not tracked) and the command is not running inside EXEC.
#[inline]
pub fn cache<'a>(ctx: &Ctx<'a>) -> Option<&'a Arc<NearCache>> {
    ctx.state.near.as_ref().filter(|_| ctx.read_from == ReadFrom::Primary && !ctx.routing.capturing)
}

/// What a miss of `key` needs: the op (tracked if the owner's invalidations flow) and the
/// ticket to insert its reply with. `None`: the key is in a moving slot (not cached).
pub fn fetch(
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
pub fn settle(
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
            proto::Reply { kind: Some(reply::Kind::Value(t.value)), ..Default::default() }
        }
        _ => r,
    }
}
