//! HSCAN (and the other per-key SCANs): Redis's cursor and option rules over a value's elements.
//!
//! A compact value answers everything at once with cursor 0, as Redis does for listpacks and
//! intsets. A table-encoded hash or set answers about COUNT elements a call, as Redis's dict
//! does: its items sit in a vector (`object/table.rs`) and the cursor is a position in it, walked
//! downwards (see [`table_page`] for why that keeps Redis's promise: an element present for the
//! whole scan is returned at least once). A sorted set's skiplist answers pages of at least
//! [`MIN_PAGE`] elements in its order, the cursor being how many it has walked (an insertion
//! before the cursor between calls may repeat or skip one: docs/compatibility.md).

use std::borrow::Cow;

use bytes::Bytes;
use shoal_wire::proto::Frame;

use super::error::{CmdError, CmdResult, SYNTAX};
use super::frame::F;
use crate::store::Store;
use crate::store::glob::glob_match;
use crate::store::object::{Object, ValueType};

const MIN_PAGE: usize = 1024;

/// The element groups a value offers to a scan (field and value for a hash, member for a set):
/// `take` of them from position `skip` on (all of a compact value), the value's length and
/// whether it is compact. Only the page is materialized, so a full scan of a big value costs
/// one pass per page over the positions before it, with no copies.
fn groups(o: &Object, skip: usize, take: usize) -> (Vec<Vec<Cow<'_, [u8]>>>, usize, bool) {
    let compact = matches!(o.encoding(), "listpack" | "intset");
    let (skip, take) = if compact { (0, usize::MAX) } else { (skip, take) };
    let page = match o {
        Object::Hash(h) => {
            h.iter().skip(skip).take(take).map(|(f, v)| vec![Cow::Borrowed(f), Cow::Borrowed(v)]).collect()
        }
        Object::Set(s) => s.iter().skip(skip).take(take).map(|m| vec![m]).collect(),
        Object::List(l) => l.iter().skip(skip).take(take).map(|v| vec![Cow::Borrowed(v)]).collect(),
        Object::ZSet(z) => z
            .iter()
            .skip(skip)
            .take(take)
            .map(|(m, s)| vec![Cow::Borrowed(m), Cow::Owned(super::double::d2string(s).into_bytes())])
            .collect(),
        // No scan command reads a stream (each checks its key's type first).
        Object::Stream(_) => Vec::new(),
    };
    (page, o.len(), compact)
}

/// One page of a table-encoded hash's or set's element groups (`at(i)`: the groups at position
/// `i`, of `len`) from `cursor` on, and the cursor that follows (0: done). The positions are
/// walked downwards: cursor `c` leaves the positions below `c` to visit (0 at the start: all of
/// them). A removal moves the table's last item into the hole it leaves: the last item has been
/// visited already (it sits above `c`) and lands either above `c` (visited) or below it (visited
/// again: Redis allows repeats); an item added lands at the end, above `c`. So an element present
/// for the whole scan is never skipped, however the table changes between calls.
fn table_page<'a>(
    len: usize,
    cursor: u64,
    count: usize,
    at: impl Fn(usize) -> Option<Vec<Cow<'a, [u8]>>>,
) -> (Vec<Vec<Cow<'a, [u8]>>>, u64) {
    let from = if cursor == 0 { len } else { usize::try_from(cursor).unwrap_or(usize::MAX).min(len) };
    let to = from.saturating_sub(count);
    ((to..from).rev().filter_map(at).collect(), to as u64)
}

/// A cursor as Redis reads it (`strtoul`): optional sign, digits, nothing else; a negative
/// number wraps around.
pub fn parse_cursor(b: &[u8]) -> Result<u64, CmdError> {
    let err = CmdError::Text("ERR invalid cursor");
    let (negative, digits) = match b.first() {
        Some(b'-') => (true, &b[1..]),
        Some(b'+') => (false, &b[1..]),
        _ => (false, b),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(err);
    }
    let n: u64 = std::str::from_utf8(digits).ok().and_then(|s| s.parse().ok()).ok_or(err)?;
    Ok(if negative { n.wrapping_neg() } else { n })
}

struct Options<'a> {
    count: usize,
    pattern: Option<&'a [u8]>,
}

fn options(args: &[Bytes]) -> Result<Options<'_>, CmdError> {
    let mut o = Options { count: 10, pattern: None };
    let mut i = 0;
    while i < args.len() {
        let more = args.len() - i >= 2;
        if more && args[i].eq_ignore_ascii_case(b"count") {
            let n = super::args::int_arg(&args[i + 1])?;
            if n < 1 {
                return Err(SYNTAX);
            }
            o.count = n as usize;
        } else if more && args[i].eq_ignore_ascii_case(b"match") {
            o.pattern = Some(&args[i + 1][..]).filter(|p| *p != b"*");
        } else {
            return Err(SYNTAX);
        }
        i += 2;
    }
    Ok(o)
}

fn empty_scan() -> Frame {
    F::array(vec![F::bulk_from(b"0"), F::array(Vec::new())])
}

/// `XSCAN key cursor [MATCH p] [COUNT n]` over the value of type `t` at `args[1]`.
pub fn scan_value(store: &Store, args: &[Bytes], t: ValueType) -> CmdResult {
    let cursor = parse_cursor(&args[2])?;
    store.read_object(&args[1], t, |o| {
        let Some(o) = o else { return Ok(empty_scan()) };
        let opts = options(&args[3..])?;
        let compact = matches!(o.encoding(), "listpack" | "intset");
        let (page, next) = match o {
            Object::Hash(h) if !compact => table_page(h.len(), cursor, opts.count, |i| {
                h.table_pair(i).map(|(f, v)| vec![Cow::Borrowed(f), Cow::Borrowed(v)])
            }),
            Object::Set(s) if !compact => {
                table_page(s.len(), cursor, opts.count, |i| s.table_member(i).map(|m| vec![Cow::Borrowed(m)]))
            }
            _ => {
                let cursor = usize::try_from(cursor).unwrap_or(usize::MAX);
                let (page, len, compact) = groups(o, cursor, opts.count.max(MIN_PAGE));
                let end = cursor.saturating_add(page.len());
                (page, if compact || end >= len { 0 } else { end as u64 })
            }
        };
        let mut out = Vec::new();
        for g in &page {
            if opts.pattern.is_none_or(|p| glob_match(p, &g[0])) {
                out.extend(g.iter().map(|e| F::bulk_from(e)));
            }
        }
        Ok(F::array(vec![F::bulk(next.to_string()), F::array(out)]))
    })?
}

pub fn hscan(store: &Store, args: &[Bytes]) -> CmdResult {
    scan_value(store, args, ValueType::Hash)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;

    use bytes::Bytes;
    use shoal_wire::proto::frame::Kind;

    use crate::store::{ManualClock, Store, StoreConfig};

    fn call(store: &Store, args: &[&str]) -> Option<Kind> {
        let args: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a.as_bytes())).collect();
        super::super::dispatch::frame_of(store, &args)
    }

    /// One SCAN-family call: the next cursor and the elements (fields only for HSCAN).
    fn page(store: &Store, cmd: &str, cursor: &str, count: usize) -> (String, Vec<Vec<u8>>) {
        let Some(Kind::Array(reply)) = call(store, &[cmd, "k", cursor, "COUNT", &count.to_string()]) else {
            panic!("{cmd} answers an array")
        };
        let bulk = |k: &Option<Kind>| match k {
            Some(Kind::Bulk(b)) => b.to_vec(),
            other => panic!("a bulk string, not {other:?}"),
        };
        let next = String::from_utf8(bulk(&reply.items[0].kind)).unwrap();
        let Some(Kind::Array(elements)) = &reply.items[1].kind else { panic!("an array of elements") };
        let step = if cmd == "hscan" { 2 } else { 1 };
        (next, elements.items.iter().step_by(step).map(|e| bulk(&e.kind)).collect())
    }

    /// HSCAN and SSCAN over a table answer about COUNT elements a call (as Redis's dict does),
    /// and never skip an element present for the whole scan however the value changes between
    /// calls (members removed and added at random, the table shrinking and growing).
    #[test]
    fn table_scans_page_by_count_and_skip_nothing_that_stays() {
        for (cmd, add, del) in [("sscan", "sadd", "srem"), ("hscan", "hset", "hdel")] {
            let store = Store::new(StoreConfig::default(), Arc::new(ManualClock::new(1_000)));
            let element = |i: usize| format!("member:{i:05}");
            for i in 0..3000 {
                match add {
                    "sadd" => call(&store, &[add, "k", &element(i)]),
                    _ => call(&store, &[add, "k", &element(i), "v"]),
                };
            }
            let (next, first) = page(&store, cmd, "0", 10);
            assert_eq!(first.len(), 10, "{cmd}: one page of COUNT elements");
            assert_ne!(next, "0");
            // Churn between pages: the first 1,000 stay; of the rest, some go and new ones come.
            let mut rng = fastrand::Rng::with_seed(7);
            let (mut seen, mut cursor, mut calls) = (HashSet::new(), "0".to_string(), 0);
            seen.extend(first);
            loop {
                let (next, got) = page(&store, cmd, &cursor, 1 + rng.usize(..40));
                seen.extend(got);
                calls += 1;
                if next == "0" {
                    break;
                }
                cursor = next;
                for _ in 0..5 {
                    call(&store, &[del, "k", &element(1000 + rng.usize(..2000))]);
                    let new = element(3000 + rng.usize(..5000));
                    match add {
                        "sadd" => call(&store, &[add, "k", &new]),
                        _ => call(&store, &[add, "k", &new, "v"]),
                    };
                }
                assert!(calls < 10_000, "{cmd}: the scan ends");
            }
            for i in 0..1000 {
                assert!(seen.contains(element(i).as_bytes()), "{cmd} skipped {} that stayed", element(i));
            }
        }
    }
}
