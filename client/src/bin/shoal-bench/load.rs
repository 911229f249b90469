//! What every engine of shoal-bench shares: which key a request names and how latencies are kept.

use hdrhistogram::Histogram;

/// The key number of the run's `i`th request (counted over all connections): `i` in turn with
/// `--sequential`, else the request's random draw.
pub fn key_index(sequential: bool, i: u64, random: u64, keyspace: u64) -> u64 {
    if sequential { i % keyspace } else { random % keyspace }
}

/// A latency histogram in nanoseconds, 1 ns to 60 s (every engine's, so they add up).
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}
