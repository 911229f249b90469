//! The node's gRPC server over real sockets.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use shoal_node::server::{NodeHandle, ServeOptions};
use shoal_node::store::{Store, StoreConfig, SystemClock};
use shoal_wire::proto::node_client::NodeClient;
use shoal_wire::proto::{Batch, Get, Op, Set, StatsRequest, op::Kind, reply};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};

async fn start(options: ServeOptions) -> NodeHandle {
    let store = Arc::new(Store::new(StoreConfig::default(), Arc::new(SystemClock)));
    NodeHandle::start("127.0.0.1:0".parse().unwrap(), store, options).await.unwrap()
}

fn set(k: &str, v: &str) -> Op {
    Op {
        kind: Some(Kind::Set(Set {
            key: Bytes::from(k.to_string()),
            value: Bytes::from(v.to_string()),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn get(k: &str) -> Op {
    Op {
        kind: Some(Kind::Get(Get { key: Bytes::from(k.to_string()), ..Default::default() })),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_answered_in_order_on_one_stream() {
    let node = start(ServeOptions::default()).await;
    let mut client = NodeClient::connect(format!("http://{}", node.addr)).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let mut replies =
        client.execute(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    tx.send(Batch { id: 1, ops: vec![set("a", "1"), set("b", "2"), get("a")], topology_version: 0 })
        .await
        .unwrap();
    tx.send(Batch { id: 2, ops: vec![get("b"), get("missing")], topology_version: 0 }).await.unwrap();
    let first = replies.message().await.unwrap().unwrap();
    let second = replies.message().await.unwrap().unwrap();
    assert_eq!((first.id, first.replies.len()), (1, 3));
    assert_eq!(first.replies[2].kind, Some(reply::Kind::Value(Bytes::from("1"))));
    assert_eq!(second.id, 2);
    assert_eq!(second.replies[0].kind, Some(reply::Kind::Value(Bytes::from("2"))));
    assert!(matches!(second.replies[1].kind, Some(reply::Kind::Nil(_))));
    let stats = client.stats(StatsRequest::default()).await.unwrap().into_inner();
    assert_eq!((stats.keys, stats.ops, stats.batches), (2, 5, 2));
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_service_and_long_uptime() {
    // The drain timeout must only run after a shutdown signal: a node with a tiny one keeps
    // serving long past it.
    let node = start(ServeOptions { drain_timeout: Duration::from_millis(50), ..Default::default() }).await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", node.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status =
        health.check(HealthCheckRequest { service: "shoal.v1.Node".into() }).await.unwrap().into_inner();
    assert_eq!(status.status(), ServingStatus::Serving);
    let overall = health.check(HealthCheckRequest { service: String::new() }).await.unwrap().into_inner();
    assert_eq!(overall.status(), ServingStatus::Serving);
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_open_streams_after_the_batch_in_hand() {
    let node = start(ServeOptions::default()).await;
    let mut client = NodeClient::connect(format!("http://{}", node.addr)).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let mut replies =
        client.execute(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    tx.send(Batch { id: 1, ops: vec![set("k", "v")], topology_version: 0 }).await.unwrap();
    assert_eq!(replies.message().await.unwrap().unwrap().id, 1);
    let stopping = tokio::spawn(node.shutdown());
    // The stream ends (the client is told promptly), and shutdown completes even though this
    // client never closes its side.
    let end = tokio::time::timeout(Duration::from_secs(5), replies.message()).await.expect("stream ends");
    assert!(matches!(end, Ok(None) | Err(_)));
    tokio::time::timeout(Duration::from_secs(5), stopping)
        .await
        .expect("shutdown completes")
        .unwrap()
        .unwrap();
    drop(tx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_streams_a_slot_range_from_memory_and_snapshot_in_order() {
    use shoal_node::persistence::write_snapshot;
    use shoal_wire::proto::ExportRequest;
    let dir = tempfile::tempdir().unwrap();
    // Keys in the snapshot underneath and keys written after the restart, across many slots.
    let first = Arc::new(Store::new(StoreConfig::default(), Arc::new(SystemClock)));
    for i in 0..2000 {
        first.set(format!("snap{i}").as_bytes(), b"s", Default::default()).unwrap();
    }
    write_snapshot(&first, dir.path(), 2).unwrap();
    let store = Arc::new(Store::new(StoreConfig::default(), Arc::new(SystemClock)));
    let options = ServeOptions { data_dir: Some(dir.path().to_path_buf()), ..Default::default() };
    let node = NodeHandle::start("127.0.0.1:0".parse().unwrap(), store.clone(), options).await.unwrap();
    for i in 0..2000 {
        store.set(format!("mem{i}").as_bytes(), b"m", Default::default()).unwrap();
    }
    store.set(b"snap1", b"overwritten", Default::default()).unwrap();
    store.del(b"snap2");

    let (lo, hi) = (4000u16, 9000u16);
    let mut client = NodeClient::connect(format!("http://{}", node.addr)).await.unwrap();
    let req = ExportRequest {
        first_slot: lo.into(),
        last_slot: hi.into(),
        max_chunk_bytes: 4096,
        topology_version: 0,
    };
    let mut stream = client.export_slots(req).await.unwrap().into_inner();
    let mut got = Vec::new();
    let mut chunks = 0;
    let mut complete = 0;
    while let Some(chunk) = stream.message().await.unwrap() {
        chunks += 1;
        assert!(chunk.complete_below >= complete, "progress only moves forward");
        complete = chunk.complete_below;
        got.extend(chunk.entries);
    }
    assert_eq!(complete, u32::from(hi) + 1);
    assert!(chunks > 3, "bounded chunks: {chunks}");
    let order: Vec<(u32, &[u8])> = got.iter().map(|e| (e.slot, &e.key[..])).collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "sorted by (slot, key), no duplicates");
    let expected: Vec<String> = (0..2000)
        .flat_map(|i| [format!("snap{i}"), format!("mem{i}")])
        .filter(|k| k != "snap2" && (lo..=hi).contains(&shoal_wire::key_slot(k.as_bytes())))
        .collect();
    assert_eq!(got.len(), expected.len());
    for e in &got {
        assert_eq!(e.slot, u32::from(shoal_wire::key_slot(&e.key)));
        let want: &[u8] = match &e.key[..] {
            b"snap1" => b"overwritten",
            k if k.starts_with(b"snap") => b"s",
            _ => b"m",
        };
        assert_eq!(&e.value[..], want);
    }
    let bad = client
        .export_slots(ExportRequest { first_slot: 10, last_slot: 5, max_chunk_bytes: 0, topology_version: 0 })
        .await;
    assert_eq!(bad.unwrap_err().code(), tonic::Code::InvalidArgument);
    node.shutdown().await.unwrap();
}

/// Established TCP connections accepted on local port `port` (from `/proc/net/tcp`).
fn accepted_on(port: u16) -> usize {
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local =
                f.get(1).and_then(|a| a.rsplit(':').next()).and_then(|p| u16::from_str_radix(p, 16).ok());
            local == Some(port) && f.get(3) == Some(&"01")
        })
        .count()
}

/// A client in the node's own process (an embedded cluster's router and nodes) reaches it
/// through an in-memory pipe (`shoal_wire::local`), not a loopback TCP connection; once the node
/// stops, a dial goes over TCP again and finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_in_the_nodes_process_reaches_it_through_a_pipe() {
    use shoal_wire::client::{self, ClientOptions};
    let node = start(ServeOptions::default()).await;
    let (addr, port) = (node.addr.to_string(), node.addr.port());
    let mut c = client::connect(&addr, &ClientOptions::default()).await.unwrap();
    let batch = Batch { id: 1, ops: vec![set("k", "v"), get("k")], ..Default::default() };
    let mut replies = c.execute(tokio_stream::iter(vec![batch])).await.unwrap().into_inner();
    let reply = replies.message().await.unwrap().unwrap();
    assert!(matches!(&reply.replies[1].kind, Some(reply::Kind::Value(v)) if v == "v"), "{reply:?}");
    assert_eq!(accepted_on(port), 0, "no TCP connection was accepted");
    // The count is a real one: a TCP client shows in it.
    let mut tcp = NodeClient::connect(format!("http://{addr}")).await.unwrap();
    tcp.stats(StatsRequest::default()).await.unwrap();
    assert_eq!(accepted_on(port), 1);
    drop((c, replies, tcp));
    node.shutdown().await.unwrap();
    assert!(!shoal_wire::local::is_local(&addr), "a stopped node unregisters");
    let options = ClientOptions { connect_timeout: Duration::from_millis(500), ..Default::default() };
    assert!(client::connect(&addr, &options).await.is_err(), "nothing listens there any more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_in_the_nodes_process_opens_its_data_stream_without_the_wire() {
    use shoal_wire::auth::{ClusterSecret, Credentials};
    use shoal_wire::local::open_execute;
    use tokio_stream::StreamExt;
    let secret = ClusterSecret::new("the-cluster-secret-of-this-test").unwrap();
    let node = start(ServeOptions { cluster_secret: Some(secret.clone()), ..Default::default() }).await;
    let addr = node.addr.to_string();
    let creds = Credentials::secret(Some(secret));
    // The node's check holds in-process too: a wrong secret, or none, is refused.
    let wrong = Credentials::secret(Some(ClusterSecret::new("another-cluster-secret-here").unwrap()));
    for refused in [wrong, Credentials::default()] {
        let status = open_execute(&addr, &refused).expect("registered").err().expect("refused");
        assert_eq!(status.code(), tonic::Code::Unauthenticated);
    }
    let open = open_execute(&addr, &creds).expect("registered").expect("the right secret");
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut replies = open(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok)));
    tx.send(Batch { id: 1, ops: vec![set("k", "v"), get("k")], ..Default::default() }).await.unwrap();
    let reply = replies.next().await.unwrap().unwrap();
    assert_eq!(reply.id, 1);
    assert!(matches!(&reply.replies[1].kind, Some(reply::Kind::Value(v)) if v == "v"), "{reply:?}");
    // What it wrote is the node's: a gRPC client reads it.
    let mut c = shoal_wire::client::connect(
        &addr,
        &shoal_wire::client::ClientOptions::default().with_credentials(creds.clone()),
    )
    .await
    .unwrap();
    let mut over_grpc = c
        .execute(tokio_stream::iter(vec![Batch { id: 2, ops: vec![get("k")], ..Default::default() }]))
        .await
        .unwrap()
        .into_inner();
    let reply = over_grpc.message().await.unwrap().unwrap();
    assert!(matches!(&reply.replies[0].kind, Some(reply::Kind::Value(v)) if v == "v"), "{reply:?}");
    drop((c, over_grpc));
    // A node that stops ends the stream (after the batch in hand) and unregisters; its shutdown
    // (and the final snapshot it takes with a data directory) waits for the stream to end.
    let stopping = tokio::spawn(node.shutdown());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!stopping.is_finished(), "the node stopped with an in-process stream still open");
    assert!(
        tokio::time::timeout(Duration::from_secs(10), replies.next())
            .await
            .expect("the stream ends")
            .is_none(),
        "no reply without a batch"
    );
    drop((tx, replies));
    stopping.await.unwrap().unwrap();
    assert!(open_execute(&addr, &creds).is_none(), "a stopped node unregisters");
}
