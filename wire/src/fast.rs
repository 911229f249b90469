//! The sidecar fast path: a binary, pipelined frame protocol (spec: docs/fast-path.md).
//!
//! RESP spends most of a small request's bytes and parsing on lengths written as text and on
//! CRLFs; a sidecar talking to its own router over a Unix socket needs none of that. Every frame
//! here starts with a fixed 24-byte little-endian header, so a reader learns a frame's whole
//! length from one fixed-size read, checks it against its limits *before* allocating, and slices
//! key and value out of the receive buffer without copying.
//!
//! - A connection opens with an 8-byte [`Preamble`] each way (magic + version), then the client
//!   sends [`Op::Hello`] (user, password) and nothing else is served until it succeeds.
//! - Requests carry an id; replies carry the same id and may come back out of order.
//! - [`RequestHeader`] / [`ReplyHeader`] are the two headers; [`decode_request`] and
//!   [`decode_reply`] cut complete frames out of a buffer; [`put_request`] and [`put_items`]
//!   build them (the client's side, and tests).
//!
//! Both the router (server side) and `shoal-client` use this module, so they cannot disagree on a
//! byte.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The first bytes of a fast-path connection (the preamble's). RESP requests start with `*` or an
/// inline command's printable bytes, never 0xF5, so a router tells the two protocols apart on one
/// socket by the first byte alone.
pub const MAGIC: [u8; 4] = [0xF5, b'S', b'H', b'F'];
/// The protocol version this build speaks.
pub const VERSION: u16 = 1;
/// Bytes in a preamble, a request header and a reply header.
pub const PREAMBLE_LEN: usize = 8;
pub const HEADER_LEN: usize = 24;
/// The length an array item has when it is a nil (MGET of a missing key).
pub const NIL_ITEM: u32 = u32::MAX;

/// Before [`Op::Hello`] succeeds a frame's key and value together may hold at most this many
/// bytes (a user name and a password), like RESP's unauthenticated bulk limit.
pub const UNAUTH_MAX_BODY: usize = 16 * 1024;

/// `flags` bits of SET.
pub mod set_flags {
    /// Only if the key does not exist.
    pub const NX: u8 = 1;
    /// Only if the key exists.
    pub const XX: u8 = 2;
    /// Keep the key's current TTL (`arg` must be 0).
    pub const KEEPTTL: u8 = 4;
    /// Answer the old value (SET ... GET).
    pub const GET: u8 = 8;
}

/// `flags` bits of CMD.
pub mod cmd_flags {
    /// Encode the reply in RESP3 instead of RESP2.
    pub const RESP3: u8 = 1;
}

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// key = user (empty: `default`), value = password (empty: none).
    Hello = 0x01,
    /// No key; answers [`Status::Ok`].
    Ping = 0x02,
    /// key; answers a value or nil.
    Get = 0x10,
    /// key, value, arg = TTL in milliseconds (0: none), flags [`set_flags`].
    Set = 0x11,
    /// key; answers the number of keys removed.
    Del = 0x12,
    /// key, arg = delta; answers the new value.
    IncrBy = 0x13,
    /// key, arg = TTL in milliseconds (PEXPIRE); answers 1 or 0.
    Expire = 0x14,
    /// value = `arg` items (keys); answers an array of values or nils.
    MGet = 0x20,
    /// value = `arg` items (key, value, key, value, ...); answers OK.
    MSet = 0x21,
    /// value = `arg` items (a Redis command and its arguments); answers its RESP reply.
    Cmd = 0x30,
}

impl Op {
    pub fn from_u8(b: u8) -> Option<Op> {
        Some(match b {
            0x01 => Op::Hello,
            0x02 => Op::Ping,
            0x10 => Op::Get,
            0x11 => Op::Set,
            0x12 => Op::Del,
            0x13 => Op::IncrBy,
            0x14 => Op::Expire,
            0x20 => Op::MGet,
            0x21 => Op::MSet,
            0x30 => Op::Cmd,
            _ => return None,
        })
    }

    /// Whether the value region holds `arg` length-prefixed items instead of one value.
    pub fn has_items(self) -> bool {
        matches!(self, Op::MGet | Op::MSet | Op::Cmd)
    }

    /// Whether the key region must be non-empty.
    pub fn needs_key(self) -> bool {
        matches!(self, Op::Get | Op::Set | Op::Del | Op::IncrBy | Op::Expire)
    }
}

/// What a reply carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    /// Done, no body (SET, MSET, PING, HELLO).
    Ok = 0,
    /// body = a value (GET, SET ... GET).
    Value = 1,
    /// No such key, or a conditional SET that did not apply.
    Nil = 2,
    /// `int` = the answer (DEL, INCRBY, EXPIRE).
    Int = 3,
    /// body = Redis's error text without the leading `-` (`WRONGTYPE ...`, `ERR ...`).
    Err = 4,
    /// `int` = item count, body = items (MGET); an item's length [`NIL_ITEM`] is a nil.
    Array = 5,
    /// body = the RESP-encoded reply (CMD).
    Resp = 6,
}

impl Status {
    pub fn from_u8(b: u8) -> Option<Status> {
        Some(match b {
            0 => Status::Ok,
            1 => Status::Value,
            2 => Status::Nil,
            3 => Status::Int,
            4 => Status::Err,
            5 => Status::Array,
            6 => Status::Resp,
            _ => return None,
        })
    }
}

/// Why bytes are not a valid frame. The server answers the frame's id with [`Status::Err`] when
/// it can still find the next frame (a bad op, bad items), and closes the connection when it
/// cannot (a bad magic, an oversized length it will not read past).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("Protocol error: not a Shoal fast-path preamble")]
    BadMagic,
    #[error("Protocol error: unsupported fast-path version {0} (this router speaks {VERSION})")]
    UnsupportedVersion(u16),
    #[error("Protocol error: unknown op 0x{0:02x}")]
    UnknownOp(u8),
    #[error("Protocol error: unknown reply status {0}")]
    UnknownStatus(u8),
    #[error("Protocol error: reserved header bytes must be zero")]
    Reserved,
    #[error("Protocol error: {what} of {len} bytes exceeds the limit of {max}")]
    TooLarge { what: &'static str, len: u64, max: u64 },
    #[error("Protocol error: unauthenticated frame of {0} bytes")]
    Unauthenticated(u64),
    #[error("Protocol error: {0} items exceed the limit of {1}")]
    TooManyItems(i64, usize),
    #[error("Protocol error: the items do not fill the value region exactly")]
    BadItems,
    #[error("Protocol error: this op needs a key")]
    MissingKey,
}

/// Limits checked on every request header before its body is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Whether HELLO has succeeded (else [`UNAUTH_MAX_BODY`] applies).
    pub authenticated: bool,
    /// Largest key or value (`proto-max-bulk-len`).
    pub max_bulk: usize,
    /// Most items in one MGET/MSET/CMD (`--max-args`).
    pub max_items: usize,
}

/// The 8 bytes each side sends first: [`MAGIC`], the version (u16 LE), two zero bytes. The
/// server answers with its own preamble (the version it will speak) before anything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preamble {
    pub version: u16,
}

impl Preamble {
    pub fn encode(self) -> [u8; PREAMBLE_LEN] {
        let v = self.version.to_le_bytes();
        [MAGIC[0], MAGIC[1], MAGIC[2], MAGIC[3], v[0], v[1], 0, 0]
    }

    /// Reads a preamble from the front of `buf`: `Ok(None)` until 8 bytes are there.
    pub fn decode(buf: &mut BytesMut) -> Result<Option<Preamble>, FrameError> {
        let have = buf.len().min(MAGIC.len());
        if buf[..have] != MAGIC[..have] {
            return Err(FrameError::BadMagic);
        }
        if buf.len() < PREAMBLE_LEN {
            return Ok(None);
        }
        let version = u16::from_le_bytes([buf[4], buf[5]]);
        if buf[6] != 0 || buf[7] != 0 {
            return Err(FrameError::Reserved);
        }
        buf.advance(PREAMBLE_LEN);
        Ok(Some(Preamble { version }))
    }
}

/// A request header (24 bytes, little-endian):
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 1 | op |
/// | 1 | 1 | flags |
/// | 2 | 2 | reserved (0) |
/// | 4 | 4 | id |
/// | 8 | 4 | key length |
/// | 12 | 4 | value length |
/// | 16 | 8 | arg (i64: TTL ms, delta, or item count) |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    pub op: u8,
    pub flags: u8,
    pub id: u32,
    pub key_len: u32,
    pub val_len: u32,
    pub arg: i64,
}

impl RequestHeader {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0] = self.op;
        h[1] = self.flags;
        h[4..8].copy_from_slice(&self.id.to_le_bytes());
        h[8..12].copy_from_slice(&self.key_len.to_le_bytes());
        h[12..16].copy_from_slice(&self.val_len.to_le_bytes());
        h[16..24].copy_from_slice(&self.arg.to_le_bytes());
        h
    }

    pub fn decode(h: &[u8; HEADER_LEN]) -> Result<RequestHeader, FrameError> {
        if h[2] != 0 || h[3] != 0 {
            return Err(FrameError::Reserved);
        }
        Ok(RequestHeader::fields(h))
    }

    /// The fields, the reserved bytes not looked at.
    fn fields(h: &[u8; HEADER_LEN]) -> RequestHeader {
        RequestHeader {
            op: h[0],
            flags: h[1],
            id: u32_at(h, 4),
            key_len: u32_at(h, 8),
            val_len: u32_at(h, 12),
            arg: i64::from_le_bytes(h[16..24].try_into().expect("8 bytes")),
        }
    }
}

/// A reply header (24 bytes, little-endian):
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 1 | status |
/// | 1 | 1 | flags (0) |
/// | 2 | 2 | reserved (0) |
/// | 4 | 4 | id of the request |
/// | 8 | 4 | body length |
/// | 12 | 4 | reserved (0) |
/// | 16 | 8 | int (i64: Int's value, Array's item count) |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyHeader {
    pub status: Status,
    pub id: u32,
    pub body_len: u32,
    pub int: i64,
}

impl ReplyHeader {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0] = self.status as u8;
        h[4..8].copy_from_slice(&self.id.to_le_bytes());
        h[8..12].copy_from_slice(&self.body_len.to_le_bytes());
        h[16..24].copy_from_slice(&self.int.to_le_bytes());
        h
    }

    pub fn decode(h: &[u8; HEADER_LEN]) -> Result<ReplyHeader, FrameError> {
        let status = Status::from_u8(h[0]).ok_or(FrameError::UnknownStatus(h[0]))?;
        if h[1] != 0 || h[2] != 0 || h[3] != 0 || h[12..16] != [0; 4] {
            return Err(FrameError::Reserved);
        }
        Ok(ReplyHeader {
            status,
            id: u32_at(h, 4),
            body_len: u32_at(h, 8),
            int: i64::from_le_bytes(h[16..24].try_into().expect("8 bytes")),
        })
    }
}

fn u32_at(h: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(h[at..at + 4].try_into().expect("4 bytes"))
}

/// A whole request, its key and value sliced out of the receive buffer (no copy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `Err(byte)`: an op this build does not know; the frame is still well delimited, so the
    /// server answers its id with an error and carries on.
    pub op: Result<Op, u8>,
    pub flags: u8,
    pub id: u32,
    pub key: Bytes,
    pub value: Bytes,
    pub arg: i64,
}

impl Request {
    /// The value region's items (MGET, MSET, CMD): exactly `arg` of them, filling it exactly.
    pub fn items(&self, max_items: usize) -> Result<Vec<Bytes>, FrameError> {
        split_items(&self.value, self.arg, max_items)
    }
}

/// Splits `arg` length-prefixed items (u32 LE length, bytes) out of `region`, without copying.
/// Nil items are not allowed in requests.
pub fn split_items(region: &Bytes, count: i64, max_items: usize) -> Result<Vec<Bytes>, FrameError> {
    let mut items = Vec::new();
    split_items_into(region, count, max_items, &mut items)?;
    Ok(items)
}

/// [`split_items`] appending to `items` (a server reuses one vector for every request's
/// arguments). On an error `items` may hold some of them.
pub fn split_items_into(
    region: &Bytes,
    count: i64,
    max_items: usize,
    items: &mut Vec<Bytes>,
) -> Result<(), FrameError> {
    if count < 0 || count as u64 > max_items as u64 {
        return Err(FrameError::TooManyItems(count, max_items));
    }
    // A nil's length is no exception here: larger than any region, it is refused as such.
    each_item(region, count, false, items, |item| item.expect("no nils"))
}

/// Appends to `out` the `count` items (u32 LE length, bytes; with `nils`, the length
/// [`NIL_ITEM`] is a nil, `None`) that must fill `region` exactly, each as `item` makes it. A
/// count the region cannot hold (each item takes at least its 4-byte length) is refused before
/// `out` grows. The requests' and the replies' item lists both.
fn each_item<T>(
    region: &Bytes,
    count: i64,
    nils: bool,
    out: &mut Vec<T>,
    item: impl Fn(Option<Bytes>) -> T,
) -> Result<(), FrameError> {
    // (Divided, not multiplied: a count near i64::MAX must not overflow.)
    if count < 0 || count as u64 > region.len() as u64 / 4 {
        return Err(FrameError::BadItems);
    }
    out.reserve(count as usize);
    let mut at = 0usize;
    for _ in 0..count {
        let Some(len) = region.get(at..at + 4) else { return Err(FrameError::BadItems) };
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes"));
        at += 4;
        if nils && len == NIL_ITEM {
            out.push(item(None));
            continue;
        }
        let len = len as usize;
        if len > region.len() - at {
            return Err(FrameError::BadItems);
        }
        out.push(item(Some(region.slice(at..at + len))));
        at += len;
    }
    if at != region.len() {
        return Err(FrameError::BadItems);
    }
    Ok(())
}

/// Cuts the next complete request out of `buf`. `Ok(None)`: more bytes are needed (room for
/// the whole frame is then reserved). Lengths are checked against `limits` from the header
/// alone, before the body is waited for.
pub fn decode_request(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Request>, FrameError> {
    let Some(total) = request_len(buf, limits)? else { return Ok(None) };
    if buf.len() < total {
        buf.reserve(total - buf.len());
        return Ok(None);
    }
    Ok(Some(take_request(buf, total)))
}

/// The whole length (header included) of the request at the front of `buf`, its header checked
/// against `limits` as [`decode_request`] checks it, without reserving room for its body: a
/// server holds that room against its memory budget before reserving it.
/// `Ok(None)`: not even a whole header yet.
pub fn request_len(buf: &[u8], limits: &Limits) -> Result<Option<usize>, FrameError> {
    let Some(head) = buf.get(..HEADER_LEN) else { return Ok(None) };
    let h = RequestHeader::decode(head.try_into().expect("header length"))?;
    check_request(&h, limits)?;
    Ok(Some(HEADER_LEN + h.key_len as usize + h.val_len as usize))
}

/// The keys of the whole GET frames at the front of `buf`, at most `max` frames looked at: a
/// hint for warming a cache before the frames are taken up one by one. Nothing is checked here;
/// [`request_len`] still checks every frame when it is taken up.
pub fn get_keys(buf: &[u8], max: usize) -> impl Iterator<Item = &[u8]> {
    let (mut at, mut left) = (0usize, max);
    std::iter::from_fn(move || {
        while left > 0 {
            left -= 1;
            let head: &[u8; HEADER_LEN] = buf.get(at..at + HEADER_LEN)?.try_into().ok()?;
            let h = RequestHeader::fields(head);
            let key_at = at + HEADER_LEN;
            let end = key_at + h.key_len as usize + h.val_len as usize;
            if end > buf.len() {
                return None;
            }
            at = end;
            if h.op == Op::Get as u8 {
                return Some(&buf[key_at..key_at + h.key_len as usize]);
            }
        }
        None
    })
}

/// Cuts the request at the front of `buf` whose length [`request_len`] found to be `total`
/// (so its header is not checked again), all of it there.
pub fn take_request(buf: &mut BytesMut, total: usize) -> Request {
    let h = RequestHeader::fields(buf[..HEADER_LEN].try_into().expect("header length"));
    debug_assert_eq!(total, HEADER_LEN + h.key_len as usize + h.val_len as usize);
    let mut frame = buf.split_to(total).freeze();
    frame.advance(HEADER_LEN);
    let key = frame.split_to(h.key_len as usize);
    Request { op: Op::from_u8(h.op).ok_or(h.op), flags: h.flags, id: h.id, key, value: frame, arg: h.arg }
}

/// The id and key of the request at the front of `buf` whose length [`request_len`] found to be
/// `total`, all of it there, if it is a plain GET (no flags, value or argument; a key): what a
/// server may answer straight from the buffer, taking nothing out of it. `None` for anything
/// else, which [`take_request`] then cuts as usual.
pub fn plain_get(buf: &[u8], total: usize) -> Option<(u32, &[u8])> {
    let h = RequestHeader::fields(buf.get(..HEADER_LEN)?.try_into().expect("header length"));
    let plain = h.op == Op::Get as u8 && h.flags == 0 && h.val_len == 0 && h.arg == 0 && h.key_len > 0;
    let key = buf.get(HEADER_LEN..total).filter(|key| plain && key.len() == h.key_len as usize)?;
    Some((h.id, key))
}

/// The id bytes of a request header at the front of `buf`, even one whose other fields are
/// refused (so the refusal can name the request); 0 before a whole id has arrived.
pub fn peek_id(buf: &[u8]) -> u32 {
    buf.get(4..8).map_or(0, |b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
}

fn check_request(h: &RequestHeader, limits: &Limits) -> Result<(), FrameError> {
    let body = h.key_len as u64 + h.val_len as u64;
    if !limits.authenticated && body > UNAUTH_MAX_BODY as u64 {
        return Err(FrameError::Unauthenticated(body));
    }
    let max = limits.max_bulk as u64;
    if h.key_len as u64 > max {
        return Err(FrameError::TooLarge { what: "key", len: h.key_len as u64, max });
    }
    // A list op's value region holds many bulk strings: bound it by their most (and still by
    // what one u32 can say).
    let max_value = match Op::from_u8(h.op) {
        Some(op) if op.has_items() => max.saturating_mul(2).min(u32::MAX as u64),
        _ => max,
    };
    if h.val_len as u64 > max_value {
        return Err(FrameError::TooLarge { what: "value", len: h.val_len as u64, max: max_value });
    }
    Ok(())
}

/// A whole reply as a client receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: Status,
    pub id: u32,
    pub int: i64,
    pub body: Bytes,
}

impl Reply {
    /// An Array reply's items (`None`: nil).
    pub fn items(&self) -> Result<Vec<Option<Bytes>>, FrameError> {
        let mut out = Vec::new();
        each_item(&self.body, self.int, true, &mut out, |item| item)?;
        Ok(out)
    }
}

/// Cuts the next complete reply out of `buf` (the client's side); bodies over `max_body` are
/// refused before they are waited for.
pub fn decode_reply(buf: &mut BytesMut, max_body: usize) -> Result<Option<Reply>, FrameError> {
    let Some(head) = buf.get(..HEADER_LEN) else { return Ok(None) };
    let h = ReplyHeader::decode(head.try_into().expect("header length"))?;
    if h.body_len as u64 > max_body as u64 {
        return Err(FrameError::TooLarge {
            what: "reply body",
            len: h.body_len as u64,
            max: max_body as u64,
        });
    }
    let total = HEADER_LEN + h.body_len as usize;
    if buf.len() < total {
        buf.reserve(total - buf.len());
        return Ok(None);
    }
    let mut frame = buf.split_to(total).freeze();
    frame.advance(HEADER_LEN);
    Ok(Some(Reply { status: h.status, id: h.id, int: h.int, body: frame }))
}

/// Appends one request (header, key, value) to `out`.
pub fn put_request(out: &mut BytesMut, op: Op, flags: u8, id: u32, key: &[u8], value: &[u8], arg: i64) {
    let h = RequestHeader {
        op: op as u8,
        flags,
        id,
        key_len: key.len() as u32,
        val_len: value.len() as u32,
        arg,
    };
    out.reserve(HEADER_LEN + key.len() + value.len());
    out.put_slice(&h.encode());
    out.put_slice(key);
    out.put_slice(value);
}

/// The byte length of `items` once [`put_items`] writes them.
pub fn items_len<T: AsRef<[u8]>>(items: &[T]) -> usize {
    items.iter().map(|i| 4 + i.as_ref().len()).sum()
}

/// Appends items (u32 LE length, bytes) to `out`: the value region of MGET, MSET and CMD.
pub fn put_items<T: AsRef<[u8]>>(out: &mut BytesMut, items: &[T]) {
    out.reserve(items_len(items));
    for item in items {
        let item = item.as_ref();
        out.put_u32_le(item.len() as u32);
        out.put_slice(item);
    }
}

/// Fuzz entry: decodes requests out of arbitrary bytes under tight and loose limits; it must
/// never panic, never loop, and every frame it yields must be consistent with its header.
pub fn fuzz_check(data: &[u8]) {
    for authenticated in [false, true] {
        let limits = Limits { authenticated, max_bulk: 1 << 16, max_items: 1 << 10 };
        let mut buf = BytesMut::from(data);
        let _ = Preamble::decode(&mut buf.clone());
        loop {
            let before = buf.len();
            match decode_request(&mut buf, &limits) {
                Ok(Some(req)) => {
                    assert!(buf.len() < before, "a decoded frame consumes bytes");
                    assert!(req.key.len() <= limits.max_bulk);
                    if let Ok(items) = req.items(limits.max_items) {
                        assert_eq!(items_len(&items), req.value.len());
                    }
                }
                Ok(None) | Err(_) => break,
            }
        }
        let mut buf = BytesMut::from(data);
        while let Ok(Some(reply)) = decode_reply(&mut buf, 1 << 16) {
            let _ = reply.items();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOOSE: Limits = Limits { authenticated: true, max_bulk: 1 << 20, max_items: 1000 };

    /// Appends one reply item (an Array's element; `None`: nil) to `out`. (The router writes
    /// its replies' items into its own output buffer: `shoal_router::fast`'s `put_reply`.)
    fn put_reply_item(out: &mut BytesMut, item: Option<&[u8]>) {
        match item {
            None => out.put_u32_le(NIL_ITEM),
            Some(v) => {
                out.put_u32_le(v.len() as u32);
                out.put_slice(v);
            }
        }
    }

    #[test]
    fn get_keys_lists_the_whole_get_frames_keys() {
        let mut wire = BytesMut::new();
        put_request(&mut wire, Op::Get, 0, 1, b"a", b"", 0);
        put_request(&mut wire, Op::Set, 0, 2, b"b", b"value", 0);
        put_request(&mut wire, Op::Get, 0, 3, b"cc", b"", 0);
        put_request(&mut wire, Op::Get, 0, 4, b"", b"", 0);
        let whole = wire.len();
        put_request(&mut wire, Op::Get, 0, 5, b"partial", b"", 0);
        wire.truncate(wire.len() - 1);
        let keys: Vec<&[u8]> = get_keys(&wire, 100).collect();
        assert_eq!(keys, [&b"a"[..], b"cc", b""], "SETs skipped, the partial frame not read");
        assert_eq!(get_keys(&wire, 2).collect::<Vec<_>>(), [&b"a"[..]], "at most 2 frames looked at");
        assert_eq!(get_keys(&wire[..whole - 1], 100).count(), 2);
        assert_eq!(get_keys(&wire[..10], 100).count(), 0, "not even a header");
    }

    #[test]
    fn plain_get_is_a_get_with_a_key_and_nothing_else() {
        let frame = |op, flags, key: &[u8], value: &[u8], arg| {
            let mut wire = BytesMut::new();
            put_request(&mut wire, op, flags, 9, key, value, arg);
            wire
        };
        let get = frame(Op::Get, 0, b"k1", b"", 0);
        assert_eq!(plain_get(&get, get.len()), Some((9, &b"k1"[..])));
        // Followed by more frames: only its own bytes.
        let mut two = get.clone();
        put_request(&mut two, Op::Get, 0, 10, b"other", b"", 0);
        assert_eq!(plain_get(&two, get.len()), Some((9, &b"k1"[..])));
        for (what, f) in [
            ("another op", frame(Op::Del, 0, b"k1", b"", 0)),
            ("flags", frame(Op::Get, 1, b"k1", b"", 0)),
            ("a value", frame(Op::Get, 0, b"k1", b"v", 0)),
            ("an argument", frame(Op::Get, 0, b"k1", b"", 5)),
            ("no key", frame(Op::Get, 0, b"", b"", 0)),
        ] {
            assert_eq!(plain_get(&f, f.len()), None, "{what}");
        }
        assert_eq!(plain_get(&get[..get.len() - 1], get.len()), None, "not all there");
        assert_eq!(plain_get(&get, get.len() - 1), None, "a length that is not the frame's");
    }

    #[test]
    fn request_round_trip_in_pieces() {
        let mut wire = BytesMut::new();
        put_request(&mut wire, Op::Set, set_flags::NX, 7, b"key", b"value", 1500);
        let mut items = BytesMut::new();
        put_items(&mut items, &[&b"a"[..], b"", b"ccc"]);
        put_request(&mut wire, Op::MGet, 0, 8, b"", &items, 3);
        // Fed one byte at a time, the decoder waits, then yields both frames whole.
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for b in wire.iter() {
            buf.put_u8(*b);
            while let Some(r) = decode_request(&mut buf, &LOOSE).unwrap() {
                got.push(r);
            }
        }
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].op, Ok(Op::Set));
        assert_eq!((got[0].flags, got[0].id, got[0].arg), (set_flags::NX, 7, 1500));
        assert_eq!((&got[0].key[..], &got[0].value[..]), (&b"key"[..], &b"value"[..]));
        assert_eq!(got[1].op, Ok(Op::MGet));
        let items = got[1].items(LOOSE.max_items).unwrap();
        assert_eq!(items, vec![Bytes::from_static(b"a"), Bytes::new(), Bytes::from_static(b"ccc")]);
        assert!(buf.is_empty());
    }

    #[test]
    fn lengths_are_checked_before_the_body_arrives() {
        let h = RequestHeader { op: Op::Set as u8, flags: 0, id: 1, key_len: 3, val_len: u32::MAX, arg: 0 };
        let mut buf = BytesMut::from(&h.encode()[..]);
        assert!(matches!(decode_request(&mut buf, &LOOSE), Err(FrameError::TooLarge { what: "value", .. })));
        let tight = Limits { authenticated: false, ..LOOSE };
        let h = RequestHeader { op: Op::Hello as u8, flags: 0, id: 1, key_len: 8, val_len: 20_000, arg: 0 };
        let mut buf = BytesMut::from(&h.encode()[..]);
        assert_eq!(decode_request(&mut buf, &tight), Err(FrameError::Unauthenticated(20_008)));
        let mut bad = h.encode();
        bad[2] = 1;
        assert_eq!(decode_request(&mut BytesMut::from(&bad[..]), &LOOSE), Err(FrameError::Reserved));
    }

    #[test]
    fn request_len_checks_the_header_alone() {
        // It reads a slice, so it cannot reserve: a frame over the limits is refused from its
        // header, before the caller allocates anything for it.
        let mut wire = BytesMut::new();
        put_request(&mut wire, Op::Set, 0, 5, b"k", b"vv", 0);
        assert_eq!(request_len(&wire[..10], &LOOSE), Ok(None));
        assert_eq!(request_len(&wire, &LOOSE), Ok(Some(HEADER_LEN + 3)));
        assert_eq!(peek_id(&wire), 5);
        let h = RequestHeader { op: Op::Set as u8, flags: 0, id: 6, key_len: 1, val_len: u32::MAX, arg: 0 };
        assert!(matches!(request_len(&h.encode(), &LOOSE), Err(FrameError::TooLarge { .. })));
    }

    #[test]
    fn unknown_ops_are_still_delimited() {
        let mut buf = BytesMut::new();
        let h = RequestHeader { op: 0x7f, flags: 0, id: 9, key_len: 2, val_len: 0, arg: 0 };
        buf.put_slice(&h.encode());
        buf.put_slice(b"xy");
        put_request(&mut buf, Op::Ping, 0, 10, b"", b"", 0);
        let first = decode_request(&mut buf, &LOOSE).unwrap().unwrap();
        assert_eq!((first.op, first.id), (Err(0x7f), 9));
        assert_eq!(decode_request(&mut buf, &LOOSE).unwrap().unwrap().op, Ok(Op::Ping));
    }

    #[test]
    fn items_must_fill_the_region_exactly() {
        let mut region = BytesMut::new();
        put_items(&mut region, &[&b"ab"[..], b"c"]);
        let region = region.freeze();
        assert_eq!(split_items(&region, 2, 10).unwrap().len(), 2);
        assert_eq!(split_items(&region, 1, 10), Err(FrameError::BadItems));
        assert_eq!(split_items(&region, 3, 10), Err(FrameError::BadItems));
        assert_eq!(split_items(&region, 2, 1), Err(FrameError::TooManyItems(2, 1)));
        assert_eq!(split_items(&region, -1, 10), Err(FrameError::TooManyItems(-1, 10)));
        // A huge claimed count is refused without allocating for it.
        assert_eq!(split_items(&region, 1_000_000, usize::MAX), Err(FrameError::BadItems));
        let truncated = region.slice(..region.len() - 1);
        assert_eq!(split_items(&truncated, 2, 10), Err(FrameError::BadItems));
    }

    #[test]
    fn replies_round_trip_with_nils() {
        let mut body = BytesMut::new();
        put_reply_item(&mut body, Some(b"v1"));
        put_reply_item(&mut body, None);
        put_reply_item(&mut body, Some(b""));
        let h = ReplyHeader { status: Status::Array, id: 3, body_len: body.len() as u32, int: 3 };
        let mut buf = BytesMut::new();
        buf.put_slice(&h.encode());
        buf.put_slice(&body);
        assert_eq!(
            decode_reply(&mut buf.clone(), 4),
            Err(FrameError::TooLarge { what: "reply body", len: 14, max: 4 })
        );
        let r = decode_reply(&mut buf, 1 << 10).unwrap().unwrap();
        assert_eq!((r.status, r.id), (Status::Array, 3));
        assert_eq!(r.items().unwrap(), vec![Some(Bytes::from_static(b"v1")), None, Some(Bytes::new())]);
    }

    #[test]
    fn preamble_is_checked_byte_by_byte() {
        let p = Preamble { version: VERSION }.encode();
        let mut buf = BytesMut::from(&p[..3]);
        assert_eq!(Preamble::decode(&mut buf), Ok(None));
        buf.extend_from_slice(&p[3..]);
        assert_eq!(Preamble::decode(&mut buf), Ok(Some(Preamble { version: VERSION })));
        assert_eq!(
            Preamble::decode(&mut BytesMut::from(&b"*1\r\n$4\r\nPING\r\n"[..])),
            Err(FrameError::BadMagic)
        );
    }

    #[test]
    fn fuzz_entry_survives_garbage() {
        let mut wire = BytesMut::new();
        put_request(&mut wire, Op::Get, 0, 1, b"k", b"", 0);
        fuzz_check(&wire);
        fuzz_check(&[0xff; 64]);
        fuzz_check(&[]);
    }
}
