//! Stage 2, dispatch: an admitted request is queued in its transaction, or runs: Redis's
//! `call()` preamble ([`cmd::prepare`]), the near cache for a near read ([`super::near`]), the
//! command's handler, and then the lane or a call of its own for the one-key op the handler built
//! (see [`super::lane`] for what may join).

use shoal_wire::acl::commands::flag;

use super::{Pipeline, Step, ctx, lane, near};
use crate::cmd::{self, Args, CommandSpec, Ctx, LaneClass, Pending, transaction};
use crate::session::Session;

impl<T> Pipeline<T> {
    /// Runs (or queues) an admitted request that no pause holds.
    pub(super) fn dispatch(
        &mut self,
        session: &mut Session,
        spec: &'static CommandSpec,
        args: &Args,
        tag: T,
    ) -> Step<T> {
        let class = spec.lane;
        let readonly = spec.has_flag(flag::READONLY);
        let joins = self.lanes && class != LaneClass::No && {
            let arg_bytes = args.iter().map(|a| a.len()).sum::<usize>();
            lane::may_join(&self.state, session, &self.routing, readonly, arg_bytes)
        };
        if !joins {
            // What joined goes first: this handler queues its ops itself, and ops keep their
            // order on every node.
            self.send(session);
        }
        let mut ctx = ctx!(self, session);
        let lane = if joins { Some(&mut self.lane) } else { None };
        let step = run(&mut ctx, spec, args, (class, readonly), lane, tag);
        self.now_ms = ctx.now.get();
        step
    }
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
