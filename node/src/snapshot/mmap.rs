//! The one place with `unsafe` code: mapping a snapshot file into memory.
//!
//! Everything else reads the mapping as an ordinary `&[u8]`.
#![allow(unsafe_code)]

use std::fs::File;

/// A read-only mapping of a whole snapshot file.
#[derive(Debug)]
pub struct Mapped {
    map: memmap2::Mmap,
}

impl Mapped {
    /// Maps `file` read-only. The caller has checked that it is not empty.
    pub fn map(file: &File) -> std::io::Result<Mapped> {
        // SAFETY: `Mmap::map` is unsafe because the bytes behind the returned slice can change,
        // or disappear (SIGBUS), if the file is modified or truncated while it is mapped. Snapshot
        // files are never modified after their atomic rename: Shoal only creates new files and
        // unlinks old ones (unlinking keeps the mapping valid), and the data directory belongs
        // to the node (docs/snapshot-format.md, "Files in a data directory"). The mapping is
        // read-only, so Rust code never writes through it, and every structure is re-checked
        // (bounds and checksums) before its bytes are used.
        let map = unsafe { memmap2::MmapOptions::new().map(file)? };
        // Lookups jump around the index; don't let the kernel read ahead megabytes for each.
        let _ = map.advise(memmap2::Advice::Random);
        Ok(Mapped { map })
    }

    pub fn bytes(&self) -> &[u8] {
        &self.map
    }
}
