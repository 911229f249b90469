//! The router's latency monitor (LATENCY LATEST/HISTORY/GRAPH/DOCTOR/RESET): commands that took
//! at least `latency-monitor-threshold` ms end to end ("command", or "fast-command" for those
//! Redis flags `fast`), beside the nodes' expiry and eviction events, which each node keeps
//! (`shoal_wire::latency`) and reports in its stats. LATENCY RESET forgets this router's events
//! and hides the nodes' samples up to that moment for this router (each router, like each
//! redis-server, answers for what its clients see).

use std::collections::BTreeMap;
use std::time::Duration;

use parking_lot::Mutex;
use shoal_wire::latency::{Monitor, Series, merge};
use shoal_wire::proto::NodeStats;

#[derive(Debug, Default)]
pub struct Latency {
    pub monitor: Monitor,
    /// Per event (lower case; "" for all), the Unix ms of this router's last LATENCY RESET of it.
    resets: Mutex<BTreeMap<String, u64>>,
}

impl Latency {
    /// Records a finished command if it took at least the threshold (`fast`: whether Redis
    /// flags it `fast`, asked only then).
    #[inline]
    pub fn command(&self, took: Duration, fast: impl FnOnce() -> bool, now_ms: impl FnOnce() -> u64) {
        let threshold = self.monitor.threshold();
        let ms = took.as_millis() as u64;
        if threshold == 0 || ms < threshold {
            return;
        }
        self.monitor.add(if fast() { "fast-command" } else { "command" }, ms, now_ms());
    }

    /// This router's events and the nodes' (those a reset here has not hidden).
    pub fn events(&self, nodes: &[NodeStats]) -> BTreeMap<String, Series> {
        let mut all = self.monitor.events();
        let resets = self.resets.lock().clone();
        for n in nodes {
            merge(&mut all, &n.latency, &resets);
        }
        all
    }

    /// LATENCY RESET of `events` (every event when empty) at `now_ms`: how many of the events
    /// there were (here or on a node) are gone.
    pub fn reset(&self, events: &[String], nodes: &[NodeStats], now_ms: u64) -> usize {
        let before = self.events(nodes);
        let mut resets = self.resets.lock();
        if events.is_empty() {
            self.monitor.reset(None);
            resets.insert(String::new(), now_ms);
            return before.len();
        }
        let mut n = 0;
        for e in events {
            let e = e.to_ascii_lowercase();
            self.monitor.reset(Some(&e));
            if before.contains_key(&e) {
                n += 1;
            }
            resets.insert(e, now_ms);
        }
        n
    }
}
