//! Expiry lateness: the histogram of how late expired keys were removed (active and lazy expiry)
//! and the age of the oldest key still stored past its expiry.

use std::sync::Arc;
use std::time::Duration;

use shoal_node::server::{NodeHandle, ServeOptions};
use shoal_node::store::{Clock, ManualClock, SetExpiry, SetOptions, Store, StoreConfig, SystemClock};

fn with_ttl(at: u64) -> SetOptions {
    SetOptions { expiry: SetExpiry::At(at), ..Default::default() }
}

#[test]
fn lateness_is_measured_for_active_and_lazy_expiry() {
    let clock = ManualClock::new(1_000_000);
    let store = Store::new(StoreConfig { shards: 4, ..Default::default() }, Arc::new(clock.clone()));
    let t0 = clock.now_ms();
    for i in 0..10 {
        store.set(format!("k{i}").as_bytes(), b"v", with_ttl(t0 + 100 + i)).unwrap();
    }
    // Stale heap entries are not overdue keys: one deleted, one whose TTL moved far out.
    store.set(b"deleted", b"v", with_ttl(t0 + 50)).unwrap();
    store.del(b"deleted");
    store.set(b"moved", b"v", with_ttl(t0 + 50)).unwrap();
    store.set(b"moved", b"v", with_ttl(t0 + 1_000_000)).unwrap();
    assert_eq!(store.oldest_overdue_ms(), 0, "nothing due yet");

    clock.advance(400);
    assert_eq!(store.oldest_overdue_ms(), 300, "k0 was due at t0 + 100");

    // Active expiry held off (a transaction holds the gate): keys stay overdue, and longer.
    {
        let _exclusive = store.gate.write();
        assert_eq!(store.purge_expired(100), 0);
    }
    clock.advance(100);
    assert_eq!(store.oldest_overdue_ms(), 400);

    // Lazy: a read finds k0 expired, 400 ms late.
    assert_eq!(store.get(b"k0"), None);
    let lag = &store.expiry_lag;
    assert_eq!((lag.lazy.count(), lag.active.count()), (1, 0));
    assert!((lag.lazy.sum() - 0.4).abs() < 1e-9, "{}", lag.lazy.sum());
    assert_eq!(store.oldest_overdue_ms(), 399, "k1 was due at t0 + 101");

    // Active: the cycle removes the other nine, each as late as it was.
    assert_eq!(store.purge_expired(100), 9);
    assert_eq!(lag.active.count(), 9);
    let expected: f64 = (1..10).map(|i| (500 - 100 - i) as f64 / 1000.0).sum();
    assert!((lag.active.sum() - expected).abs() < 1e-9, "{} vs {expected}", lag.active.sum());
    assert_eq!(store.oldest_overdue_ms(), 0, "everything due is gone");
    assert_eq!(store.len(), 1, "only `moved` is left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_metrics_show_expiry_lag() {
    let store = Arc::new(Store::new(StoreConfig::default(), Arc::new(SystemClock)));
    let node = NodeHandle::start("127.0.0.1:0".parse().unwrap(), store.clone(), ServeOptions::default())
        .await
        .unwrap();
    let now = SystemClock.now_ms();
    for i in 0..50 {
        store.set(format!("short{i}").as_bytes(), b"v", with_ttl(now + 20)).unwrap();
    }
    // The node's own active expiry removes them; bounded wait.
    let started = std::time::Instant::now();
    while store.expiry_lag.active.count() + store.expiry_lag.lazy.count() < 50 {
        assert!(started.elapsed() < Duration::from_secs(10), "active expiry did not remove the keys");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(store.len(), 0);
    let page = shoal_node::metrics::render(&node.state);
    assert!(page.contains("shoal_node_expiry_lag_seconds_count{how=\"active\"} 50"), "{page}");
    assert!(page.contains("shoal_node_expiry_lag_seconds_count{how=\"lazy\"} 0"), "{page}");
    assert!(page.contains("\nshoal_node_oldest_overdue_seconds 0\n"), "{page}");
    assert_eq!(node.state.stats().oldest_overdue_ms, 0);
    node.shutdown().await.unwrap();
}
