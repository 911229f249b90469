//! Stage 2, dispatch: an admitted request is queued in its transaction, or runs: Redis's
//! `call()` preamble ([`cmd::prepare`]), the near cache for a near read ([`super::near`]), the
//! command's handler, and then the lane or a call of its own for the one-key op the handler built
//! (see [`super::lane`] for what may join).

use shoal_wire::acl::commands::flag;

use std::collections::VecDeque;

use super::{lane, near};
use crate::cmd::{self, Args, CommandSpec, Ctx, LaneClass, Pending, transaction};

/// Where a request stands once taken up.
pub enum Step<T> {
    /// Its op joined the lane: its reply comes with the lane's ([`super::Pipeline::next_sent`]).
    Joined,
    /// Its reply, ready ([`Pending::Ready`]: refused, queued in MULTI, answered from the near
    /// cache or by the router) or on its way.
    Done(T, Pending),
    /// CLIENT PAUSE holds it: once the pause lets it run, [`super::Pipeline::resume`] it.
    Held(T, &'static CommandSpec),
    /// Admitted, but the protocol's own check refused it (a command the fast path cannot carry).
    NotHere(&'static CommandSpec),
}

/// Runs (or queues) an admitted request that no pause holds. `lane`: the pipeline's lane, if its
/// requests may join one at all; `sent`: where a lane sent before this request's own ops goes.
#[inline]
pub(super) fn dispatch<T>(
    ctx: &mut Ctx,
    lane: Option<&mut lane::Lane<T>>,
    sent: &mut VecDeque<lane::LaneCall<T>>,
    spec: &'static CommandSpec,
    args: &Args,
    tag: T,
) -> Step<T> {
    let class = spec.lane;
    let readonly = spec.has_flag(flag::READONLY);
    if !readonly && spec.may_write() {
        // (What WAIT answers for: see `cmd/blocking.rs`.)
        ctx.session.wrote_at = Some(ctx.routing.version());
    }
    let joins = lane.is_some() && class != LaneClass::No && {
        let arg_bytes = args.iter().map(|a| a.len()).sum::<usize>();
        lane::may_join(ctx.state, ctx.session, ctx.routing, readonly, arg_bytes)
    };
    let lane = match lane {
        Some(lane) if joins => Some(lane),
        other => {
            // What joined goes first: this handler queues its ops itself, and ops keep their
            // order on every node.
            if let Some(lane) = other {
                sent.extend(lane.send(ctx));
            }
            None
        }
    };
    run(ctx, spec, args, (class, readonly), lane, tag)
}

/// Queues the request in its transaction, or runs it: its op joins `lane` if it may (a write
/// making the near cache forget the key now, not when the lane is sent: a GET of it later in
/// this lane must not be answered from the cache; sending forgets it again, after any fetch
/// that raced this).
#[inline]
fn run<T>(
    ctx: &mut Ctx,
    spec: &'static CommandSpec,
    args: &Args,
    (class, readonly): (LaneClass, bool),
    lane: Option<&mut lane::Lane<T>>,
    tag: T,
) -> Step<T> {
    if ctx.session.multi.is_some() && !transaction::runs_at_once(spec) {
        return Step::Done(tag, transaction::queue(spec, args, ctx));
    }
    cmd::prepare(spec, args, ctx);
    let near_read = class == LaneClass::NearRead;
    if near_read && let Some(reply) = near::hit(args, ctx, ctx.session.last_command) {
        return Step::Done(tag, reply.into());
    }
    let pending = match (spec.run)(args, ctx) {
        Pending::Op(mut one) => {
            one.op.no_touch |= ctx.session.skip_touch;
            let miss = if near_read { near::miss(&mut one, ctx) } else { None };
            return match (lane, miss) {
                (Some(lane), miss) => {
                    if !readonly {
                        ctx.state.backend.before_send(&one.op);
                    }
                    lane.push(one, miss, tag);
                    Step::Joined
                }
                (None, Some(miss)) => Step::Done(tag, near::send(one, Some(miss), ctx)),
                (None, None) => Step::Done(tag, cmd::send(one, ctx)),
            };
        }
        other => other,
    };
    // A lane-class handler builds its op or answers at once; one that sent something itself
    // would have overtaken the lane.
    debug_assert!(lane.is_none() || matches!(pending, Pending::Ready(_)), "{} sent its own op", spec.name());
    Step::Done(tag, pending)
}
