//! `shoal-router reshard`: the coordinator for a cluster of separately started nodes.
//!
//! The topology file is the source of truth that routers (`--topology-file`) and nodes
//! (`--topology-file`) follow; this command is its one writer. It creates the file on first use (an
//! even split over the given nodes), or plans the move from the current topology onto the given
//! nodes and drives it to the end, printing progress. Interrupted, it is simply run again: it
//! resumes from what the file says.
//!
//! `shoal-router failover` ([`failover`]) is the file's other writer: it only changes which member
//! of a shard is primary (`shoal_coordinator::failover`). Run one of each at most.

use std::time::Duration;

use anyhow::Context;
use shoal_coordinator::{Coordinator, FileRegistry, Progress, Registry};
use shoal_wire::auth::Credentials;
use shoal_wire::{NodeInfo, Topology};

use crate::config::{FailoverArgs, ReshardArgs};

/// Parses `ADDR` or `ID=ADDR` entries, giving new addresses ids after the highest in `current`.
pub fn target_nodes(specs: &[String], current: Option<&Topology>) -> anyhow::Result<Vec<NodeInfo>> {
    let mut next_id = current.and_then(|t| t.nodes.iter().map(|n| n.id).max()).map_or(0, |m| m + 1);
    let mut out: Vec<NodeInfo> = Vec::new();
    for spec in specs.iter().filter(|s| !s.is_empty()) {
        let node = match spec.split_once('=') {
            Some((id, addr)) => {
                NodeInfo::new(id.parse().with_context(|| format!("bad node id in {spec}"))?, addr)
            }
            None => {
                let known = current.and_then(|t| t.nodes.iter().find(|n| n.addr == *spec)).map(|n| n.id);
                let id = known.unwrap_or_else(|| {
                    let id = next_id;
                    next_id += 1;
                    id
                });
                NodeInfo::new(id, spec.clone())
            }
        };
        // A shard that stays keeps its replicas (they follow it through the move).
        let mut node = node;
        if let Some(known) = current.and_then(|t| t.node(node.id)).filter(|k| k.addr == node.addr) {
            node.replicas = known.replicas.clone();
        }
        if out.iter().any(|n| n.id == node.id) {
            anyhow::bail!("node id {} is given twice", node.id);
        }
        out.push(node);
    }
    out.sort_by_key(|n| n.id);
    Ok(out)
}

/// `shoal-router failover`: the failover writer for separately started nodes, on the topology
/// file, until SIGTERM (see `shoal_coordinator::failover`).
pub async fn failover(args: &FailoverArgs, credentials: Credentials) -> anyhow::Result<()> {
    let registry = FileRegistry::new(&args.topology_file);
    let options = shoal_coordinator::failover::FailoverOptions {
        down_after: Duration::from_millis(args.down_after_ms),
        interval: Duration::from_millis(args.interval_ms.max(10)),
        credentials,
        ..Default::default()
    };
    tracing::info!(file = %args.topology_file.display(), down_after_ms = args.down_after_ms, "watching for failovers");
    shoal_coordinator::failover::watch(
        &registry,
        options,
        |d| eprintln!("failover: version {}: {}", d.topology.version, d.reason),
        shoal_telemetry::shutdown::signal(),
    )
    .await;
    Ok(())
}

pub async fn run(args: &ReshardArgs, credentials: Credentials) -> anyhow::Result<()> {
    let store = FileRegistry::new(&args.topology_file);
    let report = |p: &Progress| {
        let secs = (p.elapsed_ms as f64 / 1000.0).max(0.001);
        eprintln!(
            "reshard: version {}: {}/{} migrations done, {}/{} slots, {} of ~{} keys ({:.1} MB) moved in {:.1}s \
             ({:.0} keys/s, {:.1} MB/s)",
            p.version,
            p.migrations_done,
            p.migrations,
            p.slots_done,
            p.slots_total,
            p.keys_moved,
            p.keys_estimate.max(p.keys_moved),
            p.bytes_moved as f64 / 1e6,
            secs,
            p.keys_moved as f64 / secs,
            p.bytes_moved as f64 / 1e6 / secs,
        )
    };
    let coordinator = Coordinator::new(store.clone(), credentials)
        .with_timeout(Duration::from_secs(args.timeout_secs))
        .with_progress(report);
    let current = store.load().await?;
    let done = match (current, args.resume) {
        (None, true) => anyhow::bail!("{} does not exist: nothing to resume", args.topology_file.display()),
        (Some(_), true) => coordinator.resume().await?,
        (None, false) => {
            let nodes = target_nodes(&args.nodes, None)?;
            let mut t = Topology::even(&nodes.iter().map(|n| n.addr.clone()).collect::<Vec<_>>());
            t.nodes = nodes;
            t.slots.iter_mut().zip(t.nodes.iter()).for_each(|(r, n)| r.node = n.id);
            t.validate()?;
            store.publish(&t).await?;
            eprintln!(
                "reshard: created {} (version 1, {} nodes)",
                args.topology_file.display(),
                t.nodes.len()
            );
            coordinator.resume().await?
        }
        (Some(current), false) => {
            let target = target_nodes(&args.nodes, Some(&current))?;
            coordinator.reshard(&target).await?
        }
    };
    eprintln!("reshard: done: version {}, {} nodes", done.version, done.nodes.len());
    for n in &done.nodes {
        eprintln!("reshard:   id={} addr={} slots={}", n.id, n.addr, done.ranges_of(n.id));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_kept_or_assigned() {
        let current = Topology {
            version: 3,
            nodes: vec![NodeInfo::new(0, "a:1"), NodeInfo::new(4, "b:1")],
            slots: vec![],
            migrations: vec![],
        };
        let t = target_nodes(&["b:1".into(), "c:1".into(), "9=d:1".into()], Some(&current)).unwrap();
        let got: Vec<(u32, &str)> = t.iter().map(|n| (n.id, n.addr.as_str())).collect();
        assert_eq!(got, vec![(4, "b:1"), (5, "c:1"), (9, "d:1")]);
        assert!(target_nodes(&["1=a:1".into(), "1=b:1".into()], None).is_err());
    }
}
