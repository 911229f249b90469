//! What a command is to the router: its spec (what Redis declares about it, beside the function
//! that runs it: each command file has a `pub const NAME: CommandSpec` next to its handler, and
//! `super::registry` lists them), the context a handler runs with ([`Ctx`]) and what it returns
//! ([`Pending`]). One concept, one file: a spec names its handler's type, and a handler's
//! context names the registry of specs.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
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
    /// read yet).
    pub now: std::cell::Cell<Option<i64>>,
    /// Every command (COMMAND, INFO commandstats, CLIENT LIST name or list them).
    pub registry: &'static Registry,
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
    pub fn call_atomic(&self, keys: Vec<Bytes>, op: Op) -> UnitCall {
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

/// Where a command's keys are among its arguments (`COMMAND INFO`'s first key, last key, step).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySpec {
    pub first: i32,
    /// Negative counts from the end (-1: the last argument).
    pub last: i32,
    pub step: i32,
}

impl KeySpec {
    pub const NONE: KeySpec = KeySpec { first: 0, last: 0, step: 0 };
    pub const ONE: KeySpec = KeySpec { first: 1, last: 1, step: 1 };
    /// Every argument after the name is a key (DEL, MGET, EXISTS).
    pub const ALL: KeySpec = KeySpec { first: 1, last: -1, step: 1 };
    /// Key-value pairs (MSET).
    pub const PAIRS: KeySpec = KeySpec { first: 1, last: -1, step: 2 };
}

#[derive(Debug)]
pub struct CommandSpec {
    /// Lowercase full name; subcommands are `parent|sub`, as Redis names them in errors.
    pub name: &'static str,
    /// Redis arity: N means exactly N arguments (name included), -N at least N.
    pub arity: i32,
    pub flags: &'static [&'static str],
    pub keys: KeySpec,
    /// ACL categories (`@read`, `@string`, ...).
    pub acl: &'static [&'static str],
    /// The command group `COMMAND DOCS` reports.
    pub group: &'static str,
    pub since: &'static str,
    pub summary: &'static str,
    pub complexity: &'static str,
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
        self.flags.contains(&"write") || self.name == "pfcount"
    }
}

impl CommandSpec {
    /// The base every spec is written over (`..CommandSpec::DEFAULT`).
    pub const DEFAULT: CommandSpec = CommandSpec {
        name: "",
        arity: 0,
        flags: &[],
        keys: KeySpec::NONE,
        acl: &[],
        group: "",
        since: "",
        summary: "",
        complexity: "",
        run: |_, _| Reply::error("ERR command not implemented").into(),
        subcommands: &[],
        lane: LaneClass::No,
    };

    /// The name without its parent (`setname` for `client|setname`).
    pub fn short_name(&self) -> &'static str {
        self.name.rsplit('|').next().unwrap_or(self.name)
    }

    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i32;
        if self.arity >= 0 { argc == self.arity } else { argc >= -self.arity }
    }

    /// Whether the command runs before authentication (AUTH, HELLO, QUIT, RESET).
    pub fn no_auth(&self) -> bool {
        self.flags.contains(&"no_auth")
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
        self.spec_at(slot).map(|s| s.name)
    }
}

// ACL category sets and flag sets that many commands share.
pub const FAST_CONN: &[&str] = &["@fast", "@connection"];
pub const SLOW_CONN: &[&str] = &["@slow", "@connection"];
pub const READ_STRING_FAST: &[&str] = &["@read", "@string", "@fast"];
pub const WRITE_STRING_FAST: &[&str] = &["@write", "@string", "@fast"];
pub const WRITE_STRING_SLOW: &[&str] = &["@write", "@string", "@slow"];
pub const KEYSPACE_READ_FAST: &[&str] = &["@keyspace", "@read", "@fast"];
pub const KEYSPACE_WRITE_FAST: &[&str] = &["@keyspace", "@write", "@fast"];
pub const NO_AUTH: &[&str] = &["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"];
pub const SUB_FLAGS: &[&str] = &["noscript", "loading", "stale"];
/// Flags and ACL categories of the server-administration subcommands (CONFIG, SLOWLOG, LATENCY, ...).
pub const ADMIN_FLAGS: &[&str] = &["admin", "noscript", "loading", "stale"];
pub const ADMIN_ACL: &[&str] = &["@admin", "@slow", "@dangerous"];
