//! WATCH on a node: versions of the keys some client watches, bumped by every change to them.
//!
//! Redis flags a watching client dirty when a watched key is touched. A node cannot reach the
//! client (it sits behind a router), so it keeps a version per watched key instead: WATCH
//! registers the key and answers its version, every change to it takes a new version, and EXEC
//! (a `Transaction` op) compares the versions the router kept. Only watched keys are tracked, so
//! a node nobody watches pays one relaxed atomic load per write.
//!
//! What counts as a change: any write op on the key (`ops/run.rs` touches before applying it,
//! even a write that leaves the key as it was, which Redis would not count:
//! docs/compatibility.md), and the key's removal by expiry, eviction, a flush or a slot move (the
//! shard touches it). Versions come from one node-wide counter that starts at a random point of
//! the 64-bit range, so a version a router kept from another node, from before a restart or from
//! a swept registration never matches a current one (the router needs no node identity beside
//! it).
//!
//! Registrations are counted (two clients may watch one key); UNWATCH, EXEC and DISCARD release
//! them. A router that dies holding watches cannot release them, so registrations older than
//! [`MAX_AGE`] are swept: an EXEC that late finds its watch gone and aborts, which is the safe
//! direction.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;

/// How long a registration lives without being renewed.
pub const MAX_AGE: Duration = Duration::from_secs(3600);

#[derive(Debug)]
struct Watch {
    version: u64,
    refs: u32,
    registered: Instant,
}

#[derive(Debug)]
pub struct Watches {
    /// Keys watched now (a fast "nobody watches" check before taking the lock).
    count: AtomicUsize,
    next: AtomicU64,
    keys: Mutex<HashMap<Bytes, Watch>>,
    /// Routers' near-cache tracking: it needs to hear of the same changes (the shards' removals
    /// reach it through [`touch`](Self::touch); the ops layer tells it of writes after applying
    /// them, see `super::tracking`).
    pub tracking: super::tracking::Tracking,
}

impl Default for Watches {
    fn default() -> Self {
        // Below 2^63: the counter never wraps in practice.
        let start = fastrand::u64(..) >> 1;
        Watches {
            count: AtomicUsize::new(0),
            next: AtomicU64::new(start),
            keys: Mutex::new(HashMap::new()),
            tracking: super::tracking::Tracking::default(),
        }
    }
}

impl Watches {
    fn version(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether any key is watched.
    #[inline]
    pub fn active(&self) -> bool {
        self.count.load(Ordering::Relaxed) != 0
    }

    /// `key` changed (the shards call it under their lock as they remove a key, so watchers
    /// and tracking routers both hear of it).
    #[inline]
    pub fn touch(&self, key: &[u8]) {
        self.touch_watched(key);
        self.tracking.touch(key);
    }

    /// `key` is about to change: watchers only (the ops layer, before a write; tracking hears
    /// of it after the write is applied, or a read between the two could be cached stale).
    #[inline]
    pub fn touch_watched(&self, key: &[u8]) {
        if self.active() {
            self.touch_slow(key);
        }
    }

    #[cold]
    fn touch_slow(&self, key: &[u8]) {
        if let Some(w) = self.keys.lock().get_mut(key) {
            w.version = self.version();
        }
    }

    /// Every key changed (FLUSHALL, as the shards clear): watchers and tracking routers.
    pub fn touch_all(&self) {
        self.touch_all_watched();
        self.tracking.touch_all();
    }

    /// Every key is about to change: watchers only (see [`touch_watched`](Self::touch_watched)).
    pub fn touch_all_watched(&self) {
        if self.active() {
            for w in self.keys.lock().values_mut() {
                w.version = self.version();
            }
        }
    }

    /// The keys watched now.
    pub fn watched_keys(&self) -> Vec<Bytes> {
        self.keys.lock().keys().cloned().collect()
    }

    /// Registers a watch on `key`; returns its version.
    pub fn register(&self, key: &[u8]) -> u64 {
        let mut keys = self.keys.lock();
        let now = Instant::now();
        if let Some(w) = keys.get_mut(key) {
            w.refs += 1;
            w.registered = now;
            return w.version;
        }
        let version = self.version();
        keys.insert(Bytes::copy_from_slice(key), Watch { version, refs: 1, registered: now });
        self.count.store(keys.len(), Ordering::Relaxed);
        version
    }

    /// Drops one registration of `key` (none left: the key is no longer tracked).
    pub fn release(&self, key: &[u8]) {
        let mut keys = self.keys.lock();
        if let Some(w) = keys.get_mut(key) {
            w.refs -= 1;
            if w.refs == 0 {
                keys.remove(key);
                self.count.store(keys.len(), Ordering::Relaxed);
            }
        }
    }

    /// Whether `key` is still at `version` (unchanged since the WATCH that answered it).
    pub fn unchanged(&self, key: &[u8], version: u64) -> bool {
        self.keys.lock().get(key).is_some_and(|w| w.version == version)
    }

    /// Drops registrations older than [`MAX_AGE`] (their router is gone, most likely).
    pub fn sweep(&self) {
        if !self.active() {
            return;
        }
        let mut keys = self.keys.lock();
        keys.retain(|_, w| w.registered.elapsed() < MAX_AGE);
        self.count.store(keys.len(), Ordering::Relaxed);
    }

    /// Keys watched now (INFO, tests).
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_touch_changes_the_version_of_watched_keys_only() {
        let w = Watches::default();
        assert!(!w.active());
        w.touch(b"a"); // nobody watches: nothing to do
        let va = w.register(b"a");
        let vb = w.register(b"b");
        assert!(w.unchanged(b"a", va) && w.unchanged(b"b", vb));
        w.touch(b"a");
        assert!(!w.unchanged(b"a", va), "a changed");
        assert!(w.unchanged(b"b", vb), "b did not");
        w.touch_all();
        assert!(!w.unchanged(b"b", vb));
    }

    #[test]
    fn registrations_are_counted_and_released() {
        let w = Watches::default();
        let v1 = w.register(b"k");
        let v2 = w.register(b"k");
        assert_eq!(v1, v2, "a second watcher shares the version");
        w.release(b"k");
        assert!(w.unchanged(b"k", v1), "still watched by the other client");
        w.release(b"k");
        assert!(!w.active());
        assert!(!w.unchanged(b"k", v1), "an unknown watch never matches");
        let v3 = w.register(b"k");
        assert_ne!(v3, v1, "a new registration never reuses an old version");
    }
}
