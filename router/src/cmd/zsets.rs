//! Sorted-set commands. The node runs them (`node/src/commands/zset.rs`); these are their specs,
//! as redis-server 7.0 declares them.

use super::spec::*;
use super::typed::{read_key, write_key};

pub const ZADD: CommandSpec = CommandSpec {
    name: "zadd",
    arity: -4,
    flags: &["write", "denyoom", "fast"],
    keys: KeySpec::ONE,
    acl: &["@write", "@sortedset", "@fast"],
    group: "sorted-set",
    since: "1.2.0",
    summary: "Add one or more members to a sorted set, or update its score if it already exists",
    complexity: "O(log(N)) for each item added, where N is the number of elements in the sorted set.",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const ZINCRBY: CommandSpec = CommandSpec {
    name: "zincrby",
    arity: 4,
    flags: &["write", "denyoom", "fast"],
    keys: KeySpec::ONE,
    acl: &["@write", "@sortedset", "@fast"],
    group: "sorted-set",
    since: "1.2.0",
    summary: "Increment the score of a member in a sorted set",
    complexity: "O(log(N)) where N is the number of elements in the sorted set.",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const ZREM: CommandSpec = CommandSpec {
    name: "zrem",
    arity: -3,
    flags: &["write", "fast"],
    keys: KeySpec::ONE,
    acl: &["@write", "@sortedset", "@fast"],
    group: "sorted-set",
    since: "1.2.0",
    summary: "Remove one or more members from a sorted set",
    complexity: "O(M*log(N)) with N being the number of elements in the sorted set and M the number of elements to be removed.",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const ZSCORE: CommandSpec = CommandSpec {
    name: "zscore",
    arity: 3,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: &["@read", "@sortedset", "@fast"],
    group: "sorted-set",
    since: "1.2.0",
    summary: "Get the score associated with the given member in a sorted set",
    complexity: "O(1)",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const ZMSCORE: CommandSpec = CommandSpec {
    name: "zmscore",
    arity: -3,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: &["@read", "@sortedset", "@fast"],
    group: "sorted-set",
    since: "6.2.0",
    summary: "Get the score associated with the given members in a sorted set",
    complexity: "O(N) where N is the number of members being requested.",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const ZCARD: CommandSpec = CommandSpec {
    name: "zcard",
    arity: 2,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: &["@read", "@sortedset", "@fast"],
    group: "sorted-set",
    since: "1.2.0",
    summary: "Get the number of members in a sorted set",
    complexity: "O(1)",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const ZCOUNT: CommandSpec = CommandSpec {
    name: "zcount",
    arity: 4,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: &["@read", "@sortedset", "@fast"],
    group: "sorted-set",
    since: "2.0.0",
    summary: "Count the members in a sorted set with scores within the given values",
    complexity: "O(log(N)) with N being the number of elements in the sorted set.",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const ZLEXCOUNT: CommandSpec = CommandSpec {
    name: "zlexcount",
    arity: 4,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: &["@read", "@sortedset", "@fast"],
    group: "sorted-set",
    since: "2.8.9",
    summary: "Count the number of members in a sorted set between a given lexicographical range",
    complexity: "O(log(N)) with N being the number of elements in the sorted set.",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const ZRANGE: CommandSpec = CommandSpec {
    name: "zrange",
    arity: -4,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@sortedset", "@slow"],
    group: "sorted-set",
    since: "1.2.0",
    summary: "Return a range of members in a sorted set",
    complexity: "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements returned.",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const ZRANGEBYSCORE: CommandSpec = CommandSpec {
    name: "zrangebyscore",
    arity: -4,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@sortedset", "@slow"],
    group: "sorted-set",
    since: "1.0.5",
    summary: "Return a range of members in a sorted set, by score",
    complexity: "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements being returned. If M is constant (e.g. always asking for the first 10 elements with LIMIT), you can consider it O(log(N)).",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const ZREVRANGEBYSCORE: CommandSpec = CommandSpec {
    name: "zrevrangebyscore",
    arity: -4,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@sortedset", "@slow"],
    group: "sorted-set",
    since: "2.2.0",
    summary: "Return a range of members in a sorted set, by score, with scores ordered from high to low",
    complexity: "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements being returned. If M is constant (e.g. always asking for the first 10 elements with LIMIT), you can consider it O(log(N)).",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const ZRANGEBYLEX: CommandSpec = CommandSpec {
    name: "zrangebylex",
    arity: -4,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@sortedset", "@slow"],
    group: "sorted-set",
    since: "2.8.9",
    summary: "Return a range of members in a sorted set, by lexicographical range",
    complexity: "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements being returned. If M is constant (e.g. always asking for the first 10 elements with LIMIT), you can consider it O(log(N)).",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const ZREVRANGEBYLEX: CommandSpec = CommandSpec {
    name: "zrevrangebylex",
    arity: -4,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@sortedset", "@slow"],
    group: "sorted-set",
    since: "2.8.9",
    summary: "Return a range of members in a sorted set, by lexicographical range, ordered from higher to lower strings.",
    complexity: "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements being returned. If M is constant (e.g. always asking for the first 10 elements with LIMIT), you can consider it O(log(N)).",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const ZREVRANGE: CommandSpec = CommandSpec {
    name: "zrevrange",
    arity: -4,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@sortedset", "@slow"],
    group: "sorted-set",
    since: "1.2.0",
    summary: "Return a range of members in a sorted set, by index, with scores ordered from high to low",
    complexity: "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements returned.",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const ZRANK: CommandSpec = CommandSpec {
    name: "zrank",
    arity: 3,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: &["@read", "@sortedset", "@fast"],
    group: "sorted-set",
    since: "2.0.0",
    summary: "Determine the index of a member in a sorted set",
    complexity: "O(log(N))",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const ZREVRANK: CommandSpec = CommandSpec {
    name: "zrevrank",
    arity: 3,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: &["@read", "@sortedset", "@fast"],
    group: "sorted-set",
    since: "2.0.0",
    summary: "Determine the index of a member in a sorted set, with scores ordered from high to low",
    complexity: "O(log(N))",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const ZPOPMIN: CommandSpec = CommandSpec {
    name: "zpopmin",
    arity: -2,
    flags: &["write", "fast"],
    keys: KeySpec::ONE,
    acl: &["@write", "@sortedset", "@fast"],
    group: "sorted-set",
    since: "5.0.0",
    summary: "Remove and return members with the lowest scores in a sorted set",
    complexity: "O(log(N)*M) with N being the number of elements in the sorted set, and M being the number of elements popped.",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const ZPOPMAX: CommandSpec = CommandSpec {
    name: "zpopmax",
    arity: -2,
    flags: &["write", "fast"],
    keys: KeySpec::ONE,
    acl: &["@write", "@sortedset", "@fast"],
    group: "sorted-set",
    since: "5.0.0",
    summary: "Remove and return members with the highest scores in a sorted set",
    complexity: "O(log(N)*M) with N being the number of elements in the sorted set, and M being the number of elements popped.",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const ZRANDMEMBER: CommandSpec = CommandSpec {
    name: "zrandmember",
    arity: -2,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@sortedset", "@slow"],
    group: "sorted-set",
    since: "6.2.0",
    summary: "Get one or multiple random elements from a sorted set",
    complexity: "O(N) where N is the number of elements returned",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const ZREMRANGEBYRANK: CommandSpec = CommandSpec {
    name: "zremrangebyrank",
    arity: 4,
    flags: &["write"],
    keys: KeySpec::ONE,
    acl: &["@write", "@sortedset", "@slow"],
    group: "sorted-set",
    since: "2.0.0",
    summary: "Remove all members in a sorted set within the given indexes",
    complexity: "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements removed by the operation.",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const ZREMRANGEBYSCORE: CommandSpec = CommandSpec {
    name: "zremrangebyscore",
    arity: 4,
    flags: &["write"],
    keys: KeySpec::ONE,
    acl: &["@write", "@sortedset", "@slow"],
    group: "sorted-set",
    since: "1.2.0",
    summary: "Remove all members in a sorted set within the given scores",
    complexity: "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements removed by the operation.",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const ZREMRANGEBYLEX: CommandSpec = CommandSpec {
    name: "zremrangebylex",
    arity: 4,
    flags: &["write"],
    keys: KeySpec::ONE,
    acl: &["@write", "@sortedset", "@slow"],
    group: "sorted-set",
    since: "2.8.9",
    summary: "Remove all members in a sorted set between the given lexicographical range",
    complexity: "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements removed by the operation.",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const ZSCAN: CommandSpec = CommandSpec {
    name: "zscan",
    arity: -3,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@sortedset", "@slow"],
    group: "sorted-set",
    since: "2.8.0",
    summary: "Incrementally iterate sorted sets elements and associated scores",
    complexity: "O(1) for every call. O(N) for a complete iteration, including enough command calls for the cursor to return back to 0. N is the number of elements inside the collection..",
    run: read_key,
    ..CommandSpec::DEFAULT
};
