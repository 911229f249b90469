//! Shoal's Kubernetes operator: a `CacheCluster` in, a running cache cluster out, resharded online
//! whenever `spec.shards` changes, and with `spec.replicasPerShard` replicas that take over from a
//! failed or departing primary.
//!
//! Data flow of one reconcile ([`controller::reconcile`]):
//!
//! ```text
//! CacheCluster ──► apply owned objects (resources::*, server-side apply, owner references)
//!              ──► observe: node StatefulSets, node pods (members::pod_views), topology ConfigMap,
//!                  with replicas every member's stats (health::probe)
//!              ──► scaling::next_step ──► act: scale the StatefulSets | publish the first topology
//!                                          | start/resume a move (shoal-coordinator in a task,
//!                                            registry::ConfigMapRegistry as its topology registry)
//!              ──► with replicas, while no move runs: members::membership ──► publish replica lists
//!                                          | ask a departing primary to hand over
//!                                          | members::next_restart ──► evict one outdated pod
//!              ──► per-shard PodDisruptionBudgets (open while the shard is redundant)
//!              ──► failover::ensure: the cluster's failover writer runs (replicas) or stops
//!              ──► status::compute ──► status subresource + Events
//! ```
//!
//! The failover writer ([`failover`]) is the coordinator's `failover::watch` on the same
//! ConfigMap, one task per cluster with replicas while this operator leads; each decision is an
//! Event, and it stops a running move before it publishes (the next reconcile resumes the move
//! from the topology).
//!
//! - [`crd`]: the `CacheCluster` resource (`shoal.dev/v1alpha1`), with status and scale
//!   subresources; `crdgen` writes its YAML into the chart.
//! - [`resources`]: pure builders for everything a CacheCluster owns, and the pod layout (one
//!   node StatefulSet per member index; ordinal = shard).
//! - [`scaling`]: the pure decision of what to do next (grow, move, shrink, resume).
//! - [`members`]: pure: who is in each shard (replica lists, hand-overs before a member goes, which
//!   pod to restart next).
//! - [`health`]: every member's stats over gRPC, and what they say per shard (serving, synced, lag).
//! - [`status`]: the pure status and conditions.
//! - [`registry`]: the topology in a ConfigMap, as the coordinator's registry.
//! - [`failover`]: the failover writer of each cluster with replicas, its Events and metrics.
//! - [`controller`]: the reconciler, background moves, Events.
//! - [`context`]: what the reconciler and the failover writers share (client, settings, Events
//!   recorder, metrics, each cluster's memory between reconciles), below both.
//! - [`metrics`]: the operator's counters and their exposition.
//! - `fake_api` (tests only): a scripted fake API server for the API-call scenario tests.
//!
//! `main.rs` adds the CLI, leader election on a Lease (moves and failover writers stop the moment
//! it is lost), the ops HTTP endpoint and shutdown.

pub mod context;
pub mod controller;
pub mod crd;
pub mod failover;
#[cfg(test)]
mod fake_api;
pub mod health;
pub mod members;
pub mod metrics;
pub mod registry;
pub mod resources;
pub mod scaling;
pub mod status;
