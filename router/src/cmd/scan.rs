//! SCAN across every node.
//!
//! The client's cursor holds the node position in its low 10 bits and that node's own cursor
//! above them. A node reports 0 when it is done; the router then moves to the next node (in the
//! same call while fewer than COUNT keys were found), and returns 0 after the last one. Between topology changes the Redis guarantee holds: a key present
//! for the whole scan is returned at least once.

use bytes::Bytes;
use shoal_wire::proto::{self, op::Kind, reply};

use super::spec::*;
use super::{Args, Ctx, Pending, int_arg, op, plain, syntax_error};
use crate::resp::Reply;

pub const SCAN: CommandSpec = CommandSpec { decl: &redis::SCAN, run: scan, ..CommandSpec::DEFAULT };

const NODE_BITS: u32 = 10;
const DEFAULT_COUNT: u64 = 10;

/// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`
pub fn scan(args: &Args, ctx: &mut Ctx) -> Pending {
    let Some(cursor) = parse_cursor(&args[1]) else {
        return Reply::error("ERR invalid cursor").into();
    };
    let mut pattern = None;
    let mut count = DEFAULT_COUNT;
    let mut type_filter = String::new();
    let mut i = 2;
    while i < args.len() {
        let has_value = args.len() - i >= 2;
        let opt = &args[i];
        if opt.eq_ignore_ascii_case(b"count") && has_value {
            match int_arg(&args[i + 1]) {
                Ok(n) if n < 1 => return syntax_error().into(),
                Ok(n) => count = n as u64,
                Err(e) => return e.into(),
            }
        } else if opt.eq_ignore_ascii_case(b"match") && has_value {
            pattern = Some(args[i + 1].clone());
        } else if opt.eq_ignore_ascii_case(b"type") && has_value {
            type_filter = String::from_utf8_lossy(&args[i + 1]).into_owned();
        } else {
            return syntax_error().into();
        }
        i += 2;
    }
    let nodes = ctx.routing.len() as u64;
    let first = (cursor & ((1 << NODE_BITS) - 1)) % nodes;
    let (backend, routing, deadline) = (ctx.state.backend.clone(), ctx.routing.clone(), ctx.deadline);
    Pending::later(async move {
        // A node that is done before `count` keys were found hands over to the next one in the
        // same call, as one Redis's SCAN goes on through its table: a small keyspace comes back
        // whole with cursor 0, as from Redis (redis-py's tests count on it).
        let (mut pos, mut local, mut keys) = (first, cursor >> NODE_BITS, Vec::new());
        let next = loop {
            let o = op(Kind::Scan(proto::Scan {
                cursor: local,
                count,
                has_pattern: pattern.is_some(),
                pattern: pattern.clone().unwrap_or_default(),
                type_filter: type_filter.clone(),
            }));
            match backend.at(&routing, pos as usize, o, deadline).wait().await {
                Ok(proto::Reply { kind: Some(reply::Kind::Scan(page)), .. }) => {
                    keys.extend(page.keys);
                    if page.cursor != 0 {
                        break (page.cursor << NODE_BITS) | pos;
                    }
                    if pos + 1 >= nodes {
                        break 0;
                    }
                    (pos, local) = (pos + 1, 0);
                    if keys.len() as u64 >= count {
                        break pos;
                    }
                }
                Ok(other) => return plain(other),
                Err(e) => return e.into(),
            }
        };
        Reply::Array(vec![
            Reply::bulk(next.to_string()),
            Reply::Array(keys.into_iter().map(Reply::Bulk).collect()),
        ])
    })
}

/// Redis's `string2ull`: a strict integer first, else what `strtoull` accepts (leading space, a
/// sign, leading zeros; a minus wraps around).
fn parse_cursor(b: &Bytes) -> Option<u64> {
    if let Some(n) = shoal_wire::num::parse_i64(b) {
        return (n >= 0).then_some(n as u64);
    }
    let s = std::str::from_utf8(b).ok()?.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let v: u64 = digits.parse().ok()?;
    Some(if negative { v.wrapping_neg() } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_like_redis() {
        let p = |s: &str| parse_cursor(&Bytes::from(s.to_string()));
        assert_eq!(p("0"), Some(0));
        assert_eq!(p("007"), Some(7));
        assert_eq!(p("+5"), Some(5));
        assert_eq!(p(" 5"), Some(5));
        assert_eq!(p("-1"), None, "a strict negative integer is refused");
        assert_eq!(p("-01"), Some(u64::MAX), "strtoull wraps a minus");
        assert_eq!(p("18446744073709551615"), Some(u64::MAX));
        assert_eq!(p("18446744073709551616"), None);
        assert_eq!(p("abc"), None);
        assert_eq!(p(""), None);
    }
}
