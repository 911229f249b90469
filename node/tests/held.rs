//! A script's hold on another node (`node/src/held.rs`), driven over gRPC as a script's node
//! drives it: while held, the node runs no other op and applies the held ops in order; the hold
//! ends when its stream ends, when the holder's connection dies (the script's node died), and a
//! second hold waits for the first, then is told to try again. A real node server in-process, on
//! loopback (unmanaged: no topology, so every key is its own).

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_node::server::{NodeHandle, ServeOptions};
use shoal_node::store::{Store, StoreConfig, SystemClock};
use shoal_wire::proto::node_client::NodeClient;
use shoal_wire::proto::{HeldOp, HoldRequest, HoldStart, IncrBy, Op, Reply, hold_request, op::Kind, reply};
use support::connect;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

async fn start() -> NodeHandle {
    let store = Arc::new(Store::new(StoreConfig::default(), Arc::new(SystemClock)));
    NodeHandle::start("127.0.0.1:0".parse().unwrap(), store, ServeOptions::default()).await.unwrap()
}

fn incr(key: &str) -> Op {
    Op {
        kind: Some(Kind::IncrBy(IncrBy { key: Bytes::from(key.to_string()), delta: 1 })),
        ..Default::default()
    }
}

/// A hold's two ends: the requests it sends and the answers.
struct Hold {
    send: mpsc::Sender<HoldRequest>,
    answers: tonic::Streaming<Reply>,
}

impl Hold {
    /// Asks `c`'s node for a hold waiting up to `wait_ms`; returns the hold and its first answer.
    async fn open(c: &mut NodeClient<Channel>, wait_ms: u64) -> (Hold, Reply) {
        let (send, queued) = mpsc::channel(4);
        let start = HoldStart { wait_ms, ..Default::default() };
        send.send(HoldRequest { kind: Some(hold_request::Kind::Start(start)) }).await.unwrap();
        let mut answers = c.hold(ReceiverStream::new(queued)).await.unwrap().into_inner();
        let first = answers.message().await.unwrap().expect("an answer to the start");
        (Hold { send, answers }, first)
    }

    async fn apply(&mut self, op: Op, write: bool) -> Reply {
        let held = HeldOp { op: Some(op), write };
        self.send.send(HoldRequest { kind: Some(hold_request::Kind::Op(held)) }).await.unwrap();
        self.answers.message().await.unwrap().expect("an answer to the op")
    }
}

fn is_ok(r: &Reply) -> bool {
    matches!(r.kind, Some(reply::Kind::Ok(_)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_runs_its_ops_alone_and_ends_with_its_stream() {
    let node = start().await;
    let addr = node.addr.to_string();
    let (mut c, mut other) = (connect(&addr).await, connect(&addr).await);
    let (mut hold, first) = Hold::open(&mut c, 1000).await;
    assert!(is_ok(&first), "{first:?}");
    assert!(matches!(hold.apply(incr("n"), true).await.kind, Some(reply::Kind::Int(1))));
    // Held: another client's op waits.
    let waited = tokio::time::timeout(Duration::from_millis(200), support::get(&mut other, 0, "n")).await;
    assert!(waited.is_err(), "a held node answered another op: {waited:?}");
    // A second hold waits for the gate, then is told to try again, holding nothing.
    let started = Instant::now();
    let (_second, refused) = Hold::open(&mut other, 100).await;
    assert!(matches!(refused.kind, Some(reply::Kind::TryAgain(_))), "{refused:?}");
    assert!(started.elapsed() >= Duration::from_millis(100), "{:?}", started.elapsed());
    assert!(matches!(hold.apply(incr("n"), true).await.kind, Some(reply::Kind::Int(2))));
    // A script, a transaction or an admin op is not a held op.
    let script = Op { kind: Some(Kind::Script(Box::default())), ..Default::default() };
    assert!(matches!(hold.apply(script, true).await.kind, Some(reply::Kind::Error(_))));
    // The stream's end lets go: the other client's op runs and sees both increments.
    drop(hold);
    let seen =
        tokio::time::timeout(Duration::from_secs(5), support::get(&mut other, 0, "n")).await.expect("let go");
    assert!(matches!(seen, reply::Kind::Value(v) if &v[..] == b"2"));
    assert_eq!(node.state.metrics.script_holds.get(), 1);
}

/// The script's node dies mid-script (its connection closes without the stream ending cleanly):
/// the hold lets go at once, keeping the ops applied before (a script's writes are never undone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_whose_holder_dies_lets_go() {
    let node = start().await;
    let addr = node.addr.to_string();
    let mut other = connect(&addr).await;
    let holder_addr = addr.clone();
    // The holder runs on a runtime of its own, dropped whole (its connection with it) mid-hold.
    let held = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let mut c = connect(&holder_addr).await;
            let (mut hold, first) = Hold::open(&mut c, 1000).await;
            assert!(is_ok(&first), "{first:?}");
            assert!(matches!(hold.apply(incr("d"), true).await.kind, Some(reply::Kind::Int(1))));
            std::mem::forget(hold);
        });
        drop(rt);
    });
    held.join().unwrap();
    let started = Instant::now();
    let seen = tokio::time::timeout(Duration::from_secs(10), support::get(&mut other, 0, "d"))
        .await
        .expect("let go");
    assert!(matches!(seen, reply::Kind::Value(v) if &v[..] == b"1"));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "held for {:?} after its holder died",
        started.elapsed()
    );
}
