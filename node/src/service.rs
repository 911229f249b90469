//! The `shoal.v1.Node` gRPC service.
//!
//! Each router holds one `Execute` stream per node. The reply stream pulls the next batch from the
//! request stream, applies its ops in order and yields the replies, so a batch costs no task hop
//! or channel, and a router that stops reading replies stops being read from. Replies leave in
//! messages of about [`REPLY_MESSAGE_BYTES`]: ops are applied only as fast as their replies can be
//! sent, and a large reply goes out in pieces (`shoal_wire::pieces`), so neither a stream's memory
//! nor its messages grow with what one client asks for. On shutdown the stream ends after the
//! batch in hand, so the router fails over promptly instead of waiting for a deadline.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use prost::Message;
use shoal_wire::pieces::{self, Fed, OpAssembler};
use shoal_wire::proto::{
    self, Batch, BatchReply, ExportChunk, ExportEntry, ExportRequest, GetTopologyRequest, NodeSettings,
    NodeStats, Op, Reply, SnapshotInfo, SnapshotRequest, StatsRequest, TopologyAck, TopologyDoc,
    node_server::Node,
};
use tokio::sync::{oneshot, watch};
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::membership::{Membership, NodeView};
use crate::metrics::NodeMetrics;
use crate::persistence::{PersistError, Persistence};
use crate::pubsub::PubSub;
use crate::store::{EvictionPolicy, Store, StoreConfig};

/// Export chunks are cut at about this many bytes unless the caller asks otherwise.
const DEFAULT_CHUNK_BYTES: usize = 1 << 20;
/// A reply message is closed once it holds about this many bytes.
pub const REPLY_MESSAGE_BYTES: usize = pieces::PIECE_BYTES;
/// How long an export waits for batches from before a move to finish.
const EXPORT_QUIESCE: std::time::Duration = std::time::Duration::from_secs(5);

/// What the service needs: the store, its persistence, its place in the cluster, counters, and
/// when it started.
#[derive(Debug)]
pub struct NodeState {
    pub store: Arc<Store>,
    /// Lua scripts: the cache and the script thread.
    pub scripts: crate::script::Scripts,
    pub persistence: Arc<Persistence>,
    pub membership: Arc<Membership>,
    pub metrics: NodeMetrics,
    pub started: Instant,
    /// Routers' subscriptions; the store publishes through it (PUBLISH ops, notifications).
    pub pubsub: Arc<PubSub>,
}

impl NodeState {
    pub fn new(store: Arc<Store>, persistence: Arc<Persistence>, membership: Arc<Membership>) -> NodeState {
        let pubsub = Arc::new(PubSub::default());
        store.events.set_sink(pubsub.clone());
        let scripts = crate::script::Scripts::new(
            store.clone(),
            crate::script::DEFAULT_MEMORY_LIMIT,
            crate::script::DEFAULT_BUSY_MS,
        );
        NodeState {
            store,
            scripts,
            persistence,
            membership,
            metrics: NodeMetrics::default(),
            started: Instant::now(),
            pubsub,
        }
    }

    /// Applies one whole batch and returns its replies in one message (tools and tests; the
    /// `Execute` stream sends them in bounded messages instead).
    pub fn execute(&self, batch: Batch) -> BatchReply {
        let mut running = Running::start(self, batch);
        let mut replies = Vec::new();
        let mut assembler = OpAssembler::default();
        while let Some(op) = running.ops.pop_front() {
            match running.step(self, &mut assembler, op) {
                Step::Reply(r) => replies.push(r),
                Step::Piece => {}
                // Tools and tests: wait for the script (or the gate) right here.
                Step::Script(rx, _) => replies.push(
                    rx.blocking_recv().unwrap_or_else(|_| crate::ops::error("ERR the script engine is gone")),
                ),
                Step::Held(op) => {
                    replies.push(crate::ops::apply_checked(&self.store, &running.view, running.version, op))
                }
            }
        }
        BatchReply { id: running.id, replies, more: false, deferred: Vec::new() }
    }

    pub fn stats(&self) -> NodeStats {
        let s = self.store.stats();
        let (channels, patterns, shard) = self.pubsub.counts();
        NodeStats {
            pubsub_channels: channels as u64,
            pubsub_patterns: patterns as u64,
            pubsub_shard_channels: shard as u64,
            pubsub_routers: self.pubsub.routers() as u64,
            keys: s.keys,
            volatile_keys: s.volatile_keys,
            used_memory: s.used_memory,
            maxmemory: self.store.maxmemory() as u64,
            maxmemory_policy: self.store.policy().to_string(),
            expired_keys: s.expired_keys,
            evicted_keys: s.evicted_keys,
            keyspace_hits: s.keyspace_hits,
            keyspace_misses: s.keyspace_misses,
            ops: self.metrics.ops.get(),
            batches: self.metrics.batches.get(),
            shards: self.store.shard_count() as u32,
            uptime_ms: self.started.elapsed().as_millis() as u64,
            rss_bytes: shoal_telemetry::metrics::rss_bytes(),
            snapshot: Some(self.persistence.info()),
            topology_version: self.membership.version(),
            migrations: self.membership.progress(),
            keys_migrated_in: self.membership.keys_in.load(std::sync::atomic::Ordering::Relaxed),
            bytes_migrated_in: self.membership.bytes_in.load(std::sync::atomic::Ordering::Relaxed),
            slots_dropped: self.membership.slots_dropped.load(std::sync::atomic::Ordering::Relaxed),
            slots_migrated_in: self.membership.slots_in.load(std::sync::atomic::Ordering::Relaxed),
        }
    }
}

impl NodeState {
    /// The settings CONFIG SET changes, as they are now.
    pub fn settings(&self) -> NodeSettings {
        let l = self.store.limits();
        NodeSettings {
            maxmemory: Some(self.store.maxmemory() as u64),
            maxmemory_policy: Some(self.store.policy().to_string()),
            hash_max_listpack_entries: Some(l.hash_max_listpack_entries as u64),
            hash_max_listpack_value: Some(l.hash_max_listpack_value as u64),
            set_max_intset_entries: Some(l.set_max_intset_entries as u64),
            zset_max_listpack_entries: Some(l.zset_max_listpack_entries as u64),
            zset_max_listpack_value: Some(l.zset_max_listpack_value as u64),
            list_max_listpack_size: Some(l.list_max_listpack_size),
            notify_keyspace_events: Some(shoal_wire::notify::to_string(self.store.events.flags())),
            busy_reply_threshold: Some(self.scripts.busy_reply_threshold()),
        }
    }

    /// Applies the settings `change` sets (all of them, or none if one is out of range) and
    /// returns every setting afterwards. New thresholds apply to values converted from now on; a
    /// lower memory limit is enforced by the next write that may grow memory.
    pub fn configure(&self, change: &NodeSettings) -> Result<NodeSettings, String> {
        let store = &self.store;
        let mut now = StoreConfig {
            maxmemory: store.maxmemory(),
            policy: store.policy(),
            limits: store.limits(),
            notify_keyspace_events: store.events.flags(),
            ..store.config().clone()
        };
        apply_settings(&mut now, change)?;
        if now.limits != store.limits() {
            store.set_limits(now.limits);
        }
        store.set_policy(now.policy);
        store.set_maxmemory(now.maxmemory);
        store.events.set_flags(now.notify_keyspace_events);
        if let Some(ms) = change.busy_reply_threshold {
            self.scripts.set_busy_reply_threshold(ms);
        }
        if change != &NodeSettings::default() {
            tracing::info!(?change, "settings changed");
        }
        Ok(self.settings())
    }
}

/// Applies the settings `change` sets to `config` (its memory limit, policy and thresholds): all
/// of them, or none if one is out of range (the error says which and why).
pub fn apply_settings(config: &mut StoreConfig, change: &NodeSettings) -> Result<(), String> {
    shoal_wire::settings::check(change)?;
    if let Some(p) = &change.maxmemory_policy {
        config.policy = p.parse::<EvictionPolicy>()?;
    }
    let size = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    if let Some(v) = change.maxmemory {
        config.maxmemory = size(v);
    }
    let l = &mut config.limits;
    if let Some(v) = change.hash_max_listpack_entries {
        l.hash_max_listpack_entries = size(v);
    }
    if let Some(v) = change.hash_max_listpack_value {
        l.hash_max_listpack_value = size(v);
    }
    if let Some(v) = change.set_max_intset_entries {
        l.set_max_intset_entries = size(v);
    }
    if let Some(v) = change.zset_max_listpack_entries {
        l.zset_max_listpack_entries = size(v);
    }
    if let Some(v) = change.zset_max_listpack_value {
        l.zset_max_listpack_value = size(v);
    }
    if let Some(v) = change.list_max_listpack_size {
        l.list_max_listpack_size = v;
    }
    if let Some(v) = &change.notify_keyspace_events {
        config.notify_keyspace_events = shoal_wire::notify::parse(v.as_bytes()).unwrap_or_default();
    }
    Ok(())
}

/// How often a blocked wait checks that its keys' slots are still served here.
const BLOCK_FOLLOW: Duration = Duration::from_millis(200);

pub struct NodeService {
    state: Arc<NodeState>,
    stopping: watch::Receiver<bool>,
}

impl NodeService {
    pub fn new(state: Arc<NodeState>, stopping: watch::Receiver<bool>) -> NodeService {
        NodeService { state, stopping }
    }
}

type ReplyStream = Pin<Box<dyn Stream<Item = Result<BatchReply, Status>> + Send>>;

type ExportStream = Pin<Box<dyn Stream<Item = Result<ExportChunk, Status>> + Send>>;

#[tonic::async_trait]
impl Node for NodeService {
    type ExecuteStream = ReplyStream;
    type ExportSlotsStream = ExportStream;
    type SubscribeStream = crate::pubsub::stream::DeliveryStream;

    async fn subscribe(
        &self,
        request: Request<Streaming<proto::SubscribeRequest>>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let stream =
            crate::pubsub::stream::open(self.state.clone(), request.into_inner(), self.stopping.clone());
        Ok(Response::new(stream))
    }

    async fn pub_sub_info(
        &self,
        request: Request<proto::PubSubQuery>,
    ) -> Result<Response<proto::Frame>, Status> {
        Ok(Response::new(self.state.pubsub.query(&request.into_inner())))
    }

    async fn execute(&self, request: Request<Streaming<Batch>>) -> Result<Response<ReplyStream>, Status> {
        let mut stopping = self.stopping.clone();
        self.state.metrics.streams.add(1);
        Ok(Response::new(Box::pin(Replies {
            inbound: request.into_inner(),
            state: self.state.clone(),
            stop: Box::pin(async move {
                let _ = stopping.wait_for(|s| *s).await;
            }),
            stopping: false,
            done: false,
            assembler: OpAssembler::default(),
            running: None,
            deferred: Vec::new(),
            next_deferred: 1,
            deferred_alive: None,
        })))
    }

    async fn kill_script(
        &self,
        _request: Request<proto::KillScriptRequest>,
    ) -> Result<Response<proto::KillScriptReply>, Status> {
        use crate::script::Kill;
        use proto::kill_script_reply::Outcome;
        let outcome = match self.state.scripts.kill() {
            Kill::NotBusy => Outcome::NotBusy,
            Kill::Killed => Outcome::Killed,
            Kill::Unkillable => Outcome::Unkillable,
        };
        Ok(Response::new(proto::KillScriptReply { outcome: outcome as i32 }))
    }

    async fn block(&self, request: Request<proto::BlockRequest>) -> Result<Response<proto::Reply>, Status> {
        let req = request.into_inner();
        let op = req.op.ok_or_else(|| Status::invalid_argument("a Block call needs an op"))?;
        let store = &self.state.store;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let version = req.topology_version;
        let id =
            match crate::ops::block_or_queue(store, &self.state.membership.view(), version, op.clone(), tx) {
                Ok(reply) => return Ok(Response::new(reply)),
                Err(id) => id,
            };
        // Withdraws the wait however this call ends (cancelled: the client went away).
        struct Withdraw<'a>(&'a crate::store::Store, u64);
        impl Drop for Withdraw<'_> {
            fn drop(&mut self) {
                crate::ops::withdraw(self.0, self.1);
            }
        }
        let _withdraw = Withdraw(store, id);
        let timeout =
            (req.timeout_ms > 0).then(|| tokio::time::Instant::now() + Duration::from_millis(req.timeout_ms));
        let until = async {
            match timeout {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(until, rx);
        // The slot may move away while the client waits: checked on a short period (a move is
        // rare; the check is one lookup per key), then the router blocks again on the new owner.
        let mut follow = tokio::time::interval(BLOCK_FOLLOW);
        let mut stopping = self.stopping.clone();
        let answer = loop {
            tokio::select! {
                served = &mut rx => break served.unwrap_or_else(|_| crate::ops::error("ERR blocked wait ended")),
                _ = &mut until => {
                    if crate::ops::withdraw(store, id) {
                        break proto::Reply { kind: Some(proto::reply::Kind::Nil(proto::Empty {})) };
                    }
                    // Served at the same moment: the reply is on its way.
                }
                _ = follow.tick() => {
                    let view = self.state.membership.view();
                    if let Err(v) = crate::ops::still_served(&view, version, &op)
                        && crate::ops::withdraw(store, id)
                    {
                        break proto::Reply { kind: Some(proto::reply::Kind::Moved(v)) };
                    }
                }
                _ = stopping.wait_for(|s| *s) => {
                    // Shutting down: hand the client back to its router (as `moved`), which
                    // blocks again on the node that owns the keys by then.
                    if crate::ops::withdraw(store, id) {
                        let version = self.state.membership.view().version();
                        break proto::Reply { kind: Some(proto::reply::Kind::Moved(version)) };
                    }
                }
            }
        };
        Ok(Response::new(answer))
    }

    async fn stats(&self, _request: Request<StatsRequest>) -> Result<Response<proto::NodeStats>, Status> {
        Ok(Response::new(self.state.stats()))
    }

    async fn configure(&self, request: Request<NodeSettings>) -> Result<Response<NodeSettings>, Status> {
        let change = request.into_inner();
        let now = self.state.configure(&change).map_err(Status::invalid_argument)?;
        // Like Redis, start evicting at once when the limit drops below what is used (in the
        // background, one key at a time; writes evict as well).
        if change.maxmemory.is_some() || change.maxmemory_policy.is_some() {
            let store = self.state.store.clone();
            tokio::task::spawn_blocking(move || {
                let _ = store.make_room();
            });
        }
        Ok(Response::new(now))
    }

    async fn snapshot(&self, _request: Request<SnapshotRequest>) -> Result<Response<SnapshotInfo>, Status> {
        match self.state.persistence.snapshot().await {
            Ok(_) => Ok(Response::new(self.state.persistence.info())),
            Err(PersistError::Disabled) => Err(Status::failed_precondition("this node has no --data-dir")),
            Err(e) => Err(Status::internal(e.to_string())),
        }
    }

    async fn get_topology(
        &self,
        _request: Request<GetTopologyRequest>,
    ) -> Result<Response<TopologyDoc>, Status> {
        match &self.state.membership.view().topology {
            Some(t) => Ok(Response::new(TopologyDoc { json: t.to_json() })),
            None => Err(Status::not_found("this node has no topology")),
        }
    }

    async fn update_topology(&self, request: Request<TopologyDoc>) -> Result<Response<TopologyAck>, Status> {
        let t = shoal_wire::Topology::from_json(&request.into_inner().json)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let version = self.state.membership.adopt(t);
        Ok(Response::new(TopologyAck { version }))
    }

    async fn export_slots(&self, request: Request<ExportRequest>) -> Result<Response<ExportStream>, Status> {
        let req = request.into_inner();
        let (first, last) = (req.first_slot, req.last_slot);
        if first > last || last as usize >= shoal_wire::SLOT_COUNT {
            return Err(Status::invalid_argument(format!("bad slot range {first}-{last}")));
        }
        if req.topology_version != 0 {
            let membership = &self.state.membership;
            membership
                .view()
                .check_export(first as u16, last as u16, req.topology_version)
                .map_err(Status::failed_precondition)?;
            // Batches checked against the view from before the move may still be writing to
            // these slots; the export must see their writes.
            if !membership.wait_for_retired_views(EXPORT_QUIESCE).await {
                return Err(Status::unavailable("batches from before the move are still running"));
            }
        }
        let chunk_bytes =
            if req.max_chunk_bytes == 0 { DEFAULT_CHUNK_BYTES } else { req.max_chunk_bytes as usize };
        // A small channel: the export runs as fast as the receiver takes chunks, no faster.
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let store = self.state.store.clone();
        tokio::task::spawn_blocking(move || export(&store, first as u16, last as u16, chunk_bytes, tx));
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }
}

/// Streams slots `first..=last` into `tx` in chunks of about `chunk_bytes` (blocking thread).
fn export(
    store: &Store,
    first: u16,
    last: u16,
    chunk_bytes: usize,
    tx: tokio::sync::mpsc::Sender<Result<ExportChunk, Status>>,
) {
    let plan = store.plan(first..=last);
    let keys_estimate = (plan.memory_entries() + store.base_entries_in(first..=last)) as u64;
    let mut chunk = ExportChunk { keys_estimate, ..Default::default() };
    let mut size = 0;
    let mut entries = Vec::new();
    for slot in first..=last {
        for e in store.slot_entries(slot, &plan) {
            // A large value leaves as several partial entries, over as many chunks as it needs.
            let entry = ExportEntry {
                slot: u32::from(slot),
                key: e.key,
                value: e.value,
                expire_at_ms: e.expire_at,
                partial: false,
                value_type: e.value_type,
            };
            pieces::push_entry(entry, &mut entries);
            for part in entries.drain(..) {
                size += part.key.len() + part.value.len() + 16;
                chunk.entries.push(part);
                if size >= chunk_bytes {
                    chunk.complete_below = u32::from(slot);
                    let full =
                        std::mem::replace(&mut chunk, ExportChunk { keys_estimate, ..Default::default() });
                    if tx.blocking_send(Ok(full)).is_err() {
                        return;
                    }
                    size = 0;
                }
            }
        }
    }
    chunk.complete_below = u32::from(last) + 1;
    let _ = tx.blocking_send(Ok(chunk));
}

/// The reply side of an `Execute` stream: each poll yields the next message of replies, applying
/// ops of the batch in hand (or of the next received batch) until the message is full.
struct Replies {
    inbound: Streaming<Batch>,
    state: Arc<NodeState>,
    /// Resolves when the node starts shutting down.
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    stopping: bool,
    done: bool,
    /// Ops that arrive in pieces are put together here (they never span streams).
    assembler: OpAssembler,
    running: Option<Running>,
    /// Scripts past busy-reply-threshold whose replies were deferred, by id.
    deferred: Vec<(u64, oneshot::Receiver<Reply>)>,
    next_deferred: u64,
    /// While replies are deferred: when to send the next keep-alive message.
    deferred_alive: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// A batch being applied.
struct Running {
    id: u64,
    version: u64,
    /// The view the batch is checked against, held until its last op is applied (so an export
    /// waiting for older views also waits for this batch).
    view: Arc<NodeView>,
    ops: VecDeque<Op>,
    /// Replies (or pieces of them) not sent yet.
    outbox: VecDeque<Reply>,
    /// What the next op waits for, if anything.
    waiting: Option<Waiting>,
    /// While ops are held by a script: when the next keep-alive message is due.
    alive_at: Option<tokio::time::Instant>,
}

/// What becomes of one op now.
enum Step {
    Reply(Reply),
    /// A piece of a larger op (its reply comes with the last piece).
    Piece,
    /// A script runs on the script thread (set once it holds the store); its reply will arrive
    /// here.
    Script(oneshot::Receiver<Reply>, Arc<std::sync::atomic::AtomicBool>),
    /// A script holds the store: the op waits for it.
    Held(Op),
}

/// Why a batch is paused. Its later ops wait (their order holds); other streams go on.
enum Waiting {
    /// The script's reply, whether the script holds the store yet, and when to tell the router
    /// the stream is alive meanwhile.
    Script(oneshot::Receiver<Reply>, Arc<std::sync::atomic::AtomicBool>, Pin<Box<tokio::time::Sleep>>),
    /// Try the held op again after a moment (and keep the router's calls alive meanwhile).
    Gate(Pin<Box<tokio::time::Sleep>>, tokio::time::Instant),
}

/// While a script runs, the stream sends an empty message this often: the router then knows the
/// node is alive, and calls queued behind the script (and the script's own) do not time out.
const KEEPALIVE: Duration = Duration::from_millis(100);

/// How often an op held by a running script tries again (a script that runs this long is rare;
/// one that runs past busy-reply-threshold gets the op answered BUSY instead).
const GATE_RETRY: Duration = Duration::from_millis(1);

impl Running {
    fn start(state: &NodeState, batch: Batch) -> Running {
        state.metrics.record_batch(batch.ops.len());
        Running {
            id: batch.id,
            version: batch.topology_version,
            view: state.membership.view(),
            ops: batch.ops.into(),
            outbox: VecDeque::new(),
            waiting: None,
            alive_at: None,
        }
    }

    /// Takes one received op as far as it can go now.
    fn step(&self, state: &NodeState, assembler: &mut OpAssembler, op: Op) -> Step {
        let op = match assembler.feed(op) {
            Fed::Piece => return Step::Piece,
            Fed::Op(op) => op,
            Fed::Failed(e) => return Step::Reply(crate::ops::error(&format!("ERR {e}"))),
        };
        if crate::script::Scripts::is_script_op(&op) {
            let (rx, started) = state.scripts.submit(op, self.view.clone(), self.version);
            return Step::Script(rx, started);
        }
        if let Some(proto::op::Kind::ScriptAdmin(a)) = &op.kind {
            return Step::Reply(state.scripts.admin(a));
        }
        match crate::ops::try_apply_checked(&state.store, &self.view, self.version, op) {
            Ok(r) => Step::Reply(r),
            // A script holds the store: wait without the thread, or answer BUSY once it has
            // held it past busy-reply-threshold.
            Err(_) if state.scripts.busy() => Step::Reply(crate::ops::error(crate::script::BUSY)),
            Err(op) if state.scripts.active() => Step::Held(op),
            // A transaction holds it, for a moment: wait here.
            Err(op) => Step::Reply(crate::ops::apply_checked(&state.store, &self.view, self.version, op)),
        }
    }

    /// Queues a reply, in pieces if it is large.
    fn push_reply(&mut self, r: Reply) {
        if r.encoded_len() <= pieces::PIECE_BYTES {
            self.outbox.push_back(r);
        } else {
            pieces::push_reply(r, &mut self.outbox);
        }
    }

    /// The next message: queued replies and replies of further ops, until about
    /// [`REPLY_MESSAGE_BYTES`] are in it or the batch is done.
    fn next_message(&mut self, state: &NodeState, assembler: &mut OpAssembler) -> BatchReply {
        let mut replies = Vec::new();
        let mut bytes = 0;
        while bytes < REPLY_MESSAGE_BYTES {
            if let Some(r) = self.outbox.pop_front() {
                bytes += r.encoded_len();
                replies.push(r);
                continue;
            }
            if self.waiting.is_some() {
                break;
            }
            let Some(op) = self.ops.pop_front() else { break };
            let r = match self.step(state, assembler, op) {
                Step::Reply(r) => r,
                Step::Piece => continue,
                Step::Script(rx, started) => {
                    self.waiting =
                        Some(Waiting::Script(rx, started, Box::pin(tokio::time::sleep(KEEPALIVE))));
                    break;
                }
                Step::Held(op) => {
                    self.ops.push_front(op);
                    let alive_at = self.alive_at.unwrap_or_else(|| tokio::time::Instant::now() + KEEPALIVE);
                    self.waiting = Some(Waiting::Gate(Box::pin(tokio::time::sleep(GATE_RETRY)), alive_at));
                    break;
                }
            };
            let size = r.encoded_len();
            if size <= pieces::PIECE_BYTES {
                // The common case: a small reply goes straight into the message.
                bytes += size;
                replies.push(r);
            } else {
                pieces::push_reply(r, &mut self.outbox);
            }
        }
        let more = !(self.ops.is_empty() && self.outbox.is_empty() && self.waiting.is_none());
        BatchReply { id: self.id, replies, more, deferred: Vec::new() }
    }
}

impl Stream for Replies {
    type Item = Result<BatchReply, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        if !self.stopping && self.stop.as_mut().poll(cx).is_ready() {
            self.stopping = true;
        }
        let this = &mut *self;
        if let Some(message) = this.poll_deferred(cx) {
            return Poll::Ready(Some(Ok(message)));
        }
        if this.running.is_none() {
            // Shutting down: the batch in hand (if any) is finished, no new one is taken.
            if this.stopping {
                this.done = true;
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.inbound).poll_next(cx) {
                Poll::Ready(Some(Ok(batch))) => this.running = Some(Running::start(&this.state, batch)),
                Poll::Ready(Some(Err(status))) => {
                    tracing::debug!(%status, "execute stream ended by the client");
                    this.done = true;
                    return Poll::Ready(None);
                }
                Poll::Ready(None) => {
                    this.done = true;
                    return Poll::Ready(None);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
        let running = this.running.as_mut().expect("a batch in hand");
        loop {
            match running.waiting.as_mut() {
                Some(Waiting::Script(rx, started, keepalive)) => match Pin::new(&mut *rx).poll(cx) {
                    Poll::Pending => {
                        if keepalive.as_mut().poll(cx).is_ready() {
                            // Past busy-reply-threshold, the script no longer holds this stream:
                            // its reply is deferred and the ops after it go on (BUSY meanwhile).
                            // Only once it holds the store, so that none of them runs before it.
                            if started.load(std::sync::atomic::Ordering::Acquire) && this.state.scripts.busy()
                            {
                                let Some(Waiting::Script(rx, ..)) = running.waiting.take() else {
                                    unreachable!()
                                };
                                let id = this.next_deferred;
                                this.next_deferred += 1;
                                this.deferred.push((id, rx));
                                running
                                    .outbox
                                    .push_back(Reply { kind: Some(proto::reply::Kind::Deferred(id)) });
                                continue;
                            }
                            keepalive.as_mut().reset(tokio::time::Instant::now() + KEEPALIVE);
                            let alive = BatchReply { id: running.id, more: true, ..Default::default() };
                            return Poll::Ready(Some(Ok(alive)));
                        }
                        return Poll::Pending;
                    }
                    Poll::Ready(reply) => {
                        running.waiting = None;
                        running.push_reply(
                            reply.unwrap_or_else(|_| crate::ops::error("ERR the script engine is gone")),
                        );
                    }
                },
                Some(Waiting::Gate(sleep, alive_at)) => match sleep.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(()) => {
                        let now = tokio::time::Instant::now();
                        let due = now >= *alive_at;
                        running.alive_at = Some(if due { now + KEEPALIVE } else { *alive_at });
                        running.waiting = None;
                        if due {
                            let alive = BatchReply { id: running.id, more: true, ..Default::default() };
                            return Poll::Ready(Some(Ok(alive)));
                        }
                    }
                },
                None => {}
            }
            let message = running.next_message(&this.state, &mut this.assembler);
            // Nothing to send yet and something to wait for: wait (registering the wake-up).
            if message.replies.is_empty() && running.waiting.is_some() {
                continue;
            }
            if !message.more {
                this.running = None;
            }
            return Poll::Ready(Some(Ok(message)));
        }
    }
}

impl Replies {
    /// A message of deferred replies that have arrived, or a keep-alive while some are still
    /// running (so that the router's calls waiting for them do not time out).
    fn poll_deferred(&mut self, cx: &mut Context<'_>) -> Option<BatchReply> {
        if self.deferred.is_empty() {
            self.deferred_alive = None;
            return None;
        }
        let mut done = Vec::new();
        self.deferred.retain_mut(|(id, rx)| match Pin::new(rx).poll(cx) {
            Poll::Ready(reply) => {
                let reply = reply.unwrap_or_else(|_| crate::ops::error("ERR the script engine is gone"));
                done.push(proto::DeferredReply { id: *id, reply: Some(reply) });
                false
            }
            Poll::Pending => true,
        });
        if !done.is_empty() {
            return Some(BatchReply { id: 0, deferred: done, ..Default::default() });
        }
        let alive = self.deferred_alive.get_or_insert_with(|| Box::pin(tokio::time::sleep(KEEPALIVE)));
        if alive.as_mut().poll(cx).is_ready() {
            alive.as_mut().reset(tokio::time::Instant::now() + KEEPALIVE);
            return Some(BatchReply { id: 0, ..Default::default() });
        }
        None
    }
}

impl Drop for Replies {
    fn drop(&mut self) {
        self.state.metrics.streams.add(-1);
    }
}
