//! RESP, the Redis protocol: requests in ([`parse`]), replies out ([`reply`], written through
//! [`out::Out`]).
//!
//! The parser is incremental and allocation-careful: a request's bytes are consumed from the
//! connection's read buffer as they arrive, arguments are `Bytes` slices of that buffer (no copy),
//! and nothing is allocated from a length header before the bytes it announces have arrived.
//! Replies are protocol-neutral values ([`Reply`]) encoded as RESP2 or RESP3 per connection.

pub mod out;
pub mod parse;
pub mod reply;

pub use out::Out;
pub use parse::{Limits, ProtocolError, RequestParser};
pub use reply::{ErrorKind, Protocol, Reply};
