//! The node's pub/sub registry: which router is subscribed to what, and the fan-out of messages
//! to them. Not data (nothing of it is stored, snapshotted or moved with slots): it lives beside
//! the store, which only holds a handle to it (`store::events::Sink`) for its keyspace
//! notifications and for PUBLISH ops.
//!
//! Each router keeps one `Subscribe` stream to every node ([`stream`]) and registers on it every
//! channel, pattern and shard channel some client of it holds, with its count of such clients.
//! A message published here (a PUBLISH op from any router, or a keyspace notification raised by
//! this node's store) is queued for each router with a matching registration, one delivery per
//! matching registration (the router fans it out to its clients), channel subscribers first,
//! then pattern matches, as Redis sends them. The count a PUBLISH answers is Redis's: over every
//! router, the channel's subscribers plus one per client's matching pattern subscription.
//!
//! A router's queue ([`Outbox`]) is bounded in bytes: a router that stops reading has its stream
//! closed once it passes [`ROUTER_BUFFER_LIMIT`] (never grown without bound); the router
//! reconnects and registers again, and what was queued for it is lost.
//!
//! A tracking router's invalidations ride the same queue, but never close it: past
//! [`TRACKING_BUFFER_LIMIT`] bytes of them queued, the next one becomes a single
//! `invalidate_all`, and until the router has taken that, further invalidations are covered by
//! it and not queued. A router slow to read tracking traffic loses its cache, not the pub/sub
//! messages its subscribers wait for.
//!
//! The same streams carry the node's word on MONITOR (`Delivery.monitors`), CLIENT LIST/KILL
//! questions ([`clients`]) and busy scripts (`busy.rs`: `Delivery.busy`).

mod busy;
pub mod clients;
pub mod stream;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use bytes::Bytes;
use parking_lot::RwLock;
use shoal_wire::glob::glob_match;
use shoal_wire::proto::{
    ClientsQuery, ClientsReply, Delivery, Frame, Frames, PubSubKind, PubSubQuery, SubscribeRequest, frame,
    pub_sub_query::What,
};
use tokio::sync::mpsc;

use crate::store::events::Sink;

/// What one router may have queued and not read before its stream is closed.
pub const ROUTER_BUFFER_LIMIT: usize = 64 << 20;
/// What one router may have queued of invalidations before they coalesce into one
/// `invalidate_all` (a share of [`ROUTER_BUFFER_LIMIT`], so that they alone never close it).
pub const TRACKING_BUFFER_LIMIT: usize = ROUTER_BUFFER_LIMIT / 4;
/// What one router may have queued of MONITOR lines; past it further lines are dropped (a
/// share of [`ROUTER_BUFFER_LIMIT`], so that they alone never close the stream).
pub const MONITOR_BUFFER_LIMIT: usize = ROUTER_BUFFER_LIMIT / 4;

/// `Delivery.monitors`: some router monitors / none does any more.
const MONITORS_ON: u32 = 1;
const MONITORS_OFF: u32 = 2;

/// Per name: each router registered on it, with its count of subscribed clients.
type Holders = Vec<(u64, u32)>;

#[derive(Debug, Default)]
struct Registry {
    routers: HashMap<u64, Arc<Outbox>>,
    channels: HashMap<Bytes, Holders>,
    patterns: HashMap<Bytes, Holders>,
    shard: HashMap<Bytes, Holders>,
}

impl Registry {
    fn map(&mut self, kind: PubSubKind) -> &mut HashMap<Bytes, Holders> {
        match kind {
            PubSubKind::PubsubChannel => &mut self.channels,
            PubSubKind::PubsubPattern => &mut self.patterns,
            PubSubKind::PubsubShard => &mut self.shard,
        }
    }

    /// Drops every registration of `router`.
    fn forget(&mut self, router: u64) {
        for map in [&mut self.channels, &mut self.patterns, &mut self.shard] {
            map.retain(|_, holders| {
                holders.retain(|(r, _)| *r != router);
                !holders.is_empty()
            });
        }
    }
}

/// What a router's stream carries: deliveries, or the order to end with an error.
#[derive(Debug)]
pub enum Out {
    Delivery(Delivery),
    /// The deliveries of one publish to one router (a message and its pattern matches), queued
    /// as one so that a concurrent publish from another stream cannot come between them.
    Group(Vec<Delivery>),
    /// The router fell too far behind: close its stream.
    Overflow,
}

/// One router's queue of deliveries, bounded in bytes.
#[derive(Debug)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Out>,
    bytes: AtomicUsize,
    closed: AtomicBool,
    /// The router's tracking token once it asked for near-cache invalidations here (0: none):
    /// the stream's end disables its tracking.
    pub tracking_token: AtomicU64,
    /// The router's identity as its stream gave it (`SubscribeRequest.router`; 0: not given).
    pub router: AtomicU64,
    /// Some client of the router monitors (MONITOR): other routers' lines are relayed to it.
    monitoring: AtomicBool,
    /// The router was last told that some other router monitors (`Delivery.monitors`).
    told_monitors: AtomicBool,
    /// Bytes of MONITOR lines queued and not yet taken (bounded apart: see
    /// [`MONITOR_BUFFER_LIMIT`]).
    monitor_bytes: AtomicUsize,
    /// Bytes of invalidations queued and not yet taken.
    tracking_bytes: AtomicUsize,
    /// An `invalidate_all` is queued and not yet taken: it covers every change made meanwhile
    /// (the router drops everything from this node when it gets there and refuses replies to
    /// reads sent before), so invalidations are not queued behind it.
    flush_queued: AtomicBool,
}

impl Outbox {
    fn push(&self, d: Delivery) {
        self.send(delivery_size(&d), Out::Delivery(d));
    }

    fn push_group(&self, mut group: Vec<Delivery>) {
        if group.len() == 1 {
            return self.push(group.pop().expect("one"));
        }
        self.send(group.iter().map(delivery_size).sum(), Out::Group(group));
    }

    fn send(&self, size: usize, out: Out) {
        if self.closed.load(Ordering::Relaxed) {
            return;
        }
        if self.bytes.fetch_add(size, Ordering::Relaxed) + size > ROUTER_BUFFER_LIMIT {
            self.closed.store(true, Ordering::Relaxed);
            let _ = self.tx.send(Out::Overflow);
            return;
        }
        let _ = self.tx.send(out);
    }

    /// Tells the router the node serves topology `version` now.
    pub fn push_version(&self, version: u64) {
        self.push(Delivery { topology_version: version, ..Default::default() });
    }

    /// Answers a router's ping, behind everything queued so far (see `SubscribeRequest.ping`).
    pub fn push_pong(&self, ping: u64) {
        self.push(Delivery { pong: ping, ..Default::default() });
    }

    /// A delivery left the queue (handed to the stream).
    pub(crate) fn taken(&self, d: &Delivery) {
        self.bytes.fetch_sub(delivery_size(d), Ordering::Relaxed);
        if !d.invalidate.is_empty() {
            self.tracking_bytes.fetch_sub(invalidation_size(&d.invalidate), Ordering::Relaxed);
        }
        if d.invalidate_all {
            self.flush_queued.store(false, Ordering::SeqCst);
        }
        if !d.monitor_lines.is_empty() {
            self.monitor_bytes.fetch_sub(lines_size(&d.monitor_lines), Ordering::Relaxed);
        }
    }

    /// Queues MONITOR lines, or drops them (true) when the router already has
    /// [`MONITOR_BUFFER_LIMIT`] of them queued: a monitor's traffic never closes the stream
    /// other clients' messages ride.
    fn push_lines(&self, lines: &[Bytes]) -> bool {
        let n = lines_size(lines);
        if self.monitor_bytes.fetch_add(n, Ordering::Relaxed) + n > MONITOR_BUFFER_LIMIT {
            self.monitor_bytes.fetch_sub(n, Ordering::Relaxed);
            return true;
        }
        self.push(Delivery { monitor_lines: lines.to_vec(), ..Default::default() });
        false
    }
}

fn lines_size(lines: &[Bytes]) -> usize {
    lines.iter().map(|l| l.len() + 4).sum()
}

fn delivery_size(d: &Delivery) -> usize {
    let lines = lines_size(&d.monitor_lines);
    d.channel.len() + d.pattern.len() + d.payload.len() + invalidation_size(&d.invalidate) + lines + 16
}

fn invalidation_size(keys: &[Bytes]) -> usize {
    keys.iter().map(|k| k.len() + 4).sum()
}

/// A tracking router's invalidations ride its pub/sub queue, in order with everything else.
impl crate::store::tracking::Target for Outbox {
    fn invalidate(&self, keys: Vec<Bytes>) {
        if self.flush_queued.load(Ordering::SeqCst) {
            return;
        }
        let size = invalidation_size(&keys);
        if self.tracking_bytes.fetch_add(size, Ordering::Relaxed) + size > TRACKING_BUFFER_LIMIT {
            self.tracking_bytes.fetch_sub(size, Ordering::Relaxed);
            return self.invalidate_all();
        }
        self.push(Delivery { invalidate: keys, ..Default::default() });
    }

    fn invalidate_all(&self) {
        if !self.flush_queued.swap(true, Ordering::SeqCst) {
            self.push(Delivery { invalidate_all: true, ..Default::default() });
        }
    }
}

/// The newest stream of each router (a router reconnecting may briefly hold two) among those
/// `keep` accepts, but `origin`'s (0: none left out); streams that never named their router
/// count as routers of their own.
fn newest_per_router_streams(
    reg: &Registry,
    origin: u64,
    keep: impl Fn(u64, &Outbox) -> bool,
) -> Vec<(u64, Arc<Outbox>)> {
    let mut newest: HashMap<u64, (u64, Arc<Outbox>)> = HashMap::new();
    for (&stream, outbox) in &reg.routers {
        let router = outbox.router.load(Ordering::Relaxed);
        if (router != 0 && router == origin) || !keep(stream, outbox) {
            continue;
        }
        let by = if router == 0 { u64::MAX - stream } else { router };
        match newest.get(&by) {
            Some((newer, _)) if *newer > stream => {}
            _ => {
                newest.insert(by, (stream, outbox.clone()));
            }
        }
    }
    newest.into_values().collect()
}

fn newest_per_router(reg: &Registry, origin: u64, keep: impl Fn(u64, &Outbox) -> bool) -> Vec<Arc<Outbox>> {
    newest_per_router_streams(reg, origin, keep).into_iter().map(|(_, o)| o).collect()
}

/// The registry (one per node).
#[derive(Debug, Default)]
pub struct PubSub {
    registry: RwLock<Registry>,
    next_router: AtomicU64,
    /// Messages published here (PUBLISH ops and keyspace notifications), for /metrics.
    pub published: AtomicU64,
    /// Deliveries queued for routers.
    pub delivered: AtomicU64,
    /// Router streams closed because the router fell behind.
    pub overflows: AtomicU64,
    /// CLIENT LIST/KILL questions waiting for the routers' answers.
    pub clients: clients::Gathers,
    /// Streams whose router has a monitoring client (MONITOR).
    monitoring: AtomicUsize,
    /// MONITOR lines dropped for routers with too many queued, for /metrics.
    pub monitor_dropped: AtomicU64,
    /// What every router was last told of busy scripts here (`Delivery.busy`; 0: nothing yet,
    /// which means none).
    busy: std::sync::atomic::AtomicU32,
}

impl PubSub {
    /// A new router stream: its id and the receiving end of its queue.
    pub fn attach(&self) -> (u64, Arc<Outbox>, mpsc::UnboundedReceiver<Out>) {
        let id = self.next_router.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = mpsc::unbounded_channel();
        let outbox = Arc::new(Outbox {
            tx,
            bytes: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            tracking_token: AtomicU64::new(0),
            router: AtomicU64::new(0),
            monitoring: AtomicBool::new(false),
            told_monitors: AtomicBool::new(false),
            monitor_bytes: AtomicUsize::new(0),
            tracking_bytes: AtomicUsize::new(0),
            flush_queued: AtomicBool::new(false),
        });
        let mut reg = self.registry.write();
        reg.routers.insert(id, outbox.clone());
        self.tell_monitors(&reg);
        self.tell_busy(&outbox);
        (id, outbox, rx)
    }

    /// The router's stream ended: forget it and everything it registered.
    pub fn detach(&self, router: u64) {
        let mut reg = self.registry.write();
        if let Some(outbox) = reg.routers.remove(&router) {
            reg.forget(router);
            if outbox.monitoring.swap(false, Ordering::Relaxed) {
                self.monitoring.fetch_sub(1, Ordering::Relaxed);
                self.tell_monitors(&reg);
            }
        }
        drop(reg);
        self.clients.gone(router);
    }

    /// MONITOR across routers: stream `stream`'s router has a monitoring client now (or no
    /// longer). Every router is told whether some *other* router monitors (`Delivery.monitors`);
    /// while one does, it sends its lines to one node, which relays them
    /// ([`PubSub::monitor_lines`]).
    pub fn set_monitoring(&self, stream: u64, on: bool) {
        let reg = self.registry.write();
        let Some(outbox) = reg.routers.get(&stream) else { return };
        if outbox.monitoring.swap(on, Ordering::Relaxed) != on {
            if on {
                self.monitoring.fetch_add(1, Ordering::Relaxed);
            } else {
                self.monitoring.fetch_sub(1, Ordering::Relaxed);
            }
            self.tell_monitors(&reg);
        }
    }

    /// Tells each router whose view changed whether some other router monitors (called under
    /// the registry's write lock, after every change of who monitors or who is attached).
    fn tell_monitors(&self, reg: &Registry) {
        let total = self.monitoring.load(Ordering::Relaxed);
        for outbox in reg.routers.values() {
            let others = total > usize::from(outbox.monitoring.load(Ordering::Relaxed));
            if outbox.told_monitors.swap(others, Ordering::Relaxed) != others {
                let monitors = if others { MONITORS_ON } else { MONITORS_OFF };
                outbox.push(Delivery { monitors, ..Default::default() });
            }
        }
    }

    /// Whether some router monitors (a script's calls are shown to them as `[0 lua]` lines).
    pub fn monitored(&self) -> bool {
        self.monitoring.load(Ordering::Relaxed) > 0
    }

    /// MONITOR lines from stream `from`'s router (or, `from` 0, of this node's scripts): queued
    /// for every other monitoring router, on its newest stream (a router reconnecting may
    /// briefly hold two), and dropped for one that already has too many queued.
    pub fn monitor_lines(&self, from: u64, lines: Vec<Bytes>) {
        if lines.is_empty() {
            return;
        }
        let reg = self.registry.read();
        let origin = reg.routers.get(&from).map_or(0, |o| o.router.load(Ordering::Relaxed));
        let monitoring = |stream: u64, o: &Outbox| stream != from && o.monitoring.load(Ordering::Relaxed);
        for outbox in newest_per_router(&reg, origin, monitoring) {
            if outbox.push_lines(&lines) {
                self.monitor_dropped.fetch_add(lines.len() as u64, Ordering::Relaxed);
            }
        }
    }

    /// CLIENT LIST/KILL over every router but the one asking (see [`clients`]): asks the newest
    /// stream of each and gathers the answers for at most the question's wait.
    pub async fn ask_clients(&self, mut q: ClientsQuery) -> ClientsReply {
        let wait = clients::wait_of(q.wait_ms);
        // Opened under the registry's lock: a stream that ends after it is struck off by
        // `detach`, never waited for.
        let (question, done) = {
            let reg = self.registry.read();
            let asked = newest_per_router_streams(&reg, q.origin, |_, _| true);
            let (id, done) = self.clients.open(asked.iter().map(|(stream, _)| *stream));
            q.id = id;
            for (_, outbox) in &asked {
                outbox.push(Delivery { clients: Some(q.clone()), ..Default::default() });
            }
            (clients::Question::new(&self.clients, id), done)
        };
        let _ = tokio::time::timeout(wait, done).await;
        question.close()
    }

    /// Routers with a stream open now.
    pub fn routers(&self) -> usize {
        self.registry.read().routers.len()
    }

    /// Distinct (channels, patterns, shard channels) some router is subscribed to.
    pub fn counts(&self) -> (usize, usize, usize) {
        let reg = self.registry.read();
        (reg.channels.len(), reg.patterns.len(), reg.shard.len())
    }

    /// Applies a router's subscription changes, then acks them if asked (the ack follows every
    /// delivery queued before the changes took effect, and precedes every one after).
    pub fn apply(&self, router: u64, req: SubscribeRequest) {
        let mut reg = self.registry.write();
        let Some(outbox) = reg.routers.get(&router).cloned() else { return };
        if req.replace {
            reg.forget(router);
        }
        for change in req.changes {
            let map = reg.map(change.kind());
            if change.clients == 0 {
                if let Some(holders) = map.get_mut(&change.name) {
                    holders.retain(|(r, _)| *r != router);
                    if holders.is_empty() {
                        map.remove(&change.name);
                    }
                }
                continue;
            }
            let holders = map.entry(change.name).or_default();
            match holders.iter_mut().find(|(r, _)| *r == router) {
                Some(h) => h.1 = change.clients,
                None => holders.push((router, change.clients)),
            }
        }
        if req.ack != 0 {
            outbox.push(Delivery { ack: req.ack, ..Default::default() });
        }
    }

    /// Delivers `message` to every router subscribed to `channel` or a pattern matching it (to
    /// the shard channel's subscribers with `sharded`); returns Redis's receiver count.
    pub fn publish(&self, channel: &[u8], message: &[u8], sharded: bool) -> u64 {
        self.published.fetch_add(1, Ordering::Relaxed);
        let reg = self.registry.read();
        let direct = if sharded { &reg.shard } else { &reg.channels };
        let kind = if sharded { PubSubKind::PubsubShard } else { PubSubKind::PubsubChannel };
        let holders = direct.get(channel);
        let patterns: Vec<(&Bytes, &Holders)> = if sharded {
            Vec::new()
        } else {
            reg.patterns.iter().filter(|(p, _)| glob_match(p, channel)).collect()
        };
        if holders.is_none() && patterns.is_empty() {
            return 0;
        }
        // Copied once, shared by every router's delivery.
        let (channel, payload) = (Bytes::copy_from_slice(channel), Bytes::copy_from_slice(message));
        let delivery = |kind: PubSubKind, pattern: &Bytes| Delivery {
            kind: kind as i32,
            pattern: pattern.clone(),
            channel: channel.clone(),
            payload: payload.clone(),
            ..Default::default()
        };
        let none = Bytes::new();
        let mut receivers = 0u64;
        let mut deliveries = 0u64;
        if patterns.is_empty() {
            // The common case: one delivery per subscribed router.
            for &(router, clients) in holders.into_iter().flatten() {
                receivers += u64::from(clients);
                if let Some(outbox) = reg.routers.get(&router) {
                    deliveries += 1;
                    outbox.push(delivery(kind, &none));
                }
            }
        } else {
            // Each router's deliveries (the message first, then its pattern matches) go as one.
            let mut per_router: Vec<(u64, Vec<Delivery>)> = Vec::new();
            let mut add = |router: u64, d: Delivery| match per_router.iter_mut().find(|(r, _)| *r == router) {
                Some((_, list)) => list.push(d),
                None => per_router.push((router, vec![d])),
            };
            for &(router, clients) in holders.into_iter().flatten() {
                receivers += u64::from(clients);
                add(router, delivery(kind, &none));
            }
            for (pattern, holders) in patterns {
                for &(router, clients) in holders {
                    receivers += u64::from(clients);
                    add(router, delivery(PubSubKind::PubsubPattern, pattern));
                }
            }
            for (router, group) in per_router {
                if let Some(outbox) = reg.routers.get(&router) {
                    deliveries += group.len() as u64;
                    outbox.push_group(group);
                }
            }
        }
        self.delivered.fetch_add(deliveries, Ordering::Relaxed);
        receivers
    }

    /// PUBSUB CHANNELS, NUMSUB, NUMPAT, SHARDCHANNELS, SHARDNUMSUB over every router's
    /// registrations, as the `Frame` Redis's reply is made of.
    pub fn query(&self, q: &PubSubQuery) -> Frame {
        let reg = self.registry.read();
        let bulk = |b: &Bytes| Frame { kind: Some(frame::Kind::Bulk(b.clone())) };
        let int = |n: u64| Frame { kind: Some(frame::Kind::Int(n as i64)) };
        let array = |items: Vec<Frame>| Frame { kind: Some(frame::Kind::Array(Frames { items })) };
        let total =
            |holders: Option<&Holders>| holders.map_or(0, |h| h.iter().map(|(_, n)| u64::from(*n)).sum());
        match q.what() {
            What::Channels | What::Shardchannels => {
                let map = if q.what() == What::Channels { &reg.channels } else { &reg.shard };
                let names = map.keys().filter(|name| !q.has_pattern || glob_match(&q.pattern, name));
                array(names.map(bulk).collect())
            }
            What::Numsub | What::Shardnumsub => {
                let map = if q.what() == What::Numsub { &reg.channels } else { &reg.shard };
                let mut items = Vec::with_capacity(q.channels.len() * 2);
                for name in &q.channels {
                    items.push(bulk(name));
                    items.push(int(total(map.get(name))));
                }
                array(items)
            }
            // Redis 7 counts unique patterns, not subscriptions.
            What::Numpat => int(reg.patterns.len() as u64),
        }
    }
}

impl Sink for PubSub {
    fn publish(&self, channel: &[u8], message: &[u8], sharded: bool) -> u64 {
        PubSub::publish(self, channel, message, sharded)
    }

    fn monitored(&self) -> bool {
        PubSub::monitored(self)
    }

    fn monitor_lines(&self, lines: Vec<Bytes>) {
        PubSub::monitor_lines(self, 0, lines);
    }
}

#[cfg(test)]
mod tests {
    use shoal_wire::proto::Subscription;

    use super::*;

    fn sub(kind: PubSubKind, name: &str, clients: u32) -> Subscription {
        Subscription { kind: kind as i32, name: Bytes::from(name.to_string()), clients }
    }

    fn drain(rx: &mut mpsc::UnboundedReceiver<Out>) -> Vec<(i32, String, String, String, u64)> {
        let text = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
        let mut out = Vec::new();
        while let Ok(o) = rx.try_recv() {
            let list = match o {
                Out::Delivery(d) => vec![d],
                Out::Group(g) => g,
                Out::Overflow => break,
            };
            for d in list {
                out.push((d.kind, text(&d.pattern), text(&d.channel), text(&d.payload), d.ack));
            }
        }
        out
    }

    #[test]
    fn counts_and_deliveries_follow_redis() {
        let ps = PubSub::default();
        let (a, _, mut rx_a) = ps.attach();
        let (b, _, mut rx_b) = ps.attach();
        use PubSubKind::*;
        ps.apply(
            a,
            SubscribeRequest { changes: vec![sub(PubsubChannel, "news", 2)], ack: 7, ..Default::default() },
        );
        ps.apply(
            b,
            SubscribeRequest {
                changes: vec![sub(PubsubChannel, "news", 1), sub(PubsubPattern, "n*", 3)],
                ..Default::default()
            },
        );
        assert_eq!(drain(&mut rx_a), [(0, "".into(), "".into(), "".into(), 7)], "the ack");
        assert_eq!(ps.publish(b"news", b"hi", false), 2 + 1 + 3);
        assert_eq!(ps.publish(b"news", b"hi", true), 0, "shard channels are their own namespace");
        assert_eq!(drain(&mut rx_a), [(0, "".into(), "news".into(), "hi".into(), 0)]);
        assert_eq!(
            drain(&mut rx_b),
            [(0, "".into(), "news".into(), "hi".into(), 0), (1, "n*".into(), "news".into(), "hi".into(), 0)],
            "channel first, then the pattern"
        );
        let numsub = ps.query(&PubSubQuery {
            what: What::Numsub as i32,
            channels: vec![Bytes::from("news"), Bytes::from("x")],
            ..Default::default()
        });
        let Some(frame::Kind::Array(f)) = numsub.kind else { panic!() };
        assert_eq!(f.items[1].kind, Some(frame::Kind::Int(3)));
        assert_eq!(f.items[3].kind, Some(frame::Kind::Int(0)));
        // A count of 0 removes; a detached router's registrations go with it.
        ps.apply(a, SubscribeRequest { changes: vec![sub(PubsubChannel, "news", 0)], ..Default::default() });
        assert_eq!(ps.publish(b"news", b"x", false), 4);
        ps.detach(b);
        assert_eq!(ps.publish(b"news", b"x", false), 0);
        assert_eq!(ps.routers(), 1);
        // A whole state replaces what the stream had.
        ps.apply(
            a,
            SubscribeRequest { changes: vec![sub(PubsubShard, "s", 1)], replace: true, ..Default::default() },
        );
        assert_eq!(ps.publish(b"s", b"x", true), 1);
    }

    #[test]
    fn a_router_that_does_not_read_is_cut_off() {
        let ps = PubSub::default();
        let (a, outbox, mut rx) = ps.attach();
        ps.apply(
            a,
            SubscribeRequest { changes: vec![sub(PubSubKind::PubsubChannel, "c", 1)], ..Default::default() },
        );
        let big = vec![b'x'; 1 << 20];
        for _ in 0..(ROUTER_BUFFER_LIMIT >> 20) + 2 {
            ps.publish(b"c", &big, false);
        }
        assert!(outbox.closed.load(Ordering::Relaxed));
        let mut seen_overflow = false;
        while let Ok(o) = rx.try_recv() {
            seen_overflow |= matches!(o, Out::Overflow);
        }
        assert!(seen_overflow, "the stream is told to close");
    }

    /// What one stream's queue holds now: (`monitors` values told, relayed lines).
    fn monitor_traffic(rx: &mut mpsc::UnboundedReceiver<Out>) -> (Vec<u32>, Vec<String>) {
        let (mut told, mut lines) = (Vec::new(), Vec::new());
        while let Ok(o) = rx.try_recv() {
            let Out::Delivery(d) = o else { panic!("not one delivery: {o:?}") };
            if d.monitors != 0 {
                told.push(d.monitors);
            }
            lines.extend(d.monitor_lines.iter().map(|l| String::from_utf8_lossy(l).into_owned()));
        }
        (told, lines)
    }

    #[test]
    fn monitor_lines_reach_the_other_monitoring_routers_once_each() {
        let ps = PubSub::default();
        let (a, a_box, mut a_rx) = ps.attach();
        let (b, b_box, mut b_rx) = ps.attach();
        // Router A reconnected: two streams, the newer one counts.
        let (a2, a2_box, mut a2_rx) = ps.attach();
        // (What the stream task does with a request's `router`.)
        for (outbox, router) in [(&a_box, 7), (&b_box, 8), (&a2_box, 7)] {
            outbox.router.store(router, Ordering::Relaxed);
        }
        // A monitors (on both its streams): B is told some other router does; A is not (it is
        // the only one), so it sends no lines for nobody.
        ps.set_monitoring(a, true);
        ps.set_monitoring(a2, true);
        assert!(ps.monitored());
        assert_eq!(monitor_traffic(&mut b_rx).0, [MONITORS_ON]);
        // (A's two streams count each other as another monitoring stream: harmless, the lines
        // are never sent back to their router.)
        monitor_traffic(&mut a_rx);
        monitor_traffic(&mut a2_rx);
        // B's line reaches A once, on its newest stream; A's own line goes nowhere.
        ps.monitor_lines(b, vec![Bytes::from_static(b"from B")]);
        ps.monitor_lines(a2, vec![Bytes::from_static(b"from A")]);
        ps.monitor_lines(0, vec![Bytes::from_static(b"lua")]);
        assert_eq!(monitor_traffic(&mut a2_rx).1, ["from B", "lua"]);
        assert_eq!(monitor_traffic(&mut a_rx).1, Vec::<String>::new());
        assert_eq!(monitor_traffic(&mut b_rx).1, Vec::<String>::new(), "B does not monitor");
        // A's last monitor leaves: B is told nobody does any more.
        ps.set_monitoring(a, false);
        ps.detach(a2);
        assert!(!ps.monitored());
        assert_eq!(monitor_traffic(&mut b_rx).0, [MONITORS_OFF]);
        // A router that attaches while one monitors is told at once.
        ps.set_monitoring(b, true);
        let (_c, _c_box, mut c_rx) = ps.attach();
        assert_eq!(monitor_traffic(&mut c_rx).0, [MONITORS_ON]);
    }

    #[test]
    fn monitor_lines_a_router_does_not_read_are_dropped_without_closing_its_stream() {
        let ps = PubSub::default();
        let (a, outbox, mut rx) = ps.attach();
        ps.set_monitoring(a, true);
        let line = Bytes::from(vec![b'x'; 1 << 20]);
        for _ in 0..(MONITOR_BUFFER_LIMIT >> 20) + 4 {
            ps.monitor_lines(0, vec![line.clone()]);
        }
        assert!(!outbox.closed.load(Ordering::Relaxed), "pub/sub messages still flow");
        assert!(ps.monitor_dropped.load(Ordering::Relaxed) >= 4);
        let (_, lines) = monitor_traffic(&mut rx);
        assert!(lines.len() < (MONITOR_BUFFER_LIMIT >> 20) + 1, "{} lines queued", lines.len());
        // Taken off the queue (what the stream does), the budget is free again.
        for _ in &lines {
            outbox.taken(&Delivery { monitor_lines: vec![line.clone()], ..Default::default() });
        }
        ps.monitor_lines(0, vec![line.clone()]);
        assert_eq!(monitor_traffic(&mut rx).1.len(), 1);
    }

    #[test]
    fn invalidations_a_router_does_not_read_coalesce_without_closing_its_stream() {
        use crate::store::tracking::Target;
        let ps = PubSub::default();
        let (a, outbox, mut rx) = ps.attach();
        ps.apply(
            a,
            SubscribeRequest { changes: vec![sub(PubSubKind::PubsubChannel, "c", 1)], ..Default::default() },
        );
        let key = Bytes::from(vec![b'k'; 1 << 10]);
        for _ in 0..(ROUTER_BUFFER_LIMIT >> 10) + 2 {
            outbox.invalidate(vec![key.clone()]);
        }
        assert!(!outbox.closed.load(Ordering::Relaxed), "tracking traffic alone never closes the stream");
        assert_eq!(ps.publish(b"c", b"still here", false), 1);
        let mut queued = Vec::new();
        while let Ok(o) = rx.try_recv() {
            let Out::Delivery(d) = o else { panic!("only single deliveries queued, not {o:?}") };
            queued.push(d);
        }
        let flushes: Vec<usize> = (0..queued.len()).filter(|&i| queued[i].invalidate_all).collect();
        let keys = queued.iter().filter(|d| !d.invalidate.is_empty()).count();
        assert_eq!(flushes.len(), 1, "one invalidate_all stands for the rest");
        assert!(keys > 0 && keys < (TRACKING_BUFFER_LIMIT >> 10) + 1, "{keys} invalidations queued");
        assert_eq!(
            &queued[flushes[0] + 1..].iter().map(|d| d.payload.clone()).collect::<Vec<_>>(),
            &[Bytes::from("still here")]
        );
        // Until the router has taken the invalidate_all, later changes are covered by it; after,
        // they are queued one by one again.
        for d in &queued[..flushes[0]] {
            outbox.taken(d);
        }
        outbox.invalidate(vec![key.clone()]);
        outbox.invalidate_all();
        assert!(rx.try_recv().is_err(), "covered by the queued invalidate_all");
        for d in &queued[flushes[0]..] {
            outbox.taken(d);
        }
        outbox.invalidate(vec![key.clone()]);
        assert!(matches!(rx.try_recv(), Ok(Out::Delivery(d)) if d.invalidate == [key]));
        assert_eq!(
            outbox.bytes.load(Ordering::Relaxed),
            delivery_size(&Delivery {
                invalidate: vec![Bytes::from(vec![b'k'; 1 << 10])],
                ..Default::default()
            })
        );
    }
}
