//! Incremental RESP request parser with Redis's rules and error texts.
//!
//! Requests are either multibulk (`*<n>\r\n` then `n` bulk strings `$<len>\r\n<bytes>\r\n`) or
//! inline (a text line split like `redis-cli` input, with quotes). Each call consumes what it can
//! from the buffer and keeps its place in a partly received request, so a huge or slowly arriving
//! request is never re-scanned.
//!
//! Safety rules, all enforced here:
//! - limits on arguments, argument size and line length, tighter before authentication
//!   (10 arguments, 16 KiB per argument), with Redis's `Protocol error: ...` texts;
//! - nothing is preallocated from a length header (the argument vector starts small, bulk data is
//!   only ever read into the connection buffer as it arrives);
//! - no nested arrays: a request element must be a bulk string;
//! - a bulk string must be followed by CRLF. Redis skips those two bytes unchecked; Shoal treats
//!   anything else as a desynchronised stream and closes it with an error, rather than guessing.

use bytes::{Buf, Bytes, BytesMut};

/// Longest inline request or length line, as Redis's `PROTO_INLINE_MAX_SIZE`.
pub const MAX_INLINE: usize = 64 * 1024;
/// Before AUTH: at most this many arguments ...
pub const UNAUTH_MAX_ARGS: usize = 10;
/// ... of at most this many bytes each.
pub const UNAUTH_MAX_BULK: usize = 16 * 1024;

/// Limits applied while parsing; chosen per connection from its authentication state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Whether the connection is authenticated (or no password is required).
    pub authenticated: bool,
    /// Largest bulk argument (`proto-max-bulk-len`).
    pub max_bulk: usize,
    /// Most arguments in one request.
    pub max_args: usize,
}

/// A protocol violation. The connection answers with `-ERR <Display>` and closes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("Protocol error: too big mbulk count string")]
    TooBigMultibulkCount,
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    #[error("Protocol error: unauthenticated multibulk length")]
    UnauthenticatedMultibulkLength,
    #[error("Protocol error: too big bulk count string")]
    TooBigBulkCount,
    #[error("Protocol error: expected '$', got '{}'", printable(*.0))]
    ExpectedBulk(u8),
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    #[error("Protocol error: unauthenticated bulk length")]
    UnauthenticatedBulkLength,
    #[error("Protocol error: expected CRLF after bulk string")]
    MissingBulkTerminator,
    #[error("Protocol error: too big inline request")]
    TooBigInline,
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
}

/// Redis prints the offending byte raw, except CR and LF, which its error formatter turns into
/// spaces; non-UTF-8 bytes are shown as `?` here so the reply stays valid text.
fn printable(b: u8) -> char {
    match b {
        b'\r' | b'\n' => ' ',
        0x20..=0x7e => b as char,
        _ => '?',
    }
}

/// Per-connection parser state.
#[derive(Debug, Default)]
pub struct RequestParser {
    args: Vec<Bytes>,
    /// Bulk strings still expected in the current multibulk request (0: between requests).
    remaining: usize,
    /// Length of the bulk string being received, once its header was read.
    bulk_len: Option<usize>,
}

impl RequestParser {
    pub fn new() -> RequestParser {
        RequestParser::default()
    }

    /// Bytes the buffer must hold before the current bulk string is complete (a read hint).
    pub fn wanted(&self) -> Option<usize> {
        self.bulk_len.map(|len| len + 2)
    }

    /// Parses the next complete request out of `buf`, consuming its bytes. `Ok(None)` means more
    /// input is needed. Empty requests (`*0`, `*-1`, blank inline lines) are skipped, as in Redis.
    pub fn next(&mut self, buf: &mut BytesMut, limits: &Limits) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        loop {
            if self.remaining == 0 {
                if buf.is_empty() {
                    return Ok(None);
                }
                if buf[0] != b'*' {
                    match parse_inline(buf, limits)? {
                        None => return Ok(None),
                        Some(args) if args.is_empty() => continue,
                        Some(args) => return Ok(Some(args)),
                    }
                }
                let Some(cr) = line_end(b'\r', buf).map_err(|_| ProtocolError::TooBigMultibulkCount)? else {
                    return Ok(None);
                };
                if cr + 1 >= buf.len() {
                    return Ok(None);
                }
                let n = match shoal_wire::num::parse_i64(&buf[1..cr]) {
                    Some(n) if n <= i64::from(i32::MAX) && buf[cr + 1] == b'\n' => n,
                    _ => return Err(ProtocolError::InvalidMultibulkLength),
                };
                if n > UNAUTH_MAX_ARGS as i64 && !limits.authenticated {
                    return Err(ProtocolError::UnauthenticatedMultibulkLength);
                }
                if n > limits.max_args as i64 {
                    return Err(ProtocolError::InvalidMultibulkLength);
                }
                buf.advance(cr + 2);
                if n <= 0 {
                    continue;
                }
                self.remaining = n as usize;
                // Grow with the arguments actually received, never from the header alone.
                self.args = Vec::with_capacity(self.remaining.min(16));
            }
            while self.remaining > 0 {
                let len = match self.bulk_len {
                    Some(len) => len,
                    None => {
                        let Some(cr) = line_end(b'\r', buf).map_err(|_| ProtocolError::TooBigBulkCount)?
                        else {
                            return Ok(None);
                        };
                        if cr + 1 >= buf.len() {
                            return Ok(None);
                        }
                        if buf[0] != b'$' {
                            return Err(ProtocolError::ExpectedBulk(buf[0]));
                        }
                        let len = match shoal_wire::num::parse_i64(&buf[1..cr]) {
                            Some(len)
                                if len >= 0
                                    && buf[cr + 1] == b'\n'
                                    && len as u64 <= limits.max_bulk as u64 =>
                            {
                                len as usize
                            }
                            _ => return Err(ProtocolError::InvalidBulkLength),
                        };
                        if len > UNAUTH_MAX_BULK && !limits.authenticated {
                            return Err(ProtocolError::UnauthenticatedBulkLength);
                        }
                        buf.advance(cr + 2);
                        self.bulk_len = Some(len);
                        len
                    }
                };
                if buf.len() < len + 2 {
                    return Ok(None);
                }
                if &buf[len..len + 2] != b"\r\n" {
                    return Err(ProtocolError::MissingBulkTerminator);
                }
                self.args.push(buf.split_to(len).freeze());
                buf.advance(2);
                self.bulk_len = None;
                self.remaining -= 1;
            }
            return Ok(Some(std::mem::take(&mut self.args)));
        }
    }
}

fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|&b| b == needle)
}

/// Finds the end of a header or inline line, looking no further than the line limit, so that
/// whether a long line is refused never depends on how its bytes were split into reads (Redis
/// only checks the limit while the line is incomplete).
fn line_end(needle: u8, buf: &[u8]) -> Result<Option<usize>, ()> {
    let window = &buf[..buf.len().min(MAX_INLINE + 2)];
    match memchr(needle, window) {
        Some(i) if i <= MAX_INLINE + 1 => Ok(Some(i)),
        _ if buf.len() > MAX_INLINE => Err(()),
        _ => Ok(None),
    }
}

/// An inline request: one line, split into arguments like Redis's `sdssplitargs`.
fn parse_inline(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let Some(nl) = line_end(b'\n', buf).map_err(|_| ProtocolError::TooBigInline)? else {
        return Ok(None);
    };
    let end = if nl > 0 && buf[nl - 1] == b'\r' { nl - 1 } else { nl };
    let args = split_args(&buf[..end]).ok_or(ProtocolError::UnbalancedQuotes)?;
    if args.len() > UNAUTH_MAX_ARGS && !limits.authenticated {
        return Err(ProtocolError::UnauthenticatedMultibulkLength);
    }
    buf.advance(nl + 1);
    Ok(Some(args))
}

pub use shoal_wire::splitargs::split_args;

/// The fuzzing property (used by `fuzz/fuzz_targets/resp_parser.rs` and the regression test that
/// replays saved inputs): on any bytes, the parser never panics, and feeding them whole or in
/// chunks of any size yields the same requests and the same error. The first input byte picks the
/// chunk size and the authentication state.
#[doc(hidden)]
pub fn fuzz_check(data: &[u8]) {
    let Some((&control, input)) = data.split_first() else { return };
    let limits = Limits { authenticated: control & 0x80 != 0, max_bulk: 1 << 20, max_args: 4096 };
    let whole = parse_in_chunks(input, input.len().max(1), &limits);
    let chunked = parse_in_chunks(input, usize::from(control & 0x3f) + 1, &limits);
    assert_eq!(whole, chunked, "chunking changed the result");
}

fn parse_in_chunks(input: &[u8], chunk: usize, limits: &Limits) -> (Vec<Vec<Bytes>>, Option<ProtocolError>) {
    let mut parser = RequestParser::new();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in input.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match parser.next(&mut buf, limits) {
                Ok(Some(args)) => {
                    assert!(!args.is_empty(), "a request has a command name");
                    assert!(args.len() <= limits.max_args);
                    out.push(args);
                }
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const AUTHED: Limits = Limits { authenticated: true, max_bulk: 512 * 1024 * 1024, max_args: 1 << 20 };
    const UNAUTHED: Limits = Limits { authenticated: false, ..AUTHED };

    fn parse_all(input: &[u8], limits: &Limits) -> (Vec<Vec<String>>, Option<ProtocolError>, usize) {
        let mut p = RequestParser::new();
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        loop {
            match p.next(&mut buf, limits) {
                Ok(Some(args)) => {
                    out.push(args.iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect())
                }
                Ok(None) => return (out, None, buf.len()),
                Err(e) => return (out, Some(e), buf.len()),
            }
        }
    }

    fn ok(input: &[u8]) -> Vec<Vec<String>> {
        let (cmds, err, _) = parse_all(input, &AUTHED);
        assert_eq!(err, None, "{:?}", String::from_utf8_lossy(input));
        cmds
    }

    fn err(input: &[u8], limits: &Limits) -> (Vec<Vec<String>>, String) {
        let (cmds, err, _) = parse_all(input, limits);
        (cmds, format!("-ERR {}\r\n", err.expect("an error")))
    }

    #[test]
    fn multibulk_and_pipelines() {
        assert_eq!(
            ok(b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$0\r\n\r\n"),
            vec![vec!["PING"], vec!["ECHO", ""]]
        );
        assert_eq!(
            ok(b"*-1\r\n*0\r\n*1\r\n$4\r\nPING\r\n"),
            vec![vec!["PING"]],
            "empty requests are skipped"
        );
        let bin = b"*2\r\n$3\r\nGET\r\n$4\r\n\r\n\0\xff\r\n";
        let (cmds, _, _) = parse_all(bin, &AUTHED);
        assert_eq!(cmds.len(), 1, "binary-safe arguments");
    }

    #[test]
    fn byte_at_a_time_delivery() {
        let input = b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\nPING\r\n";
        let mut p = RequestParser::new();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for &b in input.iter() {
            buf.extend_from_slice(&[b]);
            while let Some(args) = p.next(&mut buf, &AUTHED).unwrap() {
                got.push(args);
            }
        }
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], vec![Bytes::from("SET"), Bytes::from("key"), Bytes::from("value")]);
        assert_eq!(got[1], vec![Bytes::from("PING")]);
    }

    #[test]
    fn error_texts_match_redis() {
        // Replies observed from redis-server 7.0 for the same bytes.
        let cases: &[(&[u8], &str)] = &[
            (b"*x\r\n", "-ERR Protocol error: invalid multibulk length\r\n"),
            (b"*1\r\n*1\r\n$4\r\nPING\r\n", "-ERR Protocol error: expected '$', got '*'\r\n"),
            (b"*1\r\n\r\n", "-ERR Protocol error: expected '$', got ' '\r\n"),
            (b"*1\r\n$-1\r\n", "-ERR Protocol error: invalid bulk length\r\n"),
            (b"*1\r\n$x\r\n", "-ERR Protocol error: invalid bulk length\r\n"),
            (b"*3000000000\r\n", "-ERR Protocol error: invalid multibulk length\r\n"),
            (b"GET \"a\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"),
            (b"ECHO \"a\"b\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"),
        ];
        for (input, want) in cases {
            assert_eq!(err(input, &AUTHED).1, *want, "{:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn commands_before_an_error_are_still_parsed() {
        let (cmds, e) = err(b"*1\r\n$4\r\nPING\r\n*x\r\n", &AUTHED);
        assert_eq!(cmds, vec![vec!["PING"]]);
        assert_eq!(e, "-ERR Protocol error: invalid multibulk length\r\n");
    }

    #[test]
    fn unauthenticated_limits() {
        let eleven = b"*11\r\n";
        assert_eq!(err(eleven, &UNAUTHED).1, "-ERR Protocol error: unauthenticated multibulk length\r\n");
        assert_eq!(ok(eleven).len(), 0, "fine once authenticated (waits for more)");
        let big = b"*2\r\n$4\r\nAUTH\r\n$16385\r\n";
        assert_eq!(err(big, &UNAUTHED).1, "-ERR Protocol error: unauthenticated bulk length\r\n");
        let inline = b"a b c d e f g h i j k\r\n";
        assert_eq!(err(inline, &UNAUTHED).1, "-ERR Protocol error: unauthenticated multibulk length\r\n");
    }

    #[test]
    fn configured_limits() {
        let small = Limits { max_bulk: 10, max_args: 3, ..AUTHED };
        assert_eq!(err(b"*1\r\n$11\r\n", &small).1, "-ERR Protocol error: invalid bulk length\r\n");
        assert_eq!(err(b"*4\r\n", &small).1, "-ERR Protocol error: invalid multibulk length\r\n");
    }

    #[test]
    fn oversized_lines() {
        let long = vec![b'a'; MAX_INLINE + 1];
        assert_eq!(err(&long, &AUTHED).1, "-ERR Protocol error: too big inline request\r\n");
        let mut count = b"*".to_vec();
        count.extend(vec![b'1'; MAX_INLINE + 1]);
        assert_eq!(err(&count, &AUTHED).1, "-ERR Protocol error: too big mbulk count string\r\n");
        let mut bulk = b"*1\r\n$".to_vec();
        bulk.extend(vec![b'1'; MAX_INLINE + 1]);
        assert_eq!(err(&bulk, &AUTHED).1, "-ERR Protocol error: too big bulk count string\r\n");
    }

    #[test]
    fn no_allocation_from_headers() {
        // A 512 MiB announcement with 3 bytes of data: nothing large is allocated, the parser
        // just waits for more input.
        let mut p = RequestParser::new();
        let mut buf = BytesMut::from(&b"*1000000\r\n$536870912\r\nabc"[..]);
        assert_eq!(p.next(&mut buf, &AUTHED), Ok(None));
        assert!(p.args.capacity() <= 16);
        assert!(buf.capacity() < 1024);
        assert_eq!(p.wanted(), Some(536870914));
    }

    #[test]
    fn line_limit_does_not_depend_on_read_sizes() {
        let mut long = vec![b'a'; MAX_INLINE + 10];
        long.extend_from_slice(b"\r\n");
        let whole = parse_all(&long, &AUTHED);
        assert_eq!(whole.1, Some(ProtocolError::TooBigInline), "refused even when it arrives in one read");
        fuzz_check(&[0x85, b'P', b'I', b'N', b'G', b'\r', b'\n']);
    }

    #[test]
    fn desync_is_an_error() {
        let (cmds, e) = err(b"*1\r\n$4\r\nPINGxx", &AUTHED);
        assert!(cmds.is_empty());
        assert_eq!(e, "-ERR Protocol error: expected CRLF after bulk string\r\n");
    }

    #[test]
    fn inline_splitting_like_redis_cli() {
        assert_eq!(ok(b"SET k v\r\n"), vec![vec!["SET", "k", "v"]]);
        assert_eq!(ok(b"  \r\nPING\n"), vec![vec!["PING"]], "blank lines skipped; bare LF ok");
        assert_eq!(ok(b"ECHO \"a b\\n\\x41\"\r\n"), vec![vec!["ECHO", "a b\nA"]]);
        assert_eq!(ok(b"ECHO 'it\\'s'\r\n"), vec![vec!["ECHO", "it's"]]);
        assert_eq!(ok(b"ECHO a\"b c\"\r\n"), vec![vec!["ECHO", "ab c"]], "quotes may start mid-word");
        assert_eq!(ok(b"ECHO a\0b\r\n"), vec![vec!["ECHO", "a"]], "NUL ends the line");
        assert_eq!(split_args(b"'unterminated"), None);
        assert_eq!(split_args(b"\"x\"y"), None);
    }
}
