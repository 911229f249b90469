//! Slot pulls into this node ([`Pulls`]): each migration's progress (for the coordinator and
//! SHOAL TOPOLOGY), the counters `/metrics` shows, and the rate limit all pulls share. Below the
//! membership, which starts pulls, and the puller (`crate::migrate`), which reports here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use shoal_telemetry::metrics::{Histogram, LONG_BUCKETS};
use shoal_wire::Migration;
use shoal_wire::proto::MigrationProgress;

/// Progress of pulling one migration's slots (and when it started), keyed by migration and
/// topology version.
type Board = HashMap<(Migration, u64), (MigrationProgress, Instant)>;

#[derive(Debug)]
pub struct Pulls {
    board: Mutex<Board>,
    pub keys_in: AtomicU64,
    pub bytes_in: AtomicU64,
    /// Slots whose pull into this node finished.
    pub slots_in: AtomicU64,
    /// How long pulls into this node took.
    pub pull_seconds: Histogram,
    /// Pull rate limit in bytes per second (0: none), and when the bucket is next free.
    migrate_rate: AtomicU64,
    pace_next: Mutex<tokio::time::Instant>,
}

impl Default for Pulls {
    fn default() -> Self {
        Pulls {
            board: Mutex::default(),
            keys_in: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            slots_in: AtomicU64::new(0),
            pull_seconds: Histogram::new(LONG_BUCKETS),
            migrate_rate: AtomicU64::new(0),
            pace_next: Mutex::new(tokio::time::Instant::now()),
        }
    }
}

impl Pulls {
    /// Limits how fast migrations pull into this node (bytes per second, 0: no limit).
    pub fn set_migrate_rate(&self, bytes_per_sec: u64) {
        self.migrate_rate.store(bytes_per_sec, Ordering::Relaxed);
    }

    pub fn migrate_rate(&self) -> u64 {
        self.migrate_rate.load(Ordering::Relaxed)
    }

    /// Waits as long as pulling `bytes` more takes at the rate limit, shared by all the pulls
    /// into this node (a token bucket without burst: each chunk books the next free interval).
    pub async fn pace(&self, bytes: u64) {
        let rate = self.migrate_rate();
        if rate == 0 {
            return;
        }
        let due = {
            let mut next = self.pace_next.lock();
            let start = (*next).max(tokio::time::Instant::now());
            *next = start + Duration::from_secs_f64(bytes as f64 / rate as f64);
            *next
        };
        tokio::time::sleep_until(due).await;
    }

    /// Puts `migrations` (this node's, at topology `version`) on the board, forgetting those of
    /// other versions; returns the ones not on it yet, whose pulls must start.
    pub(super) fn begin<'a>(
        &self,
        version: u64,
        migrations: impl Iterator<Item = &'a Migration>,
    ) -> Vec<Migration> {
        let mut board = self.board.lock();
        board.retain(|(_, v), _| *v == version);
        let mut fresh = Vec::new();
        for m in migrations {
            let key = (*m, version);
            if board.contains_key(&key) {
                continue;
            }
            let progress = MigrationProgress {
                start: m.start.into(),
                end: m.end.into(),
                from: m.from,
                to: m.to,
                version,
                ..Default::default()
            };
            board.insert(key, (progress, Instant::now()));
            fresh.push(*m);
        }
        fresh
    }

    /// Updates one migration's progress (called by the puller).
    pub fn report(&self, m: Migration, version: u64, f: impl FnOnce(&mut MigrationProgress)) {
        if let Some((p, started)) = self.board.lock().get_mut(&(m, version)) {
            let was_done = p.done;
            f(p);
            if !was_done {
                p.elapsed_ms = started.elapsed().as_millis() as u64;
            }
            if p.done && !was_done {
                self.slots_in.fetch_add(m.len() as u64, Ordering::Relaxed);
                self.pull_seconds.observe(started.elapsed().as_secs_f64());
            }
        }
    }

    /// Progress of the migrations into this node at topology `version`.
    pub fn progress(&self, version: u64) -> Vec<MigrationProgress> {
        let mut out: Vec<MigrationProgress> = self
            .board
            .lock()
            .iter()
            .filter(|((_, v), _)| *v == version)
            .map(|(_, (p, started))| {
                let mut p = p.clone();
                if !p.done {
                    p.elapsed_ms = started.elapsed().as_millis() as u64;
                }
                p
            })
            .collect();
        out.sort_by_key(|p| p.start);
        out
    }
}
