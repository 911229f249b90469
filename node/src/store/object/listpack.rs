//! Redis's listpack, byte for byte: the node format of streams (`super::stream`).
//!
//! A stream keeps its entries in listpacks of at most `stream-node-max-bytes` bytes and
//! `stream-node-max-entries` entries, as Redis does. Using Redis's own element encoding (not a
//! look-alike) is what makes three things come out as Redis's: the memory an entry costs, where
//! a node fills up (so `XTRIM ... ~`, which only drops whole nodes, trims exactly as much as
//! redis-server), and the node count `XINFO STREAM` reports.
//!
//! Layout: a 6-byte header (total bytes, u32 LE; element count, u16 LE, 65535 meaning "count
//! them"), the elements, and a 0xFF terminator. An element is its encoding (a small integer, a
//! 13/16/24/32/64-bit integer, or a string behind a 6/12/32-bit length) followed by its
//! "backlen": the encoding's size in 1..5 bytes, so the list can be walked backwards (this module
//! only walks forwards, but writes backlens so sizes match). A string that reads as a canonical
//! 64-bit integer is stored as that integer, as `lpAppend` does.

/// Header size: total bytes (4) and element count (2).
pub const HEADER: usize = 6;
const END: u8 = 0xFF;
const COUNT_UNKNOWN: u16 = u16::MAX;

/// An element as read: an integer, or a string (borrowed from the listpack).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ele<'a> {
    Int(i64),
    Str(&'a [u8]),
}

impl Ele<'_> {
    /// The element's bytes as a client sees them (an integer in decimal).
    pub fn to_bytes(self) -> bytes::Bytes {
        match self {
            Ele::Int(n) => bytes::Bytes::from(n.to_string()),
            Ele::Str(s) => bytes::Bytes::copy_from_slice(s),
        }
    }

    /// The element as an integer (`None`: a string).
    pub fn int(self) -> Option<i64> {
        match self {
            Ele::Int(n) => Some(n),
            Ele::Str(_) => None,
        }
    }

    /// Whether the element equals the client's bytes `b`.
    pub fn eq_bytes(self, b: &[u8]) -> bool {
        match self {
            Ele::Str(s) => s == b,
            Ele::Int(n) => super::set::as_int(b) == Some(n),
        }
    }
}

/// Why bytes are not a listpack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed listpack")]
pub struct Malformed;

/// An empty listpack.
pub fn new() -> Vec<u8> {
    let mut lp = Vec::with_capacity(64);
    lp.extend_from_slice(&(HEADER as u32 + 1).to_le_bytes());
    lp.extend_from_slice(&0u16.to_le_bytes());
    lp.push(END);
    lp
}

/// Appends an integer element.
pub fn append_int(lp: &mut Vec<u8>, n: i64) {
    let mut enc = [0u8; 9];
    let len = encode_int(n, &mut enc);
    push_encoded(lp, &enc[..len], &[]);
}

/// Appends a string element (stored as an integer when it reads as one, as `lpAppend` does).
pub fn append_str(lp: &mut Vec<u8>, s: &[u8]) {
    if let Some(n) = super::set::as_int(s) {
        return append_int(lp, n);
    }
    let mut head = [0u8; 5];
    let hl = string_header(s.len(), &mut head);
    push_encoded(lp, &head[..hl], s);
}

/// The size an element holding `s` takes (encoding and backlen), without building it.
pub fn str_size(s: &[u8]) -> usize {
    let enc = match super::set::as_int(s) {
        Some(n) => int_size(n),
        None => string_header(s.len(), &mut [0u8; 5]) + s.len(),
    };
    enc + backlen_size(enc)
}

fn push_encoded(lp: &mut Vec<u8>, head: &[u8], body: &[u8]) {
    let end = lp.pop();
    debug_assert_eq!(end, Some(END));
    let enc_len = head.len() + body.len();
    lp.extend_from_slice(head);
    lp.extend_from_slice(body);
    let mut back = [0u8; 5];
    let bl = encode_backlen(enc_len, &mut back);
    lp.extend_from_slice(&back[..bl]);
    lp.push(END);
    set_total(lp);
    let n = u16::from_le_bytes([lp[4], lp[5]]);
    if n != COUNT_UNKNOWN {
        lp[4..6].copy_from_slice(&(n + 1).to_le_bytes());
    }
}

fn set_total(lp: &mut [u8]) {
    let total = lp.len() as u32;
    lp[..4].copy_from_slice(&total.to_le_bytes());
}

/// Replaces the element at byte offset `at` with the integer `n` (its size may change).
pub fn replace_int(lp: &mut Vec<u8>, at: usize, n: i64) {
    let (_, next) = read(lp, at).ok().flatten().expect("replace_int at an element this module wrote");
    let mut enc = [0u8; 9];
    let len = encode_int(n, &mut enc);
    let mut back = [0u8; 5];
    let bl = encode_backlen(len, &mut back);
    let new: Vec<u8> = enc[..len].iter().chain(&back[..bl]).copied().collect();
    lp.splice(at..next, new);
    set_total(lp);
}

/// The element at byte offset `at` and the offset of the next one (`None` at the end).
pub fn read(lp: &[u8], at: usize) -> Result<Option<(Ele<'_>, usize)>, Malformed> {
    let b = *lp.get(at).ok_or(Malformed)?;
    if b == END {
        return Ok(None);
    }
    let take = |from: usize, n: usize| lp.get(from..from + n).ok_or(Malformed);
    let (ele, enc_len) = match b {
        0x00..=0x7F => (Ele::Int(i64::from(b)), 1),
        0x80..=0xBF => {
            let n = usize::from(b & 0x3F);
            (Ele::Str(take(at + 1, n)?), 1 + n)
        }
        0xC0..=0xDF => {
            let v = (u16::from(b & 0x1F) << 8) | u16::from(*lp.get(at + 1).ok_or(Malformed)?);
            let v = if v >= 1 << 12 { i64::from(v) - (1 << 13) } else { i64::from(v) };
            (Ele::Int(v), 2)
        }
        0xE0..=0xEF => {
            let n = (usize::from(b & 0x0F) << 8) | usize::from(*lp.get(at + 1).ok_or(Malformed)?);
            (Ele::Str(take(at + 2, n)?), 2 + n)
        }
        0xF0 => {
            let l = take(at + 1, 4)?;
            let n = u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize;
            (Ele::Str(take(at + 5, n)?), 5 + n)
        }
        0xF1 => {
            let l = take(at + 1, 2)?;
            (Ele::Int(i64::from(i16::from_le_bytes([l[0], l[1]]))), 3)
        }
        0xF2 => {
            let l = take(at + 1, 3)?;
            let v = i32::from_le_bytes([0, l[0], l[1], l[2]]) >> 8;
            (Ele::Int(i64::from(v)), 4)
        }
        0xF3 => {
            let l = take(at + 1, 4)?;
            (Ele::Int(i64::from(i32::from_le_bytes([l[0], l[1], l[2], l[3]]))), 5)
        }
        0xF4 => {
            let l = take(at + 1, 8)?;
            (Ele::Int(i64::from_le_bytes(l.try_into().map_err(|_| Malformed)?)), 9)
        }
        _ => return Err(Malformed),
    };
    let next = at + enc_len + backlen_size(enc_len);
    if next >= lp.len() {
        return Err(Malformed);
    }
    Ok(Some((ele, next)))
}

/// Checks a listpack read from outside (a snapshot, a slot transfer): header, every element,
/// the terminator. Returns the elements' count.
pub fn validate(lp: &[u8]) -> Result<usize, Malformed> {
    if lp.len() < HEADER + 1 || u32::from_le_bytes([lp[0], lp[1], lp[2], lp[3]]) as usize != lp.len() {
        return Err(Malformed);
    }
    let mut at = HEADER;
    let mut n = 0;
    while let Some((_, next)) = read(lp, at)? {
        at = next;
        n += 1;
    }
    if at != lp.len() - 1 {
        return Err(Malformed);
    }
    let count = u16::from_le_bytes([lp[4], lp[5]]);
    if count != COUNT_UNKNOWN && usize::from(count) != n {
        return Err(Malformed);
    }
    Ok(n)
}

fn int_size(n: i64) -> usize {
    match n {
        0..=127 => 1,
        -4096..=4095 => 2,
        -32768..=32767 => 3,
        -8_388_608..=8_388_607 => 4,
        _ if i32::try_from(n).is_ok() => 5,
        _ => 9,
    }
}

fn encode_int(n: i64, out: &mut [u8; 9]) -> usize {
    let size = int_size(n);
    match size {
        1 => out[0] = n as u8,
        2 => {
            let v = if n < 0 { (1i64 << 13) + n } else { n } as u16;
            out[0] = 0xC0 | (v >> 8) as u8;
            out[1] = v as u8;
        }
        3 => {
            out[0] = 0xF1;
            out[1..3].copy_from_slice(&(n as i16).to_le_bytes());
        }
        4 => {
            out[0] = 0xF2;
            out[1..4].copy_from_slice(&(n as i32).to_le_bytes()[..3]);
        }
        5 => {
            out[0] = 0xF3;
            out[1..5].copy_from_slice(&(n as i32).to_le_bytes());
        }
        _ => {
            out[0] = 0xF4;
            out[1..9].copy_from_slice(&n.to_le_bytes());
        }
    }
    size
}

fn string_header(len: usize, out: &mut [u8; 5]) -> usize {
    if len < 64 {
        out[0] = 0x80 | len as u8;
        1
    } else if len < 4096 {
        out[0] = 0xE0 | (len >> 8) as u8;
        out[1] = len as u8;
        2
    } else {
        out[0] = 0xF0;
        out[1..5].copy_from_slice(&(len as u32).to_le_bytes());
        5
    }
}

fn backlen_size(l: usize) -> usize {
    match l {
        0..=127 => 1,
        128..16383 => 2,
        16383..2_097_151 => 3,
        2_097_151..268_435_455 => 4,
        _ => 5,
    }
}

fn encode_backlen(l: usize, out: &mut [u8; 5]) -> usize {
    let n = backlen_size(l);
    for (i, b) in out[..n].iter_mut().enumerate() {
        let shift = 7 * (n - 1 - i);
        *b = ((l >> shift) & 127) as u8 | if i == 0 { 0 } else { 128 };
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(lp: &[u8]) -> Vec<Ele<'_>> {
        let mut out = Vec::new();
        let mut at = HEADER;
        while let Some((e, next)) = read(lp, at).unwrap() {
            out.push(e);
            at = next;
        }
        out
    }

    #[test]
    fn elements_round_trip_in_redis_sizes() {
        let mut lp = new();
        let ints = [
            0,
            127,
            128,
            -1,
            -4096,
            4095,
            4096,
            -32768,
            32767,
            8_388_607,
            -8_388_608,
            i32::MAX as i64,
            i64::MIN,
            i64::MAX,
        ];
        for n in ints {
            append_int(&mut lp, n);
        }
        append_str(&mut lp, b"hello");
        append_str(&mut lp, &[b'x'; 100]);
        append_str(&mut lp, &[b'y'; 5000]);
        append_str(&mut lp, b"-0");
        append_str(&mut lp, b"12");
        assert_eq!(validate(&lp), Ok(ints.len() + 5));
        let got = all(&lp);
        for (i, n) in ints.iter().enumerate() {
            assert_eq!(got[i], Ele::Int(*n));
        }
        assert_eq!(got[ints.len()], Ele::Str(b"hello"));
        assert_eq!(got[ints.len() + 2].to_bytes().len(), 5000);
        assert_eq!(got[ints.len() + 3], Ele::Str(b"-0"), "not canonical: a string");
        assert_eq!(got[ints.len() + 4], Ele::Int(12));
        // Redis's sizes: 7 bytes empty; "hello" 1+5+1; a 13-bit integer 2+1; 100 bytes 2+100+1.
        let mut lp = new();
        assert_eq!(lp.len(), 7);
        append_str(&mut lp, b"hello");
        assert_eq!(lp.len(), 14);
        append_int(&mut lp, 1000);
        assert_eq!(lp.len(), 17);
        append_str(&mut lp, &[b'z'; 100]);
        assert_eq!(lp.len(), 17 + 103);
        assert_eq!(str_size(&[b'z'; 100]), 103);
        assert_eq!(str_size(b"1000"), 3);
    }

    #[test]
    fn replacing_an_integer_resizes_the_list() {
        let mut lp = new();
        append_int(&mut lp, 127);
        append_str(&mut lp, b"after");
        replace_int(&mut lp, HEADER, 128);
        assert_eq!(all(&lp), vec![Ele::Int(128), Ele::Str(b"after")]);
        replace_int(&mut lp, HEADER, 3);
        assert_eq!(all(&lp), vec![Ele::Int(3), Ele::Str(b"after")]);
        assert!(validate(&lp).is_ok());
    }

    #[test]
    fn garbage_is_refused_not_read() {
        assert!(validate(b"").is_err());
        assert!(validate(&[7, 0, 0, 0, 0, 0, 0xFF]).is_ok());
        assert!(validate(&[8, 0, 0, 0, 1, 0, 0x85, 0xFF]).is_err());
        assert!(validate(&[9, 0, 0, 0, 1, 0, 0xF5, 1, 0xFF]).is_err());
    }
}
