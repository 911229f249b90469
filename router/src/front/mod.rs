//! The front ends: each frames its requests and encodes its replies, and nothing else; every
//! request goes down the same pipeline (`crate::pipeline`), and every connection is held to the
//! same guard (`crate::guard`).
//!
//! - [`resp`]: RESP2/RESP3 on TCP, TLS and the Unix socket (the parser and encoder are
//!   `crate::resp`); a connection whose first byte is 0xF5 goes on to [`fast`].
//! - [`fast`]: the binary fast path of docs/fast-path.md, replies out of order, matched by id.
//! - [`http`]: the key/value API and the ops endpoints.

pub mod fast;
pub mod http;
pub mod resp;
