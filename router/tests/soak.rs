//! Resharding soak: the embedded cluster scales 3 → 5 → 2 → 4 → 3 → ... over and over while
//! strict writers (SET, pipelined SETs, DEL of the key written three steps earlier, INCR, APPEND,
//! EXPIRE, each followed by a read-back) and readers run, and while other processes keep the
//! machine's cores busy. Nothing acknowledged may be lost, no DEL may be undone, and no client may
//! see an error.
//!
//! Bounded: `SHOAL_SOAK_SECS` (default 150) of scaling, then a final check. Run it longer by
//! hand with e.g. `SHOAL_SOAK_SECS=1800 cargo test -p shoal-router --test soak -- --nocapture`.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::workload::{self, Workload};
use support::{Proc, Raw};

/// Waits until the cluster has `n` nodes, no migration in flight and no scaling running.
async fn wait_scaled(c: &mut Raw, n: usize) {
    let start = Instant::now();
    loop {
        let out = String::from_utf8(c.cmd(&["SHOAL", "TOPOLOGY"]).await).unwrap();
        let first = out.lines().nth(1).unwrap_or_default().to_string();
        if first.contains(&format!(" nodes={n} migrations=0 ")) && first.ends_with("scaling=no") {
            return;
        }
        assert!(!first.contains("scaling=failed"), "{out}");
        assert!(start.elapsed() < Duration::from_secs(180), "not scaled to {n}: {out}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A process that spins on one core at a lower priority until dropped: the machine is busy, as a
/// shared Kubernetes node is, but the cluster still gets CPU.
fn burner() -> Proc {
    Proc(
        Command::new("nice")
            .args(["-n", "5", "sh", "-c", "while :; do :; done"])
            .stdout(Stdio::null())
            .spawn()
            .expect("sh"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resharding_soak_loses_nothing_and_undoes_no_delete() {
    let budget = Duration::from_secs(
        std::env::var("SHOAL_SOAK_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(150),
    );
    let router = support::router(&["--embedded-nodes", "3"]).await;
    let addr = router.resp_addr();
    let mut admin = Raw::connect(addr).await;
    workload::preload(addr).await;
    let busy = [burner(), burner()];
    let mut load = Workload::strict(addr, 4, 2).await;

    let start = Instant::now();
    let mut steps = 0;
    'soak: loop {
        for n in [5, 2, 4, 3] {
            assert_eq!(admin.cmd(&["SHOAL", "SCALE", &n.to_string()]).await, b"+OK\r\n");
            wait_scaled(&mut admin, n).await;
            steps += 1;
            let errors = load.errors();
            assert!(errors.is_empty(), "after {steps} steps: {:?}", &errors[..errors.len().min(5)]);
            if start.elapsed() >= budget && steps >= 3 {
                break 'soak;
            }
        }
    }
    load.stop().await;
    drop(busy);
    let ops = load.ops();
    eprintln!("soak: {steps} scaling steps in {:?}, {ops} client ops", start.elapsed());
    let errors = load.errors();
    assert!(errors.is_empty(), "{} client errors, e.g. {:?}", errors.len(), &errors[..errors.len().min(5)]);
    let report = load.verify(addr, 0, &|_, _| false).await;
    assert!(report.lost_writes.is_empty() && report.lost_incrs == 0, "{report:?}");
    assert!(report.keys_checked > 1000, "{report:?}");
    router.shutdown().await;
}
