//! `maxmemory` enforcement.
//!
//! Writes that can grow memory call [`Store::make_room`] first, as Redis does for its `denyoom`
//! commands: while accounted memory is above the limit, one key is evicted at a time according to
//! the policy, each time from the next shard in turn (so eviction spreads evenly and only one
//! shard lock is held at once). LRU is approximated by sampling, like Redis: the idlest of a few
//! random keys goes. When nothing can be evicted (policy `noeviction`, or a `volatile-*` policy
//! with no TTL'd keys left) the write fails with Redis's `-OOM` error.

use shoal_wire::notify;

use super::config::EvictionPolicy;
use super::entry::lru_now;
use super::error::StoreError;
use super::shard::Shard;
use super::sharded::Store;

/// Keys compared per LRU eviction (Redis's `maxmemory-samples` default).
const LRU_SAMPLES: usize = 5;

impl Store {
    /// Evicts until memory is within `maxmemory`, or says why it cannot.
    pub fn make_room(&self) -> Result<(), StoreError> {
        let limit = self.maxmemory();
        if limit == 0 {
            return Ok(());
        }
        let policy = self.policy();
        let mut cycle: Option<std::time::Instant> = None;
        let result = loop {
            if self.used_memory() <= limit {
                break Ok(());
            }
            if policy == EvictionPolicy::NoEviction {
                break Err(StoreError::OutOfMemory);
            }
            // The latency monitor's events: each key's eviction, and the whole pass.
            let started = std::time::Instant::now();
            cycle.get_or_insert(started);
            let evicted = self.evict_one(policy);
            self.latency.add_if_needed("eviction-del", started.elapsed().as_millis() as u64, self.now_ms());
            if !evicted {
                break Err(StoreError::OutOfMemory);
            }
        };
        if let Some(started) = cycle {
            self.latency.add_if_needed("eviction-cycle", started.elapsed().as_millis() as u64, self.now_ms());
        }
        result
    }

    /// Evicts one key from the first shard, starting at the rotating cursor, that has a
    /// candidate. Returns false when no shard has one.
    fn evict_one(&self, policy: EvictionPolicy) -> bool {
        let n = self.shards.len();
        let start = self.evict_cursor.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let now = self.now_ms();
        let mut rng = fastrand::Rng::new();
        (0..n).any(|i| self.with_shard_at((start + i) % n, |s| evict_from(s, policy, now, &mut rng)))
    }
}

/// Evicts one key from `s` under `policy`; false if the shard has no candidate.
fn evict_from(s: &mut Shard, policy: EvictionPolicy, now: u64, rng: &mut fastrand::Rng) -> bool {
    let lru = lru_now(now);
    let idle = |s: &Shard, pos: u32| lru.wrapping_sub(s.entry(pos).lru);
    // Under an LFU policy the least used key goes: Redis ranks by 255 minus the decayed counter.
    let lfu = s.lfu.get().unwrap_or(super::lfu::Lfu { log_factor: 10, decay_time: 1 });
    let unused = |s: &Shard, pos: u32| 255 - lfu.decayed(s.entry(pos).lfu_bits(), lru);
    let victim = match policy {
        EvictionPolicy::NoEviction => None,
        EvictionPolicy::AllKeysRandom => s.random_pos(rng).map(|p| (s.hash(s.entry(p).key()), p)),
        EvictionPolicy::AllKeysLru => (0..LRU_SAMPLES)
            .filter_map(|_| s.random_pos(rng))
            .max_by_key(|&p| idle(s, p))
            .map(|p| (s.hash(s.entry(p).key()), p)),
        EvictionPolicy::VolatileRandom => s.random_volatile_pos(rng),
        EvictionPolicy::VolatileLru => {
            (0..LRU_SAMPLES).filter_map(|_| s.random_volatile_pos(rng)).max_by_key(|&(_, p)| idle(s, p))
        }
        EvictionPolicy::VolatileTtl => s.soonest_expiring(),
        EvictionPolicy::AllKeysLfu => (0..LRU_SAMPLES)
            .filter_map(|_| s.random_pos(rng))
            .max_by_key(|&p| unused(s, p))
            .map(|p| (s.hash(s.entry(p).key()), p)),
        EvictionPolicy::VolatileLfu => {
            (0..LRU_SAMPLES).filter_map(|_| s.random_volatile_pos(rng)).max_by_key(|&(_, p)| unused(s, p))
        }
    };
    match victim {
        Some((hash, pos)) => {
            let key = (s.events.wants(notify::EVICTED) || s.events.changes.active())
                .then(|| s.entry(pos).key().to_vec());
            s.delete(hash, pos);
            s.evicted += 1;
            if let Some(key) = key {
                s.events.emit(notify::EVICTED, "evicted", &key);
                s.events.changes.key(&key);
            }
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::store::{
        Clock, EvictionPolicy, ManualClock, SetExpiry, SetOptions, Store, StoreConfig, StoreError,
    };

    fn store(maxmemory: usize, policy: EvictionPolicy) -> (Store, ManualClock) {
        let clock = ManualClock::new(10_000_000);
        let config = StoreConfig { shards: 4, maxmemory, policy, ..Default::default() };
        (Store::new(config, Arc::new(clock.clone())), clock)
    }

    fn fill(s: &Store, prefix: &str, n: usize, ttl_at: Option<u64>) {
        let value = [b'x'; 100];
        for i in 0..n {
            let expiry = ttl_at.map_or(SetExpiry::Clear, SetExpiry::At);
            let _ =
                s.set(format!("{prefix}{i}").as_bytes(), &value, SetOptions { expiry, ..Default::default() });
        }
    }

    #[test]
    fn noeviction_refuses_writes_with_redis_oom_text() {
        let (s, _) = store(64 * 1024, EvictionPolicy::NoEviction);
        let mut refused = None;
        for i in 0..10_000 {
            if let Err(e) = s.set(format!("k{i}").as_bytes(), &[0u8; 100], SetOptions::default()) {
                refused = Some((i, e));
                break;
            }
        }
        let (i, err) = refused.expect("writes are refused once full");
        assert!(i > 100, "the limit is not hit early: {i}");
        assert_eq!(err, StoreError::OutOfMemory);
        assert_eq!(
            crate::redis_error::redis_error(&err),
            "OOM command not allowed when used memory > 'maxmemory'."
        );
        assert!(s.get(b"k0").is_some(), "nothing was evicted");
        assert!(s.del(b"k0"), "deletes still work when full");
    }

    #[test]
    fn allkeys_lru_keeps_recently_used_keys() {
        let limit = 256 * 1024;
        let (s, clock) = store(limit, EvictionPolicy::AllKeysLru);
        fill(&s, "cold", 1000, None);
        clock.advance(10_000);
        fill(&s, "hot", 200, None);
        for round in 0..3 {
            clock.advance(1_000);
            for i in 0..200 {
                s.get(format!("hot{i}").as_bytes());
            }
            fill(&s, &format!("new{round}-"), 400, None);
        }
        assert!(s.used_memory() <= limit + limit / 8, "memory held near the limit");
        let hot_alive = (0..200).filter(|i| s.exists(format!("hot{i}").as_bytes())).count();
        let cold_alive = (0..1000).filter(|i| s.exists(format!("cold{i}").as_bytes())).count();
        assert!(hot_alive >= 190, "hot keys survive: {hot_alive}/200");
        assert!(cold_alive < 500, "cold keys go first: {cold_alive}/1000 left");
        assert!(s.stats().evicted_keys > 0);
    }

    #[test]
    fn allkeys_lfu_keeps_frequently_used_keys_even_when_others_were_used_later() {
        let limit = 256 * 1024;
        let (s, clock) = store(limit, EvictionPolicy::AllKeysLfu);
        fill(&s, "hot", 200, None);
        for _ in 0..30 {
            for i in 0..200 {
                s.get(format!("hot{i}").as_bytes());
            }
        }
        fill(&s, "cold", 800, None);
        clock.advance(5_000);
        // The cold keys are the most recently used now (an LRU policy would keep them), once each.
        for i in 0..800 {
            s.get(format!("cold{i}").as_bytes());
        }
        fill(&s, "new", 1500, None);
        assert!(s.used_memory() <= limit + limit / 8, "memory held near the limit");
        assert!(s.stats().evicted_keys > 500);
        let hot_alive = (0..200).filter(|i| s.exists(format!("hot{i}").as_bytes())).count();
        let cold_alive = (0..800).filter(|i| s.exists(format!("cold{i}").as_bytes())).count();
        let new_alive = (0..1500).filter(|i| s.exists(format!("new{i}").as_bytes())).count();
        assert!(hot_alive >= 190, "frequently used keys survive: {hot_alive}/200");
        // Counters: hot ones well above 6, cold ones 6 (one access), new ones 5 (none yet).
        assert!(
            cold_alive * 1500 > new_alive * 800,
            "keys never used go first: {cold_alive}/800 used once and {new_alive}/1500 never used are left"
        );
    }

    #[test]
    fn volatile_policies_only_touch_keys_with_ttl() {
        for policy in [
            EvictionPolicy::VolatileLru,
            EvictionPolicy::VolatileRandom,
            EvictionPolicy::VolatileTtl,
            EvictionPolicy::VolatileLfu,
        ] {
            let (s, clock) = store(80 * 1024, policy);
            fill(&s, "persistent", 300, None);
            fill(&s, "volatile", 300, Some(clock.now_ms() + 1_000_000));
            let persistent = (0..300).filter(|i| s.exists(format!("persistent{i}").as_bytes())).count();
            assert_eq!(persistent, 300, "{policy}: persistent keys are never evicted");
            assert!(s.stats().evicted_keys > 0, "{policy}");
            // Once no volatile key is left, writes are refused.
            let mut oom = false;
            for i in 0..5000 {
                if s.set(format!("more{i}").as_bytes(), &[0; 100], SetOptions::default()).is_err() {
                    oom = true;
                    break;
                }
            }
            assert!(oom, "{policy}: OOM once nothing is evictable");
        }
    }

    #[test]
    fn volatile_ttl_evicts_soonest_expiry_first() {
        let (s, clock) = store(0, EvictionPolicy::VolatileTtl);
        let now = clock.now_ms();
        fill(&s, "late", 50, Some(now + 900_000));
        fill(&s, "soon", 50, Some(now + 1_000));
        let limit = s.used_memory() - 2_000;
        s.set_maxmemory(limit);
        fill(&s, "extra", 5, None);
        let late = (0..50).filter(|i| s.exists(format!("late{i}").as_bytes())).count();
        let soon = (0..50).filter(|i| s.exists(format!("soon{i}").as_bytes())).count();
        assert_eq!(late, 50, "keys expiring later survive");
        assert!(soon < 50);
    }

    #[test]
    fn allkeys_random_holds_the_limit() {
        let limit = 100 * 1024;
        let (s, _) = store(limit, EvictionPolicy::AllKeysRandom);
        fill(&s, "k", 5000, None);
        // A write may overshoot by its own size plus one structure growth step, as in Redis.
        assert!(s.used_memory() <= limit + limit / 8, "{} > {limit}", s.used_memory());
        assert!(s.len() > 100);
    }
}
