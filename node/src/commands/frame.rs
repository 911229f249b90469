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

/// The frame a `raw` reply stands for, read back from the RESP the node wrote at once ([`Raw`],
/// [`F::bulk_array`]: arrays, bulk strings, integers, nils, status and error lines); `None` for
/// other bytes. For code and tests that look into a reply rather than pass it on (a script's
/// `redis.call`).
pub fn raw_frame(raw: &[u8]) -> Option<Frame> {
    fn line<'a>(raw: &'a [u8], at: &mut usize) -> Option<(u8, &'a [u8])> {
        let rest = raw.get(*at..)?;
        let end = rest.windows(2).position(|w| w == b"\r\n")?;
        *at += end + 2;
        Some((*rest.first()?, &rest[1..end]))
    }
    fn number(text: &[u8]) -> Option<i64> {
        shoal_wire::num::parse_i64(text)
    }
    fn value(raw: &[u8], at: &mut usize, depth: usize) -> Option<Frame> {
        let (kind, text) = line(raw, at)?;
        Some(match kind {
            b'*' if number(text)? < 0 => F::null_array(),
            b'*' if depth < MAX_FRAME_NESTING => {
                let n = usize::try_from(number(text)?).ok()?;
                let mut items = Vec::with_capacity(n.min(raw.len()));
                for _ in 0..n {
                    items.push(value(raw, at, depth + 1)?);
                }
                F::array(items)
            }
            b'$' if number(text)? < 0 => F::nil(),
            b'$' => {
                let len = usize::try_from(number(text)?).ok()?;
                let item = raw.get(*at..at.checked_add(len)?)?;
                if raw.get(*at + len..*at + len + 2)? != b"\r\n" {
                    return None;
                }
                *at += len + 2;
                F::bulk_from(item)
            }
            b':' => F::int(number(text)?),
            b'+' => F::status(std::str::from_utf8(text).ok()?),
            b'-' => F::error(String::from_utf8_lossy(text).into_owned()),
            _ => return None,
        })
    }
    let mut at = 0;
    let f = value(raw, &mut at, 0)?;
    (at == raw.len()).then_some(f)
}

/// A reply written as RESP at once, for shapes that read the same in RESP2 and RESP3 (arrays of
/// bulk strings, nested): one buffer for the whole reply, where frames cost an allocation per
/// element (XRANGE's entries, [`F::bulk_array`]).
pub struct Raw(Vec<u8>);

impl Raw {
    pub fn with_capacity(bytes: usize) -> Raw {
        Raw(Vec::with_capacity(bytes))
    }

    /// An array of `n` elements follows.
    pub fn array(&mut self, n: usize) {
        length_line(&mut self.0, b'*', n);
    }

    pub fn bulk(&mut self, b: &[u8]) {
        length_line(&mut self.0, b'$', b.len());
        self.0.extend_from_slice(b);
        self.0.extend_from_slice(b"\r\n");
    }

    pub fn finish(self) -> Frame {
        F::of(Kind::Raw(self.0.into()))
    }
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
        let items: Vec<&[u8]> = items.into_iter().collect();
        let mut raw = Raw::with_capacity(16 + items.iter().map(|b| b.len() + 16).sum::<usize>());
        raw.array(items.len());
        items.iter().for_each(|b| raw.bulk(b));
        raw.finish()
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
        assert_eq!(raw_frame(bytes).expect("parses"), framed);
        assert_eq!(raw_frame(&bytes[..bytes.len() - 1]), None, "truncated");
        let Some(Kind::Raw(empty)) = F::bulk_array(std::iter::empty()).kind else { panic!() };
        assert_eq!(&empty[..], b"*0\r\n");
    }

    #[test]
    fn raw_replies_read_back_as_the_frames_they_stand_for() {
        let nested = F::array(vec![
            F::array(vec![F::bulk_from(b"1-1"), F::array(vec![F::bulk_from(b"f"), F::bulk_from(b"")])]),
            F::int(-7),
            F::nil(),
            F::null_array(),
            F::status("OK"),
            F::error("ERR no".into()),
            F::array(vec![]),
        ]);
        let mut bytes = Vec::new();
        encode(&nested, false, &mut bytes);
        assert_eq!(raw_frame(&bytes), Some(nested));
        for bad in
            [&b"*2\r\n$1\r\na\r\n"[..], b"$3\r\nab\r\n", b"$1\r\nab\r\n", b"?x\r\n", b":1\r\nextra", b"*-1"]
        {
            assert_eq!(raw_frame(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        // Nesting past what frames may carry is not read back.
        let deep = "*1\r\n".repeat(MAX_FRAME_NESTING + 2) + "*0\r\n";
        assert_eq!(raw_frame(deep.as_bytes()), None);
    }
}
