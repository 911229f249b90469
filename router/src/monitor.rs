//! MONITOR: every command the cluster's routers run (and every call of a script on a node), as
//! a line to each monitoring client, in Redis's format (`+<secs>.<micros> [<db> <client>] "arg"
//! ...`, arguments escaped as `sdscatrepr` escapes them, AUTH's and HELLO AUTH's secrets
//! redacted: [`shoal_wire::monitor`]). The lines of other routers and of scripts come through
//! the nodes (`crate::pubsub::Hub::monitor_line`).
//!
//! A monitoring connection's queue is its pub/sub queue ([`Subscriber`], bounded by the
//! `client-output-buffer-limit pubsub` limits: a monitor that does not read is cut off, never
//! grown without bound). The list holds them weakly: a connection that closes or RESETs drops
//! its queue and leaves the list at the next line. With nobody monitoring, a request pays one
//! relaxed load ([`Monitors::active`]). Lines are fed when a command is answered (the record
//! stage), so a command's line follows its execution, as in Redis 7.0.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::pubsub::subscriber::{Kind, Limits, Message, Subscriber};

#[derive(Debug, Default)]
pub struct Monitors {
    /// Monitoring connections now (an upper bound: a closed one leaves at the next line).
    live: AtomicUsize,
    queues: Mutex<Vec<Weak<Subscriber>>>,
}

impl Monitors {
    /// Whether anyone monitors (the check every answered request makes).
    #[inline]
    pub fn active(&self) -> bool {
        self.live.load(Ordering::Relaxed) != 0
    }

    /// MONITOR: `queue`'s connection gets every line from now on. True if nobody monitored
    /// before (the other routers are to be told).
    pub fn add(&self, queue: &Arc<Subscriber>) -> bool {
        let mut queues = self.queues.lock();
        queues.retain(|w| w.strong_count() > 0);
        let first = queues.is_empty();
        if !queues.iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(queue))) {
            queues.push(Arc::downgrade(queue));
        }
        self.live.store(queues.len(), Ordering::Relaxed);
        first
    }

    /// Sends `lines` to every monitoring connection. True if the last one has gone (found
    /// closed now): the other routers are to be told.
    pub fn feed(&self, lines: &[Bytes], limits: &Limits) -> bool {
        let messages: Vec<Message> = lines
            .iter()
            .map(|line| Message {
                kind: Kind::Monitor,
                pattern: Bytes::new(),
                channel: Bytes::new(),
                payload: line.clone(),
            })
            .collect();
        let mut queues = self.queues.lock();
        let before = queues.len();
        queues.retain(|w| match w.upgrade() {
            Some(queue) => {
                queue.push_all(&messages, limits);
                true
            }
            None => false,
        });
        self.live.store(queues.len(), Ordering::Relaxed);
        before > 0 && queues.is_empty()
    }
}

pub use shoal_wire::monitor::line;
