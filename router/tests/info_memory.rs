//! INFO memory's `used_memory_rss` counts each process once: the router's own process when its
//! nodes are embedded in it, the node processes' sum when they are separate.

mod support;

use std::process::Stdio;

use support::{Proc, Raw};

/// Resident bytes of process `pid` ("self" for this one), from /proc/<pid>/statm.
fn rss_of(pid: &str) -> u64 {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap();
    statm.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 4096
}

async fn used_memory_rss(c: &mut Raw) -> u64 {
    info_field(c, "used_memory_rss").await.parse().unwrap()
}

/// Asserts `reported` is within a factor of 1.5 of what /proc says (read before and after).
fn assert_close(reported: u64, before: u64, after: u64, what: &str) {
    let (low, high) = (before.min(after), before.max(after));
    assert!(
        reported * 2 >= low && reported * 2 <= high * 3,
        "{what}: INFO says {reported} bytes, /proc says {before}..{after}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_nodes_count_the_router_process_once() {
    let router = support::cluster().await;
    let mut c = Raw::connect(router.resp_addr()).await;
    let value = "x".repeat(4096);
    for i in 0..2000 {
        assert_eq!(c.cmd(&["SET", &format!("k{i}"), &value]).await, b"+OK\r\n");
    }
    let before = rss_of("self");
    let reported = used_memory_rss(&mut c).await;
    let after = rss_of("self");
    assert_close(reported, before, after, "3 embedded nodes in this process");
    let info = String::from_utf8(c.cmd(&["INFO", "memory"]).await).unwrap();
    assert!(info.contains("used_memory_rss_human:"), "{info}");
    router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_nodes_are_summed() {
    let addrs: Vec<String> = (0..2).map(|_| format!("127.0.0.1:{}", support::free_port())).collect();
    let nodes: Vec<Proc> = addrs
        .iter()
        .map(|a| {
            let child = support::shoal("shoal-node")
                .args(["--listen", a])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            Proc(child)
        })
        .collect();
    let router = support::router(&["--nodes", &addrs.join(",")]).await;
    let mut c = Raw::connect(router.resp_addr()).await;
    let pids: Vec<String> = nodes.iter().map(|n| n.0.id().to_string()).collect();
    let nodes_rss = || pids.iter().map(|p| rss_of(p)).sum::<u64>();
    let before = nodes_rss();
    let reported = used_memory_rss(&mut c).await;
    let after = nodes_rss();
    assert_close(reported, before, after, "2 node processes");
    router.shutdown().await;
}

/// INFO memory's field `name`, as text.
async fn info_field(c: &mut Raw, name: &str) -> String {
    let info = String::from_utf8(c.cmd(&["INFO", "memory"]).await).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in {info}"))
        .trim()
        .to_string()
}

/// `used_memory_peak` (and its `_human`/`_perc` forms, which Sidekiq's dashboard reads) keeps the
/// most the data took after it is deleted, as Redis's does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_peak_outlives_the_data() {
    let router = support::cluster().await;
    let mut c = Raw::connect(router.resp_addr()).await;
    let value = "x".repeat(8192);
    for i in 0..500 {
        assert_eq!(c.cmd(&["SET", &format!("peak{i}"), &value]).await, b"+OK\r\n");
    }
    let used_full: u64 = info_field(&mut c, "used_memory").await.parse().unwrap();
    let peak_full: u64 = info_field(&mut c, "used_memory_peak").await.parse().unwrap();
    assert!(used_full > 500 * 8192 && peak_full >= used_full, "used {used_full}, peak {peak_full}");
    assert_eq!(
        info_field(&mut c, "used_memory_peak_perc")
            .await
            .trim_end_matches('%')
            .parse::<f64>()
            .unwrap()
            .round(),
        100.0
    );
    for i in 0..500 {
        assert_eq!(c.cmd(&["DEL", &format!("peak{i}")]).await, b":1\r\n");
    }
    let used: u64 = info_field(&mut c, "used_memory").await.parse().unwrap();
    let peak: u64 = info_field(&mut c, "used_memory_peak").await.parse().unwrap();
    assert!(used < used_full / 10, "the data is gone: used {used}");
    assert!(peak >= used_full, "the peak stays: {peak} < {used_full}");
    let perc: f64 = info_field(&mut c, "used_memory_peak_perc").await.trim_end_matches('%').parse().unwrap();
    assert!(perc < 10.0, "used is a small part of the peak now: {perc}%");
    assert!(
        info_field(&mut c, "used_memory_peak_human").await.ends_with('M'),
        "about 4 MB, in Redis's format"
    );
    router.shutdown().await;
}
