//! Redis's LFU counter, for the `allkeys-lfu` and `volatile-lfu` eviction policies and OBJECT
//! FREQ: per key, a logarithmic access counter (8 bits, new keys start at 5) and the minute it was
//! last decremented (16 bits), kept in the entry's spare flag bits (no memory per key).
//!
//! An access first decays the counter by one per `lfu-decay-time` minutes since that minute,
//! then increments it with probability `1 / ((counter - 5) * lfu-log-factor + 1)` (Redis's
//! `LFUDecrAndReturn` and `LFULogIncr`). The counter is kept only while an LFU policy is set, as
//! in Redis; the LRU clock is always kept, so switching back to an LRU policy finds fresh idle
//! times (Redis reuses one field for both, and has to wait for them to adjust).
//!
//! Minutes are read off the entries' LRU clock (centiseconds, 32 bits), modulo 2^16 as Redis's.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// A new key's counter (Redis's `LFU_INIT_VAL`).
pub const INIT: u32 = 5;

/// The settings every shard of a store reads on each access (shared, changed by CONFIG SET).
#[derive(Debug)]
pub struct LfuSettings {
    enabled: AtomicBool,
    log_factor: AtomicU32,
    decay_time: AtomicU32,
}

impl Default for LfuSettings {
    fn default() -> Self {
        // Redis's defaults: lfu-log-factor 10, lfu-decay-time 1.
        LfuSettings {
            enabled: AtomicBool::new(false),
            log_factor: AtomicU32::new(10),
            decay_time: AtomicU32::new(1),
        }
    }
}

impl LfuSettings {
    /// The counter's parameters while an LFU policy is set (`None`: counters are not kept).
    #[inline]
    pub fn get(&self) -> Option<Lfu> {
        self.enabled.load(Ordering::Relaxed).then(|| Lfu {
            log_factor: self.log_factor.load(Ordering::Relaxed),
            decay_time: self.decay_time.load(Ordering::Relaxed),
        })
    }

    pub fn set(&self, enabled: bool, log_factor: u32, decay_time: u32) {
        self.log_factor.store(log_factor, Ordering::Relaxed);
        self.decay_time.store(decay_time, Ordering::Relaxed);
        self.enabled.store(enabled, Ordering::Relaxed);
    }

    pub fn log_factor(&self) -> u32 {
        self.log_factor.load(Ordering::Relaxed)
    }

    pub fn decay_time(&self) -> u32 {
        self.decay_time.load(Ordering::Relaxed)
    }
}

/// `lfu-log-factor` and `lfu-decay-time` as they are for one access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lfu {
    pub log_factor: u32,
    pub decay_time: u32,
}

/// The minute (mod 2^16) of LRU clock `lru` (centiseconds).
pub fn minutes(lru: u32) -> u32 {
    (lru / 6000) & 0xffff
}

/// A new key's bits: this minute, counter [`INIT`].
pub fn initial(lru: u32) -> u32 {
    minutes(lru) << 8 | INIT
}

/// Bits (minute << 8 | counter) with the counter set to `freq` (RESTORE ... FREQ).
pub fn with_counter(lru: u32, freq: u8) -> u32 {
    minutes(lru) << 8 | u32::from(freq)
}

impl Lfu {
    /// The counter after its decay (`LFUDecrAndReturn`): what OBJECT FREQ answers and eviction
    /// compares. `bits` is minute << 8 | counter.
    pub fn decayed(self, bits: u32, lru: u32) -> u32 {
        let (then, counter) = (bits >> 8 & 0xffff, bits & 0xff);
        let now = minutes(lru);
        let elapsed = if now >= then { now - then } else { 65535 - then + now };
        let periods = elapsed.checked_div(self.decay_time).unwrap_or(0);
        counter.saturating_sub(periods)
    }

    /// The bits after one access (`updateLFU`): decayed, then the logarithmic increment.
    pub fn touched(self, bits: u32, lru: u32, random: f64) -> u32 {
        let mut counter = self.decayed(bits, lru);
        if counter < 255 {
            let base = counter.saturating_sub(INIT) as f64;
            if random < 1.0 / (base * f64::from(self.log_factor) + 1.0) {
                counter += 1;
            }
        }
        minutes(lru) << 8 | counter
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LFU: Lfu = Lfu { log_factor: 10, decay_time: 1 };

    #[test]
    fn a_new_key_counts_from_five_and_the_first_access_always_counts() {
        let lru = 123_456_789;
        let bits = initial(lru);
        assert_eq!(LFU.decayed(bits, lru), 5);
        // At the initial value the increment probability is 1.
        assert_eq!(LFU.touched(bits, lru, 0.999) & 0xff, 6);
        // Above it, 1 / (base * factor + 1): base 1 and factor 10 give 1/11.
        let six = LFU.touched(bits, lru, 0.999);
        assert_eq!(LFU.touched(six, lru, 0.5) & 0xff, 6);
        assert_eq!(LFU.touched(six, lru, 0.05) & 0xff, 7);
        assert_eq!(LFU.touched(with_counter(lru, 255), lru, 0.0) & 0xff, 255, "saturates");
    }

    #[test]
    fn counters_decay_by_one_per_decay_time_minutes() {
        let lru = 6000 * 100;
        let bits = with_counter(lru, 20);
        assert_eq!(LFU.decayed(bits, lru + 6000 * 3), 17);
        assert_eq!(Lfu { decay_time: 2, ..LFU }.decayed(bits, lru + 6000 * 3), 19);
        assert_eq!(Lfu { decay_time: 0, ..LFU }.decayed(bits, lru + 6000 * 300), 20, "no decay");
        assert_eq!(LFU.decayed(bits, lru + 6000 * 300), 0);
        // The minute wraps at 2^16, as Redis's does.
        let late = with_counter(6000 * 65535, 9);
        assert_eq!(LFU.decayed(late, 6000 * 65536 + 6000 * 2), 7);
    }
}
