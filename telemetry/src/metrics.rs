//! Metrics primitives and the Prometheus text format (version 0.0.4).
//!
//! Counters, gauges and histograms are plain atomics, cheap enough for hot paths. Nothing is
//! registered globally: at scrape time a binary walks its own state and writes it into an
//! [`Exposition`], which keeps names, help texts and labels next to the code that owns them.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// The `Content-Type` of [`Exposition::finish`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A monotonically increasing count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down.
#[derive(Debug, Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    pub fn set(&self, v: i64) {
        self.0.store(v, Ordering::Relaxed);
    }

    pub fn add(&self, v: i64) {
        self.0.fetch_add(v, Ordering::Relaxed);
    }

    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A histogram with fixed upper bounds (`le` buckets); observations are `f64`.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    /// Sum of observations, stored as `f64` bits and updated with a CAS loop.
    sum_bits: AtomicU64,
}

/// Latency buckets in seconds, from 50 µs to 5 s.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Duration buckets in seconds for long operations (migrations, snapshots), 100 ms to 1 h.
pub const LONG_BUCKETS: &[f64] = &[0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0];

/// Size buckets (ops per batch, keys per command): powers of two up to 4096.
pub const SIZE_BUCKETS: &[f64] =
    &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0];

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_bits: AtomicU64::new(0f64.to_bits()),
        }
    }

    pub fn observe(&self, v: f64) {
        self.observe_n(v, 1);
    }

    /// `n` observations of `v` at the cost of one (a batch of requests timed together).
    pub fn observe_n(&self, v: f64, n: u64) {
        if n == 0 {
            return;
        }
        // Buckets are stored non-cumulatively; the exposition accumulates them.
        if let Some(i) = self.bounds.iter().position(|&b| v <= b) {
            self.buckets[i].fetch_add(n, Ordering::Relaxed);
        }
        self.count.fetch_add(n, Ordering::Relaxed);
        let _ = self.sum_bits.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
            Some((f64::from_bits(bits) + v * n as f64).to_bits())
        });
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    pub fn sum(&self) -> f64 {
        f64::from_bits(self.sum_bits.load(Ordering::Relaxed))
    }
}

/// Builds one scrape's worth of Prometheus text.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

/// Label pairs for one sample, e.g. `&[("node", "0")]`.
pub type Labels<'a> = &'a [(&'a str, &'a str)];

impl Exposition {
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Writes `# HELP` and `# TYPE` for a metric family. Call once per family, before its samples.
    pub fn family(&mut self, name: &str, kind: &str, help: &str) -> &mut Self {
        let _ = writeln!(self.out, "# HELP {name} {}", help.replace('\\', "\\\\").replace('\n', "\\n"));
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        self
    }

    /// Writes one sample line.
    pub fn sample(&mut self, name: &str, labels: Labels<'_>, value: f64) -> &mut Self {
        self.out.push_str(name);
        write_labels(&mut self.out, labels, None);
        let _ = writeln!(self.out, " {}", format_value(value));
        self
    }

    /// A counter family with a single unlabelled sample.
    pub fn counter(&mut self, name: &str, help: &str, value: u64) -> &mut Self {
        self.family(name, "counter", help).sample(name, &[], value as f64)
    }

    /// A gauge family with a single unlabelled sample.
    pub fn gauge(&mut self, name: &str, help: &str, value: f64) -> &mut Self {
        self.family(name, "gauge", help).sample(name, &[], value)
    }

    /// The samples of one histogram (`_bucket`, `_sum`, `_count`); write the family header first.
    pub fn histogram_samples(&mut self, name: &str, labels: Labels<'_>, h: &Histogram) -> &mut Self {
        let mut cumulative = 0;
        for (bound, bucket) in h.bounds.iter().zip(h.buckets.iter()) {
            cumulative += bucket.load(Ordering::Relaxed);
            self.out.push_str(name);
            self.out.push_str("_bucket");
            write_labels(&mut self.out, labels, Some(&format_value(*bound)));
            let _ = writeln!(self.out, " {cumulative}");
        }
        let count = h.count();
        self.out.push_str(name);
        self.out.push_str("_bucket");
        write_labels(&mut self.out, labels, Some("+Inf"));
        let _ = writeln!(self.out, " {count}");
        let sum = h.sum();
        for (suffix, v) in [("_sum", sum), ("_count", count as f64)] {
            self.out.push_str(name);
            self.out.push_str(suffix);
            write_labels(&mut self.out, labels, None);
            let _ = writeln!(self.out, " {}", format_value(v));
        }
        self
    }

    /// A histogram family with a single unlabelled series.
    pub fn histogram(&mut self, name: &str, help: &str, h: &Histogram) -> &mut Self {
        self.family(name, "histogram", help).histogram_samples(name, &[], h)
    }

    pub fn finish(self) -> String {
        self.out
    }
}

fn write_labels(out: &mut String, labels: Labels<'_>, le: Option<&str>) {
    if labels.is_empty() && le.is_none() {
        return;
    }
    out.push('{');
    let mut first = true;
    let extra = le.map(|v| ("le", v));
    for (k, v) in labels.iter().copied().chain(extra) {
        if !first {
            out.push(',');
        }
        first = false;
        let escaped = v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
        let _ = write!(out, "{k}=\"{escaped}\"");
    }
    out.push('}');
}

fn format_value(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else if v.is_nan() {
        "NaN".into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Resident set size of this process, from `/proc/self/statm` (0 where unavailable).
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        .map_or(0, |pages| pages * 4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_format() {
        let h = Histogram::new(&[1.0, 5.0]);
        h.observe(0.5);
        h.observe(3.0);
        h.observe(10.0);
        let mut e = Exposition::new();
        e.counter("shoal_ops_total", "Ops.", 7);
        e.family("shoal_node_up", "gauge", "Up.").sample("shoal_node_up", &[("node", "a\"b")], 1.0);
        e.histogram("shoal_batch_size", "Batch sizes.", &h);
        let text = e.finish();
        assert_eq!(
            text,
            "# HELP shoal_ops_total Ops.\n# TYPE shoal_ops_total counter\nshoal_ops_total 7\n\
             # HELP shoal_node_up Up.\n# TYPE shoal_node_up gauge\nshoal_node_up{node=\"a\\\"b\"} 1\n\
             # HELP shoal_batch_size Batch sizes.\n# TYPE shoal_batch_size histogram\n\
             shoal_batch_size_bucket{le=\"1\"} 1\nshoal_batch_size_bucket{le=\"5\"} 2\n\
             shoal_batch_size_bucket{le=\"+Inf\"} 3\nshoal_batch_size_sum 13.5\nshoal_batch_size_count 3\n"
        );
    }

    #[test]
    fn n_observations_at_once_read_as_n_observations() {
        let (one_by_one, at_once) = (Histogram::new(&[1.0, 5.0]), Histogram::new(&[1.0, 5.0]));
        for (v, n) in [(0.5, 3), (3.0, 1), (10.0, 2), (4.0, 0)] {
            for _ in 0..n {
                one_by_one.observe(v);
            }
            at_once.observe_n(v, n);
        }
        let text = |h: &Histogram| {
            let mut e = Exposition::new();
            e.histogram("h", "H.", h);
            e.finish()
        };
        assert_eq!(text(&at_once), text(&one_by_one));
        assert_eq!((at_once.count(), at_once.sum()), (6, 24.5));
    }
}
