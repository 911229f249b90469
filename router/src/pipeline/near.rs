//! The near cache (`--near-cache`) as a step of dispatch, for commands whose spec says they are a
//! near read ([`LaneClass::NearRead`]: GET): a key the router holds is answered here, before the
//! handler runs; a miss lets the handler build its op, which is then fetched tracked (so the
//! owner invalidates it), alone or in a lane, and its reply inserted once it is in
//! ([`cmd::near`] holds the pieces MGET shares).
//!
//! A session whose GETs no earlier stage would look at takes the shortest way of all:
//! [`super::Pipeline::near_hit`] answers a plain GET from the cache before its arguments are
//! even built (the fast path's read buffer), with the session and the stats updated exactly as
//! admission and dispatch would have (see [`super::admit::unlooked_get`]).
//!
//! [`LaneClass::NearRead`]: crate::cmd::LaneClass::NearRead

use std::time::Instant;

use shoal_wire::command::OneKey;
use shoal_wire::proto::op::Kind;

use super::lane::Miss;
use crate::cmd::{self, Ctx, Pending, near};
use crate::resp::Reply;

/// The cached value of a near read's key, if the cache may serve this request and holds it.
/// `at`: when the request was taken up (the TTL and the lease are checked as of then: no clock
/// read per hit).
#[inline]
pub fn hit(args: &cmd::Args, ctx: &Ctx, at: Instant) -> Option<Reply> {
    let cache = near::cache(ctx)?;
    cache.get_at(&args[1], ctx.routing.version(), at).map(Reply::Bulk)
}

/// A miss of the near read `one` (its handler's op): the op made a tracked read, and what
/// inserting its reply needs. `None`: the cache does not serve this request, or the key is in a
/// moving slot (fetched untracked, as built).
#[inline]
pub fn miss(one: &mut OneKey, ctx: &Ctx) -> Miss {
    let cache = near::cache(ctx)?;
    let nil_if_not_string = match &one.op.kind {
        Some(Kind::Get(get)) => get.nil_if_not_string,
        _ => return None,
    };
    let (op, ticket) = near::fetch(cache, ctx, &one.key, nil_if_not_string)?;
    one.op = op;
    Some(Box::new((one.key.clone(), ticket)))
}

/// Sends a near read's op alone (it could not join a lane), inserting its reply.
pub fn send(one: OneKey, miss: Miss, ctx: &Ctx) -> Pending {
    let (Some(miss), Some(cache)) = (miss, ctx.state.near.clone()) else { return cmd::send(one, ctx) };
    let call = ctx.call(&one.key, one.op);
    let answer = cmd::answer(one.answer);
    let backend = ctx.state.backend.clone();
    Pending::later(async move {
        let (key, ticket) = *miss;
        match call.wait().await {
            Ok(r) => answer(near::settle(&cache, &backend, &key, ticket.as_ref(), r)),
            Err(e) => e.into(),
        }
    })
}
