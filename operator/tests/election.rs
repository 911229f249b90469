//! Leader election on a real API server (`.ci/kube/up`): one leader at a time; a leader that
//! steps down hands the Lease over in well under a second (a standby watches it), which is what
//! keeps a rolling upgrade of the operator from leaving primaries without a failover writer; a
//! leader that vanishes without freeing it is replaced only after the lease's duration.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use shoal_operator::election::{Elector, Leadership};
use support::Plane;

const NS: &str = "default";

fn elector(api: &Api<Lease>, identity: &str, duration: Duration) -> Elector {
    Elector { api: api.clone(), name: "shoal-operator-test".into(), identity: identity.into(), duration }
}

fn leads(l: &Leadership) -> bool {
    *l.leading.borrow()
}

/// Waits at most `limit` for `l` to lead; returns how long it took.
async fn until_leads(l: &Leadership, limit: Duration) -> Duration {
    let start = Instant::now();
    let mut rx = l.leading.clone();
    tokio::time::timeout(limit, rx.wait_for(|held| *held))
        .await
        .unwrap_or_else(|_| panic!("not leading within {limit:?}"))
        .unwrap();
    start.elapsed()
}

async fn holder(api: &Api<Lease>) -> (Option<String>, i32) {
    let spec = api.get("shoal-operator-test").await.unwrap().spec.unwrap();
    (spec.holder_identity, spec.lease_transitions.unwrap_or(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freed_lease_changes_hands_at_once_and_an_abandoned_one_only_after_its_duration() {
    let Some(plane) = Plane::up("election") else { return };
    let api: Api<Lease> = Api::namespaced(plane.client().await, NS);

    // A long lease, so that a fast hand-over can only come from the release being seen.
    let long = Duration::from_secs(15);
    let a = elector(&api, "a", long).start().await.unwrap();
    until_leads(&a, Duration::from_secs(10)).await;
    let b = elector(&api, "b", long).start().await.unwrap();
    // B watches; A keeps the Lease through several renewals (a third of the duration each).
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(6) {
        assert!(leads(&a) && !leads(&b), "exactly one leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(holder(&api).await.0.as_deref(), Some("a"));

    // A steps down: B leads within a second (not after the 15 s the Lease would have lasted).
    let released = Instant::now();
    a.release().await;
    let took = until_leads(&b, Duration::from_secs(10)).await;
    assert!(took < Duration::from_secs(1), "the standby took {took:?} to lead after a release");
    let (h, transitions) = holder(&api).await;
    assert_eq!(h.as_deref(), Some("b"));
    assert!(transitions >= 1, "a change of holder counts a transition");
    eprintln!("hand-over after release: {:?}", released.elapsed());

    // B vanishes without freeing the Lease (a crash): C, already watching, waits out the
    // duration from the last renewal it saw, then takes it.
    let short = Duration::from_secs(4);
    b.abandon();
    let c = elector(&api, "c", short).start().await.unwrap();
    let seen = Instant::now();
    // B's lease says 15 s: C must not lead before that has passed since C first saw it.
    while seen.elapsed() < Duration::from_secs(10) {
        assert!(!leads(&c), "took a Lease still held by a silent leader after {:?}", seen.elapsed());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let waited = seen.elapsed() + until_leads(&c, Duration::from_secs(15)).await;
    // (C's first look is a moment before or after `seen`.)
    assert!(waited >= long - Duration::from_secs(1), "C took B's Lease {waited:?} after first seeing it");
    assert_eq!(holder(&api).await.0.as_deref(), Some("c"));

    // C renews under its own (shorter) duration, and a release frees the Lease.
    tokio::time::sleep(short).await;
    assert!(leads(&c), "C renews its Lease");
    c.release().await;
    assert_eq!(holder(&api).await.0, None, "released: no holder");
}
