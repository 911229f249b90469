//! Resharding: the planner and the coordinator.
//!
//! - [`plan`]: pure. Current topology + wanted nodes -> next topology with minimal movement, and
//!   [`plan::finalize`] once migrations are done; [`plan::move_slots`] moves chosen slots onto a
//!   member instead (a hot range, a chaos test's keys).
//! - [`registry`]: where the topology lives (a file, memory); the coordinator is its one writer.
//! - [`coordinator`]: publishes a plan, makes sure every node serves it, waits while the new
//!   owners pull their slots (they report progress), then publishes the final topology. It keeps no
//!   state of its own: restarted at any point, it resumes from the published topology. It reaches
//!   nodes through the [`Nodes`] trait (gRPC in production, fakes in its tests).
//! - [`failover`]: the one writer of primaries: watches every shard's members and publishes a
//!   topology that promotes a replica when a primary is gone (or restarted with stale data), or
//!   confirms a primary that started fenced. [`failover::decide`] is pure; [`failover::watch`]
//!   probes members over gRPC and publishes to the registry.

pub mod coordinator;
pub mod failover;
pub mod plan;
pub mod registry;

pub use coordinator::{Coordinator, CoordinatorError, GrpcNodes, Nodes, Progress};
pub use plan::{PlanError, finalize, move_slots, plan};
pub use registry::{FileRegistry, MemoryRegistry, Registry, RegistryError};
