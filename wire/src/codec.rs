//! The gRPC codec of every Shoal service: prost's, with two savings on the hot stream.
//!
//! - Decoding a [`Batch`] (on a node) or a [`BatchReply`] (on a router) first counts the ops or
//!   replies the message holds and reserves room for them. prost otherwise grows the vector one
//!   push at a time, moving every op decoded so far at each doubling: measured as a visible share
//!   of `memmove` under pipelined load (docs/benchmarks.md, the sidecar section).
//! - Encoding skips prost's up-front size pass (`Message::encode` sizes the whole message only to
//!   check that the buffer has room, which tonic's growable buffer always has).
//!
//! Everything else is exactly `tonic_prost::ProstCodec`: the same bytes on the wire, so a client
//! or server built with the stock codec talks to this one.

use std::any::Any;
use std::marker::PhantomData;

use bytes::Buf;
use prost::Message;
use prost::encoding::{WireType, decode_key, decode_varint};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

use crate::proto::{Batch, BatchReply};

/// How deeply [`crate::proto::Frame`]s may nest (an array in an array ...) in a reply that
/// travels as frames. prost's decoder refuses a message nested more than 100 deep, and one such
/// refusal fails the whole stream, every client's ops on it included; each level of frames is
/// two messages (`Frame`, `Frames`) under an envelope of at most six (`BatchReply`,
/// `DeferredReply`, `Reply`, `Replies`, `Reply`, `ScriptReply`). A deeper reply (only a script's
/// can be: Redis nests a returned table as deep as Lua's stack allows) travels as the RESP bytes
/// it stands for (`Frame.raw`).
pub const MAX_FRAME_NESTING: usize = 32;

/// Field number of `Batch.ops` and of `BatchReply.replies` (see `proto/shoal.proto`).
const REPEATED_FIELD: u32 = 2;

/// The codec the generated services and clients use (`codec_path` in `build.rs`).
#[derive(Debug, Clone)]
pub struct ShoalCodec<T, U> {
    _pd: PhantomData<(T, U)>,
}

impl<T, U> Default for ShoalCodec<T, U> {
    fn default() -> Self {
        ShoalCodec { _pd: PhantomData }
    }
}

impl<T, U> Codec for ShoalCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ShoalEncoder<T>;
    type Decoder = ShoalDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ShoalEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        ShoalDecoder(PhantomData)
    }
}

#[derive(Debug)]
pub struct ShoalEncoder<T>(PhantomData<T>);

impl<T: Message> Encoder for ShoalEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        // `EncodeBuf` grows as it is written to: no size check needed first.
        item.encode_raw(buf);
        Ok(())
    }
}

#[derive(Debug)]
pub struct ShoalDecoder<U>(PhantomData<U>);

impl<U: Message + Default + 'static> Decoder for ShoalDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let mut item = U::default();
        presize(&mut item, buf.chunk());
        item.merge(buf).map_err(|e| Status::internal(e.to_string()))?;
        Ok(Some(item))
    }
}

/// Reserves room for the ops of a `Batch` or the replies of a `BatchReply` about to be decoded
/// from `bytes` (the whole message: tonic hands a decoder one contiguous frame); other messages
/// are left alone. A malformed message reserves nothing (prost reports the error).
fn presize<U: Any>(item: &mut U, bytes: &[u8]) {
    let item: &mut dyn Any = item;
    if let Some(batch) = item.downcast_mut::<Batch>() {
        batch.ops.reserve(count_field(bytes, REPEATED_FIELD));
    } else if let Some(reply) = item.downcast_mut::<BatchReply>() {
        reply.replies.reserve(count_field(bytes, REPEATED_FIELD));
    }
}

/// How many times length-delimited field `field` occurs at the top level of the message in
/// `bytes`; counts up to the first malformed byte. Never more than half of `bytes.len()` (each
/// occurrence takes at least two bytes), so a hostile count cannot make the reservation large.
fn count_field(mut bytes: &[u8], field: u32) -> usize {
    let mut count = 0;
    while bytes.has_remaining() {
        let Ok((tag, wire_type)) = decode_key(&mut bytes) else { break };
        let skip = match wire_type {
            WireType::Varint => match decode_varint(&mut bytes) {
                Ok(_) => 0,
                Err(_) => break,
            },
            WireType::SixtyFourBit => 8,
            WireType::ThirtyTwoBit => 4,
            WireType::LengthDelimited => {
                let Ok(len) = decode_varint(&mut bytes) else { break };
                if tag == field {
                    count += 1;
                }
                len
            }
            // Groups do not occur in proto3.
            WireType::StartGroup | WireType::EndGroup => break,
        };
        if skip > bytes.len() as u64 {
            break;
        }
        bytes.advance(skip as usize);
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Empty, Get, Op, Reply, op, reply};
    use bytes::Bytes;

    fn get(key: &str) -> Op {
        let get = Get { key: Bytes::from(key.to_string()), ..Default::default() };
        Op { kind: Some(op::Kind::Get(get)), ..Default::default() }
    }

    /// A frame nested as deep as [`MAX_FRAME_NESTING`] inside the deepest envelope decodes; one
    /// nested much deeper would not (which is why deeper ones travel as bytes).
    #[test]
    fn frames_nested_to_the_limit_decode_in_the_deepest_envelope() {
        use crate::proto::{DeferredReply, Frame, Frames, Replies, Reply, ScriptReply, frame, reply};
        let nested = |depth: usize| {
            let mut f = Frame { kind: Some(frame::Kind::Int(1)) };
            for _ in 0..depth {
                f = Frame { kind: Some(frame::Kind::Array(Frames { items: vec![f] })) };
            }
            let script = ScriptReply { frame: Some(f), ..Default::default() };
            let inner = Reply { kind: Some(reply::Kind::Script(Box::new(script))), ..Default::default() };
            let outer = Reply {
                kind: Some(reply::Kind::Replies(Replies { replies: vec![inner] })),
                ..Default::default()
            };
            BatchReply { deferred: vec![DeferredReply { id: 1, reply: Some(outer) }], ..Default::default() }
                .encode_to_vec()
        };
        assert!(BatchReply::decode(&nested(MAX_FRAME_NESTING)[..]).is_ok());
        assert!(BatchReply::decode(&nested(3 * MAX_FRAME_NESTING)[..]).is_err());
    }

    #[test]
    fn counts_the_ops_of_a_batch_and_the_replies_of_a_batch_reply() {
        let batch =
            Batch { id: 9, ops: (0..37).map(|i| get(&format!("key{i}"))).collect(), topology_version: 4 };
        let bytes = batch.encode_to_vec();
        assert_eq!(count_field(&bytes, REPEATED_FIELD), 37);
        let mut decoded = Batch::default();
        presize(&mut decoded, &bytes);
        assert!(decoded.ops.capacity() >= 37);
        decoded.merge(&bytes[..]).unwrap();
        assert_eq!(decoded, batch);

        let replies = BatchReply {
            id: 9,
            replies: (0..5)
                .map(|_| Reply { kind: Some(reply::Kind::Ok(Empty {})), ..Default::default() })
                .collect(),
            more: true,
            deferred: vec![],
        };
        let bytes = replies.encode_to_vec();
        let mut decoded = BatchReply::default();
        presize(&mut decoded, &bytes);
        assert!(decoded.replies.capacity() >= 5);
        assert_eq!(count_field(&bytes, REPEATED_FIELD), 5);
    }

    #[test]
    fn malformed_or_hostile_bytes_reserve_little() {
        // A length far past the end: counted once, then the scan stops.
        let hostile = [0x12, 0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(count_field(&hostile, REPEATED_FIELD) <= 1);
        // Truncated varints, a group, garbage: never more than one per two bytes.
        for bytes in [&[0x12][..], &[0x13, 0x01], &[0xff; 64], &[0x12, 0x00, 0x12, 0x00, 0x12]] {
            assert!(count_field(bytes, REPEATED_FIELD) <= bytes.len() / 2, "{bytes:?}");
        }
        let mut b = Batch::default();
        presize(&mut b, &[0xff; 64]);
        assert!(b.ops.capacity() <= 32);
    }

    #[test]
    fn presize_leaves_other_messages_alone() {
        let mut r = Reply::default();
        presize(&mut r, &[0x12, 0x00]);
        assert_eq!(r, Reply::default());
    }
}
