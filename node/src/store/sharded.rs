//! The store itself: its shards and which one holds a key, the memory account, the settings in
//! force, the base snapshot underneath and the slots' resharding flags. The commands on it are
//! `impl Store` blocks in the files beside this one (strings, keyspace, typed values, eviction,
//! persistence); each takes the one shard lock its key needs through [`Store::with_shard`].

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

use parking_lot::{Mutex, RwLock};
use shoal_wire::clock::Clock;

use super::blocked;
use super::config::{EvictionPolicy, StoreConfig, policy_index};
use super::error::StoreError;
use super::events;
use super::lag;
use super::object::limits::Limits;
use super::shard::Shard;
use super::slots::{self, BASE_MASKED, DROPPING, INCOMING, SlotFlags};
use super::watch;
use crate::snapshot::Snapshot;

/// Counters for INFO, `SHOAL NODES` and /metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub keys: u64,
    pub volatile_keys: u64,
    /// The keys with a TTL: their average time left, in ms (INFO keyspace's `avg_ttl`).
    pub avg_ttl_ms: u64,
    pub used_memory: u64,
    pub used_memory_peak: u64,
    pub expired_keys: u64,
    /// Hash fields removed because their time passed.
    pub expired_subkeys: u64,
    pub evicted_keys: u64,
    pub keyspace_hits: u64,
    pub keyspace_misses: u64,
}

pub struct Store {
    pub(super) shards: Box<[Mutex<Shard>]>,
    pub(super) mask: usize,
    pub(super) clock: Arc<dyn Clock>,
    /// As started; `maxmemory`, `policy` and `limits` below are the current values of the settings
    /// that can change at runtime.
    pub(super) config: StoreConfig,
    pub(super) maxmemory: AtomicUsize,
    /// An index into [`EvictionPolicy::ALL`].
    pub(super) policy: AtomicU8,
    /// The thresholds new typed values are built with outside a shard lock (each shard holds its
    /// own copy, read under its lock).
    pub(super) limits: RwLock<Limits>,
    pub(super) used: AtomicUsize,
    /// The most [`Self::used_memory`] has been when sampled ([`Self::note_peak`]).
    pub(super) peak: AtomicUsize,
    /// Where the next eviction starts looking, so evictions spread over the shards.
    pub(super) evict_cursor: AtomicUsize,
    /// The base snapshot (also held by each shard, which is where reads use it).
    pub(super) base: RwLock<Option<Arc<Snapshot>>>,
    /// Resharding state per slot (shared with the shards).
    pub(super) slots: Arc<SlotFlags>,
    /// Base entries in slots given away (masked), for DBSIZE.
    pub(super) base_masked: AtomicUsize,
    /// Every op holds it shared while it runs, a transaction (MULTI/EXEC) exclusively: no op of
    /// another client runs between a transaction's ops. (Shard locks alone cannot do that: the
    /// ops of a transaction take them one after the other.)
    pub gate: RwLock<()>,
    /// Watched keys and their versions (shared with the shards, which touch keys they remove).
    pub watches: Arc<watch::Watches>,
    /// Clients blocked on keys of this node.
    pub blocked: blocked::Blocked,
    /// Keyspace notifications and the pub/sub sink (shared with the shards).
    pub events: Arc<events::Events>,
    /// Reads, writes and bytes per slot (counted by `ops/run.rs`, where ops run).
    pub slot_traffic: slots::SlotCounters,
    /// How late expired keys were removed (shared with the shards).
    pub expiry_lag: Arc<lag::ExpiryLag>,
    /// Set while the node is a replica (shared with the shards; see [`Store::set_follower`]).
    follower: Arc<AtomicBool>,
    /// Whether accesses count for LFU (an LFU policy is set), and how.
    lfu: Arc<super::lfu::LfuSettings>,
    /// The latency monitor's expiry and eviction events (`latency-monitor-threshold`).
    pub latency: Arc<shoal_wire::latency::Monitor>,
    /// Whether the active expiry pass runs (DEBUG SET-ACTIVE-EXPIRE turns it off for tests of
    /// lazy expiry; keys still expire when read).
    pub active_expire: AtomicBool,
    /// The node's function libraries (copied wherever the store is copied).
    pub libraries: super::libraries::Libraries,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").field("config", &self.config).finish_non_exhaustive()
    }
}

impl Store {
    pub fn new(config: StoreConfig, clock: Arc<dyn Clock>) -> Store {
        let n = config.shards.max(1).next_power_of_two();
        let hasher = hashbrown::DefaultHashBuilder::default();
        let slots = Arc::new(SlotFlags::default());
        let watches = Arc::new(watch::Watches::default());
        let events = Arc::new(events::Events::default());
        events.set_flags(config.notify_keyspace_events);
        let expiry_lag = Arc::new(lag::ExpiryLag::default());
        let follower = Arc::new(AtomicBool::new(false));
        let slot_traffic = slots::SlotCounters::default();
        slot_traffic.set_enabled(config.slot_stats);
        let lfu = Arc::new(super::lfu::LfuSettings::default());
        lfu.set(config.policy.is_lfu(), config.lfu_log_factor, config.lfu_decay_time);
        let shards = (0..n)
            .map(|_| {
                let mut shard = Shard::new(hasher.clone(), slots.clone(), watches.clone());
                shard.limits = config.limits.clone();
                shard.events = events.clone();
                shard.lag = expiry_lag.clone();
                shard.follower = follower.clone();
                shard.lfu = lfu.clone();
                Mutex::new(shard)
            })
            .collect();
        Store {
            shards,
            mask: n - 1,
            clock,
            maxmemory: AtomicUsize::new(config.maxmemory),
            policy: AtomicU8::new(policy_index(config.policy)),
            limits: RwLock::new(config.limits.clone()),
            config: StoreConfig { shards: n, ..config },
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            evict_cursor: AtomicUsize::new(0),
            base: RwLock::new(None),
            slots,
            base_masked: AtomicUsize::new(0),
            gate: RwLock::new(()),
            watches,
            blocked: blocked::Blocked::default(),
            events,
            slot_traffic,
            expiry_lag,
            follower,
            lfu,
            latency: Arc::default(),
            active_expire: AtomicBool::new(true),
            libraries: Default::default(),
        }
    }

    /// Makes the store a replica's copy (`true`) or a primary's (`false`). A replica's store
    /// removes nothing by its own clock, neither lazily nor actively: its keys and their
    /// removals come from its primary, whose clock decides (reads still see an expired key as
    /// gone). Otherwise clock skew, or a jump of the replica's clock, would drop keys the
    /// primary still holds, and a replica promoted later would lack them. Expiry by this node's
    /// clock resumes when it is made a primary.
    pub fn set_follower(&self, follower: bool) {
        self.follower.store(follower, Ordering::Relaxed);
    }

    /// Whether the store is a replica's copy (see [`set_follower`](Self::set_follower)).
    pub fn follower(&self) -> bool {
        self.follower.load(Ordering::Relaxed)
    }

    /// Marks `slot` as moving in (deletes leave tombstones) or not.
    pub fn set_incoming(&self, slot: u16, incoming: bool) {
        if incoming {
            self.slots.set(slot, INCOMING);
        } else {
            self.slots.clear(slot, INCOMING);
        }
    }

    /// Gives `slot` away: its base entries are dead from now on and its memory entries are
    /// reclaimed by [`purge`](Self::purge).
    pub fn drop_slot(&self, slot: u16) {
        self.slots.clear(slot, INCOMING);
        self.slots.set(slot, DROPPING);
        if self.slots.set(slot, BASE_MASKED)
            && let Some(base) = self.base()
        {
            self.base_masked.fetch_add(base.slot_range(slot, slot).len(), Ordering::Relaxed);
        }
    }

    /// The slot is served here again (it came back): stop reclaiming it. Its old base entries
    /// stay dead.
    pub fn keep_slot(&self, slot: u16) {
        self.slots.clear(slot, DROPPING);
    }

    /// Of `slots`, those given away come back (a primary takes them back, or its replica hears
    /// so): what an earlier stay left in memory is reclaimed now, then they are served again.
    /// Returns those slots and how many entries went.
    pub fn take_back_slots(&self, slots: impl IntoIterator<Item = u16>) -> (Vec<u16>, usize) {
        let back: Vec<u16> = slots.into_iter().filter(|&s| self.slots.has(s, DROPPING)).collect();
        if back.is_empty() {
            return (back, 0);
        }
        let removed = self.purge_slots(&back);
        back.iter().for_each(|&s| self.keep_slot(s));
        (back, removed)
    }

    /// The slots given away and not taken back (see [`drop_slot`](Self::drop_slot)).
    pub fn dropped_slots(&self) -> Vec<u16> {
        (0..shoal_wire::SLOT_COUNT as u16).filter(|&s| self.slots.has(s, DROPPING)).collect()
    }

    /// A replica's full sync begins, its store just emptied: the slots it counts as given away
    /// become exactly its primary's (`dropped`), so that what the primary sends next lands as it
    /// does there.
    pub fn set_dropped_slots(&self, dropped: &[u16]) {
        let mut is_dropped = vec![false; shoal_wire::SLOT_COUNT];
        dropped.iter().for_each(|&s| is_dropped[usize::from(s) % shoal_wire::SLOT_COUNT] = true);
        for (slot, dropped) in (0..).zip(is_dropped) {
            if dropped { self.drop_slot(slot) } else { self.keep_slot(slot) }
        }
    }

    pub fn slot_flags(&self) -> &SlotFlags {
        &self.slots
    }

    /// Reclaims memory of dropped slots and tombstones that hide nothing any more, one bounded
    /// chunk per shard lock. Returns the number of memory entries it removed.
    pub fn purge(&self) -> usize {
        const CHUNK: usize = 4096;
        let before: usize = self.shards.iter().map(|s| s.lock().values()).sum();
        for i in 0..self.shards.len() {
            let mut pos = Some(0);
            while let Some(p) = pos {
                pos = self.with_shard_at(i, |s| s.purge_dropping(p, CHUNK));
            }
            let mut pos = Some(0);
            while let Some(p) = pos {
                pos = self.with_shard_at(i, |s| s.purge_tombstones(p, CHUNK));
            }
        }
        let after: usize = self.shards.iter().map(|s| s.lock().values()).sum();
        before.saturating_sub(after)
    }

    /// Reclaims, now, the memory entries left over in dropped slots of the shards holding `slots`
    /// (a slot is coming back before the background purge got to it). Returns how many it removed.
    pub fn purge_slots(&self, slots: &[u16]) -> usize {
        const CHUNK: usize = 4096;
        let mut shards: Vec<usize> = slots.iter().map(|&s| usize::from(s) & self.mask).collect();
        shards.sort_unstable();
        shards.dedup();
        let mut removed = 0;
        for i in shards {
            let before = self.shards[i].lock().values();
            let mut pos = Some(0);
            while let Some(p) = pos {
                pos = self.with_shard_at(i, |s| s.purge_dropping(p, CHUNK));
            }
            removed += before.saturating_sub(self.shards[i].lock().values());
        }
        removed
    }

    /// Puts `snapshot` underneath an empty store: its keys are served at once, from the mapping.
    pub fn set_base(&self, snapshot: Arc<Snapshot>) {
        for shard in self.shards.iter() {
            shard.lock().set_base(Some(snapshot.clone()));
        }
        *self.base.write() = Some(snapshot);
    }

    /// Puts the base snapshot's keys that have a TTL on their shards' expiry schedules, so active
    /// expiry reclaims them as it does memory keys. One pass over the snapshot's index, run in the
    /// background after a warm start (it would delay the first read otherwise). Returns how many
    /// keys it scheduled.
    pub fn index_base_expiry(&self) -> usize {
        let Some(base) = self.base() else { return 0 };
        let mut per_shard: Vec<Vec<std::cmp::Reverse<(u64, u32)>>> = vec![Vec::new(); self.shards.len()];
        for i in 0..base.len() {
            let (slot, at) = base.slot_and_expiry(i);
            if at != 0 {
                per_shard[usize::from(slot) & self.mask].push(std::cmp::Reverse((at, i as u32)));
            }
        }
        let mut scheduled = 0;
        for (shard, items) in self.shards.iter().zip(per_shard) {
            scheduled += items.len();
            shard.lock().add_base_expiry(items);
        }
        scheduled
    }

    /// Base snapshot entries in `slots` that are still live there (not given away).
    pub fn base_entries_in(&self, slots: std::ops::RangeInclusive<u16>) -> usize {
        let Some(base) = self.base() else { return 0 };
        slots.filter(|&s| !self.slots.has(s, BASE_MASKED)).map(|s| base.slot_range(s, s).len()).sum()
    }

    /// The base snapshot, if the store has one.
    pub fn base(&self) -> Option<Arc<Snapshot>> {
        self.base.read().clone()
    }

    /// An empty single-shard store with this one's clock and current limits, for running a command
    /// over values gathered from several nodes.
    pub fn scratch(&self) -> Store {
        let config = StoreConfig { shards: 1, maxmemory: 0, limits: self.limits(), ..self.config.clone() };
        Store::new(config, self.clock.clone())
    }

    /// The encoding thresholds typed values are built with now.
    pub fn limits(&self) -> Limits {
        self.limits.read().clone()
    }

    /// New encoding thresholds (CONFIG SET). Each shard takes them under its lock, so a value
    /// converted afterwards follows them; values already stored keep their encoding until a write
    /// converts them, as in Redis.
    pub fn set_limits(&self, limits: Limits) {
        *self.limits.write() = limits.clone();
        for shard in self.shards.iter() {
            shard.lock().limits = limits.clone();
        }
    }

    /// The memory limit now (0: none).
    pub fn maxmemory(&self) -> usize {
        self.maxmemory.load(Ordering::Relaxed)
    }

    /// A new memory limit; the next write that may grow memory evicts down to it (or is refused).
    pub fn set_maxmemory(&self, bytes: usize) {
        self.maxmemory.store(bytes, Ordering::Relaxed);
    }

    /// The eviction policy now.
    pub fn policy(&self) -> EvictionPolicy {
        EvictionPolicy::ALL[usize::from(self.policy.load(Ordering::Relaxed))]
    }

    pub fn set_policy(&self, policy: EvictionPolicy) {
        self.policy.store(policy_index(policy), Ordering::Relaxed);
        self.lfu.set(policy.is_lfu(), self.lfu.log_factor(), self.lfu.decay_time());
    }

    /// `lfu-log-factor` and `lfu-decay-time` now.
    pub fn lfu_params(&self) -> (u32, u32) {
        (self.lfu.log_factor(), self.lfu.decay_time())
    }

    pub fn set_lfu_params(&self, log_factor: u32, decay_time: u32) {
        self.lfu.set(self.policy().is_lfu(), log_factor, decay_time);
    }

    /// The LFU counter's parameters while an LFU policy is set (`None`: not kept).
    pub fn lfu(&self) -> Option<super::lfu::Lfu> {
        self.lfu.get()
    }

    /// The configuration the store started with (the shard count and value size limit hold; for
    /// the memory limit, policy and thresholds as they are now see [`maxmemory`](Self::maxmemory),
    /// [`policy`](Self::policy) and [`limits`](Self::limits)).
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Unix microseconds by the store's clock (TIME from a script).
    pub fn now_us(&self) -> u64 {
        self.clock.now_us()
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Bytes accounted against `maxmemory`.
    /// Bytes the store holds: its values and indexes as accounted, plus its shards' own
    /// structures ([`Self::fixed_memory`]), so that even an empty store uses some memory, as any
    /// Redis does (`maxmemory 1` is full at once, as Valkey's tests expect).
    pub fn used_memory(&self) -> usize {
        self.used.load(Ordering::Relaxed) + self.fixed_memory()
    }

    /// Records [`Self::used_memory`] as the peak if it is the most seen, and returns the peak.
    /// Sampled (every active-expiry tick and every stats read), not per write: the write path
    /// stays one atomic add, and INFO's `used_memory_peak` is a dashboard's figure.
    pub fn note_peak(&self) -> usize {
        let used = self.used_memory();
        self.peak.fetch_max(used, Ordering::Relaxed).max(used)
    }

    /// What an empty store uses: its shards' structures.
    pub fn fixed_memory(&self) -> usize {
        self.shards.len() * std::mem::size_of::<Mutex<Shard>>()
    }

    pub(super) fn shard_of(&self, key: &[u8]) -> usize {
        usize::from(shoal_wire::key_slot(key)) & self.mask
    }

    /// Touches the memory that a batch's lookups of `keys` will read, shard by shard, one lock
    /// each. Applying a batch op by op leaves each lookup's cache misses (index, entry, key
    /// bytes) to wait in turn, hundreds of instructions apart; a tight loop of independent
    /// lookups lets the CPU overlap them. Changes nothing (not even LRU clocks or hit counters).
    pub fn warm<'a>(&self, keys: impl Iterator<Item = &'a [u8]>) {
        let mut by_shard: Vec<(usize, &[u8])> = keys.map(|k| (self.shard_of(k), k)).collect();
        if by_shard.len() < 2 {
            return;
        }
        by_shard.sort_unstable_by_key(|&(shard, _)| shard);
        let mut found = 0usize;
        for run in by_shard.chunk_by(|a, b| a.0 == b.0) {
            let shard = self.shards[run[0].0].lock();
            for &(_, key) in run {
                // `find` reads the index slot, the entry and (comparing) the key's bytes.
                found += shard.find(shard.hash(key), key).is_some() as usize;
            }
        }
        std::hint::black_box(found);
    }

    /// Runs `f` on the shard owning `key` with the key's hash and the current time, then settles
    /// the memory account. The one entry point for single-key commands.
    pub(super) fn with_shard<R>(&self, key: &[u8], f: impl FnOnce(&mut Shard, u64, u64) -> R) -> R {
        let now = self.clock.now_ms();
        self.with_shard_at(self.shard_of(key), |shard| {
            let hash = shard.hash(key);
            f(shard, hash, now)
        })
    }

    pub(super) fn with_shard_at<R>(&self, index: usize, f: impl FnOnce(&mut Shard) -> R) -> R {
        let mut shard = self.shards[index].lock();
        let before = shard.mem();
        let r = f(&mut shard);
        let after = shard.mem();
        drop(shard);
        self.settle(before, after);
        r
    }

    pub(super) fn settle(&self, before: usize, after: usize) {
        if after > before {
            self.used.fetch_add(after - before, Ordering::Relaxed);
        } else if before > after {
            self.used.fetch_sub(before - after, Ordering::Relaxed);
        }
    }

    pub(super) fn check_len(&self, len: usize) -> Result<(), StoreError> {
        if len > self.config.max_value_len { Err(StoreError::TooLarge) } else { Ok(()) }
    }

    /// Active expiry: removes up to `budget_per_shard` expired keys from each shard, taking each
    /// shard's lock only for that bounded amount of work. Returns how many keys it removed.
    pub fn purge_expired(&self, budget_per_shard: usize) -> usize {
        // Not in the middle of a transaction or a script (Redis expires nothing while EXEC or a
        // script runs); this round is skipped rather than wait, since a script may run for long.
        let Some(_shared) = self.gate.try_read() else { return 0 };
        self.watches.sweep();
        let now = self.clock.now_ms();
        (0..self.shards.len())
            .map(|i| self.with_shard_at(i, |s| s.purge_expired(now, budget_per_shard)))
            .sum()
    }

    /// How long the key overdue longest has been (ms past its expiry time, still stored: active
    /// expiry is behind or held off); 0 when none is. One look per shard (the stale heap pairs it
    /// passes are dropped, as the next purge would).
    pub fn oldest_overdue_ms(&self) -> u64 {
        if self.follower() {
            return 0; // a replica leaves expiry to its primary: nothing is overdue here
        }
        let now = self.clock.now_ms();
        (0..self.shards.len())
            .filter_map(|i| self.with_shard_at(i, |s| s.oldest_overdue(now)))
            .min()
            .map_or(0, |at| now.saturating_sub(at))
    }

    /// Keys per slot (all `SLOT_COUNT` of them): memory values plus the base's live entries, as
    /// [`len`](Self::len) counts them. A walk over every entry, one bounded chunk per shard lock
    /// at a time (SHOAL SLOT-STATS is an occasional admin command; keeping a count per slot up to
    /// date on every insert and delete would cost every write instead).
    pub fn keys_per_slot(&self) -> Vec<u64> {
        const CHUNK: usize = 4096;
        let mut counts = vec![0i64; shoal_wire::SLOT_COUNT];
        for shard in self.shards.iter() {
            let mut pos = Some(0);
            while let Some(p) = pos {
                pos = shard.lock().count_slots(p, CHUNK, &mut counts);
            }
        }
        if let Some(base) = self.base() {
            for (slot, n) in counts.iter_mut().enumerate() {
                let slot = slot as u16;
                if !self.slots.has(slot, BASE_MASKED) {
                    *n += base.slot_range(slot, slot).len() as i64;
                }
            }
        }
        counts.into_iter().map(|n| n.max(0) as u64).collect()
    }

    /// Changes since the node started (Redis's `dirty`: INFO's `rdb_changes_since_last_save` is
    /// this less its value when the last snapshot began): the change log's count and every
    /// shard's SETs.
    pub fn dirty(&self) -> u64 {
        self.events.changes.dirty() + self.shards.iter().map(|s| s.lock().sets).sum::<u64>()
    }

    pub fn stats(&self) -> StoreStats {
        let mut st = StoreStats {
            used_memory: self.used_memory() as u64,
            used_memory_peak: self.note_peak() as u64,
            ..Default::default()
        };
        st.keys = self.len() as u64;
        let mut expire_sum = 0u128;
        for shard in self.shards.iter() {
            let s = shard.lock();
            st.volatile_keys += s.volatile() as u64;
            expire_sum += s.expire_sum();
            st.expired_keys += s.expired;
            st.expired_subkeys += s.expired_fields;
            st.evicted_keys += s.evicted;
            st.keyspace_hits += s.hits;
            st.keyspace_misses += s.misses;
        }
        if st.volatile_keys > 0 {
            // Keys past their time but not removed yet count as 0 left, not as negative.
            let mean = (expire_sum / u128::from(st.volatile_keys)) as u64;
            st.avg_ttl_ms = mean.saturating_sub(self.now_ms());
        }
        st
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{SystemClock, default_shards};

    #[test]
    fn shard_count_is_a_power_of_two() {
        let s = Store::new(StoreConfig { shards: 6, ..Default::default() }, Arc::new(SystemClock));
        assert_eq!(s.shard_count(), 8);
        assert!(default_shards().is_power_of_two());
    }
}
