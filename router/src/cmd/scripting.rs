//! EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT LOAD/EXISTS/FLUSH/KILL/DEBUG/HELP.
//!
//! A script runs on the node that holds its keys, atomically (the node's script thread holds its
//! store while it runs: `node/src/script`); a script without keys runs on any node. The router sends a `Script` op on the node's batched stream, so a
//! pipeline of scripts flows like any other commands. It travels as a unit, as EXEC's
//! transactions do (`crate::backend::unit`): a `moved` reply or a slot in motion sends it again.
//!
//! Nodes cache scripts by SHA1. EVAL carries the body; EVALSHA only the SHA, and when the node
//! answers NOSCRIPT (it restarted, or joined the cluster after the script was loaded) the router
//! fetches the body from a node that has it and sends the script again, so a client sees
//! NOSCRIPT only for a script no node knows. Routers keep no scripts of their own: after SCRIPT
//! FLUSH (which reaches every node) no router can bring a script back. SCRIPT LOAD reaches every
//! node; SCRIPT EXISTS asks them all; SCRIPT KILL stops the script running on any node (a call
//! of its own, since that node's stream is busy with it).

use std::sync::Arc;

use bytes::Bytes;
use shoal_wire::proto::{self, Op, frame, kill_script_reply::Outcome, op::Kind, reply, script_admin::Action};
use shoal_wire::script::NOSCRIPT;
use tokio::time::Instant;

use super::spec::*;
use super::typed::from_frame;
use super::{Args, Ctx, Pending, int_arg, op};
use crate::backend::{AtomicError, Routing, futures_join};
use crate::resp::Reply;
use crate::state::RouterState;

pub const EVAL: CommandSpec = CommandSpec {
    decl: &redis::EVAL,
    run: |args, ctx| eval_generic(args, ctx, false, false),
    ..CommandSpec::DEFAULT
};

pub const EVALSHA: CommandSpec =
    CommandSpec { decl: &redis::EVALSHA, run: |args, ctx| eval_generic(args, ctx, true, false), ..EVAL };

pub const EVAL_RO: CommandSpec =
    CommandSpec { decl: &redis::EVAL_RO, run: |args, ctx| eval_generic(args, ctx, false, true), ..EVAL };

pub const EVALSHA_RO: CommandSpec =
    CommandSpec { decl: &redis::EVALSHA_RO, run: |args, ctx| eval_generic(args, ctx, true, true), ..EVAL_RO };

pub const SCRIPT_LOAD: CommandSpec =
    CommandSpec { decl: &redis::SCRIPT_LOAD, run: load, ..CommandSpec::DEFAULT };

pub const SCRIPT_EXISTS: CommandSpec =
    CommandSpec { decl: &redis::SCRIPT_EXISTS, run: exists, ..CommandSpec::DEFAULT };

pub const SCRIPT_FLUSH: CommandSpec =
    CommandSpec { decl: &redis::SCRIPT_FLUSH, run: flush, ..CommandSpec::DEFAULT };

pub const SCRIPT_KILL: CommandSpec =
    CommandSpec { decl: &redis::SCRIPT_KILL, run: kill, ..CommandSpec::DEFAULT };

pub const SCRIPT_DEBUG: CommandSpec =
    CommandSpec { decl: &redis::SCRIPT_DEBUG, run: debug, ..CommandSpec::DEFAULT };

pub const SCRIPT_HELP: CommandSpec =
    CommandSpec { decl: &redis::SCRIPT_HELP, run: help, ..CommandSpec::DEFAULT };

pub const SCRIPT: CommandSpec = CommandSpec {
    decl: &redis::SCRIPT,
    run: help,
    subcommands: &[&SCRIPT_LOAD, &SCRIPT_EXISTS, &SCRIPT_FLUSH, &SCRIPT_KILL, &SCRIPT_DEBUG, &SCRIPT_HELP],
    ..CommandSpec::DEFAULT
};

fn eval_generic(args: &Args, ctx: &mut Ctx, by_sha: bool, readonly: bool) -> Pending {
    let numkeys = match int_arg(&args[2]) {
        Ok(n) => n,
        Err(e) => return e.into(),
    };
    if numkeys > (args.len() - 3) as i64 {
        return Reply::error("ERR Number of keys can't be greater than number of args").into();
    }
    if numkeys < 0 {
        return Reply::error("ERR Number of keys can't be negative").into();
    }
    let (sha, body) = if by_sha {
        if args[1].len() != 40 {
            return Reply::error(NOSCRIPT).into();
        }
        (String::from_utf8_lossy(&args[1]).to_ascii_lowercase(), Bytes::new())
    } else {
        (shoal_wire::script::sha1_hex(&args[1]), args[1].clone())
    };
    let split = 3 + numkeys as usize;
    let script = proto::Script { sha, body, args: args[split..].to_vec(), readonly, ..Default::default() };
    send(script, args[3..split].to_vec(), ctx)
}

/// Sends a script (or a library function: FCALL) to the node of its keys, any node without
/// keys; the reply is the script's.
pub fn send(mut script: proto::Script, keys: Vec<Bytes>, ctx: &mut Ctx) -> Pending {
    // The user's permissions travel with the script (empty for an unrestricted user), so the
    // node checks each of its calls as Redis does; EVAL inside MULTI comes here too, at EXEC.
    let user = super::acl::session_user(ctx);
    script.acl = user.script_rules().to_string();
    script.resp = ctx.session.protocol().version() as u32;
    script.keys = keys.clone();
    let routing = ctx.routing.clone();
    // A script once seen reaching an undeclared key of another node (a node reported it) goes to
    // the first node, which holds every node while it runs; one whose declared keys live on
    // several nodes goes to the first of them, which holds the others. Without a topology (static
    // `--nodes`) nodes cannot reach each other: CROSSSLOT, as Redis Cluster answers.
    let several = routing.managed && routing.len() > 1;
    let name = if script.function.is_empty() { &script.sha } else { &script.function };
    let everywhere = several && {
        let reaching = ctx.state.reaching_scripts.lock();
        !reaching.is_empty() && reaching.contains(name)
    };
    let spanning = !keys.is_empty() && routing.one_owner(&keys).is_none();
    if spanning && !several {
        return Reply::error(super::CROSSSLOT).into();
    }
    script.hold_all = everywhere;
    // A script without keys runs on any node; spread them.
    let at = (keys.is_empty() && !everywhere).then(|| fastrand::usize(..routing.len().max(1)));
    let op = op(Kind::Script(Box::new(script)));
    let (state, deadline) = (ctx.state.clone(), ctx.deadline);
    // Sent now, with the commands dispatched before it (they share the node's stream, in order);
    // sent again by the backend, like EXEC, if the topology moved under it.
    let send = {
        let state = state.clone();
        move |routing: &Arc<Routing>, op: Op, everywhere: bool| {
            if everywhere || spanning {
                state.backend.spanning_unit(routing, keys.clone(), everywhere, op, deadline)
            } else {
                let pos = at.or_else(|| routing.one_owner(&keys));
                state.backend.unit(routing, keys.clone(), pos, op, deadline)
            }
        }
    };
    let first = send(&routing, op.clone(), everywhere);
    let client = ctx.session.client.clone();
    let registry = ctx.registry;
    Pending::later(async move {
        let mut reply = match first.wait().await {
            Ok(r) => r,
            Err(e) => return unit_failed(e),
        };
        if is_noscript(&reply)
            && let Some(Kind::Script(s)) = &op.kind
            && s.body.is_empty()
            && let Some(body) = recover(&state, &routing, &s.sha, deadline).await
        {
            let again = op_with_body(&op, body);
            reply = match send(&state.backend.routing(), again, everywhere).wait().await {
                Ok(r) => r,
                Err(e) => return unit_failed(e),
            };
        }
        if let Some(reply::Kind::Script(s)) = &reply.kind
            && (s.reached || s.frame.is_none())
        {
            if s.reached
                && let Some(Kind::Script(sent)) = &op.kind
            {
                let name = if sent.function.is_empty() { &sent.sha } else { &sent.function };
                let mut reaching = state.reaching_scripts.lock();
                if reaching.len() >= REACHING_MAX {
                    reaching.clear();
                }
                reaching.insert(name.clone());
            }
            // The node sends it to the first node, holding every node (its first run there, or a
            // script known to reach, or one that stopped before writing on a node held
            // elsewhere): once more, from there (it cannot come back so but for a topology change).
            if s.frame.is_none() && several {
                reply = match send(&state.backend.routing(), with_hold_all(&op), true).wait().await {
                    Ok(r) => r,
                    Err(e) => return unit_failed(e),
                };
                if matches!(&reply.kind, Some(reply::Kind::Script(s)) if s.frame.is_none()) {
                    return unit_failed(AtomicError::Backend(crate::backend::BackendError::TryAgain));
                }
            }
        }
        match reply.kind {
            Some(reply::Kind::Frame(f)) => from_frame(f),
            Some(reply::Kind::Script(s)) => {
                count_calls(&state, registry, &s.calls);
                super::acl::log_script_denials(&state, registry, &client, &user.name, &s.denials);
                s.frame.map_or_else(|| super::unexpected(None), from_frame)
            }
            Some(reply::Kind::Error(e)) => Reply::error_fmt(e),
            other => super::unexpected(other),
        }
    })
}

/// At most this many scripts are remembered as reaching other nodes (past it, the set starts
/// over: a script forgotten reaches again once, and is learned again).
const REACHING_MAX: usize = 4096;

/// Adds the commands a script's calls ran to INFO commandstats (Redis counts them there, beside
/// the EVAL or FCALL itself); their time is split evenly among them.
fn count_calls(state: &RouterState, registry: &Registry, calls: &[proto::ScriptCall]) {
    for c in calls {
        let spec = match c.name.split_once('|') {
            Some((parent, sub)) => registry.lookup(parent.as_bytes()).and_then(|p| {
                p.subcommands.iter().copied().find(|s| s.short_name().eq_ignore_ascii_case(sub))
            }),
            None => registry.lookup(c.name.as_bytes()),
        };
        let Some(slot) = spec.and_then(|s| registry.slot_of(s)) else { continue };
        let each = std::time::Duration::from_micros(c.usec / c.calls.max(1));
        state.stats.record_n(slot, each, false, c.calls - c.failed.min(c.calls));
        state.stats.record_n(slot, each, true, c.failed.min(c.calls));
    }
}

/// A script that did not run (or may have: a timeout, a broken link; never sent twice, as EXEC).
pub fn unit_failed(e: AtomicError) -> Reply {
    match e {
        AtomicError::Spread => Reply::error(super::CROSSSLOT),
        AtomicError::Backend(e) => e.into(),
    }
}

fn is_noscript(r: &proto::Reply) -> bool {
    r.error_kind() == proto::ErrorKind::NoScript
}

fn with_hold_all(op: &Op) -> Op {
    let mut again = op.clone();
    if let Some(Kind::Script(s)) = &mut again.kind {
        s.hold_all = true;
    }
    again
}

fn op_with_body(op: &Op, body: Bytes) -> Op {
    let mut again = op.clone();
    if let Some(Kind::Script(s)) = &mut again.kind {
        s.body = body;
    }
    again
}

/// The body of script `sha` from any node that has it.
pub(super) async fn recover(
    state: &Arc<RouterState>,
    routing: &Arc<Routing>,
    sha: &str,
    deadline: Instant,
) -> Option<Bytes> {
    let wanted = sha.to_string();
    let ask = move || admin(Action::Get, Bytes::new(), vec![wanted.clone()]);
    let replies = state.backend.all(routing, ask, deadline).gather().await.ok()?;
    replies.into_iter().find_map(|r| match r.kind {
        Some(reply::Kind::Value(b)) if shoal_wire::script::sha1_hex(&b) == sha => Some(b),
        _ => None,
    })
}

/// Every node's reply to a fan-out; the first error any node answered is the command's reply.
pub async fn gather_all(all: crate::backend::AllCall) -> Result<Vec<proto::Reply>, Reply> {
    let replies = all.gather().await.map_err(Reply::from)?;
    match replies.iter().find_map(|r| match &r.kind {
        Some(reply::Kind::Error(e)) => Some(e.clone()),
        _ => None,
    }) {
        Some(e) => Err(Reply::error_fmt(e)),
        None => Ok(replies),
    }
}

fn admin(action: Action, body: Bytes, shas: Vec<String>) -> Op {
    op(Kind::ScriptAdmin(Box::new(proto::ScriptAdmin {
        action: action as i32,
        body,
        shas,
        ..Default::default()
    })))
}

/// SCRIPT LOAD: compiled on every node (a script runs on the node of its keys, so every node
/// may need it); the reply is its SHA1, or the compile error.
fn load(args: &Args, ctx: &mut Ctx) -> Pending {
    let body = args[2].clone();
    let sha = shoal_wire::script::sha1_hex(&body);
    let all = ctx.call_all(move || admin(Action::Load, body.clone(), Vec::new()));
    Pending::later(async move {
        match gather_all(all).await {
            Ok(_) => Reply::Bulk(Bytes::from(sha)),
            Err(e) => e,
        }
    })
}

fn exists(args: &Args, ctx: &mut Ctx) -> Pending {
    let shas: Vec<String> =
        args[2..].iter().map(|s| String::from_utf8_lossy(s).to_ascii_lowercase()).collect();
    let asked = shas.clone();
    let all = ctx.call_all(move || admin(Action::Exists, Bytes::new(), asked.clone()));
    Pending::later(async move {
        let replies = match gather_all(all).await {
            Ok(r) => r,
            Err(e) => return e,
        };
        let mut found = vec![false; shas.len()];
        for r in replies {
            if let Some(reply::Kind::Frame(proto::Frame { kind: Some(frame::Kind::Array(items)) })) = r.kind {
                for (f, item) in found.iter_mut().zip(items.items) {
                    *f |= matches!(item.kind, Some(frame::Kind::Int(1)));
                }
            }
        }
        Reply::Array(found.into_iter().map(|f| Reply::Int(i64::from(f))).collect())
    })
}

fn flush(args: &Args, ctx: &mut Ctx) -> Pending {
    if args.len() > 3
        || args.get(2).is_some_and(|m| !m.eq_ignore_ascii_case(b"sync") && !m.eq_ignore_ascii_case(b"async"))
    {
        return Reply::error("ERR SCRIPT FLUSH only support SYNC|ASYNC option").into();
    }
    let all = ctx.call_all(|| admin(Action::Flush, Bytes::new(), Vec::new()));
    Pending::later(async move {
        match gather_all(all).await {
            Ok(_) => Reply::OK,
            Err(e) => e,
        }
    })
}

fn kill(_args: &Args, ctx: &mut Ctx) -> Pending {
    kill_running(ctx, false)
}

/// SCRIPT KILL (`function` false) or FUNCTION KILL: asks every node; one stopped script is
/// enough for OK (as Redis Cluster's `one_succeeded` policy). Otherwise a script that already
/// wrote answers UNKILLABLE, and one of the other kind BUSY naming the KILL that stops it.
pub fn kill_running(ctx: &mut Ctx, function: bool) -> Pending {
    let routing = ctx.routing.clone();
    Pending::later(async move {
        let outcomes = futures_join(routing.nodes.iter().map(|n| n.kill_script(function)).collect()).await;
        let seen = |o: Outcome| outcomes.iter().any(|r| r.as_ref().is_ok_and(|r| r.outcome() == o));
        if seen(Outcome::Killed) {
            Reply::OK
        } else if seen(Outcome::Unkillable) {
            Reply::error(
                "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either \
                 wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.",
            )
        } else if seen(Outcome::OtherKind) {
            // SCRIPT KILL finds a function running, or FUNCTION KILL a script.
            Reply::error(if function {
                shoal_wire::script::BUSY_SCRIPT
            } else {
                shoal_wire::script::BUSY_FUNCTION
            })
        } else if let Some(Err(e)) = outcomes.into_iter().find(|r| r.is_err()) {
            e.into()
        } else {
            Reply::error("NOTBUSY No scripts in execution right now.")
        }
    })
}

/// SCRIPT DEBUG: Shoal has no script debugger (scripts run on the nodes); turning it off is
/// accepted.
fn debug(args: &Args, _ctx: &mut Ctx) -> Pending {
    let mode = args[2].to_ascii_lowercase();
    match &mode[..] {
        b"no" => Reply::OK.into(),
        b"yes" | b"sync" => Reply::error(
            "ERR SCRIPT DEBUG is not supported by Shoal: scripts run on the nodes, out of a client's reach",
        )
        .into(),
        _ => Reply::error("ERR Use SCRIPT DEBUG YES/SYNC/NO").into(),
    }
}

pub fn help(_args: &Args, _ctx: &mut Ctx) -> Pending {
    super::help_reply(&[
        "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "DEBUG (YES|SYNC|NO)",
        "    Set the debug mode for subsequent scripts executed.",
        "EXISTS <sha1> [<sha1> ...]",
        "    Return information about the existence of the scripts in the script cache.",
        "FLUSH [ASYNC|SYNC]",
        "    Flush the Lua scripts cache. Very dangerous on replicas.",
        "    When called without the optional mode argument, the behavior is determined by the",
        "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
        "    * ASYNC: Asynchronously flush the scripts cache.",
        "    * SYNC: Synchronously flush the scripts cache.",
        "KILL",
        "    Kill the currently executing Lua script.",
        "LOAD <script>",
        "    Load a script into the scripts cache without executing it.",
        "HELP",
        "    Prints this help.",
    ])
}
