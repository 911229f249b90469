//! Glob matching for KEYS and SCAN MATCH with exactly Redis's rules (`stringmatchlen`):
//! `*`, `?`, `[abc]`, `[^abc]`, `[a-z]` (reversed ranges allowed), `\x` escapes, and the same
//! treatment of malformed patterns (an unclosed `[` matches up to the end of the pattern).
//!
//! Two guards keep hostile patterns cheap, as in Redis 7: a nesting limit on `*` recursion, and
//! "skip longer matches": once a `*` has failed to match at every later position, no outer `*`
//! can succeed by consuming more, so the whole match fails at once instead of backtracking.

const MAX_NESTING: usize = 1000;

/// Does `string` match the glob `pattern`?
pub fn glob_match(pattern: &[u8], string: &[u8]) -> bool {
    let mut skip_longer = false;
    matches(pattern, string, &mut skip_longer, 0)
}

fn matches(mut p: &[u8], mut s: &[u8], skip_longer: &mut bool, nesting: usize) -> bool {
    // Byte at `i` of the pattern, or 0 past its end (Redis reads the C string's terminator).
    fn at(p: &[u8], i: usize) -> u8 {
        p.get(i).copied().unwrap_or(0)
    }
    if nesting > MAX_NESTING {
        return false;
    }
    while !p.is_empty() && !s.is_empty() {
        match p[0] {
            b'*' => {
                while p.len() > 1 && p[1] == b'*' {
                    p = &p[1..];
                }
                if p.len() == 1 {
                    return true;
                }
                while !s.is_empty() {
                    if matches(&p[1..], s, skip_longer, nesting + 1) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                    s = &s[1..];
                }
                *skip_longer = true;
                return false;
            }
            b'?' => s = &s[1..],
            b'[' => {
                p = &p[1..];
                let negate = at(p, 0) == b'^';
                if negate {
                    p = &p[1..];
                }
                let mut matched = false;
                loop {
                    if at(p, 0) == b'\\' && p.len() >= 2 {
                        p = &p[1..];
                        if p[0] == s[0] {
                            matched = true;
                        }
                    } else if at(p, 0) == b']' {
                        break;
                    } else if p.is_empty() {
                        // Unclosed class: stop at the end of the pattern. The step back is undone
                        // by the advance below, as in Redis.
                        break;
                    } else if p.len() >= 3 && p[1] == b'-' {
                        let (mut lo, mut hi) = (p[0], p[2]);
                        if lo > hi {
                            std::mem::swap(&mut lo, &mut hi);
                        }
                        p = &p[2..];
                        if s[0] >= lo && s[0] <= hi {
                            matched = true;
                        }
                    } else if p[0] == s[0] {
                        matched = true;
                    }
                    if p.is_empty() {
                        break;
                    }
                    p = &p[1..];
                }
                if negate {
                    matched = !matched;
                }
                if !matched {
                    return false;
                }
                s = &s[1..];
            }
            b'\\' if p.len() >= 2 => {
                p = &p[1..];
                if p[0] != s[0] {
                    return false;
                }
                s = &s[1..];
            }
            c => {
                if c != s[0] {
                    return false;
                }
                s = &s[1..];
            }
        }
        if !p.is_empty() {
            p = &p[1..];
        }
        if s.is_empty() {
            while !p.is_empty() && p[0] == b'*' {
                p = &p[1..];
            }
            break;
        }
    }
    p.is_empty() && s.is_empty()
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    fn m(p: &str, s: &str) -> bool {
        glob_match(p.as_bytes(), s.as_bytes())
    }

    #[test]
    fn basics() {
        assert!(m("*", "anything"));
        // As in Redis, the glob itself never matches an empty key; KEYS * and SCAN MATCH *
        // special-case the lone `*` to mean "everything".
        assert!(!m("*", ""));
        assert!(!m("**", ""));
        assert!(m("", ""));
        assert!(!m("", "a"));
        assert!(m("h?llo", "hello"));
        assert!(!m("h?llo", "hllo"));
        assert!(m("h*llo", "hllo"));
        assert!(m("h*llo", "heeeello"));
        assert!(m("h[ae]llo", "hallo"));
        assert!(!m("h[ae]llo", "hillo"));
        assert!(m("h[^e]llo", "hallo"));
        assert!(!m("h[^e]llo", "hello"));
        assert!(m("h[a-b]llo", "hbllo"));
        assert!(m("h[b-a]llo", "hbllo"), "reversed ranges work");
        assert!(m("user:*", "user:1000"));
        assert!(!m("user:*", "users:1"));
        assert!(m("a\\*b", "a*b"));
        assert!(!m("a\\*b", "axb"));
        assert!(m("*a*b*", "xxaxxbxx"));
        assert!(m("k*", "k"));
    }

    #[test]
    fn malformed_patterns_like_redis() {
        // An unclosed class matches the listed characters, then the pattern ends.
        assert!(m("a[bc", "ab"));
        assert!(!m("a[bc", "abc"));
        assert!(!m("a[", "a"), "a class never matches the end of the string");
        // A trailing backslash matches a literal backslash.
        assert!(m("a\\", "a\\"));
        assert!(m("[\\]]", "]"));
        assert!(m("[a-]", "a"));
    }

    #[test]
    fn hostile_pattern_is_fast() {
        let pattern = "a*".repeat(30) + "b";
        let subject = "a".repeat(60);
        let t = std::time::Instant::now();
        assert!(!m(&pattern, &subject));
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
    }
}
