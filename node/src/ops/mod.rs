//! Applies wire ops to the store: the one place where `proto` types meet `store` types, and where
//! store errors become wire errors.
//!
//! Layers, top down (each file imports only from those below it):
//! - `gate.rs`: the entry points. An op takes the store's gate (shared; a transaction takes it
//!   exclusively), is checked against the view, and runs.
//! - `transaction.rs`: MULTI/EXEC under the exclusive gate, WATCHes first.
//! - `blocked.rs`: blocking commands: the first attempt, the wait, serving waiters after writes.
//! - `run.rs`: an admitted op run where notifications, slot stats, watches, near-cache tracking
//!   and the replicas' change log see it.
//! - `apply.rs`: the op itself: wire op → store call (or typed command) → wire reply.
//! - `check.rs`: the slot and version checks (`moved`, `try_again`), which ops only read.
//! - `reply.rs`: reply builders (a store error's worded by `crate::redis_error`).
//!
//! This file only declares the modules and re-exports what the rest of the node names.

mod apply;
mod blocked;
mod check;
mod gate;
mod reply;
mod run;
mod transaction;

#[cfg(test)]
mod tests;

pub use blocked::{block_or_queue, withdraw};
pub use check::still_served;
pub use gate::{apply_batch, apply_checked, try_apply_checked};
pub use reply::{busy, error};
pub use transaction::holds_script;

pub(crate) use blocked::serve_blocked_after;
pub(crate) use check::{check_group, reads_only};
pub(crate) use gate::apply_for_script;
pub(crate) use reply::{moved, ok, try_again};
pub(crate) use transaction::{admit, run_admitted, transaction_with};
