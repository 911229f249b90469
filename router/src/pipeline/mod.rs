//! One request's life, the same on every protocol. RESP (TCP, TLS, Unix socket:
//! [`crate::front::resp`]), the binary fast path ([`crate::front::fast`]) and HTTP
//! ([`crate::front::http`]) only frame requests and encode replies, inside one connection guard
//! ([`crate::guard`]); in between, every request goes through these stages, in this order:
//!
//! 1. [`admit`]: Redis's `processCommand` gates (name, arity, authentication, ACL, RESP2's
//!    pub/sub mode), then CLIENT PAUSE (a held request waits in its protocol's loop and comes
//!    back through [`Pipeline::resume`]) and MULTI queueing.
//! 2. [`dispatch`]: Redis's `call()` ([`crate::cmd::prepare`]: count, where a read goes, client
//!    tracking), the near cache ([`near`]), then the command's handler (`cmd/<name>.rs`). A
//!    one-key op the handler builds joins the [`lane`] (one group per node for a read buffer's
//!    requests) or is sent alone; any other handler queues its own ops, after the lane is sent,
//!    so ops keep their order on every node.
//! 3. [`settle`]: the replies come in: each request's [`crate::cmd::Pending`], each lane's
//!    replies together; moved keys, topology changes and moving slots were settled below, in
//!    the backend's one retry loop (`crate::backend::calls`).
//! 4. [`record`]: the latency histogram, command stats, slow log and hot keys.
//!
//! Then the protocol encodes the typed reply. A [`Pipeline`] is a connection's: its routing
//! snapshot, the deadline of the requests taken up together, the lane being filled and the
//! lanes sent.

pub mod admit;
pub mod dispatch;
pub mod lane;
pub mod near;
pub mod record;
pub mod settle;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use crate::backend::Routing;
use crate::cmd::{Args, CommandSpec};
use crate::nearcache::NearValue;
use crate::session::Session;
use crate::state::RouterState;
pub use dispatch::Step;
use lane::{Lane, LaneCall};
use record::Timing;

/// A connection's way into the stages (see the module docs); `T` tags a request until its reply
/// is in (a RESP connection's position in its round, a fast-path request's id).
pub struct Pipeline<T> {
    state: Arc<RouterState>,
    routing: Arc<Routing>,
    deadline: tokio::time::Instant,
    /// The router's clock in Unix ms for the requests taken up together (read at most once).
    now_ms: std::cell::Cell<Option<i64>>,
    lane: Lane<T>,
    sent: VecDeque<LaneCall<T>>,
    /// Whether one-key ops may join a lane (false: each request is taken up alone, as HTTP's
    /// are, and a lane of one would only cost its bookkeeping).
    lanes: bool,
}

/// A [`Ctx`] over a pipeline's fields and a session (a macro: the lane stays borrowable).
macro_rules! ctx {
    ($p:expr, $session:expr) => {
        crate::cmd::Ctx {
            state: &$p.state,
            session: $session,
            routing: &$p.routing,
            deadline: $p.deadline,
            read_from: crate::backend::ReadFrom::Primary,
            now: &$p.now_ms,
            registry: &crate::cmd::REGISTRY,
        }
    };
}

impl<T> Pipeline<T> {
    pub fn new(state: &Arc<RouterState>) -> Pipeline<T> {
        Pipeline {
            state: state.clone(),
            routing: state.backend.routing(),
            deadline: tokio::time::Instant::now() + state.settings.deadline,
            now_ms: std::cell::Cell::new(None),
            lane: Lane::default(),
            sent: VecDeque::new(),
            lanes: true,
        }
    }

    /// A pipeline whose requests never join a lane: each is taken up, sent and settled before the
    /// next (HTTP's: a request and its response stand alone).
    pub fn alone(state: &Arc<RouterState>) -> Pipeline<T> {
        Pipeline { lanes: false, ..Pipeline::new(state) }
    }

    /// Requests taken up together from now on (a read buffer, or the rest of one after a wait):
    /// the routing caught up with the topology, their deadline and clock from now.
    #[inline]
    pub fn round(&mut self) {
        if self.routing.topology.version != self.state.backend.version() {
            self.routing = self.state.backend.routing();
        }
        self.deadline = tokio::time::Instant::now() + self.state.settings.deadline;
        self.now_ms.set(None);
    }

    #[inline]
    pub fn routing(&self) -> &Arc<Routing> {
        &self.routing
    }

    /// Ops joined and not sent yet.
    #[inline]
    pub fn lane_len(&self) -> usize {
        self.lane.len()
    }

    /// The way down: takes up a request taken from the client at `at`, admits it and
    /// dispatches it. `known`: the command `args[0]` names, when the protocol knows it (see
    /// [`admit::admit`]). `tag` makes the request's tag once admission is done, from the session
    /// and the admitted command (`None`: refused): the protocol's own check of an admitted
    /// command, which may refuse it ([`Step::NotHere`]) by returning `None`.
    #[inline]
    pub fn take(
        &mut self,
        session: &mut Session,
        args: &Args,
        known: Option<&'static CommandSpec>,
        at: Instant,
        tag: impl FnOnce(&Session, Option<&'static CommandSpec>) -> Option<T>,
    ) -> Step<T> {
        session.start_command_at(at);
        // One context for both stages (the lane and the lanes sent are other fields of `self`).
        let mut ctx = ctx!(self, session);
        let admitted = admit::admit(known, args, &mut ctx);
        match admitted {
            Err(refused) => match tag(ctx.session, None) {
                Some(tag) => Step::Done(tag, refused.into()),
                None => unreachable!("a refused request is answered"),
            },
            Ok(spec) => match tag(ctx.session, Some(spec)) {
                None => Step::NotHere(spec),
                Some(tag) if ctx.state.pause.holds(spec) => Step::Held(tag, spec),
                Some(tag) => dispatch::dispatch(
                    &mut ctx,
                    self.lanes.then_some(&mut self.lane),
                    &mut self.sent,
                    spec,
                    args,
                    tag,
                ),
            },
        }
    }

    /// A request CLIENT PAUSE held, now let through: its time starts again now (its duration
    /// includes the hold, as Redis counts it), and so do the requests taken up after it.
    pub fn resume(
        &mut self,
        session: &mut Session,
        spec: &'static CommandSpec,
        args: &Args,
        tag: T,
    ) -> Step<T> {
        self.round();
        session.start_command();
        let mut ctx = ctx!(self, session);
        dispatch::dispatch(&mut ctx, self.lanes.then_some(&mut self.lane), &mut self.sent, spec, args, tag)
    }

    /// Sends the lane, if anything joined it (before anything is awaited: see [`lane`]).
    #[inline]
    pub fn send(&mut self, session: &mut Session) {
        if self.lane.is_empty() {
            return;
        }
        let ctx = ctx!(self, session);
        self.sent.extend(self.lane.send(&ctx));
    }

    /// The oldest lane sent and not yet taken, whose requests' replies come together.
    #[inline]
    pub fn next_sent(&mut self) -> Option<LaneCall<T>> {
        self.sent.pop_front()
    }

    /// The way down for a plain GET (a key, nothing else) of a session whose GETs no stage would
    /// look at ([`admit::unlooked_get`]), when the near cache holds the key: `write` gets its
    /// value while the cache shard is locked, the session and the stats get what admission and
    /// dispatch would have given them, and the timing to record is returned. `None`: not a hit
    /// (nothing was done; take the request up as usual).
    pub fn near_hit(
        &mut self,
        session: &mut Session,
        key: &[u8],
        at: Instant,
        write: impl FnOnce(NearValue<'_>),
    ) -> Option<Timing> {
        let cache = self.state.near.as_ref()?;
        let get = admit::get_spec();
        if !admit::unlooked_get(&self.state, session, &self.routing, get, key) {
            return None;
        }
        cache.hit_at(key, self.routing.version(), at, write)?;
        session.start_command_at(at);
        let slot = admit::get_slot();
        admit::admitted_unlooked(session, slot);
        self.state.metrics.commands.inc();
        Some(Timing { started: at, slot, failed: false })
    }
}
