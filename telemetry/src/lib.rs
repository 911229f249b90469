//! What every Shoal binary needs to be operable, in one place:
//!
//! - [`logging`]: structured logs via `tracing` (text or JSON, level from `RUST_LOG`).
//! - [`metrics`]: lock-free counters, gauges and histograms, and a writer for the Prometheus text
//!   exposition format. Binaries collect at scrape time: each `/metrics` request writes current
//!   values into a [`metrics::Exposition`]. Also the process's resident memory.
//! - [`http`]: a small HTTP/1.1 server (hyper) for `/metrics`, `/healthz`, `/readyz` and, in the
//!   router, the key/value API.
//! - [`shutdown`]: a future that resolves on SIGTERM or Ctrl-C, for graceful shutdown.
//! - [`runtime`]: the Tokio runtime, sized by `--threads`.

pub mod http;
pub mod logging;
pub mod metrics;
pub mod runtime;
pub mod shutdown;
