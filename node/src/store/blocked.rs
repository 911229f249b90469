//! Clients blocked on keys (BLPOP, BLMOVE, BZPOPMIN, ...): who waits on which key, in arrival
//! order. The registry only keeps the queues; `ops/blocked.rs` parks a waiter's command here,
//! runs it when a write makes one of its keys ready, and withdraws it (the `Block` call in
//! `service.rs` times out or goes away). What a waiter runs is the ops layer's protocol op, which
//! the store cannot name: it is parked as an opaque value, so the store holds no protocol types.
//!
//! Everything that looks at a key's readiness and then registers or serves a waiter holds the
//! registry's lock across both (see [`Blocked::lock`]), so a push can never slip between a
//! waiter's failed attempt and its registration (a lost wake-up), and two writes never serve one
//! waiter twice. Lock order: the store's gate, then this lock, then shard locks.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use parking_lot::{Mutex, MutexGuard};

/// A blocked client, queued on each of its keys.
#[derive(Debug)]
pub struct Waiter {
    pub keys: Vec<Bytes>,
    /// What the client waits to run and where its reply goes, as the layer that parked it left
    /// it (the store never looks inside; only that layer takes it out again).
    pub parked: Box<dyn Any + Send>,
}

#[derive(Debug, Default)]
pub struct Queues {
    next: u64,
    by_key: HashMap<Bytes, VecDeque<u64>>,
    waiters: HashMap<u64, Waiter>,
}

impl Queues {
    /// Queues `w` behind the clients already waiting on its keys; returns its id.
    pub fn register(&mut self, w: Waiter) -> u64 {
        self.next += 1;
        let id = self.next;
        for k in &w.keys {
            self.by_key.entry(k.clone()).or_default().push_back(id);
        }
        self.waiters.insert(id, w);
        id
    }

    /// Takes waiter `id` out of every queue (`None`: it was served or withdrawn already).
    pub fn remove(&mut self, id: u64) -> Option<Waiter> {
        let w = self.waiters.remove(&id)?;
        for k in &w.keys {
            if let Some(q) = self.by_key.get_mut(k) {
                q.retain(|&x| x != id);
                if q.is_empty() {
                    self.by_key.remove(k);
                }
            }
        }
        Some(w)
    }

    /// The client that has waited longest on `key`.
    pub fn first(&self, key: &[u8]) -> Option<(u64, &Waiter)> {
        let id = *self.by_key.get(key)?.front()?;
        Some((id, &self.waiters[&id]))
    }

    /// The clients waiting on `key`, longest waiting first.
    pub fn waiting_on(&self, key: &[u8]) -> Vec<u64> {
        self.by_key.get(key).map(|q| q.iter().copied().collect()).unwrap_or_default()
    }

    pub fn get(&self, id: u64) -> Option<&Waiter> {
        self.waiters.get(&id)
    }

    /// Every key someone waits on (a FLUSHALL makes them all ready: blocked XREADGROUPs end).
    pub fn keys(&self) -> Vec<Bytes> {
        self.by_key.keys().cloned().collect()
    }

    /// Whether anyone waits on `key`.
    pub fn has(&self, key: &[u8]) -> bool {
        self.by_key.contains_key(key)
    }

    pub fn len(&self) -> usize {
        self.waiters.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }
}

#[derive(Debug, Default)]
pub struct Blocked {
    /// Waiters now (a fast "nobody waits" check before taking the lock).
    count: AtomicUsize,
    /// Clients between the start of their first attempt and their registration
    /// ([`Blocked::arriving`]): counted by [`Blocked::active`] too.
    arriving: AtomicUsize,
    queues: Mutex<Queues>,
}

/// A client making its first attempt before it may wait ([`Blocked::arriving`]); uncounted when
/// dropped.
pub struct Arriving<'a>(&'a Blocked);

impl Drop for Arriving<'_> {
    fn drop(&mut self) {
        self.0.arriving.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The registry, locked; keeps the waiter count in step when released.
pub struct Locked<'a> {
    blocked: &'a Blocked,
    pub queues: MutexGuard<'a, Queues>,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.blocked.count.store(self.queues.len(), Ordering::Relaxed);
    }
}

impl Blocked {
    /// Whether any client waits, or is about to (two relaxed loads: the check every write makes,
    /// *after* it applied: see [`Blocked::arriving`]).
    #[inline]
    pub fn active(&self) -> bool {
        self.count.load(Ordering::Relaxed) != 0 || self.arriving.load(Ordering::Relaxed) != 0
    }

    /// Counts a client that is about to make its first attempt and may then wait; held until it
    /// is registered (or served). Taken *before* the attempt: a write that comes after the
    /// attempt (the shard lock orders them) then finds [`Blocked::active`] true when it checks
    /// after applying, and serves the client under the registry's lock, which the client holds
    /// until it is registered. Without it, a write could check before the registration, find
    /// nobody, and leave the client waiting while its key holds data (a lost wake-up: a BLPOP
    /// with a push right behind it, about 1 in 300 tries, found by Valkey's list unit).
    pub fn arriving(&self) -> Arriving<'_> {
        self.arriving.fetch_add(1, Ordering::Relaxed);
        Arriving(self)
    }

    pub fn lock(&self) -> Locked<'_> {
        Locked { blocked: self, queues: self.queues.lock() }
    }

    /// Clients waiting now (INFO's `blocked_clients`).
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

    fn waiter(keys: &[&str]) -> Waiter {
        let keys = keys.iter().map(|k| Bytes::copy_from_slice(k.as_bytes())).collect();
        Waiter { keys, parked: Box::new(()) }
    }

    #[test]
    fn first_come_first_served_per_key() {
        let b = Blocked::default();
        let mut l = b.lock();
        let w1 = waiter(&["a", "b"]);
        let w2 = waiter(&["b"]);
        let w3 = waiter(&["a"]);
        let (id1, id2, id3) = (l.queues.register(w1), l.queues.register(w2), l.queues.register(w3));
        assert_eq!(l.queues.first(b"a").map(|(id, _)| id), Some(id1));
        assert_eq!(l.queues.first(b"b").map(|(id, _)| id), Some(id1));
        assert!(l.queues.remove(id1).is_some());
        assert!(l.queues.remove(id1).is_none(), "served once");
        assert_eq!(l.queues.first(b"a").map(|(id, _)| id), Some(id3));
        assert_eq!(l.queues.first(b"b").map(|(id, _)| id), Some(id2));
        l.queues.remove(id2);
        assert!(!l.queues.has(b"b"), "an empty queue goes");
        drop(l);
        assert_eq!(b.len(), 1);
        assert!(b.active());
    }
}
