//! The `shoal.v1.Node` gRPC service: its RPCs, over the node's shared state
//! ([`crate::state::NodeState`]). The `Execute` stream, the data path, is [`crate::execute`];
//! `Subscribe` is [`crate::pubsub::stream`].

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use shoal_wire::proto::{
    self, Batch, ExportChunk, ExportRequest, GetTopologyRequest, NodeSettings, SnapshotInfo, SnapshotRequest,
    StatsRequest, TopologyAck, TopologyDoc, node_server::Node,
};
use tokio::sync::watch;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::execute::ReplyStream;
use crate::persistence::PersistError;
use crate::state::NodeState;
use crate::store::Store;

/// Export chunks are cut at about this many bytes unless the caller asks otherwise.
const DEFAULT_CHUNK_BYTES: usize = 1 << 20;
/// How long an export waits for batches from before a move to finish.
const EXPORT_QUIESCE: std::time::Duration = std::time::Duration::from_secs(5);

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

type ExportStream = Pin<Box<dyn Stream<Item = Result<ExportChunk, Status>> + Send>>;

#[tonic::async_trait]
impl Node for NodeService {
    type ExecuteStream = ReplyStream;
    type ExportSlotsStream = ExportStream;
    type SubscribeStream = crate::pubsub::stream::DeliveryStream;
    type HoldStream = crate::held::HeldStream;

    async fn hold(
        &self,
        request: Request<Streaming<proto::HoldRequest>>,
    ) -> Result<Response<Self::HoldStream>, Status> {
        Ok(Response::new(crate::held::open(self.state.clone(), request.into_inner())))
    }

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

    async fn clients(
        &self,
        request: Request<proto::ClientsQuery>,
    ) -> Result<Response<proto::ClientsReply>, Status> {
        Ok(Response::new(self.state.pubsub.ask_clients(request.into_inner()).await))
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
        request: Request<proto::KillScriptRequest>,
    ) -> Result<Response<proto::KillScriptReply>, Status> {
        use crate::script::Kill;
        use proto::kill_script_reply::Outcome;
        let outcome = match self.state.scripts.kill(request.into_inner().function) {
            Kill::NotBusy => Outcome::NotBusy,
            Kill::Killed => Outcome::Killed,
            Kill::Unkillable => Outcome::Unkillable,
            Kill::OtherKind => Outcome::OtherKind,
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
        // (Not on this thread: a script may hold the store; see `execute::wait_for_gate`.)
        let shared = match crate::execute::wait_for_gate(&self.state).await {
            Ok(shared) => shared,
            Err(busy) => return Ok(Response::new(busy)),
        };
        // (The view is a temporary: one kept while the client waits would hold up slot exports,
        // which wait for views from before a move to be let go.)
        let id = match crate::ops::block_or_queue(
            store,
            shared,
            &self.state.membership.view(),
            version,
            op.clone(),
            req.watch,
            tx,
        ) {
            Ok(reply) => return Ok(Response::new(reply)),
            Err(id) => id,
        };
        // Withdraws the wait however this call ends (cancelled: the client went away).
        struct Withdraw<'a>(&'a Store, u64);
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
                        break proto::Reply { kind: Some(proto::reply::Kind::Nil(proto::Empty {})), ..Default::default() };
                    }
                    // Served at the same moment: the reply is on its way.
                }
                _ = follow.tick() => {
                    let view = self.state.membership.view();
                    if let Err(v) = crate::ops::still_served(&view, version, &op)
                        && crate::ops::withdraw(store, id)
                    {
                        break proto::Reply { kind: Some(proto::reply::Kind::Moved(v)), ..Default::default() };
                    }
                }
                _ = stopping.wait_for(|s| *s) => {
                    // Shutting down: hand the client back to its router (as `moved`), which
                    // blocks again on the node that owns the keys by then.
                    if crate::ops::withdraw(store, id) {
                        let version = self.state.membership.view().version();
                        break proto::Reply { kind: Some(proto::reply::Kind::Moved(version)), ..Default::default() };
                    }
                }
            }
        };
        Ok(Response::new(answer))
    }

    async fn stats(&self, request: Request<StatsRequest>) -> Result<Response<proto::NodeStats>, Status> {
        let probe = request.get_ref();
        if probe.failover_writer {
            self.state.membership.writer_probed(probe.probe, probe.acked_probe, probe.down_after_ms);
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

    async fn prepare(
        &self,
        request: Request<proto::PrepareRequest>,
    ) -> Result<Response<proto::Reply>, Status> {
        Ok(Response::new(crate::twophase::prepare(&self.state, request.into_inner()).await))
    }

    async fn decide(&self, request: Request<proto::DecideRequest>) -> Result<Response<proto::Reply>, Status> {
        Ok(Response::new(crate::twophase::decide(&self.state, request.into_inner()).await))
    }

    async fn decision(
        &self,
        request: Request<proto::DecisionQuery>,
    ) -> Result<Response<proto::DecisionReply>, Status> {
        let committed = self.state.decisions.question(&request.into_inner().txid);
        Ok(Response::new(proto::DecisionReply { committed }))
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
        let version = self.state.membership.adopt_off_thread(t).await;
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
        if first.replica.is_empty() {
            return Err(Status::invalid_argument(
                "a replica names itself (its address) in its first message",
            ));
        }
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
        let listed = self.state.membership.listed_replicas();
        let replicas = crate::replication::feed::wait(
            &self.state.store,
            &self.state.membership.replication,
            &listed,
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
        tokio::task::spawn_blocking(move || {
            crate::export::export(&store, first as u16, last as u16, chunk_bytes, tx)
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }
}
