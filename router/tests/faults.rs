//! The fault harness itself (`support/faults.rs`), against a real `shoal-node` in a namespace:
//! a one-way cut stops the pair it names and no other, heals, and a reset breaks a live
//! connection at once. The chaos test (chaos.rs) relies on all of it.

mod support;

use std::time::{Duration, Instant};

use support::faults::{Host, Net};
use tokio::io::AsyncReadExt;

#[tokio::test]
async fn cuts_stop_only_their_pair_heal_and_resets_break_live_connections() {
    let net = Net::new(&["a", "b"]);
    let dir = tempfile::tempdir().unwrap();
    let mut node = Host::new("a");
    let mut c = net.command("a", &support::workspace_bin("shoal-node"));
    c.args(["--listen", &format!("{}:7000", net.ip("a"))]).env("SHOAL_CLUSTER_SECRET", support::SECRET);
    node.start(dir.path(), c);
    let start = Instant::now();
    while !net.connects("test", "a", 7000) {
        assert!(start.elapsed() < Duration::from_secs(30), "the node did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(net.connects("b", "a", 7000), "b reaches a");

    // One way, test -> a: test cannot connect; b still can (the cut is per pair).
    net.cut("test", "a");
    assert!(!net.connects("test", "a", 7000), "cut test -> a");
    assert!(net.connects("b", "a", 7000), "b is not cut");
    net.heal("test", "a");
    assert!(net.connects("test", "a", 7000), "healed");

    // The other way, a -> test: a's answers are dropped, so test cannot connect either.
    net.cut("a", "test");
    assert!(!net.connects("test", "a", 7000), "cut a -> test");
    net.heal_all();
    assert!(net.connects("test", "a", 7000), "healed all");

    // Two ways between a and b leave test alone.
    net.partition("a", "b");
    assert!(!net.connects("b", "a", 7000) && net.connects("test", "a", 7000));
    net.heal_all();

    // A reset breaks an open connection at once: reads end (after what the node sent first, its
    // HTTP/2 settings).
    let addr = std::net::SocketAddr::new(net.ip("a").into(), 7000);
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    net.reset("test", "a");
    let (mut buf, deadline) = ([0u8; 256], Instant::now() + Duration::from_secs(2));
    let mut ended = false;
    for _ in 0..100 {
        match tokio::time::timeout_at(deadline.into(), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => ended = true,
            Ok(Ok(_)) => continue,
            Err(_) => {}
        }
        break;
    }
    assert!(ended, "the connection was reset");

    // A throttle is put on and lifted without breaking the path.
    net.throttle("a", Some(256));
    assert!(net.connects("test", "a", 7000));
    net.throttle("a", None);
    drop(node);
}
