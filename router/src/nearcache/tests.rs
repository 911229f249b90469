//! The near cache's unit tests: coherence, bounds, eviction, leases.

use super::*;

fn b(s: &str) -> Bytes {
    Bytes::from(s.to_string())
}

fn cache(capacity: usize) -> (NearCache, Arc<NodeLease>) {
    let c = NearCache::new(capacity, Duration::from_secs(60));
    let lease = c.lease_of(1, "n1");
    c.pong(&lease, c.ping());
    (c, lease)
}

#[test]
fn inserts_and_hits_until_invalidated() {
    let (c, lease) = cache(1 << 20);
    assert_eq!(c.get(b"k", 1), None);
    let t = c.ticket(&lease, 1).unwrap();
    assert!(c.insert(&b("k"), &b("v"), 0, &t, 1));
    assert_eq!(c.get(b"k", 1), Some(b("v")));
    assert_eq!(c.get(b"k", 2), None, "not served by another topology version");
    let t = c.ticket(&lease, 1).unwrap();
    assert!(c.insert(&b("k"), &b("v"), 0, &t, 1));
    c.invalidate(b"k");
    assert_eq!(c.get(b"k", 1), None);
    assert_eq!((c.metrics.hits.get(), c.metrics.entries.load(Ordering::Relaxed)), (1, 0));
}

#[test]
fn an_invalidation_that_overtakes_the_reply_prevents_the_insert() {
    let (c, lease) = cache(1 << 20);
    let t = c.ticket(&lease, 1).unwrap();
    c.invalidate(b"k"); // arrives on the Subscribe stream before the reply
    c.invalidate(b"other");
    assert!(!c.insert(&b("k"), &b("old"), 0, &t, 1), "the reply may hold the old value");
    assert_eq!(c.get(b"k", 1), None);
    assert!(c.insert(&b("other2"), &b("x"), 0, &t, 1), "other keys' invalidations do not matter");
    // A ticket taken after the invalidation inserts.
    let t = c.ticket(&lease, 1).unwrap();
    assert!(c.insert(&b("k"), &b("new"), 0, &t, 1));
    // A flush, a topology change or the stream breaking void tickets in flight.
    let t = c.ticket(&lease, 1).unwrap();
    c.flush();
    assert!(!c.insert(&b("k"), &b("x"), 0, &t, 1));
    let t = c.ticket(&lease, 1).unwrap();
    assert!(!c.insert(&b("k"), &b("x"), 0, &t, 2), "routing changed meanwhile");
    let t = c.ticket(&lease, 1).unwrap();
    c.node_down(&lease);
    assert!(!c.insert(&b("k"), &b("x"), 0, &t, 1));
    assert!(c.ticket(&lease, 1).is_none(), "no tracking while the stream is down");
}

#[test]
fn a_ticket_older_than_the_remembered_invalidations_is_refused() {
    let (c, lease) = cache(1 << 20);
    let t = c.ticket(&lease, 1).unwrap();
    for i in 0..(RECENT * SHARDS * 2) {
        c.invalidate(format!("x{i}").as_bytes());
    }
    assert!(!c.insert(&b("k"), &b("v"), 0, &t, 1), "cannot tell whether k was among them");
}

#[test]
fn bytes_are_bounded_and_clock_keeps_what_is_read() {
    let cap = SHARDS * 4 * (ENTRY_OVERHEAD + 10);
    let (c, lease) = cache(cap);
    let mut inserted = 0;
    for i in 0..2000 {
        let k = b(&format!("k{i:04}"));
        let t = c.ticket(&lease, 1).unwrap();
        inserted += c.insert(&k, &b("v"), 0, &t, 1) as usize;
        // k0000 is read all the time: CLOCK keeps it.
        let _ = c.get(b"k0000", 1);
        assert!(c.metrics.bytes.load(Ordering::Relaxed) <= cap);
    }
    assert_eq!(inserted, 2000);
    assert!(c.metrics.evictions.get() > 1900);
    assert_eq!(c.get(b"k0000", 1), Some(b("v")), "a hot entry survives");
    // Too large for a shard: not inserted.
    let t = c.ticket(&lease, 1).unwrap();
    assert!(!c.insert(&b("big"), &Bytes::from(vec![0u8; cap]), 0, &t, 1));
}

#[test]
fn a_topology_change_keeps_only_the_slots_whose_owner_stayed() {
    let (c, lease) = cache(1 << 20);
    for k in ["a", "b", "c"] {
        let t = c.ticket(&lease, 1).unwrap();
        assert!(c.insert(&b(k), &b("v"), 0, &t, 1));
    }
    c.saw_version(2);
    assert_eq!(c.get(b"a", 1), None, "a node serves a newer topology: no hits until adopted");
    let mut changed = vec![false; shoal_wire::SLOT_COUNT];
    changed[usize::from(shoal_wire::key_slot(b"b"))] = true;
    c.adopted(1, 2, &changed);
    assert_eq!(c.get(b"a", 2), Some(b("v")), "its owner did not change");
    assert_eq!(c.get(b"b", 2), None, "its slot moved");
    assert_eq!(c.metrics.entries.load(Ordering::Relaxed), 2);
    // An entry of another version than the one replaced goes.
    c.adopted(5, 6, &vec![false; shoal_wire::SLOT_COUNT]);
    assert_eq!(c.metrics.entries.load(Ordering::Relaxed), 0);
}

#[test]
fn an_entry_holds_a_copy_not_the_buffers_its_key_and_value_were_cut_from() {
    // Held in the entry itself, in an allocation copied out on a hit, and in one shared.
    for value_len in [32, 100, COPY_OUT + 1] {
        let (c, lease) = cache(1 << 20);
        // A client's read buffer and a node's reply: the key and the value are slices of them.
        let read = Bytes::from(vec![b'k'; 64 << 10]);
        let reply = Bytes::from((0..64 << 10).map(|i| i as u8).collect::<Vec<u8>>());
        let (key, value) = (read.slice(100..116), reply.slice(200..200 + value_len));
        let t = c.ticket(&lease, 1).unwrap();
        assert!(c.insert(&key, &value, 0, &t, 1));
        let hit = c.get(&key, 1).unwrap();
        assert_eq!(hit, value);
        let within = |b: &Bytes, p: *const u8| b.as_ptr_range().contains(&p);
        assert!(!within(&reply, hit.as_ptr()), "the value still points into the node's reply");
        // Only the slices' own bytes are counted, so only they may be held.
        assert_eq!(c.metrics.bytes.load(Ordering::Relaxed), 16 + value_len + ENTRY_OVERHEAD);
        // Nothing else is referenced: both buffers are unique again once the slices go.
        drop((key, value, hit));
        assert!(read.is_unique() && reply.is_unique(), "the entry pins a buffer it was cut from");
    }
}

#[test]
fn the_per_entry_overhead_is_what_the_docs_say() {
    // docs/near-cache.md states it; a change of `Entry` must change the docs too.
    assert_eq!(ENTRY_OVERHEAD, 161);
}

#[test]
fn entries_expire_with_their_ttl() {
    let (c, lease) = cache(1 << 20);
    let t = c.ticket(&lease, 1).unwrap();
    assert!(c.insert(&b("k"), &b("v"), 30, &t, 1));
    assert_eq!(c.get(b"k", 1), Some(b("v")));
    std::thread::sleep(Duration::from_millis(40));
    assert_eq!(c.get(b"k", 1), None, "expired locally at the key's expiry");
}

#[test]
fn warming_lookups_changes_nothing_a_hit_would() {
    let cap = SHARDS * 4 * (ENTRY_OVERHEAD + 10);
    let (c, lease) = cache(cap);
    let keys: Vec<Bytes> = (0..SHARDS * 3).map(|i| b(&format!("k{i:04}"))).collect();
    for k in &keys {
        let t = c.ticket(&lease, 1).unwrap();
        // One key with a TTL that passes before the warm-up: not removed by it.
        assert!(c.insert(k, &b("v"), if k == &keys[0] { 10 } else { 0 }, &t, 1));
    }
    std::thread::sleep(Duration::from_millis(20));
    let entries = c.metrics.entries.load(Ordering::Relaxed);
    let found = c.warm(keys.iter().chain(&keys).map(|k| &k[..]).chain([&b"absent"[..]]));
    assert_eq!(found, 2 * entries, "every cached key looked up, in every shard");
    assert_eq!((c.metrics.hits.get(), c.metrics.misses.get()), (0, 0), "no hit or miss counted");
    assert_eq!(c.metrics.entries.load(Ordering::Relaxed), entries, "the expired entry is still there");
    // No entry marked read: unlike a key read all the time (the test above), a key warmed
    // all the time is evicted.
    for i in 0..2000 {
        let t = c.ticket(&lease, 1).unwrap();
        assert!(c.insert(&b(&format!("n{i:04}")), &b("v"), 0, &t, 1));
        c.warm([&keys[1][..], &keys[1][..]].into_iter());
    }
    assert_eq!(c.get(&keys[1], 1), None, "CLOCK gave a warmed entry a second chance");
}

#[test]
fn a_silent_node_serves_no_hits() {
    let c = NearCache::new(1 << 20, Duration::from_millis(30));
    let lease = c.lease_of(1, "n1");
    c.pong(&lease, c.ping());
    let t = c.ticket(&lease, 1).unwrap();
    assert!(c.insert(&b("k"), &b("v"), 0, &t, 1));
    assert_eq!(c.get(b"k", 1), Some(b("v")));
    std::thread::sleep(Duration::from_millis(40));
    assert_eq!(c.get(b"k", 1), None, "past the lease without an answered ping");
    c.pong(&lease, c.ping());
    assert_eq!(c.get(b"k", 1), Some(b("v")), "heard again: served again");
    c.node_down(&lease);
    c.pong(&lease, c.ping());
    assert_eq!(c.get(b"k", 1), None, "a broken stream emptied the node's entries");
}
