//! Why a store call was refused.

use super::float::FloatError;

/// Why a store call was refused. `Display` says it in plain words, for logs; what a client reads
/// is Redis's error line, which the protocol layer renders from the variant
/// (`crate::redis_error`): the store knows no wire text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("the value is not an integer, or out of range")]
    NotInteger,
    #[error("the increment or decrement would overflow")]
    Overflow,
    #[error(transparent)]
    Float(#[from] FloatError),
    #[error("memory is at maxmemory and nothing can be evicted")]
    OutOfMemory,
    #[error("the value would exceed the largest size allowed")]
    TooLarge,
    #[error("the offset is out of range")]
    OffsetOutOfRange,
    #[error("the key holds another type of value")]
    WrongType,
    #[error("the serialized value has a bad version or checksum")]
    BadValue,
}
