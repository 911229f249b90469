//! Stage 4, recording: what an answered request leaves in the router's numbers: the command
//! latency histogram (`/metrics`), INFO commandstats and latencystats (calls, time, failures per
//! command), the slow log, and the hot-key sketch (`SHOAL HOTKEYS`). Per-slot traffic (`SHOAL
//! SLOT-STATS`) is counted where ops reach a node (the backend), client tracking and keyspace
//! notifications before a command runs ([`crate::cmd::prepare`]).

use std::time::Instant;

use bytes::Bytes;

use crate::cmd::{self, CommandSpec};
use crate::hotkeys::HotKeys;
use crate::session::Session;
use crate::state::RouterState;

/// What the command stats need of an answered request: when it was taken up, its command, and
/// whether it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub started: Instant,
    pub slot: Option<usize>,
    pub failed: bool,
}

impl Timing {
    #[inline]
    pub fn record(self, state: &RouterState, now: Instant) {
        self.record_n(state, now, 1);
    }

    /// `n` requests of this timing, recorded at the cost of one.
    #[inline]
    pub fn record_n(self, state: &RouterState, now: Instant, n: u64) {
        let took = now.saturating_duration_since(self.started);
        state.metrics.command_seconds.observe_n(took.as_secs_f64(), n);
        if let Some(slot) = self.slot {
            state.stats.record_n(slot, took, self.failed, n);
            state.latency.command(took, || is_fast(slot), || state.clock.now_ms());
        }
    }
}

/// INFO errorstats: a reply's error code, counted; and for EXEC, the codes of its commands'
/// error replies (as Redis counts each command's error). Whether the reply is an error (the
/// command failed).
#[inline]
pub fn count_errors(state: &RouterState, slot: Option<usize>, reply: &crate::resp::Reply) -> bool {
    if let Some(code) = reply.error_code() {
        state.stats.count_error(code);
        return true;
    }
    if let crate::resp::Reply::Array(items) = reply
        && slot.and_then(cmd::registry::spec_at).is_some_and(|spec| spec.name() == "exec")
    {
        for code in items.iter().filter_map(|r| r.error_code()) {
            state.stats.count_error(code);
        }
    }
    false
}

/// Whether Redis flags the command in stats slot `slot` `fast` (the latency monitor's
/// "fast-command" event rather than "command").
fn is_fast(slot: usize) -> bool {
    use shoal_wire::acl::commands::flag;
    cmd::registry::spec_at(slot).is_some_and(|s| s.decl.flags & flag::FAST != 0)
}

/// A request answered now, with its arguments at hand (RESP, HTTP): timed, counted, and written
/// to the slow log if it took long enough.
pub fn answered(state: &RouterState, session: &Session, timing: Timing, args: &[Bytes]) {
    let now = Instant::now();
    timing.record(state, now);
    slow_log(state, session, timing, now, args);
    if state.pubsub.monitoring() {
        monitor(state, session, timing, args);
    }
}

/// [`answered`] for a request whose reply came at `now` with others' (a lane's, or a round's
/// replies ready together): its counters join `runs`, its slow log entry is written now.
#[inline]
pub fn answered_in(
    runs: &mut Runs,
    state: &RouterState,
    session: &Session,
    t: Timing,
    now: Instant,
    args: &[Bytes],
) {
    runs.add(state, now, t);
    slow_log(state, session, t, now, args);
    if state.pubsub.monitoring() {
        monitor(state, session, t, args);
    }
}

/// MONITOR's line for an answered command: not for commands Redis keeps from monitors (admin
/// commands such as CONFIG and CLIENT LIST, and those flagged `skip_monitor`) nor for unknown
/// ones.
#[cold]
fn monitor(state: &RouterState, session: &Session, timing: Timing, args: &[Bytes]) {
    use shoal_wire::acl::commands::flag;
    let Some(spec) = timing.slot.and_then(cmd::registry::spec_at) else { return };
    if spec.decl.flags & (flag::ADMIN | flag::SKIP_MONITOR) != 0 || args.is_empty() {
        return;
    }
    let micros =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_micros();
    let client = &session.client;
    let who = if client.unix { format!("unix:{}", client.local) } else { client.peer.clone() };
    state.pubsub.monitor_line(crate::monitor::line(micros, &who, args));
}

fn slow_log(state: &RouterState, session: &Session, timing: Timing, now: Instant, args: &[Bytes]) {
    if timing.slot.is_some() {
        let took = now.saturating_duration_since(timing.started);
        state.stats.maybe_log(took, args, || {
            let name = session.name().map(|n| String::from_utf8_lossy(&n).into_owned());
            (state.clock.now_ms() / 1000, session.peer.to_string(), name.unwrap_or_default())
        });
    }
}

/// Requests answered while a read buffer is taken up (near-cache hits, refusals, replies ready
/// at once), timed together by one clock read before the connection next writes or waits: a
/// clock read per request was 5% of a near-cache hit's cost. Their time then runs until their
/// replies go out. Requests of one buffer were taken up at one time, so a run of the same
/// command's answers is one timing with a count: recorded once, not once per request (the
/// stats' atomic adds per hit were another 5%).
#[derive(Debug, Default)]
pub struct Untimed(Vec<(Timing, u64)>);

impl Untimed {
    #[inline]
    pub fn push(&mut self, timing: Timing) {
        match self.0.last_mut() {
            Some((last, n)) if *last == timing => *n += 1,
            _ => self.0.push((timing, 1)),
        }
    }

    pub fn settle(&mut self, state: &RouterState) {
        if self.0.is_empty() {
            return;
        }
        let now = Instant::now();
        for (timing, n) in self.0.drain(..) {
            timing.record_n(state, now, n);
        }
    }
}

/// Answers of one finished job recorded as runs: consecutive answers with the same timing (a
/// lane's requests were taken up together, so a pipelined run of one command shares its start,
/// command and outcome) cost one recording, not one each (six atomic adds per recording were
/// about 5% of a fast-path request).
/// A run is answers of the same timing answered at the same instant.
#[derive(Debug, Default)]
pub struct Runs(Option<(Timing, Instant, u64)>);

impl Runs {
    #[inline]
    pub fn add(&mut self, state: &RouterState, now: Instant, timing: Timing) {
        match &mut self.0 {
            Some((last, at, n)) if *last == timing && *at == now => *n += 1,
            run => {
                if let Some((last, at, n)) = run.replace((timing, now, 1)) {
                    last.record_n(state, at, n);
                }
            }
        }
    }

    /// Records the run in progress.
    #[inline]
    pub fn end(&mut self, state: &RouterState) {
        if let Some((last, at, n)) = self.0.take() {
            last.record_n(state, at, n);
        }
    }
}

/// Whether the hot-key sketch counts this session's requests (it is on, and the client signed
/// in). Off (the default), hot keys cost this one check.
#[inline]
pub fn counts_hot_keys(state: &RouterState, session: &Session) -> bool {
    state.hotkeys.enabled() && session.authenticated
}

/// A command's keys as its spec declares them ([`cmd::spec_keys`]), with its request and reply
/// bytes split evenly over them.
pub fn hot_command(hotkeys: &HotKeys, spec: &CommandSpec, args: &[Bytes], reply_bytes: usize) {
    let keys = cmd::spec_keys(spec, args);
    let n = keys.len();
    if n == 0 {
        return;
    }
    let request: usize = args.iter().map(|a| a.len()).sum();
    let share = ((request + reply_bytes) / n) as u64;
    for key in keys {
        hotkeys.record(key, share);
    }
}

/// One use of one key, with its request and reply bytes.
pub fn hot_key(state: &RouterState, key: &[u8], bytes: usize) {
    state.hotkeys.record(key, bytes as u64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hotkeys::By;

    #[test]
    fn command_keys_follow_the_spec() {
        let h = HotKeys::new(64);
        let args = |a: &[&str]| a.iter().map(|s| Bytes::from(s.to_string())).collect::<Vec<_>>();
        let mset = crate::cmd::lookup(b"mset").unwrap();
        // 4 + 1 + 2 + 1 + 2 = 10 request bytes, 5 reply bytes: 7 per key (rounded down).
        hot_command(&h, mset, &args(&["MSET", "a", "vv", "b", "ww"]), 5);
        let get = crate::cmd::lookup(b"get").unwrap();
        hot_command(&h, get, &args(&["GET", "a"]), 0);
        hot_command(&h, get, &args(&["GET"]), 0);
        let ping = crate::cmd::lookup(b"ping").unwrap();
        hot_command(&h, ping, &args(&["PING", "x"]), 7);
        let ops = h.top(By::Ops, 10);
        let got: Vec<(&[u8], u64)> = ops.iter().map(|k| (&k.key[..], k.count)).collect();
        assert_eq!(got, vec![(&b"a"[..], 2), (&b"b"[..], 1)]);
        let bytes = h.top(By::Bytes, 10);
        assert_eq!((&bytes[0].key[..], bytes[0].count), (&b"a"[..], 7 + 4));
    }
}
