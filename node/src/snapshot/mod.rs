//! mmap read snapshots: immutable, checked files of a node's data, sorted by (slot, key).
//!
//! - [`format`]: the byte layout and its checks (`docs/snapshot-format.md`).
//! - [`mmap`]: mapping a file; the only `unsafe` code in Shoal.
//! - [`reader`]: [`Snapshot`], lookups, slot ranges, verification.
//! - [`writer`]: [`SnapshotWriter`], one-pass writing with an atomic rename.
//! - [`dir`]: the data directory (names, newest usable file, retention, quarantine of damaged files).
//! - [`bake`]: building a snapshot offline from CSV or JSONL.
//!
//! A node maps the newest valid snapshot at start and the store serves reads from it underneath
//! its in-memory layer (`store::Store::set_base`); writing a new snapshot folds both layers into
//! one file.

pub mod bake;
pub mod dir;
pub mod format;
mod mmap;
pub mod reader;
pub mod writer;

pub use reader::{EntryRef, Lookup, OpenError, Snapshot, VerifyReport};
pub use writer::{SnapshotWriter, Written};
