//! The topology document: which node owns which slots, and which slots are moving.
//!
//! A topology has a `version` that only ever grows, the node list (stable `id` + address), the
//! slot-range table and the migrations in flight. Routers and nodes never guess ownership: they route
//! by the newest topology they were given. The document is plain JSON so it can live in a file or a
//! Kubernetes ConfigMap.
//!
//! During a migration `slots` already names the *new* owner of a range (writes go there) and the
//! migration names the old owner (`from`), which still holds the data not yet moved: reads that
//! miss on the new owner fall back to it, and deletes go to both (the old owner first).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::slot::SLOT_COUNT;

/// A storage node as the topology names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Stable identity; survives address changes (a pod that restarts keeps its id).
    pub id: u32,
    /// gRPC address, `host:port`: the shard's primary, where routers send its ops.
    pub addr: String,
    /// Replicas of this shard (gRPC addresses): they follow the primary's changes and one of them
    /// takes over when the failover writer promotes it. Empty: no replicas (the node alone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<String>,
}

impl NodeInfo {
    /// A shard of one node and no replicas.
    pub fn new(id: u32, addr: impl Into<String>) -> NodeInfo {
        NodeInfo { id, addr: addr.into(), replicas: Vec::new() }
    }
}

/// What a process is in a topology, found by its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Member {
    /// The primary of shard `shard`.
    Primary { shard: u32 },
    /// A replica of shard `shard`.
    Replica { shard: u32 },
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

/// Slots `start..=end` moving from node `from` to node `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Migration {
    pub start: u16,
    pub end: u16,
    pub from: u32,
    pub to: u32,
}

impl Migration {
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
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub migrations: Vec<Migration>,
}

/// What a node is for one slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotRole {
    /// It owns the slot and has all its data.
    Owner,
    /// It owns the slot; the data is still arriving from node `from`.
    Incoming { from: u32 },
    /// It gave the slot to node `to` and still holds the data not yet moved.
    Outgoing { to: u32 },
    /// Nothing to do with this slot.
    None,
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
    #[error("address {0} appears twice among primaries and replicas")]
    DuplicateAddr(String),
    #[error("migration of {start}-{end}: {reason}")]
    BadMigration { start: u16, end: u16, reason: String },
}

impl Topology {
    /// Version 1 of a cluster of `addrs`, node ids `0..n`, slots split into contiguous, even ranges
    /// (the first `16384 % n` nodes get one slot more), like `redis-cli --cluster create`.
    pub fn even(addrs: &[String]) -> Topology {
        let n = addrs.len().max(1);
        let nodes: Vec<NodeInfo> =
            addrs.iter().enumerate().map(|(i, addr)| NodeInfo::new(i as u32, addr.clone())).collect();
        let mut slots = Vec::with_capacity(n);
        let mut start = 0usize;
        for i in 0..addrs.len() {
            let len = SLOT_COUNT / n + usize::from(i < SLOT_COUNT % n);
            slots.push(SlotRange { start: start as u16, end: (start + len - 1) as u16, node: i as u32 });
            start += len;
        }
        Topology { version: 1, nodes, slots, migrations: Vec::new() }
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
        let mut addrs: Vec<&str> = self
            .nodes
            .iter()
            .flat_map(|n| std::iter::once(&n.addr).chain(&n.replicas))
            .map(|a| a.as_str())
            .collect();
        addrs.sort_unstable();
        if let Some(w) = addrs.windows(2).find(|w| w[0] == w[1]) {
            return Err(TopologyError::DuplicateAddr(w[0].to_string()));
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
        if let Some(slot) = owned.iter().position(|o| !o) {
            return Err(TopologyError::SlotUnowned(slot as u16));
        }
        let mut moving = vec![false; SLOT_COUNT];
        for m in &self.migrations {
            let bad = |reason: &str| TopologyError::BadMigration {
                start: m.start,
                end: m.end,
                reason: reason.into(),
            };
            if m.start > m.end || usize::from(m.end) >= SLOT_COUNT {
                return Err(bad("invalid range"));
            }
            if m.from == m.to {
                return Err(bad("from and to are the same node"));
            }
            if !self.nodes.iter().any(|n| n.id == m.from) || !self.nodes.iter().any(|n| n.id == m.to) {
                return Err(bad("names an unknown node"));
            }
            for slot in m.start..=m.end {
                if self.owner_of(slot) != Some(m.to) {
                    return Err(bad(&format!("slot {slot} is not owned by the destination")));
                }
                if std::mem::replace(&mut moving[usize::from(slot)], true) {
                    return Err(bad(&format!("slot {slot} is in two migrations")));
                }
            }
        }
        Ok(())
    }

    /// The node id that owns `slot` (the new owner, during a migration).
    pub fn owner_of(&self, slot: u16) -> Option<u32> {
        self.slots.iter().find(|r| (r.start..=r.end).contains(&slot)).map(|r| r.node)
    }

    /// The migration `slot` is part of, if any.
    pub fn migration_of(&self, slot: u16) -> Option<&Migration> {
        self.migrations.iter().find(|m| (m.start..=m.end).contains(&slot))
    }

    /// What node `id` is for `slot`.
    pub fn role(&self, slot: u16, id: u32) -> SlotRole {
        match (self.owner_of(slot), self.migration_of(slot)) {
            (Some(owner), Some(m)) if owner == id => SlotRole::Incoming { from: m.from },
            (Some(owner), None) if owner == id => SlotRole::Owner,
            (_, Some(m)) if m.from == id => SlotRole::Outgoing { to: m.to },
            _ => SlotRole::None,
        }
    }

    /// The node with id `id`.
    pub fn node(&self, id: u32) -> Option<&NodeInfo> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// What the process at `addr` is in this topology, if anything.
    pub fn member(&self, addr: &str) -> Option<Member> {
        self.nodes.iter().find_map(|n| {
            if n.addr == addr {
                Some(Member::Primary { shard: n.id })
            } else if n.replicas.iter().any(|r| r == addr) {
                Some(Member::Replica { shard: n.id })
            } else {
                None
            }
        })
    }

    /// Whether any shard has replicas.
    pub fn has_replicas(&self) -> bool {
        self.nodes.iter().any(|n| !n.replicas.is_empty())
    }

    /// The next version with `replica` (one of shard `shard`'s replicas) as its primary and the
    /// old primary listed as a replica (it rejoins as one, resyncing, when it comes back).
    /// `None` if `replica` is not a replica of that shard.
    pub fn promote(&self, shard: u32, replica: &str) -> Option<Topology> {
        let mut next = self.clone();
        let node = next.nodes.iter_mut().find(|n| n.id == shard)?;
        let pos = node.replicas.iter().position(|r| r == replica)?;
        let old = std::mem::replace(&mut node.addr, node.replicas.remove(pos));
        node.replicas.push(old);
        next.version += 1;
        Some(next)
    }

    /// The same topology one version later (a failover writer's confirmation of a primary).
    pub fn next_version(&self) -> Topology {
        Topology { version: self.version + 1, ..self.clone() }
    }

    /// Slots in migrations, in total.
    pub fn migrating_slots(&self) -> usize {
        self.migrations.iter().map(Migration::len).sum()
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
/// The arrays are shared, so a clone (or a [`settled`](SlotTable::settled) copy, one per EXEC)
/// costs two reference counts, not 64 KiB.
#[derive(Clone)]
pub struct SlotTable {
    owner: Arc<[u16]>,
    /// For a migrating slot, the old owner's position; [`NO_NODE`] otherwise.
    from: Arc<[u16]>,
}

const NO_NODE: u16 = u16::MAX;

/// The `from` array of a table with no slot moving.
static NONE_MOVING: std::sync::LazyLock<Arc<[u16]>> =
    std::sync::LazyLock::new(|| vec![NO_NODE; SLOT_COUNT].into());

impl SlotTable {
    /// Builds the table. The topology must have passed [`Topology::validate`].
    pub fn new(topology: &Topology) -> SlotTable {
        let pos_of = |id: u32| topology.nodes.iter().position(|n| n.id == id).unwrap_or(0) as u16;
        let mut owner = vec![0u16; SLOT_COUNT];
        for r in &topology.slots {
            let pos = pos_of(r.node);
            for slot in r.start..=r.end {
                owner[usize::from(slot)] = pos;
            }
        }
        if topology.migrations.is_empty() {
            return SlotTable { owner: owner.into(), from: NONE_MOVING.clone() };
        }
        let mut from = vec![NO_NODE; SLOT_COUNT];
        for m in &topology.migrations {
            let pos = pos_of(m.from);
            for slot in m.start..=m.end {
                from[usize::from(slot)] = pos;
            }
        }
        SlotTable { owner: owner.into(), from: from.into() }
    }

    /// Position in `Topology::nodes` of the node that owns `slot`.
    #[inline]
    pub fn node_of(&self, slot: u16) -> usize {
        usize::from(self.owner[usize::from(slot) & (SLOT_COUNT - 1)])
    }

    /// The same owners with no slot moving (a transaction's routing: its ops go to the owner as
    /// they are, and the owner refuses the transaction while a slot moves).
    pub fn settled(&self) -> SlotTable {
        SlotTable { owner: self.owner.clone(), from: NONE_MOVING.clone() }
    }

    /// For a slot being moved, the position of the node it is moving from.
    #[inline]
    pub fn moving_from(&self, slot: u16) -> Option<usize> {
        let from = self.from[usize::from(slot) & (SLOT_COUNT - 1)];
        (from != NO_NODE).then_some(usize::from(from))
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
    fn migrations_and_roles() {
        let mut t = Topology::even(&addrs(2));
        // Slots 0-99 move from node 0 to node 1: the table names the new owner.
        t.slots[0].start = 100;
        t.slots.push(SlotRange { start: 0, end: 99, node: 1 });
        t.migrations.push(Migration { start: 0, end: 99, from: 0, to: 1 });
        t.version = 2;
        t.validate().unwrap();
        assert_eq!(t.role(5, 1), SlotRole::Incoming { from: 0 });
        assert_eq!(t.role(5, 0), SlotRole::Outgoing { to: 1 });
        assert_eq!(t.role(500, 0), SlotRole::Owner);
        assert_eq!(t.role(500, 1), SlotRole::None);
        let table = SlotTable::new(&t);
        assert_eq!((table.node_of(5), table.moving_from(5)), (1, Some(0)));
        assert_eq!(table.moving_from(500), None);
        assert_eq!(Topology::from_json(&t.to_json()).unwrap(), t);
        let mut bad = t.clone();
        bad.migrations[0].to = 0;
        assert!(matches!(bad.validate(), Err(TopologyError::BadMigration { .. })));
        let mut bad = t.clone();
        bad.migrations.push(Migration { start: 50, end: 60, from: 0, to: 1 });
        assert!(matches!(bad.validate(), Err(TopologyError::BadMigration { .. })));
        assert!(!Topology::even(&addrs(2)).to_json().contains("migrations"), "omitted when empty");
    }

    #[test]
    fn replicas_members_and_promotion() {
        let mut t = Topology::even(&addrs(2));
        t.nodes[0].replicas = vec!["127.0.0.1:8001".into()];
        t.validate().unwrap();
        assert!(t.has_replicas());
        assert_eq!(t.member("127.0.0.1:7001"), Some(Member::Primary { shard: 0 }));
        assert_eq!(t.member("127.0.0.1:8001"), Some(Member::Replica { shard: 0 }));
        assert_eq!(t.member("127.0.0.1:9999"), None);
        assert!(t.to_json().contains("replicas"));
        assert_eq!(Topology::from_json(&t.to_json()).unwrap(), t);
        let p = t.promote(0, "127.0.0.1:8001").unwrap();
        assert_eq!(p.version, t.version + 1);
        assert_eq!(p.nodes[0].addr, "127.0.0.1:8001");
        assert_eq!(p.nodes[0].replicas, vec!["127.0.0.1:7001".to_string()]);
        assert_eq!(p.member("127.0.0.1:7001"), Some(Member::Replica { shard: 0 }));
        assert!(t.promote(1, "127.0.0.1:8001").is_none(), "not a replica of shard 1");
        let mut bad = t.clone();
        bad.nodes[1].replicas = vec!["127.0.0.1:7001".into()];
        assert_eq!(bad.validate(), Err(TopologyError::DuplicateAddr("127.0.0.1:7001".into())));
        assert!(!Topology::even(&addrs(2)).to_json().contains("replicas"), "omitted when empty");
    }

    #[test]
    fn json_round_trip() {
        let t = Topology::even(&addrs(4));
        assert_eq!(Topology::from_json(&t.to_json()).unwrap(), t);
    }
}
