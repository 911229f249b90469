//! How late expired keys leave the store: the delay from a key's expiry time to its removal,
//! by active expiry (the background cycle) and by lazy expiry (an op that found it expired), as
//! histograms shared by every shard (relaxed atomics: recorded under the shard lock already held).
//! The age of the oldest key still stored past its expiry is computed when asked
//! (`Store::oldest_overdue_ms`).

use shoal_telemetry::metrics::Histogram;

/// Lateness buckets in seconds: 1 ms (on time, to the clock's resolution) to 5 minutes.
pub const LAG_BUCKETS: &[f64] = &[0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];

#[derive(Debug)]
pub struct ExpiryLag {
    pub active: Histogram,
    pub lazy: Histogram,
}

impl Default for ExpiryLag {
    fn default() -> Self {
        ExpiryLag { active: Histogram::new(LAG_BUCKETS), lazy: Histogram::new(LAG_BUCKETS) }
    }
}

/// Who removed an expired key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    Active,
    Lazy,
}

impl ExpiryLag {
    /// A key due at `expire_at` removed at `now` (Unix ms).
    pub fn record(&self, how: Removal, expire_at: u64, now: u64) {
        let late = now.saturating_sub(expire_at) as f64 / 1000.0;
        match how {
            Removal::Active => self.active.observe(late),
            Removal::Lazy => self.lazy.observe(late),
        }
    }
}
