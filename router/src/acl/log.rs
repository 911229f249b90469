//! ACL LOG: the latest refusals (commands, keys, channels, failed AUTH), newest first, grouped
//! as Redis groups them (the same reason, context, object and user within a minute count as one
//! entry).

use std::collections::VecDeque;

/// Redis's `acl-log-max-len` default.
pub const MAX_ENTRIES: usize = 128;
/// Redis's `ACL_LOG_GROUPING_MAX_TIME_DELTA`.
const GROUPING_MS: u64 = 60_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub count: u64,
    /// `command`, `key`, `channel` or `auth`.
    pub reason: &'static str,
    /// `toplevel`, `multi` or `lua`.
    pub context: &'static str,
    /// The command, key or channel refused (the command's name for `auth`).
    pub object: String,
    pub username: String,
    /// When the entry was created or last grouped (Unix ms).
    pub at_ms: u64,
    /// CLIENT INFO of the client, at the latest refusal.
    pub client_info: String,
}

#[derive(Debug, Default)]
pub struct AclLog {
    entries: VecDeque<Entry>,
}

impl AclLog {
    /// Records a refusal at `now_ms`.
    pub fn add(&mut self, entry: Entry, now_ms: u64) {
        self.add_times(entry, 1, now_ms);
    }

    /// Records `times` refusals alike at `now_ms` (a script's calls, reported together by the
    /// node), as `times` calls of [`AclLog::add`] would.
    pub fn add_times(&mut self, mut entry: Entry, times: u64, now_ms: u64) {
        if times == 0 {
            return;
        }
        entry.at_ms = now_ms;
        let same = self.entries.iter().position(|e| {
            e.reason == entry.reason
                && e.context == entry.context
                && e.object == entry.object
                && e.username == entry.username
                && now_ms.saturating_sub(e.at_ms) < GROUPING_MS
        });
        if let Some(i) = same {
            let mut e = self.entries.remove(i).expect("found above");
            e.count += times;
            e.at_ms = now_ms;
            e.client_info = entry.client_info;
            self.entries.push_front(e);
            return;
        }
        entry.count = times;
        self.entries.push_front(entry);
        self.entries.truncate(MAX_ENTRIES);
    }

    /// The newest `n` entries.
    pub fn latest(&self, n: usize) -> Vec<Entry> {
        self.entries.iter().take(n).cloned().collect()
    }

    pub fn reset(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(object: &str) -> Entry {
        Entry {
            count: 0,
            reason: "command",
            context: "toplevel",
            object: object.into(),
            username: "u".into(),
            at_ms: 0,
            client_info: "id=1".into(),
        }
    }

    #[test]
    fn groups_within_a_minute_newest_first() {
        let mut log = AclLog::default();
        log.add(entry("get"), 1000);
        log.add(entry("set"), 2000);
        log.add(entry("get"), 3000);
        let l = log.latest(10);
        assert_eq!((l[0].object.as_str(), l[0].count, l[0].at_ms), ("get", 2, 3000));
        assert_eq!((l[1].object.as_str(), l[1].count), ("set", 1));
        log.add(entry("get"), 3000 + GROUPING_MS);
        assert_eq!(log.latest(10).len(), 3, "a minute later: a new entry");
        assert_eq!(log.latest(1).len(), 1);
        for i in 0..200 {
            log.add(entry(&i.to_string()), 100_000);
        }
        assert_eq!(log.latest(1000).len(), MAX_ENTRIES);
        log.reset();
        assert!(log.latest(10).is_empty());
        log.add_times(entry("set"), 3, 1000);
        log.add_times(entry("set"), 2, 2000);
        log.add_times(entry("get"), 0, 2000);
        let l = log.latest(10);
        assert_eq!(l.len(), 1, "nothing for zero times");
        assert_eq!((l[0].count, l[0].at_ms), (5, 2000));
    }
}
