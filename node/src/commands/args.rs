//! Arguments as Redis reads them: integers, counts, index ranges. Shared by the command
//! families (a list's range rules also rank a sorted set), so it sits below them all.

use super::error::{CmdError, NOT_INTEGER};

/// The most elements HRANDFIELD, SRANDMEMBER and ZRANDMEMBER return for a negative count (which
/// allows repeats, so the count alone sizes the reply). Redis would try to build any size; a
/// node answering billions of elements would run out of memory, so larger counts are refused.
pub const MAX_RANDOM_REPEATS: u64 = 10_000_000;

/// Refuses a negative random-member count past [`MAX_RANDOM_REPEATS`].
pub fn check_repeats(n: i64) -> Result<(), CmdError> {
    if n < 0 && n.unsigned_abs() > MAX_RANDOM_REPEATS {
        return Err(CmdError::Owned(format!(
            "ERR count is too large: at most {MAX_RANDOM_REPEATS} elements with repeats in one reply"
        )));
    }
    Ok(())
}

/// A count or limit that must not be negative, with the one text Redis gives both for a
/// non-integer and a negative value (`getPositiveLongFromObjectOrReply` with a message).
pub fn non_negative(b: &[u8], text: &'static str) -> Result<usize, CmdError> {
    match shoal_wire::num::parse_i64(b) {
        Some(n) if n >= 0 => Ok(n as usize),
        _ => Err(CmdError::Text(text)),
    }
}

/// A Redis integer argument.
pub fn int_arg(b: &[u8]) -> Result<i64, CmdError> {
    shoal_wire::num::parse_i64(b).ok_or(NOT_INTEGER)
}

/// A count argument that must not be negative (SPOP, LPOP, ...); one text for both failures,
/// as Redis's `getPositiveLongFromObjectOrReply` with a message.
pub fn positive_count(b: &[u8]) -> Result<usize, CmdError> {
    non_negative(b, "ERR value is out of range, must be positive")
}

/// Redis's range rules (LRANGE): negative from the end, clamped; `None` when empty.
pub fn range(len: usize, start: i64, end: i64) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 { (len + start).max(0) } else { start };
    let end = if end < 0 { len + end } else { end };
    if start > end || start >= len {
        return None;
    }
    Some((start as usize, end.min(len - 1) as usize))
}
