//! The node settings that Redis's CONFIG SET changes and a node also takes at start (its flags):
//! their names (with Redis's old `ziplist` aliases), the syntax of a value, and Redis 7.0's ranges
//! and error texts. One table so that a router's CONFIG SET, the node's `Configure` call and the
//! node's flags accept exactly the same values.

use crate::num::{parse_i64, parse_redis_memory};
use crate::proto::NodeSettings;

/// The eviction policies a node offers, by Redis's names.
pub const POLICIES: [&str; 8] = [
    "noeviction",
    "allkeys-lru",
    "allkeys-random",
    "volatile-lru",
    "volatile-random",
    "volatile-ttl",
    "allkeys-lfu",
    "volatile-lfu",
];

/// Redis's texts (after "CONFIG SET failed (possibly related to argument '...') - ").
pub const NOT_INTEGER: &str = "argument couldn't be parsed into an integer";
pub const NOT_MEMORY: &str = "argument must be a memory value";
pub const NOT_NON_NEGATIVE: &str = "argument must be between 0 and 9223372036854775807 inclusive";
pub const NOT_INT32: &str = "argument must be between -2147483648 and 2147483647 inclusive";
pub const NOT_YES_NO: &str = "argument must be 'yes' or 'no'";
pub const NOT_POLICY: &str = "argument(s) must be one of the following: volatile-lru, volatile-lfu, \
    volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, noeviction";
pub const NOT_NON_NEGATIVE_INT32: &str = "argument must be between 0 and 2147483647 inclusive";

/// A node setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Maxmemory,
    MaxmemoryPolicy,
    HashMaxListpackEntries,
    HashMaxListpackValue,
    SetMaxIntsetEntries,
    ZsetMaxListpackEntries,
    ZsetMaxListpackValue,
    ListMaxListpackSize,
    StreamNodeMaxBytes,
    StreamNodeMaxEntries,
    NotifyKeyspaceEvents,
    BusyReplyThreshold,
    ClusterSlotStatsEnabled,
    LfuLogFactor,
    LfuDecayTime,
    LatencyMonitorThreshold,
}

impl Setting {
    pub const ALL: [Setting; 16] = [
        Setting::Maxmemory,
        Setting::MaxmemoryPolicy,
        Setting::HashMaxListpackEntries,
        Setting::HashMaxListpackValue,
        Setting::SetMaxIntsetEntries,
        Setting::ZsetMaxListpackEntries,
        Setting::ZsetMaxListpackValue,
        Setting::ListMaxListpackSize,
        Setting::StreamNodeMaxBytes,
        Setting::StreamNodeMaxEntries,
        Setting::NotifyKeyspaceEvents,
        Setting::BusyReplyThreshold,
        Setting::ClusterSlotStatsEnabled,
        Setting::LfuLogFactor,
        Setting::LfuDecayTime,
        Setting::LatencyMonitorThreshold,
    ];

    /// Redis's name (lower case).
    pub fn name(self) -> &'static str {
        match self {
            Setting::Maxmemory => "maxmemory",
            Setting::MaxmemoryPolicy => "maxmemory-policy",
            Setting::HashMaxListpackEntries => "hash-max-listpack-entries",
            Setting::HashMaxListpackValue => "hash-max-listpack-value",
            Setting::SetMaxIntsetEntries => "set-max-intset-entries",
            Setting::ZsetMaxListpackEntries => "zset-max-listpack-entries",
            Setting::ZsetMaxListpackValue => "zset-max-listpack-value",
            Setting::ListMaxListpackSize => "list-max-listpack-size",
            Setting::StreamNodeMaxBytes => "stream-node-max-bytes",
            Setting::StreamNodeMaxEntries => "stream-node-max-entries",
            Setting::NotifyKeyspaceEvents => "notify-keyspace-events",
            Setting::BusyReplyThreshold => "busy-reply-threshold",
            Setting::ClusterSlotStatsEnabled => "cluster-slot-stats-enabled",
            Setting::LfuLogFactor => "lfu-log-factor",
            Setting::LfuDecayTime => "lfu-decay-time",
            Setting::LatencyMonitorThreshold => "latency-monitor-threshold",
        }
    }

    /// Redis's alias from before 7.0, if it has one.
    pub fn alias(self) -> Option<&'static str> {
        Some(match self {
            Setting::HashMaxListpackEntries => "hash-max-ziplist-entries",
            Setting::HashMaxListpackValue => "hash-max-ziplist-value",
            Setting::ZsetMaxListpackEntries => "zset-max-ziplist-entries",
            Setting::ZsetMaxListpackValue => "zset-max-ziplist-value",
            Setting::ListMaxListpackSize => "list-max-ziplist-size",
            Setting::BusyReplyThreshold => "lua-time-limit",
            _ => return None,
        })
    }

    /// Parses a CONFIG SET value into its field of `into`. The error is Redis's reason text.
    pub fn parse_into(self, value: &[u8], into: &mut NodeSettings) -> Result<(), &'static str> {
        match self {
            Setting::Maxmemory => into.maxmemory = Some(parse_redis_memory(value).ok_or(NOT_MEMORY)?),
            Setting::MaxmemoryPolicy => into.maxmemory_policy = Some(parse_policy(value)?.to_string()),
            Setting::HashMaxListpackEntries => into.hash_max_listpack_entries = Some(parse_count(value)?),
            Setting::HashMaxListpackValue => into.hash_max_listpack_value = Some(parse_byte_limit(value)?),
            Setting::SetMaxIntsetEntries => into.set_max_intset_entries = Some(parse_count(value)?),
            Setting::ZsetMaxListpackEntries => into.zset_max_listpack_entries = Some(parse_count(value)?),
            Setting::ZsetMaxListpackValue => into.zset_max_listpack_value = Some(parse_byte_limit(value)?),
            Setting::ListMaxListpackSize => into.list_max_listpack_size = Some(parse_list_size(value)?),
            Setting::StreamNodeMaxBytes => into.stream_node_max_bytes = Some(parse_byte_limit(value)?),
            Setting::StreamNodeMaxEntries => into.stream_node_max_entries = Some(parse_count(value)?),
            Setting::NotifyKeyspaceEvents => {
                crate::notify::parse(value).ok_or(crate::notify::BAD_CLASS)?;
                into.notify_keyspace_events = Some(String::from_utf8_lossy(value).into_owned());
            }
            Setting::BusyReplyThreshold => into.busy_reply_threshold = Some(parse_count(value)?),
            Setting::ClusterSlotStatsEnabled => into.cluster_slot_stats_enabled = Some(parse_yes_no(value)?),
            Setting::LfuLogFactor => into.lfu_log_factor = Some(parse_int32_count(value)?),
            Setting::LfuDecayTime => into.lfu_decay_time = Some(parse_int32_count(value)?),
            Setting::LatencyMonitorThreshold => into.latency_monitor_threshold = Some(parse_count(value)?),
        }
        Ok(())
    }

    /// The value in `s` as CONFIG GET shows it (`None`: not set there).
    pub fn show(self, s: &NodeSettings) -> Option<String> {
        match self {
            Setting::Maxmemory => s.maxmemory.map(|v| v.to_string()),
            Setting::MaxmemoryPolicy => s.maxmemory_policy.clone(),
            Setting::HashMaxListpackEntries => s.hash_max_listpack_entries.map(|v| v.to_string()),
            Setting::HashMaxListpackValue => s.hash_max_listpack_value.map(|v| v.to_string()),
            Setting::SetMaxIntsetEntries => s.set_max_intset_entries.map(|v| v.to_string()),
            Setting::ZsetMaxListpackEntries => s.zset_max_listpack_entries.map(|v| v.to_string()),
            Setting::ZsetMaxListpackValue => s.zset_max_listpack_value.map(|v| v.to_string()),
            Setting::ListMaxListpackSize => s.list_max_listpack_size.map(|v| v.to_string()),
            Setting::StreamNodeMaxBytes => s.stream_node_max_bytes.map(|v| v.to_string()),
            Setting::StreamNodeMaxEntries => s.stream_node_max_entries.map(|v| v.to_string()),
            Setting::NotifyKeyspaceEvents => s.notify_keyspace_events.clone(),
            Setting::BusyReplyThreshold => s.busy_reply_threshold.map(|v| v.to_string()),
            Setting::ClusterSlotStatsEnabled => {
                s.cluster_slot_stats_enabled.map(|on| if on { "yes" } else { "no" }.to_string())
            }
            Setting::LfuLogFactor => s.lfu_log_factor.map(|v| v.to_string()),
            Setting::LfuDecayTime => s.lfu_decay_time.map(|v| v.to_string()),
            Setting::LatencyMonitorThreshold => s.latency_monitor_threshold.map(|v| v.to_string()),
        }
    }
}

/// An entry count (`hash-max-listpack-entries`, ...): an integer from 0 to `i64::MAX`.
pub fn parse_count(value: &[u8]) -> Result<u64, &'static str> {
    let n = parse_i64(value).ok_or(NOT_INTEGER)?;
    u64::try_from(n).map_err(|_| NOT_NON_NEGATIVE)
}

/// A count Redis keeps in a C `int` from 0 (`lfu-log-factor`, `lfu-decay-time`).
pub fn parse_int32_count(value: &[u8]) -> Result<u64, &'static str> {
    let n = parse_i64(value).ok_or(NOT_INTEGER)?;
    if (0..=i64::from(i32::MAX)).contains(&n) { Ok(n as u64) } else { Err(NOT_NON_NEGATIVE_INT32) }
}

/// A size limit in bytes (`hash-max-listpack-value`, ...): a memory value up to `i64::MAX`.
pub fn parse_byte_limit(value: &[u8]) -> Result<u64, &'static str> {
    let n = parse_redis_memory(value).ok_or(NOT_MEMORY)?;
    if n > i64::MAX as u64 { Err(NOT_NON_NEGATIVE) } else { Ok(n) }
}

/// `list-max-listpack-size`: any 32-bit integer (Redis's meaning: > 0 entries per chunk, -1 to -5
/// 4 to 64 KiB per chunk).
pub fn parse_list_size(value: &[u8]) -> Result<i64, &'static str> {
    let n = parse_i64(value).ok_or(NOT_INTEGER)?;
    if i32::try_from(n).is_err() { Err(NOT_INT32) } else { Ok(n) }
}

/// A boolean setting: `yes` or `no`, any case (Redis's).
pub fn parse_yes_no(value: &[u8]) -> Result<bool, &'static str> {
    if value.eq_ignore_ascii_case(b"yes") {
        Ok(true)
    } else if value.eq_ignore_ascii_case(b"no") {
        Ok(false)
    } else {
        Err(NOT_YES_NO)
    }
}

/// An eviction policy name (any case) as its lower-case name.
pub fn parse_policy(value: &[u8]) -> Result<&'static str, &'static str> {
    POLICIES.iter().find(|p| p.as_bytes().eq_ignore_ascii_case(value)).copied().ok_or(NOT_POLICY)
}

/// Checks the values a `Configure` request sets (a node's guard: routers check before sending).
/// The error names the setting and says why.
pub fn check(s: &NodeSettings) -> Result<(), String> {
    let fail = |setting: Setting, why: &str| Err(format!("{}: {why}", setting.name()));
    for (setting, v) in [
        (Setting::HashMaxListpackEntries, s.hash_max_listpack_entries),
        (Setting::HashMaxListpackValue, s.hash_max_listpack_value),
        (Setting::SetMaxIntsetEntries, s.set_max_intset_entries),
        (Setting::ZsetMaxListpackEntries, s.zset_max_listpack_entries),
        (Setting::ZsetMaxListpackValue, s.zset_max_listpack_value),
        (Setting::BusyReplyThreshold, s.busy_reply_threshold),
        (Setting::LatencyMonitorThreshold, s.latency_monitor_threshold),
    ] {
        if v.is_some_and(|v| v > i64::MAX as u64) {
            return fail(setting, NOT_NON_NEGATIVE);
        }
    }
    for (setting, v) in [(Setting::LfuLogFactor, s.lfu_log_factor), (Setting::LfuDecayTime, s.lfu_decay_time)]
    {
        if v.is_some_and(|v| v > i32::MAX as u64) {
            return fail(setting, NOT_NON_NEGATIVE_INT32);
        }
    }
    if s.list_max_listpack_size.is_some_and(|v| i32::try_from(v).is_err()) {
        return fail(Setting::ListMaxListpackSize, NOT_INT32);
    }
    if let Some(p) = &s.maxmemory_policy
        && let Err(why) = parse_policy(p.as_bytes())
    {
        return fail(Setting::MaxmemoryPolicy, why);
    }
    if s.notify_keyspace_events.as_ref().is_some_and(|v| crate::notify::parse(v.as_bytes()).is_none()) {
        return fail(Setting::NotifyKeyspaceEvents, crate::notify::BAD_CLASS);
    }
    Ok(())
}

/// Finds a setting by its name or alias (any case); returns the name as it was used, lower case.
pub fn lookup(name: &[u8]) -> Option<(&'static str, Setting)> {
    Setting::ALL.into_iter().find_map(|s| {
        [Some(s.name()), s.alias()]
            .into_iter()
            .flatten()
            .find(|n| n.as_bytes().eq_ignore_ascii_case(name))
            .map(|n| (n, s))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_texts_are_redis_7s() {
        assert_eq!(parse_count(b"0"), Ok(0));
        assert_eq!(parse_count(b"9223372036854775807"), Ok(i64::MAX as u64));
        assert_eq!(parse_count(b"-1"), Err(NOT_NON_NEGATIVE));
        assert_eq!(parse_count(b"1k"), Err(NOT_INTEGER));
        assert_eq!(parse_byte_limit(b"1kb"), Ok(1024));
        assert_eq!(parse_byte_limit(b"-1"), Err(NOT_MEMORY));
        assert_eq!(parse_byte_limit(b"8589934592gb"), Err(NOT_NON_NEGATIVE));
        assert_eq!(parse_list_size(b"-2147483648"), Ok(-2147483648));
        assert_eq!(parse_list_size(b"2147483648"), Err(NOT_INT32));
        assert_eq!(parse_policy(b"AllKeys-LRU"), Ok("allkeys-lru"));
        assert_eq!(parse_policy(b"ALLKEYS-LFU"), Ok("allkeys-lfu"));
        assert_eq!(parse_int32_count(b"2147483647"), Ok(i32::MAX as u64));
        assert_eq!(parse_int32_count(b"2147483648"), Err(NOT_NON_NEGATIVE_INT32));
        assert_eq!(parse_int32_count(b"-1"), Err(NOT_NON_NEGATIVE_INT32));
        assert_eq!(parse_policy(b"foo"), Err(NOT_POLICY));
        assert_eq!(parse_yes_no(b"YES"), Ok(true));
        assert_eq!(parse_yes_no(b"no"), Ok(false));
        assert_eq!(parse_yes_no(b"1"), Err(NOT_YES_NO));
    }

    #[test]
    fn names_aliases_and_round_trip() {
        assert_eq!(
            lookup(b"HASH-MAX-ZIPLIST-ENTRIES"),
            Some(("hash-max-ziplist-entries", Setting::HashMaxListpackEntries))
        );
        assert_eq!(
            lookup(b"list-max-listpack-size"),
            Some(("list-max-listpack-size", Setting::ListMaxListpackSize))
        );
        assert_eq!(lookup(b"nosuch"), None);
        let mut s = NodeSettings::default();
        Setting::ListMaxListpackSize.parse_into(b"-3", &mut s).unwrap();
        Setting::Maxmemory.parse_into(b"1mb", &mut s).unwrap();
        assert_eq!(Setting::ListMaxListpackSize.show(&s).as_deref(), Some("-3"));
        assert_eq!(Setting::Maxmemory.show(&s).as_deref(), Some("1048576"));
        assert_eq!(Setting::HashMaxListpackValue.show(&s), None);
        assert!(check(&s).is_ok());
        s.list_max_listpack_size = Some(1 << 40);
        assert!(check(&s).unwrap_err().starts_with("list-max-listpack-size: "));
    }
}
