//! Replication between real node servers (in-process, over loopback gRPC): a replica's full
//! sync and following, WAIT, FLUSHALL, large and typed values, expiry, promotion, and the fence
//! of a primary that starts with replicas.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_node::server::{NodeHandle, ServeOptions};
use shoal_node::store::object::ValueType;
use shoal_node::store::{Store, StoreConfig, SystemClock};
use shoal_wire::proto::node_client::NodeClient;
use shoal_wire::proto::{
    Batch, Command, Del, Expiry, Flush, Op, Set, StatsRequest, TopologyDoc, Transaction, WaitRequest,
    op::Kind, reply,
};
use shoal_wire::{NodeInfo, Topology};
use support::{connect, get, run, set};
use tonic::transport::Channel;

async fn start() -> NodeHandle {
    start_with(StoreConfig::default()).await
}

async fn start_with(config: StoreConfig) -> NodeHandle {
    let store = Arc::new(Store::new(config, Arc::new(SystemClock)));
    NodeHandle::start("127.0.0.1:0".parse().unwrap(), store, ServeOptions::default()).await.unwrap()
}

/// A SET op of `key` to `value`.
fn set_op(key: &str, value: impl Into<Bytes>) -> Op {
    let set = Set { key: Bytes::from(key.to_string()), value: value.into(), ..Default::default() };
    Op { kind: Some(Kind::Set(set)), ..Default::default() }
}

/// One shard: `primary` with `replicas`, at `version`.
fn topology(version: u64, primary: &NodeHandle, replicas: &[&NodeHandle]) -> Topology {
    let mut t = Topology::even(&[primary.addr.to_string()]);
    t.nodes[0] = NodeInfo {
        id: 0,
        addr: primary.addr.to_string(),
        replicas: replicas.iter().map(|r| r.addr.to_string()).collect(),
    };
    t.version = version;
    t.validate().unwrap();
    t
}

async fn offer(t: &Topology, nodes: &[&NodeHandle]) {
    for n in nodes {
        let mut c = connect(&n.addr.to_string()).await;
        let ack = c.update_topology(TopologyDoc { json: t.to_json() }).await.unwrap().into_inner();
        assert_eq!(ack.version, t.version);
    }
}

/// A replica for `primary`: started, both given a topology naming them (version 1, which fences
/// the primary, then 2, which confirms it), and synced. Returns it and the topology at 2.
async fn add_replica(primary: &NodeHandle) -> (NodeHandle, Topology) {
    add_this_replica(primary, start().await).await
}

/// [`add_replica`] with a replica of the caller's.
async fn add_this_replica(primary: &NodeHandle, replica: NodeHandle) -> (NodeHandle, Topology) {
    let mut t = topology(1, primary, &[&replica]);
    offer(&t, &[primary, &replica]).await;
    t.version = 2;
    offer(&t, &[primary, &replica]).await;
    until("the full sync", || replica.state.membership.replication.synced()).await;
    (replica, t)
}

/// The key's value, TTL and type on a node (straight from its store).
fn state(node: &NodeHandle, key: &str) -> Option<(Bytes, u64, u32)> {
    node.state.store.fetch(key.as_bytes()).map(|(v, ttl, t)| (v, ttl, t as u32))
}

/// Waits until `cond` holds (up to 10 s).
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(10), "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn wait_replicas(client: &mut NodeClient<Channel>, n: u32, timeout_ms: u64) -> u32 {
    client.wait_replicas(WaitRequest { numreplicas: n, timeout_ms }).await.unwrap().into_inner().replicas
}

fn command(args: &[&str]) -> Kind {
    Kind::Command(Box::new(Command {
        args: args.iter().map(|a| Bytes::from(a.to_string())).collect(),
        ..Default::default()
    }))
}

/// A typed command the router flags read-only (as it does HGET's).
fn read_command(args: &[&str]) -> Kind {
    let Kind::Command(c) = command(args) else { unreachable!() };
    Kind::Command(Box::new(Command { readonly: true, ..*c }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_copies_its_primary_follows_every_change_and_takes_over() {
    let (primary, replica) = (start().await, start().await);
    let mut p = connect(&primary.addr.to_string()).await;
    // Data from before there was any replica: the full sync brings it.
    for i in 0..500 {
        assert!(matches!(set(&mut p, 0, &format!("old:{i}"), "v").await, reply::Kind::Ok(_)));
    }
    // A primary that starts with replicas is fenced until a newer version confirms it.
    let v1 = topology(1, &primary, &[&replica]);
    offer(&v1, &[&primary, &replica]).await;
    assert!(matches!(get(&mut p, 1, "old:1").await, reply::Kind::Moved(1)), "fenced primary refuses ops");
    let stats = p.stats(StatsRequest::default()).await.unwrap().into_inner();
    assert!(stats.fenced && stats.role == "master");
    let mut v2 = v1.clone();
    v2.version = 2;
    offer(&v2, &[&primary, &replica]).await;
    assert!(matches!(get(&mut p, 2, "old:1").await, reply::Kind::Value(_)), "confirmed primary serves");
    until("the full sync", || replica.state.membership.replication.synced()).await;
    assert_eq!(state(&replica, "old:499"), state(&primary, "old:499"));
    assert_eq!(replica.state.store.len(), 500);

    // Every kind of change reaches the replica, in its final state.
    set(&mut p, 2, "s", "1").await;
    set(&mut p, 2, "s", "2").await;
    let big = "x".repeat(3 << 20); // travels in pieces
    set(&mut p, 2, "big", &big).await;
    let ttl = Set {
        key: Bytes::from("ttl"),
        value: Bytes::from("t"),
        expiry: Some(Expiry { ms: 60_000, relative: true }),
        ..Default::default()
    };
    run(&mut p, 2, Kind::Set(ttl)).await;
    run(&mut p, 2, command(&["hset", "h", "f1", "a", "f2", "b"])).await;
    run(&mut p, 2, command(&["rpush", "l", "1", "2", "3"])).await;
    run(&mut p, 2, command(&["spop", "l"])).await; // wrong type: nothing changes
    run(&mut p, 2, command(&["sadd", "set", "a", "b", "c", "d"])).await;
    run(&mut p, 2, command(&["spop", "set"])).await; // random: the replica gets what was popped
    run(&mut p, 2, Kind::Del(Del { key: Bytes::from("old:7") })).await;
    let short = Set {
        key: Bytes::from("short"),
        value: Bytes::from("s"),
        expiry: Some(Expiry { ms: 30, relative: true }),
        ..Default::default()
    };
    run(&mut p, 2, Kind::Set(short)).await;
    assert_eq!(wait_replicas(&mut p, 1, 5000).await, 1, "the replica acks every change");
    for key in ["s", "big", "ttl", "h", "l", "set", "old:7", "old:8"] {
        assert_eq!(state(&replica, key), state(&primary, key), "key {key}");
    }
    assert_eq!(state(&replica, "s").unwrap().0, Bytes::from("2"));
    assert!(state(&replica, "ttl").unwrap().1 > 0, "the absolute expiry time travels");
    assert!(state(&replica, "old:7").is_none());
    // The primary's expiry reaches the replica as a removal.
    until("the expiry", || state(&primary, "short").is_none() && state(&replica, "short").is_none()).await;

    // /metrics: role, offsets, lag per replica (caught up: 0 changes behind, once the replica
    // has acked the expiry above).
    let lag = format!("shoal_node_replica_lag_changes{{replica=\"{}\"}} 0\n", replica.addr);
    until("the replica's ack of the expiry", || shoal_node::metrics::render(&primary.state).contains(&lag))
        .await;
    let page = shoal_node::metrics::render(&primary.state);
    assert!(page.contains("shoal_node_replication_role{role=\"master\"} 1\n"), "{page}");
    assert!(page.contains("shoal_node_connected_replicas 1\n"), "{page}");
    let rpage = shoal_node::metrics::render(&replica.state);
    assert!(rpage.contains("shoal_node_replication_role{role=\"slave\"} 1\n"), "{rpage}");
    assert!(
        rpage.contains("shoal_node_primary_link_up 1\n") && rpage.contains("shoal_node_replica_synced 1\n")
    );
    // No stream broke mid-cut (router/tests/failover.rs kills a primary mid-cut).
    assert!(rpage.contains("shoal_node_replica_partial_cuts_dropped_total 0\n"), "{rpage}");
    let offset = |page: &str| {
        page.lines().find_map(|l| l.strip_prefix("shoal_node_replication_offset ")).unwrap().to_string()
    };
    assert_eq!(offset(&page), offset(&rpage), "the replica applied up to the primary's offset");

    let stats = p.stats(StatsRequest::default()).await.unwrap().into_inner();
    assert_eq!(stats.replicas.len(), 1);
    assert_eq!(stats.replicas[0].addr, replica.addr.to_string());
    let mut r = connect(&replica.addr.to_string()).await;
    let rstats = r.stats(StatsRequest::default()).await.unwrap().into_inner();
    assert_eq!(rstats.role, "slave");
    assert_eq!(rstats.primary_addr, primary.addr.to_string());
    assert_eq!(rstats.primary_run_id, stats.run_id);
    assert!(rstats.synced && rstats.primary_link_up);
    // Replica reads: a router that routes by the replica's own version may read from it; writes
    // and routers with another version get `moved` (they route again, to the primary).
    assert!(matches!(get(&mut r, 2, "s").await, reply::Kind::Value(v) if v == "2"), "a replica read");
    assert!(
        matches!(run(&mut r, 2, read_command(&["hget", "h", "f1"])).await, reply::Kind::Frame(_)),
        "typed read"
    );
    // A write flagged read-only (a router's mistake) is still refused: the node's table says so.
    assert!(matches!(run(&mut r, 2, read_command(&["hset", "h", "f1", "x"])).await, reply::Kind::Moved(2)));
    assert!(matches!(get(&mut r, 1, "s").await, reply::Kind::Moved(2)), "another version: moved");
    assert!(matches!(set(&mut r, 2, "s", "3").await, reply::Kind::Moved(2)), "a replica takes no write");
    assert!(matches!(run(&mut r, 2, command(&["hset", "h", "f1", "x"])).await, reply::Kind::Moved(2)));
    assert!(matches!(run(&mut r, 2, command(&["HSET", "h", "f1", "x"])).await, reply::Kind::Moved(2)));
    assert_eq!(state(&replica, "s").unwrap().0, Bytes::from("2"), "nothing written on the replica");
    // Nor does it feed replicas of its own (its copy may be partial while it syncs).
    let hello = shoal_wire::proto::ReplicaAck { replica: "127.0.0.1:1".into(), ..Default::default() };
    let refused = r.replicate(tokio_stream::iter([hello])).await.expect_err("a replica refuses to feed");
    assert_eq!(refused.code(), tonic::Code::Unavailable);

    // FLUSHALL: the replica drops everything too, then follows what comes after it.
    run(&mut p, 2, Kind::Flush(Flush {})).await;
    set(&mut p, 2, "after", "flush").await;
    assert_eq!(wait_replicas(&mut p, 1, 5000).await, 1);
    until("the flush", || replica.state.store.len() == 1).await;
    assert_eq!(state(&replica, "after").unwrap().0, Bytes::from("flush"));

    // Promotion: the replica serves at once with what it has; the old primary follows it.
    let v3 = v2.promote(0, &replica.addr.to_string()).unwrap();
    offer(&v3, &[&replica, &primary]).await;
    assert!(matches!(get(&mut r, 3, "after").await, reply::Kind::Value(v) if v == "flush"));
    assert!(
        matches!(set(&mut p, 3, "x", "1").await, reply::Kind::Moved(3)),
        "the old primary refuses writes"
    );
    set(&mut r, 3, "promoted", "yes").await;
    assert_eq!(wait_replicas(&mut r, 1, 5000).await, 1, "the old primary follows the new one");
    until("the old primary's copy", || state(&primary, "promoted").is_some()).await;
    let old = p.stats(StatsRequest::default()).await.unwrap().into_inner();
    assert_eq!((old.role.as_str(), old.primary_addr.as_str()), ("slave", replica.addr.to_string().as_str()));
    primary.shutdown().await.unwrap();
    replica.shutdown().await.unwrap();
}

/// Issue 38, item 4: a replica whose clock runs an hour ahead of its primary's (or jumped) keeps
/// every key its primary still holds, even those already expired by its own clock: it stores
/// them, its active expiry and its reads remove none of them (reads answer them as gone, as a
/// Redis replica does), and they go when the primary's removal arrives. Once its clock is right
/// again, and after a promotion, it serves them. (Before: the replica refused to store a value
/// expired by its clock and expired the rest itself, so the promoted replica had lost them.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_clock_runs_ahead_keeps_what_its_primary_still_holds() {
    use shoal_wire::clock::{Clock, ManualClock};
    let primary = start().await;
    let now = SystemClock.now_ms();
    let clock = ManualClock::new(now + 3_600_000);
    let store = Arc::new(Store::new(StoreConfig::default(), Arc::new(clock.clone())));
    let ahead =
        NodeHandle::start("127.0.0.1:0".parse().unwrap(), store, ServeOptions::default()).await.unwrap();
    let mut p = connect(&primary.addr.to_string()).await;
    let with_ttl = |key: &str, ms: i64| {
        let value = Bytes::from("v");
        let expiry = Some(Expiry { ms, relative: true });
        Kind::Set(Set { key: Bytes::from(key.to_string()), value, expiry, ..Default::default() })
    };
    // One key before the replica exists (the full sync brings it), one after (a change).
    run(&mut p, 0, with_ttl("synced", 600_000)).await;
    let (replica, t) = add_this_replica(&primary, ahead).await;
    run(&mut p, 2, with_ttl("followed", 600_000)).await;
    run(&mut p, 2, with_ttl("short", 300)).await;
    set(&mut p, 2, "plain", "v").await;
    assert_eq!(wait_replicas(&mut p, 1, 5000).await, 1);
    assert_eq!(replica.state.store.len(), 4, "every key is stored, expired by the replica's clock or not");
    // Its reads see the expired ones as gone, and neither they nor its active expiry remove them.
    let mut r = connect(&replica.addr.to_string()).await;
    assert!(matches!(get(&mut r, 2, "followed").await, reply::Kind::Nil(_)), "a replica read");
    assert!(matches!(get(&mut r, 2, "plain").await, reply::Kind::Value(_)));
    assert_eq!(replica.state.store.purge_expired(1000), 0, "no active expiry on a replica");
    // The primary expires `short` by its clock: its removal, not the replica's clock, removes it.
    until("the primary's removal of short", || replica.state.store.len() == 3).await;
    assert!(matches!(get(&mut p, 2, "followed").await, reply::Kind::Value(_)), "the primary serves it");
    // The clock is put right: the replica serves what it kept; promoted, it still has it.
    clock.set(SystemClock.now_ms());
    assert_eq!(state(&replica, "synced").map(|s| s.0), Some(Bytes::from("v")));
    let promoted = t.promote(0, &replica.addr.to_string()).unwrap();
    offer(&promoted, &[&replica, &primary]).await;
    for key in ["synced", "followed"] {
        let got = get(&mut r, promoted.version, key).await;
        assert!(matches!(&got, reply::Kind::Value(v) if v == "v"), "{key}: {got:?}");
    }
    primary.shutdown().await.unwrap();
    replica.shutdown().await.unwrap();
}

/// Hash field times (HEXPIRE, Redis 7.4) reach a replica with their fields, and a field whose
/// time passes leaves the replica by its primary's removal: the replica's reads never remove one
/// on their own (its copy would then differ from its primary's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_field_times_reach_the_replica_and_leave_it_by_the_primarys_expiry() {
    use shoal_node::store::object::Object;
    let primary = start().await;
    let mut p = connect(&primary.addr.to_string()).await;
    run(&mut p, 0, command(&["hset", "h", "keep", "1", "short", "2", "long", "3"])).await;
    run(&mut p, 0, command(&["hpexpireat", "h", "4000000000000", "FIELDS", "1", "long"])).await;
    let (replica, _) = add_replica(&primary).await;
    assert_eq!(state(&replica, "h"), state(&primary, "h"), "the full sync brings the field times");
    run(&mut p, 2, command(&["hpexpire", "h", "300", "FIELDS", "1", "short"])).await;
    assert_eq!(wait_replicas(&mut p, 1, 5000).await, 1);
    assert_eq!(state(&replica, "h"), state(&primary, "h"), "a change brings them");
    let fields = |n: &NodeHandle| {
        n.state
            .store
            .read_object(b"h", ValueType::Hash, |o| match o {
                Some(Object::Hash(h)) => (h.len(), h.field_ttl(b"short").is_some(), h.field_ttl(b"long")),
                _ => (0, false, None),
            })
            .unwrap()
    };
    assert_eq!(fields(&replica), (3, true, Some(4_000_000_000_000)));
    until("the primary's removal of the expired field on the replica", || fields(&replica).0 == 2).await;
    assert_eq!(fields(&primary), (2, false, Some(4_000_000_000_000)));
    assert_eq!(fields(&replica), (2, false, Some(4_000_000_000_000)));
    // The replica first: a primary that stops while its replica runs hands its shard over first.
    replica.shutdown().await.unwrap();
    primary.shutdown().await.unwrap();
}

/// Issue 38, item 7: a transaction whose writes exceed what one cut may hold (here the limit is
/// lowered to 64 KiB) does not travel as one cut held whole on both sides: the replica gets a full
/// sync instead, in bounded chunks, and ends with every key of it. A unit under the limit still
/// travels as a cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_over_the_cut_limit_reaches_the_replica_by_a_full_sync() {
    let primary = start().await;
    let (replica, _) = add_replica(&primary).await;
    let repl = &primary.state.membership.replication;
    repl.set_unit_limit(64 << 10);
    let mut p = connect(&primary.addr.to_string()).await;
    let unit = |prefix: &str, n: usize| Transaction {
        ops: (0..n).map(|i| set_op(&format!("{prefix}{i}"), "x".repeat(2000))).collect(),
        watches: Vec::new(),
        ..Default::default()
    };
    let syncs = repl.full_syncs();
    assert!(matches!(run(&mut p, 2, Kind::Transaction(unit("small", 8))).await, reply::Kind::Replies(_)));
    assert_eq!(wait_replicas(&mut p, 1, 5000).await, 1);
    assert_eq!(repl.full_syncs(), syncs, "16 KiB: one cut");
    assert!(matches!(run(&mut p, 2, Kind::Transaction(unit("big", 100))).await, reply::Kind::Replies(_)));
    until("every key on the replica", || {
        replica.state.store.len() == 108 && replica.state.membership.replication.synced()
    })
    .await;
    assert_eq!(wait_replicas(&mut p, 1, 5000).await, 1);
    assert_eq!(repl.full_syncs(), syncs + 1, "the unit over the limit went by a full sync");
    for i in 0..100 {
        assert!(state(&replica, &format!("big{i}")).is_some(), "big{i}");
    }
    replica.shutdown().await.unwrap();
    primary.shutdown().await.unwrap();
}

/// Issue 38, item 6: a topology that promotes a replica while its follower is applying a cut (the
/// test holds that apply open) waits for the cut off the async worker threads: on a node whose
/// runtime has one worker, other calls are still answered meanwhile, and the adoption completes
/// once the cut has landed. (It used to wait on the worker itself, stalling every call.)
#[test]
fn a_topology_that_waits_for_a_cut_leaves_the_worker_to_other_calls() {
    let node_rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let (primary, replica, t) = node_rt.block_on(async {
        let primary = start().await;
        let (replica, t) = add_replica(&primary).await;
        // The replica is told to follow a primary that is not there: the real one's heartbeats
        // would have its follower ack under the lock the test holds below, on the one worker (a
        // real follower acks only once its own change has landed, so it never waits there).
        let mut away = t.clone();
        away.version = 3;
        away.nodes[0].addr = "127.0.0.1:9".into();
        offer(&away, &[&replica]).await;
        (primary, replica, t)
    });
    let repl = replica.state.membership.replication.clone();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (held, holding) = std::sync::mpsc::channel::<()>();
    let follower = std::thread::spawn(move || {
        repl.while_current(repl.generation(), || {
            held.send(()).unwrap();
            released.recv().unwrap();
        })
    });
    holding.recv().unwrap();
    let addr = replica.addr.to_string();
    let mut promoted = t.clone();
    promoted.version = 4;
    promoted.nodes[0] = NodeInfo { id: 0, addr: addr.clone(), replicas: Vec::new() };
    let client_rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    client_rt.block_on(async {
        let mut c = connect(&addr).await;
        let doc = TopologyDoc { json: promoted.to_json() };
        let offer = tokio::spawn(async move { c.update_topology(doc).await.map(|a| a.into_inner().version) });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut other = connect(&addr).await;
        let answered =
            tokio::time::timeout(Duration::from_secs(2), other.stats(StatsRequest::default())).await;
        assert!(matches!(answered, Ok(Ok(_))), "the node answered nothing while the adoption waited");
        assert!(!offer.is_finished(), "the adoption waits for the cut being applied");
        release.send(()).unwrap();
        let version = tokio::time::timeout(Duration::from_secs(5), offer).await.unwrap().unwrap().unwrap();
        assert_eq!(version, promoted.version);
    });
    follower.join().unwrap();
    drop(client_rt); // its connections close, so the node's drain does not wait for them
    node_rt.block_on(async {
        replica.shutdown().await.unwrap();
        primary.shutdown().await.unwrap();
    });
}

/// A replica never holds part of a transaction: the primary ships a transaction's keys in one
/// cut and the replica applies a cut as one unit, so a reader of the replica (under its gate, as
/// replica reads run) sees every transaction whole, whatever the chunk boundaries fall on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_never_holds_part_of_a_transaction() {
    let primary = start().await;
    let (replica, t) = add_replica(&primary).await;
    let mut p = connect(&primary.addr.to_string()).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let observer = {
        let (store, stop) = (replica.state.store.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut looks = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && looks < 50_000_000 {
                let gate = store.gate.read();
                let values: Vec<Option<Bytes>> =
                    ["a", "b", "c"].iter().map(|k| store.fetch(k.as_bytes()).map(|s| s.0)).collect();
                drop(gate);
                assert!(
                    values[0] == values[1] && values[1] == values[2],
                    "part of a transaction: {values:?}"
                );
                looks += 1;
            }
            looks
        })
    };
    for i in 0..300 {
        let v = i.to_string();
        let unit = Transaction {
            ops: ["a", "b", "c"].iter().map(|k| set_op(k, v.clone())).collect(),
            watches: Vec::new(),
            ..Default::default()
        };
        let mut ops = vec![Op { kind: Some(Kind::Transaction(unit)), ..Default::default() }];
        // Single-key writes between the transactions, so cut and chunk edges fall anywhere.
        ops.extend((0..40).map(|j| set_op(&format!("noise:{j}"), v.clone())));
        let batch = Batch { id: 1, ops, topology_version: t.version };
        let mut replies = p.execute(tokio_stream::iter([batch])).await.unwrap().into_inner();
        let mut answered = 0;
        while let Some(m) = replies.message().await.unwrap() {
            answered += m.replies.len();
            if !m.more {
                break;
            }
        }
        assert_eq!(answered, 41);
    }
    until("the last transaction on the replica", || {
        state(&replica, "c").map(|s| s.0) == Some(Bytes::from("299"))
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let looks = observer.join().expect("the replica never showed part of a transaction");
    assert!(looks > 0);
    assert_eq!(state(&replica, "a"), state(&primary, "a"));
}

/// A replica whose primary accepts connections and then says nothing (a stopped process, a
/// stuck link) gives that stream up within seconds and opens another, rather than waiting for
/// HTTP/2 keep-alive to notice. (Issue 38, item 8.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_gives_up_on_a_primary_that_never_answers() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let hole = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hole_addr = hole.local_addr().unwrap().to_string();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = hole.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(socket); // never read, never answered
        }
    });
    let replica = start().await;
    let mut t = Topology::even(&[hole_addr]);
    t.nodes[0].replicas = vec![replica.addr.to_string()];
    t.version = 1;
    t.validate().unwrap();
    offer(&t, &[&replica]).await;
    let started = Instant::now();
    while accepted.load(Ordering::SeqCst) < 2 {
        assert!(started.elapsed() < Duration::from_secs(8), "the replica still waits on its first stream");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!replica.state.membership.replication.synced());
    replica.shutdown().await.unwrap();
}

/// A primary whose feed waits for the store's gate (a long script or transaction holds it, with a
/// change already in the log) keeps sending heartbeats: its replica does not take it for stuck
/// and drop the stream (the follower's stall limit is 3 s; this holds the gate 4.5 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_holding_its_gate_for_long_still_heartbeats() {
    let primary = start().await;
    let (replica, _) = add_replica(&primary).await;
    let store = primary.state.store.clone();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        let _exclusive = store.gate.write();
        // A change in the log, outside a unit: the feed wants the gate to take its cut.
        store.events.changes.key(b"held-key");
        held_tx.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(4_500));
    });
    held_rx.recv().unwrap();
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(4_200) {
        assert!(
            replica.state.membership.replication.link().up,
            "the replica dropped a live primary's stream"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    holder.join().unwrap();
    primary.shutdown().await.unwrap();
}

/// WAIT counts only the replicas the topology lists for the shard: a `Replicate` stream opened
/// under any other name (a replica dropped from the shard, or anything that can reach the port
/// with the cluster secret) that acks everything counts for nothing, and a stream that names no
/// replica is refused. (Issue 38, item 3.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_counts_only_the_replicas_the_topology_lists() {
    use shoal_wire::proto::ReplicaAck;
    let primary = start().await;
    let (replica, _) = add_replica(&primary).await;
    let mut p = connect(&primary.addr.to_string()).await;
    set(&mut p, 2, "k", "v").await;
    assert_eq!(wait_replicas(&mut p, 1, 5000).await, 1, "the listed replica counts");
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(ReplicaAck { replica: "127.0.0.1:9".into(), ..Default::default() }).await.unwrap();
    let impostor = p.clone().replicate(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap();
    tx.send(ReplicaAck { offset: u64::MAX / 2, ..Default::default() }).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    replica.shutdown().await.unwrap();
    set(&mut p, 2, "after", "v").await;
    assert_eq!(
        wait_replicas(&mut p, 1, 300).await,
        0,
        "a stream the topology does not list is not a replica"
    );
    drop((tx, impostor));
    let nameless = p.replicate(tokio_stream::iter([ReplicaAck::default()])).await;
    assert_eq!(nameless.err().map(|s| s.code()), Some(tonic::Code::InvalidArgument));
    primary.shutdown().await.unwrap();
}

/// A replica that cannot store what its primary sent (here a value over its own
/// `proto-max-bulk-len`, in one transaction with a value it could store) acks none of it (WAIT does not count it; it is not synced, so failover passes it over),
/// and once the primary no longer holds the value, its next full sync has everything. (Issue 38,
/// item 1: it used to log, skip the value and ack; that the rest of the unit is not stored either,
/// item 10, is `store::typed`'s `restore_all` test.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_cannot_store_a_unit_stores_none_of_it_and_stops_counting() {
    let primary = start().await;
    let small = start_with(StoreConfig { max_value_len: 100, ..StoreConfig::default() }).await;
    let (replica, _) = add_this_replica(&primary, small).await;
    let mut p = connect(&primary.addr.to_string()).await;
    set(&mut p, 2, "before", "v").await;
    assert_eq!(wait_replicas(&mut p, 1, 5000).await, 1, "a healthy replica counts");
    let unit =
        Transaction { ops: vec![set_op("fits", "v"), set_op("big", "x".repeat(1000))], ..Default::default() };
    assert!(matches!(run(&mut p, 2, Kind::Transaction(unit)).await, reply::Kind::Replies(_)));
    assert_eq!(
        wait_replicas(&mut p, 1, 500).await,
        0,
        "WAIT does not count a replica that did not store the unit"
    );
    assert!(!replica.state.membership.replication.synced());
    assert_eq!(state(&replica, "big"), None);
    // The primary drops the value: the replica's next full sync brings everything.
    run(&mut p, 2, Kind::Del(Del { key: Bytes::from("big") })).await;
    until("a full sync after the value went", || replica.state.membership.replication.synced()).await;
    assert_eq!(wait_replicas(&mut p, 1, 5000).await, 1);
    assert_eq!(state(&replica, "fits").map(|s| s.0), Some(Bytes::from("v")));
    assert_eq!(state(&replica, "before").map(|s| s.0), Some(Bytes::from("v")));
    replica.shutdown().await.unwrap();
    primary.shutdown().await.unwrap();
}

/// WAIT that arrives while a transaction or script holds the store's gate counts that unit: a
/// client blocked on one of its keys is served inside it and may send WAIT before the unit is
/// recorded, so WAIT reads the log's end under the gate, after the unit is in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_counts_a_unit_that_holds_the_gate_when_it_arrives() {
    let primary = start().await;
    let (replica, _) = add_replica(&primary).await;
    let mut p = connect(&primary.addr.to_string()).await;
    assert_eq!(wait_replicas(&mut p, 1, 5000).await, 1);
    let store = primary.state.store.clone();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    // A unit as a transaction runs one: under the exclusive gate, its keys recorded together when
    // the guard drops, just before the gate is let go.
    let unit = std::thread::spawn(move || {
        let _exclusive = store.gate.write();
        let _unit = store.events.changes.unit();
        let key: &[u8] = b"unit-key";
        store.with_keys(&[key], |l| l.restore(key, b"1", 0, ValueType::String)).unwrap();
        store.events.changes.key(key);
        held_tx.send(()).unwrap();
        release_rx.recv().unwrap();
    });
    held_rx.recv().unwrap();
    let mut q = connect(&primary.addr.to_string()).await;
    let waiting = tokio::spawn(async move { wait_replicas(&mut p, 1, 5000).await });
    // A WAIT whose timeout runs out while the unit still holds the gate answers then, counting no
    // replica (none can be said to hold what the unit wrote).
    let started = Instant::now();
    assert_eq!(wait_replicas(&mut q, 1, 100).await, 0);
    assert!(started.elapsed() < Duration::from_secs(2), "the WAIT outlived its timeout");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "WAIT answered while a unit it must count held the gate");
    release_tx.send(()).unwrap();
    unit.join().unwrap();
    assert_eq!(waiting.await.unwrap(), 1);
    assert_eq!(
        state(&replica, "unit-key").map(|s| s.0),
        Some(Bytes::from("1")),
        "WAIT 1 answered: the replica has it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_counts_only_replicas_that_have_every_change() {
    let primary = start().await;
    let mut p = connect(&primary.addr.to_string()).await;
    // No replica: WAIT answers 0 once its timeout has passed, as Redis without replicas does.
    let started = Instant::now();
    assert_eq!(wait_replicas(&mut p, 1, 200).await, 0);
    assert!(started.elapsed() >= Duration::from_millis(190));
    let (replica, _) = add_replica(&primary).await;
    for i in 0..2000 {
        set(&mut p, 2, &format!("k{i}"), "v").await;
    }
    assert_eq!(wait_replicas(&mut p, 1, 5000).await, 1);
    assert_eq!(replica.state.store.len(), 2000);
    // Asking for more replicas than there are: the count there is, after the timeout.
    assert_eq!(wait_replicas(&mut p, 2, 200).await, 1);
    // The replica goes away: WAIT no longer counts it.
    replica.shutdown().await.unwrap();
    set(&mut p, 2, "after", "v").await;
    assert_eq!(wait_replicas(&mut p, 1, 300).await, 0);
    primary.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_pauses_the_primary_waits_for_the_replica_and_switches_without_loss() {
    let primary = start().await;
    let (replica, mut t) = add_replica(&primary).await;
    let (paddr, raddr) = (primary.addr.to_string(), replica.addr.to_string());
    let mut p = connect(&paddr).await;
    for i in 0..1000 {
        set(&mut p, 2, &format!("k{i}"), "v").await;
    }
    let handover = |replica: &str, timeout_ms| shoal_wire::proto::HandoverRequest {
        replica: replica.to_string(),
        timeout_ms,
    };

    // Without a failover writer watching, nothing pauses.
    let refused = p.handover(handover("", 1000)).await.expect_err("no writer");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(refused.message().contains("no failover writer"), "{}", refused.message());
    assert!(matches!(set(&mut p, 2, "still", "serving").await, reply::Kind::Ok(_)));

    // A writer probes; a replica the topology does not list is no candidate.
    p.stats(StatsRequest { failover_writer: true, ..Default::default() }).await.unwrap();
    let unlisted = p.handover(handover("127.0.0.1:1", 300)).await.expect_err("not listed");
    assert_eq!(unlisted.code(), tonic::Code::FailedPrecondition);
    assert!(unlisted.message().contains("is not a replica of this shard"), "{}", unlisted.message());
    // A hand-over to a listed replica that never catches up (here: one that is not even
    // connected) gives up at its deadline, and the primary serves again.
    let mut lagging = t.clone();
    lagging.nodes[0].replicas.push("127.0.0.1:2".into());
    lagging.version = 3;
    offer(&lagging, &[&primary, &replica]).await;
    t = lagging;
    let started = Instant::now();
    let late = p.handover(handover("127.0.0.1:2", 300)).await.expect_err("never caught up");
    assert_eq!(late.code(), tonic::Code::DeadlineExceeded, "{}", late.message());
    assert!(started.elapsed() >= Duration::from_millis(290));
    assert!(matches!(set(&mut p, 3, "after-abandon", "v").await, reply::Kind::Ok(_)), "serving again");
    let s = p.stats(StatsRequest::default()).await.unwrap().into_inner();
    assert!(!s.handing_over && s.handover_to.is_empty() && !s.fenced);

    // The real one: runs until a writer switches; meanwhile ops get `moved` (routers retry).
    p.stats(StatsRequest { failover_writer: true, ..Default::default() }).await.unwrap();
    let call = tokio::spawn({
        let mut p = p.clone();
        let req = handover(&raddr, 5000);
        async move { p.handover(req).await }
    });
    let committed = loop {
        let s = p.stats(StatsRequest::default()).await.unwrap().into_inner();
        if !s.handover_to.is_empty() {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(committed.handover_to, raddr);
    assert!(committed.handing_over && committed.fenced);
    assert!(matches!(set(&mut p, 3, "paused", "v").await, reply::Kind::Moved(3)), "paused: no write lands");
    // Committed means caught up: the replica holds every acknowledged write already.
    assert_eq!(replica.state.store.len(), primary.state.store.len());
    for key in ["k0", "k999", "still", "after-abandon"] {
        assert_eq!(state(&replica, key), state(&primary, key), "key {key}");
    }
    assert!(state(&replica, "paused").is_none());
    // Acting as the failover writer: promote the replica it committed to.
    let v3 = t.promote(0, &raddr).unwrap();
    offer(&v3, &[&replica, &primary]).await;
    let done = call.await.unwrap().expect("the hand-over finishes").into_inner();
    assert_eq!((done.version, done.primary.as_str()), (4, raddr.as_str()));
    let mut r = connect(&raddr).await;
    assert!(matches!(get(&mut r, 4, "k999").await, reply::Kind::Value(v) if v == "v"));
    assert!(matches!(set(&mut p, 4, "old", "x").await, reply::Kind::Moved(4)));
    set(&mut r, 4, "new", "primary").await;
    assert_eq!(wait_replicas(&mut r, 1, 5000).await, 1, "the old primary follows the new one");
    let old = p.stats(StatsRequest::default()).await.unwrap().into_inner();
    assert_eq!((old.role.as_str(), old.handing_over, old.handover_to.as_str()), ("slave", false, ""));
    // A replica cannot hand anything over.
    let not = p.handover(handover("", 100)).await.expect_err("a replica");
    assert_eq!(not.code(), tonic::Code::FailedPrecondition);
    primary.shutdown().await.unwrap();
    replica.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_whose_replica_dies_after_the_commit_ends_with_the_primary_serving_its_data() {
    let primary = start().await;
    let (replica, t) = add_replica(&primary).await;
    let (paddr, raddr) = (primary.addr.to_string(), replica.addr.to_string());
    let mut p = connect(&paddr).await;
    for i in 0..200 {
        set(&mut p, 2, &format!("k{i}"), "v").await;
    }
    p.stats(StatsRequest { failover_writer: true, ..Default::default() }).await.unwrap();
    let call = tokio::spawn({
        let mut p = p.clone();
        let req = shoal_wire::proto::HandoverRequest { replica: raddr.clone(), timeout_ms: 5000 };
        async move { p.handover(req).await }
    });
    until("the commit", || !primary.state.membership.replication.handover_to().is_empty()).await;
    // The replica it committed to dies; the writer (acted here) confirms the primary instead:
    // the same members one version later.
    replica.shutdown().await.unwrap();
    offer(&t.next_version(), &[&primary]).await;
    let refused = call.await.unwrap().expect_err("no switch happened");
    assert_eq!(refused.code(), tonic::Code::Aborted, "{}", refused.message());
    assert!(refused.message().contains("serves again"), "{}", refused.message());
    let s = p.stats(StatsRequest::default()).await.unwrap().into_inner();
    assert!(!s.handing_over && s.handover_to.is_empty() && !s.fenced, "{s:?}");
    assert!(matches!(get(&mut p, 3, "k199").await, reply::Kind::Value(v) if v == "v"));
    assert!(matches!(set(&mut p, 3, "after", "v").await, reply::Kind::Ok(_)), "serving at version 3");

    // Had the writer promoted it just before it died, the old primary, now a replica of a dead
    // node, still says it holds a full copy of its own run, up to its log's end: the writer can
    // promote it back instead of confirming the dead one's empty restart.
    let end = primary.state.store.events.changes.end();
    let demoted = t.next_version().promote(0, &raddr).unwrap();
    offer(&demoted, &[&primary]).await;
    let s = p.stats(StatsRequest::default()).await.unwrap().into_inner();
    assert_eq!((s.role.as_str(), s.synced, s.repl_offset), ("slave", true, end), "{s:?}");
    assert_eq!(s.primary_run_id, s.run_id);
    primary.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_given_up_after_a_newer_version_arrived_serves_at_that_version() {
    let primary = start().await;
    let (replica, t) = add_replica(&primary).await;
    let mut p = connect(&primary.addr.to_string()).await;
    p.stats(StatsRequest { failover_writer: true, ..Default::default() }).await.unwrap();
    // A listed replica that never connects: the hand-over waits, then gives up.
    let mut lagging = t.clone();
    lagging.nodes[0].replicas.push("127.0.0.1:2".into());
    lagging.version = 3;
    offer(&lagging, &[&primary, &replica]).await;
    let call = tokio::spawn({
        let mut p = p.clone();
        let req = shoal_wire::proto::HandoverRequest { replica: "127.0.0.1:2".into(), timeout_ms: 600 };
        async move { p.handover(req).await }
    });
    until("the pause", || primary.state.membership.replication.handing_over()).await;
    // Meanwhile a newer version (a move's progress, say) arrives: still paused...
    offer(&lagging.next_version(), &[&primary]).await;
    assert!(matches!(set(&mut p, 4, "paused", "v").await, reply::Kind::Moved(4)));
    // ... and serving at it once the hand-over gives up.
    let late = call.await.unwrap().expect_err("never caught up");
    assert_eq!(late.code(), tonic::Code::DeadlineExceeded, "{}", late.message());
    assert!(matches!(set(&mut p, 4, "after", "v").await, reply::Kind::Ok(_)));
    primary.shutdown().await.unwrap();
    replica.shutdown().await.unwrap();
}

/// A primary demoted to replica ends the replication streams it serves before its new primary's
/// full sync empties its store: a replica that had not learned of the new topology yet (here the
/// test, speaking the protocol itself) is left with what it had, never sent `full_start` and a
/// copy of a store being replaced. The hand-over race this closes: the promoted replica got the
/// demoted primary's full sync through its old stream and emptied itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_primary_ends_its_feeds_before_its_new_primary_replaces_its_store() {
    use shoal_wire::proto::ReplicaAck;
    let primary = start().await;
    let (replica, t) = add_replica(&primary).await;
    let mut p = connect(&primary.addr.to_string()).await;
    for i in 0..200 {
        set(&mut p, 2, &format!("k{i}"), "v").await;
    }
    let (acks, rx) = tokio::sync::mpsc::channel(8);
    acks.send(ReplicaAck { replica: "127.0.0.1:1".into(), ..Default::default() }).await.unwrap();
    let mut stream = p.replicate(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert!(first.full_start, "a new listener is sent everything first");
    loop {
        let chunk =
            tokio::time::timeout(Duration::from_secs(5), stream.message()).await.unwrap().unwrap().unwrap();
        if chunk.full_done {
            break;
        }
    }
    assert_eq!(wait_replicas(&mut p, 1, 5000).await, 1);

    // The replica is promoted and the primary demoted: it follows the new primary, whose full
    // sync first empties its store. The stream above must end, having sent nothing of that.
    let v3 = t.promote(0, &replica.addr.to_string()).unwrap();
    offer(&v3, &[&replica, &primary]).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let next = tokio::time::timeout(left, stream.message())
            .await
            .expect("a demoted primary kept its replication stream open");
        match next {
            Ok(Some(chunk)) => {
                assert!(!chunk.full_start, "a demoted primary sent a full sync");
                assert!(
                    chunk.entries.is_empty() && chunk.deleted.is_empty(),
                    "a demoted primary sent changes"
                );
            }
            Ok(None) | Err(_) => break,
        }
    }
    // And it did become its new primary's replica, with every key.
    until("the old primary's resync", || {
        primary.state.membership.replication.synced()
            && primary.state.store.len() == replica.state.store.len()
    })
    .await;
    assert_eq!(state(&primary, "k199"), state(&replica, "k199"));
    drop(acks);
    primary.shutdown().await.unwrap();
    replica.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_ends_a_feeds_batching_gap() {
    let primary = start().await;
    let (replica, t) = add_replica(&primary).await;
    let mut p = connect(&primary.addr.to_string()).await;
    // A gap far longer than any wait below: only a WAIT can end it.
    primary.state.membership.replication.set_chunk_gap(Duration::from_secs(600));
    set(&mut p, t.version, "first", "1").await;
    // The first change after a quiet spell leaves at once; its cut starts the gap.
    until("the first change", || state(&replica, "first").is_some()).await;
    set(&mut p, t.version, "second", "2").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(state(&replica, "second"), None, "under the gap, the change waits to be sent");
    let started = Instant::now();
    assert_eq!(wait_replicas(&mut p, 1, 20_000).await, 1);
    assert!(started.elapsed() < Duration::from_secs(10), "WAIT waited out the gap");
    assert_eq!(state(&replica, "second").map(|s| s.0), Some(Bytes::from("2")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_whose_hand_over_cannot_finish_still_exits_within_its_drain_time() {
    let drain = Duration::from_secs(1);
    let store = Arc::new(Store::new(StoreConfig::default(), Arc::new(SystemClock)));
    let options = ServeOptions { drain_timeout: drain, ..Default::default() };
    let primary = NodeHandle::start("127.0.0.1:0".parse().unwrap(), store, options).await.unwrap();
    let (replica, _) = add_replica(&primary).await;
    let mut p = connect(&primary.addr.to_string()).await;
    set(&mut p, 2, "k", "v").await;
    // A writer says it watches, but none ever switches: the hand-over on shutdown commits to the
    // caught-up replica and then waits for a switch that never comes (its own timeout is 10 s).
    p.stats(StatsRequest { failover_writer: true, ..Default::default() }).await.unwrap();
    let started = Instant::now();
    primary.shutdown().await.unwrap();
    let took = started.elapsed();
    // The drain time bounds the whole graceful shutdown, hand-over included (the margin is for
    // the final steps and a loaded machine, far below the hand-over's own 10 s).
    assert!(took < drain + Duration::from_secs(3), "shutdown took {took:?}");
    replica.shutdown().await.unwrap();
}
