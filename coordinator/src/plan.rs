//! The resharding planner: from the current topology and the wanted set of nodes, the next
//! topology, moving as few slots as possible. Pure: no I/O, property-tested.
//!
//! Every wanted node ends with `16384 / n` slots or one more. The extra slots go to the nodes that
//! hold the most already, so the fewest move. Slots move only off nodes that are leaving or above
//! their share, and only onto nodes below theirs: growing N → N+1 from a balanced cluster moves
//! about 1/(N+1) of the slots, all onto the new node, taken evenly from the others; shrinking moves
//! only the leaving nodes' slots, spread evenly over the rest. Slots taken from a node come off the
//! end of its ranges, and freed slots are handed out in ascending runs, so ranges stay few.

use std::collections::BTreeMap;

use shoal_wire::{Migration, NodeInfo, SLOT_COUNT, SlotRange, Topology};

/// Why a plan cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("migrations are still in flight; finish them first")]
    MigrationsInFlight,
    #[error("a cluster needs at least one node")]
    NoNodes,
    #[error("node id {0} is listed twice")]
    DuplicateNode(u32),
    #[error("node id {id} changed address from {old} to {new} while owning slots")]
    AddressChanged { id: u32, old: String, new: String },
    #[error("slots {start}-{end} are not a range of the {count} slots")]
    BadRange { start: u16, end: u16, count: usize },
    #[error("node id {0} is not a member of the cluster")]
    UnknownNode(u32),
}

/// The topology that moves `current` (which must have no migrations in flight) onto the nodes in
/// `target`, as version `current.version + 1`. Nodes that leave stay listed as migration sources;
/// [`finalize`] removes them once their slots have moved.
pub fn plan(current: &Topology, target: &[NodeInfo]) -> Result<Topology, PlanError> {
    if !current.migrations.is_empty() {
        return Err(PlanError::MigrationsInFlight);
    }
    if target.is_empty() {
        return Err(PlanError::NoNodes);
    }
    for (i, n) in target.iter().enumerate() {
        if target[..i].iter().any(|m| m.id == n.id) {
            return Err(PlanError::DuplicateNode(n.id));
        }
    }
    let owner: Vec<u32> = slot_owners(current);
    let mut count: BTreeMap<u32, usize> = target.iter().map(|n| (n.id, 0)).collect();
    for &o in &owner {
        if let Some(c) = count.get_mut(&o) {
            *c += 1;
        }
    }
    for n in target {
        if let Some(old) = current.node(n.id)
            && old.addr != n.addr
            && count[&n.id] > 0
        {
            return Err(PlanError::AddressChanged { id: n.id, old: old.addr.clone(), new: n.addr.clone() });
        }
    }

    // Quotas: floor for everyone, +1 for the `rem` nodes holding the most (ties: lower id).
    let n = target.len();
    let (base, rem) = (SLOT_COUNT / n, SLOT_COUNT % n);
    let mut by_size: Vec<u32> = target.iter().map(|t| t.id).collect();
    by_size.sort_by_key(|id| (std::cmp::Reverse(count[id]), *id));
    let quota: BTreeMap<u32, usize> =
        by_size.iter().enumerate().map(|(i, id)| (*id, base + usize::from(i < rem))).collect();

    // Free the slots of leaving nodes, and the excess of nodes above quota: walking down from the
    // top, each node keeps its highest slots up to its quota, so what it keeps stays contiguous.
    let mut new_owner = owner.clone();
    let mut keep: BTreeMap<u32, usize> = quota.clone();
    let mut freed = Vec::new();
    for slot in (0..SLOT_COUNT).rev() {
        let o = owner[slot];
        match keep.get_mut(&o) {
            Some(k) if *k > 0 => *k -= 1,
            _ => freed.push(slot),
        }
    }
    freed.reverse();
    // Hand freed slots to nodes below quota, one node's deficit at a time, in ascending runs.
    // What a node still lacks is what it did not get to keep out of its quota.
    let mut deficits: Vec<(u32, usize)> =
        keep.iter().map(|(&id, &d)| (id, d)).filter(|(_, d)| *d > 0).collect();
    deficits.sort_by_key(|(id, _)| *id);
    let mut freed_iter = freed.into_iter();
    for (id, d) in deficits {
        for slot in freed_iter.by_ref().take(d) {
            new_owner[slot] = id;
        }
    }
    debug_assert!(freed_iter.next().is_none(), "every freed slot has a new owner");

    let mut nodes: Vec<NodeInfo> = target.to_vec();
    for old in &current.nodes {
        let still_owns = owner.contains(&old.id);
        if still_owns && !nodes.iter().any(|n| n.id == old.id) {
            nodes.push(old.clone()); // a leaving node, listed while its slots move away
        }
    }
    nodes.sort_by_key(|n| n.id);
    let next = Topology {
        version: current.version + 1,
        nodes,
        slots: ranges(&new_owner),
        migrations: moves(&owner, &new_owner),
    };
    debug_assert!(next.validate().is_ok());
    Ok(next)
}

/// The topology that moves the slots `start..=end` onto node `to`, a member of `current` (which must
/// have no migrations in flight), as version `current.version + 1`; slots `to` already owns stay.
/// Not balanced: this is for moving chosen slots (a hot range, a test's keys), as `plan` is for
/// changing the set of nodes.
pub fn move_slots(current: &Topology, start: u16, end: u16, to: u32) -> Result<Topology, PlanError> {
    if !current.migrations.is_empty() {
        return Err(PlanError::MigrationsInFlight);
    }
    if start > end || usize::from(end) >= SLOT_COUNT {
        return Err(PlanError::BadRange { start, end, count: SLOT_COUNT });
    }
    if current.node(to).is_none() {
        return Err(PlanError::UnknownNode(to));
    }
    let owner = slot_owners(current);
    let mut new_owner = owner.clone();
    new_owner[usize::from(start)..=usize::from(end)].fill(to);
    let next = Topology {
        version: current.version + 1,
        nodes: current.nodes.clone(),
        slots: ranges(&new_owner),
        migrations: moves(&owner, &new_owner),
    };
    debug_assert!(next.validate().is_ok());
    Ok(next)
}

/// The topology after `t`'s migrations are done: no migrations, and only nodes that own slots,
/// as version `t.version + 1`.
pub fn finalize(t: &Topology) -> Topology {
    let nodes = t.nodes.iter().filter(|n| t.slots.iter().any(|r| r.node == n.id)).cloned().collect();
    Topology { version: t.version + 1, nodes, slots: t.slots.clone(), migrations: Vec::new() }
}

/// The owner id of every slot.
pub fn slot_owners(t: &Topology) -> Vec<u32> {
    let mut owner = vec![0u32; SLOT_COUNT];
    for r in &t.slots {
        for slot in r.start..=r.end {
            owner[usize::from(slot)] = r.node;
        }
    }
    owner
}

/// Contiguous runs of equal owners.
fn ranges(owner: &[u32]) -> Vec<SlotRange> {
    let mut out: Vec<SlotRange> = Vec::new();
    for (slot, &node) in owner.iter().enumerate() {
        match out.last_mut() {
            Some(r) if r.node == node && usize::from(r.end) + 1 == slot => r.end = slot as u16,
            _ => out.push(SlotRange { start: slot as u16, end: slot as u16, node }),
        }
    }
    out
}

/// Contiguous runs of slots whose owner changed, with the same (from, to).
fn moves(before: &[u32], after: &[u32]) -> Vec<Migration> {
    let mut out: Vec<Migration> = Vec::new();
    for slot in 0..SLOT_COUNT {
        let (from, to) = (before[slot], after[slot]);
        if from == to {
            continue;
        }
        match out.last_mut() {
            Some(m) if m.from == from && m.to == to && usize::from(m.end) + 1 == slot => m.end = slot as u16,
            _ => out.push(Migration { start: slot as u16, end: slot as u16, from, to }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn nodes(ids: &[u32]) -> Vec<NodeInfo> {
        ids.iter().map(|&id| NodeInfo::new(id, format!("127.0.0.1:{}", 7000 + id))).collect()
    }

    fn counts(t: &Topology) -> BTreeMap<u32, usize> {
        let mut c = BTreeMap::new();
        for r in &t.slots {
            *c.entry(r.node).or_insert(0) += r.len();
        }
        c
    }

    /// The least movement any balanced assignment can have (leaving nodes' slots, plus what
    /// staying nodes hold above the largest share, with the extra slots given to the largest).
    fn minimum_moves(current: &Topology, target: &[NodeInfo]) -> usize {
        let owners = slot_owners(current);
        let n = target.len();
        let (base, rem) = (SLOT_COUNT / n, SLOT_COUNT % n);
        let mut staying: Vec<usize> =
            target.iter().map(|t| owners.iter().filter(|&&o| o == t.id).count()).collect();
        staying.sort_unstable_by(|a, b| b.cmp(a));
        let leaving = owners.iter().filter(|o| !target.iter().any(|t| t.id == **o)).count();
        leaving
            + staying
                .iter()
                .enumerate()
                .map(|(i, &c)| c.saturating_sub(base + usize::from(i < rem)))
                .sum::<usize>()
    }

    #[test]
    fn chosen_slots_move_onto_one_node_and_nothing_else_moves() {
        let t = Topology::even(&["a:1".to_string(), "b:1".to_string(), "c:1".to_string()]);
        let before = slot_owners(&t);
        // Across the boundary of nodes 0 and 1 onto node 2: two migrations, from 0 and from 1.
        let (start, end) = (5000u16, 6000u16);
        let next = move_slots(&t, start, end, 2).unwrap();
        next.validate().unwrap();
        assert_eq!(next.version, t.version + 1);
        assert_eq!(next.nodes, t.nodes);
        let after = slot_owners(&next);
        for slot in 0..SLOT_COUNT {
            let inside = (usize::from(start)..=usize::from(end)).contains(&slot);
            assert_eq!(after[slot], if inside { 2 } else { before[slot] }, "slot {slot}");
        }
        let moved: usize = next.migrations.iter().map(Migration::len).sum();
        assert_eq!(moved, 1001);
        assert!(next.migrations.iter().all(|m| m.to == 2 && m.from != 2), "{:?}", next.migrations);
        assert_eq!(next.migrations.len(), 2);
        // Back again: the finalized topology is the one we started from, at a later version.
        let back = move_slots(&finalize(&next), start, usize::from(end).min(5460) as u16, 0).unwrap();
        assert!(back.migrations.iter().all(|m| m.from == 2 && m.to == 0));
        assert_eq!(move_slots(&next, 0, 1, 0), Err(PlanError::MigrationsInFlight));
        assert!(matches!(move_slots(&t, 9, 8, 0), Err(PlanError::BadRange { .. })));
        assert!(matches!(move_slots(&t, 0, 16384, 0), Err(PlanError::BadRange { .. })));
        assert_eq!(move_slots(&t, 0, 1, 7), Err(PlanError::UnknownNode(7)));
        // Slots the target already owns are no migration.
        assert!(move_slots(&t, 0, 100, 0).unwrap().migrations.is_empty());
    }

    /// Plans, checks every property, and returns (the plan, its finalized form).
    fn check(current: &Topology, target: &[NodeInfo]) -> (Topology, Topology) {
        let next = plan(current, target).unwrap();
        next.validate().unwrap();
        assert_eq!(next.version, current.version + 1);
        // Balance: every wanted node within one slot of every other, nobody else owns anything.
        let c = counts(&next);
        let wanted: Vec<usize> = target.iter().map(|t| c.get(&t.id).copied().unwrap_or(0)).collect();
        let (min, max) = (wanted.iter().min().unwrap(), wanted.iter().max().unwrap());
        assert!(max - min <= 1, "unbalanced: {wanted:?}");
        assert_eq!(wanted.iter().sum::<usize>(), SLOT_COUNT, "only wanted nodes own slots");
        // Minimal movement, and the migration list says exactly what moved.
        let (before, after) = (slot_owners(current), slot_owners(&next));
        let moved = before.iter().zip(&after).filter(|(a, b)| a != b).count();
        assert_eq!(moved, minimum_moves(current, target));
        assert_eq!(next.migrating_slots(), moved);
        for m in &next.migrations {
            for s in m.start..=m.end {
                assert_eq!((before[usize::from(s)], after[usize::from(s)]), (m.from, m.to));
            }
        }
        // Nothing moves between two nodes that both stay within their share.
        for m in &next.migrations {
            let from_stays = target.iter().any(|t| t.id == m.from);
            if from_stays {
                let had = before.iter().filter(|&&o| o == m.from).count();
                assert!(
                    had > SLOT_COUNT / target.len(),
                    "slots taken from a node that was not above its share"
                );
            }
        }
        let fin = finalize(&next);
        fin.validate().unwrap();
        assert!(fin.migrations.is_empty());
        assert_eq!(fin.nodes.len(), target.len(), "leaving nodes are gone after finalize");
        (next, fin)
    }

    fn even(ids: &[u32]) -> Topology {
        let mut t = Topology::even(&nodes(ids).iter().map(|n| n.addr.clone()).collect::<Vec<_>>());
        t.nodes = nodes(ids);
        t
    }

    #[test]
    fn growing_by_one_moves_a_share_onto_the_new_node_evenly() {
        let (next, _) = check(&even(&[0, 1, 2]), &nodes(&[0, 1, 2, 3]));
        let moved = next.migrating_slots();
        assert!((4095..=4097).contains(&moved), "about 1/4 of the slots: {moved}");
        assert!(next.migrations.iter().all(|m| m.to == 3), "all onto the new node");
        let per_source: Vec<usize> = (0..3)
            .map(|id| next.migrations.iter().filter(|m| m.from == id).map(Migration::len).sum())
            .collect();
        assert!(per_source.iter().max().unwrap() - per_source.iter().min().unwrap() <= 1, "{per_source:?}");
        assert_eq!(next.migrations.len(), 3, "one contiguous run per source");
    }

    #[test]
    fn shrinking_moves_only_the_leaving_nodes_slots() {
        let (next, _) = check(&even(&[0, 1, 2, 3, 4]), &nodes(&[0, 1]));
        assert!(next.migrations.iter().all(|m| m.from >= 2 && m.to <= 1));
        assert_eq!(next.nodes.len(), 5, "leaving nodes stay listed while their slots move");
    }

    #[test]
    fn a_plan_refuses_while_migrations_are_in_flight_and_on_bad_input() {
        let t = even(&[0, 1]);
        let next = plan(&t, &nodes(&[0, 1, 2])).unwrap();
        assert_eq!(plan(&next, &nodes(&[0, 1])), Err(PlanError::MigrationsInFlight));
        assert_eq!(plan(&t, &[]), Err(PlanError::NoNodes));
        assert_eq!(plan(&t, &nodes(&[0, 0])), Err(PlanError::DuplicateNode(0)));
        let mut moved = nodes(&[0, 1]);
        moved[1].addr = "127.0.0.1:9999".into();
        assert!(matches!(plan(&t, &moved), Err(PlanError::AddressChanged { id: 1, .. })));
    }

    #[test]
    fn the_three_five_two_four_sequence() {
        let mut t = even(&[0, 1, 2]);
        for ids in [&[0, 1, 2, 3, 4][..], &[0, 1][..], &[0, 1, 2, 3][..]] {
            t = check(&t, &nodes(ids)).1;
        }
        assert_eq!(t.version, 7);
    }

    fn arb_topology() -> impl Strategy<Value = Topology> {
        // 1..8 nodes with arbitrary (not necessarily balanced or contiguous) ownership.
        (1usize..8, proptest::collection::vec(0u32..8, 1..40)).prop_map(|(n, cuts)| {
            let ids: Vec<u32> = (0..n as u32).collect();
            let mut owner = vec![0u32; SLOT_COUNT];
            let step = SLOT_COUNT / cuts.len();
            for (i, c) in cuts.iter().enumerate() {
                for s in owner.iter_mut().skip(i * step).take(step) {
                    *s = ids[*c as usize % n];
                }
            }
            let mut t =
                Topology { version: 5, nodes: nodes(&ids), slots: ranges(&owner), migrations: vec![] };
            // Drop listed nodes that own nothing, as finalize would.
            t.nodes.retain(|nd| owner.contains(&nd.id));
            t
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn any_plan_is_valid_balanced_and_minimal(t in arb_topology(), wanted in proptest::collection::btree_set(0u32..12, 1..9)) {
            let target = nodes(&wanted.into_iter().collect::<Vec<_>>());
            check(&t, &target);
        }
    }
}
