//! Commands: one file per command (or per family of variants, like INCR/DECR/INCRBY), each with
//! its argument parsing, its Redis error texts, and how it maps onto node ops.
//!
//! [`dispatch`] does what Redis's `processCommand` does before running a command, in the same
//! order and with the same texts: look the name up (unknown command / unknown subcommand), check
//! arity, check authentication, check the user's ACL rules ([`acl::check`]). The command's `run` function then parses its arguments and either
//! answers at once or queues ops on node links and returns a [`Pending`] reply.
//!
//! Each command file declares its [`spec::CommandSpec`] beside its handler; [`registry`] lists
//! them. Commands never see topology versions: they ask the backend for settled calls through
//! [`Ctx`] (one key, many keys, every node, one node, keys that must share a node).
//!
//! Front ends share this layer: RESP connections and the HTTP API both call [`dispatch`].

pub mod acl;
mod bits;
mod blocking;
mod client;
mod clients;
mod command;
mod config;
mod connection;
mod del;
mod expire;
mod get;
mod getex;
mod hash;
mod hll;
mod incr;
mod info;
mod keys;
pub mod lane;
mod latency;
mod lists;
mod mget;
mod mset;
mod multi;
mod object;
mod persistence;
pub mod pubsub;
pub mod registry;
mod scan;
pub mod scripting;
mod set;
mod sets;
mod shoal;
mod slotstats;
mod slowlog;
pub mod spec;
mod strings;
pub mod transaction;
mod ttl;
mod typed;
mod zsets;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use shoal_wire::proto::{self, Op, op::Kind, reply};
use tokio::time::Instant;

use crate::backend::{AllCall, AtCall, AtomicCall, BackendError, KeyCall, MultiCall, Routing};
use crate::resp::Reply;
use crate::session::Session;
use crate::state::{ReadFrom, RouterState};

pub use registry::{COMMANDS, lookup};
pub use spec::CommandSpec;

/// A command's arguments, the name included (`args[0]`).
pub type Args = [Bytes];

/// What a command needs while it runs.
pub struct Ctx<'a> {
    pub state: &'a Arc<RouterState>,
    pub session: &'a mut Session,
    pub routing: &'a Arc<Routing>,
    /// When calls made by this command give up.
    pub deadline: Instant,
    /// Where this command's one-key read goes (set by [`run`]: `Primary` unless it is a
    /// read-only command and the client sent READONLY or the router has a `--read-from` policy).
    pub read_from: ReadFrom,
}

impl Ctx<'_> {
    /// `op` on the node that owns `key`, queued now.
    pub fn call(&self, key: &Bytes, op: Op) -> KeyCall {
        if self.read_from != ReadFrom::Primary {
            return self.state.backend.key_on_replica(
                self.routing,
                key.clone(),
                op,
                self.read_from,
                self.deadline,
            );
        }
        self.state.backend.key(self.routing, key.clone(), op, self.deadline)
    }

    /// One op per key, grouped per node and queued now; replies in the order of `items`.
    pub fn call_keys(&self, items: impl Iterator<Item = (Bytes, Op)>) -> MultiCall {
        self.state.backend.keys(self.routing, items, self.deadline)
    }

    /// The op `make()` builds on every node, at one topology version.
    pub fn call_all(&self, make: impl Fn() -> Op + Send + Sync + 'static) -> AllCall {
        self.state.backend.all(self.routing, make, self.deadline)
    }

    /// `op` on the node at position `pos` of the topology (ops about no key in particular).
    pub fn call_at(&self, pos: usize, op: Op) -> AtCall {
        self.state.backend.at(self.routing, pos, op, self.deadline)
    }

    /// Unix milliseconds by the router's clock (for validating relative expiries).
    pub fn now_ms(&self) -> i64 {
        self.state.clock.now_ms() as i64
    }

    /// `op` over `keys` that must share one node, which applies it as one unit.
    pub fn call_atomic(&self, keys: Vec<Bytes>, op: Op) -> AtomicCall {
        self.state.backend.atomic(self.routing, keys, op, self.deadline)
    }
}

/// A command's reply, possibly still on its way from the nodes.
pub enum Pending {
    Ready(Reply),
    /// One op on one node, its reply converted by the function.
    Call(KeyCall, fn(proto::Reply) -> Reply),
    /// Anything else (several nodes, several steps).
    Later(BoxReply),
    /// Like `Later`, but later commands of the same pipeline must wait until it completes (it
    /// takes several dependent steps, and a later command could otherwise overtake one of them).
    Barrier(BoxReply),
    /// Write the reply, then close the connection (QUIT).
    Close(Reply),
    /// A blocking command's wait (BLPOP, WAIT, ...): a barrier that may last; the connection
    /// keeps reading meanwhile, so that a client that goes away ends the wait. The reply is the
    /// command's answer when CLIENT UNBLOCK ends the wait as a timeout.
    Blocking(BoxReply, Reply),
}

pub type BoxReply = Pin<Box<dyn Future<Output = Reply> + Send>>;

impl Pending {
    pub fn later(f: impl Future<Output = Reply> + Send + 'static) -> Pending {
        Pending::Later(Box::pin(f))
    }

    pub async fn resolve(self) -> Reply {
        match self {
            Pending::Ready(r) | Pending::Close(r) => r,
            Pending::Call(call, convert) => match call.wait().await {
                Ok(r) => convert(r),
                Err(e) => e.into(),
            },
            Pending::Later(f) | Pending::Barrier(f) | Pending::Blocking(f, _) => f.await,
        }
    }
}

impl From<Reply> for Pending {
    fn from(r: Reply) -> Pending {
        Pending::Ready(r)
    }
}

/// Runs a command the way Redis's `processCommand` gates it.
pub fn dispatch(args: &Args, ctx: &mut Ctx) -> Pending {
    match admit(args, ctx) {
        Ok(spec) => run(spec, args, ctx),
        Err(reply) => reply.into(),
    }
}

/// Redis's `processCommand` gates, in its order and with its texts: the command's spec, or the
/// reply that refuses it. A RESP connection checks CLIENT PAUSE between this and [`run`].
pub fn admit(args: &Args, ctx: &mut Ctx) -> Result<&'static CommandSpec, Reply> {
    admit_as(None, args, ctx)
}

/// [`admit`] for a caller that already knows which command `args[0]` names (`known`, a command
/// without subcommands): the fast path's typed ops, which then skip the lookup by name.
pub fn admit_as(
    known: Option<&'static CommandSpec>,
    args: &Args,
    ctx: &mut Ctx,
) -> Result<&'static CommandSpec, Reply> {
    let admitted = gate(known, args, ctx);
    match admitted {
        // A refused EXEC discards the transaction, with Redis's `execCommandAbort` text.
        Err(Reply::Error(text)) if args[0].eq_ignore_ascii_case(b"exec") => {
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
    args: &Args,
    ctx: &mut Ctx,
) -> Result<&'static CommandSpec, Reply> {
    ctx.session.last_command_slot = None;
    let Some(spec) = known.or_else(|| lookup(&args[0])) else {
        return Err(unknown_command(args));
    };
    let spec = match (spec.subcommands.is_empty(), args.get(1)) {
        (false, Some(sub)) => match spec.subcommand(sub) {
            Some(s) => s,
            None => {
                return Err(Reply::error_fmt(format!(
                    "ERR unknown subcommand '{}'. Try {} HELP.",
                    clip(sub, 128),
                    spec.name.to_ascii_uppercase()
                )));
            }
        },
        _ => spec,
    };
    ctx.session.last_command_slot = crate::stats::slot_of(spec);
    if !spec.arity_ok(args.len()) {
        return Err(wrong_arity(spec.name));
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
        && ctx.session.protocol() == crate::resp::Protocol::Resp2
        && !pubsub::allowed_while_subscribed(spec)
        && ctx.session.subscribed()
    {
        return Err(pubsub::refused_while_subscribed(spec));
    }
    Ok(spec)
}

/// Runs a command that [`admit`] let through.
pub fn run(spec: &'static CommandSpec, args: &Args, ctx: &mut Ctx) -> Pending {
    if ctx.session.multi.is_some() && !transaction::runs_at_once(spec) {
        return transaction::queue(spec, args, ctx);
    }
    ctx.state.metrics.commands.inc();
    ctx.read_from = match ctx.state.settings.read_from {
        _ if !spec.flags.contains(&"readonly") => ReadFrom::Primary,
        // READONLY: replicas, as in Redis Cluster (nearest ones if the router says so).
        ReadFrom::Primary if ctx.session.readonly => ReadFrom::ReplicaPreferred,
        policy => policy,
    };
    if ctx.state.pubsub.tracking.active() {
        client_tracking(spec, args, ctx);
    }
    (spec.run)(args, ctx)
}

/// CLIENT TRACKING (crate::tracking): a write invalidates its keys for the clients holding
/// them before it is sent (the writer's own push comes before its reply, as in Redis); a
/// tracking client's read remembers its keys, and registers the ones this router did not hold
/// yet on their nodes, queued before the command's own ops so the node registers first.
fn client_tracking(spec: &'static CommandSpec, args: &Args, ctx: &mut Ctx) {
    // Redis's `resetClient`: CLIENT CACHING applies to the next command, CLIENT ones excepted.
    let caching =
        if spec.name.starts_with("client|") { ctx.session.caching } else { ctx.session.caching.take() };
    let keys = || spec_keys(spec, args);
    if spec.flags.contains(&"write") {
        for key in keys() {
            ctx.state.pubsub.tracking.invalidate(key, ctx.session.id);
        }
        return;
    }
    if !spec.flags.contains(&"readonly") || spec.keys.first <= 0 {
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
pub(crate) fn spec_keys<'a>(spec: &CommandSpec, args: &'a Args) -> impl ExactSizeIterator<Item = &'a Bytes> {
    let ks = spec.keys;
    let (first, step) = (ks.first.max(0) as usize, ks.step.max(1) as usize);
    let last = if ks.last < 0 { args.len() as i64 + i64::from(ks.last) } else { i64::from(ks.last) };
    let end = if ks.first <= 0 { 0 } else { (last.max(0) as usize + 1).min(args.len()) };
    args.get(first..end.max(first)).unwrap_or(&[]).iter().step_by(step)
}

/// `-ERR unknown command 'x', with args beginning with: 'a' 'b' `, built like Redis: at most 128
/// bytes of the name and about 128 bytes of arguments, each cut at a NUL byte.
fn unknown_command(args: &Args) -> Reply {
    let mut listed = String::new();
    for arg in &args[1..] {
        if listed.len() >= 128 {
            break;
        }
        let room = 128 - listed.len();
        listed.push('\'');
        listed.push_str(&clip(arg, room));
        listed.push_str("' ");
    }
    Reply::error_fmt(format!(
        "ERR unknown command '{}', with args beginning with: {}",
        clip(&args[0], 128),
        listed
    ))
}

/// At most `max` bytes of `b`, stopping at a NUL (C-string semantics), as text.
fn clip(b: &[u8], max: usize) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len()).min(max);
    String::from_utf8_lossy(&b[..end]).into_owned()
}

pub fn wrong_arity(name: &str) -> Reply {
    Reply::error_fmt(format!("ERR wrong number of arguments for '{name}' command"))
}

/// A HELP subcommand's reply: one simple string per line, as Redis's `addReplyHelp`.
pub fn help_reply(lines: &[&'static str]) -> Pending {
    Reply::Array(lines.iter().map(|l| Reply::simple(l)).collect()).into()
}

pub fn syntax_error() -> Reply {
    Reply::error(shoal_wire::command::SYNTAX)
}

pub fn not_integer() -> Reply {
    Reply::error(shoal_wire::command::NOT_INTEGER)
}

/// Parses a Redis integer argument or answers with Redis's error (the text the shared argument
/// builders in `shoal_wire::command` use too).
pub fn int_arg(b: &[u8]) -> Result<i64, Reply> {
    shoal_wire::num::parse_i64(b).ok_or_else(not_integer)
}

/// Builds an op from its kind.
pub fn op(kind: Kind) -> Op {
    Op { kind: Some(kind), ..Default::default() }
}

/// Keys of one command (or transaction) on several nodes, where Redis Cluster answers CROSSSLOT.
pub const CROSSSLOT: &str =
    "CROSSSLOT Keys in request don't hash to the same node; give them a common {hashtag}";

/// The one node position that owns every key, by the routing's table (no keys: the first node);
/// `None` when they are spread (where a transaction or a blocking command answers CROSSSLOT).
pub fn one_node(routing: &Routing, keys: &[Bytes]) -> Option<usize> {
    let mut positions = keys.iter().map(|k| routing.locate(k).0);
    let first = positions.next().unwrap_or(0);
    positions.all(|p| p == first).then_some(first)
}

/// A one-key command whose op `shoal_wire::command` builds (the builder a node's script uses
/// too): the op on the key's node, its reply read as the builder says.
pub fn one_key(args: &Args, ctx: &mut Ctx, build: shoal_wire::command::Builder) -> Pending {
    match build(args, ctx.now_ms()) {
        Ok(b) => Pending::Call(ctx.call(&b.key, b.op), answer(b.answer)),
        Err(e) => Reply::error(e).into(),
    }
}

/// How a node reply becomes the client's, per [`shoal_wire::command::Answer`].
pub fn answer(a: shoal_wire::command::Answer) -> fn(proto::Reply) -> Reply {
    use shoal_wire::command::Answer;
    match a {
        Answer::Plain => plain,
        Answer::StoredAsInt => |r| match plain(r) {
            Reply::Nil => Reply::Int(0),
            Reply::Simple(_) => Reply::Int(1),
            other => other,
        },
        Answer::Status => |r| match r.kind {
            Some(reply::Kind::Value(v)) => Reply::Simple(String::from_utf8_lossy(&v).into_owned().into()),
            _ => plain(r),
        },
        Answer::Seconds => |r| match r.kind {
            Some(reply::Kind::Int(ms)) => Reply::Int(shoal_wire::command::ms_to_seconds(ms)),
            _ => plain(r),
        },
    }
}

/// The straightforward mapping of a node reply to a client reply.
pub fn plain(r: proto::Reply) -> Reply {
    match r.kind {
        Some(reply::Kind::Ok(_)) => Reply::OK,
        Some(reply::Kind::Nil(_)) | None => Reply::Nil,
        Some(reply::Kind::Value(v)) => Reply::Bulk(v),
        Some(reply::Kind::Tracked(t)) => Reply::Bulk(t.value),
        Some(reply::Kind::Int(n)) => Reply::Int(n),
        Some(reply::Kind::Error(e)) => Reply::error_fmt(e),
        Some(reply::Kind::Keys(k)) => Reply::Array(k.keys.into_iter().map(Reply::Bulk).collect()),
        other => unexpected(other),
    }
}

/// A node reply the command did not expect (a node of another version, or a bug).
pub fn unexpected(kind: Option<reply::Kind>) -> Reply {
    BackendError::BadReply(format!("{kind:?}")).into()
}

/// The integer in a node reply, or the reply to send instead.
pub fn reply_int(r: proto::Reply) -> Result<i64, Reply> {
    match r.kind {
        Some(reply::Kind::Int(n)) => Ok(n),
        Some(reply::Kind::Error(e)) => Err(Reply::error_fmt(e)),
        other => Err(unexpected(other)),
    }
}

/// The replies of a multi-key call, in argument order; the first error a node answered (or the
/// call's own failure) becomes the command's reply.
pub async fn gather(call: MultiCall) -> Result<Vec<proto::Reply>, Reply> {
    let replies = call.gather().await?;
    match replies.iter().find_map(|r| match &r.kind {
        Some(reply::Kind::Error(e)) => Some(Reply::error_fmt(e.clone())),
        _ => None,
    }) {
        Some(e) => Err(e),
        None => Ok(replies),
    }
}

/// The sum of a multi-key call's integer replies (DEL, EXISTS, TOUCH, UNLINK).
pub async fn sum(call: MultiCall) -> Reply {
    gather(call).await.map_or_else(|e| e, sum_ints)
}

/// Adds up integer replies; the first non-integer reply becomes the command's reply.
pub fn sum_ints(replies: Vec<proto::Reply>) -> Reply {
    let mut total = 0;
    for r in replies {
        match reply_int(r) {
            Ok(n) => total += n,
            Err(e) => return e,
        }
    }
    Reply::Int(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_command_text_like_redis() {
        let args: Vec<Bytes> = ["FOO", "a", "b"].iter().map(|s| Bytes::from(*s)).collect();
        assert_eq!(
            unknown_command(&args).to_bytes(crate::resp::Protocol::Resp2),
            "-ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n"
        );
        let long: Vec<Bytes> = vec![Bytes::from("x"), Bytes::from("y".repeat(300))];
        let Reply::Error(text) = unknown_command(&long) else { panic!() };
        assert!(text.len() < 200, "arguments are cut at 128 bytes");
        let nul: Vec<Bytes> = vec![Bytes::from("x"), Bytes::from(&b"a\0b"[..])];
        let Reply::Error(text) = unknown_command(&nul) else { panic!() };
        assert!(text.ends_with("'a' "));
    }
}
