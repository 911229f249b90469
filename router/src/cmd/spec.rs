//! What a command is to the router: its spec (a pointer to what Redis declares about it, in the
//! table generated from redis-server into `shoal_wire::acl::table`, beside what is Shoal's own:
//! the function that runs it, its subcommands, its lane class; each command file has a
//! `pub const NAME: CommandSpec` next to its handler, and `super::registry` lists them), the
//! context a handler runs with ([`Ctx`]) and what it returns ([`Pending`]). Commands Redis lacks
//! (SHOAL, CLIENT SETINFO of Redis 7.2) declare themselves in the same form, in their file, over
//! [`SHOAL_OWN`]. One concept, one file: a spec names its handler's type, and a handler's
//! context names the registry of specs.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
pub use shoal_wire::acl::commands::{KeyRange, RedisCommand, cat, flag};
/// Redis's declarations, one constant per command (`redis::GET`, `redis::CLIENT_KILL`).
pub use shoal_wire::acl::table as redis;
use shoal_wire::command::OneKey;
use shoal_wire::proto::{self, Op};
use tokio::time::Instant;

use crate::backend::{AllCall, AtCall, BackendError, KeyCall, MultiCall, ReadFrom, Routing, UnitCall};
use crate::resp::Reply;
use crate::session::Session;
use crate::state::RouterState;

/// A command's arguments, the name included (`args[0]`).
pub type Args = [Bytes];

/// What a command needs while it runs.
pub struct Ctx<'a> {
    pub state: &'a Arc<RouterState>,
    pub session: &'a mut Session,
    pub routing: &'a Arc<Routing>,
    /// When calls made by this command give up.
    pub deadline: Instant,
    /// Where this command's one-key read goes (set by [`prepare`]).
    pub read_from: ReadFrom,
    /// The router's clock in Unix ms, read once for the requests taken up together (`None`: not
    /// read yet): the pipeline's own cell, so nothing is copied back after each request.
    pub now: &'a std::cell::Cell<Option<i64>>,
    /// Every command (COMMAND, INFO commandstats, CLIENT LIST name or list them).
    pub registry: &'static Registry,
}

impl Ctx<'_> {
    /// `op` on the node that owns `key`, queued now.
    pub fn call(&self, key: &Bytes, mut op: Op) -> KeyCall {
        op.no_touch |= self.session.skip_touch;
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
        let skip_touch = self.session.skip_touch;
        let items = items.map(move |(key, mut op)| {
            op.no_touch |= skip_touch;
            (key, op)
        });
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
        match self.now.get() {
            Some(ms) => ms,
            None => {
                let ms = self.state.clock.now_ms() as i64;
                self.now.set(Some(ms));
                ms
            }
        }
    }

    /// `op` over `keys` that must share one node, which applies it as one unit.
    pub fn call_atomic(&self, keys: Vec<Bytes>, mut op: Op) -> UnitCall {
        op.no_touch |= self.session.skip_touch;
        self.state.backend.atomic(self.routing, keys, op, self.deadline)
    }
}

/// A command's reply, possibly still on its way from the nodes.
pub enum Pending {
    Ready(Reply),
    /// One op on one key, built and not sent: the pipeline sends it, alone or with other
    /// requests' ops in a lane ([`send`] sends it alone). Only handlers of a command whose spec
    /// has a [`LaneClass`] other than `No` may count on it joining a lane.
    Op(OneKey),
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
            // Never in practice: every path that runs a handler sends what it builds.
            Pending::Op(one) => {
                BackendError::BadReply(format!("an op for {:?} was never sent", one.key)).into()
            }
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

/// A command as the router serves it: what Redis declares about it (arity, flags, key range,
/// ACL categories, docs: [`RedisCommand`], from the generated table in `shoal_wire::acl`), and
/// what is Shoal's own (the handler, the subcommands it serves, its lane class).
#[derive(Debug)]
pub struct CommandSpec {
    /// The command's declaration: Redis's ([`redis`]`::GET`), or, for a command Redis lacks
    /// (SHOAL) or where Shoal deliberately differs, a Shoal-own one beside its handler.
    pub decl: &'static RedisCommand,
    pub run: fn(&Args, &mut Ctx) -> Pending,
    pub subcommands: &'static [&'static CommandSpec],
    /// How the pipeline may send its op (Shoal's own, not Redis's).
    pub lane: LaneClass,
}

/// Whether a command's op may travel in a lane (`crate::pipeline::lane`): one group per node
/// for the one-key commands of a read buffer, instead of one backend call each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaneClass {
    /// Its handler sends what it needs itself (and the lane is sent before it runs, so ops keep
    /// their order on every node).
    No,
    /// Its handler only builds one op on one key ([`Pending::Op`]), or answers at once.
    OneKey,
    /// As `OneKey`, and a read the near cache may answer (GET).
    NearRead,
}

impl crate::pause::Pausable for CommandSpec {
    /// Flagged `write`, or one Redis marks `may_replicate` (of Shoal's commands, PFCOUNT, which
    /// may rewrite its cached count).
    fn held_by_write_pause(&self) -> bool {
        self.has_flag(flag::WRITE) || self.decl.name == "pfcount"
    }
}

/// The base of Shoal-own declarations (`..SHOAL_OWN`): no Redis command id, no key specs.
pub const SHOAL_OWN: RedisCommand = RedisCommand {
    name: "",
    id: None,
    arity: 0,
    flags: 0,
    key_range: KeyRange::NONE,
    categories: 0,
    container: false,
    keys: &[],
    summary: "",
    since: "",
    group: "",
    complexity: "",
};

impl CommandSpec {
    /// The base every spec is written over (`..CommandSpec::DEFAULT`).
    pub const DEFAULT: CommandSpec = CommandSpec {
        decl: &SHOAL_OWN,
        run: |_, _| Reply::error("ERR command not implemented").into(),
        subcommands: &[],
        lane: LaneClass::No,
    };

    /// Lowercase full name; subcommands are `parent|sub`, as Redis names them in errors.
    pub fn name(&self) -> &'static str {
        self.decl.name
    }

    /// The name without its parent (`setname` for `client|setname`).
    pub fn short_name(&self) -> &'static str {
        let name = self.decl.name;
        name.rsplit('|').next().unwrap_or(name)
    }

    /// Redis arity: N means exactly N arguments (name included), -N at least N.
    pub fn arity(&self) -> i32 {
        self.decl.arity
    }

    pub fn arity_ok(&self, argc: usize) -> bool {
        self.decl.arity_ok(argc)
    }

    /// Whether the command has a [`flag`] (`flag::READONLY`, ...): a bit test.
    pub fn has_flag(&self, flag: u32) -> bool {
        self.decl.has_flag(flag)
    }

    /// Whether the command runs before authentication (AUTH, HELLO, QUIT, RESET).
    pub fn no_auth(&self) -> bool {
        self.decl.no_auth()
    }

    /// Where its keys are (`COMMAND INFO`'s first key, last key, step).
    pub fn key_range(&self) -> KeyRange {
        self.decl.key_range
    }

    /// Its ACL categories, as [`cat`] bits.
    pub fn categories(&self) -> u32 {
        self.decl.categories
    }

    /// Whether it may write (a write command, a script or a transaction): what WAIT then has to
    /// answer for (see `cmd/blocking.rs`).
    #[inline]
    pub fn may_write(&self) -> bool {
        self.has_flag(flag::WRITE) || self.categories() & (cat::SCRIPTING | cat::TRANSACTION) != 0
    }

    pub fn subcommand(&self, name: &[u8]) -> Option<&'static CommandSpec> {
        self.subcommands.iter().copied().find(|s| s.short_name().as_bytes().eq_ignore_ascii_case(name))
    }
}

/// Every command, as handlers that list or name commands see it (COMMAND, INFO commandstats,
/// CLIENT LIST): the registry hands it to each handler in its [`Ctx`], so that no handler
/// imports the list of every handler.
#[derive(Debug)]
pub struct Registry {
    pub commands: &'static [&'static CommandSpec],
    lookup: fn(&[u8]) -> Option<&'static CommandSpec>,
    slot_of: fn(&'static CommandSpec) -> Option<usize>,
    spec_at: fn(usize) -> Option<&'static CommandSpec>,
}

impl Registry {
    pub const fn new(
        commands: &'static [&'static CommandSpec],
        lookup: fn(&[u8]) -> Option<&'static CommandSpec>,
        slot_of: fn(&'static CommandSpec) -> Option<usize>,
        spec_at: fn(usize) -> Option<&'static CommandSpec>,
    ) -> Registry {
        Registry { commands, lookup, slot_of, spec_at }
    }

    /// A command by name, ignoring case.
    pub fn lookup(&self, name: &[u8]) -> Option<&'static CommandSpec> {
        (self.lookup)(name)
    }

    /// A command's stats slot.
    pub fn slot_of(&self, spec: &'static CommandSpec) -> Option<usize> {
        (self.slot_of)(spec)
    }

    /// The command in a stats slot.
    pub fn spec_at(&self, slot: usize) -> Option<&'static CommandSpec> {
        (self.spec_at)(slot)
    }

    /// The name of the command in a stats slot.
    pub fn name_of(&self, slot: usize) -> Option<&'static str> {
        self.spec_at(slot).map(|s| s.name())
    }
}
