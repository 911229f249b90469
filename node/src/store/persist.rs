//! The store seen slot by slot, both layers folded: what a snapshot writes and what slot export
//! streams.
//!
//! Walking a live store by slot without stopping it or copying it whole: a [`SlotPlan`] records,
//! per shard, the slab positions of its memory entries sorted by slot (8 bytes per entry, taken
//! under each shard's lock in turn). Then each slot is copied out on its own, under its shard's lock
//! for just that slot: the memory entries the plan lists for it (re-checked, since they may have
//! changed since), plus the base entries of that slot that memory neither replaces nor hides. So
//! the copy in hand is one slot at a time, and traffic only waits for one slot's copy.
//!
//! The result is a *fuzzy* image: every write acknowledged before the plan was made is in it
//! (unless changed or deleted while the walk ran, in which case the newer state may be), and some
//! later writes may be too. A snapshot taken after traffic has stopped (on SIGTERM) is exact.

use std::ops::RangeInclusive;

use bytes::Bytes;
use shoal_wire::key_slot;

use super::sharded::Store;

/// A key, value and TTL copied out of the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotEntry {
    pub key: Bytes,
    pub value: Bytes,
    /// Absolute Unix ms; 0 means no TTL.
    pub expire_at: u64,
    /// `object::ValueType` as a number; `value` is then the serialized form.
    pub value_type: u32,
}

/// Where each slot's memory entries were when the walk began.
#[derive(Debug)]
pub struct SlotPlan {
    /// Per shard: `(slot, slab position)`, sorted by slot.
    per_shard: Vec<Vec<(u16, u32)>>,
}

impl SlotPlan {
    fn positions(&self, shard: usize, slot: u16) -> &[(u16, u32)] {
        let list = &self.per_shard[shard];
        let start = list.partition_point(|&(s, _)| s < slot);
        let end = list.partition_point(|&(s, _)| s <= slot);
        &list[start..end]
    }

    /// Memory entries the plan covers (tombstones and expired entries included).
    pub fn memory_entries(&self) -> usize {
        self.per_shard.iter().map(Vec::len).sum()
    }
}

impl Store {
    /// Records where the memory entries of `slots` are (see the module docs).
    pub fn plan(&self, slots: RangeInclusive<u16>) -> SlotPlan {
        let per_shard = self
            .shards
            .iter()
            .map(|shard| {
                let s = shard.lock();
                let mut list: Vec<(u16, u32)> = s
                    .entries()
                    .map(|(pos, e)| (key_slot(e.key()), pos))
                    .filter(|(slot, _)| slots.contains(slot))
                    .collect();
                drop(s);
                list.sort_unstable();
                list
            })
            .collect();
        SlotPlan { per_shard }
    }

    /// The live entries of `slot`, memory over base, sorted by key.
    pub fn slot_entries(&self, slot: u16, plan: &SlotPlan) -> Vec<SlotEntry> {
        use super::slots::{BASE_MASKED, DROPPING};
        if self.slots.has(slot, DROPPING) {
            return Vec::new(); // given away: not ours to write or export
        }
        let now = self.now_ms();
        let index = usize::from(slot) & self.mask;
        let s = self.shards[index].lock();
        let mut out: Vec<SlotEntry> = plan
            .positions(index, slot)
            .iter()
            .filter_map(|&(_, pos)| Some((pos, s.entry_at(pos)?)))
            // A position may have been freed and reused by another key since the plan was made.
            .filter(|(_, e)| !e.is_tombstone() && !e.is_expired(now) && key_slot(e.key()) == slot)
            .map(|(pos, e)| {
                let (value, value_type) = match s.object(pos) {
                    Some(o) => (Bytes::from(o.serialize()), o.value_type() as u32),
                    None => (Bytes::copy_from_slice(e.value()), 0),
                };
                SlotEntry { key: Bytes::copy_from_slice(e.key()), value, expire_at: e.expire_at, value_type }
            })
            .collect();
        if let Some(base) = s.base().filter(|_| !self.slots.has(slot, BASE_MASKED)) {
            for i in base.slot_range(slot, slot) {
                let Some(e) = base.checked_entry(i) else { continue };
                if e.is_expired(now) || s.find(s.hash(e.key), e.key).is_some() {
                    continue;
                }
                out.push(SlotEntry {
                    key: Bytes::copy_from_slice(e.key),
                    value: Bytes::copy_from_slice(e.value),
                    expire_at: e.expire_at,
                    value_type: e.value_type,
                });
            }
        }
        drop(s);
        out.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        out.dedup_by(|a, b| a.key == b.key);
        out
    }
}
