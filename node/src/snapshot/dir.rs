//! A node's data directory: naming, finding the newest valid snapshot, retention.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::reader::Snapshot;

const PREFIX: &str = "snapshot-";
const SUFFIX: &str = ".shoal";

/// `snapshot-<20-digit sequence>.shoal`
pub fn file_name(seq: u64) -> String {
    format!("{PREFIX}{seq:020}{SUFFIX}")
}

fn sequence_of(name: &str) -> Option<u64> {
    name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?.parse().ok()
}

/// Snapshot files in `dir`, newest first.
pub fn list(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if let Some(seq) = entry.file_name().to_str().and_then(sequence_of) {
            found.push((seq, entry.path()));
        }
    }
    found.sort_by_key(|(seq, _)| std::cmp::Reverse(*seq));
    Ok(found)
}

/// The path for the next snapshot (one past the highest sequence present).
pub fn next_path(dir: &Path) -> io::Result<PathBuf> {
    let next = list(dir)?.first().map_or(1, |(seq, _)| seq + 1);
    Ok(dir.join(file_name(next)))
}

/// Opens the newest snapshot that passes its checks, logging every one that does not. Leftover
/// temporary files from an interrupted write are removed.
pub fn open_newest(dir: &Path) -> io::Result<Option<Snapshot>> {
    fs::create_dir_all(dir)?;
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.to_str().is_some_and(|p| p.ends_with(".tmp")) {
            tracing::warn!(file = %path.display(), "removing an unfinished snapshot from an interrupted write");
            let _ = fs::remove_file(&path);
        }
    }
    for (_, path) in list(dir)? {
        match Snapshot::open(&path) {
            Ok(snap) => return Ok(Some(snap)),
            Err(e) => tracing::error!(error = %e, "snapshot rejected; trying the previous one"),
        }
    }
    Ok(None)
}

/// Deletes all but the newest `keep` snapshots. Unlinking a file that is still mapped is safe:
/// the mapping lives on until dropped.
pub fn prune(dir: &Path, keep: usize) -> io::Result<usize> {
    let mut removed = 0;
    for (_, path) in list(dir)?.into_iter().skip(keep.max(1)) {
        fs::remove_file(&path)?;
        removed += 1;
    }
    Ok(removed)
}
