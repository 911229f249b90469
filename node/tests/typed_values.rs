//! Typed values (hashes, ...) through snapshots: written in the typed format, served from the
//! mapping after a restart, changed in memory on top of it; files of format version 1 (strings
//! only, written by earlier Shoal releases) still load.

use std::sync::Arc;

use bytes::Bytes;
use shoal_node::commands;
use shoal_node::persistence::{Persistence, write_snapshot};
use shoal_node::store::{ManualClock, Store, StoreConfig, TtlState};
use shoal_wire::proto::{frame, reply};

const T0: u64 = 1_900_000_000_000;

fn store(clock: &ManualClock) -> Arc<Store> {
    Arc::new(Store::new(StoreConfig { shards: 4, ..Default::default() }, Arc::new(clock.clone())))
}

/// Runs a command; its reply as text (bulk/simple/error/int), arrays joined with `,`.
fn run(s: &Store, args: &[&str]) -> String {
    let args: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a.as_bytes())).collect();
    let r = commands::run(s, &args);
    let Some(reply::Kind::Frame(f)) = r.kind else { panic!("not a frame: {r:?}") };
    text(f)
}

fn text(f: shoal_wire::proto::Frame) -> String {
    use frame::Kind::*;
    match f.kind.unwrap() {
        Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        Int(n) => n.to_string(),
        Error(e) => format!("-{e}"),
        Nil(_) | NullArray(_) => "(nil)".into(),
        Simple(s) => s,
        Double(d) => String::from_utf8_lossy(&d).into_owned(),
        Array(a) | Map(a) | Set(a) | Pairs(a) | Keyed(a) => {
            a.items.into_iter().map(text).collect::<Vec<_>>().join(",")
        }
        Raw(raw) => text(commands::raw_frame(&raw).expect("a raw reply reads back as frames")),
        Boolean(b) => b.to_string(),
        BigNumber(n) | Verbatim(n) => String::from_utf8_lossy(&n).into_owned(),
    }
}

#[test]
fn typed_values_survive_a_snapshot_and_change_on_top_of_it() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let s = store(&clock);
    run(&s, &["HSET", "small", "b", "2", "a", "1"]);
    for i in 0..5_000 {
        run(&s, &["HSET", "big", &format!("field:{i}"), &format!("value:{i}")]);
    }
    run(&s, &["HSET", "ttl", "f", "v"]);
    s.expire(b"ttl", (T0 + 60_000) as i64, Default::default());
    s.set(b"plain", b"string", Default::default()).unwrap();
    write_snapshot(&s, d.path(), 3).unwrap();

    let r = store(&clock);
    Persistence::open(r.clone(), Some(d.path().to_path_buf()), 2).unwrap();
    assert_eq!(r.used_memory(), r.fixed_memory(), "served from the mapping");
    assert_eq!(r.type_of(b"small"), "hash");
    assert_eq!(r.type_of(b"plain"), "string");
    assert_eq!(run(&r, &["HGETALL", "small"]), "b,2,a,1", "insertion order kept");
    assert_eq!(run(&r, &["OBJECT", "ENCODING", "small"]), "listpack");
    assert_eq!(run(&r, &["HLEN", "big"]), "5000");
    assert_eq!(run(&r, &["OBJECT", "ENCODING", "big"]), "hashtable");
    assert_eq!(run(&r, &["HGET", "big", "field:4321"]), "value:4321");
    assert_eq!(r.ttl(b"ttl"), TtlState::ExpiresAt(T0 + 60_000));
    assert_eq!(
        run(&r, &["HGET", "plain", "f"]),
        "-WRONGTYPE Operation against a key holding the wrong kind of value"
    );
    // Changes land in memory over the base, and the next snapshot folds them in.
    assert_eq!(run(&r, &["HDEL", "big", "field:0", "field:1"]), "2");
    assert_eq!(run(&r, &["HSET", "small", "c", "3"]), "1");
    assert!(r.used_memory() > 0);
    run(&r, &["HDEL", "ttl", "f"]);
    assert_eq!(r.type_of(b"ttl"), "none", "an emptied hash is deleted, and stays so over the base");
    write_snapshot(&r, d.path(), 3).unwrap();
    let again = store(&clock);
    Persistence::open(again.clone(), Some(d.path().to_path_buf()), 2).unwrap();
    assert_eq!(run(&again, &["HLEN", "big"]), "4998");
    assert_eq!(run(&again, &["HGETALL", "small"]), "b,2,a,1,c,3");
    assert_eq!(again.type_of(b"ttl"), "none");
    assert_eq!(again.len(), 3);
}

#[test]
fn streams_survive_a_snapshot_with_their_groups() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let s = store(&clock);
    for i in 1..=250 {
        run(&s, &["XADD", "events", &format!("{i}-0"), "n", &i.to_string(), "payload", "x"]);
    }
    run(&s, &["XDEL", "events", "7-0"]);
    run(&s, &["XGROUP", "CREATE", "events", "workers", "0"]);
    assert_eq!(
        run(&s, &["XREADGROUP", "GROUP", "workers", "w1", "COUNT", "3", "STREAMS", "events", ">"])
            .matches(",n,")
            .count(),
        3
    );
    run(&s, &["XACK", "events", "workers", "1-0"]);
    // An emptied stream stays, with its last ID.
    run(&s, &["XADD", "emptied", "5-5", "f", "v"]);
    run(&s, &["XDEL", "emptied", "5-5"]);
    let info = run(&s, &["XINFO", "STREAM", "events"]);
    write_snapshot(&s, d.path(), 3).unwrap();

    let r = store(&clock);
    Persistence::open(r.clone(), Some(d.path().to_path_buf()), 2).unwrap();
    assert_eq!(r.type_of(b"events"), "stream");
    assert_eq!(run(&r, &["XLEN", "events"]), "249");
    assert_eq!(run(&r, &["XINFO", "STREAM", "events"]), info, "nodes, counters and first/last entries kept");
    assert_eq!(run(&r, &["XPENDING", "events", "workers"]), "2,2-0,3-0,w1,2");
    assert_eq!(run(&r, &["XRANGE", "events", "6", "8"]), "6-0,n,6,payload,x,8-0,n,8,payload,x");
    assert_eq!(run(&r, &["XLEN", "emptied"]), "0");
    assert_eq!(
        run(&r, &["XADD", "emptied", "5-5", "f", "v"]),
        "-ERR The ID specified in XADD is equal or smaller than the target stream top item"
    );
    // Reads and writes go on over the loaded value.
    assert_eq!(
        run(&r, &["XREADGROUP", "GROUP", "workers", "w2", "COUNT", "1", "STREAMS", "events", ">"]),
        "events,4-0,n,4,payload,x"
    );
    run(&r, &["XADD", "events", "300-0", "n", "300"]);
    write_snapshot(&r, d.path(), 3).unwrap();
    let again = store(&clock);
    Persistence::open(again.clone(), Some(d.path().to_path_buf()), 2).unwrap();
    assert_eq!(run(&again, &["XLEN", "events"]), "250");
    assert_eq!(run(&again, &["XPENDING", "events", "workers"]), "3,2-0,4-0,w1,2,w2,1");
}

#[test]
fn a_version_1_snapshot_still_loads() {
    // Written by Shoal before typed values (format version 1): SET v1:plain hello, v1:ttl with
    // EX 100000000, v1:bin "a\tb", INCR v1:n.
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/snapshot-v1.shoal");
    let bytes = std::fs::read(&fixture).unwrap();
    assert_eq!(&bytes[8..12], &1u32.to_le_bytes(), "the fixture is a version 1 file");
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("snapshot-00000000000000000002.shoal"), &bytes).unwrap();
    let clock = ManualClock::new(1_764_000_000_000);
    let s = store(&clock);
    Persistence::open(s.clone(), Some(d.path().to_path_buf()), 2).unwrap();
    assert_eq!(s.len(), 4);
    assert_eq!(s.get(b"v1:plain").unwrap(), "hello");
    assert_eq!(s.get(b"v1:bin").unwrap(), "a\tb");
    assert_eq!(s.get(b"v1:n").unwrap(), "1");
    assert!(matches!(s.ttl(b"v1:ttl"), TtlState::ExpiresAt(_)));
    assert_eq!(s.type_of(b"v1:plain"), "string");
    // And it is written back as the current version.
    s.set(b"v1:new", b"x", Default::default()).unwrap();
    let written = write_snapshot(&s, d.path(), 3).unwrap().path;
    let out = std::fs::read(written).unwrap();
    assert_eq!(&out[8..12], &shoal_node::snapshot::format::VERSION.to_le_bytes());
}

#[test]
fn maxmemory_counts_typed_values_refuses_or_evicts_them() {
    use shoal_node::store::EvictionPolicy;
    let clock = ManualClock::new(T0);
    let limit = 2 << 20;
    let config = |policy| StoreConfig { shards: 4, maxmemory: limit, policy, ..Default::default() };
    // noeviction: typed writes are refused with Redis's -OOM once the limit is reached, and the
    // accounting (which every element counts in) stays near it.
    let s = Store::new(config(EvictionPolicy::NoEviction), Arc::new(clock.clone()));
    let mut refused = None;
    for i in 0..100_000 {
        let r = run(&s, &["SADD", "big:set", &format!("member:{i:08}")]);
        if r.starts_with('-') {
            refused = Some((i, r));
            break;
        }
    }
    let (at, text) = refused.expect("the limit is reached");
    assert_eq!(text, "-OOM command not allowed when used memory > 'maxmemory'.");
    assert!(at > 10_000, "2 MiB holds many members before the limit ({at})");
    assert!(s.used_memory() <= limit + (64 << 10), "{} used", s.used_memory());
    assert_eq!(run(&s, &["SREM", "big:set", "member:00000001"]), "1", "removals are never refused");
    // allkeys-lru: whole typed keys are evicted to make room, and memory stays under the limit.
    let s = Store::new(config(EvictionPolicy::AllKeysLru), Arc::new(clock.clone()));
    for i in 0..3_000 {
        let key = format!("h:{i}");
        assert_eq!(run(&s, &["HSET", &key, "a", &"x".repeat(500), "b", "y"]), "2", "{key}");
    }
    // As in Redis, room is made before a write, which may then go past the limit by its own size.
    assert!(s.used_memory() <= limit + 4096, "{} used", s.used_memory());
    let evicted = s.stats().evicted_keys;
    assert!(evicted > 0 && (s.len() as u64) + evicted == 3_000, "{} kept, {evicted} evicted", s.len());
}

#[test]
fn huge_negative_random_counts_are_refused_not_built() {
    let clock = ManualClock::new(T0);
    let s = store(&clock);
    run(&s, &["HSET", "h", "f", "v"]);
    run(&s, &["SADD", "s", "m"]);
    run(&s, &["ZADD", "z", "1", "m"]);
    for cmd in ["HRANDFIELD h", "SRANDMEMBER s", "ZRANDMEMBER z"] {
        let mut args: Vec<&str> = cmd.split(' ').collect();
        args.push("-9223372036854775807");
        let r = run(&s, &args);
        assert!(r.starts_with("-ERR count is too large"), "{cmd}: {r}");
        args.pop();
        args.push("-3");
        assert_eq!(run(&s, &args).split(',').count(), 3, "{cmd}: small negative counts repeat");
    }
    assert_eq!(
        run(&s, &["SRANDMEMBER", "nokey", "-9223372036854775807"]),
        "",
        "a missing key: empty, as in Redis"
    );
}
