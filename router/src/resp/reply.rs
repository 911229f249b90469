//! Reply values and their RESP2/RESP3 encodings.
//!
//! Every front end produces a [`Reply`]; the RESP connection encodes it for the protocol version
//! the client chose with HELLO (RESP2 by default), the HTTP front end maps it to status codes.

use std::borrow::Cow;

use bytes::Bytes;

use super::Out;

use crate::backend::BackendError;

/// The protocol version a RESP connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    #[default]
    Resp2,
    Resp3,
}

impl Protocol {
    pub fn version(self) -> i64 {
        match self {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+OK`
    Simple(Cow<'static, str>),
    /// `-ERR ...`: the whole line without the leading `-` (it starts with the error code), and
    /// the kind of refusal it is, for front ends that answer by kind (HTTP's status codes).
    Error(Cow<'static, str>, ErrorKind),
    Int(i64),
    Bulk(Bytes),
    /// The null reply: `$-1` in RESP2, `_` in RESP3.
    Nil,
    Array(Vec<Reply>),
    /// The null array: `*-1` in RESP2, `_` in RESP3 (e.g. BLPOP timing out, LMPOP on nothing).
    NilArray,
    /// Pairs given flat (`a1 b1 a2 b2 ...`): a flat array in RESP2, an array of `[a, b]` arrays
    /// in RESP3 (HRANDFIELD WITHVALUES, ZRANGE WITHSCORES).
    Pairs(Vec<Reply>),
    /// A double as Redis prints it: a bulk string in RESP2, `,` in RESP3.
    Double(Bytes),
    /// A reply a node encoded already, in the RESP version of the connection it is for.
    Raw(Bytes),
    /// RESP3 map; a flat array of alternating keys and values in RESP2.
    Map(Vec<(Reply, Reply)>),
    /// RESP3 map; an array of `[key, value]` arrays in RESP2 (XREAD's streams).
    Keyed(Vec<(Reply, Reply)>),
    /// RESP3 set; an array in RESP2.
    Set(Vec<Reply>),
    /// RESP3 verbatim string (`=len\r\ntxt:...`); a bulk string in RESP2. Used by INFO.
    Verbatim(Bytes),
    /// A verbatim string of another format: `fmt:text` whole (a Lua script's `verbatim_string`).
    VerbatimAs(Bytes),
    /// RESP3 boolean (`#t`, `#f`); `:1`/`:0` in RESP2.
    Boolean(bool),
    /// RESP3 big number (`(digits`); a bulk string in RESP2.
    BigNumber(Bytes),
    /// A node could not answer: `-ERR <why>` on RESP, 503 on HTTP.
    Failure(BackendError),
    /// An out-of-band message (pub/sub): RESP3 push type `>`; an array in RESP2.
    Push(Vec<Reply>),
    /// Several replies written back to back for one command (SUBSCRIBE a b answers one push per
    /// channel).
    Seq(Vec<Reply>),
}

/// A node call's failure as a Redis error line (without the `-`): `TRYAGAIN` (Redis Cluster's
/// code for "retry later") for a unit whose keys stayed in a moving slot or a write whose keys
/// kept changing, `ERR` for the rest.
pub fn failure_text(e: &BackendError) -> String {
    match e {
        BackendError::TryAgain | BackendError::Contended => format!("TRYAGAIN {e}"),
        _ => format!("ERR {e}"),
    }
}

/// The kinds of refusal a front end other than RESP tells apart: carried from where the refusal
/// is made (the node's store, the router's ACL check), never read back out of the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorKind {
    #[default]
    Other,
    /// WRONGTYPE: the key holds another type.
    WrongType,
    /// OOM: the node is at maxmemory under noeviction.
    OutOfMemory,
    /// NOPERM: the user's ACL rules refuse it.
    NoPerm,
}

impl ErrorKind {
    /// The kind a node's reply carries with its error line.
    pub fn of_node(kind: shoal_wire::proto::ErrorKind) -> ErrorKind {
        use shoal_wire::proto::ErrorKind as Wire;
        match kind {
            Wire::WrongType => ErrorKind::WrongType,
            Wire::OutOfMemory => ErrorKind::OutOfMemory,
            // The router answers a script no node holds itself (EVALSHA's retry with the body).
            Wire::NoScript | Wire::Busy | Wire::Other => ErrorKind::Other,
        }
    }
}

impl From<BackendError> for Reply {
    fn from(e: BackendError) -> Reply {
        Reply::Failure(e)
    }
}

impl Reply {
    pub const OK: Reply = Reply::Simple(Cow::Borrowed("OK"));

    pub fn simple(s: &'static str) -> Reply {
        Reply::Simple(Cow::Borrowed(s))
    }

    /// An error reply; `text` includes the code, e.g. `"ERR syntax error"`.
    pub fn error(text: impl Into<Cow<'static, str>>) -> Reply {
        Reply::Error(text.into(), ErrorKind::Other)
    }

    /// [`error_fmt`](Self::error_fmt) of a refusal whose kind is known.
    pub fn refusal(kind: ErrorKind, text: String) -> Reply {
        match Reply::error_fmt(text) {
            Reply::Error(line, _) => Reply::Error(line, kind),
            other => other,
        }
    }

    /// Whether this is pushed data (subscribe confirmations, messages): written even to a client
    /// that turned its replies off (CLIENT REPLY OFF), as Redis does.
    pub fn is_push(&self) -> bool {
        match self {
            Reply::Push(_) => true,
            Reply::Seq(items) => !items.is_empty() && items.iter().all(Reply::is_push),
            _ => false,
        }
    }

    /// Whether this is an error (a pre-encoded one too), as the command stats count failures.
    /// An error reply's code, as Redis counts it in INFO errorstats: the first word of its text
    /// (`None` for replies that are not errors).
    pub fn error_code(&self) -> Option<&[u8]> {
        let text: &[u8] = match self {
            Reply::Error(text, _) => text.as_bytes(),
            Reply::Failure(_) => return Some(b"ERR"),
            Reply::Raw(bytes) if bytes.first() == Some(&b'-') => &bytes[1..],
            _ => return None,
        };
        let end = text.iter().position(|&b| b == b' ' || b == b'\r' || b == b'\n').unwrap_or(text.len());
        Some(&text[..end])
    }

    pub fn is_error(&self) -> bool {
        match self {
            Reply::Error(..) | Reply::Failure(_) => true,
            Reply::Raw(bytes) => bytes.first() == Some(&b'-'),
            _ => false,
        }
    }

    /// An error built at runtime, with CR/LF replaced by spaces so the reply stays one line (as
    /// Redis's `addReplyErrorFormat` does).
    pub fn error_fmt(text: String) -> Reply {
        if text.contains(['\r', '\n']) {
            Reply::Error(Cow::Owned(text.replace(['\r', '\n'], " ")), ErrorKind::Other)
        } else {
            Reply::Error(Cow::Owned(text), ErrorKind::Other)
        }
    }

    pub fn bulk(b: impl Into<Bytes>) -> Reply {
        Reply::Bulk(b.into())
    }

    /// Appends the encoding of `self` for `proto` to `out`.
    pub fn encode(&self, proto: Protocol, out: &mut Out) {
        match self {
            Reply::Simple(s) => line(out, b'+', s.as_bytes()),
            Reply::Error(s, _) => line(out, b'-', s.as_bytes()),
            Reply::Failure(e) => line(out, b'-', failure_text(e).as_bytes()),
            Reply::Int(n) => {
                out.put_u8(b':');
                put_int(out, *n);
                out.put_slice(b"\r\n");
            }
            Reply::Bulk(b) => {
                header(out, b'$', b.len());
                out.put_bytes(b);
                out.put_slice(b"\r\n");
            }
            Reply::Nil => match proto {
                Protocol::Resp2 => out.put_slice(b"$-1\r\n"),
                Protocol::Resp3 => out.put_slice(b"_\r\n"),
            },
            Reply::Array(items) => {
                header(out, b'*', items.len());
                items.iter().for_each(|i| i.encode(proto, out));
            }
            Reply::NilArray => match proto {
                Protocol::Resp2 => out.put_slice(b"*-1\r\n"),
                Protocol::Resp3 => out.put_slice(b"_\r\n"),
            },
            Reply::Pairs(flat) => match proto {
                Protocol::Resp2 => {
                    header(out, b'*', flat.len());
                    flat.iter().for_each(|i| i.encode(proto, out));
                }
                Protocol::Resp3 => {
                    header(out, b'*', flat.len() / 2);
                    for pair in flat.chunks(2) {
                        header(out, b'*', pair.len());
                        pair.iter().for_each(|i| i.encode(proto, out));
                    }
                }
            },
            Reply::Raw(bytes) => out.put_bytes(bytes),
            Reply::Double(text) => match proto {
                Protocol::Resp2 => bulk(out, b'$', text),
                Protocol::Resp3 => line(out, b',', text),
            },
            Reply::Set(items) => {
                header(out, if proto == Protocol::Resp3 { b'~' } else { b'*' }, items.len());
                items.iter().for_each(|i| i.encode(proto, out));
            }
            Reply::Map(pairs) => {
                match proto {
                    Protocol::Resp2 => header(out, b'*', pairs.len() * 2),
                    Protocol::Resp3 => header(out, b'%', pairs.len()),
                }
                for (k, v) in pairs {
                    k.encode(proto, out);
                    v.encode(proto, out);
                }
            }
            Reply::Keyed(pairs) => {
                match proto {
                    Protocol::Resp2 => header(out, b'*', pairs.len()),
                    Protocol::Resp3 => header(out, b'%', pairs.len()),
                }
                for (k, v) in pairs {
                    if proto == Protocol::Resp2 {
                        header(out, b'*', 2);
                    }
                    k.encode(proto, out);
                    v.encode(proto, out);
                }
            }
            Reply::Push(items) => {
                header(out, if proto == Protocol::Resp3 { b'>' } else { b'*' }, items.len());
                items.iter().for_each(|i| i.encode(proto, out));
            }
            Reply::Seq(replies) => replies.iter().for_each(|r| r.encode(proto, out)),
            Reply::Verbatim(b) => match proto {
                Protocol::Resp2 => bulk(out, b'$', b),
                Protocol::Resp3 => {
                    header(out, b'=', b.len() + 4);
                    out.put_slice(b"txt:");
                    out.put_slice(b);
                    out.put_slice(b"\r\n");
                }
            },
            Reply::VerbatimAs(b) => match proto {
                Protocol::Resp2 => bulk(out, b'$', b.get(4..).unwrap_or_default()),
                Protocol::Resp3 => bulk(out, b'=', b),
            },
            Reply::Boolean(b) => match proto {
                Protocol::Resp2 => out.put_slice(if *b { b":1\r\n" } else { b":0\r\n" }),
                Protocol::Resp3 => out.put_slice(if *b { b"#t\r\n" } else { b"#f\r\n" }),
            },
            Reply::BigNumber(n) => match proto {
                Protocol::Resp2 => bulk(out, b'$', n),
                Protocol::Resp3 => line(out, b'(', n),
            },
        }
    }

    /// The encoding as a fresh buffer (tests, one-off replies).
    pub fn to_bytes(&self, proto: Protocol) -> Bytes {
        let mut out = Out::new();
        self.encode(proto, &mut out);
        out.into_bytes()
    }
}

fn line(out: &mut Out, prefix: u8, body: &[u8]) {
    out.reserve(body.len() + 3);
    out.put_u8(prefix);
    out.put_slice(body);
    out.put_slice(b"\r\n");
}

fn header(out: &mut Out, prefix: u8, len: usize) {
    out.put_u8(prefix);
    put_int(out, len as i64);
    out.put_slice(b"\r\n");
}

fn bulk(out: &mut Out, prefix: u8, b: &[u8]) {
    out.reserve(b.len() + 16);
    header(out, prefix, b.len());
    out.put_slice(b);
    out.put_slice(b"\r\n");
}

fn put_int(out: &mut Out, n: i64) {
    out.put_slice(shoal_wire::num::IntText::new(n).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(r: &Reply, p: Protocol) -> String {
        String::from_utf8(r.to_bytes(p).to_vec()).unwrap()
    }

    #[test]
    fn resp2_and_resp3_encodings() {
        use Protocol::*;
        assert_eq!(enc(&Reply::OK, Resp2), "+OK\r\n");
        assert_eq!(enc(&Reply::error("ERR x"), Resp3), "-ERR x\r\n");
        assert_eq!(enc(&Reply::Int(i64::MIN), Resp2), ":-9223372036854775808\r\n");
        assert_eq!(enc(&Reply::Int(0), Resp2), ":0\r\n");
        assert_eq!(enc(&Reply::bulk("ab"), Resp2), "$2\r\nab\r\n");
        assert_eq!(enc(&Reply::Nil, Resp2), "$-1\r\n");
        assert_eq!(enc(&Reply::Nil, Resp3), "_\r\n");
        let map = Reply::Map(vec![(Reply::bulk("k"), Reply::Int(1))]);
        assert_eq!(enc(&map, Resp2), "*2\r\n$1\r\nk\r\n:1\r\n");
        assert_eq!(enc(&map, Resp3), "%1\r\n$1\r\nk\r\n:1\r\n");
        let set = Reply::Set(vec![Reply::simple("a")]);
        assert_eq!(enc(&set, Resp2), "*1\r\n+a\r\n");
        assert_eq!(enc(&set, Resp3), "~1\r\n+a\r\n");
        assert_eq!(enc(&Reply::Verbatim(Bytes::from("x:1")), Resp3), "=7\r\ntxt:x:1\r\n");
        assert_eq!(enc(&Reply::Verbatim(Bytes::from("x:1")), Resp2), "$3\r\nx:1\r\n");
        assert_eq!(enc(&Reply::VerbatimAs(Bytes::from("mkd:# a")), Resp3), "=7\r\nmkd:# a\r\n");
        assert_eq!(enc(&Reply::VerbatimAs(Bytes::from("mkd:# a")), Resp2), "$3\r\n# a\r\n");
        assert_eq!(enc(&Reply::Boolean(true), Resp3), "#t\r\n");
        assert_eq!(enc(&Reply::Boolean(false), Resp2), ":0\r\n");
        assert_eq!(enc(&Reply::BigNumber(Bytes::from("12")), Resp3), "(12\r\n");
        assert_eq!(enc(&Reply::BigNumber(Bytes::from("12")), Resp2), "$2\r\n12\r\n");
        assert_eq!(enc(&Reply::Array(vec![]), Resp2), "*0\r\n");
        assert_eq!(enc(&Reply::NilArray, Resp2), "*-1\r\n");
        assert_eq!(enc(&Reply::NilArray, Resp3), "_\r\n");
        let pairs = Reply::Pairs(vec![Reply::bulk("a"), Reply::Int(1), Reply::bulk("b"), Reply::Int(2)]);
        assert_eq!(enc(&pairs, Resp2), "*4\r\n$1\r\na\r\n:1\r\n$1\r\nb\r\n:2\r\n");
        assert_eq!(enc(&pairs, Resp3), "*2\r\n*2\r\n$1\r\na\r\n:1\r\n*2\r\n$1\r\nb\r\n:2\r\n");
        assert_eq!(enc(&Reply::Double(Bytes::from("1.5")), Resp2), "$3\r\n1.5\r\n");
        assert_eq!(enc(&Reply::Double(Bytes::from("inf")), Resp3), ",inf\r\n");
        let push = Reply::Push(vec![Reply::bulk("message"), Reply::bulk("c"), Reply::bulk("m")]);
        assert_eq!(enc(&push, Resp2), "*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n");
        assert_eq!(enc(&push, Resp3), ">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n");
        let seq = Reply::Seq(vec![Reply::Int(1), Reply::Nil]);
        assert_eq!(enc(&seq, Resp3), ":1\r\n_\r\n");
    }

    #[test]
    fn runtime_errors_stay_on_one_line() {
        assert_eq!(Reply::error_fmt("ERR a\r\nb".into()), Reply::error("ERR a  b"));
    }
}
