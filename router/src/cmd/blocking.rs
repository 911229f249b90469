//! Blocking commands: BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP.
//!
//! The router parses the timeout (Redis's texts) and the keys, and the backend blocks the
//! command on the one node that holds every key (`CROSSSLOT` otherwise, as Redis Cluster
//! answers; `crate::backend::block`): the node runs the command's attempt at once, or queues the
//! client behind the others waiting on its keys (first come, first served) and runs it right
//! after the write that makes a key ready; a slot that moves meanwhile is followed there. The
//! router holds no thread meanwhile (the reply is a future, like any other), and the connection
//! keeps reading: a client that disconnects cancels the call, which withdraws it from the node's
//! queue. Inside MULTI/EXEC a blocking command does not block: it runs its attempt once, as in
//! Redis.
//!
//! A pop (BLPOP, BRPOP, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP) over keys of several nodes waits
//! on all of them (`Backend::pop_spread`): the command is cut into its one-key attempts and each
//! node's share to watch ([`over_keys`]). The moves (BLMOVE, BRPOPLPUSH) over two nodes wait on
//! the source's node and move with a transaction over both ([`move_across`]). Stream reads need
//! their keys on one node.

use std::time::Duration;

use bytes::Bytes;
use shoal_wire::proto::{self, op::Kind};
use tokio::time::Instant;

use super::spec::*;
use super::typed::from_node;
use super::{Args, Ctx, Pending, op};
use crate::backend::AtomicError;
use crate::backend::block::Unblocked;
use crate::resp::Reply;
use crate::state::RouterState;

/// Redis's `getTimeoutFromObjectOrReply` in seconds: milliseconds, 0 for ever.
pub fn parse_timeout(b: &[u8]) -> Result<u64, Reply> {
    let not_float = || Reply::error("ERR timeout is not a float or out of range");
    let s = std::str::from_utf8(b).map_err(|_| not_float())?;
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_whitespace()) {
        return Err(not_float());
    }
    // C's strtold, which Redis parses with, takes hexadecimal too (`0x7FFFFFFFFFFFFF`).
    let (sign, body) = match s.as_bytes()[0] {
        b'-' => (-1.0, &s[1..]),
        b'+' => (1.0, &s[1..]),
        _ => (1.0, s),
    };
    let v: f64 = match shoal_wire::num::parse_hex_float(body.as_bytes()) {
        Some(h) => sign * h,
        None => s.parse().map_err(|_| not_float())?,
    };
    if v.is_nan() {
        return Err(not_float());
    }
    let ms = (v * 1000.0).ceil();
    // Redis converts to a 64-bit integer: past its range the value wraps negative.
    if !(0.0..9.223_372_036_854_776e18).contains(&ms) {
        return Err(Reply::error("ERR timeout is negative"));
    }
    Ok(ms as u64)
}

/// XREAD/XREADGROUP's `BLOCK` milliseconds (Redis's `getTimeoutFromObjectOrReply` in ms).
fn parse_ms_timeout(b: &[u8]) -> Result<u64, Reply> {
    match shoal_wire::num::parse_i64(b) {
        None => Err(Reply::error("ERR timeout is not an integer or out of range")),
        Some(t) if t < 0 => Err(Reply::error("ERR timeout is negative")),
        Some(t) => Ok(t as u64),
    }
}

/// Where the timeout is and which arguments are keys, per command.
fn layout(args: &Args) -> Result<(usize, Vec<Bytes>), Reply> {
    let name = args[0].to_ascii_lowercase();
    let last = args.len() - 1;
    Ok(match &name[..] {
        b"xread" | b"xreadgroup" => match shoal_wire::acl::commands::xread_layout(args) {
            Some((Some(at), keys)) => (at, args[keys].to_vec()),
            _ => return Err(super::syntax_error()),
        },
        b"blpop" | b"brpop" | b"bzpopmin" | b"bzpopmax" => (last, args[1..last].to_vec()),
        b"blmove" => {
            for side in &args[3..5] {
                if !side.eq_ignore_ascii_case(b"left") && !side.eq_ignore_ascii_case(b"right") {
                    return Err(super::syntax_error());
                }
            }
            (last, args[1..3].to_vec())
        }
        b"brpoplpush" => (last, args[1..3].to_vec()),
        // BLMPOP/BZMPOP timeout numkeys key ...: keys the node can make sense of; an invalid
        // numkeys is the node's error to answer (any node will do).
        _ => {
            let keys = shoal_wire::num::parse_i64(&args[2])
                .filter(|&n| n >= 1 && (n as usize) < args.len() - 2)
                .map(|n| args[3..3 + n as usize].to_vec())
                .unwrap_or_default();
            (1, keys)
        }
    })
}

pub fn block(args: &Args, ctx: &mut Ctx) -> Pending {
    let (at, keys) = match layout(args) {
        Ok(l) => l,
        Err(e) => return e.into(),
    };
    let stream = args[0].first().is_some_and(|c| c.eq_ignore_ascii_case(&b'x'));
    let timeout = if stream { parse_ms_timeout(&args[at]) } else { parse_timeout(&args[at]) };
    let timeout_ms = match timeout {
        Ok(ms) => ms,
        Err(e) => return e.into(),
    };
    let command = proto::Command { args: args.to_vec(), keys: keys.clone(), ..Default::default() };
    let op = op(Kind::Command(Box::new(command)));
    if keys.is_empty() {
        // An invalid numkeys: the node answers its error at once (routed like any one-key op).
        return Pending::Call(ctx.call(&args[1].clone(), op), from_node);
    }
    if ctx.routing.capturing {
        // Inside EXEC: one attempt, no wait (Redis: as if the timeout had passed).
        let call = ctx.call_atomic(keys, op);
        // BLMOVE and BRPOPLPUSH that cannot block answer a null bulk, as LMOVE would.
        let moves = args[0].eq_ignore_ascii_case(b"blmove") || args[0].eq_ignore_ascii_case(b"brpoplpush");
        return Pending::later(async move {
            match call.wait().await {
                Ok(r) => match from_node(r) {
                    Reply::NilArray if moves => Reply::Nil,
                    other => other,
                },
                Err(AtomicError::Backend(e)) => e.into(),
                Err(AtomicError::Spread) => Reply::error(super::CROSSSLOT),
            }
        });
    }
    let (backend, routing) = (ctx.state.backend.clone(), ctx.routing.clone());
    // A timeout too far away to represent waits for ever (it would, in practice).
    let until =
        (timeout_ms > 0).then(|| Instant::now().checked_add(Duration::from_millis(timeout_ms))).flatten();
    let settle = ctx.state.settings.deadline;
    let spread_pop = is_pop(&args[0]).then(|| (args.to_vec(), op.no_touch));
    let spread_move = as_move(args);
    let state = ctx.state.clone();
    let wait = Box::pin(async move {
        let spread_keys = spread_pop.as_ref().map(|_| keys.clone());
        let mut blocked = backend.block(routing, keys, op.clone(), until, settle).await;
        if let (true, Some(lmove)) = (matches!(blocked, Err(AtomicError::Spread)), spread_move) {
            return move_across(state, lmove, op, until, settle).await;
        }
        if let (true, Some((args, no_touch)), Some(keys)) =
            (matches!(blocked, Err(AtomicError::Spread)), spread_pop, spread_keys)
        {
            let cut = move |keys: &[Bytes]| {
                let args = over_keys(&args, keys).expect("a pop");
                let command = proto::Command { args, keys: keys.to_vec(), ..Default::default() };
                proto::Op { no_touch, ..super::op(Kind::Command(Box::new(command))) }
            };
            let attempt = |key: &Bytes| cut(std::slice::from_ref(key));
            blocked = backend.pop_spread(keys, attempt, &cut, until, settle).await;
        }
        match blocked {
            Ok(Unblocked::Reply(r)) => from_node(r),
            Ok(Unblocked::TimedOut) => Reply::NilArray,
            Err(AtomicError::Spread) => Reply::error(super::CROSSSLOT),
            Err(AtomicError::Backend(e)) => e.into(),
        }
    });
    Pending::Blocking(wait, Reply::NilArray)
}

/// BLMOVE or BRPOPLPUSH over keys of two nodes: LMOVE (RPOPLPUSH) over them as one transaction
/// (`super::multi::move_across`); while the source has nothing, a watch-only wait on the
/// source's node (`op`, the blocking command, says what it waits for), then again. An element
/// is taken only with its push, so none is lost or doubled whatever dies in between.
async fn move_across(
    state: std::sync::Arc<RouterState>,
    lmove: Vec<Bytes>,
    op: proto::Op,
    until: Option<Instant>,
    settle: Duration,
) -> Reply {
    let src = lmove[1].clone();
    // The watch is about the source alone (the destination is on another node).
    let op = match op.kind {
        Some(Kind::Command(mut c)) => {
            c.keys = vec![src.clone()];
            proto::Op { kind: Some(Kind::Command(c)), ..op }
        }
        other => proto::Op { kind: other, ..op },
    };
    loop {
        match super::multi::move_across(state.clone(), &lmove, Instant::now() + settle).await {
            Reply::Nil => {}
            served => return served,
        }
        match state.backend.wait_ready(src.clone(), op.clone(), until, settle).await {
            Ok(Unblocked::TimedOut) => return Reply::NilArray,
            Ok(Unblocked::Reply(_)) | Err(AtomicError::Spread) => {}
            Err(AtomicError::Backend(e)) => return e.into(),
        }
    }
}

/// The non-blocking form of BLMOVE (LMOVE) and BRPOPLPUSH (RPOPLPUSH); `None` for the others.
fn as_move(args: &Args) -> Option<Vec<Bytes>> {
    if args[0].eq_ignore_ascii_case(b"blmove") && args.len() == 6 {
        let mut lmove = vec![Bytes::from_static(b"lmove")];
        lmove.extend_from_slice(&args[1..5]);
        Some(lmove)
    } else if args[0].eq_ignore_ascii_case(b"brpoplpush") && args.len() == 4 {
        Some(vec![Bytes::from_static(b"rpoplpush"), args[1].clone(), args[2].clone()])
    } else {
        None
    }
}

/// Whether the command is one of the pops that may wait on keys of several nodes.
fn is_pop(name: &[u8]) -> bool {
    [&b"blpop"[..], b"brpop", b"bzpopmin", b"bzpopmax", b"blmpop", b"bzmpop"]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n))
}

/// A pop's arguments with `keys` in place of its keys (BLPOP a b c 0 over [c]: BLPOP c 0); `None`
/// for the commands that are not pops over any of their keys.
fn over_keys(args: &[Bytes], keys: &[Bytes]) -> Option<Vec<Bytes>> {
    let name = args[0].to_ascii_lowercase();
    match &name[..] {
        b"blpop" | b"brpop" | b"bzpopmin" | b"bzpopmax" => {
            let mut out = Vec::with_capacity(keys.len() + 2);
            out.push(args[0].clone());
            out.extend_from_slice(keys);
            out.push(args[args.len() - 1].clone());
            Some(out)
        }
        // BLMPOP timeout numkeys key ... LEFT|RIGHT [COUNT n] (numkeys checked by `layout`).
        b"blmpop" | b"bzmpop" => {
            let n = shoal_wire::num::parse_i64(&args[2])? as usize;
            let mut out = vec![args[0].clone(), args[1].clone(), Bytes::from(keys.len().to_string())];
            out.extend_from_slice(keys);
            out.extend_from_slice(args.get(3 + n..)?);
            Some(out)
        }
        _ => None,
    }
}

/// `WAIT numreplicas timeout`: how many replicas have every write this connection made. Each
/// node (shard primary) is asked how many of its replicas acked every change it had applied
/// when the question arrived (the connection's earlier commands have all been answered by then:
/// WAIT is a barrier), waiting up to the timeout for `numreplicas` of them; the answer is the
/// smallest count over the shards (a node that cannot be asked counts 0). Without replicas that
/// is 0 once the timeout has passed (0 ms: never, until CLIENT UNBLOCK or the client goes away),
/// as a Redis without replicas answers; `numreplicas <= 0` and WAIT inside EXEC answer at once.
///
/// The primaries asked are those of the topology now. If some shard's primary changed since the
/// connection's last write (a failover, a hand-over), the answer is 0: the replicas of the new
/// primary may have caught up with it, but a failover may have lost writes the old primary
/// acknowledged, and they must not be reported durable (issue 38's chaos run found exactly that).
/// After a hand-over the writes were kept; 0 is then an understatement, never an overstatement.
fn wait(args: &Args, ctx: &mut Ctx) -> Pending {
    let numreplicas = match super::int_arg(&args[1]) {
        Ok(n) => n,
        Err(e) => return e.into(),
    };
    let timeout = match shoal_wire::num::parse_i64(&args[2]) {
        None => return Reply::error("ERR timeout is not an integer or out of range").into(),
        Some(t) if t < 0 => return Reply::error("ERR timeout is negative").into(),
        Some(t) => t as u64,
    };
    if numreplicas <= 0 || ctx.routing.capturing {
        return Reply::Int(0).into();
    }
    let wanted = u32::try_from(numreplicas).unwrap_or(u32::MAX);
    let state = ctx.state.clone();
    let wrote_at = ctx.session.wrote_at;
    // (Looked at after the replies too: the router may hear of a failover while it waits.)
    let primary_changed =
        move |state: &RouterState| wrote_at.is_some_and(|v| state.backend.primaries_changed_at() > v);
    Pending::Blocking(
        Box::pin(async move {
            let routing = state.backend.routing();
            let calls = routing.nodes.iter().map(|n| n.wait_replicas(wanted, timeout)).collect();
            let counts = crate::backend::futures_join(calls).await;
            let fewest = counts.into_iter().map(|c| c.unwrap_or(0)).min().unwrap_or(0);
            if primary_changed(&state) {
                return Reply::Int(0);
            }
            Reply::Int(i64::from(fewest))
        }),
        Reply::Int(0),
    )
}

pub const WAIT: CommandSpec = CommandSpec { decl: &redis::WAIT, run: wait, ..CommandSpec::DEFAULT };

pub const BLPOP: CommandSpec = CommandSpec { decl: &redis::BLPOP, run: block, ..CommandSpec::DEFAULT };

pub const BRPOP: CommandSpec = CommandSpec { decl: &redis::BRPOP, run: block, ..CommandSpec::DEFAULT };

pub const BLMOVE: CommandSpec = CommandSpec { decl: &redis::BLMOVE, run: block, ..CommandSpec::DEFAULT };

pub const BRPOPLPUSH: CommandSpec =
    CommandSpec { decl: &redis::BRPOPLPUSH, run: block, ..CommandSpec::DEFAULT };

pub const BLMPOP: CommandSpec = CommandSpec { decl: &redis::BLMPOP, run: block, ..CommandSpec::DEFAULT };

pub const BZPOPMIN: CommandSpec = CommandSpec { decl: &redis::BZPOPMIN, run: block, ..CommandSpec::DEFAULT };

pub const BZPOPMAX: CommandSpec = CommandSpec { decl: &redis::BZPOPMAX, run: block, ..CommandSpec::DEFAULT };

pub const BZMPOP: CommandSpec = CommandSpec { decl: &redis::BZMPOP, run: block, ..CommandSpec::DEFAULT };
