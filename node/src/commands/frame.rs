//! Building [`Frame`] replies.

use bytes::Bytes;
use shoal_wire::num::IntText;
use shoal_wire::proto::{Empty, Frame, Frames, frame::Kind};

/// Appends `f` in RESP3 (`resp3`) or RESP2 to `out`, with the router's encoding rules for each
/// frame kind (`router/src/resp/reply.rs`, whose tests pin the bytes).
pub fn encode(f: &Frame, resp3: bool, out: &mut Vec<u8>) {
    fn header(out: &mut Vec<u8>, prefix: u8, n: usize) {
        out.push(prefix);
        out.extend_from_slice(IntText::new(n as i64).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    fn bulk(out: &mut Vec<u8>, b: &[u8]) {
        header(out, b'$', b.len());
        out.extend_from_slice(b);
        out.extend_from_slice(b"\r\n");
    }
    fn line(out: &mut Vec<u8>, prefix: u8, text: &[u8]) {
        out.push(prefix);
        out.extend_from_slice(text);
        out.extend_from_slice(b"\r\n");
    }
    let null = |out: &mut Vec<u8>, resp2: &[u8]| out.extend_from_slice(if resp3 { b"_\r\n" } else { resp2 });
    match &f.kind {
        Some(Kind::Bulk(b)) => bulk(out, b),
        Some(Kind::Int(n)) => line(out, b':', IntText::new(*n).as_bytes()),
        Some(Kind::Error(e)) => line(out, b'-', e.replace(['\r', '\n'], " ").as_bytes()),
        Some(Kind::Simple(s)) => line(out, b'+', s.as_bytes()),
        Some(Kind::Nil(_)) | None => null(out, b"$-1\r\n"),
        Some(Kind::NullArray(_)) => null(out, b"*-1\r\n"),
        Some(Kind::Double(d)) if resp3 => line(out, b',', d),
        Some(Kind::Double(d)) => bulk(out, d),
        Some(Kind::Array(items)) => {
            header(out, b'*', items.items.len());
            items.items.iter().for_each(|i| encode(i, resp3, out));
        }
        Some(Kind::Set(items)) => {
            header(out, if resp3 { b'~' } else { b'*' }, items.items.len());
            items.items.iter().for_each(|i| encode(i, resp3, out));
        }
        Some(Kind::Map(items)) => {
            if resp3 {
                header(out, b'%', items.items.len() / 2);
            } else {
                header(out, b'*', items.items.len());
            }
            items.items.iter().for_each(|i| encode(i, resp3, out));
        }
        Some(Kind::Pairs(items)) if resp3 => {
            header(out, b'*', items.items.len() / 2);
            for pair in items.items.chunks(2) {
                header(out, b'*', pair.len());
                pair.iter().for_each(|i| encode(i, resp3, out));
            }
        }
        Some(Kind::Pairs(items)) => {
            header(out, b'*', items.items.len());
            items.items.iter().for_each(|i| encode(i, resp3, out));
        }
    }
}

/// Frame constructors, named after the RESP types they become.
#[derive(Debug)]
pub struct F;

impl F {
    fn of(kind: Kind) -> Frame {
        Frame { kind: Some(kind) }
    }

    pub fn bulk(b: impl Into<Bytes>) -> Frame {
        F::of(Kind::Bulk(b.into()))
    }

    pub fn bulk_from(b: &[u8]) -> Frame {
        F::bulk(Bytes::copy_from_slice(b))
    }

    /// Bulk strings of `items`, copied into one buffer that every frame slices (two
    /// allocations for the lot, where `bulk_from` takes one per element).
    pub fn bulks<'a>(items: impl IntoIterator<Item = &'a [u8]>) -> Vec<Frame> {
        let (mut all, mut ends) = (Vec::new(), Vec::new());
        for b in items {
            all.extend_from_slice(b);
            ends.push(all.len());
        }
        let all = Bytes::from(all);
        let mut start = 0;
        ends.into_iter()
            .map(|end| {
                let f = F::bulk(all.slice(start..end));
                start = end;
                f
            })
            .collect()
    }

    pub fn int(n: i64) -> Frame {
        F::of(Kind::Int(n))
    }

    pub fn nil() -> Frame {
        F::of(Kind::Nil(Empty {}))
    }

    pub fn null_array() -> Frame {
        F::of(Kind::NullArray(Empty {}))
    }

    pub fn ok() -> Frame {
        F::of(Kind::Simple("OK".into()))
    }

    pub fn error(text: String) -> Frame {
        F::of(Kind::Error(text))
    }

    /// A double as Redis prints it (`%.17g`): a bulk string in RESP2, `,` in RESP3.
    pub fn double(text: String) -> Frame {
        F::of(Kind::Double(text.into()))
    }

    pub fn array(items: Vec<Frame>) -> Frame {
        F::of(Kind::Array(Frames { items }))
    }

    /// A map given as alternating keys and values.
    pub fn map(flat: Vec<Frame>) -> Frame {
        F::of(Kind::Map(Frames { items: flat }))
    }

    /// Pairs given flat (`a1 b1 a2 b2 ...`): a flat array in RESP2, an array of two-element
    /// arrays in RESP3 (HRANDFIELD WITHVALUES, ZRANGE WITHSCORES).
    pub fn pairs(flat: Vec<Frame>) -> Frame {
        F::of(Kind::Pairs(Frames { items: flat }))
    }

    pub fn set(items: Vec<Frame>) -> Frame {
        F::of(Kind::Set(Frames { items }))
    }

    pub fn bulk_or_nil(b: Option<&[u8]>) -> Frame {
        b.map_or_else(F::nil, F::bulk_from)
    }
}
