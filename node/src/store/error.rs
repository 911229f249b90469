//! Why a store call was refused.

use super::float::FloatError;

/// Why a store call was refused. `Display` is the exact Redis error line (without the `-`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("ERR value is not an integer or out of range")]
    NotInteger,
    #[error("ERR increment or decrement would overflow")]
    Overflow,
    #[error(transparent)]
    Float(#[from] FloatError),
    #[error("OOM command not allowed when used memory > 'maxmemory'.")]
    OutOfMemory,
    #[error("ERR string exceeds maximum allowed size (proto-max-bulk-len)")]
    TooLarge,
    #[error("ERR offset is out of range")]
    OffsetOutOfRange,
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    #[error("ERR DUMP payload version or checksum are wrong")]
    BadValue,
}
