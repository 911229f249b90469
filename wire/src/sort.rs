//! SORT's keys, as Redis's `sortCommandGeneric` and `lookupKeyByPattern` find them: the STORE
//! destination, and the keys BY and GET patterns name for each element (`*` replaced by the
//! element, up to `->field`). The router gathers those keys on one node before a SORT with
//! patterns runs there; the node looks them up with the same rule.

use bytes::Bytes;

/// The options as SORT reads them; `None` for a syntax error (the node answers it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    /// Argument index of the STORE destination.
    pub store: Option<usize>,
    /// The BY pattern, when it sorts (it has a `*`); `None` for none or `nosort`-like.
    pub by: Option<Bytes>,
    /// The GET patterns, `#` included.
    pub gets: Vec<Bytes>,
}

impl Layout {
    /// Whether the patterns read keys other than the sorted one.
    pub fn reads_other_keys(&self) -> bool {
        self.by.is_some() || self.gets.iter().any(|g| &g[..] != b"#")
    }
}

/// Reads SORT's (`readonly`: SORT_RO's) options.
pub fn layout(args: &[Bytes], readonly: bool) -> Option<Layout> {
    let mut l = Layout::default();
    let mut j = 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        let w = args[j].to_ascii_lowercase();
        match &w[..] {
            b"asc" | b"desc" | b"alpha" => {}
            b"limit" if left >= 2 => j += 2,
            b"store" if !readonly && left >= 1 => {
                l.store = Some(j + 1);
                j += 1;
            }
            b"by" if left >= 1 => {
                l.by = args[j + 1].contains(&b'*').then(|| args[j + 1].clone());
                j += 1;
            }
            b"get" if left >= 1 => {
                l.gets.push(args[j + 1].clone());
                j += 1;
            }
            _ => return None,
        }
        j += 1;
    }
    Some(l)
}

/// The key a pattern names for `subst`, and the hash field after `->` if any (`None` for `#`
/// and for patterns without `*`). Redis reads a pattern up to its first NUL.
pub fn pattern_key(pattern: &[u8], subst: &[u8]) -> Option<(Bytes, Option<Bytes>)> {
    let pattern = &pattern[..pattern.iter().position(|&b| b == 0).unwrap_or(pattern.len())];
    let star = pattern.iter().position(|&b| b == b'*')?;
    let rest = &pattern[star + 1..];
    let (post, field) = match rest.windows(2).position(|w| w == b"->") {
        Some(i) if i + 2 < rest.len() => (&rest[..i], Some(Bytes::copy_from_slice(&rest[i + 2..]))),
        _ => (rest, None),
    };
    Some((Bytes::from([&pattern[..star], subst, post].concat()), field))
}

/// Every key the patterns of `l` name for `elements`, sorted, without repeats.
pub fn pattern_keys(l: &Layout, elements: &[Bytes]) -> Vec<Bytes> {
    let mut keys: Vec<Bytes> = l
        .gets
        .iter()
        .chain(l.by.as_ref())
        .flat_map(|p| elements.iter().filter_map(move |e| pattern_key(p, e).map(|(k, _)| k)))
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<Bytes> {
        s.split(' ').map(|a| Bytes::copy_from_slice(a.as_bytes())).collect()
    }

    #[test]
    fn patterns_name_keys_and_fields_as_redis() {
        assert_eq!(pattern_key(b"w_*", b"3"), Some((Bytes::from("w_3"), None)));
        assert_eq!(pattern_key(b"h_*->f", b"a"), Some((Bytes::from("h_a"), Some(Bytes::from("f")))));
        assert_eq!(pattern_key(b"h_*->", b"a"), Some((Bytes::from("h_a->"), None)));
        assert_eq!(pattern_key(b"nosort", b"a"), None);
        assert_eq!(pattern_key(b"*-*", b"a"), Some((Bytes::from("a-*"), None)));
    }

    #[test]
    fn layouts_find_the_destination_and_the_patterns() {
        let l = layout(&args("SORT k BY w_* GET # GET h_*->f LIMIT 0 1 STORE dst"), false).unwrap();
        assert_eq!(l.store, Some(12), "the destination after STORE");
        assert!(l.reads_other_keys());
        assert_eq!(pattern_keys(&l, &[Bytes::from("1"), Bytes::from("2")]), args("h_1 h_2 w_1 w_2"));
        assert!(!layout(&args("SORT k BY nosort GET #"), false).unwrap().reads_other_keys());
        assert_eq!(layout(&args("SORT_RO k STORE dst"), true), None);
        assert_eq!(layout(&args("SORT k LIMIT 1"), false), None);
    }
}
