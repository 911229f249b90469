//! Transactions over several nodes as a recorded list-append history, checked for strict
//! serializability by `shoal-checker` (Elle's list-append check: loadtest/checker/cycles.go and
//! transactions.go) while the routers that run them are SIGKILLed and restarted (issue 40's
//! "routers killed mid-commit").
//!
//! Three node processes and two router processes (the shape users deploy). Each group of lists
//! has its keys on two or three different nodes; every transaction appends one unique value to
//! every list of a group (MULTI, RPUSH..., EXEC) or reads them all (MULTI, LRANGE..., EXEC). A
//! router killed between its prepares and its commits leaves the nodes to finish among
//! themselves (docs/architecture.md, "Transactions over several nodes"): a transaction must then
//! be applied on all of its nodes or on none, so no read may find a group's lists different, no
//! value may appear twice or be lost once its EXEC was answered, and the order of what was
//! acknowledged must admit one serial order (no dependency cycle). Nodes are not killed here:
//! without replicas a killed node loses what it held, and with them a node dying mid-commit is
//! the case docs/architecture.md says is not covered yet.
//!
//! Needs `shoal-checker` (`.ci/tools/install checker`).

mod support;

use std::time::{Duration, Instant};

use support::Raw;
use support::history::{self, Conn, Recorder};
use support::procs::{NodeProc, RouterProc};

/// How long routers are killed while the clients run, and how many clients each router has.
const FAULTS: Duration = Duration::from_secs(12);
const CLIENTS_PER_ROUTER: usize = 3;
/// Router kills the run makes at least.
const MIN_KILLS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_over_several_nodes_stay_serializable_while_routers_are_killed() {
    let seed = support::seed("SHOAL_TXN_SEED");
    eprintln!("transaction history: seed {seed} (SHOAL_TXN_SEED={seed} repeats the kill schedule)");
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, list) = NodeProc::start_many(dir.path(), 3).await;
    let args = ["--nodes", list.as_str()];
    let names = ["rt0", "rt1"];
    let mut routers = Vec::new();
    for name in names {
        routers.push(RouterProc::start(dir.path(), name, &args).await);
    }
    let groups = groups_over_nodes(&mut routers[0].raw().await).await;
    let rec = Recorder::new(&dir.path().join("history.jsonl"));

    let faults_end = Instant::now() + FAULTS;
    // Past the last restart (normally), so the clients' last transactions run on routers that
    // stay up.
    let stop_at = faults_end + Duration::from_secs(2);
    let clients: Vec<_> = (0..names.len() * CLIENTS_PER_ROUTER)
        .map(|p| {
            let addr = routers[p % names.len()].resp;
            let confirm = history::Confirm::Exec;
            tokio::spawn(history::transactions(
                p,
                addr,
                groups.clone(),
                rec.clone(),
                stop_at,
                seed ^ p as u64,
                confirm,
            ))
        })
        .collect();

    let mut rng = fastrand::Rng::with_seed(seed);
    let mut kills = 0;
    // Until the fault phase is over and enough kills were made (a slow machine restarts slowly;
    // the clients then run on past `stop_at` no longer than their last call).
    for _ in 0..1_000 {
        tokio::time::sleep(Duration::from_millis(rng.u64(300..900))).await;
        if Instant::now() >= faults_end && kills >= MIN_KILLS {
            break;
        }
        let r = rng.usize(..names.len());
        routers[r].restart(dir.path(), names[r], &args).await;
        kills += 1;
    }
    for c in clients {
        tokio::time::timeout(Duration::from_secs(60), c).await.expect("clients end").unwrap();
    }
    // Every group once more, each read in one transaction, through a router that stays up: where
    // a lost append (a list short of an acknowledged value) or a half-applied transaction (the
    // group's lists differ) shows, whatever the clients read during the run.
    let mut c = Conn::new(routers[0].resp);
    for generation in 0..=rec.epoch() {
        for group in &groups {
            let keys: Vec<String> = group.iter().map(|k| history::epoch_key(k, generation)).collect();
            let mut tries = 0;
            while history::read_group(&mut c, 999, &keys, &rec).await != "ok" {
                tries += 1;
                assert!(tries < 50, "{keys:?} could not be read after the run");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    rec.flush();

    let history = std::fs::read_to_string(&rec.path).unwrap();
    let count = |op: &str, outcome: &str| {
        history
            .lines()
            .filter(|l| {
                l.contains(&format!("\"op\":\"{op}\"")) && l.contains(&format!("\"outcome\":\"{outcome}\""))
            })
            .count()
    };
    let (acked, unknown, reads) = (count("mappend", "ok"), count("mappend", "unknown"), count("mread", "ok"));
    eprintln!(
        "transaction history: {kills} router kills; {acked} appending transactions acknowledged, {unknown} not answered, \
         {reads} reading transactions"
    );
    let (report, sound) = history::check(&rec.path);
    eprintln!("transaction history: checker: {report}");
    let kept = dir.keep();
    assert!(sound, "seed {seed}: the checker found anomalies; history and logs kept in {}", kept.display());
    // The run must have exercised something: transactions of every kind completed around the
    // kills (the kill loop above makes at least MIN_KILLS of them).
    assert!(
        acked >= 100 && reads >= 30,
        "too little ran to judge: {acked} acknowledged appends, {reads} reads"
    );
    let _ = std::fs::remove_dir_all(&kept);
}

/// Groups of lists whose keys live on different nodes: two keys on each pair of the three nodes,
/// and three keys, one per node. A key's node is its `{hashtag}`'s, so it stays put whatever the
/// key generation suffix (`history::epoch_key`) adds.
async fn groups_over_nodes(admin: &mut Raw) -> Vec<Vec<String>> {
    let mut tags: Vec<String> = vec!["{t0}".into()];
    for i in 1..200 {
        let tag = format!("{{t{i}}}");
        let mut with: Vec<&str> = tags.iter().map(String::as_str).collect();
        with.push(&tag);
        if support::nodes_of(admin, &with).await == with.len() {
            tags.push(tag);
        }
        if tags.len() == 3 {
            break;
        }
    }
    assert_eq!(tags.len(), 3, "no three tags on three different nodes");
    let (a, b, c) = (&tags[0], &tags[1], &tags[2]);
    let sets = [vec![a, b], vec![b, c], vec![a, c], vec![a, b, c]];
    sets.iter().enumerate().map(|(g, tags)| tags.iter().map(|t| format!("{t}txn{g}")).collect()).collect()
}
