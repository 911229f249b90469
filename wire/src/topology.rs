//! The topology document: which node owns which slots.
//!
//! A topology has a `version` that only ever grows, the node list (stable `id` + address) and the
//! slot-range table. Routers and nodes never guess ownership: they route by the newest topology they
//! were given. The document is plain JSON so it can live in a file or a Kubernetes ConfigMap.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::slot::SLOT_COUNT;

/// A storage node as the topology names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Stable identity; survives address changes (a pod that restarts keeps its id).
    pub id: u32,
    /// gRPC address, `host:port`.
    pub addr: String,
}

/// An inclusive range of slots owned by one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotRange {
    pub start: u16,
    pub end: u16,
    pub node: u32,
}

impl SlotRange {
    pub fn len(&self) -> usize {
        usize::from(self.end) - usize::from(self.start) + 1
    }

    pub fn is_empty(&self) -> bool {
        false
    }
}

/// A versioned slot -> node assignment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    pub version: u64,
    pub nodes: Vec<NodeInfo>,
    pub slots: Vec<SlotRange>,
}

/// Why a topology document was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TopologyError {
    #[error("topology has no nodes")]
    NoNodes,
    #[error("node id {0} appears twice")]
    DuplicateNode(u32),
    #[error("slot range {start}-{end} is invalid")]
    BadRange { start: u16, end: u16 },
    #[error("slot range {start}-{end} names unknown node id {node}")]
    UnknownNode { start: u16, end: u16, node: u32 },
    #[error("slot {0} is owned twice")]
    SlotOwnedTwice(u16),
    #[error("slot {0} has no owner")]
    SlotUnowned(u16),
    #[error("topology is not valid JSON: {0}")]
    Parse(String),
}

impl Topology {
    /// Version 1 of a cluster of `addrs`, node ids `0..n`, slots split into contiguous, even ranges
    /// (the first `16384 % n` nodes get one slot more), like `redis-cli --cluster create`.
    pub fn even(addrs: &[String]) -> Topology {
        let n = addrs.len().max(1);
        let nodes: Vec<NodeInfo> =
            addrs.iter().enumerate().map(|(i, addr)| NodeInfo { id: i as u32, addr: addr.clone() }).collect();
        let mut slots = Vec::with_capacity(n);
        let mut start = 0usize;
        for i in 0..addrs.len() {
            let len = SLOT_COUNT / n + usize::from(i < SLOT_COUNT % n);
            slots.push(SlotRange { start: start as u16, end: (start + len - 1) as u16, node: i as u32 });
            start += len;
        }
        Topology { version: 1, nodes, slots }
    }

    pub fn from_json(text: &str) -> Result<Topology, TopologyError> {
        let topology: Topology =
            serde_json::from_str(text).map_err(|e| TopologyError::Parse(e.to_string()))?;
        topology.validate()?;
        Ok(topology)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("topology serializes")
    }

    /// Checks the invariants every consumer relies on: unique node ids, every slot owned exactly
    /// once, by a node that exists.
    pub fn validate(&self) -> Result<(), TopologyError> {
        if self.nodes.is_empty() {
            return Err(TopologyError::NoNodes);
        }
        for (i, node) in self.nodes.iter().enumerate() {
            if self.nodes[..i].iter().any(|n| n.id == node.id) {
                return Err(TopologyError::DuplicateNode(node.id));
            }
        }
        let mut owned = vec![false; SLOT_COUNT];
        for r in &self.slots {
            if r.start > r.end || usize::from(r.end) >= SLOT_COUNT {
                return Err(TopologyError::BadRange { start: r.start, end: r.end });
            }
            if !self.nodes.iter().any(|n| n.id == r.node) {
                return Err(TopologyError::UnknownNode { start: r.start, end: r.end, node: r.node });
            }
            for slot in r.start..=r.end {
                if std::mem::replace(&mut owned[usize::from(slot)], true) {
                    return Err(TopologyError::SlotOwnedTwice(slot));
                }
            }
        }
        match owned.iter().position(|o| !o) {
            Some(slot) => Err(TopologyError::SlotUnowned(slot as u16)),
            None => Ok(()),
        }
    }

    /// Number of slots each node (by position in `nodes`) owns.
    pub fn slot_counts(&self) -> Vec<usize> {
        self.nodes
            .iter()
            .map(|n| self.slots.iter().filter(|r| r.node == n.id).map(SlotRange::len).sum())
            .collect()
    }

    /// The ranges owned by node `id`, as `a-b,c-d` (for INFO-style admin replies).
    pub fn ranges_of(&self, id: u32) -> String {
        let parts: Vec<String> = self
            .slots
            .iter()
            .filter(|r| r.node == id)
            .map(|r| if r.start == r.end { r.start.to_string() } else { format!("{}-{}", r.start, r.end) })
            .collect();
        parts.join(",")
    }
}

/// A flat slot -> node-position table built from a validated [`Topology`]: one array lookup per key.
#[derive(Clone)]
pub struct SlotTable {
    owner: Box<[u16]>,
}

impl SlotTable {
    /// Builds the table. The topology must have passed [`Topology::validate`].
    pub fn new(topology: &Topology) -> SlotTable {
        let mut owner = vec![0u16; SLOT_COUNT].into_boxed_slice();
        for r in &topology.slots {
            let pos = topology.nodes.iter().position(|n| n.id == r.node).unwrap_or(0) as u16;
            for slot in r.start..=r.end {
                owner[usize::from(slot)] = pos;
            }
        }
        SlotTable { owner }
    }

    /// Position in `Topology::nodes` of the node that owns `slot`.
    #[inline]
    pub fn node_of(&self, slot: u16) -> usize {
        usize::from(self.owner[usize::from(slot) & (SLOT_COUNT - 1)])
    }
}

impl fmt::Debug for SlotTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotTable").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("127.0.0.1:{}", 7001 + i)).collect()
    }

    #[test]
    fn even_split_covers_every_slot_once() {
        for n in 1..=17 {
            let t = Topology::even(&addrs(n));
            t.validate().unwrap();
            let counts = t.slot_counts();
            let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            assert!(max - min <= 1, "n={n}: {counts:?}");
            assert_eq!(counts.iter().sum::<usize>(), SLOT_COUNT);
        }
        assert_eq!(Topology::even(&addrs(3)).slot_counts(), vec![5462, 5461, 5461]);
    }

    #[test]
    fn slot_table_follows_ranges() {
        let t = Topology::even(&addrs(3));
        let table = SlotTable::new(&t);
        assert_eq!(table.node_of(0), 0);
        assert_eq!(table.node_of(5461), 0);
        assert_eq!(table.node_of(5462), 1);
        assert_eq!(table.node_of(16383), 2);
        assert_eq!(t.ranges_of(1), "5462-10922");
    }

    #[test]
    fn validate_rejects_broken_documents() {
        let mut t = Topology::even(&addrs(2));
        t.slots[0].end -= 1;
        assert_eq!(t.validate(), Err(TopologyError::SlotUnowned(8191)));
        let mut t = Topology::even(&addrs(2));
        t.slots[1].start -= 1;
        assert_eq!(t.validate(), Err(TopologyError::SlotOwnedTwice(8191)));
        let mut t = Topology::even(&addrs(2));
        t.slots[1].node = 9;
        assert!(matches!(t.validate(), Err(TopologyError::UnknownNode { node: 9, .. })));
        let mut t = Topology::even(&addrs(2));
        t.nodes[1].id = 0;
        assert_eq!(t.validate(), Err(TopologyError::DuplicateNode(0)));
        assert!(matches!(Topology::from_json("{"), Err(TopologyError::Parse(_))));
    }

    #[test]
    fn json_round_trip() {
        let t = Topology::even(&addrs(4));
        assert_eq!(Topology::from_json(&t.to_json()).unwrap(), t);
    }
}
