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
    }
}

fn get(k: &str) -> Op {
    Op { kind: Some(Kind::Get(Get { key: Bytes::from(k.to_string()) })) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_answered_in_order_on_one_stream() {
    let node = start(ServeOptions::default()).await;
    let mut client = NodeClient::connect(format!("http://{}", node.addr)).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let mut replies =
        client.execute(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    tx.send(Batch { id: 1, ops: vec![set("a", "1"), set("b", "2"), get("a")] }).await.unwrap();
    tx.send(Batch { id: 2, ops: vec![get("b"), get("missing")] }).await.unwrap();
    let first = replies.message().await.unwrap().unwrap();
    let second = replies.message().await.unwrap().unwrap();
    assert_eq!((first.id, first.replies.len()), (1, 3));
    assert_eq!(first.replies[2].kind, Some(reply::Kind::Value(Bytes::from("1"))));
    assert_eq!(second.id, 2);
    assert_eq!(second.replies[0].kind, Some(reply::Kind::Value(Bytes::from("2"))));
    assert!(matches!(second.replies[1].kind, Some(reply::Kind::Nil(_))));
    let stats = client.stats(StatsRequest {}).await.unwrap().into_inner();
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
    tx.send(Batch { id: 1, ops: vec![set("k", "v")] }).await.unwrap();
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
