//! Shoal's Kubernetes operator: a `CacheCluster` in, a running cache cluster out, resharded online
//! whenever `spec.shards` changes.
//!
//! Data flow of one reconcile ([`controller::reconcile`]):
//!
//! ```text
//! CacheCluster ──► apply owned objects (resources::*, server-side apply, owner references)
//!              ──► observe: node StatefulSet, node pods (ready + address), topology ConfigMap
//!              ──► scaling::next_step ──► act: scale the StatefulSet | publish the first topology
//!                                          | start/resume a move (shoal-coordinator in a task,
//!                                            registry::ConfigMapRegistry as its topology registry)
//!              ──► status::compute ──► status subresource + Events
//! ```
//!
//! - [`crd`]: the `CacheCluster` resource (`shoal.dev/v1alpha1`), with status and scale
//!   subresources; `crdgen` writes its YAML into the chart.
//! - [`resources`]: pure builders for everything a CacheCluster owns.
//! - [`scaling`]: the pure decision of what to do next (grow, move, shrink, resume).
//! - [`status`]: the pure status and conditions.
//! - [`registry`]: the topology in a ConfigMap, as the coordinator's registry.
//! - [`controller`]: the reconciler, background moves, Events, metrics.
//! - `fake_api` (tests only): a scripted fake API server for the API-call scenario tests.
//!
//! `main.rs` adds the CLI, leader election on a Lease, the ops HTTP endpoint and shutdown.

pub mod controller;
pub mod crd;
#[cfg(test)]
mod fake_api;
pub mod registry;
pub mod resources;
pub mod scaling;
pub mod status;
