//! Redis's latency monitor (`latency-monitor-threshold`, LATENCY LATEST/HISTORY/GRAPH/DOCTOR/
//! RESET): per event ("command", "fast-command", "expire-cycle", "eviction-cycle", ...), the
//! latest 160 samples of at least the threshold, one per second (a second's worst), and the
//! all-time worst. Routers keep the command events, nodes the expiry and eviction ones; a router
//! answers LATENCY over its own and every node's ([`merge`]).
//!
//! What is rendered here is Redis 7.0's: LATENCY GRAPH's sparkline (`sparkline.c`) and LATENCY
//! DOCTOR's report (`latency.c`), for the events Shoal raises.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::proto::{LatencyEvent, LatencySample};

/// Samples kept per event (Redis's `LATENCY_TS_LEN`).
pub const SAMPLES: usize = 160;

/// One event's samples, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Series {
    /// (Unix seconds, latency ms, Unix ms of the sample's last update), oldest first.
    pub samples: Vec<(u64, u64, u64)>,
    /// The worst latency ever recorded (since the last reset).
    pub max: u64,
}

impl Series {
    /// Adds a sample at `now_ms`: a second's samples are one, its worst (`latencyAddSample`).
    pub fn add(&mut self, latency: u64, now_ms: u64) {
        let now = now_ms / 1000;
        self.max = self.max.max(latency);
        if let Some(last) = self.samples.last_mut()
            && last.0 == now
        {
            if latency > last.1 {
                last.1 = latency;
            }
            last.2 = now_ms;
            return;
        }
        if self.samples.len() == SAMPLES {
            self.samples.remove(0);
        }
        self.samples.push((now, latency, now_ms));
    }
}

/// A process's events and its threshold.
#[derive(Debug, Default)]
pub struct Monitor {
    /// `latency-monitor-threshold` in ms (0: off).
    threshold: AtomicU64,
    events: Mutex<BTreeMap<String, Series>>,
}

impl Monitor {
    pub fn threshold(&self) -> u64 {
        self.threshold.load(Ordering::Relaxed)
    }

    pub fn set_threshold(&self, ms: u64) {
        self.threshold.store(ms, Ordering::Relaxed);
    }

    /// Records `event` if it took at least the threshold (`latencyAddSampleIfNeeded`); costs one
    /// atomic load when the monitor is off.
    #[inline]
    pub fn add_if_needed(&self, event: &str, latency_ms: u64, now_ms: u64) {
        let threshold = self.threshold();
        if threshold != 0 && latency_ms >= threshold {
            self.add(event, latency_ms, now_ms);
        }
    }

    pub fn add(&self, event: &str, latency_ms: u64, now_ms: u64) {
        let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        events.entry(event.to_string()).or_default().add(latency_ms, now_ms);
    }

    /// Forgets `event` (every event with `None`); how many were forgotten.
    pub fn reset(&self, event: Option<&str>) -> usize {
        let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        let before = events.len();
        match event {
            None => events.clear(),
            Some(name) => events.retain(|n, _| !n.eq_ignore_ascii_case(name)),
        }
        before - events.len()
    }

    pub fn events(&self) -> BTreeMap<String, Series> {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The events as a node reports them (NodeStats).
    pub fn to_proto(&self) -> Vec<LatencyEvent> {
        self.events()
            .into_iter()
            .map(|(name, s)| LatencyEvent {
                name,
                max: s.max,
                samples: s
                    .samples
                    .iter()
                    .map(|&(time, latency, at_ms)| LatencySample { time, latency, at_ms })
                    .collect(),
            })
            .collect()
    }
}

/// Adds a node's reported events into `into`, leaving out samples last updated at or before the
/// reset time of their event (`resets`: event -> Unix ms; "" for a reset of every event): a
/// router's LATENCY RESET hides what the nodes recorded before it. Samples of one second merge
/// into its worst; the newest [`SAMPLES`] are kept.
pub fn merge(into: &mut BTreeMap<String, Series>, from: &[LatencyEvent], resets: &BTreeMap<String, u64>) {
    for e in from {
        let reset = resets.get(&e.name).copied().max(resets.get("").copied()).unwrap_or(0);
        let kept: Vec<(u64, u64, u64)> =
            e.samples.iter().filter(|s| s.at_ms > reset).map(|s| (s.time, s.latency, s.at_ms)).collect();
        if kept.is_empty() {
            continue;
        }
        let series = into.entry(e.name.clone()).or_default();
        let max = if reset == 0 { e.max } else { kept.iter().map(|s| s.1).max().unwrap_or(0) };
        series.max = series.max.max(max);
        let mut all: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for (time, latency, at) in series.samples.drain(..).chain(kept) {
            let slot = all.entry(time).or_insert((0, 0));
            *slot = (slot.0.max(latency), slot.1.max(at));
        }
        let skip = all.len().saturating_sub(SAMPLES);
        series.samples = all.into_iter().skip(skip).map(|(t, (l, a))| (t, l, a)).collect();
    }
}

/// LATENCY GRAPH's text for `event` at `now` (Unix seconds): a header, a rule and a four-row
/// sparkline with a label per sample saying how long ago it was.
pub fn graph(event: &str, s: &Series, now: u64) -> String {
    let (mut min, mut max) = (0, 0);
    let mut samples: Vec<(f64, String)> = Vec::new();
    for (i, &(time, latency, _)) in s.samples.iter().enumerate() {
        if i == 0 {
            (min, max) = (latency, latency);
        } else {
            max = max.max(latency);
            min = min.min(latency);
        }
        let elapsed = now.saturating_sub(time);
        let label = match elapsed {
            e if e < 60 => format!("{e}s"),
            e if e < 3600 => format!("{}m", e / 60),
            e if e < 86_400 => format!("{}h", e / 3600),
            e => format!("{}d", e / 86_400),
        };
        samples.push((latency as f64, label));
    }
    let mut out = format!("{event} - high {max} ms, low {min} ms (all time high {} ms)\n", s.max);
    out.push_str(&"-".repeat(80));
    out.push('\n');
    for (i, chunk) in samples.chunks(80).enumerate() {
        if i != 0 {
            out.push('\n');
        }
        sparkline_range(&mut out, &samples, chunk.len(), i * 80);
    }
    out
}

/// `sparklineRenderRange` with 4 rows and the fill character set, over `len` samples from
/// `offset` (the scale is the whole sequence's).
fn sparkline_range(out: &mut String, seq: &[(f64, String)], len: usize, offset: usize) {
    const FILL: &[u8] = b"_o#";
    const ROWS: i64 = 4;
    let lo = seq.iter().map(|s| s.0).fold(f64::INFINITY, f64::min);
    let hi = seq.iter().map(|s| s.0).fold(f64::NEG_INFINITY, f64::max);
    let relmax = if hi - lo == 0.0 { 1.0 } else { hi - lo };
    let steps = FILL.len() as i64 * ROWS;
    let mut row = 0i64;
    loop {
        let mut chars = vec![b' '; len];
        let mut more = false;
        for (j, c) in chars.iter_mut().enumerate() {
            let (value, label) = &seq[j + offset];
            // C's `(int)(relval*steps)/relmax`, truncated again on assignment.
            let step = ((((value - lo) * steps as f64) as i64) as f64 / relmax) as i64;
            let step = step.clamp(0, steps - 1);
            if row < ROWS {
                let idx = step - (ROWS - row - 1) * FILL.len() as i64;
                more = true;
                if (0..FILL.len() as i64).contains(&idx) {
                    *c = FILL[idx as usize];
                } else if idx >= FILL.len() as i64 {
                    *c = b'|';
                }
            } else {
                // One blank row between the graph and the labels.
                if row - ROWS < 1 {
                    more = true;
                    break;
                }
                let at = (row - ROWS - 1) as usize;
                if let Some(&b) = label.as_bytes().get(at) {
                    more = true;
                    *c = b;
                }
            }
        }
        if !more {
            break;
        }
        row += 1;
        out.push_str(&String::from_utf8_lossy(&chars));
        out.push('\n');
    }
}

/// The numbers LATENCY DOCTOR gives per event (`analyzeLatencyForEvent`).
fn analyze(s: &Series, now: u64) -> (usize, u64, u64, f64) {
    let n = s.samples.len();
    if n == 0 {
        return (0, 0, 0, 0.0);
    }
    let avg = s.samples.iter().map(|x| x.1).sum::<u64>() / n as u64;
    let mad = s.samples.iter().map(|x| x.1.abs_diff(avg)).sum::<u64>() / n as u64;
    let oldest = s.samples.iter().map(|x| x.0).min().unwrap_or(now);
    let period = now.saturating_sub(oldest).max(1);
    (n, avg, mad, period as f64 / n as f64)
}

/// LATENCY DOCTOR's report: Redis's texts for the events Shoal raises and the advice each
/// calls for. `threshold` is `latency-monitor-threshold`, `slower_than_us` the slow log's.
pub fn doctor(events: &BTreeMap<String, Series>, threshold: u64, slower_than_us: i64, now: u64) -> String {
    if events.is_empty() && threshold == 0 {
        return "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. You may \
                use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. If we weren't \
                in a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n"
            .to_string();
    }
    let mut out = String::new();
    let mut a = Advice::default();
    let mut advices = 0;
    for (i, (name, s)) in events.iter().enumerate() {
        if i == 0 {
            out.push_str(
                "Dave, I have observed latency spikes in this Redis instance. You don't mind talking about it, do \
                 you Dave?\n\n",
            );
        }
        let (n, avg, mad, period) = analyze(s, now);
        out.push_str(&format!(
            "{}. {name}: {n} latency spikes (average {avg}ms, mean deviation {mad}ms, period {period:.2} sec). \
             Worst all time event {}ms.",
            i + 1,
            s.max
        ));
        match name.as_str() {
            "command" => {
                if slower_than_us < 0 {
                    a.slowlog_enabled = true;
                    advices += 1;
                } else if (slower_than_us / 1000) as u64 > threshold {
                    a.slowlog_tuning = true;
                    advices += 1;
                }
                a.slowlog_inspect = true;
                a.large_objects = true;
                advices += 2;
            }
            "fast-command" => {
                a.scheduler = true;
                advices += 1;
            }
            "expire-cycle" | "eviction-del" => {
                a.large_objects = true;
                advices += 1;
            }
            "eviction-cycle" => {
                a.mass_eviction = true;
                advices += 1;
            }
            _ => {}
        }
        out.push('\n');
    }
    if events.is_empty() {
        out.push_str(
            "Dave, no latency spike was observed during the lifetime of this Redis instance, not in the slightest \
             bit. I honestly think you ought to sit down calmly, take a stress pill, and think things over.\n",
        );
        return out;
    }
    if advices == 0 {
        out.push_str(
            "\nWhile there are latency events logged, I'm not able to suggest any easy fix. Please use the Redis \
             community to get some help, providing this report in your help request.\n",
        );
        return out;
    }
    out.push_str("\nI have a few advices for you:\n\n");
    advise(&mut out, &a, threshold);
    out
}

/// Which of LATENCY DOCTOR's advices the events call for.
#[derive(Default)]
struct Advice {
    slowlog_enabled: bool,
    slowlog_tuning: bool,
    slowlog_inspect: bool,
    scheduler: bool,
    large_objects: bool,
    mass_eviction: bool,
}

/// The advices' texts, in Redis's order.
fn advise(out: &mut String, a: &Advice, threshold: u64) {
    if a.slowlog_enabled {
        out.push_str(&format!(
            "- There are latency issues with potentially slow commands you are using. Try to enable the Slow Log \
             Redis feature using the command 'CONFIG SET slowlog-log-slower-than {}'. If the Slow log is disabled \
             Redis is not able to log slow commands execution for you.\n",
            threshold * 1000
        ));
    }
    if a.slowlog_tuning {
        out.push_str(&format!(
            "- Your current Slow Log configuration only logs events that are slower than your configured latency \
             monitor threshold. Please use 'CONFIG SET slowlog-log-slower-than {}'.\n",
            threshold * 1000
        ));
    }
    if a.slowlog_inspect {
        out.push_str(
            "- Check your Slow Log to understand what are the commands you are running which are too slow to \
             execute. Please check https://redis.io/commands/slowlog for more information.\n",
        );
    }
    if a.scheduler {
        out.push_str(
            "- The system is slow to execute Redis code paths not containing system calls. This usually means the \
             system does not provide Redis CPU time to run for long periods. You should try to:\n  1) Lower the \
             system load.\n  2) Use a computer / VM just for Redis if you are running other software in the same \
             system.\n  3) Check if you have a \"noisy neighbour\" problem.\n  4) Check with 'redis-cli \
             --intrinsic-latency 100' what is the intrinsic latency in your system.\n  5) Check if the problem is \
             allocator-related by recompiling Redis with MALLOC=libc, if you are using Jemalloc. However this may \
             create fragmentation problems.\n",
        );
    }
    if a.large_objects {
        out.push_str(
            "- Deleting, expiring or evicting (because of maxmemory policy) large objects is a blocking operation. \
             If you have very large objects that are often deleted, expired, or evicted, try to fragment those \
             objects into multiple smaller objects.\n",
        );
    }
    if a.mass_eviction {
        out.push_str(
            "- Sudden changes to the 'maxmemory' setting via 'CONFIG SET', or allocation of large objects via sets \
             or sorted sets intersections, STORE option of SORT, Redis Cluster large keys migrations (RESTORE \
             command), may create sudden memory pressure forcing the server to block trying to evict keys. \n",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_keeps_its_worst_and_the_ring_its_newest() {
        let m = Monitor::default();
        m.add_if_needed("command", 500, 1_000_000);
        assert!(m.events().is_empty(), "off at threshold 0");
        m.set_threshold(100);
        m.add_if_needed("command", 99, 1_000_000);
        m.add_if_needed("command", 300, 1_000_100);
        m.add_if_needed("command", 200, 1_000_900);
        m.add_if_needed("command", 150, 1_001_000);
        let s = &m.events()["command"];
        assert_eq!(s.samples.iter().map(|x| (x.0, x.1)).collect::<Vec<_>>(), [(1000, 300), (1001, 150)]);
        assert_eq!(s.max, 300);
        for i in 0..200 {
            m.add("command", 100 + i, 2_000_000 + i * 1000);
        }
        let s = &m.events()["command"];
        assert_eq!(s.samples.len(), SAMPLES);
        assert_eq!(s.samples[0].1, 140, "the oldest 40 went");
        assert_eq!(m.reset(Some("COMMAND")), 1);
        assert_eq!(m.reset(None), 0);
    }

    #[test]
    fn node_events_merge_by_second_and_hide_behind_a_reset() {
        let node = Monitor::default();
        node.add("expire-cycle", 30, 5_000);
        node.add("expire-cycle", 50, 9_500);
        let mut into = BTreeMap::new();
        into.entry("expire-cycle".to_string()).or_insert_with(Series::default).add(70, 9_200);
        merge(&mut into, &node.to_proto(), &BTreeMap::new());
        let s = &into["expire-cycle"];
        assert_eq!(s.samples.iter().map(|x| (x.0, x.1)).collect::<Vec<_>>(), [(5, 30), (9, 70)]);
        assert_eq!(s.max, 70);
        let mut later = BTreeMap::new();
        merge(&mut later, &node.to_proto(), &BTreeMap::from([(String::new(), 6_000)]));
        assert_eq!(later["expire-cycle"].samples.len(), 1);
        assert_eq!(later["expire-cycle"].max, 50);
        let mut none = BTreeMap::new();
        merge(&mut none, &node.to_proto(), &BTreeMap::from([("expire-cycle".to_string(), 10_000)]));
        assert!(none.is_empty());
    }

    #[test]
    fn graph_and_doctor_read_as_redis_s() {
        let mut s = Series::default();
        s.add(300, 100_000);
        s.add(400, 101_000);
        s.add(500, 102_000);
        let g = graph("command", &s, 103);
        let mut lines = g.lines();
        assert_eq!(lines.next(), Some("command - high 500 ms, low 300 ms (all time high 500 ms)"));
        assert_eq!(lines.next().map(str::len), Some(80));
        // Rows from the top (12 steps over 4 rows of "_o#"; a full cell below is '|'): 500 is
        // step 11, 400 step 6, 300 step 0.
        assert_eq!(lines.next(), Some("  #"));
        assert_eq!(lines.next(), Some(" _|"));
        assert_eq!(lines.next(), Some(" ||"));
        assert_eq!(lines.next(), Some("_||"));
        assert_eq!(lines.next(), Some("   "));
        assert_eq!(lines.next(), Some("321"));
        assert_eq!(lines.next(), Some("sss"));
        assert_eq!(lines.next(), None);
        let report = doctor(&BTreeMap::from([("command".to_string(), s)]), 200, 10_000, 103);
        assert!(
            report.contains(
                "1. command: 3 latency spikes (average 400ms, mean deviation 66ms, period 1.00 sec)"
            )
        );
        assert!(report.contains("Check your Slow Log"));
        assert!(doctor(&BTreeMap::new(), 0, 10_000, 0).starts_with("I'm sorry, Dave"));
    }
}
