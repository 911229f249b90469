//! The embedded cluster: nodes running inside the router process, each a real gRPC server on its
//! own loopback port, with the resharding coordinator running in-process too. One command starts a
//! working cluster without Kubernetes, and `SHOAL SCALE n` grows or shrinks it online.
//!
//! It needs the storage engine, so it is behind the `embedded` feature (on by default: `cargo run
//! -p shoal-router` starts it). A production router built without it (`--no-default-features`,
//! as the container image is) links no store code and refuses to start without `--nodes` or
//! `--topology-file`.

#[cfg(feature = "embedded")]
mod cluster;
#[cfg(feature = "embedded")]
pub use cluster::{EmbeddedCluster, EmbeddedRegistry};

#[cfg(not(feature = "embedded"))]
mod absent;
#[cfg(not(feature = "embedded"))]
pub use absent::EmbeddedCluster;

mod options;
pub use options::{EmbeddedError, EmbeddedOptions, ScaleStatus};
