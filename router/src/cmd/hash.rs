//! Hash commands. The node runs them (`node/src/commands/hash.rs`); these are their specs, as
//! redis-server 7.0 declares them.

use super::spec::*;
use super::typed::{read_key, write_key};

pub const HSET: CommandSpec = CommandSpec {
    name: "hset",
    arity: -4,
    flags: &["write", "denyoom", "fast"],
    keys: KeySpec::ONE,
    acl: &["@write", "@hash", "@fast"],
    group: "hash",
    since: "2.0.0",
    summary: "Set the string value of a hash field",
    complexity: "O(1) for each field/value pair added, so O(N) to add N field/value pairs when the command is called with multiple field/value pairs.",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const HSETNX: CommandSpec = CommandSpec {
    name: "hsetnx",
    arity: 4,
    flags: &["write", "denyoom", "fast"],
    keys: KeySpec::ONE,
    acl: &["@write", "@hash", "@fast"],
    group: "hash",
    since: "2.0.0",
    summary: "Set the value of a hash field, only if the field does not exist",
    complexity: "O(1)",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const HMSET: CommandSpec = CommandSpec {
    name: "hmset",
    arity: -4,
    flags: &["write", "denyoom", "fast"],
    keys: KeySpec::ONE,
    acl: &["@write", "@hash", "@fast"],
    group: "hash",
    since: "2.0.0",
    summary: "Set multiple hash fields to multiple values",
    complexity: "O(N) where N is the number of fields being set.",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const HGET: CommandSpec = CommandSpec {
    name: "hget",
    arity: 3,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: &["@read", "@hash", "@fast"],
    group: "hash",
    since: "2.0.0",
    summary: "Get the value of a hash field",
    complexity: "O(1)",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const HMGET: CommandSpec = CommandSpec {
    name: "hmget",
    arity: -3,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: &["@read", "@hash", "@fast"],
    group: "hash",
    since: "2.0.0",
    summary: "Get the values of all the given hash fields",
    complexity: "O(N) where N is the number of fields being requested.",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const HGETALL: CommandSpec = CommandSpec {
    name: "hgetall",
    arity: 2,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@hash", "@slow"],
    group: "hash",
    since: "2.0.0",
    summary: "Get all the fields and values in a hash",
    complexity: "O(N) where N is the size of the hash.",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const HDEL: CommandSpec = CommandSpec {
    name: "hdel",
    arity: -3,
    flags: &["write", "fast"],
    keys: KeySpec::ONE,
    acl: &["@write", "@hash", "@fast"],
    group: "hash",
    since: "2.0.0",
    summary: "Delete one or more hash fields",
    complexity: "O(N) where N is the number of fields to be removed.",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const HEXISTS: CommandSpec = CommandSpec {
    name: "hexists",
    arity: 3,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: &["@read", "@hash", "@fast"],
    group: "hash",
    since: "2.0.0",
    summary: "Determine if a hash field exists",
    complexity: "O(1)",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const HLEN: CommandSpec = CommandSpec {
    name: "hlen",
    arity: 2,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: &["@read", "@hash", "@fast"],
    group: "hash",
    since: "2.0.0",
    summary: "Get the number of fields in a hash",
    complexity: "O(1)",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const HSTRLEN: CommandSpec = CommandSpec {
    name: "hstrlen",
    arity: 3,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: &["@read", "@hash", "@fast"],
    group: "hash",
    since: "3.2.0",
    summary: "Get the length of the value of a hash field",
    complexity: "O(1)",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const HKEYS: CommandSpec = CommandSpec {
    name: "hkeys",
    arity: 2,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@hash", "@slow"],
    group: "hash",
    since: "2.0.0",
    summary: "Get all the fields in a hash",
    complexity: "O(N) where N is the size of the hash.",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const HVALS: CommandSpec = CommandSpec {
    name: "hvals",
    arity: 2,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@hash", "@slow"],
    group: "hash",
    since: "2.0.0",
    summary: "Get all the values in a hash",
    complexity: "O(N) where N is the size of the hash.",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const HINCRBY: CommandSpec = CommandSpec {
    name: "hincrby",
    arity: 4,
    flags: &["write", "denyoom", "fast"],
    keys: KeySpec::ONE,
    acl: &["@write", "@hash", "@fast"],
    group: "hash",
    since: "2.0.0",
    summary: "Increment the integer value of a hash field by the given number",
    complexity: "O(1)",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const HINCRBYFLOAT: CommandSpec = CommandSpec {
    name: "hincrbyfloat",
    arity: 4,
    flags: &["write", "denyoom", "fast"],
    keys: KeySpec::ONE,
    acl: &["@write", "@hash", "@fast"],
    group: "hash",
    since: "2.6.0",
    summary: "Increment the float value of a hash field by the given amount",
    complexity: "O(1)",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const HRANDFIELD: CommandSpec = CommandSpec {
    name: "hrandfield",
    arity: -2,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@hash", "@slow"],
    group: "hash",
    since: "6.2.0",
    summary: "Get one or multiple random fields from a hash",
    complexity: "O(N) where N is the number of fields returned",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const HSCAN: CommandSpec = CommandSpec {
    name: "hscan",
    arity: -3,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@hash", "@slow"],
    group: "hash",
    since: "2.8.0",
    summary: "Incrementally iterate hash fields and associated values",
    complexity: "O(1) for every call. O(N) for a complete iteration, including enough command calls for the cursor to return back to 0. N is the number of elements inside the collection..",
    run: read_key,
    ..CommandSpec::DEFAULT
};
