//! Replication: a shard's primary streams its changes to its replicas.
//!
//! - [`feed`]: the primary's side of a `Replicate` stream: a full sync (everything it holds,
//!   memory over the base snapshot, in chunks) unless the replica can continue from the backlog,
//!   then the state of every key the change log (`store::changes`) names, in order, each chunk
//!   numbered with the offset it brings the replica to; and `WaitReplicas` (WAIT).
//! - [`follow`]: the replica's side: it opens the stream on its primary, applies what arrives
//!   (a full sync first drops everything it held) and acks each offset.
//! - [`handover`]: a primary hands its shard to a caught-up replica (SIGTERM, the `Handover`
//!   call) without losing a write.
//!
//! Who is primary is the topology's business (`membership/mod.rs`): the process at a shard's `addr`
//! is its primary, those at its `replicas` follow it. A replica serves no ops (the router sends
//! them to the primary); once a topology names it primary it serves at once, with what it has.
//!
//! The state they share ([`Replication`], in [`state`], below all three) is the process's: its run
//! id (random per start, so a replica can tell a restarted primary from the one it followed), the
//! replicas connected to it as a primary, and its link to its primary as a replica. INFO
//! replication and `/metrics` read it through the node's stats. This file only declares and
//! re-exports.

pub mod feed;
pub mod follow;
pub mod handover;
pub mod state;

pub use state::{Link, Replication};
