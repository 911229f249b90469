//! Transactions over several nodes, the node's half (`node/src/twophase.rs`), driven over gRPC as
//! a router drives it, with the router "dying" (sending nothing more) at each step: before any
//! decision every node lets go at its lease and nothing is applied; after the coordinator's commit
//! the participant learns "committed" from the coordinator and applies its part. Two real node
//! servers in-process, on loopback.

mod support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use shoal_node::server::{NodeHandle, ServeOptions};
use shoal_node::store::{Store, StoreConfig, SystemClock};
use shoal_wire::proto::node_client::NodeClient;
use shoal_wire::proto::{
    DecideRequest, Op, PrepareRequest, Reply, Set, Transaction, Watch, Watched, op::Kind, reply,
};
use support::{connect, run, set};
use tonic::transport::Channel;

async fn start() -> NodeHandle {
    let store = Arc::new(Store::new(StoreConfig::default(), Arc::new(SystemClock)));
    NodeHandle::start("127.0.0.1:0".parse().unwrap(), store, ServeOptions::default()).await.unwrap()
}

fn set_op(key: &str, value: &str) -> Op {
    let set = Set {
        key: Bytes::from(key.to_string()),
        value: Bytes::from(value.to_string()),
        ..Default::default()
    };
    Op { kind: Some(Kind::Set(set)), ..Default::default() }
}

async fn prepare(
    c: &mut NodeClient<Channel>,
    txid: &'static [u8],
    ops: Vec<Op>,
    watches: Vec<Watched>,
    coordinator: &str,
    lease_ms: u64,
) -> Reply {
    let req = PrepareRequest {
        txid: Bytes::from_static(txid),
        topology_version: 0,
        transaction: Some(Transaction { ops, watches, ..Default::default() }),
        coordinator: coordinator.to_string(),
        lease_ms,
    };
    c.prepare(req).await.unwrap().into_inner()
}

async fn decide(c: &mut NodeClient<Channel>, txid: &'static [u8], commit: bool) -> Reply {
    c.decide(DecideRequest { txid: Bytes::from_static(txid), commit }).await.unwrap().into_inner()
}

fn is_ok(r: &Reply) -> bool {
    matches!(r.kind, Some(reply::Kind::Ok(_)))
}

fn value(k: reply::Kind) -> String {
    match k {
        reply::Kind::Value(v) => String::from_utf8_lossy(&v).into_owned(),
        other => panic!("not a value: {other:?}"),
    }
}

/// Two nodes, `k` = "old" on each, and a client for each.
async fn two_nodes() -> (NodeHandle, NodeHandle, NodeClient<Channel>, NodeClient<Channel>) {
    let (a, b) = (start().await, start().await);
    let mut ca = connect(&a.addr.to_string()).await;
    let mut cb = connect(&b.addr.to_string()).await;
    set(&mut ca, 0, "k", "old").await;
    set(&mut cb, 0, "k", "old").await;
    (a, b, ca, cb)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_dying_before_the_commit_leaves_nothing_applied() {
    let (a, b, mut ca, mut cb) = two_nodes().await;
    let coordinator = a.addr.to_string();
    let r = prepare(&mut ca, b"t1", vec![set_op("k", "new")], vec![], "", 1000).await;
    assert!(is_ok(&r), "{r:?}");
    let r = prepare(&mut cb, b"t1", vec![set_op("k", "new")], vec![], &coordinator, 1000).await;
    assert!(is_ok(&r), "{r:?}");
    // Prepared: the node runs no other op until the transaction is decided.
    let mut other = connect(&coordinator).await;
    let waited = tokio::time::timeout(Duration::from_millis(200), support::get(&mut other, 0, "k")).await;
    assert!(waited.is_err(), "a prepared node answered another op: {waited:?}");
    // No decision comes (the router died): the coordinator aborts at its lease, and the
    // participant, asking it, lets go too. Both then answer, with nothing applied.
    let started = std::time::Instant::now();
    assert_eq!(value(support::get(&mut other, 0, "k").await), "old");
    assert_eq!(value(support::get(&mut cb, 0, "k").await), "old");
    assert!(started.elapsed() < Duration::from_secs(5), "held for {:?}", started.elapsed());
    // A router's commit arriving after that is refused.
    let late = decide(&mut ca, b"t1", true).await;
    assert!(matches!(&late.kind, Some(reply::Kind::Error(e)) if e.contains("aborted")), "{late:?}");
    assert_eq!(value(support::get(&mut ca, 0, "k").await), "old");
    for n in [&a, &b] {
        assert_eq!(n.state.metrics.transactions_aborted.get(), 1);
        assert_eq!(n.state.metrics.transactions_committed.get(), 0);
        assert_eq!(n.state.decisions.held(), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_dying_after_the_coordinators_commit_leaves_everything_applied() {
    let (a, b, mut ca, mut cb) = two_nodes().await;
    let coordinator = a.addr.to_string();
    assert!(is_ok(&prepare(&mut ca, b"t2", vec![set_op("k", "new-a")], vec![], "", 300).await));
    assert!(is_ok(&prepare(&mut cb, b"t2", vec![set_op("k", "new-b")], vec![], &coordinator, 300).await));
    let committed = decide(&mut ca, b"t2", true).await;
    assert!(
        matches!(&committed.kind, Some(reply::Kind::Replies(r)) if r.replies.len() == 1),
        "{committed:?}"
    );
    assert_eq!(value(support::get(&mut ca, 0, "k").await), "new-a");
    // The router dies here: the participant is never told, asks the coordinator at its lease,
    // learns "committed" and applies its part.
    assert_eq!(value(support::get(&mut cb, 0, "k").await), "new-b");
    // A late commit from the router gets the part's replies, applied once.
    let late = decide(&mut cb, b"t2", true).await;
    assert!(matches!(&late.kind, Some(reply::Kind::Replies(r)) if r.replies.len() == 1), "{late:?}");
    // The coordinator's answer is final: asked again, it still says committed.
    let q = cb_question(&coordinator, b"t2").await;
    assert!(q);
    for n in [&a, &b] {
        assert_eq!(n.state.metrics.transactions_committed.get(), 1);
        assert_eq!(n.state.metrics.transactions_aborted.get(), 0);
    }
}

async fn cb_question(addr: &str, txid: &'static [u8]) -> bool {
    let mut c = connect(addr).await;
    let q = shoal_wire::proto::DecisionQuery { txid: Bytes::from_static(txid) };
    c.decision(q).await.unwrap().into_inner().committed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepare_whose_watched_key_changed_holds_nothing() {
    let (_a, _b, mut ca, _cb) = two_nodes().await;
    let watch = Kind::Watch(Watch { keys: vec![Bytes::from_static(b"k")], release: false });
    let version = match run(&mut ca, 0, watch).await {
        reply::Kind::Versions(v) => v.versions[0],
        other => panic!("{other:?}"),
    };
    set(&mut ca, 0, "k", "changed").await;
    let watches = vec![Watched { key: Bytes::from_static(b"k"), version }];
    let r = prepare(&mut ca, b"t3", vec![set_op("k", "new")], watches, "", 60_000).await;
    assert!(matches!(r.kind, Some(reply::Kind::Aborted(_))), "{r:?}");
    // Nothing held: the next op is answered at once (the lease was a minute).
    let next = tokio::time::timeout(Duration::from_secs(2), support::get(&mut ca, 0, "k")).await;
    assert_eq!(value(next.expect("answered")), "changed");
    // A decision for a transaction that was never prepared: an abort is fine, a commit refused.
    assert!(is_ok(&decide(&mut ca, b"t3", false).await));
    let commit = decide(&mut ca, b"t4", true).await;
    assert!(matches!(commit.kind, Some(reply::Kind::Error(_))), "{commit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepares_beyond_the_holder_bound_are_told_to_try_again() {
    use std::sync::atomic::Ordering;
    let (a, _b, mut ca, _cb) = two_nodes().await;
    // As if 256 transactions were held here already: the next prepare gets no thread.
    a.state.decisions.holders.store(256, Ordering::SeqCst);
    let r = prepare(&mut ca, b"t5", vec![set_op("k", "new")], vec![], "", 1000).await;
    assert!(matches!(r.kind, Some(reply::Kind::TryAgain(_))), "{r:?}");
    assert_eq!(a.state.decisions.held(), 0);
    // Below the bound it is prepared, and its thread is counted out when it ends.
    a.state.decisions.holders.store(0, Ordering::SeqCst);
    assert!(is_ok(&prepare(&mut ca, b"t6", vec![set_op("k", "new")], vec![], "", 1000).await));
    assert!(is_ok(&decide(&mut ca, b"t6", false).await));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while a.state.decisions.holders.load(Ordering::SeqCst) != 0 {
        assert!(std::time::Instant::now() < deadline, "the holder thread was not counted out");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
