//! Large items in pieces: the sending side splits, the receiving side assembles (the rules are at
//! the top of `shoal.proto`). Written once here so that the router and the node cannot disagree.
//!
//! Why: one router→node stream is shared by every client of the router. A single message holding
//! a 512 MiB value (or 700 replies of 1 MiB) would hold the stream for its whole transfer, keep
//! gRPC buffers of that size alive afterwards, and past the message limit break the stream for
//! everyone. In pieces, no message is much larger than [`PIECE_BYTES`], other clients' ops travel
//! between the pieces, and the receiver allocates the item once, at its final size.

use bytes::{Bytes, BytesMut};
use prost::Message;

use crate::proto::{self, ExportEntry, Op, Piece, Reply, op, reply};

/// Items (ops, replies, values) larger than this travel in pieces of this size.
pub const PIECE_BYTES: usize = 1 << 20;
/// The largest item a receiver assembles: the largest value (Redis's `proto-max-bulk-len`) plus
/// room for the op or reply around it. Protects a receiver from a sender that never stops.
pub const MAX_ASSEMBLED_BYTES: usize = (512 << 20) + (4 << 20);

/// Why pieces could not be put together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PieceError {
    #[error("an item in pieces is larger than the receiver's limit")]
    TooLarge,
    #[error("assembled pieces are not a valid message: {0}")]
    Decode(String),
    #[error("pieces followed by an item they cannot belong to")]
    Stray,
}

/// Collects the pieces of one item.
#[derive(Debug)]
pub struct Assembler {
    buf: Option<BytesMut>,
    limit: usize,
}

impl Default for Assembler {
    fn default() -> Self {
        Assembler { buf: None, limit: MAX_ASSEMBLED_BYTES }
    }
}

impl Assembler {
    pub fn is_empty(&self) -> bool {
        self.buf.is_none()
    }

    /// Adds a piece; the first piece's `total` sizes the buffer (capped, so a wrong total cannot
    /// make the receiver allocate more than an honest item needs).
    pub fn push(&mut self, piece: Piece) -> Result<(), PieceError> {
        let limit = self.limit;
        let buf = self.buf.get_or_insert_with(|| BytesMut::with_capacity((piece.total as usize).min(limit)));
        if buf.len() + piece.data.len() > limit {
            self.buf = None;
            return Err(PieceError::TooLarge);
        }
        buf.extend_from_slice(&piece.data);
        Ok(())
    }

    /// The pieces collected so far, followed by `tail`, as one buffer; the assembler is empty
    /// again afterwards.
    pub fn finish(&mut self, tail: &[u8]) -> Result<Bytes, PieceError> {
        let mut buf = self.buf.take().unwrap_or_default();
        if buf.len() + tail.len() > self.limit {
            return Err(PieceError::TooLarge);
        }
        buf.extend_from_slice(tail);
        Ok(buf.freeze())
    }

    /// Drops a partly collected item (its stream broke, or it was refused).
    pub fn clear(&mut self) {
        self.buf = None;
    }
}

/// `data` cut into pieces of at most `size` bytes (slices of the same buffer: no copies); the
/// first carries the total size.
fn cut(data: &Bytes, size: usize) -> impl Iterator<Item = Piece> + '_ {
    let total = data.len() as u64;
    (0..data.len()).step_by(size.max(1)).map(move |start| Piece {
        data: data.slice(start..(start + size).min(data.len())),
        total: if start == 0 { total } else { 0 },
    })
}

// --- ops: the router sends, the node assembles ------------------------------------------------

/// Whether `op` must travel in pieces.
#[inline]
pub fn op_is_large(op: &Op) -> bool {
    op_len_bound(op) > PIECE_BYTES && op.encoded_len() > PIECE_BYTES
}

/// What a GET or a SET op encodes to beyond its key and value, at most: every other field set,
/// every length and number at its longest varint (see `op_len_bound`'s test).
const GET_OVERHEAD: usize = 48;
const SET_OVERHEAD: usize = 80;
/// A command op (a typed command: LPUSH, HSET, ...) beyond its arguments and keys, at most: the
/// op's flags, the kind's tag and length, `readonly`, `key_index` and `resp` at their longest.
const COMMAND_OVERHEAD: usize = 64;
/// What each argument or key of a command adds beyond its bytes, at most: a tag and a length.
const PER_BYTES_FIELD: usize = 11;

/// An upper bound on `op.encoded_len()`, cheap for the ops pipelines send most (GET and SET: a
/// sum of two lengths, where encoding's length walks every field). What the router sizes a
/// batch by (a soft limit) and tells a large op from a small one with, per op.
#[inline]
pub fn op_len_bound(op: &Op) -> usize {
    match &op.kind {
        Some(op::Kind::Get(g)) => g.key.len() + GET_OVERHEAD,
        Some(op::Kind::Set(s)) => s.key.len() + s.value.len() + SET_OVERHEAD,
        // Typed commands: a sum over the arguments, where encoding's length walks each with its
        // varint (a scratch command carries values too and is measured exactly).
        Some(op::Kind::Command(c)) if c.inputs.is_empty() && c.outputs.is_empty() => {
            c.args.iter().chain(&c.keys).map(|a| a.len() + PER_BYTES_FIELD).sum::<usize>() + COMMAND_OVERHEAD
        }
        _ => op.encoded_len(),
    }
}

/// The ops that carry `op` in pieces: its encoding cut into `piece` ops, then an `assembled` op.
pub fn op_in_pieces(op: &Op) -> Vec<Op> {
    let encoded = Bytes::from(op.encode_to_vec());
    let mut out: Vec<Op> = cut(&encoded, PIECE_BYTES)
        .map(|p| Op { kind: Some(op::Kind::Piece(p)), ..Default::default() })
        .collect();
    out.push(Op { kind: Some(op::Kind::Assembled(proto::Empty {})), ..Default::default() });
    out
}

/// Assembles ops sent in pieces. A stream carries one op in pieces at a time: its pieces arrive
/// in order, with other (whole) ops between them, which pass through untouched.
#[derive(Debug, Default)]
pub struct OpAssembler {
    asm: Assembler,
    /// A piece of the op being assembled was refused; the op fails when it completes.
    failed: Option<PieceError>,
}

/// What a received op amounts to.
#[derive(Debug, PartialEq)]
pub enum Fed {
    /// A piece: nothing to apply, no reply.
    Piece,
    /// An op to apply (received whole, or assembled from its pieces).
    Op(Op),
    /// An op that cannot be applied; it is answered with this error.
    Failed(PieceError),
}

impl OpAssembler {
    /// Takes the next received op.
    pub fn feed(&mut self, op: Op) -> Fed {
        match op.kind {
            Some(op::Kind::Piece(p)) => {
                if self.failed.is_none()
                    && let Err(e) = self.asm.push(p)
                {
                    self.failed = Some(e);
                }
                Fed::Piece
            }
            Some(op::Kind::Assembled(_)) => {
                let bytes = self.asm.finish(&[]);
                match (self.failed.take(), bytes) {
                    (Some(e), _) | (None, Err(e)) => Fed::Failed(e),
                    (None, Ok(bytes)) => match Op::decode(bytes) {
                        Ok(op) => Fed::Op(op),
                        Err(e) => Fed::Failed(PieceError::Decode(e.to_string())),
                    },
                }
            }
            _ => Fed::Op(op),
        }
    }

    /// Forgets a partly received op.
    pub fn clear(&mut self) {
        self.asm.clear();
        self.failed = None;
    }
}

// --- replies: the node sends, the router assembles ----------------------------------------------

/// Appends `r` to `out`, in pieces if it is large: a value's (or an entry's) bytes are cut where
/// they lie (no copy), anything else is encoded and cut. Returns the bytes appended.
pub fn push_reply(r: Reply, out: &mut impl Extend<Reply>) -> usize {
    let size = r.encoded_len();
    if size <= PIECE_BYTES {
        out.extend([r]);
        return size;
    }
    let piece = |p: Piece| Reply { kind: Some(reply::Kind::Piece(p)), ..Default::default() };
    match r.kind {
        Some(reply::Kind::Value(v)) => {
            let head = v.slice(..v.len() - v.len() % PIECE_BYTES.max(1));
            let tail = v.slice(head.len()..);
            out.extend(cut(&head, PIECE_BYTES).map(piece));
            out.extend([Reply { kind: Some(reply::Kind::Value(tail)), ..Default::default() }]);
        }
        Some(reply::Kind::Entry(mut e)) if e.value.len() > PIECE_BYTES => {
            let v = std::mem::take(&mut e.value);
            let head = v.slice(..v.len() - v.len() % PIECE_BYTES);
            e.value = v.slice(head.len()..);
            out.extend(cut(&head, PIECE_BYTES).map(piece));
            out.extend([Reply { kind: Some(reply::Kind::Entry(e)), ..Default::default() }]);
        }
        kind => {
            let encoded = Bytes::from(Reply { kind, ..Default::default() }.encode_to_vec());
            out.extend(cut(&encoded, PIECE_BYTES).map(piece));
            out.extend([Reply { kind: Some(reply::Kind::Assembled(proto::Empty {})), ..Default::default() }]);
        }
    }
    size
}

/// Assembles replies sent in pieces (one per stream). A reply that cannot be put together (larger
/// than the receiver's limit, or not a valid message once whole) fails by itself: its pieces are
/// taken and dropped, and its place in the order gets the error ([`PieceError::fails_the_stream`]
/// says which errors leave the stream out of step instead).
#[derive(Debug, Default)]
pub struct ReplyAssembler {
    asm: Assembler,
    /// A piece of the reply being assembled was refused; the reply fails when it completes.
    failed: Option<PieceError>,
}

impl ReplyAssembler {
    /// Takes the next received reply: `Ok(None)` for a piece, else the complete reply, or the
    /// error that takes its place.
    pub fn feed(&mut self, r: Reply) -> Result<Option<Reply>, PieceError> {
        match r.kind {
            Some(reply::Kind::Piece(p)) => {
                if self.failed.is_none()
                    && let Err(e) = self.asm.push(p)
                {
                    self.failed = Some(e);
                }
                Ok(None)
            }
            _ if self.asm.is_empty() && self.failed.is_none() => Ok(Some(r)),
            Some(reply::Kind::Value(tail)) => {
                let value = self.finish(&tail)?;
                Ok(Some(Reply { kind: Some(reply::Kind::Value(value)), ..Default::default() }))
            }
            Some(reply::Kind::Entry(mut e)) => {
                e.value = self.finish(&e.value)?;
                Ok(Some(Reply { kind: Some(reply::Kind::Entry(e)), ..Default::default() }))
            }
            Some(reply::Kind::Assembled(_)) => {
                let bytes = self.finish(&[])?;
                Reply::decode(bytes).map(Some).map_err(|e| PieceError::Decode(e.to_string()))
            }
            _ => {
                self.asm.clear();
                self.failed = None;
                Err(PieceError::Stray)
            }
        }
    }

    fn finish(&mut self, tail: &[u8]) -> Result<Bytes, PieceError> {
        let bytes = self.asm.finish(tail);
        match self.failed.take() {
            Some(e) => Err(e),
            None => bytes,
        }
    }
}

impl PieceError {
    /// Whether the stream is out of step after this (pieces that belong to nothing), rather than
    /// one item failed in its place.
    pub fn fails_the_stream(&self) -> bool {
        matches!(self, PieceError::Stray)
    }
}

// --- exported entries: the old owner sends, the new owner assembles ---------------------------------

/// Appends `e` to `out`, as several `partial` entries if its value is large. Returns the bytes
/// appended.
pub fn push_entry(e: ExportEntry, out: &mut Vec<ExportEntry>) -> usize {
    let size = e.key.len() + e.value.len() + 16;
    if e.value.len() <= PIECE_BYTES {
        out.push(e);
        return size;
    }
    let pieces = e.value.len().div_ceil(PIECE_BYTES);
    for (i, start) in (0..e.value.len()).step_by(PIECE_BYTES).enumerate() {
        out.push(ExportEntry {
            slot: e.slot,
            key: e.key.clone(),
            value: e.value.slice(start..(start + PIECE_BYTES).min(e.value.len())),
            expire_at_ms: e.expire_at_ms,
            partial: i + 1 < pieces,
            value_type: e.value_type,
        });
    }
    size
}

/// Joins `partial` entries back into whole ones (per export stream; a partial entry may end one
/// chunk and continue in the next).
#[derive(Debug, Default)]
pub struct EntryAssembler {
    pending: Option<(Bytes, Assembler)>,
}

impl EntryAssembler {
    /// Takes the next received entry: `Ok(None)` while a value is incomplete.
    pub fn feed(&mut self, e: ExportEntry) -> Result<Option<ExportEntry>, PieceError> {
        if let Some((key, _)) = &self.pending
            && *key != e.key
        {
            self.pending = None;
            return Err(PieceError::Stray);
        }
        if e.partial {
            let (_, asm) = self.pending.get_or_insert_with(|| (e.key.clone(), Assembler::default()));
            asm.push(Piece { data: e.value, total: 0 })?;
            return Ok(None);
        }
        match self.pending.take() {
            None => Ok(Some(e)),
            Some((_, mut asm)) => Ok(Some(ExportEntry { value: asm.finish(&e.value)?, ..e })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Get, Set};

    fn big(n: usize) -> Bytes {
        Bytes::from((0..n).map(|i| (i % 251) as u8).collect::<Vec<u8>>())
    }

    #[test]
    fn the_length_bound_of_a_get_or_set_is_never_below_its_encoding() {
        use crate::proto::{Expiry, SetCondition};
        for len in [0, 1, 127, 128, 16_383, 16_384, PIECE_BYTES - 64, PIECE_BYTES, PIECE_BYTES + 1] {
            let key = big(len);
            let get = Op {
                fallback: true,
                no_touch: true,
                kind: Some(op::Kind::Get(Get { key: key.clone(), nil_if_not_string: true, track: u64::MAX })),
            };
            assert!(op_len_bound(&get) >= get.encoded_len(), "GET of a {len}-byte key");
            let set = Op {
                fallback: true,
                no_touch: true,
                kind: Some(op::Kind::Set(Set {
                    key: key.clone(),
                    value: key.clone(),
                    expiry: Some(Expiry { ms: i64::MIN, relative: true }),
                    condition: SetCondition::SetIfPresent as i32,
                    keep_ttl: true,
                    get: true,
                })),
            };
            assert!(op_len_bound(&set) >= set.encoded_len(), "SET of a {len}-byte key and value");
            assert_eq!(op_is_large(&get), get.encoded_len() > PIECE_BYTES);
            assert_eq!(op_is_large(&set), set.encoded_len() > PIECE_BYTES);
        }
    }

    #[test]
    fn the_length_bound_of_a_command_is_never_below_its_encoding() {
        use crate::proto::Command;
        for len in [0, 1, 127, 128, 16_383, 16_384, PIECE_BYTES - 64, PIECE_BYTES, PIECE_BYTES + 1] {
            for args in [1, 2, 3, 40] {
                let command = Command {
                    args: (0..args).map(|i| big(if i == 1 { len } else { 16 })).collect(),
                    readonly: true,
                    key_index: u32::MAX,
                    keys: vec![big(len), big(3)],
                    scratch: false,
                    inputs: Vec::new(),
                    outputs: Vec::new(),
                    resp: u32::MAX,
                };
                let op =
                    Op { fallback: true, no_touch: true, kind: Some(op::Kind::Command(Box::new(command))) };
                assert!(op_len_bound(&op) >= op.encoded_len(), "{args} arguments, one of {len} bytes");
                assert!(op_len_bound(&op) <= op.encoded_len() + COMMAND_OVERHEAD + 11 * (args + 2));
                assert_eq!(op_is_large(&op), op.encoded_len() > PIECE_BYTES);
            }
        }
    }

    #[test]
    fn a_large_op_crosses_in_pieces_and_comes_out_whole() {
        let op = Op {
            kind: Some(op::Kind::Set(Set {
                key: "k".into(),
                value: big(3 * PIECE_BYTES + 17),
                ..Default::default()
            })),
            ..Default::default()
        };
        assert!(op_is_large(&op));
        let sent = op_in_pieces(&op);
        assert_eq!(sent.len(), 5, "four pieces and the assembled op");
        assert!(
            sent.iter().all(|o| o.encoded_len() <= PIECE_BYTES + 16),
            "no message part is much larger than a piece"
        );
        let mut asm = OpAssembler::default();
        let mut got = Vec::new();
        for o in sent {
            match asm.feed(o) {
                Fed::Piece => {}
                Fed::Op(op) => got.push(op),
                Fed::Failed(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, vec![op]);
        let small = Op {
            kind: Some(op::Kind::Get(Get { key: "k".into(), ..Default::default() })),
            ..Default::default()
        };
        assert_eq!(asm.feed(small.clone()), Fed::Op(small), "small ops pass through");
    }

    #[test]
    fn whole_ops_between_the_pieces_of_another_pass_through() {
        let big = Op {
            kind: Some(op::Kind::Set(Set {
                key: "k".into(),
                value: big(2 * PIECE_BYTES),
                ..Default::default()
            })),
            ..Default::default()
        };
        let get = Op {
            kind: Some(op::Kind::Get(Get { key: "other".into(), ..Default::default() })),
            ..Default::default()
        };
        let mut asm = OpAssembler::default();
        let mut got = Vec::new();
        for o in op_in_pieces(&big) {
            // Other clients' ops ride in the same batches as the pieces.
            got.extend(match asm.feed(get.clone()) {
                Fed::Op(op) => Some(op),
                other => panic!("{other:?}"),
            });
            if let Fed::Op(op) = asm.feed(o) {
                got.push(op);
            }
        }
        assert_eq!(got.len(), 5);
        assert_eq!(got.last(), Some(&big));
        assert!(got[..4].iter().all(|o| *o == get));
        let piece =
            || Op { kind: Some(op::Kind::Piece(Piece { data: "x".into(), total: 9 })), ..Default::default() };
        assert_eq!(asm.feed(piece()), Fed::Piece);
        let assembled = Op { kind: Some(op::Kind::Assembled(proto::Empty {})), ..Default::default() };
        assert!(matches!(asm.feed(assembled), Fed::Failed(PieceError::Decode(_))), "\"x\" is not an op");
    }

    #[test]
    fn large_replies_are_cut_without_copying_and_reassembled() {
        let value = big(2 * PIECE_BYTES + 5);
        let mut out = Vec::new();
        push_reply(Reply { kind: Some(reply::Kind::Value(value.clone())), ..Default::default() }, &mut out);
        assert_eq!(out.len(), 3);
        let Some(reply::Kind::Piece(p)) = &out[0].kind else { panic!() };
        assert_eq!(p.data.as_ptr(), value.as_ptr(), "pieces are slices of the value");
        let keys = Reply {
            kind: Some(reply::Kind::Keys(proto::KeyList {
                keys: (0..3).map(|_| big(PIECE_BYTES / 2)).collect(),
            })),
            ..Default::default()
        };
        push_reply(keys.clone(), &mut out);
        let entry = ExportEntry {
            slot: 3,
            key: "k".into(),
            value: big(PIECE_BYTES + 1),
            expire_at_ms: 7,
            partial: false,
            value_type: 0,
        };
        push_reply(
            Reply { kind: Some(reply::Kind::Entry(Box::new(entry.clone()))), ..Default::default() },
            &mut out,
        );
        push_reply(Reply { kind: Some(reply::Kind::Int(4)), ..Default::default() }, &mut out);
        let mut asm = ReplyAssembler::default();
        let got: Vec<Reply> = out.into_iter().filter_map(|r| asm.feed(r).unwrap()).collect();
        assert_eq!(
            got,
            vec![
                Reply { kind: Some(reply::Kind::Value(value)), ..Default::default() },
                keys,
                Reply { kind: Some(reply::Kind::Entry(Box::new(entry))), ..Default::default() },
                Reply { kind: Some(reply::Kind::Int(4)), ..Default::default() },
            ]
        );
    }

    #[test]
    fn large_exported_values_travel_as_partial_entries() {
        let e = ExportEntry {
            slot: 1,
            key: "big".into(),
            value: big(3 * PIECE_BYTES),
            expire_at_ms: 0,
            partial: false,
            // A typed value (a hash's serialized form) keeps its type across the pieces.
            value_type: 1,
        };
        let small = ExportEntry { slot: 1, key: "s".into(), value: "v".into(), ..Default::default() };
        let mut out = Vec::new();
        push_entry(e.clone(), &mut out);
        push_entry(small.clone(), &mut out);
        assert_eq!(out.len(), 4);
        assert!(out[..2].iter().all(|e| e.partial) && !out[2].partial);
        let mut asm = EntryAssembler::default();
        let got: Vec<_> = out.into_iter().filter_map(|e| asm.feed(e).unwrap()).collect();
        assert_eq!(got, vec![e, small]);
    }

    /// A reply larger than the receiver takes fails in its place, and the replies after it
    /// come through (issue 38: one client's huge reply must not fail the stream under others).
    #[test]
    fn a_reply_past_the_limit_fails_alone() {
        let mut out = Vec::new();
        let value = big(3 * PIECE_BYTES);
        push_reply(Reply { kind: Some(reply::Kind::Value(value.clone())), ..Default::default() }, &mut out);
        let keys = Reply {
            kind: Some(reply::Kind::Keys(proto::KeyList { keys: vec![big(2 * PIECE_BYTES)] })),
            ..Default::default()
        };
        push_reply(keys, &mut out);
        push_reply(Reply { kind: Some(reply::Kind::Int(4)), ..Default::default() }, &mut out);
        let mut asm =
            ReplyAssembler { asm: Assembler { limit: PIECE_BYTES, ..Assembler::default() }, failed: None };
        let got: Vec<_> = out.into_iter().filter_map(|r| asm.feed(r).transpose()).collect();
        assert_eq!(got.len(), 3, "one result per reply: {got:?}");
        assert_eq!(got[0], Err(PieceError::TooLarge));
        assert_eq!(got[1], Err(PieceError::TooLarge));
        assert_eq!(got[2], Ok(Reply { kind: Some(reply::Kind::Int(4)), ..Default::default() }));
        assert!(!PieceError::TooLarge.fails_the_stream() && PieceError::Stray.fails_the_stream());
    }

    #[test]
    fn an_assembler_never_grows_past_the_limit() {
        let mut asm = Assembler { limit: 1000, ..Assembler::default() };
        asm.push(Piece { data: Bytes::new(), total: u64::MAX }).unwrap();
        assert!(
            asm.buf.as_ref().unwrap().capacity() <= 1000,
            "a lying total allocates no more than the limit"
        );
        let chunk = Bytes::from(vec![0u8; 300]);
        let mut result = Ok(());
        for _ in 0..4 {
            result = asm.push(Piece { data: chunk.clone(), total: 0 });
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(PieceError::TooLarge));
        assert!(asm.is_empty(), "the partial item is dropped");
    }
}
