//! What the script thread and the rest of the node share ([`Shared`]): the script cache, the
//! running script's clock and flags (busy, written, killed), the busy threshold and the parsed
//! ACL rules. Below the runner, the VM ([`super::engine`]) and `redis.call` ([`super::call`]),
//! which all read or set them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;

use super::acl;

/// What ops meet while a script has held the store past busy-reply-threshold.
pub const BUSY: &str = shoal_wire::script::BUSY_SCRIPT;
/// BUSY while a library function (FCALL) runs.
pub const BUSY_FUNCTION: &str = shoal_wire::script::BUSY_FUNCTION;

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
    /// While a script running on another node holds this node (`held.rs`): when the hold began
    /// (ms since `epoch`, plus one; 0: no hold), and whether that script is a library function.
    /// Past busy-reply-threshold the ops it holds here are answered BUSY, as on its own node.
    pub(super) held_since: AtomicU64,
    pub(super) held_function: AtomicBool,
    /// Told when a script starts, for whoever watches for busy scripts
    /// ([`super::Scripts::busy_changes`]); a permit waits when nobody listens, so a start is not
    /// missed and costs one atomic operation.
    pub(super) started: tokio::sync::Notify,
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
    /// Function libraries (changed only on the script thread, read by FUNCTION STATS and
    /// snapshots beside it).
    pub functions: Mutex<super::registry::Registry>,
    /// While a library loads: when its FUNCTION LOAD times out (ms since `epoch`; 0: never).
    pub(super) load_deadline: AtomicU64,
    /// What runs now, for FUNCTION STATS and for which KILL may stop it.
    pub(super) current: Mutex<Option<Current>>,
    /// Scripts (by SHA, or function name) that reached an undeclared key of a node they did not
    /// hold: their later runs here hold every node first (`reach.rs`). Bounded by [`REACHING_MAX`].
    pub(super) reaching: Mutex<std::collections::HashSet<String>>,
    /// Scripts that have had their first run here (or been sent to the first node for it).
    pub(super) vetted: Mutex<std::collections::HashSet<String>>,
    /// Scripts run here holding other nodes.
    pub(super) spread_runs: AtomicU64,
    /// Mid-run reaches refused after the script wrote (the call failed).
    pub reach_refused: AtomicU64,
    /// The running script has written and waits for another node (`reach.rs`): a hold or a
    /// prepare waiting for this node's gate gives up at once rather than wait in a circle with it.
    pub waiting_after_write: AtomicBool,
}

/// At most this many scripts are remembered as reaching, or as run (past it, a set starts over).
pub const REACHING_MAX: usize = 4096;

/// The script or function running now.
#[derive(Debug, Clone)]
pub struct Current {
    /// A library function (FCALL), not an EVAL script.
    pub function: bool,
    pub name: String,
    pub command: Vec<Bytes>,
}

/// [`Current`] with how long it has run.
pub struct Running {
    pub function: bool,
    pub name: String,
    pub command: Vec<Bytes>,
    pub duration_ms: u64,
}

impl Shared {
    pub(super) fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    pub(super) fn set_load_deadline(&self, timeout_ms: u64) {
        let at = if timeout_ms == 0 { 0 } else { self.now() + timeout_ms };
        self.load_deadline.store(at, Ordering::Relaxed);
    }

    /// A library's load has run past FUNCTION LOAD's timeout (the VM's hook asks).
    pub(super) fn loading_past_deadline(&self) -> bool {
        let at = self.load_deadline.load(Ordering::Relaxed);
        at != 0 && self.now() > at
    }

    /// The script or function running now, if one is.
    pub fn running(&self) -> Option<Running> {
        let since = self.running_since.load(Ordering::Acquire);
        let current = self.current.lock().clone()?;
        (since != 0).then(|| Running {
            function: current.function,
            name: current.name,
            command: current.command,
            duration_ms: self.now().saturating_sub(since - 1),
        })
    }
}
