//! What a store is built with: its shard count, memory limit and eviction policy, value size
//! limit and encoding thresholds. Below the store, which reads them (some change at runtime).

use std::fmt;
use std::str::FromStr;

use super::object::limits::Limits;

/// Largest value (and key) a node stores, as Redis's default `proto-max-bulk-len`.
pub const DEFAULT_MAX_VALUE_LEN: usize = 512 * 1024 * 1024;

/// What to drop when `maxmemory` is reached (Redis's `maxmemory-policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EvictionPolicy {
    /// Refuse writes that may grow memory with `-OOM`.
    #[default]
    NoEviction,
    AllKeysLru,
    AllKeysRandom,
    VolatileLru,
    VolatileRandom,
    VolatileTtl,
    /// The least frequently used key (`super::lfu`), of all keys or of those with a TTL.
    AllKeysLfu,
    VolatileLfu,
}

impl EvictionPolicy {
    pub const ALL: [EvictionPolicy; 8] = [
        EvictionPolicy::NoEviction,
        EvictionPolicy::AllKeysLru,
        EvictionPolicy::AllKeysRandom,
        EvictionPolicy::VolatileLru,
        EvictionPolicy::VolatileRandom,
        EvictionPolicy::VolatileTtl,
        EvictionPolicy::AllKeysLfu,
        EvictionPolicy::VolatileLfu,
    ];

    /// Whether the policy ranks keys by their LFU counter (which is then kept up to date).
    pub fn is_lfu(self) -> bool {
        matches!(self, EvictionPolicy::AllKeysLfu | EvictionPolicy::VolatileLfu)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EvictionPolicy::NoEviction => "noeviction",
            EvictionPolicy::AllKeysLru => "allkeys-lru",
            EvictionPolicy::AllKeysRandom => "allkeys-random",
            EvictionPolicy::VolatileLru => "volatile-lru",
            EvictionPolicy::VolatileRandom => "volatile-random",
            EvictionPolicy::VolatileTtl => "volatile-ttl",
            EvictionPolicy::AllKeysLfu => "allkeys-lfu",
            EvictionPolicy::VolatileLfu => "volatile-lfu",
        }
    }
}

impl fmt::Display for EvictionPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EvictionPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EvictionPolicy::ALL.into_iter().find(|p| p.as_str().eq_ignore_ascii_case(s)).ok_or_else(|| {
            let names: Vec<&str> = EvictionPolicy::ALL.iter().map(|p| p.as_str()).collect();
            format!("unknown policy '{s}' (expected one of: {})", names.join(", "))
        })
    }
}

#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Number of shards; rounded up to a power of two.
    pub shards: usize,
    /// Memory limit in bytes; 0 means none.
    pub maxmemory: usize,
    pub policy: EvictionPolicy,
    pub max_value_len: usize,
    /// Encoding thresholds of typed values.
    pub limits: Limits,
    /// Keyspace notification classes (`shoal_wire::notify` flags; 0: off).
    pub notify_keyspace_events: u32,
    /// Count per-slot traffic for SHOAL SLOT-STATS (`cluster-slot-stats-enabled`).
    pub slot_stats: bool,
    /// The LFU counter's `lfu-log-factor` and `lfu-decay-time` (minutes).
    pub lfu_log_factor: u32,
    pub lfu_decay_time: u32,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            shards: default_shards(),
            maxmemory: 0,
            policy: EvictionPolicy::NoEviction,
            max_value_len: DEFAULT_MAX_VALUE_LEN,
            limits: Limits::default(),
            notify_keyspace_events: 0,
            slot_stats: false,
            lfu_log_factor: 10,
            lfu_decay_time: 1,
        }
    }
}

pub(super) fn policy_index(policy: EvictionPolicy) -> u8 {
    EvictionPolicy::ALL.iter().position(|&p| p == policy).expect("every policy is in ALL") as u8
}

/// Four shards per core, at least 8: enough that two writers rarely share a lock.
pub fn default_shards() -> usize {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    (cores * 4).max(8).next_power_of_two()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_round_trip() {
        for p in EvictionPolicy::ALL {
            assert_eq!(p.as_str().parse::<EvictionPolicy>(), Ok(p));
        }
        assert!("allkeys-lfu".parse::<EvictionPolicy>().is_ok_and(EvictionPolicy::is_lfu));
        assert!("lfu".parse::<EvictionPolicy>().is_err());
    }
}
