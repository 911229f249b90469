//! Redis's `sdssplitargs`: one line split into words with redis-cli's quoting rules (inline
//! commands, ACL files, a function library's `#!lua name=...` line).

use bytes::Bytes;

/// Splits a line into arguments with `redis-cli`'s quoting rules: `"..."` with `\n \r \t \b \a`
/// and `\xHH` escapes, `'...'` with only `\'`, and a closing quote that must be followed by a
/// space or the end of the line. A NUL byte ends the line, as it ends Redis's C string.
pub fn split_args(line: &[u8]) -> Option<Vec<Bytes>> {
    let line = &line[..line.iter().position(|&b| b == 0).unwrap_or(line.len())];
    let mut args = Vec::new();
    let mut i = 0;
    let at = |i: usize| line.get(i).copied().unwrap_or(0);
    loop {
        while i < line.len() && is_c_space(line[i]) {
            i += 1;
        }
        if i >= line.len() {
            return Some(args);
        }
        let mut cur = Vec::new();
        let (mut in_dq, mut in_sq) = (false, false);
        loop {
            let c = at(i);
            if in_dq {
                if c == b'\\'
                    && at(i + 1) == b'x'
                    && at(i + 2).is_ascii_hexdigit()
                    && at(i + 3).is_ascii_hexdigit()
                {
                    cur.push(hex(at(i + 2)) * 16 + hex(at(i + 3)));
                    i += 3;
                } else if c == b'\\' && i + 1 < line.len() {
                    i += 1;
                    cur.push(match line[i] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        other => other,
                    });
                } else if c == b'"' {
                    // The closing quote must be followed by a space or nothing at all.
                    if i + 1 < line.len() && !is_c_space(line[i + 1]) {
                        return None;
                    }
                    i += 1;
                    break;
                } else if i >= line.len() {
                    return None; // unterminated quotes
                } else {
                    cur.push(c);
                }
            } else if in_sq {
                if c == b'\\' && at(i + 1) == b'\'' {
                    i += 1;
                    cur.push(b'\'');
                } else if c == b'\'' {
                    if i + 1 < line.len() && !is_c_space(line[i + 1]) {
                        return None;
                    }
                    i += 1;
                    break;
                } else if i >= line.len() {
                    return None;
                } else {
                    cur.push(c);
                }
            } else {
                match c {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => break,
                    b'"' => in_dq = true,
                    b'\'' => in_sq = true,
                    _ => cur.push(c),
                }
            }
            i += 1;
            if i > line.len() {
                break;
            }
        }
        args.push(Bytes::from(cur));
    }
}

fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn hex(b: u8) -> u8 {
    (b as char).to_digit(16).unwrap_or(0) as u8
}
