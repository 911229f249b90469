//! `shoal-client`: an async client for Shoal's routers, over RESP (TCP or a Unix socket) or the
//! sidecar fast path ([`shoal_wire::fast`], a Unix socket or TCP), with one API for both.
//!
//! ```text
//!  app tasks ──► Client (pool.rs) ── picks the least-loaded live connection ──► Conn (conn.rs)
//!     │ get/set/... (commands.rs)         │ supervisors redial with backoff         │ writer task: one write per batch
//!     │ encode: resp.rs or wire::fast     │ (connect.rs: dial, preamble, AUTH/HELLO)│ reader task: replies → oneshots
//!     ◄────────────── typed result (error.rs) ◄──────────── decode: resp.rs or wire::fast ◄┘
//! ```
//!
//! Modules:
//! - [`resp`]: RESP2 request encoder and incremental reply decoder ([`Value`]).
//! - `conn`: one multiplexed connection: many requests in flight from many tasks, a writer task
//!   that coalesces them into one write, a reader task that matches replies (in order for RESP,
//!   by id for the fast path). A bound on requests in flight per connection pushes back on
//!   callers.
//! - `connect`: [`Endpoint`], [`Config`], and opening one connection (dial, fast-path preamble
//!   exchange, HELLO or AUTH).
//! - `pool`: [`Client`]: N connections, each kept up by a supervisor that reconnects with
//!   exponential backoff; requests in flight when a connection drops fail with
//!   [`Error::Closed`], new ones wait for a reconnect within their deadline.
//! - `commands`: GET, SET (with [`SetOptions`]), DEL, INCRBY, PEXPIRE, MGET, MSET, PING, and
//!   [`Client::cmd`] for any other command.
//! - [`error`]: [`Error`]: Io, Protocol, Server (Redis's text), Timeout, Closed.
//!
//! Requests are never retried by the client: a request that failed with [`Error::Closed`] or
//! [`Error::Timeout`] may have been applied (INCRBY is not idempotent), so the caller decides.
//!
//! ```no_run
//! # async fn demo() -> Result<(), shoal_client::Error> {
//! use shoal_client::{Client, Config, Protocol};
//! let config = Config::new("unix:/var/run/shoal/shoal.sock".parse()?, Protocol::Fast)
//!     .auth(Some("app".into()), Some("secret".into()))
//!     .connections(2);
//! let client = Client::connect(config).await?;
//! client.set("k", "v").await?;
//! assert_eq!(client.get("k").await?.as_deref(), Some(&b"v"[..]));
//! # Ok(()) }
//! ```

mod commands;
mod conn;
mod connect;
pub mod error;
mod pool;
pub mod resp;

pub use commands::{Condition, SetOptions, SetOutcome};
pub use conn::Protocol;
pub use connect::{Config, Endpoint};
pub use error::{Error, Result};
pub use pool::Client;
pub use resp::Value;

#[cfg(test)]
mod tests;
