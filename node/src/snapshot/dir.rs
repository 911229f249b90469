//! A node's data directory: naming, finding the newest usable snapshot, retention, quarantine.
//!
//! The rules (docs/snapshot-format.md, "Files in a data directory"):
//! - a file is deleted only if it is a snapshot this process wrote (and re-opened with every
//!   header check), or one that passed full verification ([`Snapshot::verify`]) in this process;
//! - a file named like a snapshot that fails its checks is *quarantined*: renamed to
//!   `<name>.quarantined-<unix-ms>` in the same directory, logged as an error, and never deleted
//!   or counted as one of the `--snapshot-keep` kept snapshots;
//! - a file that cannot be read at all (an I/O error, not bad content) is left where it is, logged,
//!   and neither counted nor deleted.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use super::format::{FormatError, HeaderRepair};
use super::reader::{OpenError, Snapshot};

const PREFIX: &str = "snapshot-";
const SUFFIX: &str = ".shoal";
/// Appended, with the Unix time in milliseconds, to a quarantined file's name.
pub const QUARANTINE_MARK: &str = ".quarantined-";

/// `snapshot-<20-digit sequence>.shoal`
pub fn file_name(seq: u64) -> String {
    format!("{PREFIX}{seq:020}{SUFFIX}")
}

fn sequence_of(name: &str) -> Option<u64> {
    name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?.parse().ok()
}

/// The sequence of a quarantined snapshot (`snapshot-<seq>.shoal.quarantined-<ms>`).
fn quarantined_sequence_of(name: &str) -> Option<u64> {
    let (live, ms) = name.split_once(QUARANTINE_MARK)?;
    ms.bytes().all(|b| b.is_ascii_digit()).then_some(())?;
    sequence_of(live)
}

/// Whether `name` is a quarantined snapshot file.
pub fn is_quarantined(name: &str) -> bool {
    quarantined_sequence_of(name).is_some()
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

/// The path for the next snapshot: one past the highest sequence present, quarantined files
/// included, so a sequence number never names two different files.
pub fn next_path(dir: &Path) -> io::Result<PathBuf> {
    let mut highest = 0;
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(seq) = sequence_of(name).or_else(|| quarantined_sequence_of(name)) {
            highest = highest.max(seq);
        }
    }
    Ok(dir.join(file_name(highest + 1)))
}

/// Snapshot files known to be good in this process: written by it, or fully verified. Only these
/// may be deleted. A file is known by its path, inode and length, so a file replaced behind the
/// node's back is not mistaken for the one that was checked.
#[derive(Debug, Default)]
pub struct Verified {
    files: Mutex<HashMap<PathBuf, (u64, u64)>>,
}

fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).ok().map(|m| (m.ino(), m.len()))
}

impl Verified {
    /// Records `path` as good, as it is now.
    pub fn add(&self, path: &Path) {
        if let Some(id) = identity(path) {
            self.files.lock().insert(path.to_path_buf(), id);
        }
    }

    /// Whether `path` is the very file recorded as good.
    pub fn contains(&self, path: &Path) -> bool {
        let known = self.files.lock().get(path).copied();
        known.is_some() && known == identity(path)
    }

    fn forget(&self, path: &Path) {
        self.files.lock().remove(path);
    }
}

/// A snapshot file that failed its checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub path: PathBuf,
    pub reason: String,
    /// Where it was moved; `None` if it was left in place (it could not be read at all, or the
    /// rename failed).
    pub quarantined_as: Option<PathBuf>,
}

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.path.file_name().unwrap_or_default().to_string_lossy();
        write!(f, "{name}: {}", self.reason)?;
        match &self.quarantined_as {
            Some(to) => {
                write!(f, " (quarantined as {})", to.file_name().unwrap_or_default().to_string_lossy())
            }
            None => write!(f, " (left in place)"),
        }
    }
}

/// What [`load`] found.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The newest usable snapshot, if any.
    pub snapshot: Option<Snapshot>,
    /// Files newer than the one loaded (all of them, if none was) that failed their checks.
    pub rejected: Vec<Rejected>,
    /// Set when the loaded file's header was damaged and repaired in memory (the file itself is
    /// unchanged; every entry was verified before it was used).
    pub salvaged: Option<HeaderRepair>,
}

/// Renames `path` to `<name>.quarantined-<unix-ms>` and says so (an error: something damaged or
/// replaced a snapshot). Returns the new path, or `None` (logged) if the rename failed.
pub fn quarantine(path: &Path, reason: &str) -> Option<PathBuf> {
    let ms = shoal_wire::clock::Clock::now_ms(&shoal_wire::clock::SystemClock);
    let mut target = None;
    for bump in 0..1000 {
        let mut name = path.as_os_str().to_owned();
        name.push(format!("{QUARANTINE_MARK}{}", ms + bump));
        let candidate = PathBuf::from(name);
        if !candidate.exists() {
            target = Some(candidate);
            break;
        }
    }
    let result = target
        .ok_or_else(|| io::Error::new(io::ErrorKind::AlreadyExists, "no free quarantine name"))
        .and_then(|to| {
            fs::rename(path, &to)?;
            if let Some(dir) = path.parent() {
                let _ = fs::File::open(dir).and_then(|d| d.sync_all());
            }
            Ok(to)
        });
    match result {
        Ok(to) => {
            tracing::error!(
                file = %path.display(),
                reason,
                quarantined_as = %to.display(),
                "snapshot file failed its checks: quarantined (renamed, never deleted; inspect or remove it)"
            );
            Some(to)
        }
        Err(e) => {
            tracing::error!(
                file = %path.display(),
                reason,
                error = %e,
                "snapshot file failed its checks and could not be quarantined: left in place, never deleted"
            );
            None
        }
    }
}

/// Whether a header that fails these checks may be a damaged header (the checksum may not match),
/// as opposed to a truncated, extended or short file.
fn maybe_damaged_header(e: &FormatError) -> bool {
    matches!(
        e,
        FormatError::HeaderChecksum
            | FormatError::BadMagic
            | FormatError::UnsupportedVersion(_)
            | FormatError::WrongByteOrder(_)
    )
}

/// Finds the newest usable snapshot in `dir`: the newest that passes its checks, or whose damaged
/// header can be repaired with every entry then verified ([`Snapshot::open_salvaged`]). Every
/// newer file that fails is quarantined (or, unreadable, left in place) and reported. Leftover
/// temporary files from an interrupted write are removed.
pub fn load(dir: &Path) -> io::Result<Loaded> {
    fs::create_dir_all(dir)?;
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.to_str().is_some_and(|p| p.ends_with(".tmp")) {
            tracing::warn!(file = %path.display(), "removing an unfinished snapshot from an interrupted write");
            let _ = fs::remove_file(&path);
        }
    }
    let mut loaded = Loaded::default();
    for (_, path) in list(dir)? {
        match Snapshot::open(&path) {
            Ok(snap) => {
                loaded.snapshot = Some(snap);
                return Ok(loaded);
            }
            Err(OpenError::Io { source, .. }) => {
                let reason = format!("cannot read it: {source}");
                tracing::error!(file = %path.display(), reason, "snapshot file left in place; trying the previous one");
                loaded.rejected.push(Rejected { path, reason, quarantined_as: None });
            }
            Err(OpenError::Format { source, .. }) => {
                let mut reason = source.to_string();
                if maybe_damaged_header(&source) {
                    match Snapshot::open_salvaged(&path) {
                        Ok((snap, repair)) => {
                            tracing::error!(
                                file = %path.display(),
                                damage = %source,
                                repair = %repair,
                                entries = snap.len(),
                                "snapshot header is damaged; repaired it in memory and verified every entry: \
                                 serving this file (unchanged on disk; quarantined once a newer snapshot is written)"
                            );
                            loaded.snapshot = Some(snap);
                            loaded.salvaged = Some(repair);
                            return Ok(loaded);
                        }
                        Err(why) => reason = format!("{reason}; cannot be salvaged: {why}"),
                    }
                }
                let quarantined_as = quarantine(&path, &reason);
                loaded.rejected.push(Rejected { path, reason, quarantined_as });
            }
        }
    }
    Ok(loaded)
}

/// [`load`], for callers that need only the snapshot.
pub fn open_newest(dir: &Path) -> io::Result<Option<Snapshot>> {
    load(dir).map(|l| l.snapshot)
}

/// What [`prune`] did.
#[derive(Debug, Default)]
pub struct Pruned {
    /// The good snapshots kept, newest first.
    pub kept: Vec<PathBuf>,
    pub deleted: Vec<PathBuf>,
    /// Files that failed their checks (quarantined or, unreadable, left in place).
    pub rejected: Vec<Rejected>,
}

/// Keeps the newest `keep` good snapshots in `dir` and deletes the other good ones; quarantines
/// every file that fails its checks. A file is good if `verified` knows it or it passes full
/// verification now (which reads it whole, once per process: it is then recorded in `verified`).
/// Unlinking a file that is still mapped is safe: the mapping lives on until dropped.
pub fn prune(dir: &Path, keep: usize, verified: &Verified) -> io::Result<Pruned> {
    let mut pruned = Pruned::default();
    for (_, path) in list(dir)? {
        let check = if verified.contains(&path) { Ok(()) } else { check_fully(&path, verified) };
        match check {
            Ok(()) if pruned.kept.len() < keep.max(1) => pruned.kept.push(path),
            Ok(()) => match fs::remove_file(&path) {
                Ok(()) => {
                    verified.forget(&path);
                    pruned.deleted.push(path);
                }
                Err(e) => {
                    tracing::error!(file = %path.display(), error = %e, "could not delete an old snapshot")
                }
            },
            Err((reason, readable)) => {
                let quarantined_as = if readable {
                    quarantine(&path, &reason)
                } else {
                    tracing::error!(file = %path.display(), reason, "snapshot file cannot be read: left in place, not counted as kept");
                    None
                };
                pruned.rejected.push(Rejected { path, reason, quarantined_as });
            }
        }
    }
    Ok(pruned)
}

/// Opens and verifies every entry of `path`; `Err((reason, readable))` if it is not good, where
/// `readable` says the content itself is at fault (so the file is quarantined) rather than I/O.
fn check_fully(path: &Path, verified: &Verified) -> Result<(), (String, bool)> {
    let snap = Snapshot::open(path).map_err(|e| match e {
        OpenError::Io { source, .. } => (format!("cannot read it: {source}"), false),
        OpenError::Format { source, .. } => (source.to_string(), true),
    })?;
    let report = snap.verify();
    if !report.is_clean() {
        return Err((
            format!(
                "{} of {} entries are damaged, {} out of order, {} misplaced",
                report.corrupt, report.entries, report.out_of_order, report.misplaced
            ),
            true,
        ));
    }
    verified.add(path);
    Ok(())
}
