//! Redis commands on typed values (hashes, ...), run on the node from a wire `Command` op.
//!
//! The router has looked the command up, checked its arity and routed it by its key; the node
//! parses the remaining arguments with Redis's rules and texts and answers a [`Frame`], which the
//! router encodes for the client's protocol (RESP2 or RESP3). Each family has its file:
//! [`hash`], [`list`], [`set`], [`zset`], [`object`], [`scan`] (HSCAN and its kin).
//!
//! Every handler runs inside one `Store::read_object`/`write_object` call, so a command is atomic
//! on its key, exactly as on a single-threaded Redis.

mod frame;
mod hash;
mod list;
mod object;
mod scan;
mod set;
mod zset;

use bytes::Bytes;
use shoal_wire::proto::{Reply, reply};

pub use frame::F;

use crate::store::{Store, StoreError};

/// A command's failure: its Redis error line.
pub type CmdResult = Result<shoal_wire::proto::Frame, CmdError>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmdError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Text(&'static str),
    #[error("{0}")]
    Owned(String),
}

pub const NOT_INTEGER: CmdError = CmdError::Text("ERR value is not an integer or out of range");
pub const SYNTAX: CmdError = CmdError::Text("ERR syntax error");

/// Runs the command `args` (name first) and wraps its answer as a reply.
pub fn run(store: &Store, args: &[Bytes]) -> Reply {
    let frame = match dispatch(store, args) {
        Ok(f) => f,
        Err(e) => F::error(e.to_string()),
    };
    Reply { kind: Some(reply::Kind::Frame(frame)) }
}

fn dispatch(store: &Store, args: &[Bytes]) -> CmdResult {
    let Some(name) = args.first() else { return Err(CmdError::Text("ERR empty command")) };
    if args.len() < 2 {
        return Err(wrong_arity(name));
    }
    let mut lower = [0u8; 24];
    if name.len() > lower.len() {
        return Err(unknown(name));
    }
    lower[..name.len()].copy_from_slice(name);
    lower[..name.len()].make_ascii_lowercase();
    let name_lc = &lower[..name.len()];
    match name_lc {
        b"object" => object::object(store, args),
        _ => match hash::find(name_lc)
            .or_else(|| set::find(name_lc))
            .or_else(|| list::find(name_lc))
            .or_else(|| zset::find(name_lc))
        {
            Some(handler) => handler(store, args),
            None => Err(unknown(name)),
        },
    }
}

fn unknown(name: &[u8]) -> CmdError {
    CmdError::Owned(format!("ERR unknown command '{}'", String::from_utf8_lossy(name)))
}

pub fn wrong_arity(name: &[u8]) -> CmdError {
    CmdError::Owned(format!(
        "ERR wrong number of arguments for '{}' command",
        String::from_utf8_lossy(name).to_ascii_lowercase()
    ))
}

/// A Redis integer argument.
pub fn int_arg(b: &[u8]) -> Result<i64, CmdError> {
    shoal_wire::num::parse_i64(b).ok_or(NOT_INTEGER)
}

/// Refuses a write with `-OOM` when `maxmemory` is reached and nothing can be evicted (commands
/// Redis flags `denyoom`).
pub fn make_room(store: &Store) -> Result<(), CmdError> {
    store.make_room().map_err(CmdError::from)
}
