//! The node's function libraries as the store keeps them: one payload in FUNCTION DUMP's format
//! (its meaning is the script layer's, `crate::script::functions`) and a generation that moves
//! with every change. They sit in the store so that whatever copies the store copies them too:
//! snapshots (`persistence`), slot exports to a node taking slots over (`export`, `migrate`) and
//! a primary's feed to its replicas (`replication`).

use bytes::Bytes;
use parking_lot::{Mutex, MutexGuard};

/// The payload (empty: no libraries) and its generation.
#[derive(Debug, Default, Clone)]
pub struct Payload {
    pub generation: u64,
    pub bytes: Bytes,
}

#[derive(Debug, Default)]
pub struct Libraries {
    inner: Mutex<Payload>,
}

impl Libraries {
    /// The payload now.
    pub fn get(&self) -> Payload {
        self.inner.lock().clone()
    }

    /// The payload now, unless a writer holds it (`None`: for loops that must not wait).
    pub fn try_get(&self) -> Option<Payload> {
        self.inner.try_lock().map(|p| p.clone())
    }

    /// The payload held for a read-modify-write (other writers wait).
    pub fn lock(&self) -> MutexGuard<'_, Payload> {
        self.inner.lock()
    }

    /// Puts `bytes` in place; returns the new generation.
    pub fn set(&self, bytes: Bytes) -> u64 {
        let mut p = self.inner.lock();
        p.bytes = bytes;
        p.generation += 1;
        p.generation
    }
}
