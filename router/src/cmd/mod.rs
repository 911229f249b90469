//! Commands: one file per command (or per family of variants, like INCR/DECR/INCRBY), each with
//! its argument parsing, its Redis error texts, and how it maps onto node ops.
//!
//! A request reaches a handler through `crate::pipeline` (admission, then dispatch); what runs
//! here is Redis's `call()`: [`prepare`] (count, where a read goes, client tracking), then the
//! command's `run` function, which parses its arguments and either answers at once, builds the
//! one op of a one-key command ([`Pending::Op`], sent by the pipeline alone or in a lane), or
//! queues ops on node links itself and returns a [`Pending`] reply.
//!
//! Each command file declares its [`spec::CommandSpec`] beside its handler; [`registry`] lists
//! them. Arity, flags, key range, ACL categories and docs are Redis's, from the generated table
//! (`spec::redis::GET`); only commands Redis lacks (SHOAL, CLIENT SETINFO) declare their own, in
//! their file. Commands never see topology versions: they ask the backend for settled calls through
//! [`Ctx`] (one key, many keys, every node, one node, keys that must share a node).

pub mod acl;
mod answer;
mod args;
mod bits;
mod blocking;
mod call;
mod client;
mod clients;
mod cluster;
mod command;
mod config;
mod connection;
mod debug;
mod del;
mod expire;
pub mod functions;
mod geo;
mod get;
mod getex;
mod hash;
mod hll;
mod incr;
mod info;
mod keys;
mod latency;
mod lists;
mod lolwut;
mod memory;
mod mget;
mod monitor;
mod mset;
mod multi;
pub mod near;
mod object;
mod persistence;
pub mod pubsub;
pub mod registry;
mod scan;
pub mod scripting;
mod server;
mod set;
mod sets;
mod shoal;
mod slotstats;
mod slowlog;
pub mod spec;
mod streams;
mod strings;
pub mod transaction;
mod ttl;
mod typed;
mod zsets;
pub use answer::{answer, gather, one_key, op, plain, reply_int, sum, sum_ints, unexpected};
pub use args::{
    CROSSSLOT, clip, help_reply, int_arg, not_integer, syntax_error, unknown_command, wrong_arity,
};
pub use call::{prepare, read_from, run, send, spec_keys};
pub use registry::{COMMANDS, REGISTRY, lookup, name_of, slot_of, spec_at};
pub use spec::{Args, BoxReply, CommandSpec, Ctx, LaneClass, Pending, Registry};
