//! Shoal's Kubernetes operator: a `CacheCluster` in, a running cache cluster out, resharded online
//! whenever `spec.shards` changes, and with `spec.replicasPerShard` replicas that take over from a
//! failed or departing primary.
//!
//! Data flow of one reconcile ([`controller::reconcile`], one file per stage):
//!
//! ```text
//! CacheCluster ──► controller::spec: the spec checked ──► controller::secret: the cluster's Secret
//!              ──► apply the objects that do not depend on scaling (resources::*, server-side apply)
//!              ──► controller::observe: topology (registry::ConfigMapRegistry), node StatefulSets,
//!                  node pods (members::pod_views), the move that ended, with replicas every
//!                  member's stats (health::probe)
//!              ──► controller::plan (pure): scaling::next_step, member StatefulSets to keep
//!              ──► act: controller::moves::settle   Events of the move that ended
//!                       controller::nodes           scale the StatefulSets, node PodDisruptionBudgets
//!                                                   (per shard with replicas, open while redundant)
//!                       controller::moves           publish the first topology | start/resume a move
//!                                                   (shoal-coordinator in a task)
//!                       controller::replicas        with replicas, while no move runs:
//!                                                   members::membership ──► publish replica lists
//!                                                   | ask a departing primary to hand over
//!                                                   | controller::restarts: members::next_restart
//!                                                     ──► evict one outdated pod
//!                       routers once a topology exists; failover::ensure (replicas) | stop
//!              ──► controller::report: status::compute ──► status subresource; when to look again
//! ```
//!
//! The failover writer ([`failover`]) is the coordinator's `failover::watch` on the same
//! ConfigMap, one task per cluster with replicas while this operator leads; each decision is an
//! Event, and it stops a running move before it publishes (the next reconcile resumes the move
//! from the topology).
//!
//! Modules, lower ones never importing higher ones:
//! - [`controller`]: the reconciler, in stages (see its docs); uses everything below.
//! - [`failover`]: the failover writer of each cluster with replicas, its Events and metrics.
//! - [`election`]: leader election on a Lease, with a hand-over in milliseconds (a standby
//!   watches the Lease; the leader frees it once stopped).
//! - [`context`]: what the reconciler and the failover writers share: client, settings, Events
//!   recorder, metrics, and each cluster's memory between reconciles (its move, writer, restarts).
//! - [`metrics`]: the operator's counters and their exposition.
//! - [`status`]: the pure status and conditions.
//! - [`scaling`]: the pure decision of what to do next (grow, move, shrink, resume).
//! - [`members`]: pure: who is in each shard (replica lists, hand-overs before a member goes, which
//!   pod to restart next).
//! - [`health`]: every member's stats over gRPC, and what they say per shard (serving, synced, lag).
//! - [`registry`]: the topology in a ConfigMap, as the coordinator's registry.
//! - [`resources`]: pure builders for everything a CacheCluster owns, one file per kind of
//!   object, and the pod layout (one node StatefulSet per member index; ordinal = shard).
//! - [`crd`]: the `CacheCluster` resource (`shoal.dev/v1alpha1`), with status and scale
//!   subresources; `crdgen` writes its YAML into the chart.
//! - `fake_api` (tests only): a scripted fake API server for the API-call scenario tests.
//!
//! `main.rs` adds the CLI, the election (moves and failover writers stop the moment leadership is
//! lost; on SIGTERM they run until the controller has stopped, then the Lease is freed), the ops
//! HTTP endpoint and shutdown.

pub mod context;
pub mod controller;
pub mod crd;
pub mod election;
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
