//! The lane: one-key string commands from one read buffer, sent as one group per node.
//!
//! Run one by one ([`super::run`]), each pipelined GET or SET costs its own backend call: an op
//! queued on its node's link, a oneshot, a deadline timer, and a task slot in the connection
//! while it waits. A connection that has many such commands at hand (the fast path's read
//! buffer) instead joins them to a [`Lane`] and sends it once: [`Backend::keys`] puts each
//! node's share in one group (one batch entry, one wake-up, one timer), and the replies come
//! back together, in order, each converted as its command would have converted it.
//!
//! What joins: commands whose `run` is exactly "build one op with a [`command`] builder and
//! send it to the key's owner" ([`builder`]); GET also through the near cache (a hit is
//! answered at once, a miss is a tracked read). A command that does not join runs as usual; the
//! caller sends the lane first, so ops keep their order on every node queue. What the lane
//! keeps from [`super::run`]: the command counter and the near cache's write invalidation (at
//! join, so a later GET in the lane does not read the cache, and again in [`Backend::keys`]).
//! Replica reads (READONLY, `--read-from`), values large enough to travel in pieces, and every
//! command while some client uses CLIENT TRACKING (its registrations are queued at once and
//! must not overtake the lane) do not join.
//!
//! [`Backend::keys`]: crate::backend::Backend::keys

use bytes::Bytes;
use shoal_wire::command::{self, Builder};
use shoal_wire::pieces::PIECE_BYTES;
use shoal_wire::proto::{self, Op};

use super::get::{near_cache, near_fetch, near_settle};
use super::{Args, CommandSpec, Ctx, answer, plain};
use crate::backend::Routing;
use crate::backend::{Backend, BackendError, KeyCall, MultiCall};
use crate::nearcache::{NearCache, Ticket};
use crate::resp::Reply;
use crate::session::Session;
use crate::state::{ReadFrom, RouterState};
use std::sync::Arc;

/// Commands that may join the lane: those whose router `run` is `one_key` with the builder
/// `shoal_wire::command::builder` gives for their name (GET's near cache is handled here).
const JOINS: &[&str] = &[
    "get", "set", "incr", "decr", "incrby", "decrby", "expire", "pexpire", "getdel", "setnx", "setex",
    "psetex", "ttl", "pttl", "strlen", "append",
];

/// The builder of a command that may join the lane.
pub fn builder(spec: &CommandSpec) -> Option<Builder> {
    JOINS.contains(&spec.name).then(|| command::builder(spec.name.as_bytes())).flatten()
}

/// How one joined command's reply is made from its node's.
struct Waiting<T> {
    tag: T,
    answer: fn(proto::Reply) -> Reply,
    /// A near-cache miss: the key and the ticket to insert the value with (boxed: every
    /// request's `Waiting` is moved a few times, and only misses carry one).
    near: Option<Box<(Bytes, Option<Ticket>)>>,
}

/// Commands joined and not yet sent.
pub struct Lane<T> {
    items: Vec<(Bytes, Op)>,
    waiting: Vec<Waiting<T>>,
    /// The router's clock (Unix ms) for the builders, read once per lane: its commands arrived
    /// together.
    now_ms: Option<i64>,
}

impl<T> Default for Lane<T> {
    fn default() -> Self {
        Lane { items: Vec::new(), waiting: Vec::new(), now_ms: None }
    }
}

impl<T> Lane<T> {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Joins the command `spec` (admitted, not held by CLIENT PAUSE) if it may join: `Ok(None)`
    /// queued, `Ok(Some(reply))` answered at once (an argument error, a near-cache hit),
    /// `Err(tag)` it does not join (run it as usual, after [`send`](Self::send)).
    pub fn join(
        &mut self,
        spec: &'static CommandSpec,
        args: &Args,
        ctx: &mut Ctx,
        tag: T,
    ) -> Result<Option<(T, Reply)>, T> {
        let Some(build) = builder(spec) else { return Err(tag) };
        let readonly = spec.flags.contains(&"readonly");
        let arg_bytes = args.iter().map(|a| a.len()).sum::<usize>();
        if !may_join(ctx.state, ctx.session, ctx.routing, readonly, arg_bytes) {
            return Err(tag);
        }
        // What `run` does before a command's own function.
        ctx.read_from = ReadFrom::Primary;
        ctx.state.metrics.commands.inc();
        let near = if spec.name == "get" { near_cache(ctx) } else { None };
        if let Some(near) = near {
            let key = &args[1];
            if let Some(v) = near.get_at(key, ctx.routing.version(), ctx.session.last_command) {
                return Ok(Some((tag, Reply::Bulk(v))));
            }
            if let Some((op, ticket)) = near_fetch(near, ctx, key, false) {
                self.items.push((key.clone(), op));
                self.waiting.push(Waiting {
                    tag,
                    answer: plain,
                    near: Some(Box::new((key.clone(), ticket))),
                });
                return Ok(None);
            }
        }
        let now_ms = *self.now_ms.get_or_insert_with(|| ctx.now_ms());
        match build(args, now_ms) {
            Ok(b) => {
                if !readonly {
                    // The near cache forgets the key now, not when the lane is sent: a GET of
                    // it later in this lane must not be answered from the cache (sending
                    // forgets it again, after any fetch that raced this).
                    ctx.state.backend.before_send(&b.op);
                }
                self.items.push((b.key, b.op));
                self.waiting.push(Waiting { tag, answer: answer(b.answer), near: None });
                Ok(None)
            }
            Err(e) => Ok(Some((tag, Reply::error(e)))),
        }
    }

    /// Queues everything joined on the nodes now (one group per node; a lone command as its
    /// own call, which costs no more than running it as usual); `None` if nothing joined.
    pub fn send(&mut self, ctx: &Ctx) -> Option<LaneCall<T>> {
        self.now_ms = None;
        let sent = match self.items.len() {
            0 => return None,
            1 => {
                let (key, op) = self.items.pop().expect("one");
                let w = self.waiting.pop().expect("one per item");
                Sent::One(ctx.state.backend.key(ctx.routing, key, op, ctx.deadline), w)
            }
            n => Sent::Many(
                ctx.state.backend.keys(ctx.routing, self.items.drain(..), ctx.deadline),
                // The next lane is likely as long: room for it now, not by doubling as it joins.
                std::mem::replace(&mut self.waiting, Vec::with_capacity(n)),
            ),
        };
        let near = ctx.state.near.clone();
        Some(LaneCall { sent, backend: ctx.state.backend.clone(), near })
    }
}

/// Whether a command (`readonly`, with `arg_bytes` bytes of arguments) of this session may join
/// a lane at all (see the module docs): not in MULTI, not a replica read, no resharding capture,
/// no client tracking on the router (a tracked read's registration is queued on the node at once
/// and must not overtake the lane's earlier ops: a pipelined write of the key would consume it),
/// and arguments that do not travel in pieces.
pub(crate) fn may_join(
    state: &RouterState,
    session: &Session,
    routing: &Routing,
    readonly: bool,
    arg_bytes: usize,
) -> bool {
    let replica_read = readonly && (session.readonly || state.settings.read_from != ReadFrom::Primary);
    session.multi.is_none()
        && !replica_read
        && !routing.capturing
        && !state.pubsub.tracking.active()
        && arg_bytes <= PIECE_BYTES
}

enum Sent<T> {
    One(KeyCall, Waiting<T>),
    Many(MultiCall, Vec<Waiting<T>>),
}

/// A lane in flight.
pub struct LaneCall<T> {
    sent: Sent<T>,
    backend: Arc<Backend>,
    near: Option<Arc<NearCache>>,
}

impl<T> LaneCall<T> {
    /// How many commands it carries.
    pub fn len(&self) -> usize {
        match &self.sent {
            Sent::One(..) => 1,
            Sent::Many(_, waiting) => waiting.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every command's reply, in the order they joined.
    pub async fn wait(self) -> Replies<T> {
        let LaneCall { sent, backend, near } = self;
        let settle = |w: Waiting<T>, r: Result<proto::Reply, BackendError>| {
            let reply = match r {
                Ok(r) => match (w.near.as_deref(), &near) {
                    (Some((key, ticket)), Some(near)) => {
                        (w.answer)(near_settle(near, &backend, key, ticket.as_ref(), r))
                    }
                    _ => (w.answer)(r),
                },
                Err(e) => e.into(),
            };
            (w.tag, reply)
        };
        match sent {
            Sent::One(call, w) => Replies::One(std::iter::once(settle(w, call.wait().await))),
            Sent::Many(call, waiting) => {
                let replies = call.each().await;
                Replies::Many(
                    waiting
                        .into_iter()
                        .zip(replies)
                        .map(|(w, r)| settle(w, r))
                        .collect::<Vec<_>>()
                        .into_iter(),
                )
            }
        }
    }
}

/// A lane's replies with their tags, in the order the commands joined.
pub enum Replies<T> {
    One(std::iter::Once<(T, Reply)>),
    Many(std::vec::IntoIter<(T, Reply)>),
}

impl<T> Iterator for Replies<T> {
    type Item = (T, Reply);

    fn next(&mut self) -> Option<(T, Reply)> {
        match self {
            Replies::One(it) => it.next(),
            Replies::Many(it) => it.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Replies::One(it) => it.size_hint(),
            Replies::Many(it) => it.size_hint(),
        }
    }
}

impl<T> ExactSizeIterator for Replies<T> {}
