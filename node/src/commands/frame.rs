//! Building [`Frame`] replies.

use bytes::Bytes;
use shoal_wire::proto::{Empty, Frame, Frames, frame::Kind};

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
