//! INCRBYFLOAT arithmetic, reproducing Redis on x86-64 byte for byte.
//!
//! Redis parses both operands with `strtold` into an 80-bit x87 `long double`, adds them, and
//! prints the sum with `%.17Lf` minus trailing zeros. Doing the same in `f64` would print
//! `10.59999999999999964` where Redis prints `10.6`, so this module uses an exact software model of
//! the x87 format (`rustc_apfloat`) and formats its exact binary value in decimal itself.

use rustc_apfloat::ieee::X87DoubleExtended as F80;
use rustc_apfloat::{Float, Round, Status};

/// Why an INCRBYFLOAT was refused (plain words; Redis's text is `crate::redis_error`'s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FloatError {
    #[error("the value is not a valid float")]
    NotFloat,
    #[error("the increment would produce NaN or Infinity")]
    NanOrInfinity,
}

/// Redis refuses float strings this long (`MAX_LONG_DOUBLE_CHARS`).
const MAX_CHARS: usize = 5 * 1024;

/// `current + increment`, formatted as Redis stores and replies with it.
pub fn incr_by_float(current: &[u8], increment: &[u8]) -> Result<Vec<u8>, FloatError> {
    let a = parse(current).ok_or(FloatError::NotFloat)?;
    let b = parse(increment).ok_or(FloatError::NotFloat)?;
    let sum = a.add_r(b, Round::NearestTiesToEven).value;
    if !sum.is_finite() {
        return Err(FloatError::NanOrInfinity);
    }
    Ok(format_fixed17(sum).into_bytes())
}

/// `strtold` as Redis's `string2ld` uses it: the whole string must be one number, no leading space,
/// no NaN, and no overflow to infinity or underflow to zero.
pub fn parse(s: &[u8]) -> Option<F80> {
    if s.is_empty() || s.len() >= MAX_CHARS {
        return None;
    }
    let text = std::str::from_utf8(s).ok()?;
    let (negative, body) = match text.as_bytes()[0] {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = body.to_ascii_lowercase();
    let value = if lower == "inf" || lower == "infinity" {
        F80::INFINITY
    } else if let Some(hex) = lower.strip_prefix("0x") {
        parse_hex(hex)?
    } else {
        parse_decimal(body)?
    };
    Some(if negative { -value } else { value })
}

fn parse_decimal(body: &str) -> Option<F80> {
    let mantissa = split_number(body.as_bytes(), |c| c == b'e' || c == b'E', |c| c.is_ascii_digit())?;
    let nonzero = mantissa.iter().any(|&c| (b'1'..=b'9').contains(&c));
    let text = body.strip_prefix('+').unwrap_or(body);
    let parsed = F80::from_str_r(text, Round::NearestTiesToEven).ok()?;
    reject_range_errors(parsed.status, parsed.value, nonzero)
}

fn parse_hex(hex: &str) -> Option<F80> {
    let mantissa = split_number(hex.as_bytes(), |c| c == b'p', |c| c.is_ascii_hexdigit())?;
    let nonzero = mantissa.iter().any(|&c| c.is_ascii_hexdigit() && c != b'0');
    // The parser wants an explicit binary exponent, which `strtold` treats as optional.
    let text = if hex.contains('p') { format!("0x{hex}") } else { format!("0x{hex}p0") };
    let parsed = F80::from_str_r(&text, Round::NearestTiesToEven).ok()?;
    reject_range_errors(parsed.status, parsed.value, nonzero)
}

/// Checks `mantissa [marker [+-] decimal-digits]`, where the mantissa has at least one `digit`
/// and at most one `.`; returns the mantissa.
fn split_number(
    bytes: &[u8],
    is_marker: impl Fn(u8) -> bool,
    is_digit: impl Fn(u8) -> bool,
) -> Option<&[u8]> {
    let end = bytes.iter().position(|&c| is_marker(c)).unwrap_or(bytes.len());
    let (mantissa, exponent) = bytes.split_at(end);
    let digits = mantissa.iter().filter(|&&c| is_digit(c)).count();
    let dots = mantissa.iter().filter(|&&c| c == b'.').count();
    if digits == 0 || dots > 1 || digits + dots != mantissa.len() {
        return None;
    }
    if let Some((_, e)) = exponent.split_first() {
        let e = e.strip_prefix(b"+").or_else(|| e.strip_prefix(b"-")).unwrap_or(e);
        if e.is_empty() || !e.iter().all(u8::is_ascii_digit) {
            return None;
        }
    }
    Some(mantissa)
}

/// `strtold` sets ERANGE on overflow (to infinity) and on underflow; Redis refuses the first and
/// an underflow all the way to zero, and keeps subnormal results.
fn reject_range_errors(status: Status, value: F80, nonzero_digits: bool) -> Option<F80> {
    if status.contains(Status::OVERFLOW) || value.is_infinite() || value.is_nan() {
        return None;
    }
    if value.is_zero() && nonzero_digits {
        return None;
    }
    Some(value)
}

/// `printf("%.17Lf")` of a finite x87 value, then trailing zeros (and a bare `.`) removed and
/// `-0` printed as `0`, as Redis's `ld2string(LD_STR_HUMAN)` does.
pub fn format_fixed17(v: F80) -> String {
    const SCALE: u128 = 100_000_000_000_000_000; // 10^17
    let bits = v.to_bits();
    let negative = (bits >> 79) & 1 == 1;
    let exp_field = ((bits >> 64) & 0x7fff) as i32;
    let mantissa = bits as u64;
    // value = mantissa * 2^shift (the x87 format stores the integer bit explicitly).
    let shift = exp_field.max(1) - 16383 - 63;

    // n = round_half_even(|value| * 10^17), in decimal digits.
    let digits = if shift >= 0 {
        big_to_decimal(big_shl(u128::from(mantissa) * SCALE, shift as u32))
    } else {
        let k = (-shift) as u32;
        let scaled = u128::from(mantissa) * SCALE; // < 2^121
        let n = if k >= 122 {
            0 // below half a unit in the 17th decimal place
        } else {
            let q = scaled >> k;
            let r = scaled & ((1u128 << k) - 1);
            let half = 1u128 << (k - 1);
            if r > half || (r == half && q & 1 == 1) { q + 1 } else { q }
        };
        n.to_string()
    };

    let padded = format!("{digits:0>18}");
    let (int_part, frac_part) = padded.split_at(padded.len() - 17);
    let frac = frac_part.trim_end_matches('0');
    let mut out = String::with_capacity(padded.len() + 2);
    if negative {
        out.push('-');
    }
    out.push_str(int_part);
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    if out == "-0" {
        out = "0".into();
    }
    out
}

/// `x << shift` as little-endian base-2^32 limbs.
fn big_shl(x: u128, shift: u32) -> Vec<u32> {
    let mut limbs: Vec<u32> = vec![0; (shift / 32) as usize];
    let bit = shift % 32;
    let mut carry = 0u64;
    for i in 0..4 {
        let limb = (x >> (32 * i)) as u32;
        let v = (u64::from(limb) << bit) | carry;
        limbs.push(v as u32);
        carry = v >> 32;
    }
    limbs.push(carry as u32);
    while limbs.last() == Some(&0) && limbs.len() > 1 {
        limbs.pop();
    }
    limbs
}

/// Decimal digits of a big unsigned integer (little-endian base-2^32 limbs).
fn big_to_decimal(mut limbs: Vec<u32>) -> String {
    const CHUNK: u64 = 1_000_000_000;
    let mut chunks = Vec::new();
    while limbs.iter().any(|&l| l != 0) {
        let mut rem = 0u64;
        for limb in limbs.iter_mut().rev() {
            let cur = (rem << 32) | u64::from(*limb);
            *limb = (cur / CHUNK) as u32;
            rem = cur % CHUNK;
        }
        chunks.push(rem as u32);
        while limbs.last() == Some(&0) && limbs.len() > 1 {
            limbs.pop();
        }
    }
    let mut out = chunks.pop().map(|c| c.to_string()).unwrap_or_else(|| "0".into());
    for c in chunks.iter().rev() {
        out.push_str(&format!("{c:09}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `SET f 0; INCRBYFLOAT f 1e400` on redis-server 7.0.15, x86-64.
    const E400: &str = "10000000000000000000281880683947586514586453433629052038625910693539685534008629862039363994848324160522094053927317616200295822777259255734023828976593340661017797447434546173917862448116674971723778943824391593338047470675026246684401359237513603830343735485505244955964979021825038280091068414947402456898653040951017512658092615827588920183472511643316591362664138176309734806343732497430221946880";

    fn incr(a: &str, b: &str) -> Result<String, FloatError> {
        incr_by_float(a.as_bytes(), b.as_bytes()).map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn decimal_results_read_like_redis() {
        // Values checked against redis-server 7 on x86-64.
        assert_eq!(incr("10.5", "0.1").unwrap(), "10.6");
        assert_eq!(incr("0.1", "0.2").unwrap(), "0.3");
        assert_eq!(incr("0", "1").unwrap(), "1");
        assert_eq!(incr("5.0e3", "2.0e2").unwrap(), "5200");
        assert_eq!(incr("1", "-1").unwrap(), "0");
        assert_eq!(incr("-1", "0.5").unwrap(), "-0.5");
        assert_eq!(incr("3", "1.5e-3").unwrap(), "3.0015");
        assert_eq!(incr("1e-20", "0").unwrap(), "0");
        assert_eq!(incr("-1e-20", "0").unwrap(), "0", "-0 prints as 0");
        assert_eq!(incr("0x10", "1").unwrap(), "17");
        // 2^-18 ends in a 5 at the 18th decimal: printf rounds the tie to even.
        assert_eq!(incr("0", "0.000003814697265625").unwrap(), "0.00000381469726562");
        assert_eq!(incr("0", "1.5e-17").unwrap(), "0.00000000000000002");
        assert_eq!(incr("0", "1.000000000000000005").unwrap(), "1");
        assert_eq!(incr("3", "1e-3000").unwrap(), "3", "tiny but representable in long double");
        assert_eq!(incr("1", "1e-4940").unwrap(), "1", "subnormal long doubles are accepted");
    }

    #[test]
    fn huge_values_print_every_integer_digit() {
        assert_eq!(incr("1e20", "0").unwrap(), "100000000000000000000");
        // long double reaches far beyond f64; Redis prints the exact binary value's digits.
        assert_eq!(incr("1e400", "0").unwrap(), E400);
        assert_eq!(incr("123456789.123456789", "0").unwrap(), "123456789.12345678899873747");
        assert_eq!(incr("7.62939453125e-06", "1e19").unwrap(), "10000000000000000000");
    }

    #[test]
    fn refusals_match_redis() {
        for bad in ["", " 1", "1 ", "abc", "1e", "1.2.3", "nan", "NaN", "1e5000", "1e-5000", "--1", "0x"] {
            assert_eq!(incr(bad, "1"), Err(FloatError::NotFloat), "{bad:?}");
            assert_eq!(incr("1", bad), Err(FloatError::NotFloat), "{bad:?}");
        }
        assert_eq!(incr("inf", "1"), Err(FloatError::NanOrInfinity));
        assert_eq!(incr("1", "-Infinity"), Err(FloatError::NanOrInfinity));
        assert_eq!(incr("1.18e4932", "1.18e4932"), Err(FloatError::NanOrInfinity));
    }

    #[test]
    fn accepted_spellings() {
        for ok in ["1.", ".5", "+1", "1E+3", "1e-3", "00012", "0X1P3", "-0"] {
            assert!(parse(ok.as_bytes()).is_some(), "{ok:?}");
        }
    }
}
