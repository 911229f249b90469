//! Tests of the ops layer through its entry points.

use std::sync::Arc;

use bytes::Bytes;
use shoal_wire::proto::{self, Expiry, Get, IncrBy, Op, Set, Ttl, op::Kind, reply};

use super::blocked::block_or_queue;
use super::gate::{apply_batch, apply_checked};
use crate::membership::view::NodeView;
use crate::store::{ManualClock, Store, StoreConfig};

fn op(kind: Kind) -> Op {
    Op { kind: Some(kind), ..Default::default() }
}

/// A `Command` op: a Redis command's arguments and the keys it names.
fn command(args: &[&str], keys: &[&str]) -> Op {
    op(Kind::Command(Box::new(proto::Command {
        args: args.iter().map(|a| Bytes::from(a.to_string())).collect(),
        keys: keys.iter().map(|k| Bytes::from(k.to_string())).collect(),
        ..Default::default()
    })))
}

/// A router stream tracking on `store`, read the way the Subscribe stream reads it.
struct TrackingStream {
    outbox: Arc<crate::pubsub::Outbox>,
    rx: tokio::sync::mpsc::UnboundedReceiver<crate::pubsub::Out>,
}

fn tracking_stream(
    store: &Store,
    pubsub: &crate::pubsub::PubSub,
    token: u64,
    prefixes: Option<Vec<Bytes>>,
) -> TrackingStream {
    let (id, outbox, rx) = pubsub.attach();
    store.watches.tracking.enable(token, id, outbox.clone(), prefixes);
    TrackingStream { outbox, rx }
}

/// What the stream's queue received since the last call, as text; each delivery is marked
/// taken as the stream does (a taken `invalidate_all` lets later invalidations queue again).
fn invalidations(stream: &mut TrackingStream) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok(o) = stream.rx.try_recv() {
        let list = match o {
            crate::pubsub::Out::Delivery(d) => vec![d],
            crate::pubsub::Out::Group(g) => g,
            crate::pubsub::Out::Overflow => break,
        };
        for d in list {
            stream.outbox.taken(&d);
            out.extend(d.invalidate.iter().map(|k| String::from_utf8_lossy(k).into_owned()));
            if d.invalidate_all {
                out.push("*".into());
            }
        }
    }
    out
}

fn set(key: &str, value: &str, ttl_ms: Option<i64>) -> Op {
    op(Kind::Set(Set {
        key: Bytes::from(key.to_string()),
        value: Bytes::from(value.to_string()),
        expiry: ttl_ms.map(|ms| Expiry { ms, relative: true }),
        ..Default::default()
    }))
}

fn tracked_get(key: &str, token: u64) -> Op {
    op(Kind::Get(Get { key: Bytes::from(key.to_string()), track: token, ..Default::default() }))
}

#[test]
fn a_set_records_its_value_once_and_inside_a_transaction_only_its_key_in_the_unit() {
    use crate::store::changes::{Change, Recorded};
    let store = Store::new(StoreConfig::default(), Arc::new(ManualClock::new(5_000)));
    let view = NodeView::unmanaged();
    store.events.changes.activate();
    let b = |s: &str| Bytes::from(s.to_string());
    let set = |k: &str, v: &str| op(Kind::Set(Set { key: b(k), value: b(v), ..Default::default() }));
    apply_checked(&store, &view, 0, set("a", "1"));
    apply_checked(&store, &view, 0, op(Kind::IncrBy(IncrBy { key: b("n"), delta: 1 })));
    let multi = proto::Transaction {
        ops: vec![set("b", "2"), set("c", "3"), op(Kind::IncrBy(IncrBy { key: b("n"), delta: 1 }))],
        watches: Vec::new(),
        ..Default::default()
    };
    apply_checked(&store, &view, 0, op(Kind::Transaction(multi)));
    let (changes, _) = store.events.changes.read(0, 10, usize::MAX).unwrap();
    assert_eq!(
        changes,
        vec![
            Change::Value(Recorded { key: b("a"), value: b("1"), expire_at: 0 }),
            Change::Key(b("n")),
            Change::Unit(vec![b("b"), b("c"), b("n")]),
        ]
    );
}

#[test]
fn a_blocked_command_counts_once_in_the_slot_stats() {
    let store = Store::new(StoreConfig::default(), Arc::new(ManualClock::new(5_000)));
    let view = NodeView::unmanaged();
    let command = |args: &[&str], key: &str| command(args, &[key]);
    store.slot_traffic.set_enabled(true);
    let slot = shoal_wire::key_slot(b"list");
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    let queued = block_or_queue(
        &store,
        store.gate.read(),
        &view,
        0,
        command(&["BLPOP", "list", "0"], "list"),
        false,
        tx,
    );
    assert!(queued.is_err(), "nothing to pop: it waits");
    assert_eq!(store.slot_traffic.get(slot).writes, 0, "waiting is not a command run");
    // The push serves the waiter (apply serves blocked clients after a write): one push,
    // one pop counted.
    apply_batch(&store, &view, 0, vec![command(&["RPUSH", "list", "a"], "list")]);
    assert!(rx.try_recv().is_ok(), "the waiter was served");
    assert_eq!(store.slot_traffic.get(slot).writes, 2, "the push and the one pop that found something");
}

/// A push that lands after a BLPOP's first attempt found the list empty, but before the BLPOP
/// is registered as a waiter, still serves it (it once did not: the push looked for waiters,
/// found none yet, and the BLPOP then waited beside an element, forever with timeout 0). The
/// push runs on another thread in exactly that window, every time.
#[test]
fn a_push_between_a_blpops_attempt_and_its_registration_serves_it() {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    let store = Arc::new(Store::new(StoreConfig::default(), Arc::new(ManualClock::new(5_000))));
    let view = Arc::new(NodeView::unmanaged());
    let pusher: Arc<Mutex<Option<std::thread::JoinHandle<()>>>> = Arc::default();
    let (store2, view2, pusher2) = (store.clone(), view.clone(), pusher.clone());
    super::blocked::between_attempt_and_registration::set(move |_| {
        let (store3, view3) = (store2.clone(), view2.clone());
        let push = std::thread::spawn(move || {
            apply_batch(&store3, &view3, 0, vec![command(&["RPUSH", "q", "job"], &["q"])]);
        });
        // Until the push has applied (EXISTS takes the key's shard lock, not the waiters' lock the
        // BLPOP holds here); the push may then be waiting for that lock to serve the BLPOP.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !store2.exists(b"q") {
            assert!(Instant::now() < deadline, "the push never applied");
            std::thread::sleep(Duration::from_millis(1));
        }
        *pusher2.lock().unwrap() = Some(push);
    });
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    let blpop = command(&["BLPOP", "q", "0"], &["q"]);
    assert!(
        block_or_queue(&store, store.gate.read(), &view, 0, blpop, false, tx).is_err(),
        "it found nothing"
    );
    let push = pusher.lock().unwrap().take().expect("the push ran in the window");
    push.join().expect("the push thread");
    let served = rx.try_recv().expect("the BLPOP was served by the push");
    assert!(format!("{served:?}").contains(r#"Bulk(b"job")"#), "{served:?}");
    assert!(!store.exists(b"q"), "the element went to the BLPOP");
    assert_eq!(store.blocked.len(), 0, "nobody waits");
}

/// A client blocked in BRPOPLPUSH src dst changes nothing while it waits: a WATCH of dst taken
/// meanwhile holds through the WATCH itself, a write to another key, and a string SET at src
/// (its attempts find nothing or another type), so the EXEC applies, as in Redis (Valkey's
/// list unit, "BRPOPLPUSH does not affect WATCH while still blocked"). Once an element moves
/// to dst, a WATCH taken before it aborts its EXEC.
#[test]
fn a_blocked_move_leaves_a_watch_of_its_destination_alone_until_it_moves_something() {
    let store = Store::new(StoreConfig::default(), Arc::new(ManualClock::new(5_000)));
    let view = NodeView::unmanaged();
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    let wait = command(&["BRPOPLPUSH", "{w}src", "{w}dst", "0"], &["{w}src", "{w}dst"]);
    assert!(block_or_queue(&store, store.gate.read(), &view, 0, wait, false, tx).is_err(), "it waits");
    let watch = || {
        let replies = apply_batch(
            &store,
            &view,
            0,
            vec![op(Kind::Watch(proto::Watch { keys: vec!["{w}dst".into()], release: false }))],
        );
        match &replies[0].kind {
            Some(reply::Kind::Versions(v)) => v.versions[0],
            other => panic!("WATCH answered {other:?}"),
        }
    };
    let exec = |version: u64| {
        let t = proto::Transaction {
            ops: vec![op(Kind::Get(Get { key: "{w}other".into(), ..Default::default() }))],
            watches: vec![proto::Watched { key: "{w}dst".into(), version }],
            ..Default::default()
        };
        let replies = apply_batch(&store, &view, 0, vec![op(Kind::Transaction(t))]);
        !matches!(replies[0].kind, Some(reply::Kind::Aborted(_)))
    };
    let version = watch();
    apply_batch(&store, &view, 0, vec![set("{w}other", "v", None)]);
    assert!(exec(version), "nothing touched dst: the EXEC applies");

    let version = watch();
    apply_batch(&store, &view, 0, vec![set("{w}src", "a string", None)]);
    assert!(rx.try_recv().is_err(), "a string at src serves nobody");
    assert!(exec(version), "an attempt that met another type at src moved nothing to dst");

    apply_batch(&store, &view, 0, vec![op(Kind::Del(proto::Del { key: "{w}src".into() }))]);
    let version = watch();
    apply_batch(&store, &view, 0, vec![command(&["RPUSH", "{w}src", "x"], &["{w}src"])]);
    assert!(rx.try_recv().is_ok(), "the element moved");
    assert!(!exec(version), "dst changed after the WATCH: the EXEC aborts");
}

#[test]
fn a_blocked_move_to_a_key_of_another_type_answers_wrongtype_and_leaves_the_element() {
    let store = Store::new(StoreConfig::default(), Arc::new(ManualClock::new(5_000)));
    let view = NodeView::unmanaged();
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    let wait = command(&["BRPOPLPUSH", "{s}src", "{s}dst", "0"], &["{s}src", "{s}dst"]);
    assert!(
        block_or_queue(&store, store.gate.read(), &view, 0, wait, false, tx).is_err(),
        "nothing to pop: it waits"
    );
    // Another string at a key the waiter waits on serves nobody; then src gets an element.
    apply_batch(&store, &view, 0, vec![set("{s}dst", "s", None)]);
    assert!(rx.try_recv().is_err(), "a string at the destination serves nobody");
    apply_batch(&store, &view, 0, vec![command(&["RPUSH", "{s}src", "a"], &["{s}src"])]);
    // As Redis: the waiter answers WRONGTYPE at once (it must not wait forever), the element
    // stays in src.
    let served = rx.try_recv().expect("answered once src holds an element");
    assert_eq!(served.error_kind(), proto::ErrorKind::WrongType, "{served:?}");
    let len = apply_batch(&store, &view, 0, vec![command(&["LLEN", "{s}src"], &["{s}src"])]);
    let int = |f: &proto::Frame| match f.kind {
        Some(proto::frame::Kind::Int(n)) => Some(n),
        _ => None,
    };
    match &len[0].kind {
        Some(reply::Kind::Frame(f)) => assert_eq!(int(f), Some(1), "the element is still in src"),
        other => panic!("LLEN answered {other:?}"),
    }
}

/// A watch (a pop over keys of several nodes waits on each node this way) takes nothing: a push
/// tells it which key is ready, leaves the element, and a client blocked behind it is served as
/// if the watch were not there; a key of another type tells it nothing; a key that is ready when
/// the watch arrives answers at once.
#[test]
fn a_watch_is_told_of_a_ready_key_and_takes_nothing() {
    let store = Store::new(StoreConfig::default(), Arc::new(ManualClock::new(5_000)));
    let view = NodeView::unmanaged();
    let bulk = |r: &proto::Reply| match &r.kind {
        Some(reply::Kind::Frame(proto::Frame { kind: Some(proto::frame::Kind::Bulk(b)) })) => b.clone(),
        other => panic!("not a bulk string: {other:?}"),
    };
    let watch = || command(&["BLPOP", "{w}a", "{w}b", "0"], &["{w}a", "{w}b"]);
    let (watch_tx, mut watched) = tokio::sync::oneshot::channel();
    assert!(
        block_or_queue(&store, store.gate.read(), &view, 0, watch(), true, watch_tx).is_err(),
        "nothing ready"
    );
    let (pop_tx, mut popped) = tokio::sync::oneshot::channel();
    let pop = command(&["BLPOP", "{w}b", "0"], &["{w}b"]);
    assert!(block_or_queue(&store, store.gate.read(), &view, 0, pop, false, pop_tx).is_err());
    // A string tells a list's watch nothing.
    apply_batch(&store, &view, 0, vec![set("{w}a", "s", None)]);
    assert!(watched.try_recv().is_err(), "a string is not ready for BLPOP");
    apply_batch(&store, &view, 0, vec![command(&["RPUSH", "{w}b", "x"], &["{w}b"])]);
    assert_eq!(bulk(&watched.try_recv().expect("told")), "{w}b");
    // The client behind the watch popped the element; the watch took nothing.
    let served = popped.try_recv().expect("the client behind the watch was served");
    assert!(format!("{served:?}").contains(r#"Bulk(b"x")"#), "{served:?}");
    // Ready when the watch arrives: answered at once with the key.
    apply_batch(&store, &view, 0, vec![command(&["RPUSH", "{w}b", "y"], &["{w}b"])]);
    let (tx, _rx) = tokio::sync::oneshot::channel();
    let at_once = block_or_queue(&store, store.gate.read(), &view, 0, watch(), true, tx).expect("ready");
    assert_eq!(bulk(&at_once), "{w}b");
    let len = apply_batch(&store, &view, 0, vec![command(&["LLEN", "{w}b"], &["{w}b"])]);
    assert!(
        matches!(&len[0].kind, Some(reply::Kind::Frame(f)) if f.kind == Some(proto::frame::Kind::Int(1))),
        "{len:?}"
    );
    assert_eq!(store.blocked.len(), 0, "nobody waits");
}

#[test]
fn slot_traffic_counts_client_ops_not_migration_copies() {
    let store = Store::new(StoreConfig::default(), Arc::new(ManualClock::new(5_000)));
    let view = NodeView::unmanaged();
    let slot = shoal_wire::key_slot(b"k");
    // Off (the default, as Redis 8's cluster-slot-stats-enabled): nothing is counted.
    apply_batch(&store, &view, 0, vec![set("k", "v", None)]);
    assert_eq!(store.slot_traffic.get(slot), Default::default());
    store.slot_traffic.set_enabled(true);
    apply_batch(&store, &view, 0, vec![set("k", "v", None), tracked_get("k", 0)]);
    let fetch = op(Kind::Fetch(proto::Fetch { key: Bytes::from("k") }));
    apply_batch(&store, &view, 0, vec![fetch]);
    let t = store.slot_traffic.get(slot);
    assert_eq!((t.writes, t.reads), (1, 1), "the migration's FETCH is not a client read or write");
}

#[test]
fn a_tracked_read_hears_of_each_kind_of_change_once() {
    let clock = ManualClock::new(5_000);
    let store = Store::new(StoreConfig::default(), Arc::new(clock.clone()));
    let pubsub = crate::pubsub::PubSub::default();
    let view = NodeView::unmanaged();
    let mut rx = tracking_stream(&store, &pubsub, 7, None);
    let run = |ops: Vec<Op>| apply_batch(&store, &view, 0, ops);
    let del = |k: &str| op(Kind::Del(proto::Del { key: Bytes::from(k.to_string()) }));

    // An untracked token or a missing key: a plain reply.
    run(vec![set("k", "v1", Some(10_000))]);
    assert_eq!(run(vec![tracked_get("k", 99)])[0].kind, Some(reply::Kind::Value(Bytes::from("v1"))));
    let r = run(vec![tracked_get("k", 7)]);
    assert_eq!(
        r[0].kind,
        Some(reply::Kind::Tracked(proto::Tracked { value: Bytes::from("v1"), ttl_ms: 10_000 })),
        "the value with its remaining TTL"
    );
    run(vec![tracked_get("k", 7)]);
    assert!(invalidations(&mut rx).is_empty(), "reads invalidate nothing");
    run(vec![set("k", "v2", None), set("k", "v3", None)]);
    assert_eq!(invalidations(&mut rx), ["k"], "one invalidation, then forgotten");

    // Delete.
    run(vec![tracked_get("k", 7)]);
    run(vec![del("k")]);
    assert_eq!(invalidations(&mut rx), ["k"]);

    // Expiry (lazy: the key is found expired by a later op).
    run(vec![set("t", "x", Some(100)), tracked_get("t", 7)]);
    clock.advance(200);
    assert_eq!(
        run(vec![op(Kind::Exists(proto::Exists { key: Bytes::from("t") }))])[0].kind,
        Some(reply::Kind::Int(0))
    );
    assert_eq!(invalidations(&mut rx), ["t"]);

    // Active expiry.
    run(vec![set("a", "x", Some(100)), tracked_get("a", 7)]);
    clock.advance(200);
    store.purge_expired(100);
    assert_eq!(invalidations(&mut rx), ["a"]);

    // Flush: one invalidate-all.
    run(vec![set("f", "x", None), tracked_get("f", 7)]);
    run(vec![op(Kind::Flush(proto::Flush {}))]);
    assert_eq!(invalidations(&mut rx), ["*"]);
    assert_eq!(store.watches.tracking.len(), 0);

    // A typed command (through the node's command table) changing a tracked key.
    run(vec![set("h", "x", None), tracked_get("h", 7), del("h")]);
    assert_eq!(invalidations(&mut rx), ["h"]);
    run(vec![tracked_get("h", 7)]);
    run(vec![op(Kind::Command(Box::new(proto::Command {
        args: vec![Bytes::from("HSET"), Bytes::from("h"), Bytes::from("f"), Bytes::from("v")],
        keys: vec![Bytes::from("h")],
        ..Default::default()
    })))]);
    assert_eq!(invalidations(&mut rx), ["h"], "a key read while missing is tracked too");
    // A typed value is answered plainly (not cached).
    assert!(matches!(run(vec![tracked_get("h", 7)])[0].kind, Some(reply::Kind::Error(_))));
}

#[test]
fn eviction_invalidates_tracked_keys() {
    let clock = ManualClock::new(5_000);
    let config = StoreConfig {
        maxmemory: 64 << 10,
        policy: crate::store::EvictionPolicy::AllKeysRandom,
        ..StoreConfig::default()
    };
    let store = Store::new(config, Arc::new(clock.clone()));
    let pubsub = crate::pubsub::PubSub::default();
    let view = NodeView::unmanaged();
    let mut rx = tracking_stream(&store, &pubsub, 7, None);
    let value = "x".repeat(1000);
    let tracked: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    for k in &tracked {
        apply_batch(&store, &view, 0, vec![set(k, &value, None), tracked_get(k, 7)]);
    }
    assert!(invalidations(&mut rx).is_empty());
    for i in 0..500 {
        apply_batch(&store, &view, 0, vec![set(&format!("filler{i}"), &value, None)]);
    }
    let gone: Vec<String> = tracked.iter().filter(|k| store.get(k.as_bytes()).is_none()).cloned().collect();
    assert!(!gone.is_empty(), "the limit evicted some tracked keys");
    let mut heard = invalidations(&mut rx);
    heard.sort();
    let mut expected = gone.clone();
    expected.sort();
    assert_eq!(heard, expected, "each evicted tracked key invalidated once");
}

#[test]
fn bcast_hears_every_change_under_its_prefixes() {
    let store = Store::new(StoreConfig::default(), Arc::new(ManualClock::new(5_000)));
    let pubsub = crate::pubsub::PubSub::default();
    let view = NodeView::unmanaged();
    let mut rx = tracking_stream(&store, &pubsub, 7, Some(vec![Bytes::from("user:")]));
    apply_batch(
        &store,
        &view,
        0,
        vec![
            set("user:1", "a", None),
            set("user:1", "b", None),
            set("other", "c", None),
            set("user:2", "d", None),
        ],
    );
    assert_eq!(invalidations(&mut rx), ["user:1", "user:1", "user:2"]);
}

#[test]
fn batch_replies_line_up_with_ops() {
    let clock = ManualClock::new(5_000);
    let store = Store::new(StoreConfig::default(), Arc::new(clock.clone()));
    let replies = apply_batch(
        &store,
        &NodeView::unmanaged(),
        0,
        vec![
            op(Kind::Set(Set {
                key: Bytes::from("k"),
                value: Bytes::from("v"),
                expiry: Some(Expiry { ms: 1_500, relative: true }),
                ..Default::default()
            })),
            op(Kind::Get(Get { key: Bytes::from("k"), ..Default::default() })),
            op(Kind::Ttl(Ttl { key: Bytes::from("k"), absolute: true })),
            op(Kind::IncrBy(IncrBy { key: Bytes::from("k"), delta: 1 })),
            Op::default(),
        ],
    );
    let kinds: Vec<_> = replies.into_iter().map(|r| r.kind.unwrap()).collect();
    assert_eq!(kinds[0], reply::Kind::Ok(proto::Empty {}));
    assert_eq!(kinds[1], reply::Kind::Value(Bytes::from("v")));
    assert_eq!(kinds[2], reply::Kind::Int(6_500), "relative TTLs use the node's clock");
    assert_eq!(kinds[3], reply::Kind::Error("ERR value is not an integer or out of range".into()));
    assert!(matches!(kinds[4], reply::Kind::Error(_)));
}
