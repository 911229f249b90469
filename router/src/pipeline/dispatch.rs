//! Stage 2, dispatch: an admitted request is queued in its transaction, or runs: Redis's
//! `call()` preamble ([`cmd::prepare`]), the near cache for a near read ([`super::near`]), the
//! command's handler, and then the lane or a call of its own for the one-key op the handler built
//! (see [`super::lane`] for what may join).

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
        let readonly = spec.flags.contains(&"readonly");
        let joins = class != LaneClass::No && {
            let arg_bytes = args.iter().map(|a| a.len()).sum::<usize>();
            lane::may_join(&self.state, session, &self.routing, readonly, arg_bytes)
        };
        if !joins {
            // What joined goes first: this handler queues its ops itself, and ops keep their
            // order on every node.
            self.send(session);
        }
        let mut ctx = ctx!(self, session);
        let step = run(&mut ctx, spec, args, class, joins);
        self.now_ms = ctx.now.get();
        match step {
            Ran::Joined(one, miss) => {
                if !readonly {
                    // The near cache forgets the key now, not when the lane is sent: a GET of
                    // it later in this lane must not be answered from the cache (sending forgets
                    // it again, after any fetch that raced this).
                    self.state.backend.before_send(&one.op);
                }
                self.lane.push(one, miss, tag);
                Step::Joined
            }
            Ran::Done(pending) => Step::Done(tag, pending),
        }
    }
}

/// What running a request came to.
enum Ran {
    /// A one-key op to join the lane (with its near-cache miss, if it is one).
    Joined(shoal_wire::command::OneKey, lane::Miss),
    Done(Pending),
}

fn run(ctx: &mut Ctx, spec: &'static CommandSpec, args: &Args, class: LaneClass, joins: bool) -> Ran {
    if ctx.session.multi.is_some() && !transaction::runs_at_once(spec) {
        return Ran::Done(transaction::queue(spec, args, ctx));
    }
    cmd::prepare(spec, args, ctx);
    let near_read = class == LaneClass::NearRead;
    if near_read && let Some(reply) = near::hit(args, ctx, ctx.session.last_command) {
        return Ran::Done(reply.into());
    }
    match (spec.run)(args, ctx) {
        Pending::Op(mut one) => {
            let miss = if near_read { near::miss(&mut one, ctx) } else { None };
            match (joins, miss) {
                (true, miss) => Ran::Joined(one, miss),
                (false, Some(miss)) => Ran::Done(near::send(one, Some(miss), ctx)),
                (false, None) => Ran::Done(cmd::send(one, ctx)),
            }
        }
        other => {
            // A lane-class handler builds its op or answers at once; one that sent something
            // itself would have overtaken the lane.
            debug_assert!(!joins || matches!(other, Pending::Ready(_)), "{} sent its own op", spec.name);
            Ran::Done(other)
        }
    }
}
