//! Tracking for routers' near caches: which router holds which key, and the invalidations the
//! node owes them (Redis's CLIENT TRACKING, with routers as the clients).
//!
//! A router that caches values registers its `Subscribe` stream for tracking with a token (its
//! identity, the same on every node). A tracked read (`Get.track`) registers "router R holds key
//! K" *before* it reads the value; every change of K calls [`Tracking::touch`] *after* the change
//! is applied, which queues one invalidation on each holder's stream and forgets the entry
//! (default mode: one invalidation per registration). Register-before-read and
//! invalidate-after-write mean that whatever order a read and a write take, either the read saw
//! the write or the write's invalidation finds the registration: no cached value outlives a
//! change unannounced. Invalidations are queued synchronously (on the router stream's queue,
//! where too many unread ones coalesce into one `invalidate_all`: `crate::pubsub::Outbox`), so
//! they are on the router's stream before the reply of the write leaves the node.
//!
//! Where changes are seen: the ops layer touches the keys of every write op after applying it
//! (`ops/run.rs`); the shards touch keys they remove themselves (expiry, eviction, delete,
//! import, purge) through [`super::watch::Watches::touch`]; a flush invalidates everything; a
//! slot leaving the node (the node adopts a topology where it no longer owns it outright)
//! invalidates the keys tracked in it.
//!
//! BCAST routers register prefixes and hear of every change of a key with one of them, with no
//! per-key state; their other keys register per key as in default mode (a router whose clients
//! use CLIENT TRACKING BCAST still tracks its near cache's and its default-mode clients' keys).
//! Re-registering on the same stream (new prefixes) keeps the key registrations.
//!
//! The table is bounded ([`DEFAULT_MAX_KEYS`], like Redis's `tracking-table-max-keys`; split
//! evenly over 16 shards so that writes to different keys rarely share a lock): a new
//! registration in a full shard first invalidates (and forgets) another key of it. Off (no
//! router tracking) every hook is one relaxed atomic load.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use bytes::Bytes;
use std::hash::BuildHasher;

use parking_lot::{Mutex, RwLock};

/// Keys tracked at most (Redis's `tracking-table-max-keys` defaults to 1M too).
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// Where a router's invalidations go (its `Subscribe` stream's queue).
pub trait Target: Send + Sync + std::fmt::Debug {
    /// `keys` changed.
    fn invalidate(&self, keys: Vec<Bytes>);
    /// Anything may have changed: drop everything cached from this node.
    fn invalidate_all(&self);
}

#[derive(Debug)]
struct Router {
    /// The stream registered (a reconnect registers a new one under the same token).
    stream: u64,
    target: Arc<dyn Target>,
    /// BCAST: the prefixes (an empty prefix matches every key); `None`: default mode.
    prefixes: Option<Vec<Bytes>>,
}

#[derive(Debug, Default)]
struct Routers {
    map: HashMap<u64, Router>,
    /// Routers in BCAST mode (a touch of an untracked key checks prefixes only if any).
    bcast: usize,
}

/// Default mode: tracked keys and the tokens of the routers holding each.
type Keys = HashMap<Bytes, Vec<u64>>;

/// Key tables, so that writes on different keys rarely meet on one lock.
const SHARDS: usize = 16;

/// Locks are taken in one order: `routers` (shared, except to register a router), then one key
/// shard.
#[derive(Debug)]
pub struct Tracking {
    /// Some router tracks (a relaxed load is every hook's cost while none does).
    active: AtomicBool,
    routers: RwLock<Routers>,
    keys: Box<[Mutex<Keys>]>,
    hasher: std::hash::RandomState,
    max_keys: AtomicUsize,
    tracked: AtomicUsize,
    /// Invalidations queued for routers (one per key per router; an `invalidate_all` counts 1).
    pub sent: AtomicU64,
}

impl Default for Tracking {
    fn default() -> Self {
        Tracking {
            active: AtomicBool::new(false),
            routers: RwLock::default(),
            keys: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: std::hash::RandomState::new(),
            max_keys: AtomicUsize::new(DEFAULT_MAX_KEYS),
            tracked: AtomicUsize::new(0),
            sent: AtomicU64::new(0),
        }
    }
}

impl Tracking {
    #[inline]
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    pub fn set_max_keys(&self, max: usize) {
        self.max_keys.store(max.max(1), Ordering::Relaxed);
    }

    /// Keys tracked now (default mode).
    pub fn len(&self) -> usize {
        self.tracked.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, key: &[u8]) -> &Mutex<Keys> {
        &self.keys[(self.hasher.hash_one(key) as usize) % SHARDS]
    }

    /// Stream `stream` tracks for router `token` from now on (`prefixes`: BCAST mode). A router
    /// that registers again (a new stream after a reconnect) starts from nothing: its earlier
    /// registrations are answered with an `invalidate_all` on the new stream, since the router
    /// may have cached values while invalidations on the old stream were lost.
    pub fn enable(&self, token: u64, stream: u64, target: Arc<dyn Target>, prefixes: Option<Vec<Bytes>>) {
        let mut routers = self.routers.write();
        let bcast = prefixes.is_some();
        let previous = routers.map.insert(token, Router { stream, target: target.clone(), prefixes });
        if previous.as_ref().is_some_and(|p| p.prefixes.is_some()) {
            routers.bcast -= 1;
        }
        if bcast {
            routers.bcast += 1;
        }
        // The same stream changing its prefixes (a router whose clients BCAST) keeps its key
        // registrations: no invalidation was lost.
        if previous.is_some_and(|p| p.stream != stream) {
            self.forget_router(token);
            target.invalidate_all();
            self.sent.fetch_add(1, Ordering::Relaxed);
        }
        self.active.store(true, Ordering::Relaxed);
    }

    /// Stream `stream` ended: its router no longer hears of changes (unless it registered again
    /// on another stream since).
    pub fn disable(&self, token: u64, stream: u64) {
        let mut routers = self.routers.write();
        if routers.map.get(&token).is_none_or(|r| r.stream != stream) {
            return;
        }
        let r = routers.map.remove(&token).expect("present");
        if r.prefixes.is_some() {
            routers.bcast -= 1;
        }
        self.forget_router(token);
        self.active.store(!routers.map.is_empty(), Ordering::Relaxed);
    }

    /// Drops every registration of `token` (the caller holds `routers` exclusively).
    fn forget_router(&self, token: u64) {
        for shard in self.keys.iter() {
            let mut keys = shard.lock();
            let before = keys.len();
            keys.retain(|_, holders| {
                holders.retain(|t| *t != token);
                !holders.is_empty()
            });
            self.tracked.fetch_sub(before - keys.len(), Ordering::Relaxed);
        }
    }

    /// Registers that router `token` is about to read `key` (call before reading it). Whether the
    /// router tracks here (a BCAST router whose prefixes cover the key counts); false: the
    /// router must not cache what it reads.
    pub fn track(&self, token: u64, key: &[u8]) -> bool {
        if !self.active() {
            return false;
        }
        let routers = self.routers.read();
        let Some(router) = routers.map.get(&token) else { return false };
        // A key its prefixes cover needs no registration (every change of it is sent); others
        // register per key, so a router may track keys and prefixes at once.
        if router.prefixes.as_ref().is_some_and(|ps| ps.iter().any(|p| key.starts_with(p))) {
            return true;
        }
        let mut keys = self.shard(key).lock();
        if let Some(holders) = keys.get_mut(key) {
            if !holders.contains(&token) {
                holders.push(token);
            }
            return true;
        }
        // Full: make room by invalidating other keys of this shard (their holders drop them
        // and read again).
        let max = (self.max_keys.load(Ordering::Relaxed) / SHARDS).max(1);
        while keys.len() >= max {
            let Some(victim) = keys.keys().next().cloned() else { break };
            let holders = keys.remove(&victim).expect("just seen");
            self.tracked.fetch_sub(1, Ordering::Relaxed);
            self.send(&routers, &victim, &holders);
        }
        keys.insert(Bytes::copy_from_slice(key), vec![token]);
        self.tracked.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// `key` changed (call after the change is applied).
    #[inline]
    pub fn touch(&self, key: &[u8]) {
        if self.active() {
            self.touch_slow(key);
        }
    }

    #[cold]
    fn touch_slow(&self, key: &[u8]) {
        let routers = self.routers.read();
        let holders = self.shard(key).lock().remove(key);
        if holders.is_some() {
            self.tracked.fetch_sub(1, Ordering::Relaxed);
        } else if routers.bcast == 0 {
            return;
        }
        self.send(&routers, key, &holders.unwrap_or_default());
    }

    /// Queues the invalidation of `key` for `holders` and for the BCAST routers it concerns.
    fn send(&self, routers: &Routers, key: &[u8], holders: &[u64]) {
        let key = Bytes::copy_from_slice(key);
        let mut n = 0;
        for token in holders {
            // A holder whose prefixes match hears of it below, once.
            if let Some(r) = routers.map.get(token)
                && !r.prefixes.as_ref().is_some_and(|ps| ps.iter().any(|p| key.starts_with(p)))
            {
                r.target.invalidate(vec![key.clone()]);
                n += 1;
            }
        }
        if routers.bcast != 0 {
            for r in routers.map.values() {
                if let Some(prefixes) = &r.prefixes
                    && prefixes.iter().any(|p| key.starts_with(p))
                {
                    r.target.invalidate(vec![key.clone()]);
                    n += 1;
                }
            }
        }
        self.sent.fetch_add(n, Ordering::Relaxed);
    }

    /// Every key changed (a flush): every tracking router drops everything from this node.
    pub fn touch_all(&self) {
        if !self.active() {
            return;
        }
        let routers = self.routers.read();
        for shard in self.keys.iter() {
            let mut keys = shard.lock();
            self.tracked.fetch_sub(keys.len(), Ordering::Relaxed);
            keys.clear();
        }
        for r in routers.map.values() {
            r.target.invalidate_all();
        }
        self.sent.fetch_add(routers.map.len() as u64, Ordering::Relaxed);
    }

    /// `slots` are no longer owned outright here (moving out, given away, the node demoted):
    /// the keys tracked in them are invalidated, and BCAST routers (which have no per-key
    /// state) drop everything from this node.
    pub fn slots_left(&self, slots: &[u16]) {
        if !self.active() || slots.is_empty() {
            return;
        }
        let mut left = vec![false; shoal_wire::SLOT_COUNT];
        for &s in slots {
            left[usize::from(s) % shoal_wire::SLOT_COUNT] = true;
        }
        let routers = self.routers.read();
        for shard in self.keys.iter() {
            let mut keys = shard.lock();
            let gone: Vec<Bytes> =
                keys.keys().filter(|k| left[usize::from(shoal_wire::key_slot(k))]).cloned().collect();
            for key in gone {
                let holders = keys.remove(&key).expect("listed");
                self.tracked.fetch_sub(1, Ordering::Relaxed);
                for token in &holders {
                    if let Some(r) = routers.map.get(token) {
                        r.target.invalidate(vec![key.clone()]);
                        self.sent.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        for r in routers.map.values().filter(|r| r.prefixes.is_some()) {
            r.target.invalidate_all();
            self.sent.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default)]
    struct Recorder(Mutex<Vec<String>>);

    impl Target for Recorder {
        fn invalidate(&self, keys: Vec<Bytes>) {
            for k in keys {
                self.0.lock().push(String::from_utf8_lossy(&k).into_owned());
            }
        }
        fn invalidate_all(&self) {
            self.0.lock().push("*".into());
        }
    }

    impl Recorder {
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.0.lock())
        }
    }

    #[test]
    fn one_invalidation_per_registration() {
        let t = Tracking::default();
        let (a, b) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
        assert!(!t.track(1, b"k"), "nobody tracks yet");
        t.enable(1, 10, a.clone(), None);
        t.enable(2, 20, b.clone(), None);
        assert!(t.track(1, b"k") && t.track(1, b"k") && t.track(2, b"k"));
        assert!(!t.track(3, b"k"), "an unknown token is not tracked");
        assert_eq!(t.len(), 1);
        t.touch(b"k");
        assert_eq!((a.take(), b.take()), (vec!["k".to_string()], vec!["k".to_string()]));
        t.touch(b"k");
        assert!(a.take().is_empty() && b.take().is_empty(), "forgotten after the first");
        assert_eq!(t.sent.load(Ordering::Relaxed), 2);
        t.track(1, b"x");
        t.touch_all();
        assert_eq!((a.take(), b.take()), (vec!["*".to_string()], vec!["*".to_string()]));
        assert!(t.is_empty());
    }

    #[test]
    fn bcast_prefixes_hear_every_change() {
        let t = Tracking::default();
        let r = Arc::new(Recorder::default());
        t.enable(1, 10, r.clone(), Some(vec![Bytes::from("user:")]));
        assert!(t.track(1, b"user:1"));
        assert!(t.is_empty(), "no per-key state for a covered key");
        assert!(t.track(1, b"other"), "others register per key");
        t.touch(b"user:1");
        t.touch(b"user:1");
        t.touch(b"other");
        t.touch(b"other");
        t.touch(b"user:2");
        assert_eq!(r.take(), ["user:1", "user:1", "other", "user:2"]);
        // New prefixes on the same stream keep the registrations, without an invalidate-all.
        t.track(1, b"kept");
        t.enable(1, 10, r.clone(), Some(vec![Bytes::from("order:")]));
        t.touch(b"kept");
        t.touch(b"user:3");
        t.touch(b"order:1");
        assert_eq!(r.take(), ["kept", "order:1"]);
    }

    #[test]
    fn a_full_table_invalidates_to_make_room() {
        let t = Tracking::default();
        t.set_max_keys(SHARDS); // one key per shard
        let r = Arc::new(Recorder::default());
        t.enable(1, 10, r.clone(), None);
        let keys: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
        for k in &keys {
            assert!(t.track(1, k.as_bytes()));
        }
        let evicted = r.take();
        assert!(t.len() <= SHARDS, "bounded: {}", t.len());
        assert_eq!(evicted.len() + t.len(), keys.len(), "every key made room for is invalidated");
        let mut unique = evicted.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), evicted.len(), "once each");
        t.touch(evicted[0].as_bytes());
        assert!(r.take().is_empty(), "an evicted key was forgotten");
    }

    #[test]
    fn a_new_stream_resets_and_an_old_one_ending_does_not_disable() {
        let t = Tracking::default();
        let (old, new) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
        t.enable(1, 10, old.clone(), None);
        t.track(1, b"k");
        t.enable(1, 11, new.clone(), None);
        assert_eq!(new.take(), ["*"], "what was tracked for the old stream is void");
        t.disable(1, 10);
        assert!(t.active() && t.track(1, b"k"), "the new stream still tracks");
        t.touch(b"k");
        assert_eq!(new.take(), ["k"]);
        t.disable(1, 11);
        assert!(!t.active());
    }

    #[test]
    fn slots_leaving_invalidate_their_keys() {
        let t = Tracking::default();
        let r = Arc::new(Recorder::default());
        t.enable(1, 10, r.clone(), None);
        t.track(1, b"a");
        t.track(1, b"b");
        t.slots_left(&[shoal_wire::key_slot(b"a")]);
        assert_eq!(r.take(), ["a"]);
        assert_eq!(t.len(), 1);
    }
}
