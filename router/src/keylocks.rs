//! Key locks for this router's writes over keys of several nodes (LMOVE, SMOVE, RENAME, ...
//! across nodes: `cmd::multi`), and node turns for its transactions over several nodes
//! (`backend::spread`).
//!
//! Such a write is optimistic: it watches its keys, reads, and commits in two phases unless a
//! watched key changed meanwhile, then goes again. Clients that move elements round the same
//! keys through one router would otherwise keep invalidating each other's watches: each attempt
//! spans several round trips, and under contention one client could lose every round until its
//! deadline (TRYAGAIN). Here they queue instead, first come first served, so conflicts are left
//! only between routers and with plain writes, and a retry there backs off by a random pause
//! ([`backoff`]).
//!
//! Keys map to a fixed set of stripes; a write takes its keys' stripes in ascending order, so
//! two writes never wait for each other in a circle. A stripe shared by unrelated keys only
//! costs them some queueing.
//!
//! A transaction over several nodes holds each node's whole store gate from its prepare to its
//! commit, and a node hands its gate to whichever prepare asks next after a 5 ms step, giving up
//! at 250 ms (`node/src/twophase.rs`): fifty clients of one router running transactions over
//! the same two nodes would wait there in no order, and some until their deadline. So the
//! router queues its own transactions for the nodes first, first come first served, in a second
//! set of stripes keyed by node address ([`KeyLocks::nodes`]); the node's gate then only sees
//! other routers' transactions and scripts. Key stripes are always taken before node stripes
//! (a write over several nodes commits by a transaction), never the other way round, so the two
//! sets never make a circle either.

use std::time::Duration;

use tokio::sync::{Mutex, MutexGuard};
use tokio::time::Instant;

/// Stripes: enough that unrelated keys rarely share one, few enough to allocate up front.
const STRIPES: usize = 1024;
/// Stripes for node addresses (a cluster has tens of nodes, not thousands).
const NODE_STRIPES: usize = 128;

/// The stripes of one router.
pub struct KeyLocks {
    stripes: Vec<Mutex<()>>,
}

impl Default for KeyLocks {
    fn default() -> Self {
        KeyLocks::with_stripes(STRIPES)
    }
}

impl std::fmt::Debug for KeyLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyLocks").field("stripes", &self.stripes.len()).finish()
    }
}

/// The stripes of `keys`, held until dropped.
pub struct Held<'a> {
    _guards: Vec<MutexGuard<'a, ()>>,
}

impl KeyLocks {
    fn with_stripes(n: usize) -> Self {
        KeyLocks { stripes: (0..n).map(|_| Mutex::new(())).collect() }
    }

    /// The node turns: stripes keyed by node address (see the module doc).
    pub fn nodes() -> Self {
        KeyLocks::with_stripes(NODE_STRIPES)
    }

    /// Takes the stripes of `keys` (in ascending order), waiting until `deadline` at most
    /// (`None`: not all of them came in time; those taken are let go).
    pub async fn lock<K: AsRef<[u8]>>(&self, keys: &[K], deadline: Instant) -> Option<Held<'_>> {
        let n = self.stripes.len();
        let mut at: Vec<usize> = keys.iter().map(|k| stripe(k.as_ref(), n)).collect();
        at.sort_unstable();
        at.dedup();
        let mut guards = Vec::with_capacity(at.len());
        for i in at {
            guards.push(tokio::time::timeout_at(deadline, self.stripes[i].lock()).await.ok()?);
        }
        Some(Held { _guards: guards })
    }
}

/// A key's stripe: by its slot (keys of one `{hashtag}` share a stripe, as they share a node).
fn stripe(key: &[u8], stripes: usize) -> usize {
    usize::from(shoal_wire::key_slot(key)) % stripes
}

/// The pause before attempt `round` + 1 of a write whose watched keys changed: random, up to
/// 1, 2, 4, ... 32 ms as the rounds go, so that writers of another router that keep meeting
/// stop meeting in step.
pub fn backoff(round: u32) -> Duration {
    let most = 1u64 << round.min(5);
    Duration::from_micros(fastrand::u64(0..=most * 1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writers_over_a_shared_key_queue_and_others_pass() {
        let locks = KeyLocks::default();
        let soon = || Instant::now() + Duration::from_millis(50);
        let held = locks.lock(&[b"ring-a", b"ring-b"], soon()).await.expect("free stripes");
        // A key in common waits, and gives up at its deadline.
        assert!(locks.lock(&[b"ring-b", b"ring-c"], soon()).await.is_none());
        // Keys on other stripes pass (these two are not on ring-a's or ring-b's).
        let (a, b) = (stripe(b"ring-a", STRIPES), stripe(b"ring-b", STRIPES));
        let other: Vec<String> = (0..100)
            .map(|i| format!("other-{i}"))
            .filter(|k| ![a, b].contains(&stripe(k.as_bytes(), STRIPES)))
            .collect();
        assert!(locks.lock(&other[..2], soon()).await.is_some());
        drop(held);
        assert!(locks.lock(&[b"ring-b", b"ring-c"], soon()).await.is_some());
    }

    #[tokio::test]
    async fn keys_given_in_any_order_never_wait_in_a_circle() {
        let locks = std::sync::Arc::new(KeyLocks::default());
        let mut tasks = Vec::new();
        for w in 0..4usize {
            let locks = locks.clone();
            tasks.push(tokio::spawn(async move {
                let keys = [format!("k{}", w % 3), format!("k{}", (w + 1) % 3)];
                let keys = if w % 2 == 0 { keys } else { [keys[1].clone(), keys[0].clone()] };
                for _ in 0..200 {
                    let deadline = Instant::now() + Duration::from_secs(5);
                    let held = locks.lock(&keys, deadline).await.expect("no circle: every lock comes");
                    tokio::task::yield_now().await;
                    drop(held);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    }

    #[test]
    fn backoff_grows_to_its_cap() {
        for round in 0..10 {
            let most = Duration::from_millis(1 << round.min(5));
            assert!((0..50).map(|_| backoff(round)).all(|d| d <= most));
        }
        assert!((0..200).map(|_| backoff(8)).any(|d| d > Duration::from_millis(16)), "the cap is reached");
    }
}
