//! Building [`Frame`] replies.

use bytes::Bytes;
use shoal_wire::codec::MAX_FRAME_NESTING;
use shoal_wire::num::IntText;
use shoal_wire::proto::{Empty, Frame, Frames, frame::Kind};

/// Appends `f` in RESP3 (`resp3`) or RESP2 to `out`, with the router's encoding rules for each
/// frame kind (`router/src/resp/reply.rs`, whose tests pin the bytes).
pub fn encode(f: &Frame, resp3: bool, out: &mut Vec<u8>) {
    use length_line as header;
    fn bulk(out: &mut Vec<u8>, b: &[u8]) {
        length_line(out, b'$', b.len());
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
        Some(Kind::Keyed(items)) if resp3 => {
            header(out, b'%', items.items.len() / 2);
            items.items.iter().for_each(|i| encode(i, resp3, out));
        }
        Some(Kind::Keyed(items)) => {
            header(out, b'*', items.items.len() / 2);
            for pair in items.items.chunks(2) {
                header(out, b'*', pair.len());
                pair.iter().for_each(|i| encode(i, resp3, out));
            }
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
        Some(Kind::Raw(bytes)) => out.extend_from_slice(bytes),
        Some(Kind::Boolean(b)) if resp3 => out.extend_from_slice(if *b { b"#t\r\n" } else { b"#f\r\n" }),
        Some(Kind::Boolean(b)) => out.extend_from_slice(if *b { b":1\r\n" } else { b":0\r\n" }),
        Some(Kind::BigNumber(n)) if resp3 => line(out, b'(', n),
        Some(Kind::BigNumber(n)) => bulk(out, n),
        Some(Kind::Verbatim(v)) if resp3 => {
            header(out, b'=', v.len());
            out.extend_from_slice(v);
            out.extend_from_slice(b"\r\n");
        }
        Some(Kind::Verbatim(v)) => bulk(out, v.get(4..).unwrap_or_default()),
    }
}

/// `f` as it can travel to the router: itself, or (nested deeper than frames may travel, see
/// [`MAX_FRAME_NESTING`]) the RESP it stands for in the client's protocol, as `raw` bytes.
pub fn for_the_wire(f: Frame, resp3: bool) -> Frame {
    if !nested_deeper(&f, MAX_FRAME_NESTING) {
        return f;
    }
    let mut out = Vec::new();
    encode(&f, resp3, &mut out);
    Frame { kind: Some(Kind::Raw(out.into())) }
}

/// Whether `f` holds more than `levels` levels of nested frames (looking no deeper than that).
fn nested_deeper(f: &Frame, levels: usize) -> bool {
    let items = match &f.kind {
        Some(
            Kind::Array(items)
            | Kind::Map(items)
            | Kind::Set(items)
            | Kind::Pairs(items)
            | Kind::Keyed(items),
        ) => items,
        _ => return false,
    };
    levels == 0 || items.items.iter().any(|i| nested_deeper(i, levels - 1))
}

/// The bulk strings of a `raw` frame as [`F::bulk_array`] writes it (`None` for other bytes):
/// for code and tests that look into a reply rather than pass it on.
pub fn raw_bulks(raw: &[u8]) -> Option<Vec<Bytes>> {
    fn line(raw: &[u8], at: &mut usize, prefix: u8) -> Option<usize> {
        let rest = raw.get(*at..)?.strip_prefix(&[prefix])?;
        let end = rest.windows(2).position(|w| w == b"\r\n")?;
        let n = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
        *at += 1 + end + 2;
        Some(n)
    }
    let mut at = 0;
    let n = line(raw, &mut at, b'*')?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let len = line(raw, &mut at, b'$')?;
        let item = raw.get(at..at + len)?;
        out.push(Bytes::copy_from_slice(item));
        at += len + 2;
    }
    (at == raw.len()).then_some(out)
}

/// Appends a RESP length line (`*3\r\n`, `$5\r\n`); short lengths, the common case, skip the
/// general formatter.
fn length_line(out: &mut Vec<u8>, prefix: u8, n: usize) {
    match n {
        0..10 => out.extend_from_slice(&[prefix, b'0' + n as u8, b'\r', b'\n']),
        10..100 => {
            out.extend_from_slice(&[prefix, b'0' + (n / 10) as u8, b'0' + (n % 10) as u8, b'\r', b'\n'])
        }
        _ => {
            out.push(prefix);
            out.extend_from_slice(IntText::new(n as i64).as_bytes());
            out.extend_from_slice(b"\r\n");
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

    /// An array of bulk strings, encoded here at once (it reads the same in RESP2 and RESP3):
    /// one buffer for the whole reply, where frames would cost an allocation per element.
    pub fn bulk_array<'a>(items: impl IntoIterator<Item = &'a [u8]>) -> Frame {
        let mut body = Vec::new();
        let mut n = 0;
        for b in items {
            length_line(&mut body, b'$', b.len());
            body.extend_from_slice(b);
            body.extend_from_slice(b"\r\n");
            n += 1;
        }
        let mut out = Vec::with_capacity(body.len() + 16);
        length_line(&mut out, b'*', n);
        out.extend_from_slice(&body);
        F::of(Kind::Raw(out.into()))
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

    pub fn status(text: &str) -> Frame {
        F::of(Kind::Simple(text.into()))
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

    /// A map given flat (`k1 v1 k2 v2 ...`): a RESP3 map, an array of `[k, v]` arrays in RESP2
    /// (XREAD's streams).
    pub fn keyed(flat: Vec<Frame>) -> Frame {
        F::of(Kind::Keyed(Frames { items: flat }))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_arrays_encode_like_arrays_of_bulks_in_both_protocols() {
        let long = vec![b'x'; 1234];
        let items: Vec<&[u8]> = vec![b"", b"a", &[b'b'; 10], &[b'c'; 99], &[b'd'; 100], &long];
        let raw = F::bulk_array(items.iter().copied());
        let framed = F::array(items.iter().map(|b| F::bulk_from(b)).collect());
        for resp3 in [false, true] {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            encode(&raw, resp3, &mut a);
            encode(&framed, resp3, &mut b);
            assert_eq!(a, b, "resp3: {resp3}");
        }
        let Some(Kind::Raw(bytes)) = &raw.kind else { panic!("{raw:?}") };
        let back = raw_bulks(bytes).expect("parses");
        assert_eq!(back.iter().map(|b| &b[..]).collect::<Vec<_>>(), items);
        assert_eq!(raw_bulks(&bytes[..bytes.len() - 1]), None, "truncated");
        let Some(Kind::Raw(empty)) = F::bulk_array(std::iter::empty()).kind else { panic!() };
        assert_eq!(&empty[..], b"*0\r\n");
    }
}
