//! HSCAN (and the other per-key SCANs): Redis's cursor and option rules over a value's elements.
//!
//! A compact value answers everything at once with cursor 0, as Redis does for listpacks and
//! intsets. A table answers pages of at least [`MIN_PAGE`] elements in its iteration order, the
//! cursor being how many it has walked (docs/compatibility.md: a table resized between calls may
//! repeat or skip elements, which Redis's reverse-binary cursor avoids).

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
    let cursor = parse_cursor(&args[2])? as usize;
    store.read_object(&args[1], t, |o| {
        let Some(o) = o else { return Ok(empty_scan()) };
        let opts = options(&args[3..])?;
        let (page, len, compact) = groups(o, cursor, opts.count.max(MIN_PAGE));
        let end = cursor.saturating_add(page.len());
        let next = if compact || end >= len { 0 } else { end };
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
