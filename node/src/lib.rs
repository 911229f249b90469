//! Shoal storage node.
//!
//! Data flow: a router's `Execute` stream delivers batches of ops ([`execute`]; an op larger than
//! a piece arrives in pieces and is assembled first) → each op takes the store's gate, is checked
//! against the topology view and applied in order ([`ops`]) to the sharded [`store`]; typed
//! commands run through [`commands`], scripts on the node's script thread ([`script`]) → replies
//! go back in the same order, in messages of about 1 MiB (large replies in pieces), produced only
//! as fast as the router takes them.
//!
//! Modules, top down; a file imports only from files below it (`python3 .ci/shape` finds no
//! import circle):
//! - the front: [`server`] (gRPC server, health, active expiry, graceful shutdown;
//!   [`server::NodeHandle`] runs a node in-process), [`service`] (the RPCs), [`execute`] (the
//!   `Execute` stream), [`pubsub::stream`] (the `Subscribe` stream), [`metrics`] (the `/metrics`
//!   page), [`replication::handover`] (handing a shard to a replica).
//! - [`twophase`]: a transaction over several nodes, this node's half (`Prepare` holds the gate
//!   until `Decide`; a participant without a decision asks the coordinator's [`decisions`]).
//!   [`held`]: the `Hold` stream, which holds the gate for a script running on another node and
//!   applies its ops on this node's keys (the script's side is `script/reach.rs`).
//! - [`state`]: [`state::NodeState`], what the front shares (store, scripts, persistence,
//!   membership, pub/sub, the node's counters and settings). Below its users, it imports only
//!   what it holds.
//! - [`script`]: Lua scripts on the script thread, holding the store's gate while they run;
//!   `redis.call` applies ops through [`ops`] after an ACL check. Its command table
//!   ([`script::table`]: which commands a script may call, with arity, flags and keys from
//!   Redis's table in `shoal_wire::acl`) is a leaf that [`ops`] reads.
//! - [`ops`]: wire op → store call → wire reply, one file per stage (gate → transaction → blocked
//!   → run → apply → check → reply). Protocol code: it calls the store's API, never its
//!   internals.
//! - [`commands`]: Redis commands on typed values, answered as `Frame`s; [`notify`]: the keyspace
//!   events commands and ops raise after they ran (it sits between `commands::run` and the
//!   command index); [`redis_error`]: store errors as Redis error lines, worded only there.
//! - [`membership`]: the topology served, adopting a new one, fencing. Below it: [`migrate`]
//!   (pulling incoming slots, given the served view and the pull board, not the membership),
//!   [`replication`]'s state and follower, and `membership::{view, served, pulls}` (the view ops
//!   are checked by, the views in force, the pulls' progress). [`replication`]'s feed (a primary's
//!   changes to its replicas, WAIT) uses [`export`], which streams slots out in chunks.
//! - [`pubsub`] (routers' subscriptions, the fan-out of messages; [`pubsub::clients`] relays
//!   CLIENT LIST/KILL between routers), [`persistence`] (the newest
//!   snapshot loaded at start, new ones written).
//! - [`store`]: the sharded in-memory store (TTL heap, eviction, memory accounting). A plain
//!   synchronous API with no protocol types (it could back any front end); its errors are enums.
//! - [`snapshot`]: the mmap snapshot format, writer and reader (under the store, which serves a
//!   base snapshot), and the offline bake (which builds typed values).
//! - [`config`], [`link_tls`]: the `shoal-node` command line, node-link TLS.
//! - [`rdb`]: Redis's RDB encoding of DUMP-style payloads (lengths, strings, LZF, CRC64): FUNCTION
//!   DUMP/RESTORE write and read it, a leaf under [`script`].

pub mod commands;
pub mod config;
pub mod decisions;
pub mod execute;
pub mod export;
pub mod held;
pub mod link_tls;
pub mod membership;
pub mod metrics;
pub mod migrate;
pub mod notify;
pub mod ops;
pub mod persistence;
pub mod pubsub;
pub mod rdb;
pub mod redis_error;
pub mod replication;
pub mod script;
pub mod server;
pub mod service;
pub mod snapshot;
pub mod state;
pub mod store;
pub mod twophase;
