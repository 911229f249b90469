//! What each object and node pod is called, and where a node is found: object names, pod names
//! and their parsing back (member, shard), the ports, and a node's address in a topology.
//!
//! Names are the contract between the builders, the reconciler (which lists objects and pods by
//! them) and the chart; everything here is a pure function of the CacheCluster's name and
//! namespace.

use kube::ResourceExt;

use crate::crd::CacheCluster;

pub const NODE_GRPC_PORT: i32 = 7001;
pub const NODE_METRICS_PORT: i32 = 9090;
pub const ROUTER_RESP_PORT: i32 = 6379;
pub const ROUTER_HTTP_PORT: i32 = 8080;
/// RESP over TLS and HTTPS, with `spec.tls`.
pub const ROUTER_TLS_PORT: i32 = 6380;
pub const ROUTER_HTTPS_PORT: i32 = 8443;

/// How topologies address nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AddressMode {
    /// `<pod>.<name>-node.<namespace>.svc:7001`: stable across pod restarts.
    Dns,
    /// The pod's IP: for operators outside the cluster network's DNS (and the test control
    /// plane, whose fake pods have loopback IPs). A restarted pod's new IP is published as a new
    /// topology version.
    PodIp,
}

pub fn node_name(cc: &CacheCluster) -> String {
    format!("{}-node", cc.name_any())
}

/// The StatefulSet of member `member` of every shard: `<name>-node` for member 0 (the name the
/// nodes always had), `<name>-node-r<m>` for the replicas' members.
pub fn member_name(cc: &CacheCluster, member: u32) -> String {
    match member {
        0 => node_name(cc),
        m => format!("{}-r{m}", node_name(cc)),
    }
}

/// The member index of a node StatefulSet, from its name (see [`member_name`]).
pub fn statefulset_member(cc: &CacheCluster, name: &str) -> Option<u32> {
    let rest = name.strip_prefix(&node_name(cc))?;
    if rest.is_empty() {
        return Some(0);
    }
    plain_number(rest.strip_prefix("-r")?).filter(|&m| m > 0)
}

/// Member and shard of a node pod, from its name (`<name>-node-<i>`, `<name>-node-r<m>-<i>`).
pub fn pod_place(cc: &CacheCluster, pod: &str) -> Option<(u32, u32)> {
    let rest = pod.strip_prefix(&node_name(cc))?.strip_prefix('-')?;
    match rest.strip_prefix('r').and_then(|r| r.split_once('-')) {
        Some((m, i)) => {
            let member: u32 = m.parse().ok().filter(|&m| m > 0)?;
            Some((member, plain_number(i)?))
        }
        None => Some((0, plain_number(rest)?)),
    }
}

/// A decimal number as a StatefulSet writes ordinals (no sign, no leading zeros).
fn plain_number(s: &str) -> Option<u32> {
    let n: u32 = s.parse().ok()?;
    (n.to_string() == s).then_some(n)
}

/// The name of member `member`'s pod of shard `shard`.
pub fn pod_name(cc: &CacheCluster, member: u32, shard: u32) -> String {
    format!("{}-{shard}", member_name(cc, member))
}

/// A node pod's stable DNS address (through the headless Service), as topologies name it.
pub fn dns_address(cc: &CacheCluster, pod: &str) -> String {
    format!("{pod}.{}.{}.svc:{NODE_GRPC_PORT}", node_name(cc), cc.namespace().unwrap_or_default())
}

/// The per-shard PodDisruptionBudget of shard `shard`.
pub fn shard_pdb_name(cc: &CacheCluster, shard: u32) -> String {
    format!("{}-shard-{shard}", cc.name_any())
}

pub fn router_name(cc: &CacheCluster) -> String {
    format!("{}-router", cc.name_any())
}

pub fn topology_name(cc: &CacheCluster) -> String {
    format!("{}-topology", cc.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::tests::cluster;

    #[test]
    fn member_statefulsets_and_pods_are_named_and_parsed_back() {
        let cc = cluster(serde_json::json!({"shards": 3, "replicasPerShard": 2}));
        assert_eq!(
            (member_name(&cc, 0), member_name(&cc, 2)),
            ("demo-node".to_string(), "demo-node-r2".to_string())
        );
        assert_eq!(pod_name(&cc, 1, 7), "demo-node-r1-7");
        for (member, shard) in [(0, 0), (0, 12), (1, 0), (2, 999)] {
            assert_eq!(pod_place(&cc, &pod_name(&cc, member, shard)), Some((member, shard)));
            assert_eq!(statefulset_member(&cc, &member_name(&cc, member)), Some(member));
        }
        for bad in [
            "demo-node",
            "demo-node-",
            "demo-node-r1",
            "demo-node-r0-1",
            "demo-node-01",
            "demo-node-+1",
            "demo-node-r1-x",
            "demo-router-1",
            "other-node-1",
            "demo-node-r-1",
        ] {
            assert_eq!(pod_place(&cc, bad), None, "{bad}");
        }
        for bad in ["demo-node-r0", "demo-node-x", "demo-router", "demo-node-r01"] {
            assert_eq!(statefulset_member(&cc, bad), None, "{bad}");
        }
        assert_eq!(dns_address(&cc, "demo-node-r1-2"), "demo-node-r1-2.demo-node.shop.svc:7001");
        assert_eq!(shard_pdb_name(&cc, 4), "demo-shard-4");
    }
}
