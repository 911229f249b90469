//! Snapshots end to end through the store: write, restart, serve from the mapping underneath
//! memory, and refuse damaged files.

use std::path::Path;
use std::sync::Arc;

use shoal_node::persistence::{Persistence, write_snapshot};
use shoal_node::snapshot::{Lookup, Snapshot, dir, format};
use shoal_node::store::{
    EvictionPolicy, ExpireFlags, ManualClock, SetExpiry, SetOptions, Store, StoreConfig, TtlState,
};

const T0: u64 = 1_900_000_000_000;

fn store(clock: &ManualClock) -> Arc<Store> {
    Arc::new(Store::new(StoreConfig { shards: 4, ..Default::default() }, Arc::new(clock.clone())))
}

fn set(s: &Store, k: &[u8], v: &[u8]) {
    s.set(k, v, SetOptions::default()).unwrap();
}

fn set_ttl(s: &Store, k: &[u8], v: &[u8], at: u64) {
    s.set(k, v, SetOptions { expiry: SetExpiry::At(at), ..Default::default() }).unwrap();
}

/// A new store on the newest snapshot in `dir`, as a restarted node would have.
fn restart(dir: &Path, clock: &ManualClock) -> Arc<Store> {
    let s = store(clock);
    Persistence::open(s.clone(), Some(dir.to_path_buf()), 2).unwrap();
    s
}

fn snapshot(s: &Store, dir: &Path) -> std::path::PathBuf {
    write_snapshot(s, dir, 3).unwrap().path
}

#[test]
fn every_value_shape_round_trips() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let s = store(&clock);
    let big: Vec<u8> = (0..1 << 20).map(|i| (i % 253) as u8).collect();
    let binary_key = b"\x00\xff{tag}\r\n".to_vec();
    set(&s, b"empty", b"");
    set(&s, &binary_key, b"\x00\x01\x02\xfe\xff");
    set(&s, b"big", &big);
    set_ttl(&s, b"ttl", b"soon", T0 + 60_000);
    set(&s, b"", b"empty key");
    for i in 0..1000 {
        set(&s, format!("k{i}").as_bytes(), format!("v{i}").as_bytes());
    }
    snapshot(&s, d.path());
    let r = restart(d.path(), &clock);
    assert_eq!(r.get(b"empty").unwrap(), "");
    assert_eq!(r.get(&binary_key).unwrap(), &b"\x00\x01\x02\xfe\xff"[..]);
    assert!(r.get(b"big").unwrap() == big);
    assert_eq!(r.get(b"ttl").unwrap(), "soon");
    assert_eq!(r.ttl(b"ttl"), TtlState::ExpiresAt(T0 + 60_000), "TTLs are absolute");
    assert_eq!(r.ttl(b"big"), TtlState::Persistent);
    assert_eq!(r.get(b"").unwrap(), "empty key");
    assert_eq!(r.get(b"k777").unwrap(), "v777");
    assert_eq!(r.len(), 1005);
    assert_eq!(r.used_memory(), r.fixed_memory(), "served from the mapping: nothing copied into memory");
}

#[test]
fn expiry_is_honoured_across_restart() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let s = store(&clock);
    set_ttl(&s, b"short", b"v", T0 + 1_000);
    set_ttl(&s, b"long", b"v", T0 + 100_000);
    snapshot(&s, d.path());
    clock.advance(2_000);
    let r = restart(d.path(), &clock);
    assert_eq!(r.get(b"short"), None, "expired while the node was down");
    assert_eq!(r.ttl(b"short"), TtlState::Missing);
    assert_eq!(r.get(b"long").unwrap(), "v");
    clock.advance(100_000);
    assert_eq!(r.get(b"long"), None, "expires on time when served from the snapshot");
    // An expired base entry is left out of the next snapshot.
    let p = snapshot(&r, d.path());
    assert_eq!(Snapshot::open(&p).unwrap().len(), 0);
}

#[test]
fn active_expiry_reclaims_snapshot_keys_so_dbsize_drops() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let s = store(&clock);
    for i in 0..100 {
        set_ttl(&s, format!("t{i}").as_bytes(), b"v", T0 + 1_000 + i);
    }
    set(&s, b"kept", b"v");
    set_ttl(&s, b"rewritten", b"old", T0 + 1_000);
    snapshot(&s, d.path());
    let r = restart(d.path(), &clock);
    assert_eq!(r.index_base_expiry(), 101);
    r.set(b"rewritten", b"new", Default::default()).unwrap();
    assert_eq!(r.len(), 102);
    assert_eq!(r.purge_expired(1000), 0, "nothing is due yet");
    clock.advance(10_000);
    assert_eq!(r.len(), 102, "expired, not yet reclaimed: counted, as in Redis");
    assert_eq!(r.purge_expired(1000), 100, "the 100 snapshot keys; the rewritten one lives in memory");
    assert_eq!(r.len(), 2);
    assert_eq!(r.stats().expired_keys, 100);
    assert_eq!(r.get(b"rewritten").unwrap(), "new");
    assert_eq!(r.get(b"kept").unwrap(), "v");
}

#[test]
fn deletes_and_overwrites_shadow_the_snapshot_and_survive_the_next_one() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let s = store(&clock);
    for k in ["del", "over", "expire-me", "evict-me", "keep", "persist"] {
        set(&s, k.as_bytes(), b"old");
    }
    set_ttl(&s, b"persist", b"old", T0 + 50_000);
    snapshot(&s, d.path());

    let r = restart(d.path(), &clock);
    assert!(r.del(b"del"));
    assert!(!r.del(b"del"), "deleted means gone, not back from the snapshot");
    assert_eq!(r.get(b"del"), None);
    set(&r, b"over", b"new");
    assert!(r.expire(b"expire-me", (T0 + 500) as i64, ExpireFlags::default()));
    assert!(r.persist(b"persist"));
    assert_eq!(r.append(b"keep", b"+more").unwrap(), 8, "changes copy the key out of the snapshot");
    clock.advance(1_000);
    assert_eq!(r.get(b"expire-me"), None, "expiry of a copied key does not resurrect the snapshot's");
    r.purge_expired(100);
    assert_eq!(r.get(b"expire-me"), None);
    assert_eq!(r.len(), 4, "over, evict-me, keep, persist");

    snapshot(&r, d.path());
    let again = restart(d.path(), &clock);
    assert_eq!(again.get(b"del"), None);
    assert_eq!(again.get(b"expire-me"), None);
    assert_eq!(again.get(b"over").unwrap(), "new");
    assert_eq!(again.get(b"keep").unwrap(), "old+more");
    assert_eq!(again.ttl(b"persist"), TtlState::Persistent);
    assert_eq!(again.len(), 4);
}

#[test]
fn eviction_never_brings_back_the_snapshot_copy() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let s = store(&clock);
    for i in 0..200 {
        set(&s, format!("k{i}").as_bytes(), b"from-snapshot");
    }
    snapshot(&s, d.path());
    let config = StoreConfig {
        shards: 4,
        maxmemory: 40 * 1024,
        policy: EvictionPolicy::AllKeysLru,
        ..Default::default()
    };
    let r = Arc::new(Store::new(config, Arc::new(clock.clone())));
    Persistence::open(r.clone(), Some(d.path().to_path_buf()), 2).unwrap();
    for i in 0..200 {
        set(&r, format!("k{i}").as_bytes(), &[b'n'; 200]);
    }
    assert!(r.stats().evicted_keys > 0, "memory pressure evicted something");
    for i in 0..200 {
        let v = r.get(format!("k{i}").as_bytes());
        assert_ne!(
            v.as_deref(),
            Some(&b"from-snapshot"[..]),
            "k{i}: an evicted key must not fall back to the snapshot"
        );
    }
}

#[test]
fn scan_keys_dbsize_randomkey_see_both_layers_once() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let s = store(&clock);
    for i in 0..300 {
        set(&s, format!("base:{i}").as_bytes(), b"v");
    }
    snapshot(&s, d.path());
    let r = restart(d.path(), &clock);
    for i in 0..100 {
        set(&r, format!("mem:{i}").as_bytes(), b"v");
        set(&r, format!("base:{i}").as_bytes(), b"overwritten");
    }
    for i in 100..150 {
        r.del(format!("base:{i}").as_bytes());
    }
    assert_eq!(r.len(), 100 + 250);
    let scan_all = || {
        let (mut seen, mut cursor) = (Vec::new(), 0);
        loop {
            let page = r.scan(cursor, 17, None, "");
            seen.extend(page.keys);
            cursor = page.cursor;
            if cursor == 0 {
                return seen;
            }
        }
    };
    let mut seen = scan_all();
    seen.sort();
    let n = seen.len();
    seen.dedup();
    assert_eq!((n, seen.len()), (350, 350), "every key once, deleted ones not at all");
    assert_eq!(r.keys(b"base:*").len(), 250);
    assert_eq!(r.keys(b"base:12?").len(), 0, "base:120..129 were deleted");
    for _ in 0..20 {
        let k = r.random_key().unwrap();
        assert!(r.exists(&k), "RANDOMKEY returns live keys");
    }
    // A slot given away (resharding) takes its snapshot keys out of every listing and count.
    let slot = shoal_wire::key_slot(b"base:200");
    let in_slot = (150..300).filter(|i| shoal_wire::key_slot(format!("base:{i}").as_bytes()) == slot).count();
    r.drop_slot(slot);
    assert_eq!(r.len(), 350 - in_slot);
    assert_eq!(r.keys(b"*").len(), 350 - in_slot);
    assert!(!r.keys(b"base:*").iter().any(|k| shoal_wire::key_slot(k) == slot));
    let scanned = scan_all();
    assert_eq!(scanned.len(), 350 - in_slot, "SCAN skips the given-away slot's snapshot keys");
    assert!(!scanned.iter().any(|k| shoal_wire::key_slot(k) == slot));
    for _ in 0..50 {
        assert_ne!(shoal_wire::key_slot(&r.random_key().unwrap()), slot);
    }
    r.keep_slot(slot);
    assert_eq!(r.flush(), 350 - in_slot);
    assert_eq!(r.len(), 0, "FLUSHALL drops the snapshot layer too");
    assert_eq!(r.get(b"base:200"), None);
}

/// Two snapshots in a directory: an older valid one and the newest, which each case damages.
fn damaged(
    case: impl Fn(&mut Vec<u8>, &format::Header),
) -> (tempfile::TempDir, Option<Snapshot>, std::path::PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let s = store(&clock);
    set(&s, b"generation", b"old");
    snapshot(&s, d.path());
    set(&s, b"generation", b"new");
    for i in 0..50 {
        set(&s, format!("k{i}").as_bytes(), format!("value-{i}").as_bytes());
    }
    let newest = snapshot(&s, d.path());
    let mut bytes = std::fs::read(&newest).unwrap();
    let header = format::Header::decode(&bytes, bytes.len() as u64).unwrap();
    case(&mut bytes, &header);
    std::fs::write(&newest, &bytes).unwrap();
    let opened = dir::open_newest(d.path()).unwrap();
    (d, opened, newest)
}

#[test]
fn truncation_at_every_section_boundary_is_rejected() {
    let h = {
        let (_d, snap, _) = damaged(|_, _| {});
        *snap.unwrap().header()
    };
    let cuts = [0, 10, 63, 64, h.index_offset / 2, h.index_offset, h.index_offset + 16, h.file_len - 1];
    for cut in cuts {
        let (_d, snap, newest) = damaged(|b, _| b.truncate(cut as usize));
        let snap = snap.expect("the older snapshot is used instead");
        assert_ne!(snap.path(), newest.as_path(), "cut at {cut}: the damaged file is refused");
        let Lookup::Found(e) = snap.get(shoal_wire::key_slot(b"generation"), b"generation") else { panic!() };
        assert_eq!(e.value, b"old", "cut at {cut}");
    }
    // Extending a file is refused as well.
    let (_d, snap, newest) = damaged(|b, _| b.extend_from_slice(&[0; 8]));
    assert_ne!(snap.unwrap().path(), newest.as_path());
}

#[test]
fn damaged_header_is_salvaged_only_when_one_repair_fits_and_every_entry_verifies() {
    type Damage = Box<dyn Fn(&mut Vec<u8>, &format::Header)>;
    let generation = |snap: &Snapshot| match snap.get(shoal_wire::key_slot(b"generation"), b"generation") {
        Lookup::Found(e) => e.value.to_vec(),
        other => panic!("{other:?}"),
    };
    // One damaged byte anywhere in the header: the header checksum names the repair, every entry
    // verifies, so the newest file is served (unchanged on disk).
    let salvaged: Vec<(&str, Damage)> = vec![
        ("magic", Box::new(|b, _| b[0] = b'X')),
        ("version", Box::new(|b, _| b[8] = 9)),
        ("entry count", Box::new(|b, _| b[16] ^= 1)),
        ("created time", Box::new(|b, _| b[25] ^= 0x80)),
        ("index offset", Box::new(|b, _| b[40] ^= 8)),
        ("checksum", Box::new(|b, _| b[57] ^= 1)),
    ];
    for (what, case) in salvaged {
        let (_d, snap, newest) = damaged(case);
        let snap = snap.unwrap_or_else(|| panic!("{what}: a snapshot is loaded"));
        assert_eq!(snap.path(), newest.as_path(), "{what}: the damaged newest file is salvaged");
        assert_eq!(generation(&snap), b"new", "{what}");
        assert!(snap.verify().is_clean(), "{what}");
    }
    // Damage no single repair explains, or a repair the entries contradict: the older snapshot.
    let refused: Vec<(&str, Damage)> = vec![
        ("byte order", Box::new(|b, _| b[12..16].copy_from_slice(&format::BOM.to_be_bytes()))),
        (
            "two fields",
            Box::new(|b, _| {
                b[16] ^= 1;
                b[25] ^= 1;
            }),
        ),
        // A consistent but wrong header (checksum recomputed): fewer entries, index moved.
        (
            "forged",
            Box::new(|b, h| {
                let forged = format::Header {
                    entry_count: h.entry_count - 1,
                    index_offset: h.index_offset + format::ENTRY_LEN as u64,
                    ..*h
                };
                let mut bytes = forged.encode();
                bytes[57] ^= 1;
                b[..format::HEADER_LEN].copy_from_slice(&bytes);
            }),
        ),
    ];
    for (what, case) in refused {
        let (d, snap, newest) = damaged(case);
        let snap = snap.unwrap_or_else(|| panic!("{what}: the older snapshot is used"));
        assert_ne!(snap.path(), newest.as_path(), "{what}");
        assert_eq!(generation(&snap), b"old", "{what}");
        assert!(!newest.exists(), "{what}: moved aside");
        let quarantined: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| dir::is_quarantined(n))
            .collect();
        assert_eq!(quarantined.len(), 1, "{what}: {quarantined:?}");
    }
    // Every snapshot damaged: the node starts empty rather than serving anything unchecked.
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join(dir::file_name(1)), b"SHOALSNP garbage").unwrap();
    assert!(dir::open_newest(d.path()).unwrap().is_none());
}

#[test]
fn a_flipped_byte_in_the_index_or_data_is_never_served() {
    for region in ["index", "data"] {
        for victim in 0..5 {
            let (_d, snap, newest) = damaged(|b, h| {
                let at = match region {
                    // Inside the victim entry's value length field, or its key bytes.
                    "index" => h.index_offset as usize + victim * format::ENTRY_LEN + 17,
                    _ => {
                        let e = format::IndexEntry::decode(
                            &b[h.index_offset as usize + victim * format::ENTRY_LEN..],
                        );
                        e.offset as usize + e.key_len as usize / 2
                    }
                };
                b[at] ^= 0x20;
            });
            let snap = snap.unwrap();
            assert_eq!(snap.path(), newest.as_path(), "the header is fine, so the file is mapped");
            let report = snap.verify();
            assert_eq!(report.corrupt, 1, "{region} #{victim}: the verifier finds exactly the damaged entry");
            // Every other key is served correctly; the damaged one is refused, not garbled.
            let mut refused = 0;
            for i in 0..50 {
                let key = format!("k{i}");
                match snap.get(shoal_wire::key_slot(key.as_bytes()), key.as_bytes()) {
                    Lookup::Found(e) => assert_eq!(e.value, format!("value-{i}").as_bytes()),
                    Lookup::Corrupt | Lookup::Missing => refused += 1,
                }
            }
            assert!(refused <= 1, "{region} #{victim}: {refused} keys refused");
            assert!(snap.corrupt_entries() >= 1);
        }
    }
}

#[test]
fn snapshots_are_kept_up_to_the_limit_and_leftovers_cleaned() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let s = store(&clock);
    for i in 0..5 {
        set(&s, b"gen", i.to_string().as_bytes());
        write_snapshot(&s, d.path(), 2).unwrap();
    }
    let files = dir::list(d.path()).unwrap();
    assert_eq!(files.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), vec![5, 4]);
    std::fs::write(d.path().join("snapshot-00000000000000000009.shoal.tmp"), b"partial").unwrap();
    let r = restart(d.path(), &clock);
    assert_eq!(r.get(b"gen").unwrap(), "4");
    assert!(
        !d.path().join("snapshot-00000000000000000009.shoal.tmp").exists(),
        "unfinished writes are removed"
    );
}
