//! Doubles as Redis parses and prints them: scores (ZADD, ZINCRBY, the score ranges), `%.17g`
//! replies, `d2string` (ZSCAN, stored results) and C's `%g` (lua-cjson). Shared by the sorted-set
//! commands, the multi-key ones, HSCAN's kin and the script library, so it sits below them all.

use shoal_wire::proto::Frame;

use super::error::CmdError;
use super::frame::F;

/// `strtod` as Redis's `getDoubleFromObject` uses it: the whole argument, no leading space, no NaN.
pub fn parse_score(b: &[u8]) -> Option<f64> {
    // Plain integers (most scores, every redis-benchmark one) of up to 15 digits are exact as
    // doubles: no text conversion needed.
    let digits = b.strip_prefix(b"-").unwrap_or(b);
    if !digits.is_empty() && digits.len() <= 15 && digits.iter().all(u8::is_ascii_digit) {
        let n = digits.iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0'));
        return Some(if digits.len() < b.len() { -(n as f64) } else { n as f64 });
    }
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    let lower = s.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    if body.starts_with("nan") || body.starts_with("0x") {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    (!v.is_nan()).then_some(v)
}

/// `%.17g`, as Redis replies with doubles (ZSCORE, WITHSCORES, ZINCRBY).
pub fn fmt_g17(d: f64) -> String {
    if d.is_nan() {
        return "nan".into();
    }
    if d.is_infinite() {
        return if d > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    // Integral scores (the common case) below 1e17 print as their digits: every double there is
    // an integer that 17 significant digits hold exactly. No float formatting needed.
    if d.fract() == 0.0 && d.abs() < 1e17 {
        return (d as i64).to_string();
    }
    slow_g17(d)
}

/// `%.17g` through Rust's exact float formatting.
fn slow_g17(d: f64) -> String {
    fmt_g(d, 17)
}

/// C's `%.{precision}g` for a finite, non-zero double (also `%.14g`, lua-cjson's numbers):
/// `precision` significant digits, trailing zeros dropped, scientific notation below 1e-4 and
/// from 10^precision on.
pub fn fmt_g(d: f64, precision: usize) -> String {
    if !d.is_finite() || d == 0.0 {
        return fmt_g17(d);
    }
    let sci = format!("{d:.*e}", precision - 1);
    let (mantissa, exp) = sci.split_once('e').expect("exponent");
    let exp: i32 = exp.parse().expect("exponent digits");
    if exp < -4 || exp >= precision as i32 {
        let m = strip_zeros(mantissa);
        return format!("{m}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    let fixed = format!("{d:.*}", (precision as i32 - 1 - exp) as usize);
    strip_zeros(&fixed).to_string()
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.') } else { s }
}

/// Redis's `d2string` (ZSCAN and stored results): integers in plain digits, else `%.17g`.
pub fn d2string(d: f64) -> String {
    if d.is_finite() && d != 0.0 && d.fract() == 0.0 && d.abs() < 9.007_199_254_740_992e15 {
        format!("{}", d as i64)
    } else {
        fmt_g17(d)
    }
}

pub fn double(d: f64) -> Frame {
    F::double(fmt_g17(d))
}

pub fn not_float() -> CmdError {
    CmdError::Text("ERR value is not a valid float")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_scores_parse_like_the_general_path() {
        let general = |b: &[u8]| std::str::from_utf8(b).unwrap().parse::<f64>().unwrap();
        for s in ["0", "-0", "7", "-7", "000000012345", "999999999999999", "-999999999999999"] {
            let got = parse_score(s.as_bytes()).unwrap();
            assert_eq!(got.to_bits(), general(s.as_bytes()).to_bits(), "{s}");
        }
        for s in ["9999999999999999", "1e3", "+5", "-", "", " 1", "1.5", "inf", "-inf", "nan", "0x10"] {
            let want =
                s.parse::<f64>().ok().filter(|v| !v.is_nan() && !s.starts_with(' ') && !s.contains('x'));
            assert_eq!(parse_score(s.as_bytes()), want, "{s:?}");
        }
    }

    #[test]
    fn integral_scores_take_the_short_way_to_the_same_text() {
        let mut d = 1.0f64;
        while d < 1e17 {
            for x in [d, d + 1.0, d - 1.0, -d, (d * 0.77).floor()] {
                assert_eq!(fmt_g17(x), slow_g17(x), "{x}");
            }
            d *= 3.0;
        }
        for x in [99_999_999_999_999_984.0, -99_999_999_999_999_984.0, 9_007_199_254_740_993.0] {
            assert_eq!(fmt_g17(x), slow_g17(x), "{x}");
        }
    }

    #[test]
    fn doubles_print_like_printf_g17() {
        for (d, want) in [
            (1.5, "1.5"),
            (0.1, "0.10000000000000001"),
            (3.0, "3"),
            (-2.5e-7, "-2.4999999999999999e-07"),
            (1e17, "1e+17"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (1e16, "10000000000000000"),
            (0.0001, "0.0001"),
            (f64::INFINITY, "inf"),
            (-0.0, "-0"),
        ] {
            assert_eq!(fmt_g17(d), want, "{d}");
        }
        assert_eq!(parse_score(b"+inf"), Some(f64::INFINITY));
        assert_eq!(parse_score(b"nan"), None);
        assert_eq!(parse_score(b" 1"), None);
        assert_eq!(parse_score(b"1e3"), Some(1000.0));
    }
}
