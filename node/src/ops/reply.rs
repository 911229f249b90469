//! Reply builders, a store error's among them (worded by `crate::redis_error`). The bottom of the
//! ops layer: every other file here answers through these. (The small ones are `#[inline]`: a
//! GET's reply is built by one of them, and the call cost a few percent of a node's GET.)

use shoal_wire::proto::{self, Reply, reply};

use crate::redis_error::{error_kind, redis_error};
use crate::store::StoreError;

#[inline]
pub(crate) fn ok() -> Reply {
    Reply { kind: Some(reply::Kind::Ok(proto::Empty {})), ..Default::default() }
}

#[inline]
pub(super) fn nil() -> Reply {
    Reply { kind: Some(reply::Kind::Nil(proto::Empty {})), ..Default::default() }
}

#[inline]
pub(super) fn value(v: bytes::Bytes) -> Reply {
    Reply { kind: Some(reply::Kind::Value(v)), ..Default::default() }
}

#[inline]
pub(super) fn value_or_nil(v: Option<bytes::Bytes>) -> Reply {
    v.map_or_else(nil, value)
}

#[inline]
pub(super) fn result_value(r: Result<Option<bytes::Bytes>, StoreError>) -> Reply {
    r.map_or_else(store_error, value_or_nil)
}

#[inline]
pub(super) fn int(v: impl IntoI64) -> Reply {
    Reply { kind: Some(reply::Kind::Int(v.into_i64())), ..Default::default() }
}

pub(super) fn result_int<T: IntoI64>(r: Result<T, StoreError>) -> Reply {
    match r {
        Ok(v) => int(v),
        Err(e) => store_error(e),
    }
}

pub fn error(text: &str) -> Reply {
    Reply { kind: Some(reply::Kind::Error(text.to_string())), ..Default::default() }
}

/// BUSY: a script holds the node past busy-reply-threshold and the op did not run (`text` names
/// the KILL that stops it).
pub fn busy(text: &str) -> Reply {
    Reply { error_kind: shoal_wire::proto::ErrorKind::Busy as i32, ..error(text) }
}

/// A refused store call, answered with its Redis error line and its kind.
pub(super) fn store_error(e: StoreError) -> Reply {
    Reply { error_kind: error_kind(&e) as i32, ..error(redis_error(&e)) }
}

pub(crate) fn moved(version: u64) -> Reply {
    Reply { kind: Some(reply::Kind::Moved(version)), ..Default::default() }
}

/// Not run now, for a reason that passes (a slot moving, a gate held elsewhere): the router
/// sends it again after a pause.
pub(crate) fn try_again() -> Reply {
    Reply { kind: Some(reply::Kind::TryAgain(shoal_wire::proto::Empty {})), ..Default::default() }
}

pub(super) trait IntoI64 {
    fn into_i64(self) -> i64;
}

impl IntoI64 for bool {
    fn into_i64(self) -> i64 {
        i64::from(self)
    }
}

impl IntoI64 for i64 {
    fn into_i64(self) -> i64 {
        self
    }
}

impl IntoI64 for usize {
    fn into_i64(self) -> i64 {
        self as i64
    }
}
