//! A command's failure (its Redis error line), and the failures every family shares. Below
//! every command file.

use crate::redis_error::redis_error;
use crate::store::{Store, StoreError};

/// A command's answer, or its failure.
pub type CmdResult = Result<shoal_wire::proto::Frame, CmdError>;

/// A command's failure; `Display` is its Redis error line (a store error's through
/// [`redis_error`], the one place those are worded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmdError {
    #[error("{}", redis_error(.0))]
    Store(#[from] StoreError),
    #[error("{0}")]
    Text(&'static str),
    #[error("{0}")]
    Owned(String),
}

impl CmdError {
    /// The kind of error a front end tells apart (HTTP's status, a blocked command's retry), from
    /// the type of failure, never from its line.
    pub fn kind(&self) -> shoal_wire::proto::ErrorKind {
        match self {
            CmdError::Store(e) => crate::redis_error::error_kind(e),
            CmdError::Text(_) | CmdError::Owned(_) => shoal_wire::proto::ErrorKind::Other,
        }
    }
}

pub const NOT_INTEGER: CmdError = CmdError::Text("ERR value is not an integer or out of range");
pub const SYNTAX: CmdError = CmdError::Text("ERR syntax error");

pub fn wrong_arity(name: &[u8]) -> CmdError {
    CmdError::Owned(format!(
        "ERR wrong number of arguments for '{}' command",
        String::from_utf8_lossy(name).to_ascii_lowercase()
    ))
}

/// Refuses a write with `-OOM` when `maxmemory` is reached and nothing can be evicted (commands
/// Redis flags `denyoom`).
pub fn make_room(store: &Store) -> Result<(), CmdError> {
    store.make_room().map_err(CmdError::from)
}
