//! Redis's `call()`: what happens around a command's own function once a request is admitted
//! (the pipeline's dispatch stage, and EXEC for its queued commands).

use bytes::Bytes;
use shoal_wire::command::OneKey;
use shoal_wire::proto::{self, op::Kind};

use super::answer::{answer, op};
use super::spec::{Args, Ctx, Pending};
use super::spec::{CommandSpec, flag};
use crate::backend::ReadFrom;
use crate::session::Session;
use crate::state::RouterState;

/// What Redis's `call()` does before a command's own function: count it, pick where its read
/// goes (`Primary` unless it is a read-only command and the client sent READONLY or the router
/// has a `--read-from` policy), and let client tracking see its keys.
#[inline]
pub fn prepare(spec: &'static CommandSpec, args: &Args, ctx: &mut Ctx) {
    ctx.state.metrics.commands.inc();
    ctx.read_from = read_from(spec, ctx.state, ctx.session);
    if ctx.session.no_touch {
        // Redis 7.2: TOUCH still touches.
        ctx.session.skip_touch = spec.name() != "touch";
    }
    if ctx.state.pubsub.tracking.active() {
        client_tracking(spec, args, ctx);
    }
}

/// Where a command's one-key read goes (see [`prepare`]).
#[inline]
pub fn read_from(spec: &CommandSpec, state: &RouterState, session: &Session) -> ReadFrom {
    match state.settings.read_from {
        _ if !spec.has_flag(flag::READONLY) => ReadFrom::Primary,
        // READONLY: replicas, as in Redis Cluster (nearest ones if the router says so).
        ReadFrom::Primary if session.readonly => ReadFrom::ReplicaPreferred,
        policy => policy,
    }
}

/// Runs an admitted command at once, its one-key op (if its handler builds one) sent alone:
/// EXEC's queued commands. (Requests go through `crate::pipeline`, which may join such an op to
/// a lane instead.)
pub fn run(spec: &'static CommandSpec, args: &Args, ctx: &mut Ctx) -> Pending {
    prepare(spec, args, ctx);
    match (spec.run)(args, ctx) {
        Pending::Op(one) => send(one, ctx),
        other => other,
    }
}

/// Sends a one-key op a handler built, on its own.
pub fn send(one: OneKey, ctx: &Ctx) -> Pending {
    Pending::Call(ctx.call(&one.key, one.op), answer(one.answer))
}

/// CLIENT TRACKING (crate::pubsub::tracking): a write invalidates its keys for the clients holding
/// them before it is sent (the writer's own push comes before its reply, as in Redis); a
/// tracking client's read remembers its keys, and registers the ones this router did not hold
/// yet on their nodes, queued before the command's own ops so the node registers first.
fn client_tracking(spec: &'static CommandSpec, args: &Args, ctx: &mut Ctx) {
    // Redis's `resetClient`: CLIENT CACHING applies to the next command, CLIENT ones excepted.
    let caching =
        if spec.name().starts_with("client|") { ctx.session.caching } else { ctx.session.caching.take() };
    let keys = || spec_keys(spec, args);
    if spec.has_flag(flag::WRITE) {
        for key in keys() {
            ctx.state.pubsub.tracking.invalidate(key, ctx.session.id);
        }
        return;
    }
    if !spec.has_flag(flag::READONLY) || spec.key_range().first <= 0 {
        return;
    }
    let saved = std::mem::replace(&mut ctx.session.caching, caching);
    let tracks = ctx.session.tracks_reads();
    ctx.session.caching = saved;
    if !tracks {
        return;
    }
    let keys: Vec<Bytes> = keys().cloned().collect();
    let hub = &ctx.state.pubsub;
    for key in hub.tracking.read(ctx.session.id, &keys) {
        let track = proto::Get { key: key.clone(), nil_if_not_string: true, track: hub.token };
        // Only its place in the node's queue matters (before the read); the reply is dropped.
        drop(ctx.state.backend.key(ctx.routing, key, op(Kind::Get(track)), ctx.deadline));
    }
}

/// The keys of a command by its key spec (first, last, step, as COMMAND INFO gives them): none
/// when the spec declares none (`first` 0) or the arguments stop before `first`.
pub fn spec_keys<'a>(spec: &CommandSpec, args: &'a Args) -> impl ExactSizeIterator<Item = &'a Bytes> {
    let ks = spec.key_range();
    let (first, step) = (ks.first.max(0) as usize, ks.step.max(1) as usize);
    let last = if ks.last < 0 { args.len() as i64 + i64::from(ks.last) } else { i64::from(ks.last) };
    let end = if ks.first <= 0 { 0 } else { (last.max(0) as usize + 1).min(args.len()) };
    args.get(first..end.max(first)).unwrap_or(&[]).iter().step_by(step)
}
