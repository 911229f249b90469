//! RESP3 `CLIENT TRACKING` for the router's clients (Redis's server-assisted client-side
//! caching), on top of the nodes' per-router tracking (node/src/store/tracking.rs).
//!
//! - The router keeps one table: key → the clients that read it since their last invalidation
//!   (default mode), bounded by `tracking-table-max-keys` like Redis's (full: the oldest keys are
//!   invalidated to their clients and forgotten).
//! - A tracking client's read of a key the table does not hold yet also registers the key on its
//!   node for this router: a `Get` with the router's tracking token (`nil_if_not_string`, so any
//!   type registers), queued on the node's batched stream *before* the command's own op, so the
//!   node registers before it reads (ops of one stream are applied in order). One registration
//!   serves every client of the router; the near cache uses the same token.
//! - The node's invalidation (any change of the key, on the router's `Subscribe` stream) is
//!   turned into one `invalidate` push per client holding the key, and the pairs are forgotten.
//!   A write through this router invalidates before it is sent (so the writer's own client sees
//!   the push before the reply, as in Redis), skipping the writer if it asked for NOLOOP.
//! - Anything that loses invalidations (a node stream that breaks, a node's invalidate-all, a
//!   topology change that moves slots, FLUSHALL) sends every tracking client Redis's flush-all
//!   invalidation (a null key list) and empties the table.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;

use super::subscriber::{Kind, Limits, Message, Subscriber};

/// Redis's default `tracking-table-max-keys`.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// One client's CLIENT TRACKING options.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// REDIRECT: the client id invalidations go to (0: this client).
    pub redirect: u64,
    pub bcast: bool,
    pub prefixes: Vec<Bytes>,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
}

#[derive(Debug)]
struct Client {
    options: Options,
    /// Where its own pushes go (RESP3; also a redirect target's queue is looked up by id).
    own: Arc<Subscriber>,
    /// The REDIRECT target's connection while it lasts (a target that never opened a push
    /// queue is not gone for that).
    target: Option<std::sync::Weak<crate::clients::ClientHandle>>,
}

#[derive(Debug, Default)]
struct Table {
    clients: HashMap<u64, Client>,
    /// Default mode: key → clients that hold it.
    keys: HashMap<Bytes, Vec<u64>>,
    /// Keys in the order they entered the table (eviction order; stale names are skipped).
    order: VecDeque<Bytes>,
    /// BCAST clients with NOLOOP that wrote a key through this router: the node's invalidation
    /// of it skips them once (BCAST clients hear only the nodes' invalidations, one per change).
    skip: HashMap<Bytes, Vec<u64>>,
}

/// At most this many keys wait in `skip` (a write whose invalidation never comes, e.g. one that
/// failed, would otherwise stay); past it they are dropped (the client then hears of its own
/// write, which is safe).
const SKIP_MAX: usize = 4096;

/// Who a push for a client goes to: its own connection, or the redirect target's (found
/// among the clients with a push queue: [`ClientTracking::queues`]).
#[derive(Debug)]
pub struct ClientTracking {
    table: Mutex<Table>,
    /// Some client tracks (the write hook's cost otherwise is this load).
    active: AtomicBool,
    pub max_keys: AtomicUsize,
    /// Every connection that has a push queue, by client id (redirect targets).
    queues: Mutex<HashMap<u64, std::sync::Weak<Subscriber>>>,
    limits: Arc<Limits>,
    /// Invalidation pushes sent (INFO / tests).
    pub sent: AtomicUsize,
}

impl ClientTracking {
    pub fn new(limits: Arc<Limits>) -> ClientTracking {
        ClientTracking {
            table: Mutex::default(),
            active: AtomicBool::new(false),
            max_keys: AtomicUsize::new(DEFAULT_MAX_KEYS),
            queues: Mutex::default(),
            limits,
            sent: AtomicUsize::new(0),
        }
    }

    /// `tracking-table-max-keys` (0: no limit, as in Redis). A smaller bound applies at the
    /// next read that adds a key.
    pub fn set_max_keys(&self, max: u64) {
        self.max_keys.store(if max == 0 { usize::MAX } else { max as usize }, Ordering::Relaxed);
    }

    pub fn max_keys(&self) -> u64 {
        match self.max_keys.load(Ordering::Relaxed) {
            usize::MAX => 0,
            n => n as u64,
        }
    }

    #[inline]
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// A connection's push queue exists (a REDIRECT target may be looked up by its id).
    pub fn register_queue(&self, id: u64, sub: &Arc<Subscriber>) {
        let mut q = self.queues.lock();
        q.retain(|_, w| w.strong_count() > 0);
        q.insert(id, Arc::downgrade(sub));
    }

    /// Client `id` tracks with `options` from now on (replacing earlier options, keeping the
    /// keys it holds).
    pub fn enable(
        &self,
        id: u64,
        options: Options,
        own: Arc<Subscriber>,
        target: Option<std::sync::Weak<crate::clients::ClientHandle>>,
    ) {
        let mut t = self.table.lock();
        t.clients.insert(id, Client { options, own, target });
        self.active.store(true, Ordering::Relaxed);
    }

    /// Client `id` stops tracking (CLIENT TRACKING OFF, or it disconnected).
    pub fn disable(&self, id: u64) {
        let mut t = self.table.lock();
        if t.clients.remove(&id).is_none() {
            return;
        }
        t.skip.retain(|_, ids| {
            ids.retain(|c| *c != id);
            !ids.is_empty()
        });
        t.keys.retain(|_, holders| {
            holders.retain(|c| *c != id);
            !holders.is_empty()
        });
        self.active.store(!t.clients.is_empty(), Ordering::Relaxed);
    }

    /// Client `id` reads `keys`: remembers the pairs; returns the keys that were in nobody's
    /// hands (the caller registers them on their nodes before the read is sent).
    pub fn read(&self, id: u64, keys: &[Bytes]) -> Vec<Bytes> {
        let mut fresh = Vec::new();
        let mut evicted: Vec<(Bytes, Vec<u64>)> = Vec::new();
        let mut t = self.table.lock();
        if t.clients.get(&id).is_none_or(|c| c.options.bcast) {
            return fresh;
        }
        let max = self.max_keys.load(Ordering::Relaxed).max(1);
        for key in keys {
            if let Some(holders) = t.keys.get_mut(key) {
                if !holders.contains(&id) {
                    holders.push(id);
                }
                continue;
            }
            // Full: invalidate the oldest keys to their holders (as Redis does), making room.
            while t.keys.len() >= max {
                let Some(victim) = t.order.pop_front() else { break };
                if let Some(holders) = t.keys.remove(&victim) {
                    evicted.push((victim, holders));
                }
            }
            t.keys.insert(key.clone(), vec![id]);
            t.order.push_back(key.clone());
            fresh.push(key.clone());
        }
        // Keys invalidated leave stale names in `order`: compact before they pile up.
        if t.order.len() > 2 * t.keys.len() + 1024 {
            let Table { order, keys, .. } = &mut *t;
            order.retain(|k| keys.contains_key(k));
        }
        for (key, holders) in evicted {
            self.send_key(&t, &key, &holders, 0);
        }
        fresh
    }

    /// `key` changed: its holders (and BCAST clients whose prefixes match) get one push each,
    /// except `writer` if it tracks with NOLOOP (0: a node's invalidation, nobody is skipped).
    pub fn invalidate(&self, key: &[u8], writer: u64) {
        if !self.active() {
            return;
        }
        let mut t = self.table.lock();
        let holders = t.keys.remove(key).unwrap_or_default();
        self.send_key(&t, key, &holders, writer);
        let matches = |c: &Client| {
            c.options.bcast
                && (c.options.prefixes.is_empty() || c.options.prefixes.iter().any(|p| key.starts_with(p)))
        };
        if writer != 0 {
            // BCAST clients hear of this write from the node (it sends every change of a
            // registered prefix): only NOLOOP's "not my own write" is noted here.
            if t.clients.get(&writer).is_some_and(|c| c.options.noloop && matches(c)) {
                if t.skip.len() >= SKIP_MAX {
                    t.skip.clear();
                }
                t.skip.entry(Bytes::copy_from_slice(key)).or_default().push(writer);
            }
            return;
        }
        let skipped = t.skip.remove(key).unwrap_or_default();
        let bcast: Vec<u64> = t
            .clients
            .iter()
            .filter(|(id, c)| matches(c) && !skipped.contains(id))
            .map(|(id, _)| *id)
            .collect();
        self.send_key(&t, key, &bcast, 0);
    }

    /// The prefixes the nodes must send every change of for this router's BCAST clients (an
    /// empty prefix: every key); `None` when no client is in BCAST mode.
    pub fn bcast_prefixes(&self) -> Option<Vec<Bytes>> {
        let t = self.table.lock();
        let mut out: Vec<Bytes> = Vec::new();
        let mut any = false;
        for c in t.clients.values().filter(|c| c.options.bcast) {
            any = true;
            if c.options.prefixes.is_empty() {
                return Some(vec![Bytes::new()]);
            }
            out.extend(c.options.prefixes.iter().cloned());
        }
        out.sort();
        out.dedup();
        any.then_some(out)
    }

    /// Everything may have changed: every tracking client gets a flush-all invalidation (a
    /// null key list, as Redis sends on FLUSHALL) and the table is emptied.
    pub fn flush_all(&self) {
        if !self.active() {
            return;
        }
        let mut t = self.table.lock();
        t.keys.clear();
        t.order.clear();
        t.skip.clear();
        let ids: Vec<u64> = t.clients.keys().copied().collect();
        for id in ids {
            self.push(&t, id, Message { kind: Kind::InvalidateAll, ..blank() });
        }
    }

    fn send_key(&self, t: &Table, key: &[u8], holders: &[u64], writer: u64) {
        for &id in holders {
            if id == writer && t.clients.get(&id).is_some_and(|c| c.options.noloop) {
                continue;
            }
            self.push(
                t,
                id,
                Message { kind: Kind::Invalidate, payload: Bytes::copy_from_slice(key), ..blank() },
            );
        }
    }

    fn push(&self, t: &Table, id: u64, m: Message) {
        let Some(c) = t.clients.get(&id) else { return };
        let redirected = c.options.redirect != 0;
        let target = if redirected {
            match self.queues.lock().get(&c.options.redirect).and_then(|w| w.upgrade()) {
                Some(s) => s,
                // The redirect target went away: as Redis, the client is flagged `R`, the
                // invalidation is dropped, and a RESP3 client is told on its own connection.
                None if c.target.as_ref().is_some_and(|t| t.strong_count() > 0) => return,
                None => {
                    c.own.client.mark_redirect_broken();
                    if c.own.client.is_resp3() {
                        let id = Bytes::from(c.options.redirect.to_string());
                        c.own.push_all(
                            &[Message { kind: Kind::RedirBroken, payload: id, ..blank() }],
                            &self.limits,
                        );
                    }
                    return;
                }
            }
        } else {
            c.own.clone()
        };
        // Redis's `sendTrackingMessage`: RESP3 gets a push; RESP2 only as a pub/sub message to a
        // redirect target in pub/sub mode (anything else would corrupt its reply stream).
        let deliverable = target.client.is_resp3() || (redirected && target.client.is_pubsub());
        if !deliverable {
            return;
        }
        target.push_all(std::slice::from_ref(&m), &self.limits);
        self.sent.fetch_add(1, Ordering::Relaxed);
    }

    /// Keys held now (tests, INFO).
    pub fn len(&self) -> usize {
        self.table.lock().keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn blank() -> Message {
    Message { kind: Kind::Invalidate, pattern: Bytes::new(), channel: Bytes::new(), payload: Bytes::new() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::from(s.to_string())
    }

    fn client(id: u64) -> Arc<Subscriber> {
        let handle = crate::clients::ClientHandle::new(id, "p".into(), "l".into(), false);
        handle.set_protocol(crate::resp::Protocol::Resp3);
        Subscriber::new(Arc::new(handle))
    }

    #[test]
    fn a_resp2_client_hears_nothing_without_a_redirect_in_pub_sub_mode() {
        let t = ClientTracking::new(Arc::new(Limits::default()));
        let plain =
            Subscriber::new(Arc::new(crate::clients::ClientHandle::new(1, "p".into(), "l".into(), false)));
        t.enable(1, Options::default(), plain.clone(), None);
        t.read(1, &[b("k")]);
        t.invalidate(b"k", 0);
        assert!(plain.take(1 << 20, &Limits::default()).is_empty(), "RESP2 has no pushes");
    }

    #[test]
    fn one_push_per_read_noloop_and_the_bound() {
        let t = ClientTracking::new(Arc::new(Limits::default()));
        let (a, c) = (client(1), client(2));
        t.enable(1, Options::default(), a.clone(), None);
        t.enable(2, Options { noloop: true, ..Default::default() }, c.clone(), None);
        assert_eq!(t.read(1, &[b("k")]), vec![b("k")]);
        assert!(t.read(2, &[b("k")]).is_empty(), "already registered for the router");
        t.invalidate(b"k", 2);
        let limits = Limits::default();
        assert_eq!(a.take(1 << 20, &limits).len(), 1);
        assert!(c.take(1 << 20, &limits).is_empty(), "NOLOOP: not for its own write");
        t.invalidate(b"k", 0);
        assert!(a.take(1 << 20, &limits).is_empty(), "forgotten after one invalidation");
        t.max_keys.store(2, Ordering::Relaxed);
        t.read(1, &[b("x"), b("y"), b("z")]);
        assert_eq!(t.len(), 2);
        let evicted = a.take(1 << 20, &limits);
        assert_eq!(evicted.len(), 1);
        assert_eq!(evicted[0].payload, b("x"));
        t.flush_all();
        assert_eq!(a.take(1 << 20, &limits)[0].kind, Kind::InvalidateAll);
        t.disable(1);
        t.disable(2);
        assert!(!t.active());
    }
}
