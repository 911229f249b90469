//! Pub/sub in the router: the hub that knows which of this router's clients is subscribed to
//! what, keeps every node told, and hands the messages nodes send to the clients.
//!
//! ```text
//!  SUBSCRIBE ─► Hub::change ─► local maps (channel → clients) ─► every node's link: the router's
//!                                                                 new count for the name
//!  node ─Subscribe stream─► link ─► Hub::deliver ─► each subscriber's bounded queue ─► its
//!                                                   connection writes it (connection.rs)
//! ```
//!
//! - [`subscriber`]: one subscribed connection: its subscriptions and message queue, bounded
//!   by `client-output-buffer-limit pubsub` (a client past it is disconnected).
//! - [`link`]: one `Subscribe` stream per node (reconnects with backoff; on every (re)connect
//!   sends the router's whole subscription state again).
//!
//! Every node holds every router's registrations, so any node can deliver any message: a
//! PUBLISH goes to its channel's slot owner (one publisher's messages to a channel leave one
//! node, in order), keyspace notifications leave the node that holds the key, and a slot move
//! loses no subscriber. (P|S)SUBSCRIBE and their UNSUBSCRIBE reply once every node that is up
//! has acknowledged the change (one round trip, in parallel), so a PUBLISH right after the reply,
//! through any router to any node, reaches the client, and PUBSUB (answered by one node) agrees.

pub mod link;
pub mod subscriber;
pub mod tracking;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use shoal_wire::proto::{
    ClientsAnswer, ClientsQuery, ClientsReply, Delivery, Frame, PubSubKind, PubSubQuery, Subscription,
};
use tokio::sync::{mpsc, oneshot, watch};

pub use subscriber::{Counters, Kind, Limits, Message, Subscriber};

use crate::backend::{Backend, BackendError};
use crate::resp::Reply;
use link::{Change, Link, LinkHub};

type Holders = HashMap<Bytes, Vec<Arc<Subscriber>>>;

/// This router's subscribed clients, by name.
#[derive(Debug, Default)]
struct Local {
    channels: Holders,
    patterns: Holders,
    shard: Holders,
}

impl Local {
    fn of(&mut self, kind: Kind) -> &mut Holders {
        match kind {
            // Tracking messages are never subscribed to.
            Kind::Channel | Kind::Invalidate | Kind::InvalidateAll | Kind::RedirBroken | Kind::Monitor => {
                &mut self.channels
            }
            Kind::Pattern => &mut self.patterns,
            Kind::Shard => &mut self.shard,
        }
    }

    fn get(&self, kind: Kind) -> &Holders {
        match kind {
            Kind::Channel | Kind::Invalidate | Kind::InvalidateAll | Kind::RedirBroken | Kind::Monitor => {
                &self.channels
            }
            Kind::Pattern => &self.patterns,
            Kind::Shard => &self.shard,
        }
    }

    /// Takes `sub` off `name`'s holders; the registration that says how many are left.
    fn remove(&mut self, kind: Kind, name: Bytes, sub: &Arc<Subscriber>) -> Subscription {
        let holders = self.of(kind);
        let left = match holders.get_mut(&name) {
            Some(list) => {
                list.retain(|s| !Arc::ptr_eq(s, sub));
                list.len()
            }
            None => 0,
        };
        if left == 0 {
            holders.remove(&name);
        }
        registration(kind, name, left)
    }

    /// The whole state as registrations (what a (re)connected link sends first).
    fn registrations(&self) -> Vec<Subscription> {
        let mut out = Vec::new();
        for kind in [Kind::Channel, Kind::Pattern, Kind::Shard] {
            for (name, holders) in self.get(kind) {
                out.push(registration(kind, name.clone(), holders.len()));
            }
        }
        out
    }
}

fn wire_kind(kind: Kind) -> PubSubKind {
    match kind {
        Kind::Channel | Kind::Invalidate | Kind::InvalidateAll | Kind::RedirBroken | Kind::Monitor => {
            PubSubKind::PubsubChannel
        }
        Kind::Pattern => PubSubKind::PubsubPattern,
        Kind::Shard => PubSubKind::PubsubShard,
    }
}

fn registration(kind: Kind, name: Bytes, clients: usize) -> Subscription {
    Subscription { kind: wire_kind(kind) as i32, name, clients: clients.min(u32::MAX as usize) as u32 }
}

/// The reply words of each kind: (subscribe, unsubscribe).
fn words(kind: Kind) -> (&'static str, &'static str) {
    match kind {
        Kind::Channel | Kind::Invalidate | Kind::InvalidateAll | Kind::RedirBroken | Kind::Monitor => {
            ("subscribe", "unsubscribe")
        }
        Kind::Pattern => ("psubscribe", "punsubscribe"),
        Kind::Shard => ("ssubscribe", "sunsubscribe"),
    }
}

#[derive(Debug)]
pub struct Hub {
    local: RwLock<Local>,
    /// One link per node of the current topology.
    links: Mutex<BTreeMap<(u32, String), Arc<Link>>>,
    pub limits: Limits,
    pub counters: Counters,
    next_ack: AtomicU64,
    /// How long a subscription change waits for the nodes' acks.
    deadline: Duration,
    /// Set at shutdown: links stop.
    stop: watch::Sender<bool>,
    /// The near cache (`--near-cache`), whose invalidations the links receive.
    pub near: Option<Arc<crate::nearcache::NearCache>>,
    /// CLIENT TRACKING's table, which hears of the same invalidations (crate::pubsub::tracking).
    pub tracking: Arc<crate::pubsub::tracking::ClientTracking>,
    /// This router's tracking token on the nodes (the near cache's when it is on).
    pub token: u64,
    /// Whether the links register this router for tracking on their nodes: from the start with
    /// a near cache, else from the first CLIENT TRACKING ON (so that routers whose clients
    /// never track cost the nodes nothing).
    pub tracking_on: AtomicBool,
    /// This router's clients, which other routers' CLIENT LIST/KILL ask about through the nodes.
    clients: Arc<crate::clients::Clients>,
    /// MONITOR's connections on this router.
    monitors: crate::monitor::Monitors,
    /// Some client of this router monitors: the links register that with their nodes.
    monitoring: AtomicBool,
    /// Links whose node says some router monitors: while any does, this router's lines go to
    /// one of them (the first up, in topology order), which relays them.
    monitors_elsewhere: AtomicUsize,
    /// Links whose node says a script runs there past busy-reply-threshold (`Delivery.busy`).
    busy_nodes: AtomicUsize,
}

impl Hub {
    pub fn new(
        deadline: Duration,
        near: Option<Arc<crate::nearcache::NearCache>>,
        clients: Arc<crate::clients::Clients>,
    ) -> Arc<Hub> {
        Arc::new(Hub {
            local: RwLock::default(),
            links: Mutex::default(),
            limits: Limits::default(),
            counters: Counters::default(),
            next_ack: AtomicU64::new(1),
            deadline,
            stop: watch::channel(false).0,
            token: near.as_ref().map_or_else(|| fastrand::u64(1..), |n| n.token),
            tracking_on: AtomicBool::new(near.is_some()),
            tracking: Arc::new(crate::pubsub::tracking::ClientTracking::new(Arc::new(Limits::default()))),
            near,
            clients,
            monitors: crate::monitor::Monitors::default(),
            monitoring: AtomicBool::new(false),
            monitors_elsewhere: AtomicUsize::new(0),
            busy_nodes: AtomicUsize::new(0),
        })
    }

    /// What the links send the nodes: this router's token, in BCAST mode with the prefixes of
    /// its BCAST clients if it has any (its other keys register per key all the same).
    pub fn tracking_request(&self) -> Option<shoal_wire::proto::Tracking> {
        if !self.tracking_on.load(Ordering::Acquire) {
            return None;
        }
        let prefixes = self.tracking.bcast_prefixes();
        Some(shoal_wire::proto::Tracking {
            token: self.token,
            bcast: prefixes.is_some(),
            prefixes: prefixes.unwrap_or_default(),
        })
    }

    /// The first CLIENT TRACKING ON (or a change of the BCAST prefixes): every link registers this router for tracking on its node;
    /// completes when the nodes have acknowledged it (so the client's next read registers).
    pub fn want_tracking(&self, prefixes_changed: bool) -> impl Future<Output = ()> + Send + use<> {
        let acks = if self.tracking_on.swap(true, Ordering::AcqRel) && !prefixes_changed {
            Vec::new()
        } else {
            let links = self.links.lock();
            let mut acks = Vec::with_capacity(links.len());
            for link in links.values() {
                let (tx, rx) = oneshot::channel();
                if link.send(Change { ack: Some(tx), tracking: true, ..Change::default() }) {
                    acks.push(rx);
                }
            }
            acks
        };
        self.acked(acks)
    }

    pub(crate) fn ack_id(&self) -> u64 {
        self.next_ack.fetch_add(1, Ordering::Relaxed)
    }

    /// (P|S)SUBSCRIBE (`subscribe`) or (P|S)UNSUBSCRIBE `names` for `sub`: the replies (one push
    /// per name, with the client's count after it, as Redis answers) and a future that completes
    /// when the nodes have acknowledged the change (or the deadline passed). UNSUBSCRIBE without
    /// names drops every subscription of that kind (one reply each; a null name if there were
    /// none).
    pub fn change(
        &self,
        sub: &Arc<Subscriber>,
        kind: Kind,
        names: &[Bytes],
        subscribe: bool,
    ) -> (Vec<Reply>, impl Future<Output = ()> + Send + use<>) {
        let (word_sub, word_unsub) = words(kind);
        let mut local = self.local.write();
        let mut subs = sub.subs.lock();
        let all: Vec<Bytes>;
        let names = if !subscribe && names.is_empty() {
            all = subs.of(kind).clone();
            &all[..]
        } else {
            names
        };
        let mut replies = Vec::with_capacity(names.len().max(1));
        let mut changes: Vec<Subscription> = Vec::new();
        for name in names {
            let mine = subs.of(kind);
            let held = mine.iter().position(|n| n == name);
            match (subscribe, held) {
                (true, None) => {
                    mine.push(name.clone());
                    let list = local.of(kind).entry(name.clone()).or_default();
                    list.push(sub.clone());
                    changes.push(registration(kind, name.clone(), list.len()));
                }
                (false, Some(i)) => {
                    mine.remove(i);
                    changes.push(local.remove(kind, name.clone(), sub));
                }
                _ => {}
            }
            let word = if subscribe { word_sub } else { word_unsub };
            replies.push(Reply::Push(vec![
                Reply::bulk(word),
                Reply::Bulk(name.clone()),
                Reply::Int(subs.count(kind) as i64),
            ]));
        }
        if names.is_empty() {
            replies.push(Reply::Push(vec![
                Reply::bulk(word_unsub),
                Reply::Nil,
                Reply::Int(subs.count(kind) as i64),
            ]));
        }
        sub.client.set_subscriptions(subs.channels.len(), subs.patterns.len(), subs.shard.len());
        drop(subs);
        // Told while the lock is held, so every link sees the counts in the order they changed.
        let acks = self.tell_links(changes);
        drop(local);
        (replies, self.acked(acks))
    }

    /// Sends `changes` to every link, each with an ack to wait for (none when nothing changed).
    fn tell_links(&self, changes: Vec<Subscription>) -> Vec<oneshot::Receiver<()>> {
        if changes.is_empty() {
            return Vec::new();
        }
        let links = self.links.lock();
        let mut acks = Vec::with_capacity(links.len());
        for link in links.values() {
            let (tx, rx) = oneshot::channel();
            if link.send(Change { subs: changes.clone(), ack: Some(tx), ..Change::default() }) {
                acks.push(rx);
            }
        }
        acks
    }

    /// Drops every subscription of `sub` (RESET, or its connection closed); the future
    /// completes when the nodes have acknowledged it (RESET waits; a closed connection does not).
    pub fn leave(&self, sub: &Arc<Subscriber>) -> impl Future<Output = ()> + Send + use<> {
        let mut local = self.local.write();
        let mut subs = sub.subs.lock();
        let mut changes = Vec::new();
        for kind in [Kind::Channel, Kind::Pattern, Kind::Shard] {
            for name in std::mem::take(subs.of(kind)) {
                changes.push(local.remove(kind, name, sub));
            }
        }
        sub.client.set_subscriptions(0, 0, 0);
        drop(subs);
        let acks = self.tell_links(changes);
        drop(local);
        self.acked(acks)
    }

    /// Completes when every ack has come (or a link went away), or at the deadline.
    fn acked(&self, acks: Vec<oneshot::Receiver<()>>) -> impl Future<Output = ()> + Send + use<> {
        let deadline = self.deadline;
        async move {
            let _ = tokio::time::timeout(deadline, async {
                for ack in acks {
                    let _ = ack.await;
                }
            })
            .await;
        }
    }

    /// Hands a node's deliveries to the subscribed clients (a link's task, in the order the node
    /// sent them). Consecutive deliveries for one name (a busy channel's batch) reach each of its
    /// clients in one push, one lock and one wake-up.
    pub fn deliver(&self, deliveries: &[Delivery]) {
        let local = self.local.read();
        let mut delivered = 0u64;
        let target = |d: &Delivery| match d.kind() {
            PubSubKind::PubsubChannel => (Kind::Channel, d.channel.clone()),
            PubSubKind::PubsubPattern => (Kind::Pattern, d.pattern.clone()),
            PubSubKind::PubsubShard => (Kind::Shard, d.channel.clone()),
        };
        let mut rest = deliveries;
        while let Some(first) = rest.first() {
            let (kind, name) = target(first);
            let run = rest.iter().take_while(|d| target(d) == (kind, name.clone())).count();
            let (now, later) = rest.split_at(run);
            rest = later;
            let Some(holders) = local.get(kind).get(&name) else { continue };
            let messages: Vec<Message> = now
                .iter()
                .map(|d| Message {
                    kind,
                    pattern: d.pattern.clone(),
                    channel: d.channel.clone(),
                    payload: d.payload.clone(),
                })
                .collect();
            for s in holders {
                if s.push_all(&messages, &self.limits) {
                    self.counters.disconnected.fetch_add(1, Ordering::Relaxed);
                }
                delivered += messages.len() as u64;
            }
        }
        self.counters.delivered.fetch_add(delivered, Ordering::Relaxed);
    }

    /// Takes the link's pending changes and the whole state, under the lock changes are made
    /// under: what the link sends first on a new stream (the changes it takes are in the state;
    /// their acks are the state's).
    pub(crate) fn snapshot(
        &self,
        pending: &mut mpsc::UnboundedReceiver<Change>,
    ) -> (Vec<Subscription>, Vec<oneshot::Sender<()>>) {
        let local = self.local.write();
        let mut acks = Vec::new();
        while let Ok(change) = pending.try_recv() {
            acks.extend(change.ack);
        }
        (local.registrations(), acks)
    }

    /// Names with subscribers on this router: (channels, patterns, shard channels) (tests; INFO
    /// asks a node, which knows every router's).
    #[cfg(test)]
    pub fn counts(&self) -> (usize, usize, usize) {
        let local = self.local.read();
        (local.channels.len(), local.patterns.len(), local.shard.len())
    }

    /// Whether every node's link is connected (tests, readiness of pub/sub).
    pub fn all_up(&self) -> bool {
        let links = self.links.lock();
        !links.is_empty() && links.values().all(|l| l.is_up())
    }

    /// Asks one node (the first whose link is up, in topology order) a PUBSUB question; every
    /// node knows every router's registrations.
    pub async fn query(&self, q: PubSubQuery) -> Result<Frame, BackendError> {
        let deadline = self.deadline;
        self.ask_one_node(|link| {
            let q = q.clone();
            async move { link.query(q, deadline).await }
        })
        .await
    }

    /// MONITOR: `queue`'s connection gets the line of every command of the cluster from now on;
    /// the first monitor of this router registers it with every node.
    pub fn add_monitor(&self, queue: &Arc<subscriber::Subscriber>) {
        if self.monitors.add(queue) {
            self.sync_monitoring();
        }
    }

    /// Tells the nodes whether this router has monitors now, if that changed. Decided and sent
    /// under one lock, from the monitors' count as it is then: a first monitor added while the
    /// last one is found gone cannot leave the nodes told the opposite of the final state.
    fn sync_monitoring(&self) {
        let links = self.links.lock();
        let on = self.monitors.active();
        if self.monitoring.swap(on, Ordering::AcqRel) != on {
            for link in links.values() {
                link.send(Change { monitoring: Some(on), ..Change::default() });
            }
        }
    }

    /// The BUSY text of a node where a script runs past busy-reply-threshold, if one does (a
    /// relaxed load while none does; for `--busy-reply-scope cluster`).
    #[inline]
    pub fn busy_text(&self) -> Option<&'static str> {
        if self.busy_nodes.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.links.lock().values().find_map(|l| l.busy_text())
    }

    /// Whether an answered command's MONITOR line is wanted, here or by another router (two
    /// relaxed loads: what a request pays while nobody monitors).
    #[inline]
    pub fn monitoring(&self) -> bool {
        self.monitors.active() || self.monitors_elsewhere.load(Ordering::Relaxed) != 0
    }

    /// The MONITOR line of one of this router's commands: to its monitoring clients, and, while
    /// another router monitors, through one node to it.
    pub fn monitor_line(&self, line: Bytes) {
        if self.monitors.active() && self.monitors.feed(std::slice::from_ref(&line), &self.limits) {
            self.sync_monitoring();
        }
        if self.monitors_elsewhere.load(Ordering::Relaxed) != 0 {
            let links = self.links.lock();
            if let Some(link) = links.values().find(|l| l.is_up() && l.monitors_elsewhere()) {
                link.send_line(line);
            }
        }
    }

    /// CLIENT LIST / CLIENT KILL over the clients of every other router of the cluster: one node
    /// asks them all on their streams (node/src/pubsub/clients.rs) and waits half of this
    /// router's deadline for their answers. This router's own clients are not included.
    pub async fn ask_clients(self: Arc<Self>, mut q: ClientsQuery) -> Result<ClientsReply, BackendError> {
        q.origin = self.token;
        q.wait_ms = u32::try_from((self.deadline / 2).as_millis()).unwrap_or(u32::MAX).max(1);
        let deadline = self.deadline;
        // One deadline in all: a node that does not answer is not followed by another's full
        // wait (and a KILL one node may have relayed is not sent twice after a timeout).
        let asked = self.ask_one_node(|link| {
            let q = q.clone();
            async move { link.clients(q, deadline).await }
        });
        tokio::time::timeout(deadline, asked).await.unwrap_or(Err(BackendError::Timeout {
            node: 0,
            addr: "any node".into(),
            ms: deadline.as_millis() as u64,
        }))
    }

    /// Tries the links, those up first, until one node answers.
    async fn ask_one_node<T, F: Future<Output = Result<T, BackendError>>>(
        &self,
        ask: impl Fn(Arc<Link>) -> F,
    ) -> Result<T, BackendError> {
        let links: Vec<Arc<Link>> = self.links.lock().values().cloned().collect();
        let mut last = None;
        for link in links.iter().filter(|l| l.is_up()).chain(links.iter().filter(|l| !l.is_up())) {
            match ask(link.clone()).await {
                Ok(answer) => return Ok(answer),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| BackendError::BadReply("no nodes".into())))
    }

    /// Keeps one link per node of the backend's topology: new nodes get one (it registers this
    /// router's whole state), links to nodes that left are retired (they end once the node
    /// closes their stream, so nothing it still delivers is lost). Runs until shutdown.
    pub async fn follow(self: Arc<Self>, backend: Arc<Backend>) {
        let mut versions = backend.watch_version();
        let mut stop = self.stop.subscribe();
        loop {
            let nodes = backend.routing().topology.nodes.clone();
            {
                let mut links = self.links.lock();
                links.retain(|(id, addr), link| {
                    let keep = nodes.iter().any(|n| n.id == *id && &n.addr == addr);
                    if !keep {
                        link.retire();
                    }
                    keep
                });
                for n in &nodes {
                    links.entry((n.id, n.addr.clone())).or_insert_with(|| {
                        Link::spawn(
                            self.clone(),
                            backend.clone(),
                            n.id,
                            n.addr.clone(),
                            self.stop.subscribe(),
                        )
                    });
                }
            }
            tokio::select! {
                changed = versions.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    // Slots may have changed owners: keys CLIENT TRACKING registered on the old
                    // owners may be written where nobody tracks them. Flush-all, as Redis does
                    // when it cannot tell which keys changed.
                    self.tracking.flush_all();
                }
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }

    /// Shutdown: every link stops.
    pub fn close(&self) {
        let _ = self.stop.send(true);
    }
}

/// The connection-side state of a client that has subscribed: its [`Subscriber`], and the
/// hub to leave when the connection ends.
#[derive(Debug)]
pub struct LeaveOnDrop {
    pub hub: Arc<Hub>,
    pub sub: Arc<Subscriber>,
}

impl LinkHub for Hub {
    fn snapshot(
        &self,
        pending: &mut mpsc::UnboundedReceiver<Change>,
    ) -> (Vec<Subscription>, Vec<oneshot::Sender<()>>) {
        Hub::snapshot(self, pending)
    }

    fn ack_id(&self) -> u64 {
        Hub::ack_id(self)
    }

    fn tracking_request(&self) -> Option<shoal_wire::proto::Tracking> {
        Hub::tracking_request(self)
    }

    fn deliver(&self, deliveries: &[Delivery]) {
        Hub::deliver(self, deliveries)
    }

    fn near(&self) -> Option<&Arc<crate::nearcache::NearCache>> {
        self.near.as_ref()
    }

    fn tracking(&self) -> &crate::pubsub::tracking::ClientTracking {
        &self.tracking
    }

    fn router_id(&self) -> u64 {
        self.token
    }

    fn monitoring(&self) -> bool {
        self.monitoring.load(Ordering::Acquire)
    }

    fn monitors_elsewhere(&self, on: bool) {
        if on {
            self.monitors_elsewhere.fetch_add(1, Ordering::Relaxed);
        } else {
            self.monitors_elsewhere.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn busy_nodes(&self, on: bool) {
        if on {
            self.busy_nodes.fetch_add(1, Ordering::Relaxed);
        } else {
            self.busy_nodes.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn monitor_lines(&self, lines: &[Bytes]) {
        if self.monitors.feed(lines, &self.limits) {
            self.sync_monitoring();
        }
    }

    fn answer_clients(&self, q: &ClientsQuery) -> ClientsAnswer {
        // A stream not yet named may be asked this router's own question: its clients are
        // answered for by itself (and a relayed KILL knows nothing of SKIPME).
        if q.origin == self.token {
            return ClientsAnswer { query: q.id, ..ClientsAnswer::default() };
        }
        self.clients.answer(q)
    }
}

impl LeaveOnDrop {
    /// Leaves now (RESET): completes when the nodes have acknowledged it.
    pub fn leave(self) -> impl Future<Output = ()> + Send + use<> {
        // Dropping `self` afterwards finds nothing left to drop.
        self.hub.leave(&self.sub)
    }
}

impl Drop for LeaveOnDrop {
    fn drop(&mut self) {
        // The connection closed: nobody waits for the nodes.
        drop(self.hub.leave(&self.sub));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clients::ClientHandle;
    use crate::resp::Protocol;

    fn names(list: &[&str]) -> Vec<Bytes> {
        list.iter().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect()
    }

    fn text(replies: &[Reply]) -> String {
        let bytes: Vec<u8> = replies.iter().flat_map(|r| r.to_bytes(Protocol::Resp2).to_vec()).collect();
        String::from_utf8(bytes).unwrap().replace("\r\n", " ")
    }

    #[test]
    fn replies_counts_and_deliveries_follow_redis() {
        let hub = Hub::new(Duration::from_millis(10), None, Default::default());
        let client = Arc::new(ClientHandle::new(1, "a".into(), "l".into(), false));
        let sub = Subscriber::new(client.clone());
        let (r, _) = hub.change(&sub, Kind::Channel, &names(&["x", "y", "x"]), true);
        assert_eq!(
            text(&r),
            "*3 $9 subscribe $1 x :1 *3 $9 subscribe $1 y :2 *3 $9 subscribe $1 x :2 ",
            "a channel given twice is answered twice, counted once"
        );
        let (r, _) = hub.change(&sub, Kind::Pattern, &names(&["x*"]), true);
        assert_eq!(text(&r), "*3 $10 psubscribe $2 x* :3 ");
        let (r, _) = hub.change(&sub, Kind::Shard, &names(&["s"]), true);
        assert_eq!(text(&r), "*3 $10 ssubscribe $1 s :1 ", "shard channels count apart");
        assert!(client.is_pubsub());
        assert_eq!(hub.counts(), (2, 1, 1));

        let d = |kind: PubSubKind, pattern: &str, channel: &str| Delivery {
            kind: kind as i32,
            pattern: Bytes::copy_from_slice(pattern.as_bytes()),
            channel: Bytes::copy_from_slice(channel.as_bytes()),
            payload: Bytes::from_static(b"m"),
            ..Default::default()
        };
        hub.deliver(&[
            d(PubSubKind::PubsubChannel, "", "x"),
            d(PubSubKind::PubsubPattern, "x*", "xx"),
            d(PubSubKind::PubsubChannel, "", "nobody"),
            d(PubSubKind::PubsubShard, "", "s"),
        ]);
        let got: Vec<String> = sub
            .take(1 << 20, &hub.limits)
            .iter()
            .map(|m| String::from_utf8(m.reply().to_bytes(Protocol::Resp3).to_vec()).unwrap())
            .collect();
        assert_eq!(
            got,
            [
                ">3\r\n$7\r\nmessage\r\n$1\r\nx\r\n$1\r\nm\r\n",
                ">4\r\n$8\r\npmessage\r\n$2\r\nx*\r\n$2\r\nxx\r\n$1\r\nm\r\n",
                ">3\r\n$8\r\nsmessage\r\n$1\r\ns\r\n$1\r\nm\r\n"
            ]
        );

        let (r, _) = hub.change(&sub, Kind::Channel, &[], false);
        assert_eq!(
            text(&r),
            "*3 $11 unsubscribe $1 x :2 *3 $11 unsubscribe $1 y :1 ",
            "in subscription order"
        );
        let (r, _) = hub.change(&sub, Kind::Channel, &[], false);
        assert_eq!(text(&r), "*3 $11 unsubscribe $-1 :1 ", "none left: a null name");
        drop(hub.leave(&sub));
        assert_eq!(hub.counts(), (0, 0, 0));
        assert!(!client.is_pubsub());
        assert!(client.info_line(crate::cmd::name_of).contains(" flags=N db=0 sub=0 psub=0 ssub=0 "));
    }
}
