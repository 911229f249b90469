//! The cluster secret on a node's gRPC port: every RPC is refused without it (and with a wrong
//! one), with a clear status, and counted; with it, the same calls are served. Also the
//! `shoal-node` binary's refusal to start without a secret unless told `--no-auth`. And node-link
//! mutual TLS: without a certificate from the cluster's CA no call reaches a service; replicas
//! follow their primary over it.

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use shoal_node::server::{NodeHandle, ServeOptions};
use shoal_node::store::{Store, StoreConfig, SystemClock};
use shoal_wire::Topology;
use shoal_wire::auth::{ClusterSecret, Credentials};
use shoal_wire::client::{self, Client, ClientOptions};
use shoal_wire::proto::{
    Batch, BlockRequest, ExportRequest, Flush, GetTopologyRequest, HandoverRequest, KillScriptRequest,
    NodeSettings, Op, PingRequest, PubSubQuery, ReplicaAck, Set, SnapshotRequest, StatsRequest,
    SubscribeRequest, TopologyDoc, WaitRequest, op::Kind, reply,
};
use shoal_wire::tls::{LinkTls, TlsFiles};
use tonic::Code;

async fn start(secret: &ClusterSecret) -> NodeHandle {
    let store = Arc::new(Store::new(StoreConfig::default(), Arc::new(SystemClock)));
    let options = ServeOptions { cluster_secret: Some(secret.clone()), ..Default::default() };
    NodeHandle::start("127.0.0.1:0".parse().unwrap(), store, options).await.unwrap()
}

fn op(kind: Kind) -> Op {
    Op { kind: Some(kind), ..Default::default() }
}

/// Every RPC of the node's API once, each reduced to its status code (Ok for a served call).
/// `Execute` runs a SET and a FLUSH, `UpdateTopology` offers a topology naming the node.
async fn every_rpc(c: &mut Client, addr: &str) -> Vec<(&'static str, Code)> {
    fn code<T>(r: Result<T, tonic::Status>) -> Code {
        r.map_or_else(|s| s.code(), |_| Code::Ok)
    }
    let batch = Batch {
        id: 1,
        ops: vec![
            op(Kind::Set(Set { key: Bytes::from("k"), value: Bytes::from("v"), ..Default::default() })),
            op(Kind::Flush(Flush {})),
        ],
        ..Default::default()
    };
    let mut t = Topology::even(&[addr.to_string()]);
    t.version = 7;
    let once = |b: Batch| tokio_stream::iter(vec![b]);
    vec![
        ("Execute", code(c.execute(once(batch)).await)),
        ("Stats", code(c.stats(StatsRequest::default()).await)),
        ("Snapshot", code(c.snapshot(SnapshotRequest {}).await)),
        (
            "ExportSlots",
            code(c.export_slots(ExportRequest { first_slot: 0, last_slot: 0, ..Default::default() }).await),
        ),
        ("GetTopology", code(c.get_topology(GetTopologyRequest {}).await)),
        ("UpdateTopology", code(c.update_topology(TopologyDoc { json: t.to_json() }).await)),
        ("Configure", code(c.configure(NodeSettings::default()).await)),
        ("Block", code(c.block(BlockRequest::default()).await)),
        ("KillScript", code(c.kill_script(KillScriptRequest::default()).await)),
        ("Subscribe", code(c.subscribe(tokio_stream::iter(vec![SubscribeRequest::default()])).await)),
        ("PubSubInfo", code(c.pub_sub_info(PubSubQuery::default()).await)),
        ("Replicate", code(c.replicate(tokio_stream::iter(vec![ReplicaAck::default()])).await)),
        ("WaitReplicas", code(c.wait_replicas(WaitRequest { numreplicas: 0, timeout_ms: 1 }).await)),
        ("Handover", code(c.handover(HandoverRequest::default()).await)),
        ("Ping", code(c.ping(PingRequest {}).await)),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_is_refused_without_the_cluster_secret_and_served_with_it() {
    let secret = ClusterSecret::new("the-cluster-secret-of-this-test").unwrap();
    let node = start(&secret).await;
    let addr = node.addr.to_string();
    let mut owner =
        client::connect(&addr, &ClientOptions::default().with_secret(Some(secret.clone()))).await.unwrap();
    let kept = op(Kind::Set(Set { key: Bytes::from("kept"), value: Bytes::from("1"), ..Default::default() }));
    let mut replies = owner
        .execute(tokio_stream::iter(vec![Batch { id: 1, ops: vec![kept], ..Default::default() }]))
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(replies.message().await.unwrap().unwrap().replies[0].kind, Some(reply::Kind::Ok(_))));

    // No secret, and someone else's: every call refused, nothing changed, each one counted.
    let other = ClusterSecret::new("another-clusters-secret-value").unwrap();
    for (who, s) in [("none", None), ("wrong", Some(other))] {
        let mut c = client::connect(&addr, &ClientOptions::default().with_secret(s)).await.unwrap();
        let before = node.state.metrics.unauthenticated.load(Ordering::Relaxed);
        let codes = every_rpc(&mut c, &addr).await;
        assert_eq!(codes.len(), 15, "every RPC of the API");
        for (rpc, code) in &codes {
            assert_eq!(*code, Code::Unauthenticated, "{rpc} with {who} secret");
        }
        let after = node.state.metrics.unauthenticated.load(Ordering::Relaxed);
        assert_eq!(after - before, 15, "each refusal counted");
        let status = c.stats(StatsRequest::default()).await.unwrap_err();
        let hint = if who == "none" { "requires the cluster secret" } else { "wrong cluster secret" };
        assert!(status.message().contains(hint), "{}", status.message());
    }
    assert_eq!(node.state.membership.version(), 0, "no topology was adopted");
    assert_eq!(node.state.store.len(), 1, "nothing written, nothing flushed");
    let page = shoal_node::metrics::render(&node.state);
    assert!(page.contains("shoal_node_unauthenticated_calls_total 32"), "{page}");

    // With it: served (each call gets past the check: no Unauthenticated anywhere).
    let mut c =
        client::connect(&addr, &ClientOptions::default().with_secret(Some(secret.clone()))).await.unwrap();
    let codes = every_rpc(&mut c, &addr).await;
    for (rpc, code) in &codes {
        assert_ne!(*code, Code::Unauthenticated, "{rpc} with the secret");
    }
    let served: Vec<&str> = codes.iter().filter(|(_, c)| *c == Code::Ok).map(|(r, _)| *r).collect();
    for rpc in ["Execute", "Stats", "UpdateTopology", "Configure", "Ping", "WaitReplicas", "KillScript"] {
        assert!(served.contains(&rpc), "{rpc} served: {codes:?}");
    }
    // Asked before the topology was offered: the node's own answer, not the check's.
    assert!(codes.contains(&("GetTopology", Code::NotFound)), "{codes:?}");
    assert_eq!(node.state.membership.version(), 7, "the topology offered with the secret was adopted");
    let s = c.stats(StatsRequest::default()).await.unwrap().into_inner();
    assert_eq!(s.topology_version, 7);
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_sends_its_secret_to_its_primary() {
    // Two nodes with the secret: the replica's full sync and following work (its calls carry
    // the secret it was started with), where one without it is refused.
    let secret = ClusterSecret::new("replication-needs-the-secret").unwrap();
    let (primary, replica) = (start(&secret).await, start(&secret).await);
    let options = ClientOptions::default().with_secret(Some(secret.clone()));
    replica_gets_a_write(&primary, &replica, &options).await;
    assert_eq!(primary.state.metrics.unauthenticated.load(Ordering::Relaxed), 0);
    primary.shutdown().await.unwrap();
    replica.shutdown().await.unwrap();
}

/// Makes `replica` the replica of `primary`'s one shard (both offered the topology through
/// `options`), writes a key on the primary and waits (10 s at most) for the replica to hold it.
async fn replica_gets_a_write(primary: &NodeHandle, replica: &NodeHandle, options: &ClientOptions) {
    let mut t = Topology::even(&[primary.addr.to_string()]);
    t.nodes[0].replicas = vec![replica.addr.to_string()];
    for v in [1, 2] {
        t.version = v;
        for n in [primary, replica] {
            let mut c = client::connect(&n.addr.to_string(), options).await.unwrap();
            c.update_topology(TopologyDoc { json: t.to_json() }).await.unwrap();
        }
    }
    let mut p = client::connect(&primary.addr.to_string(), options).await.unwrap();
    let set = op(Kind::Set(Set { key: Bytes::from("r"), value: Bytes::from("1"), ..Default::default() }));
    let replies = p
        .execute(tokio_stream::iter(vec![Batch { id: 1, ops: vec![set], topology_version: 2 }]))
        .await
        .unwrap()
        .into_inner()
        .message()
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(replies.replies[0].kind, Some(reply::Kind::Ok(_))), "{replies:?}");
    let start = std::time::Instant::now();
    while replica.state.store.fetch(b"r").is_none() {
        assert!(start.elapsed() < Duration::from_secs(10), "the replica never got the write");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Test certificates (wire/testdata/certs.sh, made with openssl).
fn certs() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../wire/testdata/certs.sh");
    let out = std::process::Command::new("bash").arg(script).arg(dir.path()).output().unwrap();
    assert!(out.status.success(), "certs.sh: {}", String::from_utf8_lossy(&out.stderr));
    dir
}

fn files(dir: &tempfile::TempDir, name: &str) -> TlsFiles {
    TlsFiles {
        cert: dir.path().join(format!("{name}.crt")),
        key: dir.path().join(format!("{name}.key")),
        ca: Some(dir.path().join("ca.crt")),
    }
}

/// A node whose port speaks mutual TLS only (no cluster secret), presenting `node.crt`.
async fn start_tls(certs: &tempfile::TempDir) -> NodeHandle {
    let store = Arc::new(Store::new(StoreConfig::default(), Arc::new(SystemClock)));
    let options =
        ServeOptions { link_tls: Some(LinkTls::load(&files(certs, "node")).unwrap()), ..Default::default() };
    NodeHandle::start("127.0.0.1:0".parse().unwrap(), store, options).await.unwrap()
}

fn tls_options(certs: &tempfile::TempDir, name: &str) -> ClientOptions {
    let tls = shoal_wire::tls::reloading_client(&files(certs, name), shoal_wire::tls::GRPC_ALPN).unwrap();
    ClientOptions::default().with_credentials(Credentials { secret: None, tls: Some(tls) })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_node_link_tls_every_rpc_needs_a_certificate_from_the_cluster_ca() {
    let certs = certs();
    let node = start_tls(&certs).await;
    let addr = node.addr.to_string();

    // Plaintext gRPC: every call fails at the transport; nothing reaches a service.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .timeout(Duration::from_secs(2))
        .connect_lazy();
    let mut plain = shoal_wire::proto::node_client::NodeClient::with_interceptor(
        channel,
        shoal_wire::auth::Attach::with(None),
    );
    let codes = every_rpc(&mut plain, &addr).await;
    assert_eq!(codes.len(), 15);
    for (rpc, code) in &codes {
        assert_ne!(*code, Code::Ok, "{rpc} over plaintext");
    }
    // Certificates the node does not accept: refused in the handshake (with TLS 1.3 the client
    // may only learn it at its first call), so no call is served.
    for (who, name) in [("another CA's", "rogue"), ("an expired", "expired")] {
        if let Ok(mut c) = client::connect(&addr, &tls_options(&certs, name)).await {
            for (rpc, code) in every_rpc(&mut c, &addr).await {
                assert_ne!(code, Code::Ok, "{rpc} with {who} certificate");
            }
        }
    }
    assert_eq!(node.state.membership.version(), 0, "no topology was adopted");
    assert_eq!(node.state.store.len(), 0);
    let refused = node.state.metrics.link_tls_refused.load(Ordering::Relaxed);
    assert!(
        refused >= 3,
        "plaintext, another CA's and an expired certificate refused and counted: {refused}"
    );
    assert!(shoal_node::metrics::render(&node.state).contains("shoal_node_link_tls_refused_total"));

    // A certificate from the cluster's CA: every call gets past the transport.
    let mut c = client::connect(&addr, &tls_options(&certs, "client")).await.expect("a member's certificate");
    let codes = every_rpc(&mut c, &addr).await;
    for (rpc, code) in &codes {
        assert!(![Code::Unauthenticated, Code::Unavailable].contains(code), "{rpc}: {code:?}");
    }
    assert_eq!(node.state.membership.version(), 7, "the topology offered over mutual TLS was adopted");
    // Bounded: one CI run (of many) saw this shutdown never finish, its cause not found yet; a
    // hang must fail here, not stall the suite (the drain alone is bounded at 10 s).
    let stopped = tokio::time::timeout(Duration::from_secs(60), node.shutdown()).await;
    stopped.expect("the node shut down within 60 s").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_follows_its_primary_over_mutual_tls() {
    let certs = certs();
    let (primary, replica) = (start_tls(&certs).await, start_tls(&certs).await);
    replica_gets_a_write(&primary, &replica, &tls_options(&certs, "node")).await;
    primary.shutdown().await.unwrap();
    replica.shutdown().await.unwrap();
}

#[test]
fn the_node_binary_wants_a_secret_unless_told_no_auth() {
    let dir = tempfile::tempdir().unwrap();
    let port = support::free_port();
    let listen = format!("127.0.0.1:{port}");
    let out = std::process::Command::new(support::node_bin())
        .args(["--listen", &listen])
        .env_remove("SHOAL_CLUSTER_SECRET")
        .env_remove("SHOAL_CLUSTER_SECRET_FILE")
        .env_remove("SHOAL_NODE_NO_AUTH")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs the cluster secret") && err.contains("--no-auth"), "{err}");
    // A secret too short, from a file: refused with the reason.
    let file = dir.path().join("secret");
    std::fs::write(&file, "short\n").unwrap();
    let out = std::process::Command::new(support::node_bin())
        .args(["--listen", &listen, "--cluster-secret-file", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("at least 16 characters"), "{err}");
}
