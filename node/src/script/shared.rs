//! What the script thread and the rest of the node share ([`Shared`]): the script cache, the
//! running script's clock and flags (busy, written, killed), the busy threshold and the parsed
//! ACL rules. Below the runner, the VM ([`super::engine`]) and `redis.call` ([`super::call`]),
//! which all read or set them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;

use super::acl;

/// What the script thread and the rest of the node share.
#[derive(Debug)]
pub struct Shared {
    /// Script bodies by SHA: every script this node has seen (EVAL or SCRIPT LOAD).
    pub(super) cache: Mutex<HashMap<String, Bytes>>,
    /// SCRIPT FLUSHes so far (the script thread drops its compiled scripts when this moves).
    pub(super) flushes: AtomicU64,
    pub(super) epoch: Instant,
    /// When the running script started (ms since `epoch`, plus one); 0: none runs.
    pub(super) running_since: AtomicU64,
    /// The script thread holds (or is taking) the store's gate: from before it takes it for a
    /// script or a transaction with scripts until after it lets go, compiling and the
    /// transaction's plain ops included, so an op that finds the gate taken waits without a
    /// thread (see `execute.rs`).
    pub(super) holding: AtomicBool,
    /// The running script has written (SCRIPT KILL would leave half of its work).
    pub wrote: AtomicBool,
    /// SCRIPT KILL asked the running script to stop (its hook checks).
    pub kill: AtomicBool,
    pub(super) busy_ms: AtomicU64,
    /// Users' permissions as scripts carried them, parsed (only the script thread uses it).
    pub(super) acl: Mutex<acl::Cache>,
}

impl Shared {
    pub(super) fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
}
