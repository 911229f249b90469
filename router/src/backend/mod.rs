//! The router's view of the nodes, and the only layer that knows topology versions.
//!
//! - [`routing`]: the [`Backend`] (the current topology and one [`port::NodePort`] per node, a
//!   [`link::NodeLink`]: one batched gRPC stream; adopting newer topologies from the topology
//!   source or from a node that answered `moved`) and the [`Routing`] snapshot a connection
//!   routes by. [`error`]: why a call produced no reply.
//! - What commands ask for, each returning settled replies (`moved` replies, stale routes and
//!   moving slots never reach `cmd/`): [`calls`] (one key's op, ops for many keys grouped per
//!   node, an op on every node, an op on one node by position), [`unit`] (an op one node applies
//!   as a whole: a transaction, a script, MSETNX) and [`block`] (a blocking command's wait).
//! - `settle`: the one settle loop every call goes through (deadline → count → catch up or wait
//!   out a move → route again); `moving`: the migration-aware path for a key whose slot is moving
//!   (fallback reads, copy-before-read-modify-write, deletes on both owners).
//! - [`capture`]: a routing whose ports record ops instead of sending them (MULTI/EXEC);
//!   [`spread`]: a transaction over keys of several nodes, in two phases.
//! - [`port`]: the node trait, its call handle and counters; [`link`]: the real node link.
//!
//! A connection takes a [`Routing`] snapshot (an `Arc`) and refreshes it only when the version
//! moves, so routing a key costs one CRC16 and one array lookup.

pub mod block;
pub mod calls;
pub mod capture;
pub mod error;
pub mod link;
mod moving;
pub mod port;
pub mod routing;
mod settle;
pub mod spread;
#[cfg(test)]
mod tests;
pub mod unit;

pub use calls::{AllCall, AtCall, Each, KeyCall, MultiCall};
pub use error::{AtomicError, BackendError};
pub use link::{LinkOptions, NodeLink};
pub use port::{NodeCall, NodeIdent, NodePort};
pub use routing::{Backend, BackendMetrics, PortFactory, ReadFrom, Routing, futures_join};
pub use spread::SpreadOutcome;
pub use unit::UnitCall;
