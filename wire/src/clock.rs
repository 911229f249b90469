//! The one place Shoal reads wall-clock time from.
//!
//! Everything time-dependent goes through a [`Clock`]: on nodes TTLs, lazy and active expiry and
//! the LRU clock (the store's clock), in routers the checks that a relative expiry cannot
//! overflow, LASTSAVE and TIME. Tests drive time by hand with [`ManualClock`] instead of sleeping.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in Unix milliseconds.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    fn now_ms(&self) -> u64;

    /// Unix microseconds (TIME); clocks without finer resolution scale their milliseconds.
    fn now_us(&self) -> u64 {
        self.now_ms() * 1000
    }
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        HELD_MS.get().unwrap_or_else(system_ms)
    }

    fn now_us(&self) -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
    }
}

fn system_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

thread_local! {
    /// The time [`hold`] holds on this thread.
    static HELD_MS: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Runs `f` with [`SystemClock::now_ms`] on this thread answering the time read on entry: a
/// node applying a batch of ops together reads the clock once, not once per op (a few percent
/// of a pipelined GET's cost), and the batch's ops see one time, as the steps of one Redis
/// command do. `f` is synchronous and short (a bounded slice of a batch), so the held time is
/// at most that old. A nested hold keeps the outer time. Microseconds (TIME) are not held.
pub fn hold<R>(f: impl FnOnce() -> R) -> R {
    if HELD_MS.get().is_some() {
        return f();
    }
    /// Lets go of the time however `f` ends (a panic too).
    struct Release;
    impl Drop for Release {
        fn drop(&mut self) {
            HELD_MS.set(None);
        }
    }
    HELD_MS.set(Some(system_ms()));
    let _release = Release;
    f()
}

/// Runs `f` with this thread's time not held ([`hold`]), then holds it again: for a step inside a
/// hold that may wait (an op waiting for a transaction to let go of the store), so that what it
/// applies after the wait reads the time then.
pub fn unheld<R>(f: impl FnOnce() -> R) -> R {
    /// Holds the earlier time again however `f` ends.
    struct Restore(Option<u64>);
    impl Drop for Restore {
        fn drop(&mut self) {
            HELD_MS.set(self.0);
        }
    }
    let _restore = Restore(HELD_MS.take());
    f()
}

/// A clock that only moves when told to. Clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    pub fn new(start_ms: u64) -> ManualClock {
        ManualClock(Arc::new(AtomicU64::new(start_ms)))
    }

    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the time, backwards too (a clock corrected by NTP, or jumped).
    pub fn set(&self, ms: u64) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_held_time_is_answered_until_the_hold_ends_on_its_own_thread_only() {
        let c = SystemClock;
        let (first, later, nested, elsewhere) = hold(|| {
            let first = c.now_ms();
            std::thread::sleep(Duration::from_millis(5));
            let nested = hold(|| c.now_ms());
            let elsewhere = std::thread::spawn(move || c.now_ms()).join().unwrap();
            (first, c.now_ms(), nested, elsewhere)
        });
        assert_eq!((later, nested), (first, first), "held inside, nested hold included");
        assert!(elsewhere >= first + 5, "another thread reads the real time");
        assert!(c.now_ms() >= first + 5, "released after the hold");
        assert!(c.now_us() >= (first + 5) * 1000, "microseconds are never held");
        let caught = std::panic::catch_unwind(|| hold(|| panic!("in the hold")));
        assert!(caught.is_err());
        assert_eq!(HELD_MS.get(), None, "a panic released the hold");
    }

    #[test]
    fn a_step_that_may_wait_reads_the_time_then_and_the_hold_resumes() {
        let c = SystemClock;
        let (first, inside, after) = hold(|| {
            let first = c.now_ms();
            std::thread::sleep(Duration::from_millis(5));
            (first, unheld(|| c.now_ms()), c.now_ms())
        });
        assert!(inside >= first + 5, "not held inside unheld");
        assert_eq!(after, first, "held again after it");
        assert_eq!(HELD_MS.get(), None);
    }
}
