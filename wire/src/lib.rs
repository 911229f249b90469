//! Shoal's wire contracts, shared by the router, the node and the operator so that none of them
//! depends on another's internals.
//!
//! - [`proto`]: the node gRPC API generated from `proto/shoal.proto` (tonic + prost, built without a
//!   system `protoc`). Routers send typed ops in batches; nodes answer in order.
//! - [`slot`]: key -> slot, CRC16 with `{hashtag}` mod 16384, identical to Redis Cluster.
//! - [`num`]: Redis's integer and memory-size syntax, so router and node agree on what a number is.
//! - [`command`]: the one-key string and keyspace commands that travel as typed ops (GET, SET,
//!   EXPIRE, TTL, ...): arguments → op with Redis's rules and texts, for the router's clients and
//!   for `redis.call` in a node's Lua scripts alike.
//! - [`settings`]: the node settings CONFIG SET changes (names, aliases, Redis's ranges and error
//!   texts), so a router's CONFIG SET, the node's `Configure` call and its flags agree.
//! - [`notify`]: keyspace notification classes (`notify-keyspace-events` letters and flags).
//! - [`cross`]: how a command over several keys is split when they live on several nodes (the
//!   router's clients' commands and a node's scripts alike).
//! - [`sort`]: the keys SORT's STORE, BY and GET name (the router gathers them, the node reads
//!   them).
//! - [`splitargs`]: Redis's `sdssplitargs` (inline commands, ACL files, library metadata).
//! - [`glob`]: Redis's glob patterns (KEYS, SCAN MATCH on the nodes; CONFIG GET and ACL patterns).
//! - [`acl`]: Redis's command table (generated from redis-server 7.0.15: arity, flags, key
//!   range, ACL categories, docs and key specs of every command, the one source the router's
//!   command specs and a node's script table take them from) and Redis's ACL permissions (a
//!   user's command/key/channel rules and their check), for the router's clients and for the
//!   calls of a script on a node alike.
//! - [`ops`]: the key an op is about and how it behaves while its slot moves.
//! - [`topology`]: the versioned document that maps slot ranges to nodes; [`topology_file`]: that
//!   document in a file (read, atomic replace, watch).
//! - [`client`]: the one constructor of gRPC clients to nodes (message limits, timeouts);
//!   [`auth`]: the cluster secret every call to a node carries and every node checks;
//!   [`tls`]: certificates from files, re-read when they change (client ports, node links);
//!   [`codec`]: the gRPC codec (prost's, presizing a batch's ops before decoding them);
//!   [`local`]: in-memory pipes to nodes served in the same process (embedded clusters), which
//!   `client::connect` takes instead of loopback TCP.
//! - [`monitor`]: MONITOR's lines (the router's for its clients' commands, a node's for a
//!   script's calls).
//! - [`clock`]: the one source of wall-clock time (injectable; tests use a manual clock).
//! - [`script`]: a Lua script's name (the SHA1 of its body), as routers and nodes both compute it.
//! - [`pieces`]: large ops, replies and exported values cut into pieces and put back together.
//! - [`chunk`]: small byte strings cut from shared chunks (one allocation for many).
//! - [`fast`]: the sidecar fast path's binary frames (docs/fast-path.md), for the router and
//!   `shoal-client` alike.
//!
//! Data flow: a router computes `slot::key_slot(key)`, looks the slot up in a [`topology::SlotTable`]
//! built from the current [`topology::Topology`], and sends a [`proto::Op`] to that node's stream.

pub mod acl;
pub mod auth;
pub mod chunk;
pub mod client;
pub mod clock;
pub mod codec;
pub mod command;
pub mod cross;
pub mod fast;
pub mod glob;
pub mod latency;
pub mod local;
pub mod monitor;
pub mod notify;
pub mod num;
pub mod ops;
pub mod pieces;
pub mod script;
pub mod settings;
pub mod slot;
pub mod sort;
pub mod splitargs;
pub mod tls;
pub mod topology;
pub mod topology_file;

/// Generated gRPC types and stubs for `shoal.v1`.
#[allow(clippy::all, missing_docs)]
pub mod proto {
    tonic::include_proto!("shoal.v1");
}

pub use slot::{SLOT_COUNT, key_slot};
pub use topology::{Member, Migration, NodeInfo, SlotRange, SlotRole, SlotTable, Topology, TopologyError};

#[cfg(test)]
mod tests {
    /// Every request's op and reply is moved several times between a client's frame and the
    /// node's store (handler, lane, batch, reply collection), so their sizes are a cost on every
    /// request: a field added beside every op or reply (a SET's IFEQ value, a script's calls) made
    /// fast-path GETs and SETs run 7% more instructions, in copies, until boxed. An op or reply
    /// that must grow should box its rare part (`build.rs`) rather than raise these bounds.
    #[test]
    fn sizes() {
        use crate::proto::{Op, Reply};
        assert_eq!(std::mem::size_of::<Op>(), 96, "Op");
        assert_eq!(std::mem::size_of::<Reply>(), 56, "Reply");
        assert_eq!(std::mem::size_of::<crate::command::OneKey>(), 136, "OneKey");
    }
}
