//! What a node does with damaged files in its data directory, on real `shoal-node` processes:
//! it never deletes what it cannot verify, quarantines (renames) what it cannot read and says so,
//! salvages a file whose only damage is one header byte, and never counts a bad file as a kept
//! snapshot.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use shoal_node::persistence::write_snapshot;
use shoal_node::snapshot::{Snapshot, dir, format};
use shoal_node::store::{SetOptions, Store, StoreConfig, SystemClock};
use shoal_wire::proto::{SnapshotRequest, StatsRequest, reply};
use support::{free_port, start_node};

/// The bytes of a valid snapshot holding `prefix:0..n` = `value-<i>`.
fn snapshot_bytes(prefix: &str, n: usize) -> Vec<u8> {
    let scratch = tempfile::tempdir().unwrap();
    let store = Store::new(StoreConfig::default(), Arc::new(SystemClock));
    for i in 0..n {
        store
            .set(format!("{prefix}:{i}").as_bytes(), format!("value-{i}").as_bytes(), SetOptions::default())
            .unwrap();
    }
    std::fs::read(write_snapshot(&store, scratch.path(), 1).unwrap().path).unwrap()
}

/// File name -> bytes, for every file in `d`.
fn files(d: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(d)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap())
        })
        .collect()
}

/// The quarantined copy of `name` in `all`, if there is exactly one.
fn quarantined<'a>(all: &'a BTreeMap<String, Vec<u8>>, name: &str) -> Option<&'a Vec<u8>> {
    let mut found =
        all.iter().filter(|(n, _)| n.starts_with(&format!("{name}{}", dir::QUARANTINE_MARK))).map(|(_, b)| b);
    let first = found.next();
    assert!(found.next().is_none(), "{name} quarantined twice");
    first
}

fn live(all: &BTreeMap<String, Vec<u8>>) -> Vec<&str> {
    all.keys().filter(|n| n.ends_with(".shoal")).map(String::as_str).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_files_are_quarantined_or_salvaged_never_deleted_or_kept() {
    let data = tempfile::tempdir().unwrap();
    let d = data.path();
    // (a) the oldest: intact data, header byte 20 (inside entry_count) flipped;
    let mut flipped = snapshot_bytes("a", 100);
    flipped[20] ^= 0x01;
    // (b) the newest real snapshot, truncated; (c) an empty file; (d) random bytes.
    let mut truncated = snapshot_bytes("b", 100);
    truncated.truncate(truncated.len() * 2 / 3);
    let mut rng = fastrand::Rng::with_seed(42);
    let random: Vec<u8> = (0..4096).map(|_| rng.u8(..)).collect();
    let (a, b, c, r) = (dir::file_name(1), dir::file_name(2), dir::file_name(3), dir::file_name(4));
    for (name, bytes) in [(&a, &flipped), (&b, &truncated), (&c, &Vec::new()), (&r, &random)] {
        std::fs::write(d.join(name), bytes).unwrap();
    }

    let addr = format!("127.0.0.1:{}", free_port());
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let log = tempfile::NamedTempFile::new().unwrap();
    let args = [
        "--listen",
        &addr,
        "--data-dir",
        d.to_str().unwrap(),
        "--snapshot-keep",
        "2",
        "--metrics-listen",
        &metrics_addr,
    ];
    let node = start_node(&args, log.path());
    let mut client = support::connect(&addr).await;

    // The header-damaged file is salvaged: its data is served.
    assert_eq!(support::get(&mut client, 0, "a:7").await, reply::Kind::Value("value-7".into()));
    assert!(
        matches!(support::get(&mut client, 0, "b:7").await, reply::Kind::Nil(_)),
        "truncated: not loaded"
    );

    // At start, the three unreadable files newer than it were moved aside, byte for byte; the
    // salvaged file is untouched.
    let all = files(d);
    assert_eq!(live(&all), vec![a.as_str()], "{:?}", all.keys());
    assert_eq!(all[&a], flipped);
    assert_eq!(quarantined(&all, &b), Some(&truncated));
    assert_eq!(quarantined(&all, &c), Some(&Vec::new()));
    assert_eq!(quarantined(&all, &r), Some(&random));
    let stats = client.stats(StatsRequest::default()).await.unwrap().into_inner();
    let info = stats.snapshot.unwrap();
    for name in [&a, &b, &c, &r] {
        assert!(info.last_error.contains(name.as_str()), "{name} reported: {}", info.last_error);
    }
    assert!(info.last_error.contains("header damaged"), "{}", info.last_error);

    // SHOAL SNAPSHOT: a new file; the salvaged one (its header still damaged) is quarantined, not
    // deleted, and no bad file counts as one of the 2 kept snapshots, so only the new one is live.
    let info = client.snapshot(SnapshotRequest {}).await.unwrap().into_inner();
    assert!(info.last_ok, "{}", info.last_error);
    let new = dir::file_name(5);
    assert_eq!(PathBuf::from(&info.last_file).file_name().unwrap().to_str().unwrap(), new);
    let all = files(d);
    assert_eq!(live(&all), vec![new.as_str()], "{:?}", all.keys());
    assert_eq!(quarantined(&all, &a), Some(&flipped));
    assert_eq!(quarantined(&all, &b), Some(&truncated));
    assert_eq!(quarantined(&all, &c), Some(&Vec::new()));
    assert_eq!(quarantined(&all, &r), Some(&random));
    assert_eq!(all.len(), 5, "nothing else: {:?}", all.keys());
    assert!(Snapshot::open(&d.join(&new)).unwrap().verify().is_clean());

    let page = support::http_get(&metrics_addr, "/metrics").await;
    assert_eq!(support::metric(&page, "shoal_node_snapshot_load_fallbacks_total"), 3.0, "b, c and d");
    assert_eq!(support::metric(&page, "shoal_node_snapshot_quarantined_total"), 4.0);
    assert_eq!(support::metric(&page, "shoal_node_snapshot_salvaged_total"), 1.0);
    // The snapshot just written, as the node itself reports it (what the chart's alert reads).
    assert_eq!(support::metric(&page, "shoal_node_snapshot_last_ok"), 1.0);
    assert_eq!(support::metric(&page, "shoal_node_snapshots_written_total"), 1.0);
    assert!(support::metric(&page, "shoal_node_snapshot_last_bytes") > 0.0);

    // Loudly: an ERROR line naming each file.
    assert!(node.terminate().success());
    let log = std::fs::read_to_string(log.path()).unwrap();
    for name in [&a, &b, &c, &r] {
        assert!(
            log.lines().any(|l| l.contains("ERROR") && l.contains(name.as_str())),
            "no ERROR line for {name}:\n{log}"
        );
    }
    assert!(log.lines().any(|l| l.contains("ERROR") && l.contains("file is") && l.contains(&b)), "{log}");
    assert!(log.lines().any(|l| l.contains("ERROR") && l.contains("bad magic") && l.contains(&r)), "{log}");

    // The salvaged data lives on in the node's own snapshots.
    let log2 = tempfile::NamedTempFile::new().unwrap();
    let _node = start_node(&args, log2.path());
    let mut client = support::connect(&addr).await;
    assert_eq!(support::get(&mut client, 0, "a:99").await, reply::Kind::Value("value-99".into()));
    let info = client.stats(StatsRequest::default()).await.unwrap().into_inner().snapshot.unwrap();
    assert_eq!(info.last_error, "", "a clean start reports nothing");
}

/// Retention deletes only good files: an old file with a damaged entry (header fine) is
/// quarantined, not deleted, and does not take a kept place; good old files are deleted.
#[test]
fn retention_verifies_before_deleting() {
    let data = tempfile::tempdir().unwrap();
    let d = data.path();
    let store = Store::new(StoreConfig::default(), Arc::new(SystemClock));
    for i in 0..4 {
        store.set(b"gen", i.to_string().as_bytes(), SetOptions::default()).unwrap();
        write_snapshot(&store, d, 10).unwrap();
    }
    // Damage one entry's value in snapshot 3 (its header and length stay valid).
    let victim = d.join(dir::file_name(3));
    let mut bytes = std::fs::read(&victim).unwrap();
    let h = format::Header::decode(&bytes, bytes.len() as u64).unwrap();
    let e = format::IndexEntry::decode(&bytes[h.index_offset as usize..]);
    bytes[(e.offset + u64::from(e.key_len)) as usize] ^= 0x20;
    std::fs::write(&victim, &bytes).unwrap();

    store.set(b"gen", b"4", SetOptions::default()).unwrap();
    write_snapshot(&store, d, 2).unwrap();
    let all = files(d);
    // Kept: 5 and 4 (good); 3 quarantined (damaged); 2 and 1 deleted (verified good).
    assert_eq!(live(&all), vec![dir::file_name(4).as_str(), dir::file_name(5).as_str()]);
    assert_eq!(quarantined(&all, &dir::file_name(3)), Some(&bytes));
    assert_eq!(all.len(), 3, "{:?}", all.keys());

    // Sequences are never reused, quarantined files included.
    std::fs::remove_file(d.join(dir::file_name(5))).unwrap();
    std::fs::remove_file(d.join(dir::file_name(4))).unwrap();
    assert_eq!(dir::next_path(d).unwrap(), d.join(dir::file_name(4)));
    let mut q = d.join(dir::file_name(9)).into_os_string();
    q.push(format!("{}123", dir::QUARANTINE_MARK));
    std::fs::write(q, b"x").unwrap();
    assert_eq!(dir::next_path(d).unwrap(), d.join(dir::file_name(10)));
}

/// A tmpfs of `size` mounted on `at` for the test's life (needs root, as the chaos test's network
/// namespaces do): a data directory that can really fill up.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs", at.to_str().unwrap()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "mounting a tmpfs on {} (needs root)", at.display());
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Writes `path` until the file system is full; returns the bytes written.
fn fill(path: &Path) -> usize {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 16 << 10];
    let mut written = 0;
    loop {
        match f.write(&chunk) {
            Ok(0) | Err(_) => return written,
            Ok(n) => written += n,
        }
    }
}

/// Issue 38, process faults: the data directory fills up. The snapshot fails with a clear error
/// and leaves nothing behind (no partial file; the earlier snapshot kept as it was), the node
/// goes on serving reads and writes, and once there is room again it saves, and a restart loads
/// everything from that snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_data_directory_fails_the_snapshot_and_nothing_else() {
    use shoal_wire::proto::{Batch, Op, Set, op::Kind};
    let mnt = tempfile::tempdir().unwrap();
    let d = mnt.path();
    let _tmpfs = Tmpfs::mount(d, "8m");
    let addr = format!("127.0.0.1:{}", free_port());
    let log = tempfile::NamedTempFile::new().unwrap();
    let args = ["--listen", &addr, "--data-dir", d.to_str().unwrap(), "--snapshot-keep", "2"];
    let node = start_node(&args, log.path());
    let mut client = support::connect(&addr).await;
    for i in 0..100 {
        support::set(&mut client, 0, &format!("a:{i}"), "small").await;
    }
    let first = client.snapshot(SnapshotRequest {}).await.unwrap().into_inner();
    assert!(first.last_ok, "{}", first.last_error);
    let first_name = PathBuf::from(&first.last_file).file_name().unwrap().to_str().unwrap().to_string();
    let first_bytes = std::fs::read(&first.last_file).unwrap();

    // 2 MiB of values, then a disk with no room left.
    let value = bytes::Bytes::from("v".repeat(1024));
    for chunk in 0..20 {
        let ops = (0..100)
            .map(|i| {
                let key = bytes::Bytes::from(format!("b:{}", chunk * 100 + i));
                let set = Set { key, value: value.clone(), ..Default::default() };
                Op { kind: Some(Kind::Set(set)), ..Default::default() }
            })
            .collect();
        let batch = Batch { id: 1, ops, topology_version: 0 };
        let mut replies = client.execute(tokio_stream::iter([batch])).await.unwrap().into_inner();
        assert_eq!(replies.message().await.unwrap().unwrap().replies.len(), 100);
    }
    assert!(fill(&d.join("filler")) > 0);
    let refused = client.snapshot(SnapshotRequest {}).await.expect_err("no room for a snapshot");
    assert_eq!(refused.code(), tonic::Code::Internal);
    assert!(refused.message().contains("No space left on device"), "{}", refused.message());
    let info = client.stats(StatsRequest::default()).await.unwrap().into_inner().snapshot.unwrap();
    assert!(!info.last_ok && info.last_error.contains("No space left"), "{info:?}");
    let all = files(d);
    assert_eq!(live(&all), vec![first_name.as_str()], "{:?}", all.keys());
    assert_eq!(all.len(), 2, "no partial file left: {:?}", all.keys());
    assert_eq!(all[&first_name], first_bytes, "the earlier snapshot is untouched");
    // Reads and writes go on.
    assert_eq!(support::get(&mut client, 0, "b:1999").await, reply::Kind::Value(value.clone()));
    assert!(matches!(support::set(&mut client, 0, "c", "after").await, reply::Kind::Ok(_)));

    // Room again: the next snapshot holds everything, and a restart loads it.
    std::fs::remove_file(d.join("filler")).unwrap();
    let second = client.snapshot(SnapshotRequest {}).await.unwrap().into_inner();
    assert!(second.last_ok, "{}", second.last_error);
    drop(node);
    let node = start_node(&args, log.path());
    let mut client = support::connect(&addr).await;
    assert_eq!(support::get(&mut client, 0, "b:1999").await, reply::Kind::Value(value));
    assert_eq!(support::get(&mut client, 0, "c").await, reply::Kind::Value("after".into()));
    assert_eq!(support::get(&mut client, 0, "a:99").await, reply::Kind::Value("small".into()));
    drop(node);
}
