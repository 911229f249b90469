//! Writes a snapshot in one pass: entries arrive in (slot, key) order, their bytes are appended to
//! the data region and their index entries to a side file; `finish` appends the index, writes the
//! header, fsyncs, renames into place and fsyncs the directory.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::format::{ENTRY_LEN, HEADER_LEN, Header, IndexEntry, padding};

/// What a finished write produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub path: PathBuf,
    pub entries: u64,
    pub bytes: u64,
    pub duration: Duration,
    pub created_ms: u64,
}

pub struct SnapshotWriter {
    data: BufWriter<File>,
    index: BufWriter<File>,
    tmp: PathBuf,
    index_tmp: PathBuf,
    target: PathBuf,
    offset: u64,
    count: u64,
    created_ms: u64,
    started: Instant,
    last: Option<(u16, Vec<u8>)>,
}

impl SnapshotWriter {
    /// Starts writing the snapshot that will be renamed to `target` when finished.
    pub fn create(target: &Path, created_ms: u64) -> io::Result<SnapshotWriter> {
        let tmp = with_suffix(target, ".tmp");
        let index_tmp = with_suffix(target, ".index.tmp");
        let mut data = BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
        data.write_all(&[0u8; HEADER_LEN])?;
        let index = BufWriter::with_capacity(1 << 16, File::create(&index_tmp)?);
        Ok(SnapshotWriter {
            data,
            index,
            tmp,
            index_tmp,
            target: target.to_path_buf(),
            offset: HEADER_LEN as u64,
            count: 0,
            created_ms,
            started: Instant::now(),
            last: None,
        })
    }

    /// Appends one entry. Entries must come in strictly increasing (slot, key) order.
    pub fn push(&mut self, slot: u16, key: &[u8], value: &[u8], expire_at: u64) -> io::Result<()> {
        self.push_typed(slot, key, value, expire_at, 0)
    }

    /// Like [`push`](Self::push) for a value of type `value_type` in its serialized form.
    pub fn push_typed(
        &mut self,
        slot: u16,
        key: &[u8],
        value: &[u8],
        expire_at: u64,
        value_type: u16,
    ) -> io::Result<()> {
        if let Some((s, k)) = &self.last
            && (*s, k.as_slice()) >= (slot, key)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "snapshot entries out of (slot, key) order",
            ));
        }
        if u32::try_from(key.len()).is_err() || u32::try_from(value.len()).is_err() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "key or value over 4 GiB"));
        }
        let entry = IndexEntry::typed(slot, key, value, self.offset, expire_at, value_type);
        self.data.write_all(key)?;
        self.data.write_all(value)?;
        let len = (key.len() + value.len()) as u64;
        let pad = padding(len);
        self.data.write_all(&[0u8; 8][..pad])?;
        self.offset += len + pad as u64;
        self.index.write_all(&entry.encode())?;
        self.count += 1;
        match &mut self.last {
            Some((s, k)) => {
                *s = slot;
                k.clear();
                k.extend_from_slice(key);
            }
            None => self.last = Some((slot, key.to_vec())),
        }
        Ok(())
    }

    pub fn entries(&self) -> u64 {
        self.count
    }

    /// Completes the file and moves it into place atomically.
    pub fn finish(mut self) -> io::Result<Written> {
        self.index.flush()?;
        let mut index = File::open(&self.index_tmp)?;
        io::copy(&mut index, &mut self.data)?;
        let header = Header {
            entry_count: self.count,
            created_ms: self.created_ms,
            index_offset: self.offset,
            file_len: self.offset + self.count * ENTRY_LEN as u64,
        };
        let mut file = self.data.into_inner().map_err(|e| e.into_error())?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(&header.encode())?;
        file.sync_all()?;
        drop(file);
        fs::remove_file(&self.index_tmp)?;
        fs::rename(&self.tmp, &self.target)?;
        if let Some(dir) = self.target.parent() {
            // Make the rename itself durable.
            OpenOptions::new().read(true).open(dir)?.sync_all()?;
        }
        Ok(Written {
            path: self.target.clone(),
            entries: self.count,
            bytes: header.file_len,
            duration: self.started.elapsed(),
            created_ms: self.created_ms,
        })
    }

    /// Gives up, removing the temporary files.
    pub fn abort(self) {
        let _ = fs::remove_file(&self.tmp);
        let _ = fs::remove_file(&self.index_tmp);
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}
