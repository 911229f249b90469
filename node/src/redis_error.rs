//! How store errors read on the wire: Redis's error lines (without the `-`) and their kinds,
//! written in this one place. The store's errors are plain enums whose `Display` is for logs; the ops layer's replies
//! (`ops/reply.rs`) and the typed commands' errors (`commands/error.rs`) both render through
//! [`redis_error`], so one refusal cannot read two ways. Below both, above the store.

use shoal_wire::proto::ErrorKind;

use crate::store::{FloatError, StoreError};

/// The Redis error line a client gets for `e`.
pub fn redis_error(e: &StoreError) -> &'static str {
    match e {
        StoreError::NotInteger => "ERR value is not an integer or out of range",
        StoreError::Overflow => "ERR increment or decrement would overflow",
        StoreError::Float(f) => float_error(f),
        StoreError::OutOfMemory => "OOM command not allowed when used memory > 'maxmemory'.",
        StoreError::TooLarge => "ERR string exceeds maximum allowed size (proto-max-bulk-len)",
        StoreError::OffsetOutOfRange => "ERR offset is out of range",
        StoreError::WrongType => "WRONGTYPE Operation against a key holding the wrong kind of value",
        StoreError::BadValue => "ERR DUMP payload version or checksum are wrong",
    }
}

/// The kind of `e`'s refusal, for front ends that answer by kind (HTTP's status codes).
pub fn error_kind(e: &StoreError) -> ErrorKind {
    match e {
        StoreError::WrongType => ErrorKind::WrongType,
        StoreError::OutOfMemory => ErrorKind::OutOfMemory,
        _ => ErrorKind::Other,
    }
}

/// The Redis error line for a refused INCRBYFLOAT (or HINCRBYFLOAT).
fn float_error(e: &FloatError) -> &'static str {
    match e {
        FloatError::NotFloat => "ERR value is not a valid float",
        FloatError::NanOrInfinity => "ERR increment would produce NaN or Infinity",
    }
}
