//! Shoal storage node.
//!
//! Data flow: a router's `Execute` stream delivers batches of ops ([`service`]; an op larger than
//! a piece arrives in pieces and is assembled first) → each op is checked against the topology
//! ([`membership`]) and applied to the sharded [`store`] in order ([`ops`]) → replies go back in
//! the same order, in messages of about 1 MiB (large replies in pieces), produced only as fast as
//! the router takes them.
//!
//! - [`store`]: the sharded in-memory store (TTL heap, eviction, memory accounting). No protocol
//!   types: it could back any front end.
//! - [`ops`]: wire op → store call → wire reply; store errors become Redis error text here.
//! - [`commands`]: Redis commands on typed values (hashes, ...), sent as `Command` ops and answered
//!   with `Frame` replies the router encodes for RESP2 or RESP3.
//! - [`script`]: Lua scripts (EVAL, EVALSHA, SCRIPT ...) on a thread of the node's own, holding the
//!   store's gate while they run; `redis.call` applies ops like a router's, after checking them
//!   against the ACL permissions of the script's user (`shoal_wire::acl`) when the op carries them.
//! - [`service`]: the tonic service's RPCs and the shared [`service::NodeState`]; [`execute`]: the
//!   `Execute` stream (applying batches in order, waiting on scripts without a thread).
//! - [`server`]: gRPC server + health service + active expiry, graceful shutdown; [`server::NodeHandle`]
//!   runs a node in-process (embedded mode, tests).
//! - [`pubsub`]: routers' subscriptions and the fan-out of published messages (the `Subscribe`
//!   stream per router); [`notify`]: keyspace notifications of commands, raised after they ran
//!   (the store raises `expired` and `evicted` itself), published through the same registry.
//! - [`snapshot`]: mmap read snapshots: format, writer, reader, data directory, offline bake.
//! - [`persistence`]: loading the newest snapshot at start, writing new ones, status.
//! - [`membership`]: the topology this node serves by, its role per slot, per-op checks (`moved`),
//!   and what adopting a new topology sets off; [`migrate`]: pulling incoming slots.
//! - [`replication`]: a primary's change feed to its replicas (full sync, then each changed key's
//!   state, by offset), a replica's follower, WAIT; who is which comes from the topology.
//! - [`metrics`]: counters and the `/metrics` text.
//! - [`config`]: the `shoal-node` command line.

pub mod commands;
pub mod config;
pub mod execute;
pub mod export;
pub mod link_tls;
pub mod membership;
pub mod metrics;
pub mod migrate;
pub mod notify;
pub mod ops;
pub mod persistence;
pub mod pubsub;
pub mod redis_error;
pub mod replication;
pub mod script;
pub mod server;
pub mod service;
pub mod snapshot;
pub mod state;
pub mod store;
