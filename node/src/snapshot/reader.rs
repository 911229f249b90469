//! A mapped, checked snapshot: lookups by key, slot ranges, and full verification.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::format::{ENTRY_LEN, FormatError, HEADER_LEN, Header, HeaderRepair, IndexEntry, padding};
use super::mmap::Mapped;

/// Why a snapshot file could not be used at all.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Format { path: PathBuf, source: FormatError },
}

/// An entry that passed its checks: its bytes may be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryRef<'a> {
    pub slot: u16,
    pub key: &'a [u8],
    pub value: &'a [u8],
    /// Absolute Unix ms; 0 means no TTL.
    pub expire_at: u64,
    /// `store::object::ValueType` as a number; `value` is the serialized form of a typed value.
    pub value_type: u32,
}

impl EntryRef<'_> {
    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.expire_at != 0 && self.expire_at <= now_ms
    }
}

/// Result of looking a key up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup<'a> {
    Found(EntryRef<'a>),
    Missing,
    /// The entry (or the index around it) failed its checks; nothing is served.
    Corrupt,
}

/// What the background verifier found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerifyReport {
    pub entries: u64,
    pub corrupt: u64,
    pub out_of_order: u64,
    /// Places where the data region is not exactly the entries' bytes back to back, in index
    /// order, each padded to 8 (how every writer lays them out): a gap, an overlap, or bytes
    /// left between the last entry and the index.
    pub misplaced: u64,
}

impl VerifyReport {
    /// Every entry passed its checks and the file is laid out exactly as a writer lays it out.
    pub fn is_clean(&self) -> bool {
        self.corrupt == 0 && self.out_of_order == 0 && self.misplaced == 0
    }
}

#[derive(Debug)]
pub struct Snapshot {
    map: Mapped,
    header: Header,
    path: PathBuf,
    /// Entries refused at read time since the file was opened.
    corrupt_reads: AtomicU64,
    /// Damaged entries the background verifier found.
    corrupt_found: AtomicU64,
}

impl Snapshot {
    /// Opens and checks a snapshot (header, layout and length). Entry contents are checked when
    /// they are used, so this takes the same time for any size of file.
    pub fn open(path: &Path) -> Result<Snapshot, OpenError> {
        let io = |source| OpenError::Io { path: path.to_path_buf(), source };
        let format = |source| OpenError::Format { path: path.to_path_buf(), source };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < HEADER_LEN as u64 {
            return Err(format(FormatError::TooShort(len)));
        }
        let map = Mapped::map(&file).map_err(io)?;
        let header = Header::decode(map.bytes(), len).map_err(format)?;
        Ok(Snapshot::with_header(map, header, path))
    }

    fn with_header(map: Mapped, header: Header, path: &Path) -> Snapshot {
        Snapshot {
            map,
            header,
            path: path.to_path_buf(),
            corrupt_reads: AtomicU64::new(0),
            corrupt_found: AtomicU64::new(0),
        }
    }

    /// Opens a snapshot whose header failed its checksum, if one repair explains the damage
    /// ([`format::repair_header`](super::format::repair_header)) *and* the whole file then passes
    /// [`verify`](Self::verify) cleanly: every entry's checksum (which covers its location as well
    /// as its bytes), the (slot, key) order, and a data region that is exactly the entries back to
    /// back. Reads the whole file, so it costs time in proportion to its size; `Err` says why the
    /// file cannot be salvaged.
    pub fn open_salvaged(path: &Path) -> Result<(Snapshot, HeaderRepair), String> {
        let file = File::open(path).map_err(|e| e.to_string())?;
        let len = file.metadata().map_err(|e| e.to_string())?.len();
        if len < HEADER_LEN as u64 {
            return Err(FormatError::TooShort(len).to_string());
        }
        let map = Mapped::map(&file).map_err(|e| e.to_string())?;
        let Some((header, repair)) = super::format::repair_header(map.bytes(), len) else {
            return Err("no single repair of the header fits the file".into());
        };
        let snap = Snapshot::with_header(map, header, path);
        let report = snap.verify();
        if !report.is_clean() {
            return Err(format!(
                "with the header repaired ({repair}), {} of {} entries are damaged, {} out of order, {} misplaced",
                report.corrupt, report.entries, report.out_of_order, report.misplaced
            ));
        }
        Ok((snap, repair))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    pub fn len(&self) -> usize {
        self.header.entry_count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Damaged entries known so far: the verifier's count once it ran, else the reads refused.
    pub fn corrupt_entries(&self) -> u64 {
        self.corrupt_found.load(Ordering::Relaxed).max(self.corrupt_reads.load(Ordering::Relaxed))
    }

    fn raw(&self, i: usize) -> IndexEntry {
        let at = self.header.index_offset as usize + i * ENTRY_LEN;
        IndexEntry::decode(&self.map.bytes()[at..at + ENTRY_LEN])
    }

    /// Slot and expiry time of entry `i`, from the index alone (for scheduling active expiry).
    pub fn slot_and_expiry(&self, i: usize) -> (u16, u64) {
        let e = self.raw(i);
        (e.slot, e.expire_at)
    }

    /// The key bytes of an entry for comparisons while searching (bounds-checked, no checksum;
    /// nothing found this way is served before [`entry`](Self::entry) checks it in full).
    fn key_of(&self, e: &IndexEntry) -> Option<&[u8]> {
        e.key_only_range(self.header.index_offset).map(|r| &self.map.bytes()[r])
    }

    /// Entry `i` with every check applied (bounds and checksum).
    pub fn entry(&self, i: usize) -> Option<EntryRef<'_>> {
        let e = self.raw(i);
        let key_range = e.key_range(self.header.index_offset)?;
        let bytes = self.map.bytes();
        let key = &bytes[key_range.clone()];
        let value = &bytes[key_range.end..key_range.end + e.value_len as usize];
        (e.checksum(key, value) == e.crc).then_some(EntryRef {
            slot: e.slot,
            key,
            value,
            expire_at: e.expire_at,
            value_type: u32::from(e.flags),
        })
    }

    /// Like [`entry`](Self::entry), counting and logging a refusal.
    pub fn checked_entry(&self, i: usize) -> Option<EntryRef<'_>> {
        let found = self.entry(i);
        if found.is_none() {
            self.refuse(i);
        }
        found
    }

    fn refuse(&self, i: usize) {
        self.corrupt_reads.fetch_add(1, Ordering::Relaxed);
        tracing::error!(file = %self.path.display(), entry = i, "snapshot entry failed its checks; not serving it");
    }

    /// Finds `key` (whose slot is `slot`) by binary search over (slot, key).
    pub fn get(&self, slot: u16, key: &[u8]) -> Lookup<'_> {
        let (mut lo, mut hi) = (0usize, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let e = self.raw(mid);
            let Some(mid_key) = self.key_of(&e) else {
                self.refuse(mid);
                return Lookup::Corrupt;
            };
            match (e.slot, mid_key).cmp(&(slot, key)) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => {
                    return match self.entry(mid) {
                        Some(found) => Lookup::Found(found),
                        None => {
                            self.refuse(mid);
                            Lookup::Corrupt
                        }
                    };
                }
            }
        }
        Lookup::Missing
    }

    /// Whether the snapshot holds `key` at all (expired or not).
    pub fn contains(&self, slot: u16, key: &[u8]) -> bool {
        !matches!(self.get(slot, key), Lookup::Missing)
    }

    /// Index positions of the entries of slots `first..=last` (a contiguous run, the file being
    /// sorted by slot).
    pub fn slot_range(&self, first: u16, last: u16) -> std::ops::Range<usize> {
        let n = self.len();
        let start = partition(n, |i| self.raw(i).slot < first);
        let end = partition(n, |i| self.raw(i).slot <= last);
        start..end.max(start)
    }

    /// Checks every entry, the sort order and the layout of the data region (the background
    /// verifier).
    pub fn verify(&self) -> VerifyReport {
        let mut report = VerifyReport { entries: self.len() as u64, ..Default::default() };
        let mut prev: Option<(u16, &[u8])> = None;
        // Where the next entry's key must start; unknown after an entry whose lengths are unusable.
        let mut next_offset = Some(HEADER_LEN as u64);
        for i in 0..self.len() {
            let raw = self.raw(i);
            if next_offset.is_some_and(|at| at != raw.offset) {
                report.misplaced += 1;
            }
            next_offset = raw.key_range(self.header.index_offset).map(|_| {
                let len = u64::from(raw.key_len) + u64::from(raw.value_len);
                raw.offset + len + padding(len) as u64
            });
            match self.entry(i) {
                Some(e) => {
                    if prev.is_some_and(|p| p >= (e.slot, e.key)) {
                        report.out_of_order += 1;
                    }
                    prev = Some((e.slot, e.key));
                }
                None => report.corrupt += 1,
            }
        }
        if next_offset.is_some_and(|end| end != self.header.index_offset) {
            report.misplaced += 1;
        }
        self.corrupt_found.store(report.corrupt, Ordering::Relaxed);
        report
    }
}

/// The first index in `0..n` for which `pred` is false (`pred` true for a prefix).
fn partition(n: usize, pred: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) { lo = mid + 1 } else { hi = mid }
    }
    lo
}
