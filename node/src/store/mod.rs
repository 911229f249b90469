//! The node's sharded in-memory store. A plain synchronous API with no protocol types in it: the
//! gRPC layer (`ops/`) translates ops into these calls and results into replies. This file only
//! declares the modules and re-exports what callers name: each file below imports from the one
//! that defines an item, never through here.
//!
//! - [`Store`] (`sharded.rs`): the shards, which one holds a key, the memory account, the
//!   settings in force; its configuration (`config.rs`) and its error (`error.rs`) sit below it.
//! - [`shard`]: one shard: slab of entries + hash index + expiry min-heap, behind its own mutex.
//! - [`entry`]: the 40-byte entry; key and value share one allocation.
//! - [`strings`]: string commands (GET, SET and its options, APPEND, INCR, SETRANGE, ...).
//! - [`keyspace`]: key commands (DEL, EXISTS, EXPIRE, TTL, SCAN, KEYS, RANDOMKEY, FLUSH, ...).
//! - [`evict`]: `maxmemory` enforcement and the eviction policies.
//! - [`persist`]: the two-layer view per slot (memory over the base snapshot) that snapshot
//!   writing and slot export read from.
//! - [`blocked`]: clients blocked on keys (BLPOP and its kin), first come first served.
//! - [`changes`]: the change log replicas follow (which keys changed, in order).
//! - [`lfu`]: the LFU access counter (LFU eviction policies, OBJECT FREQ).
//! - [`libraries`]: the function libraries' payload, kept here so every copy of the store has it.
//! - [`watch`]: versions of watched keys (WATCH), bumped by every change to them.
//! - [`events`]: keyspace notifications on or off, and the sink (the node's pub/sub) that the
//!   store's events and published messages leave through; shards raise `expired`/`evicted`.
//! - [`glob`], [`float`]: Redis glob patterns, x87 INCRBYFLOAT arithmetic. Time comes from
//!   `shoal_wire::clock` (re-exported here).
//!
//! A key's shard is its cluster slot masked to the shard count, so every key of a slot lives in one
//! shard. Underneath memory may sit a read-only *base* snapshot (the one the node started from):
//! reads fall through to it, changes copy a key into memory first, and deletions of keys it holds
//! leave tombstones (see `shard.rs`). Memory is accounted per shard (entries at their allocation
//! size plus the slab, index and heap at capacity) and summed in one atomic that `maxmemory` is
//! checked against.

pub mod blocked;
pub mod changes;
mod config;
pub mod entry;
mod error;
pub mod events;
mod evict;
pub mod float;
pub use shoal_wire::glob;
pub mod hll;
mod keyspace;
pub mod lag;
pub mod lfu;
pub mod libraries;
pub mod object;
pub mod persist;
mod shard;
mod sharded;
pub mod slots;
mod strings;
pub mod tracking;
mod typed;
pub mod watch;

pub use float::FloatError;
pub use keyspace::{ExpireFlags, ScanPage, TtlState};
pub use shoal_wire::clock::{Clock, ManualClock, SystemClock};
pub use strings::{SetCondition, SetExpiry, SetOptions, SetOutcome};
pub use typed::{KeyInfo, Locked, Restore, StrSlot};

pub use config::{DEFAULT_MAX_VALUE_LEN, EvictionPolicy, StoreConfig, default_shards};
pub use error::StoreError;
pub use shard::{Presence, without_touching};
pub use sharded::{Store, StoreStats};
