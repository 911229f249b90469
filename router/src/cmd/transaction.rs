//! MULTI, EXEC, DISCARD, WATCH, UNWATCH.
//!
//! Commands after MULTI queue in the session (Redis's `processCommand` gates still apply: an
//! unknown command, a wrong arity or a command refused in transactions flags the transaction,
//! and EXEC then answers EXECABORT). EXEC runs each queued command's ordinary handler against a
//! capturing routing (`backend::capture`). When every op and every watched key belongs to one
//! node, it sends the ops as one `Transaction` op: the node applies them with no other op in
//! between, or none of them if a watched key changed (EXEC then answers a null array). It travels
//! as a unit (`crate::backend::unit`): a `moved` reply or a slot in motion sends the same ops
//! again, by the new topology, until the command deadline: a transaction is applied whole, once,
//! or not at all. Over several nodes, `crate::backend::spread` runs it in two phases with the
//! same guarantees (docs/architecture.md, "Transactions over several nodes").
//!
//! WATCH registers each key on its node, which answers the key's current version
//! (`node/src/store/watch.rs`); EXEC hands the versions back for the node to compare. A key that
//! moved to another node since counts as changed (its new node knows no such version).
//! Registrations are released by UNWATCH, EXEC, DISCARD, RESET and when the connection closes.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use shoal_wire::proto::{self, Op, op::Kind, reply};
use tokio::time::Instant;

use super::spec::*;
use super::{Args, BoxReply, Ctx, Pending, op, run};
use crate::backend::capture::Capture;
use crate::backend::{AtomicError, BackendError, Routing, SpreadOutcome};
use crate::resp::Reply;
use crate::session::{Multi, WatchList};
use crate::state::{Charge, RouterState};

/// Releases a connection's watches when dropped (the connection closed, however it ended).
pub struct ReleaseOnDrop {
    pub state: Arc<RouterState>,
    pub list: WatchList,
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        release(&self.state, self.list.take());
    }
}

/// Drops the registrations of `keys` on their nodes, in the background (a node that is down, or
/// a key that moved, leaves its registration to the node's sweep).
pub fn release(state: &Arc<RouterState>, keys: Vec<(Bytes, u64)>) {
    if keys.is_empty() {
        return;
    }
    let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
    let routing = state.backend.routing();
    let deadline = Instant::now() + state.settings.deadline;
    let items = keys.into_iter().map(|(k, _)| {
        let release = op(Kind::Watch(proto::Watch { keys: vec![k.clone()], release: true }));
        (k, release)
    });
    let call = state.backend.keys(&routing, items, deadline);
    rt.spawn(async move {
        let _ = call.gather().await;
    });
}

/// Commands that run at once inside MULTI instead of queueing (Redis's list in `processCommand`).
pub fn runs_at_once(spec: &CommandSpec) -> bool {
    matches!(spec.name(), "exec" | "discard" | "multi" | "watch" | "quit" | "reset")
}

/// Queues `args` in the open transaction; the reply is +QUEUED or the refusal.
pub fn queue(spec: &'static CommandSpec, args: &Args, ctx: &mut Ctx) -> Pending {
    let limit = ctx.state.settings.query_buffer_limit(true);
    let multi = ctx.session.multi.as_mut().expect("queue only inside MULTI");
    if spec.has_flag(flag::NO_MULTI) {
        multi.dirty = true;
        return Reply::error("ERR Command not allowed inside a transaction").into();
    }
    // Redis 7.0 queues a (P|S)SUBSCRIBE and writes its pushes inside EXEC's array (one element
    // per command, yet several pushes for several channels); Shoal refuses it.
    if matches!(spec.name(), "subscribe" | "psubscribe" | "ssubscribe") {
        multi.dirty = true;
        return Reply::error("ERR Command not allowed inside a transaction").into();
    }
    let size: usize = args.iter().map(|a| a.len() + 16).sum();
    if multi.bytes + size > limit {
        multi.dirty = true;
        return Reply::error(
            "ERR the transaction's queued commands exceed client-query-buffer-limit; EXEC will be refused",
        )
        .into();
    }
    if !multi.charge.get_or_insert_with(|| Charge::new(ctx.state)).grow(size) {
        multi.dirty = true;
        ctx.state.metrics.buffer_refusals.inc();
        return Reply::error(
            "ERR the transaction's queued commands exceed the request buffer budget; EXEC will be refused",
        )
        .into();
    }
    multi.bytes += size;
    multi.queued.push((ctx.registry.slot_of(spec).expect("every command has a slot"), args.to_vec()));
    ctx.session.client.set_multi(Some(multi.queued.len()));
    // Redis refuses any command but EXEC and DISCARD in MULTI while memory is full (queueing
    // grows memory): the key's node is asked (a command without a key is queued).
    if ctx.state.memory_limited.load(std::sync::atomic::Ordering::Relaxed) {
        let keys = shoal_wire::acl::commands::keys_of(spec.decl, args);
        if let Some(k) = keys.first() {
            return room_check(args[k.index].clone(), multi.refused.clone(), ctx);
        }
    }
    Reply::simple("QUEUED").into()
}

/// Redis refuses a command queued in MULTI with OOM when memory is full (the transaction then
/// aborts at EXEC): the key's node is asked for room (it evicts as a write would), and its OOM
/// is the command's reply. The next commands of the pipeline wait for it.
fn room_check(key: Bytes, refused: Arc<std::sync::atomic::AtomicBool>, ctx: &mut Ctx) -> Pending {
    let command = proto::Command {
        args: vec![Bytes::from_static(b"shoal-room"), key.clone()],
        key_index: 1,
        ..Default::default()
    };
    let call = ctx.call(&key, op(Kind::Command(Box::new(command))));
    Pending::Barrier(Box::pin(async move {
        match call.wait().await {
            Ok(reply) if reply.error_kind() == proto::ErrorKind::OutOfMemory => {
                refused.store(true, std::sync::atomic::Ordering::Relaxed);
                match reply.kind {
                    Some(reply::Kind::Error(e)) => Reply::error_fmt(e),
                    _ => Reply::error("OOM command not allowed when used memory > 'maxmemory'."),
                }
            }
            // Room, or no answer: queued (EXEC meets a full memory again, whole).
            _ => Reply::simple("QUEUED"),
        }
    }))
}

fn http_refusal(ctx: &Ctx) -> Option<Pending> {
    ctx.session.http.then(|| {
        Reply::error("ERR transactions need a connection: each HTTP request stands alone; use RESP").into()
    })
}

fn multi(_args: &Args, ctx: &mut Ctx) -> Pending {
    if let Some(refused) = http_refusal(ctx) {
        return refused;
    }
    if ctx.session.multi.is_some() {
        return Reply::error("ERR MULTI calls can not be nested").into();
    }
    ctx.session.multi = Some(Multi::default());
    ctx.session.client.set_multi(Some(0));
    Reply::OK.into()
}

fn discard(_args: &Args, ctx: &mut Ctx) -> Pending {
    if ctx.session.multi.take().is_none() {
        return Reply::error("ERR DISCARD without MULTI").into();
    }
    ctx.session.client.set_multi(None);
    release(ctx.state, ctx.session.watched.take());
    Reply::OK.into()
}

fn unwatch(_args: &Args, ctx: &mut Ctx) -> Pending {
    release(ctx.state, ctx.session.watched.take());
    Reply::OK.into()
}

fn watch(args: &Args, ctx: &mut Ctx) -> Pending {
    if let Some(refused) = http_refusal(ctx) {
        return refused;
    }
    if ctx.session.multi.is_some() {
        return Reply::error("ERR WATCH inside MULTI is not allowed").into();
    }
    let keys: Vec<Bytes> = args[1..].to_vec();
    let items = keys
        .iter()
        .map(|k| (k.clone(), op(Kind::Watch(proto::Watch { keys: vec![k.clone()], release: false }))));
    let call = ctx.call_keys(items);
    let list = ctx.session.watched.clone();
    // A barrier: EXEC must not be dispatched before the versions are recorded.
    Pending::Barrier(Box::pin(async move {
        let replies = match call.gather().await {
            Ok(r) => r,
            Err(e) => return e.into(),
        };
        let mut failure = None;
        let mut watched = list.lock();
        for (key, r) in keys.into_iter().zip(replies) {
            match version_of(r) {
                Ok(version) => watched.push((key, version)),
                Err(e) => failure = Some(e),
            }
        }
        failure.unwrap_or(Reply::OK)
    }))
}

/// A key's version from the node's answer to its `Watch` op (the error to answer instead).
pub(super) fn version_of(r: proto::Reply) -> Result<u64, Reply> {
    match r.kind {
        Some(reply::Kind::Versions(v)) if v.versions.len() == 1 => Ok(v.versions[0]),
        Some(reply::Kind::Error(e)) => Err(Reply::error_fmt(e)),
        other => Err(super::unexpected(other)),
    }
}

/// What the node made of the transaction.
enum Outcome {
    Replies(Vec<proto::Reply>),
    Aborted,
}

use super::CROSSSLOT;

fn exec(_args: &Args, ctx: &mut Ctx) -> Pending {
    let Some(multi) = ctx.session.multi.take() else {
        return Reply::error("ERR EXEC without MULTI").into();
    };
    ctx.session.client.set_multi(None);
    let watched = ctx.session.watched.take();
    if multi.dirty || multi.refused.load(std::sync::atomic::Ordering::Relaxed) {
        release(ctx.state, watched);
        return Reply::error("EXECABORT Transaction discarded because of previous errors.").into();
    }
    // Each queued command's handler, as if it ran now, its ops recorded.
    let capture = Capture::new();
    let captured = Arc::new(ctx.routing.capture(&capture));
    let mut replies: Vec<BoxReply> = Vec::with_capacity(multi.queued.len());
    {
        let mut sub = Ctx {
            state: ctx.state,
            session: &mut *ctx.session,
            routing: &captured,
            deadline: ctx.deadline,
            // Transactions run on primaries.
            read_from: crate::backend::ReadFrom::Primary,
            now: ctx.now,
            registry: ctx.registry,
        };
        for (slot, args) in &multi.queued {
            let spec = ctx.registry.spec_at(*slot).expect("a queued command's slot");
            let mut reply: BoxReply = Box::pin(run(spec, args, &mut sub).resolve());
            // One poll records the calls a reply makes when first polled rather than when built.
            if let Poll::Ready(r) = reply.as_mut().poll(&mut Context::from_waker(std::task::Waker::noop())) {
                reply = Box::pin(std::future::ready(r));
            }
            replies.push(reply);
        }
    }
    let mut nodes = capture.positions();
    nodes.extend(watched.iter().map(|(k, _)| ctx.routing.locate(k).0));
    let state = ctx.state.clone();
    let routing = ctx.routing.clone();
    let deadline = ctx.deadline;
    if nodes.len() > 1 {
        let placed = capture.seal_placed();
        // Scripts run on a node's script thread, which the two phases do not reach: a
        // transaction holding one goes whole to the first node, which runs it holding every
        // other node, as a script over several nodes (docs/architecture.md).
        if placed.iter().any(|(_, op)| matches!(op.kind, Some(Kind::Script(_)))) {
            let ids = placed.iter().map(|(pos, _)| routing.nodes[*pos % routing.len()].ident().id).collect();
            let ops = placed.into_iter().map(|(_, op)| op).collect();
            return Pending::Barrier(Box::pin(async move {
                let outcome = send(&state, routing, 0, ops, ids, &watched, deadline).await;
                release(&state, watched);
                finish(outcome, &capture, replies).await
            }));
        }
        return Pending::Barrier(Box::pin(async move {
            let watches = watches_of(&watched);
            let outcome = state.backend.spread_transaction(&routing, placed, watches, deadline).await;
            release(&state, watched);
            let outcome = match outcome {
                Ok(SpreadOutcome::Replies(r)) => Ok(Outcome::Replies(r)),
                Ok(SpreadOutcome::Refused(r)) => node_outcome(r),
                Err(AtomicError::Spread) => Err(Reply::error(CROSSSLOT)),
                Err(AtomicError::Backend(e)) => Err(e.into()),
            };
            finish(outcome, &capture, replies).await
        }));
    }
    let any = capture.any_position();
    let ops = capture.seal();
    // Every op on one node, but a script's keys on several (its op was placed on the first of
    // them): that transaction, too, runs from the first node holding the others.
    let spread_script =
        routing.len() > 1 && ops.iter().any(|op| matches!(op.kind, Some(Kind::Script(_)))) && {
            let mut keys: Vec<Bytes> =
                ops.iter().flat_map(shoal_wire::ops::keys_of).map(Bytes::copy_from_slice).collect();
            keys.extend(watched.iter().map(|(k, _)| k.clone()));
            routing.one_owner(&keys).is_none()
        };
    Pending::Barrier(Box::pin(async move {
        let outcome = match nodes.first().copied().or(any) {
            // Nothing for a node (only commands the router answers itself): nothing to check.
            None => Ok(Outcome::Replies(Vec::new())),
            Some(pos) => {
                let ids = match spread_script {
                    true => vec![routing.nodes[pos % routing.len()].ident().id; ops.len()],
                    false => Vec::new(),
                };
                send(&state, routing, pos, ops, ids, &watched, deadline).await
            }
        };
        release(&state, watched);
        finish(outcome, &capture, replies).await
    }))
}

/// EXEC's reply from what the node(s) made of the transaction: each queued command's own reply,
/// a null array (a watched key changed), or the error that refused it.
async fn finish(outcome: Result<Outcome, Reply>, capture: &Capture, replies: Vec<BoxReply>) -> Reply {
    match outcome {
        Ok(Outcome::Replies(r)) => {
            capture.deliver(r);
            let mut out = Vec::with_capacity(replies.len());
            for reply in replies {
                out.push(reply.await);
            }
            Reply::Array(out)
        }
        Ok(Outcome::Aborted) => {
            capture.fail(BackendError::NotTransactional);
            Reply::NilArray
        }
        Err(e) => {
            capture.fail(BackendError::NotTransactional);
            e
        }
    }
}

fn watches_of(watched: &[(Bytes, u64)]) -> Vec<proto::Watched> {
    watched.iter().map(|(key, version)| proto::Watched { key: key.clone(), version: *version }).collect()
}

/// A node's answer to a transaction (or to its part of one) as EXEC's outcome.
fn node_outcome(reply: proto::Reply) -> Result<Outcome, Reply> {
    // BUSY (a script holds the node) and OOM (memory is full and a queued command may grow it)
    // refuse the EXEC itself: nothing ran.
    let busy = matches!(reply.error_kind(), proto::ErrorKind::Busy | proto::ErrorKind::OutOfMemory);
    match reply.kind {
        Some(reply::Kind::Replies(r)) => Ok(Outcome::Replies(r.replies)),
        Some(reply::Kind::Aborted(_)) => Ok(Outcome::Aborted),
        // As Redis's EXEC refused while a script runs or memory is full (`execCommandAbort`):
        // nothing ran, and the transaction is discarded.
        Some(reply::Kind::Error(e)) if busy => {
            Err(Reply::error_fmt(format!("EXECABORT Transaction discarded because of: {e}")))
        }
        Some(reply::Kind::Error(e)) => Err(Reply::error_fmt(e)),
        other => Err(super::unexpected(other)),
    }
}

/// Sends the transaction to the node at `pos` as one unit: the backend sends it again by the
/// current topology after a `moved` reply or while a slot of it moves, until `deadline`. With
/// `nodes` (the topology id of each op's node): a transaction holding a script over several
/// nodes, sent to the first node, which holds the others (`Transaction.nodes`).
async fn send(
    state: &Arc<RouterState>,
    routing: Arc<Routing>,
    pos: usize,
    ops: Vec<Op>,
    nodes: Vec<u32>,
    watched: &[(Bytes, u64)],
    deadline: Instant,
) -> Result<Outcome, Reply> {
    let watches = watches_of(watched);
    // EVALSHA inside MULTI: the node may not have the script (it was loaded through another
    // node). It refuses such a transaction before running anything; the bodies are fetched from
    // the nodes that have them and the transaction goes again (scripting.rs does the same for
    // a lone EVALSHA, which can simply be sent twice).
    let refuse_unknown_scripts = ops.iter().any(is_script_by_sha);
    let kept = refuse_unknown_scripts.then(|| (ops.clone(), watches.clone()));
    let t = proto::Transaction { ops, watches, refuse_unknown_scripts, nodes: nodes.clone() };
    let mut reply = send_unit(state, &routing, pos, t, deadline).await?;
    if let Some((mut ops, watches)) = kept
        && reply.error_kind() == proto::ErrorKind::NoScript
    {
        for op in &mut ops {
            if is_script_by_sha(op)
                && let Some(Kind::Script(s)) = &mut op.kind
                && let Some(body) = super::scripting::recover(state, &routing, &s.sha, deadline).await
            {
                s.body = body;
            }
        }
        let t = proto::Transaction { ops, watches, refuse_unknown_scripts: false, nodes };
        reply = send_unit(state, &routing, pos, t, deadline).await?;
    }
    node_outcome(reply)
}

/// One send of a transaction as a unit (see [`send`]).
async fn send_unit(
    state: &Arc<RouterState>,
    routing: &Arc<Routing>,
    pos: usize,
    t: proto::Transaction,
    deadline: Instant,
) -> Result<proto::Reply, Reply> {
    let over_nodes = !t.nodes.is_empty();
    let transaction = op(Kind::Transaction(t));
    let keys: Vec<Bytes> =
        shoal_wire::ops::keys_of(&transaction).into_iter().map(Bytes::copy_from_slice).collect();
    let call = if over_nodes {
        state.backend.spanning_unit(routing, keys, true, transaction, deadline)
    } else {
        state.backend.unit(routing, keys, Some(pos), transaction, deadline)
    };
    match call.wait().await {
        Ok(r) => Ok(r),
        Err(AtomicError::Spread) => Err(Reply::error(CROSSSLOT)),
        Err(AtomicError::Backend(e)) => Err(e.into()),
    }
}

/// A script op that names its script by SHA only (EVALSHA), not a library function.
fn is_script_by_sha(op: &Op) -> bool {
    matches!(&op.kind, Some(Kind::Script(s)) if shoal_wire::script::by_sha_only(s))
}

pub const MULTI: CommandSpec = CommandSpec { decl: &redis::MULTI, run: multi, ..CommandSpec::DEFAULT };

pub const EXEC: CommandSpec = CommandSpec { decl: &redis::EXEC, run: exec, ..CommandSpec::DEFAULT };

pub const DISCARD: CommandSpec = CommandSpec { decl: &redis::DISCARD, run: discard, ..CommandSpec::DEFAULT };

pub const WATCH: CommandSpec = CommandSpec { decl: &redis::WATCH, run: watch, ..CommandSpec::DEFAULT };

pub const UNWATCH: CommandSpec = CommandSpec { decl: &redis::UNWATCH, run: unwatch, ..CommandSpec::DEFAULT };
