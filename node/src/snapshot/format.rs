//! The snapshot byte layout (see `docs/snapshot-format.md`): encoding and the checks a reader
//! makes, on plain byte slices. No I/O and no `unsafe` here.

use shoal_wire::SLOT_COUNT;

pub const MAGIC: &[u8; 8] = b"SHOALSNP";
/// The version written. Versions 1 (strings only, every entry's flags 0) and 2 (no streams)
/// are still read; a node that only reads version 2 refuses a file that may hold streams.
pub const VERSION: u32 = 3;
pub const OLDEST_READABLE_VERSION: u32 = 1;
/// Largest value-type number an entry's flags may carry (`store::object::ValueType`).
pub const MAX_VALUE_TYPE: u16 = 5;
/// Byte-order mark; reads back as this value only on the byte order it was written in.
pub const BOM: u32 = 0x0102_0304;
pub const HEADER_LEN: usize = 64;
pub const ENTRY_LEN: usize = 32;

/// Why a whole file was refused at open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("file is {0} bytes, shorter than the 64-byte header")]
    TooShort(u64),
    #[error("bad magic (not a Shoal snapshot)")]
    BadMagic,
    #[error(
        "unsupported format version {0} (this node reads versions {OLDEST_READABLE_VERSION} to {VERSION})"
    )]
    UnsupportedVersion(u32),
    #[error("byte-order mark is {0:#010x}: written on a machine of the other byte order")]
    WrongByteOrder(u32),
    #[error("header checksum mismatch")]
    HeaderChecksum,
    #[error("inconsistent layout: {0}")]
    BadLayout(String),
    #[error("file is {actual} bytes but its header says {header} (truncated or extended)")]
    LengthMismatch { header: u64, actual: u64 },
}

/// The decoded, checked header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub entry_count: u64,
    pub created_ms: u64,
    pub index_offset: u64,
    pub file_len: u64,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&BOM.to_le_bytes());
        h[16..24].copy_from_slice(&self.entry_count.to_le_bytes());
        h[24..32].copy_from_slice(&self.created_ms.to_le_bytes());
        h[32..40].copy_from_slice(&(HEADER_LEN as u64).to_le_bytes());
        h[40..48].copy_from_slice(&self.index_offset.to_le_bytes());
        h[48..56].copy_from_slice(&self.file_len.to_le_bytes());
        let crc = crc32fast::hash(&h[..56]);
        h[56..60].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Decodes and checks the header of a file of `actual_len` bytes (checks 1-3 of the spec).
    pub fn decode(file: &[u8], actual_len: u64) -> Result<Header, FormatError> {
        if (file.len() as u64) < HEADER_LEN as u64 || actual_len < HEADER_LEN as u64 {
            return Err(FormatError::TooShort(actual_len));
        }
        let h = &file[..HEADER_LEN];
        if &h[0..8] != MAGIC {
            return Err(FormatError::BadMagic);
        }
        let version = u32_at(h, 8);
        if !(OLDEST_READABLE_VERSION..=VERSION).contains(&version) {
            return Err(FormatError::UnsupportedVersion(version));
        }
        let bom = u32_at(h, 12);
        if bom != BOM {
            return Err(FormatError::WrongByteOrder(bom));
        }
        if crc32fast::hash(&h[..56]) != u32_at(h, 56) {
            return Err(FormatError::HeaderChecksum);
        }
        let header = Header {
            entry_count: u64_at(h, 16),
            created_ms: u64_at(h, 24),
            index_offset: u64_at(h, 40),
            file_len: u64_at(h, 48),
        };
        let data_offset = u64_at(h, 32);
        if data_offset != HEADER_LEN as u64 {
            return Err(FormatError::BadLayout(format!("data offset {data_offset}, expected 64")));
        }
        if !header.index_offset.is_multiple_of(8) || header.index_offset < HEADER_LEN as u64 {
            return Err(FormatError::BadLayout(format!("index offset {}", header.index_offset)));
        }
        let expected = header
            .entry_count
            .checked_mul(ENTRY_LEN as u64)
            .and_then(|n| n.checked_add(header.index_offset))
            .ok_or_else(|| FormatError::BadLayout(format!("{} entries overflow", header.entry_count)))?;
        if expected != header.file_len {
            return Err(FormatError::BadLayout(format!(
                "index ends at {expected} but the header says the file is {} bytes",
                header.file_len
            )));
        }
        if header.file_len != actual_len {
            return Err(FormatError::LengthMismatch { header: header.file_len, actual: actual_len });
        }
        Ok(header)
    }
}

/// How a damaged header was repaired (see [`repair_header`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderRepair {
    /// One byte of the checksummed fields was wrong: `byte` held `found`; `fixed` makes the
    /// stored checksum match.
    Byte { byte: usize, found: u8, fixed: u8 },
    /// The fields are consistent with the file and each other; only the stored checksum is wrong.
    Checksum,
}

impl std::fmt::Display for HeaderRepair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderRepair::Byte { byte, found, fixed } => {
                write!(f, "header byte {byte} was {found:#04x}, the checksum says {fixed:#04x}")
            }
            HeaderRepair::Checksum => write!(f, "only the header checksum itself was damaged"),
        }
    }
}

/// Reconstructs the header of a file of `actual_len` bytes whose stored header checksum does not
/// match, if exactly one repair explains the damage:
/// - one byte of bytes 0..56 changed, such that the stored checksum matches again and the
///   corrected header passes every check of [`Header::decode`] (a search over all 56 × 255
///   single-byte changes; CRC-32 makes a wrong match that also passes the layout checks
///   vanishingly unlikely, and more than one match is refused as ambiguous);
/// - or, if no such byte exists, the fields as stored pass every check, so the damage is in the
///   checksum field.
///
/// `None` when the checksum matches (the header is not damaged in a way this can explain) or no
/// single repair works. A repaired header proves nothing about the rest of the file: the caller
/// must verify every entry before using it.
pub fn repair_header(file: &[u8], actual_len: u64) -> Option<(Header, HeaderRepair)> {
    if file.len() < HEADER_LEN || actual_len < HEADER_LEN as u64 {
        return None;
    }
    let stored: [u8; HEADER_LEN] = file[..HEADER_LEN].try_into().expect("64 bytes");
    let want = u32_at(&stored, 56);
    if crc32fast::hash(&stored[..56]) == want {
        return None;
    }
    let mut found = None;
    let mut candidate = stored;
    for byte in 0..56 {
        for value in 0..=255u8 {
            if value == stored[byte] {
                continue;
            }
            candidate[byte] = value;
            if crc32fast::hash(&candidate[..56]) == want
                && let Ok(h) = Header::decode(&candidate, actual_len)
            {
                if found.is_some() {
                    return None; // ambiguous
                }
                found = Some((h, HeaderRepair::Byte { byte, found: stored[byte], fixed: value }));
            }
        }
        candidate[byte] = stored[byte];
    }
    if found.is_some() {
        return found;
    }
    let mut recrc = stored;
    let crc = crc32fast::hash(&recrc[..56]);
    recrc[56..60].copy_from_slice(&crc.to_le_bytes());
    Header::decode(&recrc, actual_len).ok().map(|h| (h, HeaderRepair::Checksum))
}

/// One index entry as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub slot: u16,
    pub flags: u16,
    pub key_len: u32,
    pub offset: u64,
    pub value_len: u32,
    pub crc: u32,
    pub expire_at: u64,
}

impl IndexEntry {
    /// An entry for `key`/`value` stored at `offset`, with its checksum computed.
    pub fn new(slot: u16, key: &[u8], value: &[u8], offset: u64, expire_at: u64) -> IndexEntry {
        IndexEntry::typed(slot, key, value, offset, expire_at, 0)
    }

    /// Like [`new`](Self::new) for a value of type `value_type` (its serialized form).
    pub fn typed(
        slot: u16,
        key: &[u8],
        value: &[u8],
        offset: u64,
        expire_at: u64,
        value_type: u16,
    ) -> IndexEntry {
        let mut e = IndexEntry {
            slot,
            flags: value_type,
            key_len: key.len() as u32,
            offset,
            value_len: value.len() as u32,
            crc: 0,
            expire_at,
        };
        e.crc = e.checksum(key, value);
        e
    }

    pub fn encode(&self) -> [u8; ENTRY_LEN] {
        let mut b = [0u8; ENTRY_LEN];
        b[0..2].copy_from_slice(&self.slot.to_le_bytes());
        b[2..4].copy_from_slice(&self.flags.to_le_bytes());
        b[4..8].copy_from_slice(&self.key_len.to_le_bytes());
        b[8..16].copy_from_slice(&self.offset.to_le_bytes());
        b[16..20].copy_from_slice(&self.value_len.to_le_bytes());
        b[20..24].copy_from_slice(&self.crc.to_le_bytes());
        b[24..32].copy_from_slice(&self.expire_at.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> IndexEntry {
        IndexEntry {
            slot: u16_at(b, 0),
            flags: u16_at(b, 2),
            key_len: u32_at(b, 4),
            offset: u64_at(b, 8),
            value_len: u32_at(b, 16),
            crc: u32_at(b, 20),
            expire_at: u64_at(b, 24),
        }
    }

    /// CRC over the entry's fields (all but the crc) and its key and value.
    pub fn checksum(&self, key: &[u8], value: &[u8]) -> u32 {
        let b = self.encode();
        let mut h = crc32fast::Hasher::new();
        h.update(&b[0..20]);
        h.update(&b[24..32]);
        h.update(key);
        h.update(value);
        h.finalize()
    }

    /// The byte range of the key alone, if it lies inside the data region: enough to compare keys
    /// while searching, even when the entry's other fields are damaged.
    pub fn key_only_range(&self, index_offset: u64) -> Option<std::ops::Range<usize>> {
        let end = self.offset.checked_add(u64::from(self.key_len))?;
        (self.offset.is_multiple_of(8) && self.offset >= HEADER_LEN as u64 && end <= index_offset)
            .then_some(self.offset as usize..end as usize)
    }

    /// The byte range of the key in the file, if the entry is structurally sound (check 4).
    pub fn key_range(&self, index_offset: u64) -> Option<std::ops::Range<usize>> {
        let end = self.offset.checked_add(u64::from(self.key_len))?.checked_add(u64::from(self.value_len))?;
        let sound = usize::from(self.slot) < SLOT_COUNT
            && self.flags <= MAX_VALUE_TYPE
            && self.offset.is_multiple_of(8)
            && self.offset >= HEADER_LEN as u64
            && end <= index_offset;
        sound.then(|| self.offset as usize..(self.offset + u64::from(self.key_len)) as usize)
    }
}

/// Zero bytes that pad an entry of `len` bytes to the next multiple of 8.
pub fn padding(len: u64) -> usize {
    ((8 - len % 8) % 8) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header { entry_count: 2, created_ms: 1234, index_offset: 128, file_len: 128 + 64 }
    }

    #[test]
    fn header_round_trip_and_checks() {
        let h = header();
        let bytes = h.encode();
        assert_eq!(Header::decode(&bytes, 192), Ok(h));
        assert_eq!(&bytes[12..16], &[4, 3, 2, 1], "byte-order mark is stored little-endian");
        assert_eq!(Header::decode(&bytes[..10], 10), Err(FormatError::TooShort(10)));
        let mut bad = bytes;
        bad[0] = b'X';
        assert_eq!(Header::decode(&bad, 192), Err(FormatError::BadMagic));
        let mut bad = bytes;
        bad[8] = VERSION as u8 + 1;
        assert_eq!(Header::decode(&bad, 192), Err(FormatError::UnsupportedVersion(VERSION + 1)));
        let mut bad = bytes;
        bad[12..16].copy_from_slice(&BOM.to_be_bytes());
        assert!(matches!(Header::decode(&bad, 192), Err(FormatError::WrongByteOrder(_))));
        let mut bad = bytes;
        bad[20] ^= 1;
        assert_eq!(Header::decode(&bad, 192), Err(FormatError::HeaderChecksum));
        assert_eq!(
            Header::decode(&bytes, 191),
            Err(FormatError::LengthMismatch { header: 192, actual: 191 })
        );
        let inconsistent = Header { file_len: 100, ..h }.encode();
        assert!(matches!(Header::decode(&inconsistent, 100), Err(FormatError::BadLayout(_))));
        let overflow = Header { entry_count: u64::MAX / 2, ..h }.encode();
        assert!(matches!(Header::decode(&overflow, 192), Err(FormatError::BadLayout(_))));
    }

    #[test]
    fn one_damaged_header_byte_is_repaired_and_more_is_not() {
        let h = header();
        let good = h.encode();
        assert_eq!(repair_header(&good, 192), None, "an undamaged header needs no repair");
        for byte in 0..56 {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = good;
                bad[byte] ^= flip;
                let (fixed, how) = repair_header(&bad, 192).unwrap_or_else(|| panic!("byte {byte} ^ {flip}"));
                assert_eq!(fixed, h, "byte {byte} ^ {flip}");
                assert_eq!(how, HeaderRepair::Byte { byte, found: good[byte] ^ flip, fixed: good[byte] });
            }
        }
        for byte in 56..60 {
            let mut bad = good;
            bad[byte] ^= 0x10;
            assert_eq!(repair_header(&bad, 192), Some((h, HeaderRepair::Checksum)), "crc byte {byte}");
        }
        // Two fields damaged: nothing explains it.
        let mut bad = good;
        bad[20] ^= 1;
        bad[44] ^= 1;
        assert_eq!(repair_header(&bad, 192), None);
        // The byte-order mark swapped (4 bytes) is not one byte.
        let mut bad = good;
        bad[12..16].copy_from_slice(&BOM.to_be_bytes());
        assert_eq!(repair_header(&bad, 192), None);
        // A repaired header must still fit the file: a truncated file is not "repaired".
        let mut bad = good;
        bad[20] ^= 1;
        assert_eq!(repair_header(&bad, 191), None);
        // Random bytes are not a header.
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..20 {
            let junk: Vec<u8> = (0..64).map(|_| rng.u8(..)).collect();
            assert_eq!(repair_header(&junk, 192), None);
        }
    }

    #[test]
    fn entry_round_trip_and_checksum() {
        let e = IndexEntry::new(42, b"key", b"value", 64, 99);
        let d = IndexEntry::decode(&e.encode());
        assert_eq!(d, e);
        assert_eq!(d.checksum(b"key", b"value"), d.crc);
        assert_ne!(d.checksum(b"key", b"valuf"), d.crc, "the value is covered");
        let moved = IndexEntry { offset: 72, ..d };
        assert_ne!(moved.checksum(b"key", b"value"), d.crc, "the location is covered");
        assert_eq!(d.key_range(200), Some(64..67));
        assert_eq!(d.key_range(70), None, "value runs into the index");
        assert_eq!(IndexEntry { offset: 65, ..d }.key_range(200), None, "misaligned");
        assert_eq!(IndexEntry { slot: 16384, ..d }.key_range(200), None);
        assert_eq!(padding(8), 0);
        assert_eq!(padding(13), 3);
    }
}
