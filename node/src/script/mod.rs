//! Lua scripts (EVAL, EVALSHA and their `_RO` forms; SCRIPT LOAD, EXISTS, FLUSH, KILL) and
//! library functions (FUNCTION, FCALL, FCALL_RO), run on the
//! node that owns their keys, atomically, as Redis runs them.
//!
//! Data flow: a `Script` op arrives on an `Execute` stream → the service hands it to
//! [`Scripts::submit`] and waits for the reply without holding a thread (later ops of the stream
//! wait behind it, in order) → the node's script thread takes the store's gate exclusively (no
//! other op runs meanwhile, as on a single-threaded Redis), checks the keys' slots as a
//! transaction does, finds the script by SHA (compiling the body the op carries, or one SCRIPT
//! LOAD left in the cache; `NOSCRIPT` otherwise) and runs it in the Lua VM ([`engine`]), whose
//! `redis.call` ([`call`]) applies ops to the store like any other op → the reply (a Frame) goes
//! back to the stream.
//!
//! - `runner.rs`: [`Scripts`], the handle the node holds, and the script thread it starts.
//! - [`shared`]: what the script thread and the rest of the node share (cache, busy state).
//! - `busy.rs`: when a script is past `busy-reply-threshold` here (or holds this node from
//!   another), and telling the routers of it (`Delivery.busy`).
//! - [`engine`]: the Lua 5.1 VM (mlua, Lua built from source): sandbox, the `redis` library,
//!   running a script and wording its errors as Redis does.
//! - [`call`]: `redis.call`/`redis.pcall`: what a script may call, with Redis's checks.
//! - [`reach`]: a script over keys of several nodes: the other nodes it holds while it runs
//!   (their `Hold` streams, served by `crate::held`) and its calls on their keys;
//!   [`spread`]: one call over keys of several held nodes (RPOPLPUSH, RENAME, ...) done in steps.
//! - [`acl`]: the ACL check of each call against the rules of the user running the script
//!   (carried by the `Script` op when restricted); the refusals go back with the reply
//!   (`ScriptReply`, with the commands it ran for INFO commandstats) for the router's ACL LOG.
//! - [`table`]: the commands scripts may call (arity, flags, keys).
//! - [`functions`]: FUNCTION LOAD/DELETE/FLUSH/LIST/DUMP/RESTORE/STATS and FCALL's libraries
//!   (the code in a [`registry`] that [`shared`] holds, compiled in the script thread's VM).
//! - [`convert`]: replies ↔ Lua values (RESP2/RESP3 rules). [`cjson`], [`cmsgpack`], [`bit`],
//!   [`lua_struct`]: the libraries.
//!
//! While a script runs, ops of other streams wait for it without blocking their threads; once it
//! has run past `busy-reply-threshold` they are answered `BUSY`, and SCRIPT KILL (the node's
//! `KillScript` call, which needs no stream) stops it, unless it has written: then it is
//! `UNKILLABLE`, as in Redis. One script thread per node: other nodes wait for it only while it
//! holds them (its keys on several nodes), and answer BUSY past the threshold alike.
//!
//! This file only declares the modules and re-exports; each file imports from the one that
//! defines an item (`shared.rs` sits below the runner, the engine and `redis.call`).

pub mod acl;
pub mod bit;
mod busy;
pub mod call;
pub mod cjson;
pub mod cmsgpack;
pub mod convert;
pub mod engine;
pub mod functions;
pub mod lua_struct;
pub mod reach;
pub mod registry;
mod runner;
pub mod shared;
mod spread;
pub mod table;

pub use busy::{BUSY_POLL, BusyNow, HeldForScript};
pub use runner::{BUSY, DEFAULT_BUSY_MS, DEFAULT_MEMORY_LIMIT, Kill, Progress, Scripts};
pub use shoal_wire::script::{NOSCRIPT, sha1_hex};
