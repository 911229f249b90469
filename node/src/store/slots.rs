//! Per-slot state that resharding needs, shared by all shards (one byte per slot, atomics so reads
//! on the hot path take no lock).
//!
//! - `INCOMING`: the slot is moving into this node. Removing a key leaves a tombstone (even for a
//!   key that never got here), so a copy still arriving from the old owner cannot bring it back.
//! - `BASE_MASKED`: the slot was given away; the base snapshot's entries for it are dead for good
//!   (until the next restart, whose snapshot no longer has them), even if the slot comes back.
//! - `DROPPING`: memory entries of the slot are being reclaimed.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

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

/// Per-slot traffic since the node started or the last CONFIG RESETSTAT (SHOAL SLOT-STATS): ops
/// that read a key of the slot, ops that write one, and the encoded bytes of those ops and their
/// replies. One 32-byte cell of relaxed atomics per slot (512 KiB in all, two cells per cache
/// line): an op adds to its slot's counters without a lock, touching one cache line (four
/// separate arrays touched four).
///
/// Counting is off unless asked for (`--slot-stats`, or CONFIG SET cluster-slot-stats-enabled yes,
/// as in Redis 8, whose default is off too): with random keys the slot's cell is a cache miss on
/// every op (about 8% of a node's time under a pipelined GET load, docs/benchmarks.md).
#[derive(Debug)]
pub struct SlotCounters {
    cells: Box<[SlotCell]>,
    enabled: AtomicBool,
}

#[derive(Debug, Default)]
#[repr(align(32))]
struct SlotCell {
    reads: AtomicU64,
    writes: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
}

/// One slot's traffic, as [`SlotCounters::get`] reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotTraffic {
    pub reads: u64,
    pub writes: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

impl Default for SlotCounters {
    fn default() -> Self {
        SlotCounters {
            cells: (0..SLOT_COUNT).map(|_| SlotCell::default()).collect(),
            enabled: AtomicBool::new(false),
        }
    }
}

impl SlotCounters {
    /// Whether ops are counted.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    /// One op on a key of `slot`.
    #[inline]
    pub fn record(&self, slot: u16, write: bool, bytes_in: u64, bytes_out: u64) {
        let c = &self.cells[usize::from(slot) & (SLOT_COUNT - 1)];
        let ops = if write { &c.writes } else { &c.reads };
        ops.fetch_add(1, Ordering::Relaxed);
        c.bytes_in.fetch_add(bytes_in, Ordering::Relaxed);
        c.bytes_out.fetch_add(bytes_out, Ordering::Relaxed);
    }

    /// Starts a slot's counters again from zero (CONFIG RESETSTAT). An op counted meanwhile may
    /// land on either side of the reset: each counter is cleared on its own.
    pub fn reset(&self, slot: u16) {
        let c = &self.cells[usize::from(slot) & (SLOT_COUNT - 1)];
        for counter in [&c.reads, &c.writes, &c.bytes_in, &c.bytes_out] {
            counter.store(0, Ordering::Relaxed);
        }
    }

    pub fn get(&self, slot: u16) -> SlotTraffic {
        let c = &self.cells[usize::from(slot) & (SLOT_COUNT - 1)];
        SlotTraffic {
            reads: c.reads.load(Ordering::Relaxed),
            writes: c.writes.load(Ordering::Relaxed),
            bytes_in: c.bytes_in.load(Ordering::Relaxed),
            bytes_out: c.bytes_out.load(Ordering::Relaxed),
        }
    }
}
