//! The client's one error type.

use std::sync::Arc;

/// Why a request did not get an answer (or got Redis's error as its answer).
///
/// `Clone` because one broken connection fails every request in flight on it with the same
/// error: an I/O error is kept behind an `Arc` for that.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The socket failed (connect refused, reset, ...).
    #[error("I/O error: {0}")]
    Io(Arc<std::io::Error>),
    /// The peer sent bytes this client cannot read, or an answer of the wrong shape for the
    /// request (a GET answered with an integer): the connection is closed, since the stream
    /// can no longer be trusted to line up.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The server answered with an error: Redis's text without the leading `-`
    /// (`WRONGTYPE Operation against a key holding the wrong kind of value`).
    #[error("{0}")]
    Server(String),
    /// No answer within the request's deadline (including any wait for a reconnect).
    #[error("timed out")]
    Timeout,
    /// The connection closed before the answer came (the request may or may not have been
    /// applied), or the client was dropped.
    #[error("connection closed")]
    Closed,
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Io(Arc::new(e))
    }
}

impl From<shoal_wire::fast::FrameError> for Error {
    fn from(e: shoal_wire::fast::FrameError) -> Error {
        Error::Protocol(e.to_string())
    }
}

impl Error {
    /// Whether the error came from the server's answer (the connection is fine), as opposed to
    /// the transport.
    pub fn is_server(&self) -> bool {
        matches!(self, Error::Server(_))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
