//! Per-command statistics (INFO commandstats) and the slow log (SLOWLOG), kept by the router,
//! which is where a client's command starts and ends.
//!
//! Every command spec (subcommands included) gets a slot in a table of atomic counters (the
//! registry numbers them: `crate::cmd::slots`), so recording a call costs three relaxed
//! additions.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;

/// Stats slots: one per command and subcommand, numbered by the registry
/// (`crate::cmd::slots`), which checks that they fit.
pub const SLOTS: usize = 512;

/// Latency buckets per command: bucket `k` counts calls that took less than 2^k µs (and at least
/// 2^(k-1)); the last one takes everything longer.
pub const BUCKETS: usize = 40;

#[derive(Debug)]
struct Counters {
    calls: AtomicU64,
    usec: AtomicU64,
    failed: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            calls: AtomicU64::new(0),
            usec: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// One command's numbers (INFO commandstats and latencystats, LATENCY HISTOGRAM).
#[derive(Debug, Clone)]
pub struct CommandNumbers {
    pub name: &'static str,
    pub calls: u64,
    pub usec: u64,
    pub failed: u64,
    pub buckets: [u64; BUCKETS],
}

impl CommandNumbers {
    /// The latency below which `p` percent of calls fell, in µs, to the resolution of the
    /// power-of-two buckets (the bucket's upper edge).
    pub fn percentile(&self, p: f64) -> f64 {
        let total: u64 = self.buckets.iter().sum();
        if total == 0 {
            return 0.0;
        }
        let target = (total as f64 * p / 100.0).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (k, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= target {
                return (1u64 << k) as f64;
            }
        }
        (1u64 << (BUCKETS - 1)) as f64
    }
}

/// Redis's slowlog defaults.
pub const DEFAULT_SLOWER_THAN_US: i64 = 10_000;
pub const DEFAULT_SLOWLOG_LEN: usize = 128;

#[derive(Debug)]
pub struct CommandStats {
    counters: Vec<Counters>,
    /// Error replies by error code (INFO errorstats), and all of them (`total_error_replies`).
    errors: Mutex<std::collections::BTreeMap<Vec<u8>, u64>>,
    error_replies: AtomicU64,
    /// `slowlog-log-slower-than` in µs (negative: off; 0: every command).
    pub slower_than_us: AtomicI64,
    pub slowlog_max_len: AtomicUsize,
    slowlog: Mutex<SlowLog>,
}

#[derive(Debug, Default)]
struct SlowLog {
    next_id: u64,
    entries: VecDeque<SlowEntry>,
}

#[derive(Debug, Clone)]
pub struct SlowEntry {
    pub id: u64,
    /// Unix seconds when the command was logged.
    pub at: u64,
    pub usec: u64,
    pub args: Vec<Bytes>,
    pub peer: String,
    pub name: String,
}

impl Default for CommandStats {
    fn default() -> Self {
        CommandStats {
            counters: (0..SLOTS).map(|_| Counters::default()).collect(),
            errors: Mutex::default(),
            error_replies: AtomicU64::new(0),
            slower_than_us: AtomicI64::new(DEFAULT_SLOWER_THAN_US),
            slowlog_max_len: AtomicUsize::new(DEFAULT_SLOWLOG_LEN),
            slowlog: Mutex::new(SlowLog::default()),
        }
    }
}

/// Different error codes INFO errorstats keeps (Redis's ERRORSTATS_LIMIT).
const ERROR_CODES: usize = 128;

/// At most this many arguments, each cut to this many bytes, are kept per slow-log entry (as
/// Redis does: SLOWLOG_ENTRY_MAX_ARGC, SLOWLOG_ENTRY_MAX_STRING).
const MAX_ARGS: usize = 32;
const MAX_ARG_BYTES: usize = 128;

impl CommandStats {
    /// Records a finished call of the command in `slot`.
    pub fn record(&self, slot: usize, took: Duration, failed: bool) {
        self.record_n(slot, took, failed, 1);
    }

    /// `n` calls that each took `took` (requests timed together), at the cost of one.
    pub fn record_n(&self, slot: usize, took: Duration, failed: bool, n: u64) {
        let Some(c) = self.counters.get(slot) else { return };
        if n == 0 {
            return;
        }
        c.calls.fetch_add(n, Ordering::Relaxed);
        let us = took.as_micros() as u64;
        c.usec.fetch_add(us * n, Ordering::Relaxed);
        let bucket = ((u64::BITS - us.leading_zeros()) as usize).min(BUCKETS - 1);
        c.buckets[bucket].fetch_add(n, Ordering::Relaxed);
        if failed {
            c.failed.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Logs the call if it took at least `slowlog-log-slower-than`; `who` gives the time (Unix
    /// seconds), the client's address and name, asked only for a call that is logged.
    pub fn maybe_log(&self, took: Duration, args: &[Bytes], who: impl FnOnce() -> (u64, String, String)) {
        let threshold = self.slower_than_us.load(Ordering::Relaxed);
        if threshold < 0 || (took.as_micros() as i64) < threshold {
            return;
        }
        let (now_unix, peer, name) = who();
        let mut kept: Vec<Bytes> = args.iter().take(MAX_ARGS).map(clip).collect();
        if args.len() > MAX_ARGS {
            let more = args.len() - MAX_ARGS + 1;
            kept[MAX_ARGS - 1] = Bytes::from(format!("... ({more} more arguments)"));
        }
        let max = self.slowlog_max_len.load(Ordering::Relaxed);
        let mut log = self.slowlog.lock();
        let id = log.next_id;
        log.next_id += 1;
        log.entries.push_front(SlowEntry {
            id,
            at: now_unix,
            usec: took.as_micros() as u64,
            args: kept,
            peer,
            name,
        });
        log.entries.truncate(max);
    }

    /// The newest `n` slow-log entries, newest first.
    pub fn slowlog(&self, n: usize) -> Vec<SlowEntry> {
        self.slowlog.lock().entries.iter().take(n).cloned().collect()
    }

    pub fn slowlog_len(&self) -> usize {
        self.slowlog.lock().entries.len()
    }

    pub fn slowlog_reset(&self) {
        self.slowlog.lock().entries.clear();
    }

    /// Drops the slow log down to the configured length (after CONFIG SET slowlog-max-len).
    pub fn slowlog_trim(&self) {
        let max = self.slowlog_max_len.load(Ordering::Relaxed);
        self.slowlog.lock().entries.truncate(max);
    }

    /// The numbers of every command called at least once, in table order; `name_of` names the
    /// command of a slot (`None`: no command has it).
    pub fn snapshot(&self, name_of: impl Fn(usize) -> Option<&'static str>) -> Vec<CommandNumbers> {
        self.counters
            .iter()
            .enumerate()
            .filter_map(|(slot, c)| Some((name_of(slot)?, c)))
            .map(|(name, c)| CommandNumbers {
                name,
                calls: c.calls.load(Ordering::Relaxed),
                usec: c.usec.load(Ordering::Relaxed),
                failed: c.failed.load(Ordering::Relaxed),
                buckets: std::array::from_fn(|k| c.buckets[k].load(Ordering::Relaxed)),
            })
            .filter(|n| n.calls > 0)
            .collect()
    }

    /// An error reply with this code (its first word) went to a client. As Redis, at most
    /// [`ERROR_CODES`] different codes are kept (a flood of made-up codes cannot grow the table);
    /// every error counts in the total.
    pub fn count_error(&self, code: &[u8]) {
        self.error_replies.fetch_add(1, Ordering::Relaxed);
        let mut errors = self.errors.lock();
        let room = errors.len() < ERROR_CODES;
        match errors.get_mut(code) {
            Some(n) => *n += 1,
            None if room => {
                errors.insert(code.to_vec(), 1);
            }
            None => {}
        }
    }

    /// INFO errorstats: (code, count), codes in byte order (Redis's rax order).
    pub fn errors(&self) -> Vec<(Vec<u8>, u64)> {
        self.errors.lock().iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// INFO's `total_error_replies`.
    pub fn error_replies(&self) -> u64 {
        self.error_replies.load(Ordering::Relaxed)
    }

    /// CONFIG RESETSTAT.
    pub fn reset(&self) {
        self.errors.lock().clear();
        self.error_replies.store(0, Ordering::Relaxed);
        for c in &self.counters {
            c.calls.store(0, Ordering::Relaxed);
            c.usec.store(0, Ordering::Relaxed);
            c.failed.store(0, Ordering::Relaxed);
            c.buckets.iter().for_each(|b| b.store(0, Ordering::Relaxed));
        }
    }
}

fn clip(a: &Bytes) -> Bytes {
    if a.len() <= MAX_ARG_BYTES {
        return a.clone();
    }
    let mut v = a[..MAX_ARG_BYTES].to_vec();
    v.extend_from_slice(format!("... ({} more bytes)", a.len() - MAX_ARG_BYTES).as_bytes());
    Bytes::from(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_calls_are_logged_newest_first_and_bounded() {
        let s = CommandStats::default();
        s.slower_than_us.store(1000, Ordering::Relaxed);
        s.slowlog_max_len.store(2, Ordering::Relaxed);
        let args = |x: &str| vec![Bytes::from("GET"), Bytes::from(x.to_string())];
        let who = || (1, "p".to_string(), String::new());
        s.maybe_log(Duration::from_micros(999), &args("fast"), who);
        assert_eq!(s.slowlog_len(), 0, "below the threshold");
        for k in ["a", "b", "c"] {
            s.maybe_log(Duration::from_millis(5), &args(k), who);
        }
        let got = s.slowlog(10);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].id, &got[0].args[1][..]), (2, &b"c"[..]));
        let long = vec![Bytes::from(vec![b'x'; 300])];
        s.maybe_log(Duration::from_millis(5), &long, who);
        assert_eq!(&s.slowlog(1)[0].args[0][128..], b"... (172 more bytes)");
        let get = crate::cmd::slot_of(crate::cmd::lookup(b"get").unwrap()).unwrap();
        s.record(get, Duration::from_micros(7), true);
        let n = s.snapshot(crate::cmd::name_of).into_iter().find(|n| n.name == "get").unwrap();
        assert_eq!((n.calls, n.usec, n.failed), (1, 7, 1));
        assert_eq!(n.buckets[3], 1, "7 µs is in [4, 8)");
        assert_eq!(n.percentile(50.0), 8.0);
    }
}
