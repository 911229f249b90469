//! The lane: the one-key ops of one read buffer's requests, sent as one group per node.
//!
//! Sent one by one, each pipelined GET or SET costs its own backend call: an op queued on its
//! node's link, a oneshot, a deadline timer, and a task slot in the connection while it waits. A
//! connection that has many such requests at hand instead joins their ops to a [`Lane`] and
//! sends it once: [`Backend::keys`] puts each node's share in one group (one batch entry, one
//! wake-up, one timer), and the replies come back together, in order, each converted as its
//! command would have converted it.
//!
//! What joins: the op of a command whose spec has a [`LaneClass`] other than `No`, built by its
//! own handler (`Pending::Op`, see [`super::dispatch`]); a GET's near-cache miss joins as a
//! tracked read. Anything else the dispatcher runs after sending the lane, so ops keep their
//! order on every node queue. Before its handler runs, a command that may join has the
//! near cache forget its keys if it writes (at join, so a later GET in the lane does not read
//! the cache; sending forgets them again, in [`Backend::keys`]). Replica reads (READONLY,
//! `--read-from`), values large enough to travel in pieces, and every command while some client
//! uses CLIENT TRACKING (its registrations are queued at once and must not overtake the lane) do
//! not join.
//!
//! [`Backend::keys`]: crate::backend::Backend::keys
//! [`LaneClass`]: crate::cmd::LaneClass

use std::sync::Arc;

use bytes::Bytes;
use shoal_wire::command::OneKey;
use shoal_wire::pieces::PIECE_BYTES;
use shoal_wire::proto::{self, Op};

use crate::backend::ReadFrom;
use crate::backend::{Backend, BackendError, Each, KeyCall, MultiCall, Routing};
use crate::cmd::{self, Ctx, near};
use crate::nearcache::{NearCache, Ticket};
use crate::resp::Reply;
use crate::session::Session;
use crate::state::RouterState;

/// A near-cache miss riding in a lane: the key and the ticket to insert the value with (boxed:
/// every request's `Waiting` is moved a few times, and only misses carry one).
pub type Miss = Option<Box<(Bytes, Option<Ticket>)>>;

/// How one joined request's reply is made from its node's.
struct Waiting<T> {
    tag: T,
    answer: fn(proto::Reply) -> Reply,
    near: Miss,
}

/// Ops joined and not yet sent.
pub struct Lane<T> {
    items: Vec<(Bytes, Op)>,
    waiting: Vec<Waiting<T>>,
}

impl<T> Default for Lane<T> {
    fn default() -> Self {
        Lane { items: Vec::new(), waiting: Vec::new() }
    }
}

impl<T> Lane<T> {
    #[inline]
    pub fn len(&self) -> usize {
        self.items.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Joins a handler's op (of a request that [`may_join`]); `near`: a near-cache miss to insert
    /// the reply of.
    #[inline]
    pub fn push(&mut self, one: OneKey, near: Miss, tag: T) {
        self.items.push((one.key, one.op));
        self.waiting.push(Waiting { tag, answer: cmd::answer(one.answer), near });
    }

    /// Queues everything joined on the nodes now (one group per node; a lone request as its own
    /// call, which costs no more than sending it alone); `None` if nothing joined.
    pub fn send(&mut self, ctx: &Ctx) -> Option<LaneCall<T>> {
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
#[inline]
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
    /// How many requests it carries.
    pub fn len(&self) -> usize {
        match &self.sent {
            Sent::One(..) => 1,
            Sent::Many(_, waiting) => waiting.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every request's reply, in the order they joined (each made as it is taken: no second
    /// vector of a lane's replies).
    pub async fn wait(self) -> Replies<T> {
        let LaneCall { sent, backend, near } = self;
        let sent = match sent {
            Sent::One(call, w) => Settled::One(Some((w, call.wait().await))),
            Sent::Many(call, waiting) => Settled::Many(waiting.into_iter(), call.each().await),
        };
        Replies { sent, backend, near }
    }
}

/// A lane's replies with their tags, in the order the requests joined.
pub struct Replies<T> {
    sent: Settled<T>,
    backend: Arc<Backend>,
    near: Option<Arc<NearCache>>,
}

enum Settled<T> {
    One(Option<(Waiting<T>, Result<proto::Reply, BackendError>)>),
    Many(std::vec::IntoIter<Waiting<T>>, Each),
}

impl<T> Replies<T> {
    /// A joined request's reply, as its command converts it (through the near cache for a miss).
    #[inline]
    fn settle(&self, w: Waiting<T>, r: Result<proto::Reply, BackendError>) -> (T, Reply) {
        let reply = match r {
            Ok(r) => match (w.near.as_deref(), &self.near) {
                (Some((key, ticket)), Some(cache)) => {
                    (w.answer)(near::settle(cache, &self.backend, key, ticket.as_ref(), r))
                }
                _ => (w.answer)(r),
            },
            Err(e) => e.into(),
        };
        (w.tag, reply)
    }
}

impl<T> Iterator for Replies<T> {
    type Item = (T, Reply);

    #[inline]
    fn next(&mut self) -> Option<(T, Reply)> {
        let (w, r) = match &mut self.sent {
            Settled::One(one) => one.take()?,
            Settled::Many(waiting, replies) => (waiting.next()?, replies.next()?),
        };
        Some(self.settle(w, r))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = match &self.sent {
            Settled::One(one) => one.is_some() as usize,
            Settled::Many(waiting, _) => waiting.len(),
        };
        (n, Some(n))
    }
}

impl<T> ExactSizeIterator for Replies<T> {}
