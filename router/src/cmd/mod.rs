//! Commands: one file per command (or per family of variants, like INCR/DECR/INCRBY), each with
//! its argument parsing, its Redis error texts, and how it maps onto node ops.
//!
//! [`dispatch`] does what Redis's `processCommand` does before running a command, in the same
//! order and with the same texts: look the name up (unknown command / unknown subcommand), check
//! arity, check authentication. The command's `run` function then parses its arguments and either
//! answers at once or queues ops on node links and returns a [`Pending`] reply.
//!
//! Front ends share this layer: RESP connections call [`dispatch`]; the HTTP API calls command
//! functions directly with the same arguments.

mod client;
mod command;
mod connection;
mod del;
mod expire;
mod get;
mod getex;
mod incr;
mod info;
mod keys;
mod mget;
mod mset;
mod persistence;
mod scan;
mod set;
mod shoal;
mod strings;
mod table;
mod ttl;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use shoal_wire::proto::{self, Op, op::Kind, reply};
use tokio::time::Instant;

use crate::backend::{self, BackendError, NodeCall, Routing};
use crate::resp::Reply;
use crate::session::Session;
use crate::state::RouterState;

pub use table::{COMMANDS, CommandSpec, lookup};

/// A command's arguments, the name included (`args[0]`).
pub type Args = [Bytes];

/// What a command needs while it runs.
pub struct Ctx<'a> {
    pub state: &'a Arc<RouterState>,
    pub session: &'a mut Session,
    pub routing: &'a Arc<Routing>,
    /// When calls made by this command give up.
    pub deadline: Instant,
}

impl Ctx<'_> {
    /// Sends `op` to the node that owns `key`. A key in a moving slot takes the migration-aware
    /// path; otherwise the op is queued at once, keeping a copy to retry if the node answers
    /// `moved` (only possible when nodes follow a topology).
    pub fn call(&self, key: &Bytes, op: Op) -> KeyCall {
        let key = key.clone();
        let (owner, from) = self.routing.locate(&key);
        if from.is_some() {
            let state = Arc::clone(self.state);
            let deadline = self.deadline;
            return KeyCall::Routed(Box::pin(async move {
                backend::route(&state.cluster, key, op, deadline).await
            }));
        }
        let retry = self.routing.managed.then(|| (key.clone(), op.clone()));
        let call = self.routing.links[owner].call(op, self.routing.version(), self.deadline);
        KeyCall::Direct { call, retry, deadline: self.deadline }
    }

    /// Sends `op` to the node at position `pos` of the topology (ops about no key in particular).
    pub fn call_node(&self, pos: usize, op: Op) -> NodeCall<proto::Reply> {
        self.routing.links[pos].call(op, self.routing.version(), self.deadline)
    }

    /// Sends the same op to every node (queued now, in pipeline order); see [`AllCalls::gather`].
    pub fn call_all(&self, op: impl Fn() -> Op + Send + Sync + 'static) -> AllCalls {
        let calls = (0..self.routing.len()).map(|pos| self.call_node(pos, op())).collect();
        AllCalls {
            calls,
            routing: Arc::clone(self.routing),
            op: Box::new(op),
            state: Arc::clone(self.state),
            deadline: self.deadline,
        }
    }

    /// Sends `op` to the node at position `pos`, and again (by the then-current topology) if the
    /// node serves another topology version; for single-node ops about no key (SCAN, RANDOMKEY).
    pub fn call_node_settled(
        &self,
        pos: usize,
        op: Op,
    ) -> Pin<Box<dyn Future<Output = Result<proto::Reply, BackendError>> + Send>> {
        let first = self.call_node(pos, op.clone());
        let (routing, state, deadline) = (Arc::clone(self.routing), Arc::clone(self.state), self.deadline);
        Box::pin(async move {
            let (mut call, mut routing) = (first, routing);
            loop {
                let r = call.wait().await?;
                let Some(reply::Kind::Moved(node_version)) = r.kind else { return Ok(r) };
                if Instant::now() >= deadline {
                    return Err(BackendError::Unsettled);
                }
                state.cluster.metrics.moved_retries.inc();
                state.cluster.reconcile(&routing.links[pos % routing.len()], node_version).await;
                routing = state.cluster.routing();
                call = routing.links[pos % routing.len()].call(op.clone(), routing.version(), deadline);
            }
        })
    }
}

/// One op on every node, all at one topology version.
pub struct AllCalls {
    calls: Vec<NodeCall<proto::Reply>>,
    routing: Arc<Routing>,
    op: Box<dyn Fn() -> Op + Send + Sync>,
    state: Arc<RouterState>,
    deadline: Instant,
}

impl AllCalls {
    /// Every node's reply, in topology order, or the first error. If a node serves another
    /// topology version (`moved`), the router and that node catch up and the whole round runs
    /// again on the current topology, until the deadline: a fan-out never mixes versions, so
    /// DBSIZE, KEYS and FLUSHALL always cover a node that just joined.
    pub async fn gather(self) -> Result<Vec<proto::Reply>, Reply> {
        let AllCalls { mut calls, mut routing, op, state, deadline } = self;
        loop {
            let mut out = Vec::with_capacity(calls.len());
            let mut failure = None;
            let mut moved = None;
            for (pos, call) in calls.into_iter().enumerate() {
                match call.wait().await {
                    Ok(r) => {
                        match &r.kind {
                            Some(reply::Kind::Error(e)) => {
                                failure.get_or_insert_with(|| Reply::error_fmt(e.clone()));
                            }
                            Some(reply::Kind::Moved(v)) => moved = moved.or(Some((pos, *v))),
                            _ => {}
                        }
                        out.push(r);
                    }
                    Err(e) => {
                        failure.get_or_insert(backend_error(e));
                    }
                }
            }
            let Some((pos, node_version)) = moved else {
                return match failure {
                    Some(f) => Err(f),
                    None => Ok(out),
                };
            };
            if Instant::now() >= deadline {
                return Err(backend_error(BackendError::Unsettled));
            }
            state.cluster.metrics.moved_retries.inc();
            state.cluster.reconcile(&routing.links[pos], node_version).await;
            routing = state.cluster.routing();
            calls = routing.links.iter().map(|l| l.call(op(), routing.version(), deadline)).collect();
        }
    }
}

/// One key's op in flight.
pub enum KeyCall {
    /// Queued on the owner; `retry` (the key and op) is kept in case the node answers `moved`.
    Direct { call: NodeCall<proto::Reply>, retry: Option<(Bytes, Op)>, deadline: Instant },
    /// Going through the migration-aware path.
    Routed(Pin<Box<dyn Future<Output = Result<proto::Reply, BackendError>> + Send>>),
}

impl KeyCall {
    pub async fn wait(self, state: &RouterState) -> Result<proto::Reply, BackendError> {
        match self {
            KeyCall::Direct { call, retry, deadline } => {
                let r = call.wait().await?;
                match (&r.kind, retry) {
                    (Some(reply::Kind::Moved(_)), Some((key, op))) => {
                        state.cluster.metrics.moved_retries.inc();
                        backend::route(&state.cluster, key, op, deadline).await
                    }
                    _ => Ok(r),
                }
            }
            KeyCall::Routed(f) => f.await,
        }
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
}

pub type BoxReply = Pin<Box<dyn Future<Output = Reply> + Send>>;

impl Pending {
    pub fn later(f: impl Future<Output = Reply> + Send + 'static) -> Pending {
        Pending::Later(Box::pin(f))
    }

    pub async fn resolve(self, state: &RouterState) -> Reply {
        match self {
            Pending::Ready(r) | Pending::Close(r) => r,
            Pending::Call(call, convert) => match call.wait(state).await {
                Ok(r) => convert(r),
                Err(e) => backend_error(e),
            },
            Pending::Later(f) | Pending::Barrier(f) => f.await,
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
    let Some(spec) = lookup(&args[0]) else {
        return unknown_command(args).into();
    };
    let spec = match (spec.subcommands.is_empty(), args.get(1)) {
        (false, Some(sub)) => match spec.subcommand(sub) {
            Some(s) => s,
            None => {
                return Reply::error_fmt(format!(
                    "ERR unknown subcommand '{}'. Try {} HELP.",
                    clip(sub, 128),
                    spec.name.to_ascii_uppercase()
                ))
                .into();
            }
        },
        _ => spec,
    };
    if !spec.arity_ok(args.len()) {
        return wrong_arity(spec.name).into();
    }
    if !ctx.session.authenticated && !spec.no_auth() {
        return Reply::error("NOAUTH Authentication required.").into();
    }
    ctx.session.last_command_name = spec.name;
    ctx.state.metrics.commands.inc();
    (spec.run)(args, ctx)
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

pub fn syntax_error() -> Reply {
    Reply::error("ERR syntax error")
}

pub fn not_integer() -> Reply {
    Reply::error("ERR value is not an integer or out of range")
}

pub fn backend_error(e: BackendError) -> Reply {
    Reply::error_fmt(e.to_string())
}

/// Parses a Redis integer argument or answers with Redis's error.
pub fn int_arg(b: &[u8]) -> Result<i64, Reply> {
    shoal_wire::num::parse_i64(b).ok_or_else(not_integer)
}

/// Builds an op from its kind.
pub fn op(kind: Kind) -> Op {
    Op { kind: Some(kind), ..Default::default() }
}

/// The straightforward mapping of a node reply to a client reply.
pub fn plain(r: proto::Reply) -> Reply {
    match r.kind {
        Some(reply::Kind::Ok(_)) => Reply::OK,
        Some(reply::Kind::Nil(_)) | None => Reply::Nil,
        Some(reply::Kind::Value(v)) => Reply::Bulk(v),
        Some(reply::Kind::Int(n)) => Reply::Int(n),
        Some(reply::Kind::Error(e)) => Reply::error_fmt(e),
        Some(reply::Kind::Keys(k)) => Reply::Array(k.keys.into_iter().map(Reply::Bulk).collect()),
        Some(reply::Kind::Absent(_)) => Reply::Nil,
        Some(reply::Kind::Entry(e)) => Reply::Bulk(e.value),
        Some(reply::Kind::Scan(_) | reply::Kind::Moved(_)) => backend_error(BackendError::Unsettled),
    }
}

/// The integer in a node reply, or the reply to send instead.
pub fn reply_int(r: proto::Reply) -> Result<i64, Reply> {
    match r.kind {
        Some(reply::Kind::Int(n)) => Ok(n),
        Some(reply::Kind::Error(e)) => Err(Reply::error_fmt(e)),
        other => Err(backend_error(BackendError::BadReply(format!("expected an integer, got {other:?}")))),
    }
}

/// Queues one group of ops per node for a multi-key command. `items` yields `(key, op)` in
/// argument order; the result remembers each op's position so replies can be put back in order.
/// Keys in moving slots go through the migration-aware path one by one.
pub fn fan_out(ctx: &Ctx, items: impl Iterator<Item = (Bytes, Op)>) -> FanOut {
    type Group = (Vec<usize>, Vec<Op>, Vec<(Bytes, Op)>);
    let mut per_node: Vec<Group> = (0..ctx.routing.len()).map(|_| Default::default()).collect();
    let mut routed = Vec::new();
    let mut total = 0;
    for (i, (key, op)) in items.enumerate() {
        total = i + 1;
        let (pos, from) = ctx.routing.locate(&key);
        if from.is_some() {
            routed.push((i, ctx.call(&key, op)));
            continue;
        }
        let group = &mut per_node[pos];
        group.0.push(i);
        if ctx.routing.managed {
            group.2.push((key, op.clone()));
        }
        group.1.push(op);
    }
    let version = ctx.routing.version();
    let calls = per_node
        .into_iter()
        .enumerate()
        .filter(|(_, (idx, _, _))| !idx.is_empty())
        .map(|(pos, (idx, ops, retry))| {
            (idx, retry, ctx.routing.links[pos].call_group(ops, version, ctx.deadline))
        })
        .collect();
    FanOut { calls, routed, total, state: Arc::clone(ctx.state), deadline: ctx.deadline }
}

/// One node's part of a multi-key command: argument positions, (key, op) copies to retry after
/// `moved`, and the call.
type GroupCall = (Vec<usize>, Vec<(Bytes, Op)>, NodeCall<Vec<proto::Reply>>);

/// The calls of a multi-key command, one per node involved (plus one per key in a moving slot).
pub struct FanOut {
    calls: Vec<GroupCall>,
    routed: Vec<(usize, KeyCall)>,
    total: usize,
    state: Arc<RouterState>,
    deadline: Instant,
}

impl FanOut {
    /// Every op's reply, in argument order; the first failure (a node error reply included)
    /// becomes the command's error. Ops a node refused as `moved` are retried.
    pub async fn gather(self) -> Result<Vec<proto::Reply>, Reply> {
        let mut out: Vec<Option<proto::Reply>> = (0..self.total).map(|_| None).collect();
        let mut failure = None;
        for (idx, retry, call) in self.calls {
            match call.wait().await {
                Ok(replies) => {
                    for (n, (i, r)) in idx.into_iter().zip(replies).enumerate() {
                        let r = match (&r.kind, retry.get(n)) {
                            (Some(reply::Kind::Moved(_)), Some((key, op))) => {
                                self.state.cluster.metrics.moved_retries.inc();
                                match backend::route(
                                    &self.state.cluster,
                                    key.clone(),
                                    op.clone(),
                                    self.deadline,
                                )
                                .await
                                {
                                    Ok(r) => r,
                                    Err(e) => {
                                        failure.get_or_insert(backend_error(e));
                                        continue;
                                    }
                                }
                            }
                            _ => r,
                        };
                        out[i] = Some(r);
                    }
                }
                Err(e) => {
                    failure.get_or_insert(backend_error(e));
                }
            }
        }
        for (i, call) in self.routed {
            match call.wait(&self.state).await {
                Ok(r) => out[i] = Some(r),
                Err(e) => {
                    failure.get_or_insert(backend_error(e));
                }
            }
        }
        if failure.is_none() {
            failure = out.iter().flatten().find_map(|r| match &r.kind {
                Some(reply::Kind::Error(e)) => Some(Reply::error_fmt(e.clone())),
                _ => None,
            });
        }
        match failure {
            Some(f) => Err(f),
            None => Ok(out.into_iter().map(|r| r.unwrap_or_default()).collect()),
        }
    }

    /// The sum of the integer replies (DEL, EXISTS, TOUCH, UNLINK).
    pub async fn sum(self) -> Reply {
        self.gather().await.map_or_else(|e| e, sum_ints)
    }
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

/// Awaits one call per node (an op sent to all nodes) and folds the replies.
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
