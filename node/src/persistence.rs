//! A node's persistence: load the newest valid snapshot at start, write new ones (on demand, on a
//! timer, on SIGTERM), keep the last few, and report status.
//!
//! Writing folds memory over the base snapshot slot by slot (`store::persist`) on a blocking
//! thread, so traffic continues; only one write runs at a time.
//!
//! Files that fail their checks are never deleted: they are quarantined (see `snapshot::dir`),
//! logged as errors, counted ([`PersistCounters`]) and reported in `SnapshotInfo.last_error`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use shoal_wire::SLOT_COUNT;
use shoal_wire::proto::SnapshotInfo;

use crate::snapshot::{Snapshot, SnapshotWriter, Written, dir};
use crate::store::Store;

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("this node has no --data-dir")]
    Disabled,
    #[error("snapshot write failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("snapshot task failed: {0}")]
    Task(String),
}

#[derive(Debug, Default)]
struct Status {
    in_progress: bool,
    written: u64,
    last: Option<Written>,
    last_error: Option<String>,
    /// The latest problem with the files in the data directory (a snapshot skipped at start,
    /// repaired or quarantined), for `SnapshotInfo.last_error` while the last write succeeded.
    problem: Option<String>,
    loaded: Option<(PathBuf, u64, Duration)>,
    /// The change count when the last successful snapshot began.
    dirty_saved: u64,
}

/// Counts of damaged snapshot files, for `/metrics`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PersistCounters {
    /// Files passed over at start because they failed their checks (the node loaded an older one
    /// or started empty).
    pub load_fallbacks: u64,
    /// Files renamed to `*.quarantined-<unix-ms>`.
    pub quarantined: u64,
    /// Snapshots loaded after repairing a damaged header.
    pub salvaged: u64,
}

static PROCESS_WRITER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[derive(Debug)]
pub struct Persistence {
    store: Arc<Store>,
    dir: Option<PathBuf>,
    keep: usize,
    writing: tokio::sync::Mutex<()>,
    status: Mutex<Status>,
    /// Files this process wrote or fully verified: the only ones it may delete.
    verified: Arc<dir::Verified>,
    load_fallbacks: AtomicU64,
    quarantined: AtomicU64,
    salvaged: AtomicU64,
}

impl Persistence {
    /// Loads the newest valid snapshot in `dir` (if any) under the empty `store`, and starts a
    /// background check of every entry in it. Without a directory, persistence is off.
    ///
    /// Newer files that fail their checks are quarantined and reported; a file whose header is
    /// damaged but whose entries all verify is loaded (see `dir::load`).
    pub fn open(store: Arc<Store>, dir: Option<PathBuf>, keep: usize) -> std::io::Result<Arc<Persistence>> {
        let p = Persistence {
            store,
            dir,
            keep: keep.max(1),
            writing: tokio::sync::Mutex::new(()),
            status: Mutex::default(),
            verified: Arc::default(),
            load_fallbacks: AtomicU64::new(0),
            quarantined: AtomicU64::new(0),
            salvaged: AtomicU64::new(0),
        };
        if let Some(d) = &p.dir {
            let started = Instant::now();
            let loaded = dir::load(d)?;
            let took = started.elapsed();
            p.note_rejected(&loaded.rejected);
            p.load_fallbacks.fetch_add(loaded.rejected.len() as u64, Ordering::Relaxed);
            let mut problems: Vec<String> = loaded.rejected.iter().map(|r| r.to_string()).collect();
            if let Some(snap) = loaded.snapshot {
                let snap = Arc::new(snap);
                let name = snap.path().file_name().unwrap_or_default().to_string_lossy().into_owned();
                if !loaded.rejected.is_empty() {
                    tracing::error!(
                        file = %snap.path().display(),
                        skipped = loaded.rejected.len(),
                        "fell back to an older snapshot: newer ones failed their checks"
                    );
                }
                tracing::info!(
                    file = %snap.path().display(),
                    entries = snap.len(),
                    load_us = took.as_micros() as u64,
                    "serving from snapshot"
                );
                p.status.lock().loaded = Some((snap.path().to_path_buf(), snap.len() as u64, took));
                p.store.set_base(snap.clone());
                match loaded.salvaged {
                    // Verified in full already. Not recorded as verified: a file with a damaged
                    // header is never deleted, and the first prune after a newer snapshot is
                    // written quarantines it.
                    Some(repair) => {
                        p.salvaged.fetch_add(1, Ordering::Relaxed);
                        problems
                            .push(format!("{name}: header damaged, repaired in memory ({repair}); loaded"));
                    }
                    None => spawn_verifier(snap, p.verified.clone()),
                }
                if !loaded.rejected.is_empty() {
                    problems.push(format!("loaded {name} instead"));
                }
            } else {
                if !loaded.rejected.is_empty() {
                    tracing::error!(
                        dir = %d.display(),
                        skipped = loaded.rejected.len(),
                        "no usable snapshot: every one failed its checks; starting empty"
                    );
                    problems.push("started empty".into());
                }
                tracing::info!(dir = %d.display(), "no snapshot to load; starting empty");
            }
            match read_libraries(d) {
                Ok(Some(payload)) => {
                    p.store.libraries.set(payload);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(error = %e, "the function libraries file failed its checks; starting without them");
                    problems.push(format!("{LIBRARIES_FILE}: {e}"));
                }
            }
            if !problems.is_empty() {
                p.status.lock().problem = Some(format!("at start: {}", problems.join("; ")));
            }
        }
        Ok(Arc::new(p))
    }

    fn note_rejected(&self, rejected: &[dir::Rejected]) {
        let moved = rejected.iter().filter(|r| r.quarantined_as.is_some()).count();
        self.quarantined.fetch_add(moved as u64, Ordering::Relaxed);
    }

    /// Counts of damaged snapshot files since the node started.
    pub fn counters(&self) -> PersistCounters {
        PersistCounters {
            load_fallbacks: self.load_fallbacks.load(Ordering::Relaxed),
            quarantined: self.quarantined.load(Ordering::Relaxed),
            salvaged: self.salvaged.load(Ordering::Relaxed),
        }
    }

    pub fn enabled(&self) -> bool {
        self.dir.is_some()
    }

    /// Writes a snapshot now, in the background (paced, see [`BACKGROUND_DUTY`]), waiting for any
    /// write already running first.
    pub async fn snapshot(self: &Arc<Self>) -> Result<Written, PersistError> {
        self.snapshot_at(BACKGROUND_DUTY).await
    }

    /// The snapshot taken at shutdown, when no traffic is left: full speed.
    pub async fn final_snapshot(self: &Arc<Self>) -> Result<Written, PersistError> {
        self.snapshot_at(1.0).await
    }

    async fn snapshot_at(self: &Arc<Self>, duty: f64) -> Result<Written, PersistError> {
        let dir = self.dir.clone().ok_or(PersistError::Disabled)?;
        let _turn = self.writing.lock().await;
        // One writer per process: nodes embedded in one process (the local cluster) take turns
        // rather than all competing with traffic at once; separate node processes are unaffected.
        let _process_turn = PROCESS_WRITER.lock().await;
        self.status.lock().in_progress = true;
        // Changes from here on are not in this snapshot (Redis's `dirty_before_bgsave`).
        let dirty_at_start = self.store.dirty();
        let this = self.clone();
        let result = tokio::task::spawn_blocking(move || {
            write_and_prune(&this.store, &dir, this.keep, duty, &this.verified)
        })
        .await
        .map_err(|e| PersistError::Task(e.to_string()))
        .and_then(|r| r.map_err(PersistError::from));
        let result = result.map(|(written, pruned)| {
            if !pruned.rejected.is_empty() {
                self.note_rejected(&pruned.rejected);
                let list: Vec<String> = pruned.rejected.iter().map(|r| r.to_string()).collect();
                self.status.lock().problem = Some(format!("after a snapshot: {}", list.join("; ")));
            }
            written
        });
        let mut st = self.status.lock();
        st.in_progress = false;
        match &result {
            Ok(w) => {
                st.written += 1;
                st.dirty_saved = dirty_at_start;
                st.last = Some(w.clone());
                st.last_error = None;
                tracing::info!(
                    file = %w.path.display(),
                    entries = w.entries,
                    bytes = w.bytes,
                    ms = w.duration.as_millis() as u64,
                    "snapshot written"
                );
            }
            Err(e) => {
                st.last_error = Some(e.to_string());
                tracing::error!(error = %e, "snapshot failed");
            }
        }
        result
    }

    /// Writes a snapshot every `interval` until `stop` resolves.
    pub async fn run_periodic(
        self: Arc<Self>,
        interval: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => { let _ = self.snapshot().await; }
                _ = &mut stop => return,
            }
        }
    }

    pub fn info(&self) -> SnapshotInfo {
        let st = self.status.lock();
        let mut info = SnapshotInfo {
            enabled: self.enabled(),
            in_progress: st.in_progress,
            snapshots_written: st.written,
            last_ok: st.last_error.is_none(),
            // The last write's error; while writes succeed, the latest problem with the files.
            last_error: st.last_error.clone().or_else(|| st.problem.clone()).unwrap_or_default(),
            corrupt_entries: self.store.base().map_or(0, |b| b.corrupt_entries()),
            changes_since_last_save: self.store.dirty().saturating_sub(st.dirty_saved),
            ..Default::default()
        };
        if let Some(w) = &st.last {
            info.last_created_ms = w.created_ms;
            info.last_duration_ms = w.duration.as_millis() as u64;
            info.last_bytes = w.bytes;
            info.last_entries = w.entries;
            info.last_file = w.path.display().to_string();
        }
        if let Some((path, entries, took)) = &st.loaded {
            info.loaded_file = path.display().to_string();
            info.loaded_entries = *entries;
            info.load_us = took.as_micros() as u64;
        }
        info
    }
}

/// Share of one core a background snapshot may use: after each stretch of work it sleeps long
/// enough to stay at this duty cycle, so requests keep their latency while it runs. (The snapshot
/// taken at shutdown, with traffic stopped, runs at full speed.)
pub const BACKGROUND_DUTY: f64 = 0.1;

/// Folds the store into a new snapshot file in `dir` at full speed and prunes old ones (blocking).
/// Old files are deleted only after full verification (this call knows no file but its own).
pub fn write_snapshot(store: &Store, dir: &Path, keep: usize) -> std::io::Result<Written> {
    write_snapshot_paced(store, dir, keep, 1.0)
}

/// Like [`write_snapshot`], using at most `duty` (0..=1) of a core.
pub fn write_snapshot_paced(store: &Store, dir: &Path, keep: usize, duty: f64) -> std::io::Result<Written> {
    write_and_prune(store, dir, keep, duty, &dir::Verified::default()).map(|(w, _)| w)
}

/// Writes a snapshot, re-opens it with every header check, records it in `verified` and prunes
/// (`dir::prune`): the newest `keep` good files stay, other good ones go, bad ones are quarantined.
fn write_and_prune(
    store: &Store,
    dir: &Path,
    keep: usize,
    duty: f64,
    verified: &dir::Verified,
) -> std::io::Result<(Written, dir::Pruned)> {
    std::fs::create_dir_all(dir)?;
    let target = dir::next_path(dir)?;
    let now = store.now_ms();
    let plan = store.plan(0..=(SLOT_COUNT as u16 - 1));
    let mut writer = SnapshotWriter::create(&target, now)?;
    let mut last_report = Instant::now();
    let mut pacer = Pacer::new(duty);
    for slot in 0..SLOT_COUNT as u16 {
        pacer.tick();
        for e in store.slot_entries(slot, &plan) {
            if let Err(err) = writer.push_typed(slot, &e.key, &e.value, e.expire_at, e.value_type as u16) {
                writer.abort();
                return Err(err);
            }
        }
        if last_report.elapsed() > Duration::from_secs(2) {
            tracing::info!(slot, of = SLOT_COUNT, entries = writer.entries(), "snapshot in progress");
            last_report = Instant::now();
        }
    }
    let written = writer.finish()?;
    write_libraries(store, dir)?;
    Snapshot::open(&written.path)
        .map_err(|e| std::io::Error::other(format!("the snapshot just written: {e}")))?;
    verified.add(&written.path);
    let pruned = dir::prune(dir, keep, verified)?;
    Ok((written, pruned))
}

/// The function libraries beside the snapshots: FUNCTION DUMP's payload as of the newest
/// snapshot (absent: none), replaced whole with each snapshot written.
pub const LIBRARIES_FILE: &str = "functions.rdb";

fn write_libraries(store: &Store, dir: &Path) -> std::io::Result<()> {
    let path = dir.join(LIBRARIES_FILE);
    let payload = store.libraries.get().bytes;
    if payload.is_empty() {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    let tmp = dir.join(format!("{LIBRARIES_FILE}.tmp"));
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&payload)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &path)
}

/// The libraries file's payload, checked (RDB version and CRC64, as FUNCTION RESTORE checks).
fn read_libraries(dir: &Path) -> Result<Option<bytes::Bytes>, String> {
    match std::fs::read(dir.join(LIBRARIES_FILE)) {
        Ok(bytes) if crate::rdb::verify(&bytes).is_some() => Ok(Some(bytes.into())),
        Ok(_) => Err("its version or checksum is wrong".into()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Keeps a loop at a duty cycle: work in short bursts (so a burst never holds a core long enough to
/// delay requests noticeably), then sleep in proportion.
struct Pacer {
    duty: f64,
    since: Instant,
}

impl Pacer {
    fn new(duty: f64) -> Pacer {
        Pacer { duty: duty.clamp(0.01, 1.0), since: Instant::now() }
    }

    fn tick(&mut self) {
        if self.duty >= 1.0 {
            return;
        }
        let worked = self.since.elapsed();
        if worked >= Duration::from_micros(200) {
            std::thread::sleep(worked.mul_f64((1.0 - self.duty) / self.duty));
            self.since = Instant::now();
        }
    }
}

fn spawn_verifier(snap: Arc<Snapshot>, verified: Arc<dir::Verified>) {
    std::thread::Builder::new()
        .name("snapshot-verify".into())
        .spawn(move || {
            let started = Instant::now();
            let report = snap.verify();
            if report.is_clean() {
                verified.add(snap.path());
                tracing::info!(
                    file = %snap.path().display(),
                    entries = report.entries,
                    ms = started.elapsed().as_millis() as u64,
                    "snapshot verified"
                );
            } else {
                tracing::error!(
                    file = %snap.path().display(),
                    corrupt = report.corrupt,
                    out_of_order = report.out_of_order,
                    misplaced = report.misplaced,
                    "snapshot is damaged: the damaged entries are never served"
                );
            }
        })
        .ok();
}
