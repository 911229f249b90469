//! Encoding thresholds of typed values, and what an allocation costs: what every encoding
//! (hash, set, zset, the table) sizes itself by, so it sits below them all.

/// Encoding thresholds (Redis's `*-max-listpack-*` and `set-max-intset-entries`, with Redis 7.0's
/// built-in defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub hash_max_listpack_entries: usize,
    pub hash_max_listpack_value: usize,
    pub set_max_intset_entries: usize,
    pub zset_max_listpack_entries: usize,
    pub zset_max_listpack_value: usize,
    /// Redis's `list-max-listpack-size`: a positive number caps the elements of one list chunk, a
    /// negative one (-1 to -5) its bytes (4 KiB to 64 KiB).
    pub list_max_listpack_size: i64,
    /// Redis's `stream-node-max-bytes` and `stream-node-max-entries`.
    pub stream_node: NodeLimits,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            hash_max_listpack_entries: 512,
            hash_max_listpack_value: 64,
            set_max_intset_entries: 512,
            zset_max_listpack_entries: 128,
            zset_max_listpack_value: 64,
            list_max_listpack_size: -2,
            stream_node: NodeLimits { max_bytes: 4096, max_entries: 100 },
        }
    }
}

impl Limits {
    /// Limits under which nothing stays compact (conversions).
    pub const ALWAYS_TABLE: Limits = Limits {
        hash_max_listpack_entries: 0,
        hash_max_listpack_value: 0,
        set_max_intset_entries: 0,
        zset_max_listpack_entries: 0,
        zset_max_listpack_value: 0,
        list_max_listpack_size: 1,
        stream_node: NodeLimits { max_bytes: 4096, max_entries: 100 },
    };

    /// Limits a few elements cross (fuzzing, tests): 4 entries, 8-byte strings.
    pub const TINY: Limits = Limits {
        hash_max_listpack_entries: 4,
        hash_max_listpack_value: 8,
        set_max_intset_entries: 4,
        zset_max_listpack_entries: 4,
        zset_max_listpack_value: 8,
        list_max_listpack_size: 4,
        stream_node: NodeLimits { max_bytes: 200, max_entries: 4 },
    };
}

/// Where stream nodes fill up (`stream-node-max-bytes`, `stream-node-max-entries`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeLimits {
    pub max_bytes: usize,
    pub max_entries: usize,
}

impl Default for NodeLimits {
    fn default() -> Self {
        NodeLimits { max_bytes: 4096, max_entries: 100 }
    }
}

/// What an allocation of `n` bytes costs, rounded as allocators round small sizes.
pub fn alloc_size(n: usize) -> usize {
    if n == 0 { 0 } else { n.next_multiple_of(8).max(16) }
}
