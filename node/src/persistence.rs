//! A node's persistence: load the newest valid snapshot at start, write new ones (on demand, on a
//! timer, on SIGTERM), keep the last few, and report status.
//!
//! Writing folds memory over the base snapshot slot by slot (`store::persist`) on a blocking
//! thread, so traffic continues; only one write runs at a time.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
    loaded: Option<(PathBuf, u64, Duration)>,
}

static PROCESS_WRITER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[derive(Debug)]
pub struct Persistence {
    store: Arc<Store>,
    dir: Option<PathBuf>,
    keep: usize,
    writing: tokio::sync::Mutex<()>,
    status: Mutex<Status>,
}

impl Persistence {
    /// Loads the newest valid snapshot in `dir` (if any) under the empty `store`, and starts a
    /// background check of every entry in it. Without a directory, persistence is off.
    pub fn open(store: Arc<Store>, dir: Option<PathBuf>, keep: usize) -> std::io::Result<Arc<Persistence>> {
        let p = Persistence {
            store,
            dir,
            keep: keep.max(1),
            writing: tokio::sync::Mutex::new(()),
            status: Mutex::default(),
        };
        if let Some(d) = &p.dir {
            let started = Instant::now();
            if let Some(snap) = dir::open_newest(d)? {
                let took = started.elapsed();
                let snap = Arc::new(snap);
                tracing::info!(
                    file = %snap.path().display(),
                    entries = snap.len(),
                    load_us = took.as_micros() as u64,
                    "serving from snapshot"
                );
                p.status.lock().loaded = Some((snap.path().to_path_buf(), snap.len() as u64, took));
                p.store.set_base(snap.clone());
                spawn_verifier(snap);
            } else {
                tracing::info!(dir = %d.display(), "no snapshot to load; starting empty");
            }
        }
        Ok(Arc::new(p))
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
        let this = self.clone();
        let result =
            tokio::task::spawn_blocking(move || write_snapshot_paced(&this.store, &dir, this.keep, duty))
                .await
                .map_err(|e| PersistError::Task(e.to_string()))
                .and_then(|r| r.map_err(PersistError::from));
        let mut st = self.status.lock();
        st.in_progress = false;
        match &result {
            Ok(w) => {
                st.written += 1;
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
            last_error: st.last_error.clone().unwrap_or_default(),
            corrupt_entries: self.store.base().map_or(0, |b| b.corrupt_entries()),
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
pub fn write_snapshot(store: &Store, dir: &Path, keep: usize) -> std::io::Result<Written> {
    write_snapshot_paced(store, dir, keep, 1.0)
}

/// Like [`write_snapshot`], using at most `duty` (0..=1) of a core.
pub fn write_snapshot_paced(store: &Store, dir: &Path, keep: usize, duty: f64) -> std::io::Result<Written> {
    std::fs::create_dir_all(dir)?;
    let target = dir::next_path(dir)?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let plan = store.plan(0..=(SLOT_COUNT as u16 - 1));
    let mut writer = SnapshotWriter::create(&target, now)?;
    let mut last_report = Instant::now();
    let mut pacer = Pacer::new(duty);
    for slot in 0..SLOT_COUNT as u16 {
        pacer.tick();
        for e in store.slot_entries(slot, &plan) {
            if let Err(err) = writer.push(slot, &e.key, &e.value, e.expire_at) {
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
    dir::prune(dir, keep)?;
    Ok(written)
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

fn spawn_verifier(snap: Arc<Snapshot>) {
    std::thread::Builder::new()
        .name("snapshot-verify".into())
        .spawn(move || {
            let started = Instant::now();
            let report = snap.verify();
            if report.corrupt == 0 && report.out_of_order == 0 {
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
                    "snapshot is damaged: the damaged entries are never served"
                );
            }
        })
        .ok();
}
