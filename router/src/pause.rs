//! CLIENT PAUSE for one router process: until a deadline (or CLIENT UNPAUSE), RESP connections
//! hold the commands the pause covers, without answering them an error; each resumes where it
//! stopped when the pause ends.
//!
//! Redis 7.0's rules: `ALL` holds every command that passed the name, arity and authentication
//! checks (CLIENT UNPAUSE included: another pause can only be ended by time, or from a client
//! that is not held); `WRITE` holds commands flagged `write` and those Redis marks
//! `may_replicate` (of Shoal's commands, PFCOUNT, which may rewrite its cached count). A new
//! pause while one runs keeps the later deadline and the stricter mode.
//!
//! The hot path is [`Pause::holds`]: one relaxed atomic load while no pause is set. The
//! deadline and mode sit in a watch channel, which also wakes the held connections when the
//! pause is changed or lifted; a held connection otherwise sleeps until the deadline.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;
use tokio::time::Instant;

/// What a pause needs to know of a command: whether a `WRITE` pause holds it (Redis: flagged
/// `write`, or `may_replicate`).
pub trait Pausable {
    fn held_by_write_pause(&self) -> bool;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PauseMode {
    Write,
    All,
}

impl PauseMode {
    /// Whether a pause in this mode holds `spec`.
    pub fn holds(self, spec: &impl Pausable) -> bool {
        match self {
            PauseMode::All => true,
            PauseMode::Write => spec.held_by_write_pause(),
        }
    }
}

/// The pause in force: its mode and when it ends.
pub type Paused = Option<(PauseMode, Instant)>;

#[derive(Debug)]
pub struct Pause {
    /// Set while a pause may be in force (cleared by UNPAUSE, or lazily once it has expired).
    set: AtomicBool,
    state: watch::Sender<Paused>,
}

impl Default for Pause {
    fn default() -> Self {
        Pause { set: AtomicBool::new(false), state: watch::Sender::new(None) }
    }
}

impl Pause {
    /// Whether `spec` must wait now (cheap while no pause is set).
    pub fn holds(&self, spec: &impl Pausable) -> bool {
        if !self.set.load(Ordering::Relaxed) {
            return false;
        }
        self.current().is_some_and(|(mode, _)| mode.holds(spec))
    }

    /// The pause in force, if any (an expired one is cleared).
    pub fn current(&self) -> Paused {
        let now = Instant::now();
        let mut current = None;
        self.state.send_if_modified(|state| match *state {
            Some((_, until)) if until <= now => {
                *state = None;
                self.set.store(false, Ordering::Relaxed);
                true
            }
            other => {
                current = other;
                false
            }
        });
        current
    }

    /// CLIENT PAUSE: pauses until `until` in `mode`, or, if a pause is in force, extends it to
    /// `until` and makes it `mode` if that is stricter (Redis never shortens or relaxes one).
    pub fn pause(&self, mode: PauseMode, until: Instant) {
        let now = Instant::now();
        self.state.send_modify(|state| {
            *state = match *state {
                Some((m, u)) if u > now => Some((m.max(mode), u.max(until))),
                _ => Some((mode, until)),
            };
            self.set.store(true, Ordering::Relaxed);
        });
    }

    /// CLIENT UNPAUSE.
    pub fn unpause(&self) {
        self.state.send_modify(|state| {
            *state = None;
            self.set.store(false, Ordering::Relaxed);
        });
    }

    /// Returns once the pause no longer holds `spec` (lifted, expired, or relaxed).
    pub async fn wait(&self, spec: &impl Pausable) {
        let mut changes = self.state.subscribe();
        loop {
            // Subscribed before reading: a change after this read wakes the wait below.
            let Some((mode, until)) = self.current() else { return };
            if !mode.holds(spec) {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(until) => {}
                _ = changes.changed() => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cmd::{CommandSpec, lookup};

    fn spec(name: &str) -> &'static CommandSpec {
        lookup(name.as_bytes()).unwrap()
    }

    #[test]
    fn modes_hold_what_redis_holds() {
        assert!(PauseMode::Write.holds(spec("set")));
        assert!(PauseMode::Write.holds(spec("del")));
        assert!(PauseMode::Write.holds(spec("pfcount")), "may_replicate in Redis");
        assert!(!PauseMode::Write.holds(spec("get")));
        assert!(!PauseMode::Write.holds(spec("ping")));
        assert!(PauseMode::All.holds(spec("get")));
        assert!(PauseMode::All.holds(spec("ping")));
    }

    #[test]
    fn a_pause_expires_and_extends_but_never_relaxes() {
        let p = Pause::default();
        assert!(!p.holds(spec("set")));
        let t0 = Instant::now() + Duration::from_secs(3600);
        p.pause(PauseMode::Write, t0);
        assert!(p.holds(spec("set")));
        assert!(!p.holds(spec("get")));
        p.pause(PauseMode::All, t0 - Duration::from_secs(60));
        assert_eq!(p.current(), Some((PauseMode::All, t0)), "stricter, not shorter");
        p.pause(PauseMode::Write, t0 + Duration::from_secs(60));
        assert_eq!(p.current(), Some((PauseMode::All, t0 + Duration::from_secs(60))), "longer, not laxer");
        p.unpause();
        assert!(!p.holds(spec("get")));
        assert_eq!(p.current(), None);
        // A deadline already passed (CLIENT PAUSE 0): no pause.
        p.pause(PauseMode::All, Instant::now());
        assert!(!p.holds(spec("get")));
        assert_eq!(p.current(), None);
        // An expired pause is replaced, not extended.
        p.pause(PauseMode::All, Instant::now());
        p.pause(PauseMode::Write, t0);
        assert_eq!(p.current(), Some((PauseMode::Write, t0)));
    }

    #[tokio::test]
    async fn waiters_wake_at_the_deadline_or_on_unpause() {
        let p = std::sync::Arc::new(Pause::default());
        let t0 = Instant::now();
        p.pause(PauseMode::All, t0 + Duration::from_millis(150));
        tokio::time::timeout(Duration::from_secs(5), p.wait(spec("get"))).await.unwrap();
        assert!(t0.elapsed() >= Duration::from_millis(150), "held until the deadline");
        assert_eq!(p.current(), None);

        p.pause(PauseMode::Write, Instant::now() + Duration::from_secs(3600));
        tokio::time::timeout(Duration::from_millis(100), p.wait(spec("get"))).await.expect("a read passes");
        let waiter = tokio::spawn({
            let p = p.clone();
            async move { p.wait(spec("set")).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "a write is held");
        p.unpause();
        tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("released by UNPAUSE").unwrap();
    }
}
