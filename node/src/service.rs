//! The `shoal.v1.Node` gRPC service: the node's state ([`NodeState`]: store, scripts, pub/sub,
//! persistence, membership) and its RPCs. The `Execute` stream, the data path, is
//! [`crate::execute`]; `Subscribe` is [`crate::pubsub::stream`].

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shoal_wire::pieces;
use shoal_wire::proto::{
    self, Batch, BatchReply, ExportChunk, ExportEntry, ExportRequest, GetTopologyRequest, NodeSettings,
    NodeStats, SnapshotInfo, SnapshotRequest, StatsRequest, TopologyAck, TopologyDoc, node_server::Node,
};
use tokio::sync::watch;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::membership::Membership;
use crate::metrics::NodeMetrics;
use crate::persistence::{PersistError, Persistence};
use crate::pubsub::PubSub;
use crate::store::{EvictionPolicy, Store, StoreConfig};

/// Export chunks are cut at about this many bytes unless the caller asks otherwise.
const DEFAULT_CHUNK_BYTES: usize = 1 << 20;
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
        crate::execute::whole(self, batch)
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
            oldest_overdue_ms: self.store.oldest_overdue_ms(),
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
            ..self.replication_stats()
        }
    }

    /// The replication part of the stats.
    fn replication_stats(&self) -> NodeStats {
        let repl = &self.membership.replication;
        let link = repl.link();
        let replica = !link.primary_addr.is_empty();
        NodeStats {
            role: if replica { "slave" } else { "master" }.to_string(),
            run_id: repl.run_id.clone(),
            repl_offset: if replica { link.offset } else { self.store.events.changes.end() },
            fenced: self.membership.fenced(),
            handing_over: repl.handing_over(),
            handover_to: repl.handover_to(),
            primary_addr: link.primary_addr,
            primary_run_id: link.primary_run_id,
            synced: link.synced,
            primary_link_up: link.up,
            partial_cuts_dropped: repl.partial_cuts_dropped(),
            replicas: if replica { Vec::new() } else { repl.replicas() },
            ..Default::default()
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
            cluster_slot_stats_enabled: Some(self.store.slot_traffic.enabled()),
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
            slot_stats: store.slot_traffic.enabled(),
            ..store.config().clone()
        };
        apply_settings(&mut now, change)?;
        if now.limits != store.limits() {
            store.set_limits(now.limits);
        }
        store.set_policy(now.policy);
        store.set_maxmemory(now.maxmemory);
        store.events.set_flags(now.notify_keyspace_events);
        store.slot_traffic.set_enabled(now.slot_stats);
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
    if let Some(on) = change.cluster_slot_stats_enabled {
        config.slot_stats = on;
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

use crate::execute::ReplyStream;

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
        Ok(Response::new(crate::execute::open(
            self.state.clone(),
            Box::pin(request.into_inner()),
            self.stopping.clone(),
        )))
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
        self.state.membership.check_stall();
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

    async fn stats(&self, request: Request<StatsRequest>) -> Result<Response<proto::NodeStats>, Status> {
        if request.get_ref().failover_writer {
            self.state.membership.replication.saw_writer();
        }
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

    async fn ping(
        &self,
        _request: Request<proto::PingRequest>,
    ) -> Result<Response<proto::PingReply>, Status> {
        Ok(Response::new(proto::PingReply {}))
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

    type ReplicateStream = Pin<Box<dyn Stream<Item = Result<proto::ReplicationChunk, Status>> + Send>>;

    async fn replicate(
        &self,
        request: Request<Streaming<proto::ReplicaAck>>,
    ) -> Result<Response<Self::ReplicateStream>, Status> {
        let mut acks = request.into_inner();
        let first = acks
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("a replica names itself in its first message"))?;
        // Only a serving primary feeds replicas: a fenced one may hold stale data (a replica
        // copying it would lose what it has), and a replica's copy may be partial (mid-sync).
        // The generation is read first: a demotion installs the view, then ends the generation,
        // so a feed that saw this process serving starts under a generation that ends with it.
        let generation = self.state.membership.replication.generation();
        if !self.state.membership.view().serving() {
            return Err(Status::unavailable(
                "this node does not serve its shard now (a replica, or a primary fenced until the failover writer confirms it)",
            ));
        }
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(crate::replication::feed::run(
            self.state.store.clone(),
            self.state.membership.replication.clone(),
            generation,
            first,
            acks,
            tx,
        ));
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn wait_replicas(
        &self,
        request: Request<proto::WaitRequest>,
    ) -> Result<Response<proto::WaitReply>, Status> {
        let req = request.into_inner();
        let timeout = (req.timeout_ms > 0).then(|| Duration::from_millis(req.timeout_ms));
        let replicas = crate::replication::feed::wait(
            &self.state.store,
            &self.state.membership.replication,
            req.numreplicas,
            timeout,
        )
        .await;
        Ok(Response::new(proto::WaitReply { replicas }))
    }

    async fn handover(
        &self,
        request: Request<proto::HandoverRequest>,
    ) -> Result<Response<proto::HandoverReply>, Status> {
        use crate::replication::handover::{self, HandoverError};
        let req = request.into_inner();
        let timeout = match req.timeout_ms {
            0 => handover::DEFAULT_TIMEOUT,
            ms => Duration::from_millis(ms),
        };
        let replica = (!req.replica.is_empty()).then_some(req.replica.as_str());
        match handover::run(&self.state.membership, replica, timeout).await {
            Ok(s) => Ok(Response::new(proto::HandoverReply { version: s.version, primary: s.primary })),
            Err(e @ (HandoverError::NotCaughtUp(_) | HandoverError::NotSwitched(..))) => {
                Err(Status::deadline_exceeded(e.to_string()))
            }
            Err(e @ HandoverError::Confirmed(_)) => Err(Status::aborted(e.to_string())),
            Err(e) => Err(Status::failed_precondition(e.to_string())),
        }
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
pub(crate) fn export(
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
