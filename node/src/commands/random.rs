//! Redis's rules for random members (HRANDFIELD, SRANDMEMBER, ZRANDMEMBER), written once: how
//! the count and the WITHVALUES/WITHSCORES word are checked, and which positions a count picks.

use bytes::Bytes;

use super::args::int_arg;
use super::error::{CmdError, SYNTAX};

/// A parsed `key count [WITH...]`.
#[derive(Debug, Clone, Copy)]
pub struct Count {
    pub n: i64,
    /// The WITHVALUES / WITHSCORES word was given.
    pub with: bool,
}

/// Parses `args[2]` (the count) and, where the command has one (`with_word`), `args[3]`, with
/// Redis's texts and in its order.
pub fn parse(args: &[Bytes], with_word: Option<&[u8]>) -> Result<Count, CmdError> {
    let n = int_arg(&args[2])?;
    if n == i64::MIN {
        return Err(CmdError::Text(
            "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
        ));
    }
    let with = match (args.get(3), with_word) {
        (None, _) => false,
        (Some(a), Some(word)) if args.len() == 4 && a.eq_ignore_ascii_case(word) => {
            // The reply holds two elements per pick: Redis bounds the count to half the range.
            if !(-i64::MAX / 2..=i64::MAX / 2).contains(&n) {
                return Err(CmdError::Text("ERR value is out of range"));
            }
            true
        }
        (Some(_), _) => return Err(SYNTAX),
    };
    Ok(Count { n, with })
}

/// The order Redis answers a count that covers the whole value in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whole {
    /// The value's own order (HRANDFIELD, SRANDMEMBER).
    Forward,
    /// Highest first (ZRANDMEMBER).
    Reverse,
}

/// Which positions (of `len` elements, in the value's iteration order) a count picks: a negative
/// count (or 1) picks with repeats; a count covering the value picks all of it (`whole`); any
/// other picks distinct positions at random, shuffled, or in iteration order if `sorted`.
/// Refuses (on a value that exists) a count of repeats past `MAX_RANDOM_REPEATS`.
pub fn picks(n: i64, len: usize, whole: Whole, sorted: bool) -> Result<Vec<usize>, CmdError> {
    super::args::check_repeats(n)?;
    if len == 0 || n == 0 {
        return Ok(Vec::new());
    }
    if n < 0 || n == 1 {
        return Ok((0..n.unsigned_abs()).map(|_| fastrand::usize(..len)).collect());
    }
    if n as usize >= len {
        return Ok(match whole {
            Whole::Forward => (0..len).collect(),
            Whole::Reverse => (0..len).rev().collect(),
        });
    }
    let mut all: Vec<usize> = (0..len).collect();
    fastrand::shuffle(&mut all);
    all.truncate(n as usize);
    if sorted {
        all.sort_unstable();
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_pick_like_redis() {
        assert_eq!(picks(-3, 1, Whole::Forward, false).unwrap(), vec![0, 0, 0], "repeats");
        assert_eq!(picks(10, 3, Whole::Reverse, false).unwrap(), vec![2, 1, 0]);
        assert_eq!(picks(10, 3, Whole::Forward, false).unwrap(), vec![0, 1, 2]);
        let some = picks(3, 10, Whole::Forward, true).unwrap();
        assert!(some.len() == 3 && some.windows(2).all(|w| w[0] < w[1]), "{some:?}");
        assert!(picks(-20_000_000, 5, Whole::Forward, false).is_err());
        assert!(picks(0, 5, Whole::Forward, false).unwrap().is_empty());
    }
}
