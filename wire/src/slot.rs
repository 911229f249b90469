//! Key -> slot mapping, bit-for-bit the one Redis Cluster uses (`CLUSTER KEYSLOT`).
//!
//! slot = CRC16-XMODEM(hashtag(key)) mod 16384, where hashtag(key) is the part between the first
//! `{` and the next `}` when that part is non-empty, else the whole key. The function is fixed by
//! this code (not a std/ahash hasher whose output may change between builds), so routers of any
//! version agree on where a key lives.
//!
//! One addition, off by default: **colocation rules** (`--colocate 'rq:*'` on every router and
//! node, set once at start with [`set_colocation`]). A key that starts with a rule's prefix hashes
//! on that prefix alone, so an application's keys share one slot, and so one node, without
//! `{hashtags}` in their names: its transactions and scripts over several of them run where they
//! all are, as on one Redis. Every process of a cluster must have the same rules (a router or node
//! with others sends or finds keys in other slots: MOVED, then an error, never a silent misplace),
//! for as long as the data lives (snapshots and slot moves follow slots).

/// Number of hash slots, as in Redis Cluster.
pub const SLOT_COUNT: usize = 16384;

/// CRC16-XMODEM lookup table (polynomial 0x1021, initial value 0), computed at compile time.
const CRC16_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// Slicing-by-4 tables: `TABLES[k][b]` is the CRC register after byte `b` (from a zero register)
/// and then `k` zero bytes; `TABLES[0]` is [`CRC16_TABLE`].
const TABLES: [[u16; 256]; 4] = {
    let mut t = [[0u16; 256]; 4];
    t[0] = CRC16_TABLE;
    let mut k = 1;
    while k < 4 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev << 8) ^ CRC16_TABLE[(prev >> 8) as usize];
            i += 1;
        }
        k += 1;
    }
    t
};

/// One byte into the CRC register.
fn step(crc: u16, b: u8) -> u16 {
    (crc << 8) ^ CRC16_TABLE[(((crc >> 8) as u8) ^ b) as usize]
}

/// CRC16-XMODEM of `data`, four bytes a step. The CRC is linear: the register and the first two
/// bytes XORed, then the four bytes each looked up at their distance from the end, gives the
/// register after them; the four lookups are independent, where a byte at a time is a chain of
/// dependent ones (each request's key slot is computed on its path a few times: router, node).
pub fn crc16(data: &[u8]) -> u16 {
    let mut crc = 0u16;
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        let x = crc ^ u16::from_be_bytes([w[0], w[1]]);
        crc = TABLES[3][usize::from(x >> 8)]
            ^ TABLES[2][usize::from(x & 0xff)]
            ^ TABLES[1][usize::from(w[2])]
            ^ TABLES[0][usize::from(w[3])];
    }
    words.remainder().iter().fold(crc, |crc, &b| step(crc, b))
}

/// The bytes of `key` that are hashed: the first non-empty `{...}` section, or the whole key.
pub fn hashtag(key: &[u8]) -> &[u8] {
    if let Some(open) = find_byte(key, b'{')
        && let Some(len) = find_byte(&key[open + 1..], b'}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// Where `b` first occurs in `data`, eight bytes a step: every key is searched for `{` each time
/// its slot is computed, and a byte at a time that cost as much as the CRC of a 16-byte key.
/// (`memchr`, in the dependency tree through other crates, took twice as long as this on keys
/// that short: its vector search pays off on longer inputs.)
fn find_byte(data: &[u8], b: u8) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let pattern = ONES * u64::from(b);
    let mut words = data.chunks_exact(8);
    let mut at = 0;
    for w in &mut words {
        let v = u64::from_le_bytes(w.try_into().expect("chunks of 8")) ^ pattern;
        // A high bit set in each byte of `v` that is zero (and possibly in bytes after one, by
        // the borrow): the lowest set bit is the first match.
        let zero = v.wrapping_sub(ONES) & !v & HIGHS;
        if zero != 0 {
            return Some(at + (zero.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    words.remainder().iter().position(|&x| x == b).map(|i| at + i)
}

/// The cluster slot of `key`, in `0..16384` (a colocation rule's prefix, if one matches).
#[inline]
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hashed_part(key)) & (SLOT_COUNT as u16 - 1)
}

/// The bytes of `key` its slot is computed from: a matching colocation rule's prefix, else
/// [`hashtag`]. Without rules (the default) this costs one relaxed load.
#[inline]
pub fn hashed_part(key: &[u8]) -> &[u8] {
    if COLOCATING.load(std::sync::atomic::Ordering::Relaxed)
        && let Some(prefix) = COLOCATION.get().and_then(|rules| rules.iter().find(|p| key.starts_with(p)))
    {
        return prefix;
    }
    hashtag(key)
}

static COLOCATION: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
static COLOCATING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Why colocation rules were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ColocationError {
    #[error(
        "colocation rule {0:?} must be a key prefix followed by one '*' (e.g. 'rq:*'), with no other glob characters"
    )]
    BadPattern(String),
    #[error("colocation rules are set once, at start; these differ from the rules in force")]
    AlreadySet,
}

/// Parses colocation patterns (`PREFIX*`) into their prefixes.
pub fn parse_colocation(patterns: &[String]) -> Result<Vec<Vec<u8>>, ColocationError> {
    patterns
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| match p.strip_suffix('*') {
            Some(prefix) if !prefix.is_empty() && !prefix.contains(['*', '?', '[', ']', '\\']) => {
                Ok(prefix.as_bytes().to_vec())
            }
            _ => Err(ColocationError::BadPattern(p.clone())),
        })
        .collect()
}

/// Puts colocation rules in force for this process (first match wins). Once: a second call with
/// the same rules is accepted (embedded nodes share their router's process), other rules are not.
pub fn set_colocation(patterns: &[String]) -> Result<(), ColocationError> {
    let rules = parse_colocation(patterns)?;
    if rules.is_empty() && COLOCATION.get().is_none() {
        return Ok(());
    }
    let set = COLOCATION.get_or_init(|| rules.clone());
    if *set != rules {
        return Err(ColocationError::AlreadySet);
    }
    COLOCATING.store(!set.is_empty(), std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// The colocation rules in force, as given (`rq:*`), for CONFIG GET and INFO.
pub fn colocation_patterns() -> Vec<String> {
    COLOCATION.get().map_or_else(Vec::new, |rules| {
        rules.iter().map(|p| format!("{}*", String::from_utf8_lossy(p))).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn four_bytes_a_step_agrees_with_a_byte_at_a_time(
            data in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            prop_assert_eq!(crc16(&data), data.iter().fold(0u16, |crc, &b| step(crc, b)));
        }

        /// Keys over an alphabet with the braces and the word compare's edge cases (0x00, 0x7f,
        /// 0x80, 0xff: borrows and high bits).
        #[test]
        fn eight_bytes_a_step_finds_what_a_byte_at_a_time_finds(
            key in proptest::collection::vec(
                proptest::sample::select(b"{}a\x00\x7f\x80\xff".to_vec()),
                0..80,
            ),
            b in proptest::sample::select(b"{}\x00\x80\xff".to_vec()),
        ) {
            prop_assert_eq!(find_byte(&key, b), key.iter().position(|&x| x == b));
        }
    }

    #[test]
    fn crc16_reference_vector() {
        // The check value of CRC-16/XMODEM, and the one from the Redis Cluster spec.
        assert_eq!(crc16(b"123456789"), 0x31C3);
    }

    #[test]
    fn matches_redis_cluster_keyslot() {
        // Answers of `CLUSTER KEYSLOT` on Redis 7 (and the examples in the Redis Cluster spec).
        let cases: &[(&[u8], u16)] = &[
            (b"foo", 12182),
            (b"bar", 5061),
            (b"hello", 866),
            (b"key", 12539),
            (b"somekey", 11058),
            (b"user1000", 3443),
            (b"{user1000}.following", 3443),
            (b"{user1000}.followers", 3443),
            (b"foo{}{bar}", 8363),
            (b"foo{{bar}}zap", 4015),
            (b"foo{bar}{zap}", 5061),
            (b"", 0),
        ];
        for (key, slot) in cases {
            assert_eq!(key_slot(key), *slot, "key {:?}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn colocation_patterns_are_prefixes() {
        let p = |v: &[&str]| parse_colocation(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(p(&["rq:*", "bull:*"]), Ok(vec![b"rq:".to_vec(), b"bull:".to_vec()]));
        assert_eq!(p(&[""]), Ok(vec![]));
        for bad in ["rq:", "*", "a*b*", "a?*", "[a]*"] {
            assert!(matches!(p(&[bad]), Err(ColocationError::BadPattern(_))), "{bad}");
        }
        // Not set in this test process: the hashtag rule alone.
        assert_eq!(hashed_part(b"rq:job:{x}"), b"x");
    }

    #[test]
    fn hashtag_rules() {
        assert_eq!(hashtag(b"{user1}.a"), b"user1");
        assert_eq!(hashtag(b"a{}b"), b"a{}b", "empty tag hashes the whole key");
        assert_eq!(hashtag(b"a{b"), b"a{b", "unclosed tag hashes the whole key");
        assert_eq!(hashtag(b"}a{b}"), b"b");
        assert_eq!(hashtag(b"{a}{b}"), b"a", "only the first tag counts");
    }
}
