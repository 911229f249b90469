//! The failover writer's lease on a primary with replicas: how a primary cut off from the writer
//! learns, in bounded time, that it may have been replaced.
//!
//! The writer replaces a primary only after failing to reach it for its down-after, counted from
//! after the last answer it received. Each probe carries its own number, the number of the last
//! probe to this node whose answer the writer received, and the down-after. This node notes when
//! each probe arrived; the probe answered was received here before its answer reached the writer,
//! so no replacement can happen before (that arrival + down-after), measured on this node's own
//! clock. The lease ends a tenth of the down-after earlier, for clocks that run at slightly
//! different rates. No wall clocks are compared and delays on the way only make the lease shorter.
//!
//! When the lease runs out, the membership fences the primary as after a stall (`check_stall`):
//! routers still sending it writes (a partition can leave one reaching the old primary only) get
//! `moved` and retry, and the writer's next round confirms it (a newer version) or has replaced
//! it. The cost: a primary with replicas serves writes only while a writer watches it; with the
//! writer gone for longer than a down-after, such primaries wait for it (docs/architecture.md).
//! A node no writer has probed holds no lease and is never fenced by one.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// How many recent probes' arrival times are kept (the writer names the last one it heard back
/// from, normally the previous round's).
const KEPT: usize = 64;

#[derive(Debug, Default)]
pub struct Lease {
    /// `(probe number, arrival in ms since the process started)`, oldest first.
    arrivals: Mutex<VecDeque<(u64, u64)>>,
    /// When the lease ends (ms since the process started); 0: none held.
    until: AtomicU64,
}

impl Lease {
    /// A writer's probe arrived at `now`: notes it, and extends the lease from the arrival of the
    /// probe whose answer the writer received (`acked`), if that one is known here.
    pub fn probed(&self, now: u64, probe: u64, acked: u64, down_after_ms: u64) {
        let mut arrivals = self.arrivals.lock();
        if probe != 0 {
            if arrivals.len() == KEPT {
                arrivals.pop_front();
            }
            arrivals.push_back((probe, now));
        }
        if acked == 0 || down_after_ms == 0 {
            return;
        }
        if let Some(&(_, at)) = arrivals.iter().rev().find(|&&(p, _)| p == acked) {
            let until = at + down_after_ms - down_after_ms / 10;
            // Only a lease still ahead counts: one already over would fence at once.
            if until > now {
                self.until.fetch_max(until, Ordering::SeqCst);
            }
        }
    }

    /// How far past its end the lease is at `now`, the first time it is seen over (it is then
    /// dropped: the fence that follows holds until the writer confirms this node, and a later
    /// probe grants a new lease). None while it holds, or when none is held.
    pub fn lapsed(&self, now: u64) -> Option<u64> {
        let until = self.until.load(Ordering::Relaxed);
        if until == 0 || now <= until {
            return None;
        }
        self.until.compare_exchange(until, 0, Ordering::SeqCst, Ordering::Relaxed).ok().map(|_| now - until)
    }

    /// Whether a lease is held.
    #[cfg(test)]
    fn held(&self) -> bool {
        self.until.load(Ordering::Relaxed) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_runs_from_the_arrival_of_the_probe_the_writer_heard_back_from() {
        let lease = Lease::default();
        lease.probed(1_000, 7, 0, 1_000);
        assert!(!lease.held(), "no answer heard back yet: no lease");
        lease.probed(1_100, 8, 7, 1_000);
        assert!(lease.held());
        // Probe 7 arrived at 1000: the writer cannot replace this node before 2000; the lease
        // ends a tenth of the down-after earlier, whenever probe 8 arrived.
        assert_eq!(lease.lapsed(1_900), None);
        assert_eq!(lease.lapsed(1_901), Some(1));
        assert_eq!(lease.lapsed(1_950), None, "reported once, then dropped");
        assert!(!lease.held());
    }

    #[test]
    fn an_answer_the_writer_never_got_extends_nothing() {
        let lease = Lease::default();
        lease.probed(0, 1, 0, 1_000);
        lease.probed(100, 2, 1, 1_000);
        // Probes 3.. arrive but their answers are lost: the writer keeps naming probe 2.
        for (i, now) in (3..12).zip((200..).step_by(100)) {
            lease.probed(now, i, 2, 1_000);
        }
        assert_eq!(lease.lapsed(1_000), None);
        assert!(lease.lapsed(1_001).is_some(), "the lease ran from probe 2's arrival (100 + 900)");
        // An unknown probe number (a writer that restarted, or one older than those kept) grants
        // nothing, nor does a lease that would already be over.
        lease.probed(1_100, 20, 19, 1_000);
        lease.probed(1_200, 21, 3, 1_000);
        assert!(!lease.held());
    }
}
