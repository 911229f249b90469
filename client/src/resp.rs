//! RESP2: requests as arrays of bulk strings, and an incremental reply decoder.
//!
//! The decoder works in two passes over the receive buffer: [`frame_len`] walks the bytes to
//! find where the first complete reply ends (no allocation, so a reply that arrives in many
//! reads costs little per read), then [`decode`] splits exactly those bytes off and builds the
//! [`Value`], slicing bulk strings out of the frozen frame without copying them.

use bytes::{BufMut, Bytes, BytesMut};
use shoal_wire::num::IntText;

use crate::error::{Error, Result};

/// A RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `$-1` or `*-1`: a missing key, a conditional SET that did not apply.
    Nil,
    /// `+OK`.
    Simple(String),
    /// `-ERR ...` inside an array (an EXEC's failed command). A top-level error reply becomes
    /// [`Error::Server`] instead.
    Error(String),
    Int(i64),
    Bulk(Bytes),
    Array(Vec<Value>),
}

impl Value {
    /// The bytes of a bulk or simple string.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bulk(b) => Some(b),
            Value::Simple(s) => Some(s.as_bytes()),
            _ => None,
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }
}

/// Deepest array nesting the decoder follows: Redis's replies nest a few levels at most, and a
/// bound keeps a hostile peer from exhausting the stack.
pub const MAX_DEPTH: usize = 64;

/// Longest status, error or length line accepted (Redis's inline limit).
const MAX_LINE: usize = 64 * 1024;

/// Appends a request (an array of bulk strings) to `out`.
pub fn encode<A: AsRef<[u8]>>(out: &mut BytesMut, args: &[A]) {
    let len: usize = args.iter().map(|a| a.as_ref().len() + 16).sum();
    out.reserve(len + 16);
    put_len(out, b'*', args.len());
    for a in args {
        let a = a.as_ref();
        put_len(out, b'$', a.len());
        out.put_slice(a);
        out.put_slice(b"\r\n");
    }
}

fn put_len(out: &mut BytesMut, kind: u8, n: usize) {
    out.put_u8(kind);
    // On the stack: format! would allocate per argument on the hot path.
    out.put_slice(IntText::new(n as i64).as_bytes());
    out.put_slice(b"\r\n");
}

/// Cuts the first complete reply out of `buf`: `Ok(None)` until it has all arrived. A bulk
/// string longer than `max_bulk` is an error before its bytes are waited for.
pub fn decode(buf: &mut BytesMut, max_bulk: usize) -> Result<Option<Value>> {
    let Some(len) = frame_len(buf, max_bulk)? else { return Ok(None) };
    let frame = buf.split_to(len).freeze();
    let mut at = 0;
    let v = parse(&frame, &mut at);
    debug_assert_eq!(at, len);
    Ok(Some(v))
}

/// `b` as exactly one whole reply, its bulk strings sliced out of `b` (no copy); `None` if `b`
/// holds less or more than one.
pub(crate) fn decode_exact(b: &Bytes) -> Result<Option<Value>> {
    match frame_len(b, usize::MAX)? {
        Some(len) if len == b.len() => Ok(Some(parse(b, &mut 0))),
        _ => Ok(None),
    }
}

/// Where the first complete reply in `b` ends, if it is all there.
pub fn frame_len(b: &[u8], max_bulk: usize) -> Result<Option<usize>> {
    // An explicit stack of "elements still to read" instead of recursion, so depth is a
    // counter, not stack frames.
    let mut at = 0usize;
    let mut pending: Vec<i64> = Vec::new();
    loop {
        let Some(&kind) = b.get(at) else { return Ok(None) };
        let Some(end) = line_end(b, at + 1)? else { return Ok(None) };
        let line = &b[at + 1..end];
        at = end + 2;
        match kind {
            b'+' | b'-' => {}
            b':' => {
                parse_int(line)?;
            }
            b'$' => {
                let n = parse_int(line)?;
                if n >= 0 {
                    if n as u64 > max_bulk as u64 {
                        return Err(Error::Protocol(format!("bulk string of {n} bytes exceeds {max_bulk}")));
                    }
                    let need = at + n as usize + 2;
                    if b.len() < need {
                        return Ok(None);
                    }
                    if &b[need - 2..need] != b"\r\n" {
                        return Err(Error::Protocol("bulk string not terminated by CRLF".into()));
                    }
                    at = need;
                } else if n != -1 {
                    return Err(Error::Protocol(format!("bad bulk length {n}")));
                }
            }
            b'*' => {
                let n = parse_int(line)?;
                if n > 0 {
                    if pending.len() >= MAX_DEPTH {
                        return Err(Error::Protocol("arrays nested too deep".into()));
                    }
                    pending.push(n);
                    continue;
                } else if n < -1 {
                    return Err(Error::Protocol(format!("bad array length {n}")));
                }
            }
            other => return Err(Error::Protocol(format!("unexpected reply type byte 0x{other:02x}"))),
        }
        // One element finished: pop every array it completes.
        loop {
            match pending.last_mut() {
                None => return Ok(Some(at)),
                Some(left) => {
                    *left -= 1;
                    if *left > 0 {
                        break;
                    }
                    pending.pop();
                }
            }
        }
    }
}

/// The index of the CRLF ending the line that starts at `from`.
fn line_end(b: &[u8], from: usize) -> Result<Option<usize>> {
    let rest = &b[from.min(b.len())..];
    match rest.iter().take(MAX_LINE + 1).position(|&c| c == b'\n') {
        Some(0) => Err(Error::Protocol("line without CR".into())),
        Some(p) if rest[p - 1] == b'\r' => Ok(Some(from + p - 1)),
        Some(_) => Err(Error::Protocol("line without CR".into())),
        None if rest.len() > MAX_LINE => Err(Error::Protocol("reply line too long".into())),
        None => Ok(None),
    }
}

fn parse_int(line: &[u8]) -> Result<i64> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Error::Protocol(format!("bad integer {:?}", String::from_utf8_lossy(line))))
}

/// Builds the value of a frame [`frame_len`] has already checked whole and well formed.
fn parse(frame: &Bytes, at: &mut usize) -> Value {
    let kind = frame[*at];
    let end = *at + 1 + frame[*at + 1..].windows(2).position(|w| w == b"\r\n").expect("checked frame");
    let line = &frame[*at + 1..end];
    *at = end + 2;
    let int = || parse_int(line).expect("checked frame");
    match kind {
        b'+' => Value::Simple(String::from_utf8_lossy(line).into_owned()),
        b'-' => Value::Error(String::from_utf8_lossy(line).into_owned()),
        b':' => Value::Int(int()),
        b'$' => match int() {
            n if n < 0 => Value::Nil,
            n => {
                let v = frame.slice(*at..*at + n as usize);
                *at += n as usize + 2;
                Value::Bulk(v)
            }
        },
        b'*' => match int() {
            n if n < 0 => Value::Nil,
            n => Value::Array((0..n).map(|_| parse(frame, at)).collect()),
        },
        _ => unreachable!("checked frame"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 1 << 20;

    fn bulk(s: &str) -> Value {
        Value::Bulk(Bytes::copy_from_slice(s.as_bytes()))
    }

    /// Feeds `wire` one byte at a time: nothing comes out before the last byte of each reply,
    /// and then exactly the expected values.
    fn decode_bytewise(wire: &[u8]) -> Vec<Value> {
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for (i, b) in wire.iter().enumerate() {
            buf.put_u8(*b);
            while let Some(v) = decode(&mut buf, MAX).unwrap_or_else(|e| panic!("at byte {i}: {e}")) {
                out.push(v);
            }
        }
        assert!(buf.is_empty(), "left over: {buf:?}");
        out
    }

    #[test]
    fn every_type_split_at_every_byte() {
        let wire = b"+OK\r\n-ERR bad\r\n:-42\r\n$5\r\nhe\r\no\r\n$0\r\n\r\n$-1\r\n*-1\r\n*0\r\n";
        assert_eq!(
            decode_bytewise(wire),
            vec![
                Value::Simple("OK".into()),
                Value::Error("ERR bad".into()),
                Value::Int(-42),
                bulk("he\r\no"),
                bulk(""),
                Value::Nil,
                Value::Nil,
                Value::Array(vec![]),
            ]
        );
    }

    #[test]
    fn nested_arrays() {
        let wire = b"*3\r\n*2\r\n:1\r\n*1\r\n$1\r\na\r\n$-1\r\n*2\r\n-WRONGTYPE x\r\n+QUEUED\r\n";
        assert_eq!(
            decode_bytewise(wire),
            vec![Value::Array(vec![
                Value::Array(vec![Value::Int(1), Value::Array(vec![bulk("a")])]),
                Value::Nil,
                Value::Array(vec![Value::Error("WRONGTYPE x".into()), Value::Simple("QUEUED".into())]),
            ])]
        );
    }

    #[test]
    fn incomplete_then_complete_in_one_buffer() {
        let mut buf = BytesMut::from(&b"*2\r\n$3\r\nfoo\r\n"[..]);
        assert_eq!(decode(&mut buf, MAX).unwrap(), None);
        assert_eq!(buf.len(), 13, "nothing is consumed until the reply is whole");
        buf.extend_from_slice(b":7\r\n+PONG\r\n");
        assert_eq!(decode(&mut buf, MAX).unwrap(), Some(Value::Array(vec![bulk("foo"), Value::Int(7)])));
        assert_eq!(decode(&mut buf, MAX).unwrap(), Some(Value::Simple("PONG".into())));
        assert_eq!(decode(&mut buf, MAX).unwrap(), None);
    }

    #[test]
    fn malformed_replies_are_errors() {
        for bad in
            [&b"?x\r\n"[..], b":12a\r\n", b"$3\r\nabcd\r\n", b"$-2\r\n", b"*-5\r\n", b"+OK\n", b"%1\r\n"]
        {
            let err = decode(&mut BytesMut::from(bad), MAX);
            assert!(matches!(err, Err(Error::Protocol(_))), "{bad:?} gave {err:?}");
        }
        // A bulk over the limit is refused from its header alone.
        assert!(matches!(decode(&mut BytesMut::from(&b"$100\r\n"[..]), 10), Err(Error::Protocol(_))));
        // So is nesting past the bound, however the bytes arrive.
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1);
        assert!(matches!(decode(&mut BytesMut::from(deep.as_bytes()), MAX), Err(Error::Protocol(_))));
        let ok = format!("{}:1\r\n", "*1\r\n".repeat(MAX_DEPTH));
        assert!(decode(&mut BytesMut::from(ok.as_bytes()), MAX).unwrap().is_some());
        // A line that never ends is refused once it is longer than any real one.
        let long = vec![b'+'; MAX_LINE + 2];
        assert!(matches!(decode(&mut BytesMut::from(&long[..]), MAX), Err(Error::Protocol(_))));
    }

    #[test]
    fn encodes_arrays_of_bulk_strings() {
        let mut out = BytesMut::new();
        encode(&mut out, &[&b"SET"[..], b"k", b"", &[b'x'; 12][..]]);
        assert_eq!(&out[..], &b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n$12\r\nxxxxxxxxxxxx\r\n"[..]);
    }

    #[test]
    fn bulk_strings_share_the_receive_buffer() {
        let mut buf = BytesMut::from(&b"$3\r\nabc\r\n"[..]);
        let base = buf.as_ptr() as usize;
        let Some(Value::Bulk(b)) = decode(&mut buf, MAX).unwrap() else { panic!() };
        assert_eq!(b.as_ptr() as usize, base + 4, "sliced, not copied");
    }
}
