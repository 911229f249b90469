//! Busy scripts: when a script has held this node past `busy-reply-threshold` (running here, or
//! on another node that holds this one for it), the node's other ops are answered BUSY
//! ([`Scripts::busy`], [`Scripts::busy_text`]), and every router hears of it
//! ([`Scripts::busy_changes`] feeds `Delivery.busy` on the pub/sub streams), so that a router run
//! with `--busy-reply-scope cluster` answers BUSY to every command, as one Redis would.

use std::sync::atomic::Ordering;

use super::runner::Scripts;
use super::shared::{BUSY, BUSY_FUNCTION, Shared};

/// How often [`Scripts::busy_changes`] looks whether a busy script has ended.
pub const BUSY_POLL: std::time::Duration = std::time::Duration::from_millis(5);

/// This node is held for a script of another node while it lives ([`Scripts::held_for_script`]).
#[derive(Debug)]
pub struct HeldForScript<'a>(&'a Shared);

impl Drop for HeldForScript<'_> {
    fn drop(&mut self) {
        self.0.held_since.store(0, Ordering::Release);
    }
}

/// What [`Scripts::busy_changes`] tells: whether a script here is past busy-reply-threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusyNow {
    No,
    Script,
    Function,
}

impl Scripts {
    /// A script has held the store past `busy-reply-threshold`, running here or on another node
    /// that holds this one ([`Scripts::held_for_script`]): other ops are answered BUSY.
    pub fn busy(&self) -> bool {
        let threshold = self.shared.busy_ms.load(Ordering::Relaxed);
        let past = |since: u64| since != 0 && self.shared.now() >= since - 1 + threshold;
        past(self.shared.running_since.load(Ordering::Acquire))
            || past(self.shared.held_since.load(Ordering::Acquire))
    }

    /// Marks this node held for a script that runs on another node (`held.rs`), until the mark
    /// is dropped: past busy-reply-threshold the ops waiting here are answered BUSY, as Redis
    /// answers every other client while a script runs, rather than wait for as long as it runs.
    pub fn held_for_script(&self, function: bool) -> HeldForScript<'_> {
        self.shared.held_function.store(function, Ordering::Relaxed);
        self.shared.held_since.store(self.shared.now() + 1, Ordering::Release);
        HeldForScript(&self.shared)
    }

    /// Calls `tell` with what a router should know of busy scripts here, at every change:
    /// [`BusyNow::Script`] or [`BusyNow::Function`] once the running one passes
    /// busy-reply-threshold, [`BusyNow::No`] once it ends. Runs until `stop` resolves. Asleep
    /// while no script runs; while one runs, it wakes at its threshold (again when a later
    /// script started meanwhile), and polls every [`BUSY_POLL`] only while one is busy.
    pub async fn busy_changes(
        &self,
        mut tell: impl FnMut(BusyNow),
        stop: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = self.shared.started.notified() => {}
                _ = &mut stop => return,
            }
            loop {
                let since = self.shared.running_since.load(Ordering::Acquire);
                if since == 0 {
                    break;
                }
                let at = since - 1 + self.shared.busy_ms.load(Ordering::Relaxed);
                let now = self.shared.now();
                if now < at {
                    // Capped, so that a threshold lowered by CONFIG SET meanwhile holds soon.
                    let wait = std::time::Duration::from_millis((at - now).min(100));
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => continue,
                        _ = &mut stop => return,
                    }
                }
                tell(if self.busy_function() { BusyNow::Function } else { BusyNow::Script });
                while self.busy() {
                    tokio::select! {
                        _ = tokio::time::sleep(BUSY_POLL) => {}
                        _ = &mut stop => return,
                    }
                }
                tell(BusyNow::No);
            }
        }
    }

    /// What a BUSY reply says to call: FUNCTION KILL while a library function runs (here, or on
    /// the node that holds this one).
    pub fn busy_text(&self) -> &'static str {
        if self.busy_function() { BUSY_FUNCTION } else { BUSY }
    }

    /// Whether what holds this node is a library function (running here, or on the node that
    /// holds this one) rather than an EVAL script.
    fn busy_function(&self) -> bool {
        match self.shared.running() {
            Some(r) => r.function,
            None => self.shared.held_function.load(Ordering::Relaxed),
        }
    }
}
