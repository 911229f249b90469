//! The fast path's frames as the pipeline sees them: a request becomes the command arguments
//! RESP would carry ([`build_args`]), a reply becomes a status and a body ([`put_reply`]), and a
//! request the router answers before any command runs gets a [`Refusal`].

use std::sync::LazyLock;

use bytes::{Bytes, BytesMut};
use shoal_wire::acl::commands::cat;
use shoal_wire::fast::{self, FrameError, Op, Request, Status, set_flags};

use crate::cmd::{self, CommandSpec};
use crate::resp::{Out, Protocol, Reply};

/// Why a request is answered with `Status::Err` before reaching a command. The text is the
/// reply's body (error code first, as Redis's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("ERR {0}")]
    Frame(#[from] FrameError),
    #[error("ERR Protocol error: flags 0x{0:02x} are not defined for this op")]
    Flags(u8),
    #[error("ERR Protocol error: this op takes no key")]
    UnexpectedKey,
    #[error("ERR Protocol error: this op takes no value")]
    UnexpectedValue,
    #[error("ERR Protocol error: this op takes no arg (it must be 0)")]
    UnexpectedArg,
    #[error("ERR Protocol error: CMD needs at least a command name")]
    EmptyCommand,
    #[error("NOAUTH HELLO must succeed before any other fast-path request")]
    NoHello,
    #[error(
        "ERR '{0}' is not available over the fast path (it blocks or changes the connection's protocol state); use RESP"
    )]
    NotOverFastPath(&'static str),
    #[error("ERR reply too large for one fast-path frame")]
    ReplyTooLarge,
    #[error(
        "ERR request buffer budget exhausted: the router holds too much unprocessed request data from all clients (--request-buffer-budget); closing the connection, try again later"
    )]
    BudgetExhausted,
    #[error(
        "ERR authentication timeout: no successful HELLO within --auth-timeout-ms; closing the connection"
    )]
    AuthTimeout,
}

/// Commands CMD refuses (besides every `@blocking` one): see the module docs.
const NOT_OVER_FAST_PATH: &[&str] = &[
    "multi",
    "exec",
    "discard",
    "watch",
    "unwatch",
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
    "ssubscribe",
    "sunsubscribe",
    "auth",
    "hello",
    "reset",
    "quit",
    "monitor",
    "client|reply",
    "client|tracking",
];

pub(super) fn refused_over_cmd(spec: &CommandSpec) -> Option<&'static str> {
    let refused = NOT_OVER_FAST_PATH.contains(&spec.name()) || spec.categories() & cat::BLOCKING != 0;
    refused.then_some(spec.name())
}

/// How a request's reply is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// A typed op: the reply maps to a status.
    Typed,
    /// HELLO: as a typed op, and a success opens the connection.
    Hello,
    /// CMD: the reply's RESP encoding in this version.
    Cmd(Protocol),
}

/// Fixed argument words, shared rather than allocated per request.
pub(super) mod word {
    use bytes::Bytes;
    pub const AUTH: Bytes = Bytes::from_static(b"AUTH");
    pub const DEFAULT: Bytes = Bytes::from_static(b"default");
    pub const PING: Bytes = Bytes::from_static(b"PING");
    pub const GET: Bytes = Bytes::from_static(b"GET");
    pub const SET: Bytes = Bytes::from_static(b"SET");
    pub const PX: Bytes = Bytes::from_static(b"PX");
    pub const NX: Bytes = Bytes::from_static(b"NX");
    pub const XX: Bytes = Bytes::from_static(b"XX");
    pub const KEEPTTL: Bytes = Bytes::from_static(b"KEEPTTL");
    pub const DEL: Bytes = Bytes::from_static(b"DEL");
    pub const INCRBY: Bytes = Bytes::from_static(b"INCRBY");
    pub const PEXPIRE: Bytes = Bytes::from_static(b"PEXPIRE");
    pub const MGET: Bytes = Bytes::from_static(b"MGET");
    pub const MSET: Bytes = Bytes::from_static(b"MSET");
}

/// The command word a typed op's arguments start with ([`build_args`]); `None` for CMD, whose
/// command is the client's.
pub(super) fn command_word(op: Op) -> Option<Bytes> {
    Some(match op {
        Op::Hello => word::AUTH,
        Op::Ping => word::PING,
        Op::Get => word::GET,
        Op::Set => word::SET,
        Op::Del => word::DEL,
        Op::IncrBy => word::INCRBY,
        Op::Expire => word::PEXPIRE,
        Op::MGet => word::MGET,
        Op::MSet => word::MSET,
        Op::Cmd => return None,
    })
}

/// The command a typed op's request runs (the one [`command_word`] names), looked up in the
/// registry once per op code: a request then skips the lookup by name, a few percent of a
/// near-cache hit's cost.
pub(super) fn command_of(op: Op) -> Option<&'static CommandSpec> {
    static BY_CODE: LazyLock<[Option<&'static CommandSpec>; 256]> = LazyLock::new(|| {
        std::array::from_fn(|code| {
            let word = Op::from_u8(code as u8).and_then(command_word)?;
            Some(cmd::lookup(&word).expect("a typed op names a registered command"))
        })
    });
    BY_CODE[op as usize]
}

/// Decimal text of `n` as a `Bytes` cut from `arena` (one allocation per few hundred numbers,
/// not one per request).
pub(super) fn number(arena: &mut BytesMut, n: i64) -> Bytes {
    shoal_wire::chunk::cut(arena, shoal_wire::num::IntText::new(n).as_bytes(), 4096)
}

/// Builds the command arguments of `req` into `args` (cleared first): what RESP would carry.
pub(super) fn build_args(
    req: &Request,
    args: &mut Vec<Bytes>,
    arena: &mut BytesMut,
    max_items: usize,
) -> Result<Shape, Refusal> {
    args.clear();
    let op = req.op.map_err(FrameError::UnknownOp)?;
    let allowed = match op {
        Op::Set => set_flags::NX | set_flags::XX | set_flags::KEEPTTL | set_flags::GET,
        Op::Cmd => fast::cmd_flags::RESP3,
        _ => 0,
    };
    if req.flags & !allowed != 0 {
        return Err(Refusal::Flags(req.flags & !allowed));
    }
    if op.needs_key() && req.key.is_empty() {
        return Err(FrameError::MissingKey.into());
    }
    if !op.needs_key() && op != Op::Hello && !req.key.is_empty() {
        return Err(Refusal::UnexpectedKey);
    }
    let takes_value = matches!(op, Op::Hello | Op::Set) || op.has_items();
    if !takes_value && !req.value.is_empty() {
        return Err(Refusal::UnexpectedValue);
    }
    let takes_arg = matches!(op, Op::Set | Op::IncrBy | Op::Expire) || op.has_items();
    if !takes_arg && req.arg != 0 {
        return Err(Refusal::UnexpectedArg);
    }
    let key = || req.key.clone();
    args.extend(command_word(op));
    match op {
        Op::Hello => {
            let user = if req.key.is_empty() { word::DEFAULT } else { key() };
            args.extend([user, req.value.clone()]);
            return Ok(Shape::Hello);
        }
        Op::Cmd => {
            fast::split_items_into(&req.value, req.arg, max_items, args)?;
            if args.is_empty() {
                return Err(Refusal::EmptyCommand);
            }
            let resp3 = req.flags & fast::cmd_flags::RESP3 != 0;
            return Ok(Shape::Cmd(if resp3 { Protocol::Resp3 } else { Protocol::Resp2 }));
        }
        Op::Ping => {}
        Op::Get | Op::Del => args.push(key()),
        Op::Set => {
            args.extend([key(), req.value.clone()]);
            // 0 is "no TTL"; a negative one reaches SET, which answers Redis's own error.
            if req.arg != 0 {
                args.extend([word::PX, number(arena, req.arg)]);
            }
            for (bit, w) in [
                (set_flags::NX, word::NX),
                (set_flags::XX, word::XX),
                (set_flags::KEEPTTL, word::KEEPTTL),
                (set_flags::GET, word::GET),
            ] {
                if req.flags & bit != 0 {
                    args.push(w);
                }
            }
        }
        Op::IncrBy | Op::Expire => args.extend([key(), number(arena, req.arg)]),
        Op::MGet | Op::MSet => fast::split_items_into(&req.value, req.arg, max_items, args)?,
    }
    Ok(Shape::Typed)
}

pub(super) fn header(out: &mut Out, status: Status, id: u32, body_len: usize, int: i64) {
    let body_len = u32::try_from(body_len).expect("checked by the caller");
    out.put_slice(&fast::ReplyHeader { status, id, body_len, int }.encode());
}

/// Appends an `Err` reply.
pub(super) fn put_error(out: &mut Out, id: u32, text: &str) {
    // Error texts are short; one longer than a frame can say is cut (never the case in practice).
    let text = &text.as_bytes()[..text.len().min(u32::MAX as usize)];
    header(out, Status::Err, id, text.len(), 0);
    out.put_slice(text);
}

/// Appends the reply for request `id`; true if it is an error.
pub(super) fn put_reply(out: &mut Out, id: u32, shape: Shape, reply: Reply) -> bool {
    const MAX: usize = u32::MAX as usize;
    if let Shape::Cmd(protocol) = shape {
        let failed = reply.is_error();
        let mut body = Out::new();
        reply.encode(protocol, &mut body);
        if body.len() > MAX {
            put_error(out, id, &Refusal::ReplyTooLarge.to_string());
            return true;
        }
        header(out, Status::Resp, id, body.len(), 0);
        out.append(body);
        return failed;
    }
    match reply {
        Reply::Simple(_) => header(out, Status::Ok, id, 0, 0),
        Reply::Bulk(v) => {
            header(out, Status::Value, id, v.len(), 0);
            out.put_bytes(&v);
        }
        Reply::Nil | Reply::NilArray => header(out, Status::Nil, id, 0, 0),
        Reply::Int(n) => header(out, Status::Int, id, 0, n),
        Reply::Error(text, _) => {
            put_error(out, id, &text);
            return true;
        }
        Reply::Failure(e) => {
            put_error(out, id, &crate::resp::reply::failure_text(&e));
            return true;
        }
        Reply::Array(items) if items.iter().all(|i| matches!(i, Reply::Bulk(_) | Reply::Nil)) => {
            let len: usize = items
                .iter()
                .map(|i| match i {
                    Reply::Bulk(v) => 4 + v.len(),
                    _ => 4,
                })
                .sum();
            if len > MAX {
                put_error(out, id, &Refusal::ReplyTooLarge.to_string());
                return true;
            }
            header(out, Status::Array, id, len, items.len() as i64);
            for item in &items {
                match item {
                    Reply::Bulk(v) => {
                        out.put_slice(&(v.len() as u32).to_le_bytes());
                        out.put_bytes(v);
                    }
                    _ => out.put_slice(&fast::NIL_ITEM.to_le_bytes()),
                }
            }
        }
        // No typed op answers anything else; were one to, the client still gets it whole.
        other => return put_reply(out, id, Shape::Cmd(Protocol::Resp2), other),
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_wire::fast::Limits;

    fn req(op: Op, flags: u8, key: &[u8], value: &[u8], arg: i64) -> Request {
        let mut buf = BytesMut::new();
        fast::put_request(&mut buf, op, flags, 1, key, value, arg);
        let limits = Limits { authenticated: true, max_bulk: 1 << 20, max_items: 100 };
        fast::decode_request(&mut buf, &limits).unwrap().unwrap()
    }

    fn built(r: &Request) -> Result<(Shape, Vec<String>), Refusal> {
        let (mut args, mut arena) = (Vec::new(), BytesMut::new());
        let shape = build_args(r, &mut args, &mut arena, 100)?;
        Ok((shape, args.iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect()))
    }

    #[test]
    fn ops_become_the_arguments_resp_would_carry() {
        let set = req(Op::Set, set_flags::NX | set_flags::GET, b"k", b"v", 1500);
        assert_eq!(
            built(&set).unwrap(),
            (
                Shape::Typed,
                vec!["SET", "k", "v", "PX", "1500", "NX", "GET"].into_iter().map(String::from).collect()
            )
        );
        let hello = req(Op::Hello, 0, b"", b"pw", 0);
        assert_eq!(built(&hello).unwrap().1, vec!["AUTH", "default", "pw"]);
        assert_eq!(built(&req(Op::IncrBy, 0, b"n", b"", -3)).unwrap().1, vec!["INCRBY", "n", "-3"]);
        assert_eq!(built(&req(Op::Expire, 0, b"n", b"", 10)).unwrap().1, vec!["PEXPIRE", "n", "10"]);
        let mut items = BytesMut::new();
        fast::put_items(&mut items, &[&b"HSET"[..], b"h", b"f", b"v"]);
        let cmd = req(Op::Cmd, fast::cmd_flags::RESP3, b"", &items, 4);
        assert_eq!(
            built(&cmd).unwrap(),
            (
                Shape::Cmd(Protocol::Resp3),
                vec!["HSET", "h", "f", "v"].into_iter().map(String::from).collect()
            )
        );
    }

    #[test]
    fn a_typed_op_is_admitted_as_the_command_its_arguments_name() {
        let mut items = BytesMut::new();
        fast::put_items(&mut items, &[&b"k"[..], b"v"]);
        for (op, value, arg) in [
            (Op::Hello, &b"pw"[..], 0),
            (Op::Ping, b"", 0),
            (Op::Get, b"", 0),
            (Op::Set, b"v", 0),
            (Op::Del, b"", 0),
            (Op::IncrBy, b"", 1),
            (Op::Expire, b"", 1),
            (Op::MGet, &items[..], 2),
            (Op::MSet, &items[..], 2),
        ] {
            let key: &[u8] = if op.needs_key() || op == Op::Hello { b"k" } else { b"" };
            let (_, args) = built(&req(op, 0, key, value, arg)).unwrap();
            let named = cmd::lookup(args[0].as_bytes()).unwrap();
            let known = command_of(op).unwrap_or_else(|| panic!("{op:?} has no command"));
            assert_eq!(known.name(), named.name(), "{op:?}");
            assert!(known.subcommands.is_empty(), "{op:?}: admit_as skips subcommand lookup");
        }
        assert!(command_of(Op::Cmd).is_none());
    }

    #[test]
    fn malformed_requests_are_refused_by_id() {
        assert_eq!(built(&req(Op::Get, 0, b"", b"", 0)), Err(Refusal::Frame(FrameError::MissingKey)));
        assert_eq!(built(&req(Op::Get, 0, b"k", b"x", 0)), Err(Refusal::UnexpectedValue));
        assert_eq!(built(&req(Op::Del, 0, b"k", b"", 1)), Err(Refusal::UnexpectedArg));
        assert_eq!(built(&req(Op::Ping, 0, b"k", b"", 0)), Err(Refusal::UnexpectedKey));
        assert_eq!(built(&req(Op::Get, 0x80, b"k", b"", 0)), Err(Refusal::Flags(0x80)));
        assert_eq!(built(&req(Op::Cmd, 0, b"", b"", 0)), Err(Refusal::EmptyCommand));
        assert_eq!(
            built(&req(Op::MGet, 0, b"", b"\x01\0\0\0", 1)),
            Err(Refusal::Frame(FrameError::BadItems))
        );
        let mut unknown = req(Op::Ping, 0, b"", b"", 0);
        unknown.op = Err(0x7f);
        assert_eq!(built(&unknown).unwrap_err().to_string(), "ERR Protocol error: unknown op 0x7f");
    }

    #[test]
    fn replies_map_to_statuses() {
        let decode = |out: Out| {
            let mut buf = BytesMut::from(&out.into_bytes()[..]);
            fast::decode_reply(&mut buf, 1 << 20).unwrap().unwrap()
        };
        let mut out = Out::new();
        put_reply(&mut out, 7, Shape::Typed, Reply::Array(vec![Reply::bulk("a"), Reply::Nil]));
        let r = decode(out);
        assert_eq!((r.status, r.id, r.int), (Status::Array, 7, 2));
        assert_eq!(r.items().unwrap(), vec![Some(Bytes::from("a")), None]);
        let mut out = Out::new();
        assert!(put_reply(&mut out, 8, Shape::Typed, Reply::error("WRONGTYPE x")));
        let r = decode(out);
        assert_eq!((r.status, &r.body[..]), (Status::Err, &b"WRONGTYPE x"[..]));
        let mut out = Out::new();
        put_reply(&mut out, 9, Shape::Cmd(Protocol::Resp2), Reply::Int(3));
        let r = decode(out);
        assert_eq!((r.status, &r.body[..]), (Status::Resp, &b":3\r\n"[..]));
        let big = Bytes::from(vec![b'x'; 100_000]);
        let mut out = Out::new();
        put_reply(&mut out, 10, Shape::Typed, Reply::Bulk(big.clone()));
        let r = decode(out);
        assert_eq!((r.status, r.body.len()), (Status::Value, big.len()));
    }
}
