//! Where the store's events leave it: keyspace notifications (Redis's `notify-keyspace-events`)
//! and the node's pub/sub, through one [`Sink`] the node installs (its pub/sub registry,
//! `node/src/pubsub`). The store keeps no pub/sub state; it only knows which notification
//! classes are on and whom to hand a message to.
//!
//! Expiry and eviction happen inside the store (a shard notices them), so the shards raise
//! `expired` and `evicted` here themselves; every other event belongs to a command and is raised
//! by the node's notifier (`node/src/notify.rs`) after the command ran. Off, each check costs one
//! relaxed atomic load.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use shoal_wire::notify::{KEYEVENT, KEYSPACE};

/// Receives what the store publishes (the node's pub/sub registry).
pub trait Sink: Send + Sync + std::fmt::Debug {
    /// Delivers `message` to the subscribers of `channel` (and of the patterns matching it; a
    /// shard channel's with `sharded`); returns how many clients received it, Redis's count.
    fn publish(&self, channel: &[u8], message: &[u8], sharded: bool) -> u64;
    /// Whether some router's client monitors (MONITOR): a script's calls are then shown.
    fn monitored(&self) -> bool {
        false
    }
    /// MONITOR lines (a script's calls), for every monitoring router.
    fn monitor_lines(&self, _lines: Vec<bytes::Bytes>) {}
}

/// The notification classes in force and the sink messages go to.
#[derive(Debug, Default)]
pub struct Events {
    /// `shoal_wire::notify` flags; 0 when notifications are off.
    flags: AtomicU32,
    sink: OnceLock<Arc<dyn Sink>>,
    /// What replicas follow: every change, after it is applied (the shards record their
    /// expiries and evictions here, the ops layer everything else).
    pub changes: super::changes::ChangeLog,
}

impl Events {
    /// MONITOR lines (a script's calls) to the sink, for the monitoring routers.
    pub fn monitor_lines(&self, lines: Vec<bytes::Bytes>) {
        if let (false, Some(sink)) = (lines.is_empty(), self.sink.get()) {
            sink.monitor_lines(lines);
        }
    }

    /// Installs the sink (once: a node has one registry for its life).
    pub fn set_sink(&self, sink: Arc<dyn Sink>) {
        let _ = self.sink.set(sink);
    }

    pub fn sink(&self) -> Option<&Arc<dyn Sink>> {
        self.sink.get()
    }

    pub fn flags(&self) -> u32 {
        self.flags.load(Ordering::Relaxed)
    }

    pub fn set_flags(&self, flags: u32) {
        self.flags.store(flags, Ordering::Relaxed);
    }

    /// Whether events can be published at all (`K` or `E` is on; classes without a target
    /// publish nothing): off, the notifier does no work.
    #[inline]
    pub fn publishing(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & (KEYSPACE | KEYEVENT) != 0
    }

    /// Whether events of `class` are published at all (one relaxed load: the cost of every
    /// check while notifications are off).
    #[inline]
    pub fn wants(&self, class: u32) -> bool {
        let flags = self.flags.load(Ordering::Relaxed);
        flags & class != 0 && flags & (KEYSPACE | KEYEVENT) != 0
    }

    /// Raises `event` of `class` on `key`: `__keyspace@0__:<key>` gets the event name,
    /// `__keyevent@0__:<event>` gets the key, each if its flag is on (Redis's
    /// `notifyKeyspaceEvent`, database 0).
    #[inline]
    pub fn emit(&self, class: u32, event: &str, key: &[u8]) {
        if self.wants(class) {
            self.emit_slow(event, key);
        }
    }

    #[cold]
    fn emit_slow(&self, event: &str, key: &[u8]) {
        let Some(sink) = self.sink.get() else { return };
        let flags = self.flags.load(Ordering::Relaxed);
        if flags & KEYSPACE != 0 {
            let mut channel = Vec::with_capacity(15 + key.len());
            channel.extend_from_slice(b"__keyspace@0__:");
            channel.extend_from_slice(key);
            sink.publish(&channel, event.as_bytes(), false);
        }
        if flags & KEYEVENT != 0 {
            let channel = format!("__keyevent@0__:{event}");
            sink.publish(channel.as_bytes(), key, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;
    use shoal_wire::notify;

    use super::*;

    #[derive(Debug, Default)]
    struct Recorder(Mutex<Vec<(String, String)>>);

    impl Sink for Recorder {
        fn publish(&self, channel: &[u8], message: &[u8], _sharded: bool) -> u64 {
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            self.0.lock().push((text(channel), text(message)));
            1
        }
    }

    #[test]
    fn classes_and_targets_follow_the_flags() {
        let events = Events::default();
        let rec = Arc::new(Recorder::default());
        events.set_sink(rec.clone());
        events.emit(notify::GENERIC, "del", b"k");
        assert!(rec.0.lock().is_empty(), "off by default");
        events.set_flags(notify::parse(b"g").unwrap());
        events.emit(notify::GENERIC, "del", b"k");
        assert!(rec.0.lock().is_empty(), "a class without K or E publishes nothing");
        events.set_flags(notify::parse(b"KEg").unwrap());
        events.emit(notify::STRING, "set", b"k");
        events.emit(notify::GENERIC, "del", b"k");
        assert_eq!(
            *rec.0.lock(),
            [
                ("__keyspace@0__:k".to_string(), "del".to_string()),
                ("__keyevent@0__:del".to_string(), "k".to_string())
            ]
        );
    }
}
