//! Redis's RDB encoding as far as DUMP-style payloads need it: lengths, strings (plain, as
//! integers, LZF-compressed), the payload trailer (RDB version and CRC64), byte for byte as
//! redis-server 7.0 writes and checks them, so payloads move between Shoal and Redis both ways.
//!
//! - [`crc64`]: Redis's CRC-64 (Jones polynomial, reflected, no final xor).
//! - [`lzf_compress`]/[`lzf_decompress`]: LZF as Redis's `lzf_c.c` builds it (HLOG 16,
//!   VERY_FAST): the same input gives the same bytes, which DUMP's byte-identity needs.
//! - [`put_string`]/[`Reader::string`]: `rdbSaveRawString` and `rdbGenericLoadStringObject`.
//! - [`seal`]/[`verify`]: the 2-byte version and 8-byte checksum every payload ends with.

use thiserror::Error;

/// The RDB version Redis 7.0 writes (and the newest it reads).
pub const RDB_VERSION: u16 = 10;
/// The newest RDB version RESTORE reads: Redis 8.0's 12 (7.2's listpack sets, 7.4's hashes with
/// field times), so that values DUMPed by a newer Redis move here too.
pub const RDB_VERSION_READ: u16 = 12;
/// The version DUMP writes for a hash with field times (RDB types 24 and 25).
pub const RDB_VERSION_FIELD_TTLS: u16 = 12;
/// A function library in a payload (`RDB_OPCODE_FUNCTION2`).
pub const OPCODE_FUNCTION2: u8 = 245;
/// The pre-GA 7.0 form of a library (`RDB_OPCODE_FUNCTION`): name, engine, description, body.
pub const OPCODE_FUNCTION: u8 = 246;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum RdbError {
    #[error("payload truncated")]
    Truncated,
    #[error("unknown string encoding {0}")]
    Encoding(u8),
    #[error("LZF data is corrupt")]
    Lzf,
}

const POLY: u64 = 0x95ac_9329_ac4b_c9b5; // 0xad93d23594c935a9 reflected

fn crc_table() -> &'static [u64; 256] {
    static TABLE: std::sync::OnceLock<[u64; 256]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [0u64; 256];
        for (i, slot) in t.iter_mut().enumerate() {
            let mut c = i as u64;
            for _ in 0..8 {
                c = if c & 1 == 1 { (c >> 1) ^ POLY } else { c >> 1 };
            }
            *slot = c;
        }
        t
    })
}

/// Redis's `crc64(crc, data)`.
pub fn crc64(mut crc: u64, data: &[u8]) -> u64 {
    let t = crc_table();
    for &b in data {
        crc = t[((crc ^ u64::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    crc
}

/// Appends the trailer: RDB version (little-endian) and the CRC64 of everything before it.
pub fn seal(out: &mut Vec<u8>) {
    seal_as(out, RDB_VERSION);
}

/// [`seal`] with another RDB version: Redis 7.4's 12 for a hash with field times, whose types
/// 7.0's version 10 does not have.
pub fn seal_as(out: &mut Vec<u8>, version: u16) {
    out.extend_from_slice(&version.to_le_bytes());
    let crc = crc64(0, out);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Redis's `verifyDumpPayload`: a version this build reads and a matching checksum. Returns the
/// body (what precedes the trailer) and its RDB version.
pub fn verify(p: &[u8]) -> Option<(&[u8], u16)> {
    if p.len() < 10 {
        return None;
    }
    let footer = &p[p.len() - 10..];
    let version = u16::from_le_bytes([footer[0], footer[1]]);
    if version > RDB_VERSION_READ {
        return None;
    }
    let crc = crc64(0, &p[..p.len() - 8]);
    (crc.to_le_bytes() == footer[2..]).then_some((&p[..p.len() - 10], version))
}

/// `rdbSaveLen`.
pub fn put_len(out: &mut Vec<u8>, n: u64) {
    if n < 1 << 6 {
        out.push(n as u8);
    } else if n < 1 << 14 {
        out.extend_from_slice(&[0x40 | (n >> 8) as u8, n as u8]);
    } else if n <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// `rdbSaveRawString` with compression on (Redis's default `rdbcompression yes`): a short
/// decimal integer as an integer, a string over 20 bytes LZF-compressed when that saves at
/// least four bytes, anything else as it is.
pub fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    if s.len() <= 11
        && let Some(n) = as_int(s)
    {
        if let Ok(v) = i8::try_from(n) {
            out.extend_from_slice(&[0xc0, v as u8]);
        } else if let Ok(v) = i16::try_from(n) {
            out.push(0xc1);
            out.extend_from_slice(&v.to_le_bytes());
        } else {
            out.push(0xc2);
            out.extend_from_slice(&n.to_le_bytes());
        }
        return;
    }
    if s.len() > 20
        && let Some(packed) = lzf_compress(s, s.len() - 4)
    {
        out.push(0xc3);
        put_len(out, packed.len() as u64);
        put_len(out, s.len() as u64);
        out.extend_from_slice(&packed);
        return;
    }
    put_len(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// `rdbTryIntegerEncoding`: the string is the canonical decimal form of an i32.
fn as_int(s: &[u8]) -> Option<i32> {
    let text = std::str::from_utf8(s).ok()?;
    let n: i64 = text.parse().ok()?;
    (n.to_string().as_bytes() == s).then_some(i32::try_from(n).ok()?)
}

/// A cursor over a payload's body.
pub struct Reader<'a> {
    pub b: &'a [u8],
    pub at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8]) -> Reader<'a> {
        Reader { b, at: 0 }
    }

    pub fn at_end(&self) -> bool {
        self.at >= self.b.len()
    }

    pub fn byte(&mut self) -> Result<u8, RdbError> {
        Ok(self.take(1)?[0])
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], RdbError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len()).ok_or(RdbError::Truncated)?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    /// `rdbLoadLen`: the length, or the encoding of a specially encoded string.
    fn len_or_enc(&mut self) -> Result<(u64, bool), RdbError> {
        let first = self.byte()?;
        Ok(match first >> 6 {
            0 => (u64::from(first & 0x3f), false),
            1 => (u64::from(first & 0x3f) << 8 | u64::from(self.byte()?), false),
            2 => match first {
                0x80 => (u64::from(u32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes"))), false),
                0x81 => (u64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes")), false),
                other => return Err(RdbError::Encoding(other)),
            },
            _ => (u64::from(first & 0x3f), true),
        })
    }

    pub fn read_len(&mut self) -> Result<u64, RdbError> {
        match self.len_or_enc()? {
            (n, false) => Ok(n),
            (enc, true) => Err(RdbError::Encoding(enc as u8)),
        }
    }

    /// A string in any of its encodings.
    pub fn string(&mut self) -> Result<Vec<u8>, RdbError> {
        match self.len_or_enc()? {
            (n, false) => Ok(self.take(usize::try_from(n).map_err(|_| RdbError::Truncated)?)?.to_vec()),
            (0, true) => Ok((self.byte()? as i8).to_string().into_bytes()),
            (1, true) => {
                Ok(i16::from_le_bytes(self.take(2)?.try_into().expect("2")).to_string().into_bytes())
            }
            (2, true) => {
                Ok(i32::from_le_bytes(self.take(4)?.try_into().expect("4")).to_string().into_bytes())
            }
            (3, true) => {
                let clen = usize::try_from(self.read_len()?).map_err(|_| RdbError::Truncated)?;
                let len = usize::try_from(self.read_len()?).map_err(|_| RdbError::Truncated)?;
                let packed = self.take(clen)?;
                // A length far past what the packed bytes could expand to is corrupt, not a
                // reason to allocate it.
                if len > clen.saturating_mul(264) {
                    return Err(RdbError::Lzf);
                }
                lzf_decompress(packed, len).ok_or(RdbError::Lzf)
            }
            (other, true) => Err(RdbError::Encoding(other as u8)),
        }
    }
}

const HLOG: u32 = 16;
const HSIZE: usize = 1 << HLOG;
const MAX_LIT: usize = 1 << 5;
const MAX_OFF: usize = 1 << 13;
const MAX_REF: usize = (1 << 8) + (1 << 3);

fn idx(h: u32) -> usize {
    ((h >> (3 * 8 - HLOG)).wrapping_sub(h.wrapping_mul(5)) as usize) & (HSIZE - 1)
}

/// LZF-compresses `input` into at most `out_len` bytes, exactly as Redis's `lzf_compress`
/// (VERY_FAST, a fresh hash table); `None` when it does not fit.
pub fn lzf_compress(input: &[u8], out_len: usize) -> Option<Vec<u8>> {
    let n = input.len();
    if n < 2 || out_len == 0 {
        return None;
    }
    // Positions plus one (0: empty); a few bytes of slack so the bound checks below, which are
    // the C code's, decide the outcome rather than the buffer's end.
    let mut htab = vec![0usize; HSIZE];
    let mut out = vec![0u8; out_len + 8];
    let (mut ip, mut op, mut lit) = (0usize, 1usize, 0usize);
    let mut hval: u32 = (u32::from(input[0]) << 8) | u32::from(input[1]);
    while ip + 2 < n {
        hval = (hval << 8) | u32::from(input[ip + 2]);
        let slot = idx(hval);
        let r = htab[slot];
        htab[slot] = ip + 1;
        let found = r.checked_sub(1).filter(|&rf| {
            ip - rf - 1 < MAX_OFF
                && rf > 0
                && input[rf + 2] == input[ip + 2]
                && input[rf..rf + 2] == input[ip..ip + 2]
        });
        let Some(rf) = found else {
            if op >= out_len {
                return None;
            }
            literal(&mut out, &mut op, &mut lit, input[ip]);
            ip += 1;
            continue;
        };
        let off = ip - rf - 1;
        if op + 3 + 1 >= out_len && op - usize::from(lit == 0) + 3 + 1 >= out_len {
            return None;
        }
        out[op - lit - 1] = (lit as u8).wrapping_sub(1);
        op -= usize::from(lit == 0);
        let len = match_len(input, rf, ip) - 2;
        ip += 1;
        if len < 7 {
            out[op] = ((off >> 8) + (len << 5)) as u8;
            op += 1;
        } else {
            out[op] = ((off >> 8) + (7 << 5)) as u8;
            out[op + 1] = (len - 7) as u8;
            op += 2;
        }
        out[op] = off as u8;
        op += 2; // the offset's low byte, then a new literal run starts
        lit = 0;
        ip += len + 1;
        if ip + 2 >= n {
            break;
        }
        ip -= 2;
        hval = (u32::from(input[ip]) << 8) | u32::from(input[ip + 1]);
        hval = (hval << 8) | u32::from(input[ip + 2]);
        htab[idx(hval)] = ip + 1;
        ip += 1;
        hval = (hval << 8) | u32::from(input[ip + 2]);
        htab[idx(hval)] = ip + 1;
        ip += 1;
    }
    if op + 3 > out_len {
        return None;
    }
    while ip < n {
        literal(&mut out, &mut op, &mut lit, input[ip]);
        ip += 1;
    }
    out[op - lit - 1] = (lit as u8).wrapping_sub(1);
    op -= usize::from(lit == 0);
    out.truncate(op);
    Some(out)
}

/// Appends one literal byte to the open run, closing the run (its length byte before it) when
/// it is full and opening the next, as `lzf_c.c` does.
fn literal(out: &mut [u8], op: &mut usize, lit: &mut usize, b: u8) {
    *lit += 1;
    out[*op] = b;
    *op += 1;
    if *lit == MAX_LIT {
        out[*op - *lit - 1] = (*lit - 1) as u8;
        *lit = 0;
        *op += 1;
    }
}

/// How many bytes at `ip` repeat those at `rf` (at least 3, known to match), measured as
/// `lzf_c.c` measures: 16 bytes compared without a bound check when more than 16 may follow
/// (so a match may run up to two bytes past `MAX_REF`'s bound there, as Redis's does), then
/// byte by byte up to the bound.
fn match_len(input: &[u8], rf: usize, ip: usize) -> usize {
    let mut len = 2usize;
    let maxlen = (input.len() - ip - len).min(MAX_REF);
    if maxlen > 16 {
        for _ in 0..16 {
            len += 1;
            if input[rf + len] != input[ip + len] {
                return len;
            }
        }
    }
    loop {
        len += 1;
        if !(len < maxlen && input[rf + len] == input[ip + len]) {
            return len;
        }
    }
}

/// LZF-decompresses `input` into exactly `len` bytes; `None` if it is corrupt or of another
/// length.
pub fn lzf_decompress(input: &[u8], len: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(len);
    let mut ip = 0;
    while ip < input.len() {
        let ctrl = usize::from(input[ip]);
        ip += 1;
        if ctrl < MAX_LIT {
            let run = ctrl + 1;
            if out.len() + run > len || ip + run > input.len() {
                return None;
            }
            out.extend_from_slice(&input[ip..ip + run]);
            ip += run;
        } else {
            let mut l = ctrl >> 5;
            if l == 7 {
                l += usize::from(*input.get(ip)?);
                ip += 1;
            }
            let back = ((ctrl & 0x1f) << 8) + usize::from(*input.get(ip)?) + 1;
            ip += 1;
            if out.len() + l + 2 > len || back > out.len() {
                return None;
            }
            let from = out.len() - back;
            for i in 0..l + 2 {
                let b = out[from + i];
                out.push(b);
            }
        }
    }
    (out.len() == len).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_is_redis_s() {
        // crc64.c's own self-test value.
        assert_eq!(crc64(0, b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    }

    #[test]
    fn lzf_round_trips_and_refuses_what_does_not_shrink() {
        let text = b"#!lua name=mylib\nredis.register_function('f', function() return 1 end)\n".repeat(3);
        let packed = lzf_compress(&text, text.len() - 4).expect("repetitive text shrinks");
        assert!(packed.len() < text.len() / 2);
        assert_eq!(lzf_decompress(&packed, text.len()).unwrap(), text);
        let noise: Vec<u8> = (0..64u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        assert_eq!(lzf_compress(&noise, noise.len() - 4), None);
        assert_eq!(lzf_decompress(&packed, text.len() + 1), None, "a wrong length is corrupt");
        assert_eq!(lzf_decompress(&[0xe0, 0x05, 0x00], 10), None, "a reference before the start");
    }

    #[test]
    fn strings_read_back_in_every_encoding() {
        for s in [&b"7"[..], b"-129", b"70000", b"007", b"12345678901", b"short", &[b'x'; 300][..]] {
            let mut out = Vec::new();
            put_string(&mut out, s);
            assert_eq!(Reader::new(&out).string().unwrap(), s, "{:?}", String::from_utf8_lossy(s));
        }
        let mut out = Vec::new();
        put_string(&mut out, b"-5");
        assert_eq!(out, [0xc0, 0xfb]);
        let mut sealed = b"body".to_vec();
        seal(&mut sealed);
        assert_eq!(verify(&sealed), Some((&b"body"[..], RDB_VERSION)));
        sealed[0] ^= 1;
        assert_eq!(verify(&sealed), None);
    }
}
