//! Stage 1, admission: Redis's `processCommand` gates, in its order and with its texts (the
//! command's name and subcommand, arity, authentication, the user's ACL rules, RESP2's pub/sub
//! mode). A refused EXEC discards its transaction (Redis's `execCommandAbort`); any other
//! refusal inside MULTI flags the transaction (Redis's `rejectCommand`); with
//! `--busy-reply-scope cluster`, a busy script on any node refuses what Redis refuses while one
//! runs. CLIENT PAUSE and MULTI
//! queueing come right after, in [`super::Pipeline`].

use std::sync::LazyLock;

use bytes::Bytes;

use crate::backend::Routing;
use crate::cmd::{self, CommandSpec, Ctx, acl, pubsub, transaction};
use crate::resp::{Protocol, Reply};
use crate::session::Session;
use crate::state::{BusyReplyScope, RouterState};

/// The command's spec, or the reply that refuses it. `known`: the spec the caller already knows
/// `args[0]` names (a command without subcommands: the fast path's typed ops, which then skip
/// the lookup by name).
pub fn admit(
    known: Option<&'static CommandSpec>,
    args: &cmd::Args,
    ctx: &mut Ctx,
) -> Result<&'static CommandSpec, Reply> {
    match gate(known, args, ctx) {
        // A refused EXEC discards the transaction, with Redis's `execCommandAbort` text.
        Err(Reply::Error(text, _)) if args[0].eq_ignore_ascii_case(b"exec") => {
            ctx.session.multi = None;
            ctx.session.client.set_multi(None);
            transaction::release(ctx.state, ctx.session.watched.take());
            let why = text.strip_prefix("ERR ").unwrap_or(&text);
            Err(Reply::error_fmt(format!("EXECABORT Transaction discarded because of: {why}")))
        }
        // A refused command inside MULTI flags the transaction (Redis's `rejectCommand`).
        Err(reply) => {
            if let Some(multi) = &mut ctx.session.multi {
                multi.dirty = true;
            }
            Err(reply)
        }
        Ok(spec) => Ok(spec),
    }
}

fn gate(
    known: Option<&'static CommandSpec>,
    args: &cmd::Args,
    ctx: &mut Ctx,
) -> Result<&'static CommandSpec, Reply> {
    ctx.session.last_command_slot = None;
    let Some(spec) = known.or_else(|| cmd::lookup(&args[0])) else {
        return Err(cmd::unknown_command(args));
    };
    let spec = match (spec.subcommands.is_empty(), args.get(1)) {
        (false, Some(sub)) => match spec.subcommand(sub) {
            Some(s) => s,
            None => {
                return Err(Reply::error_fmt(format!(
                    "ERR unknown subcommand '{}'. Try {} HELP.",
                    cmd::clip(sub, 128),
                    spec.name().to_ascii_uppercase()
                )));
            }
        },
        _ => spec,
    };
    ctx.session.last_command_slot = crate::cmd::slot_of(spec);
    if !spec.arity_ok(args.len()) {
        return Err(cmd::wrong_arity(spec.name()));
    }
    if !ctx.session.authenticated && !spec.no_auth() {
        return Err(Reply::error("NOAUTH Authentication required."));
    }
    // ACL rules, after authentication as in Redis's `processCommand` (a refusal inside MULTI
    // flags the transaction, in `admit`).
    acl::check(spec, args, ctx)?;
    // CLIENT LIST shows it from here on, also while CLIENT PAUSE holds it.
    ctx.session.client.set_command(ctx.session.last_command_slot);
    // RESP2 pub/sub mode: only the pub/sub commands, PING, QUIT and RESET (RESP3 mixes pushes
    // with any reply).
    if ctx.session.subscriber.is_some()
        && ctx.session.protocol() == Protocol::Resp2
        && !pubsub::allowed_while_subscribed(spec)
        && ctx.session.subscribed()
    {
        return Err(pubsub::refused_while_subscribed(spec));
    }
    // `--busy-reply-scope cluster`: a script past busy-reply-threshold on any node holds every
    // command Redis would hold (not those flagged allow_busy), in Redis's place for it.
    if ctx.state.settings.busy_reply_scope == BusyReplyScope::Cluster
        && !spec.has_flag(shoal_wire::acl::commands::flag::ALLOW_BUSY)
        && let Some(text) = ctx.state.pubsub.busy_text()
    {
        return Err(Reply::error(text));
    }
    Ok(spec)
}

/// Whether a plain GET of `key` by this session would pass every stage with no check looking at
/// anything but the key's presence in the near cache (so that a hit may be answered without
/// building, admitting and dispatching it: [`super::Pipeline::near_hit`]): signed in as a user
/// [`acl::check`] lets through unlooked, not subscribed, no CLIENT PAUSE holding reads, no
/// hot-key counting, and a read the lane takes ([`super::lane::may_join`]: primary reads, no
/// MULTI, capture or client tracking, a key that does not travel in pieces).
pub fn unlooked_get(
    state: &RouterState,
    session: &Session,
    routing: &Routing,
    get: &'static CommandSpec,
    key: &[u8],
) -> bool {
    session.authenticated
        && acl::lets_all_through(state, session)
        && session.subscriber.is_none()
        && !state.hotkeys.enabled()
        && super::lane::may_join(state, session, routing, true, GET_WORD.len() + key.len())
        && !state.pause.holds(get)
}

/// What admission leaves on the session of a command it let through unlooked (the near-cache
/// hit path): the command CLIENT LIST shows and the stats slot.
#[inline]
pub fn admitted_unlooked(session: &mut Session, slot: Option<usize>) {
    session.last_command_slot = slot;
    session.client.set_command(slot);
}

const GET_WORD: Bytes = Bytes::from_static(b"GET");

/// GET's spec (the near-cache hit path names it without looking it up).
pub fn get_spec() -> &'static CommandSpec {
    static GET: LazyLock<&'static CommandSpec> =
        LazyLock::new(|| cmd::lookup(b"get").expect("GET is registered"));
    *GET
}

/// GET's stats slot.
pub fn get_slot() -> Option<usize> {
    static SLOT: LazyLock<Option<usize>> = LazyLock::new(|| crate::cmd::slot_of(get_spec()));
    *SLOT
}
