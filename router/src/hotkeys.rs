//! Per-router hot-key tracking: which keys this router's clients use most, by commands and by
//! bytes, in bounded memory (`SHOAL HOTKEYS`, the `shoal_router_hotkey_*` series).
//!
//! The sketch is Space-Saving (Metwally et al.): `capacity` counters, each a key with a count and
//! an error. A tracked key's counter grows by the weight; an untracked key takes over the counter
//! with the smallest count `m`, starting at `m + weight` with error `m`. Every counter then
//! overestimates: `count - error <= true <= count`, and any key whose true weight exceeds
//! `total / capacity` is tracked. Two summaries are kept, one weighted by commands (1 per key of
//! a command) and one by bytes.
//!
//! Cost per key: the summaries are split into shards by key hash, each behind its own mutex, so
//! connections on different threads rarely meet (only on the same hot key's shard, for a few
//! dozen nanoseconds); a key already tracked costs a hash, a lock and a table probe, with no
//! allocation. A new key reuses the buffer of the counter it replaces (it allocates only when
//! longer). The guarantees above hold per shard (its stream, its counters), which is what each
//! reported error bound is.
//!
//! Decay: every `--hotkeys-decay-secs` (see [`HotKeys::tick`]) every count and error is halved, so
//! the list follows recent traffic (a key's weight from `n` periods ago counts `2^-n`). Halving
//! rounds the count up and the error down, so after a halving the bounds hold to within 1 per
//! halving. A shard applies missed halvings when it is next used (or read), so an idle router does
//! no work.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use hashbrown::HashTable;
use parking_lot::Mutex;

/// What the counts weigh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    /// Commands: 1 per key of each command.
    Ops,
    /// Request argument bytes plus reply bytes, split evenly over the command's keys.
    Bytes,
}

/// One reported key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotKey {
    pub key: Bytes,
    /// An overestimate of the key's (decayed) weight.
    pub count: u64,
    /// How much `count` may overestimate it by: the true weight is in `count - error ..= count`.
    pub error: u64,
}

#[derive(Debug)]
struct Counter {
    key: Vec<u8>,
    count: u64,
    error: u64,
}

/// One Space-Saving summary (`capacity` counters).
#[derive(Debug)]
pub struct Summary {
    capacity: usize,
    counters: Vec<Counter>,
    /// Positions in `counters`, by key hash.
    index: HashTable<u32>,
}

impl Summary {
    pub fn new(capacity: usize) -> Summary {
        Summary {
            capacity,
            counters: Vec::with_capacity(capacity),
            index: HashTable::with_capacity(capacity),
        }
    }

    /// Adds `weight` to `key` (whose hash is `hash`).
    pub fn add(&mut self, hash: u64, key: &[u8], weight: u64) {
        if self.capacity == 0 || weight == 0 {
            return;
        }
        let counters = &mut self.counters;
        if let Some(&pos) = self.index.find(hash, |&p| counters[p as usize].key == key) {
            counters[pos as usize].count += weight;
            return;
        }
        if counters.len() < self.capacity {
            counters.push(Counter { key: key.to_vec(), count: weight, error: 0 });
            let pos = (counters.len() - 1) as u32;
            self.index.insert_unique(hash, pos, |&p| hash_of(&counters[p as usize].key));
            return;
        }
        // Replace the smallest counter. A linear scan: shards hold a few dozen counters, and this
        // only runs for keys that are not tracked.
        let (pos, min) = counters
            .iter()
            .enumerate()
            .min_by_key(|(_, c)| c.count)
            .map(|(i, c)| (i, c.count))
            .expect("capacity > 0");
        let old = hash_of(&counters[pos].key);
        if let Ok(found) = self.index.find_entry(old, |&p| p as usize == pos) {
            found.remove();
        }
        let c = &mut counters[pos];
        c.key.clear();
        c.key.extend_from_slice(key);
        c.count = min + weight;
        c.error = min;
        self.index.insert_unique(hash, pos as u32, |&p| hash_of(&counters[p as usize].key));
    }

    /// Halves every count (rounding up) and error (rounding down), `times` times.
    fn halve(&mut self, times: u32) {
        for c in &mut self.counters {
            for _ in 0..times.min(64) {
                c.count = c.count.div_ceil(2);
                c.error /= 2;
            }
        }
    }

    /// Every tracked key with a non-zero count.
    pub fn entries(&self) -> impl Iterator<Item = HotKey> + '_ {
        self.counters.iter().filter(|c| c.count > 0).map(|c| HotKey {
            key: Bytes::copy_from_slice(&c.key),
            count: c.count,
            error: c.error,
        })
    }
}

/// The one hasher of the process (randomly seeded once): shard choice and table positions must
/// agree for the life of the sketch.
fn hasher() -> &'static hashbrown::DefaultHashBuilder {
    static H: std::sync::OnceLock<hashbrown::DefaultHashBuilder> = std::sync::OnceLock::new();
    H.get_or_init(hashbrown::DefaultHashBuilder::default)
}

fn hash_of(key: &[u8]) -> u64 {
    hasher().hash_one(key)
}

#[derive(Debug)]
struct Shard {
    /// The decay epoch this shard's counts are at.
    epoch: u64,
    ops: Summary,
    bytes: Summary,
}

impl Shard {
    fn catch_up(&mut self, epoch: u64) {
        if self.epoch != epoch {
            let times = epoch.saturating_sub(self.epoch).min(64) as u32;
            self.ops.halve(times);
            self.bytes.halve(times);
            self.epoch = epoch;
        }
    }
}

/// The router's hot-key sketch (see the module docs).
#[derive(Debug)]
pub struct HotKeys {
    shards: Box<[Mutex<Shard>]>,
    mask: usize,
    capacity: usize,
    /// Bumped by [`HotKeys::tick`]; shards halve their counts once per step they missed.
    epoch: AtomicU64,
}

/// Counters per shard the shard count aims at: small enough that replacing the minimum by a
/// linear scan stays cheap, and many shards so that connections seldom share a lock.
const PER_SHARD: usize = 16;
const MAX_SHARDS: usize = 64;

impl HotKeys {
    /// A sketch of about `capacity` counters in each summary (0: tracking is off).
    pub fn new(capacity: usize) -> HotKeys {
        let shards = (capacity / PER_SHARD).clamp(1, MAX_SHARDS).next_power_of_two();
        let per_shard = capacity.div_ceil(shards);
        HotKeys {
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Shard {
                        epoch: 0,
                        ops: Summary::new(per_shard),
                        bytes: Summary::new(per_shard),
                    })
                })
                .collect(),
            mask: shards - 1,
            capacity: per_shard * shards,
            epoch: AtomicU64::new(0),
        }
    }

    /// Whether keys are tracked at all.
    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// Counters per summary (the configured capacity rounded up to a multiple of the shards).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The shard of a key with this hash: the high bits (the table uses the low ones).
    fn shard_of(&self, hash: u64) -> usize {
        (hash >> 48) as usize & self.mask
    }

    /// One use of `key`: `1` command and `bytes` bytes.
    pub fn record(&self, key: &[u8], bytes: u64) {
        if self.capacity == 0 {
            return;
        }
        let hash = hash_of(key);
        let shard = &self.shards[self.shard_of(hash)];
        let epoch = self.epoch.load(Ordering::Relaxed);
        let mut s = shard.lock();
        s.catch_up(epoch);
        s.ops.add(hash, key, 1);
        s.bytes.add(hash, key, bytes);
    }

    /// One decay step: every count and error is halved (lazily, shard by shard).
    pub fn tick(&self) {
        self.epoch.fetch_add(1, Ordering::Relaxed);
    }

    /// The `n` heaviest keys by `by`, heaviest first (ties by key).
    pub fn top(&self, by: By, n: usize) -> Vec<HotKey> {
        let epoch = self.epoch.load(Ordering::Relaxed);
        let mut all = Vec::new();
        for shard in self.shards.iter() {
            let mut s = shard.lock();
            s.catch_up(epoch);
            let summary = match by {
                By::Ops => &s.ops,
                By::Bytes => &s.bytes,
            };
            all.extend(summary.entries());
        }
        all.sort_unstable_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        all.truncate(n);
        all
    }

    /// Forgets everything (CONFIG RESETSTAT).
    pub fn reset(&self) {
        for shard in self.shards.iter() {
            let mut s = shard.lock();
            let per_shard = s.ops.capacity;
            s.ops = Summary::new(per_shard);
            s.bytes = Summary::new(per_shard);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A zipf-like stream over `universe` keys (weight of rank r ∝ 1/r^s), by inverse CDF.
    fn zipf_stream(rng: &mut fastrand::Rng, universe: usize, s: f64, len: usize) -> Vec<usize> {
        let weights: Vec<f64> = (1..=universe).map(|r| 1.0 / (r as f64).powf(s)).collect();
        let total: f64 = weights.iter().sum();
        let mut cdf = Vec::with_capacity(universe);
        let mut acc = 0.0;
        for w in &weights {
            acc += w / total;
            cdf.push(acc);
        }
        (0..len)
            .map(|_| {
                let u = rng.f64();
                cdf.partition_point(|&c| c < u).min(universe - 1)
            })
            .collect()
    }

    fn key(i: usize) -> Vec<u8> {
        format!("key:{i}").into_bytes()
    }

    /// Exact counts next to the sketch's: every reported key's true count is within its bound,
    /// and the true `top_n` keys are among the `listed` heaviest reported.
    fn check(h: &HotKeys, exact: &HashMap<Vec<u8>, u64>, by: By, top_n: usize, listed: usize) {
        let reported = h.top(by, h.capacity());
        assert!(!reported.is_empty());
        for r in &reported {
            let truth = exact.get(&r.key[..]).copied().unwrap_or(0);
            assert!(
                r.count >= truth && r.count - r.error <= truth,
                "{:?}: true {truth}, reported {} (error {})",
                String::from_utf8_lossy(&r.key),
                r.count,
                r.error
            );
        }
        let mut truth: Vec<(&Vec<u8>, &u64)> = exact.iter().collect();
        truth.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
        let listed = h.top(by, listed);
        for (k, n) in truth.iter().take(top_n) {
            assert!(
                listed.iter().any(|r| r.key[..] == k[..]),
                "true top key {:?} ({n}) missing from {:?}",
                String::from_utf8_lossy(k),
                listed
                    .iter()
                    .map(|r| (String::from_utf8_lossy(&r.key).into_owned(), r.count))
                    .collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn space_saving_bounds_hold_against_exact_counts() {
        for seed in 0..8 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let universe = 2_000 + rng.usize(..8_000);
            let s = 0.9 + rng.f64() * 0.6;
            let h = HotKeys::new(256);
            let mut ops: HashMap<Vec<u8>, u64> = HashMap::new();
            let mut bytes: HashMap<Vec<u8>, u64> = HashMap::new();
            for i in zipf_stream(&mut rng, universe, s, 50_000) {
                let k = key(i);
                // Byte weights vary per key (a value size of its own, 50 to 150 bytes, not
                // following popularity) and a little per call.
                let b = 50 + (i * 37 % 101) as u64 + rng.u64(0..10);
                h.record(&k, b);
                *ops.entry(k.clone()).or_default() += 1;
                *bytes.entry(k).or_default() += b;
            }
            // By commands the head of a zipf stream stands far above the error: the true top 5
            // are the 5 heaviest reported. Byte weights are flatter (value sizes do not follow
            // popularity): see the guarantee below.
            check(&h, &ops, By::Ops, 5, 5);
            // By bytes only the bounds are checked here (top 0): past the guarantee a true top
            // key may be untracked.
            check(&h, &bytes, By::Bytes, 0, 0);
            // Space-Saving's guarantee, per shard: a key weighing more than its shard's total over
            // the shard's counters is tracked.
            for exact in [&ops, &bytes] {
                let by = if std::ptr::eq(exact, &ops) { By::Ops } else { By::Bytes };
                let mut totals = vec![0u64; h.shards.len()];
                for (k, n) in exact.iter() {
                    totals[h.shard_of(hash_of(k))] += n;
                }
                let per_shard = (h.capacity() / h.shards.len()) as u64;
                let tracked = h.top(by, h.capacity());
                let mut heavy = 0;
                for (k, &n) in exact.iter() {
                    if n > totals[h.shard_of(hash_of(k))] / per_shard {
                        heavy += 1;
                        assert!(tracked.iter().any(|r| r.key[..] == k[..]), "{by:?}: heavy key untracked");
                    }
                }
                assert!(heavy >= 3, "the stream has heavy hitters to check ({heavy})");
            }
        }
    }

    #[test]
    fn small_capacity_and_off() {
        let off = HotKeys::new(0);
        off.record(b"a", 10);
        assert!(!off.enabled());
        assert!(off.top(By::Ops, 10).is_empty());

        // One shard of 4 counters: a key with more than a quarter of the stream stays tracked
        // whatever the other keys do, and ranks first.
        let h = HotKeys::new(4);
        for i in 0..1000 {
            if i % 2 == 0 {
                h.record(b"hot", 1);
            }
            h.record(&key(i), 1);
        }
        let top = h.top(By::Ops, 1);
        assert_eq!(&top[0].key[..], b"hot");
        assert!(top[0].count >= 500 && top[0].count - top[0].error <= 500, "{top:?}");
    }

    #[test]
    fn halving_follows_recent_traffic() {
        let h = HotKeys::new(16);
        for _ in 0..1000 {
            h.record(b"old", 1);
        }
        for _ in 0..6 {
            h.tick();
        }
        for _ in 0..100 {
            h.record(b"new", 1);
        }
        let top = h.top(By::Ops, 2);
        assert_eq!(&top[0].key[..], b"new");
        assert_eq!(top[1].count, 1000u64.div_ceil(64), "six halvings, rounding up");
        h.reset();
        assert!(h.top(By::Ops, 2).is_empty());
    }
}
