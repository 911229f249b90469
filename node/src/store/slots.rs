//! Per-slot state that resharding needs, shared by all shards (one byte per slot, atomics so reads
//! on the hot path take no lock).
//!
//! - `INCOMING`: the slot is moving into this node. Removing a key leaves a tombstone (even for a
//!   key that never got here), so a copy still arriving from the old owner cannot bring it back.
//! - `BASE_MASKED`: the slot was given away; the base snapshot's entries for it are dead for good
//!   (until the next restart, whose snapshot no longer has them), even if the slot comes back.
//! - `DROPPING`: memory entries of the slot are being reclaimed.

use std::sync::atomic::{AtomicU8, Ordering};

use shoal_wire::SLOT_COUNT;

pub const INCOMING: u8 = 1;
pub const BASE_MASKED: u8 = 2;
pub const DROPPING: u8 = 4;

#[derive(Debug)]
pub struct SlotFlags(Box<[AtomicU8]>);

impl Default for SlotFlags {
    fn default() -> Self {
        SlotFlags((0..SLOT_COUNT).map(|_| AtomicU8::new(0)).collect())
    }
}

impl SlotFlags {
    #[inline]
    pub fn get(&self, slot: u16) -> u8 {
        self.0[usize::from(slot) & (SLOT_COUNT - 1)].load(Ordering::Acquire)
    }

    #[inline]
    pub fn has(&self, slot: u16, flag: u8) -> bool {
        self.get(slot) & flag != 0
    }

    /// Sets `flag`; returns whether it was newly set.
    pub fn set(&self, slot: u16, flag: u8) -> bool {
        self.0[usize::from(slot)].fetch_or(flag, Ordering::AcqRel) & flag == 0
    }

    pub fn clear(&self, slot: u16, flag: u8) {
        self.0[usize::from(slot)].fetch_and(!flag, Ordering::AcqRel);
    }
}
