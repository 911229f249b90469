//! MONITOR's lines, in Redis's format (`<secs>.<micros> [<db> <client>] "arg" ...`), for the
//! router (its clients' commands) and the nodes (a script's calls, `[0 lua]`) alike.

use bytes::Bytes;

/// A monitor line without its `+` and CRLF: `<secs>.<micros> [<db> <client>] "arg" ...`, the
/// client `ip:port` (TCP) or `unix:<path>`.
pub fn line(unix_micros: u128, client: &str, args: &[Bytes]) -> Bytes {
    let mut out =
        format!("{}.{:06} [0 {client}]", unix_micros / 1_000_000, unix_micros % 1_000_000).into_bytes();
    let redacted = redacted(args);
    for (i, arg) in args.iter().enumerate() {
        out.push(b' ');
        if redacted.contains(&i) {
            out.extend_from_slice(b"\"(redacted)\"");
        } else {
            repr(arg, &mut out);
        }
    }
    Bytes::from(out)
}

/// Which arguments Redis hides: every one of AUTH's, and HELLO's two after `AUTH`.
fn redacted(args: &[Bytes]) -> Vec<usize> {
    let Some(name) = args.first() else { return Vec::new() };
    if name.eq_ignore_ascii_case(b"auth") {
        return (1..args.len()).collect();
    }
    if name.eq_ignore_ascii_case(b"hello")
        && let Some(at) = args.iter().position(|a| a.eq_ignore_ascii_case(b"auth"))
    {
        return (at + 1..(at + 3).min(args.len())).collect();
    }
    Vec::new()
}

/// Redis's `sdscatrepr`: the bytes quoted, `\` and `"` escaped, the usual control characters by
/// name, other non-printable bytes as `\xHH`.
fn repr(arg: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &b in arg {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x07 => out.extend_from_slice(b"\\a"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x20..=0x7e => out.push(b),
            _ => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&[u8]]) -> Vec<Bytes> {
        a.iter().map(|x| Bytes::copy_from_slice(x)).collect()
    }

    #[test]
    fn lines_are_redis_s() {
        // (The texts redis-server 7.0.15 printed for the same commands.)
        let l = line(1_796_491_814_832_365, "127.0.0.1:45454", &args(&[b"SET", b"a\"b", b"x\x92\n"]));
        assert_eq!(&l[..], &b"1796491814.832365 [0 127.0.0.1:45454] \"SET\" \"a\\\"b\" \"x\\x92\\n\""[..]);
        let l = line(5, "unix:/tmp/s", &args(&[b"AUTH", b"u", b"p"]));
        assert_eq!(&l[..], &b"0.000005 [0 unix:/tmp/s] \"AUTH\" \"(redacted)\" \"(redacted)\""[..]);
        let l = line(0, "c", &args(&[b"HELLO", b"3", b"AUTH", b"default", b"pw", b"SETNAME", b"n"]));
        assert_eq!(
            &l[..],
            &b"0.000000 [0 c] \"HELLO\" \"3\" \"AUTH\" \"(redacted)\" \"(redacted)\" \"SETNAME\" \"n\""[..]
        );
        let l = line(0, "c", &args(&[b"GET", b"a\\x\x07\x08\t\r"]));
        assert_eq!(&l[..], &b"0.000000 [0 c] \"GET\" \"a\\\\x\\a\\b\\t\\r\""[..]);
    }
}
