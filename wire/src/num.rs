//! Redis's number syntaxes, shared by the router (command arguments) and the node (stored values) so
//! both accept and reject exactly the same strings.

/// Redis's `string2ll`: a strict base-10 `i64`. No sign but `-`, no leading zeros, no spaces, at
/// most 20 bytes. `"-0"` and `"+1"` are rejected, as in Redis.
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() >= 21 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    let (&first, rest) = digits.split_first()?;
    if !(b'1'..=b'9').contains(&first) {
        return None;
    }
    let mut v = u64::from(first - b'0');
    for &d in rest {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    if negative {
        if v > i64::MAX as u64 + 1 {
            return None;
        }
        Some((v as i64).wrapping_neg())
    } else {
        i64::try_from(v).ok()
    }
}

/// The hexadecimal numbers C's `strtod`/`strtold` take beside decimal ones, which Redis's
/// float arguments therefore take too (a BLPOP timeout of `0x7FFFFFFFFFFFFF`): `0x` or `0X`,
/// hex digits with at most one `.` among them (at least one digit), then optionally a binary
/// exponent, `p` or `P`, a sign and decimal digits (`0x1.8p1` is 3). `s` is the text after any
/// sign; None unless all of it is one such number. Too large a number is infinite, as a decimal
/// one parsed by Rust is.
pub fn parse_hex_float(s: &[u8]) -> Option<f64> {
    let rest = s.strip_prefix(b"0x").or_else(|| s.strip_prefix(b"0X"))?;
    let (mut mantissa, mut exponent, mut digits, mut dot) = (0f64, 0i64, 0usize, false);
    let mut i = 0;
    while let Some(&c) = rest.get(i) {
        match c {
            b'.' if !dot => dot = true,
            c if c.is_ascii_hexdigit() => {
                mantissa = mantissa * 16.0 + f64::from((c as char).to_digit(16)?);
                digits += 1;
                if dot {
                    exponent -= 4;
                }
            }
            _ => break,
        }
        i += 1;
    }
    if digits == 0 {
        return None;
    }
    if let Some(&p) = rest.get(i) {
        if p != b'p' && p != b'P' {
            return None;
        }
        let e = &rest[i + 1..];
        let (negative, e) = match e.first() {
            Some(b'-') => (true, &e[1..]),
            Some(b'+') => (false, &e[1..]),
            _ => (false, e),
        };
        if e.is_empty() || !e.iter().all(u8::is_ascii_digit) {
            return None;
        }
        // Saturating: past a few thousand the result is 0 or infinite either way.
        let n = e.iter().fold(0i64, |n, d| n.saturating_mul(10).saturating_add(i64::from(d - b'0')));
        exponent = exponent.saturating_add(if negative { -n } else { n });
    }
    Some(mantissa * 2f64.powi(exponent.clamp(-4000, 4000) as i32))
}

/// Formats an `i64` the way Redis replies with it.
pub fn format_i64(v: i64) -> Vec<u8> {
    IntText::new(v).as_bytes().to_vec()
}

/// A memory size as Redis 7.0's CONFIG SET reads one (`memtoull`): digits, then an optional unit
/// (b, k, kb, m, mb, g, gb in any case; k/m/g are powers of 1000, kb/mb/gb of 1024). No sign, no
/// spaces; leading zeros are fine and no digits at all is 0, as in Redis. Where Redis would wrap
/// around on overflow this saturates at `u64::MAX`.
pub fn parse_redis_memory(s: &[u8]) -> Option<u64> {
    let split = s.iter().position(|c| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let mul: u64 = match unit.to_ascii_lowercase().as_slice() {
        b"" | b"b" => 1,
        b"k" => 1_000,
        b"kb" => 1 << 10,
        b"m" => 1_000_000,
        b"mb" => 1 << 20,
        b"g" => 1_000_000_000,
        b"gb" => 1 << 30,
        _ => return None,
    };
    // Redis copies the digits into a 128-byte buffer first.
    if digits.len() >= 128 {
        return None;
    }
    let n = digits.iter().fold(0u64, |n, &d| n.saturating_mul(10).saturating_add(u64::from(d - b'0')));
    Some(n.saturating_mul(mul))
}

/// Parses a memory size the way Redis's config does (`memtoll`).
/// An integer's decimal text, formatted on the stack (reply encoders call this per element, where
/// a `to_string()` would cost an allocation each).
#[derive(Debug, Clone, Copy)]
pub struct IntText {
    buf: [u8; 20],
    start: usize,
}

impl IntText {
    pub fn new(n: i64) -> IntText {
        let mut buf = [0u8; 20];
        let mut i = buf.len();
        let mut v = n.unsigned_abs();
        loop {
            i -= 1;
            buf[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        if n < 0 {
            i -= 1;
            buf[i] = b'-';
        }
        IntText { buf, start: i }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

pub fn parse_memory(s: &str) -> Result<u64, String> {
    let lower = s.trim().to_ascii_lowercase();
    let split = lower.find(|c: char| !c.is_ascii_digit()).unwrap_or(lower.len());
    let (digits, unit) = lower.split_at(split);
    let n: u64 = digits.parse().map_err(|_| format!("invalid memory size '{s}'"))?;
    let mul: u64 = match unit {
        "" | "b" => 1,
        "k" => 1_000,
        "kb" => 1 << 10,
        "m" => 1_000_000,
        "mb" => 1 << 20,
        "g" => 1_000_000_000,
        "gb" => 1 << 30,
        _ => return Err(format!("invalid memory unit in '{s}' (use b, k, kb, m, mb, g, gb)")),
    };
    n.checked_mul(mul).ok_or_else(|| format!("memory size '{s}' is too large"))
}

#[cfg(test)]
mod tests {
    use super::{parse_hex_float, parse_i64, parse_memory, parse_redis_memory};

    #[test]
    fn hex_floats_as_c_reads_them() {
        assert_eq!(parse_hex_float(b"0x10"), Some(16.0));
        assert_eq!(parse_hex_float(b"0X1P-7"), Some(0.0078125));
        assert_eq!(parse_hex_float(b"0x1.8p1"), Some(3.0));
        assert_eq!(parse_hex_float(b"0x.02"), Some(2.0 / 256.0));
        assert_eq!(parse_hex_float(b"0x7FFFFFFFFFFFFF"), Some(36028797018963967.0));
        assert_eq!(parse_hex_float(b"0x1p99999"), Some(f64::INFINITY));
        // `e` is a hex digit, not an exponent.
        assert_eq!(parse_hex_float(b"0x1e"), Some(30.0));
        for bad in [&b"0x"[..], b"0x.", b"0x1p", b"0x1p+", b"0xg", b"0x1.8.1", b"0x1 ", b"10", b"x10"] {
            assert_eq!(parse_hex_float(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn redis_memory_is_memtoull() {
        assert_eq!(parse_redis_memory(b"100mb"), Some(100 << 20));
        assert_eq!(parse_redis_memory(b"1GB"), Some(1 << 30));
        assert_eq!(parse_redis_memory(b"2k"), Some(2000));
        assert_eq!(parse_redis_memory(b"01"), Some(1));
        assert_eq!(parse_redis_memory(b""), Some(0), "Redis takes no digits as 0");
        assert_eq!(parse_redis_memory(b"99999999999999999999999gb"), Some(u64::MAX));
        for bad in [&b"-1"[..], b" 5", b"5 ", b"+5", b"1.5", b"0x10", b"1tb", b"abc"] {
            assert_eq!(parse_redis_memory(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn accepts_what_redis_accepts() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"10"), Some(10));
        assert_eq!(parse_i64(b"-10"), Some(-10));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
    }

    #[test]
    fn rejects_what_redis_rejects() {
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b" 1",
            b"1 ",
            b"01",
            b"-0",
            b"00",
            b"1.0",
            b"1e3",
            b"abc",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"18446744073709551616",
            b"000000000000000000001",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn memory_sizes_like_redis() {
        assert_eq!(parse_memory("0"), Ok(0));
        assert_eq!(parse_memory("100"), Ok(100));
        assert_eq!(parse_memory("1k"), Ok(1000));
        assert_eq!(parse_memory("1kb"), Ok(1024));
        assert_eq!(parse_memory("2GB"), Ok(2 << 30));
        assert_eq!(parse_memory("64mb"), Ok(64 << 20));
        assert!(parse_memory("12xb").is_err());
        assert!(parse_memory("mb").is_err());
    }
}
