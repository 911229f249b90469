//! Set commands. The node runs them (`node/src/commands/set.rs`); these are their specs, as
//! redis-server 7.0 declares them.

use super::spec::*;
use super::typed::{read_key, write_key};

pub const SADD: CommandSpec = CommandSpec {
    name: "sadd",
    arity: -3,
    flags: &["write", "denyoom", "fast"],
    keys: KeySpec::ONE,
    acl: &["@write", "@set", "@fast"],
    group: "set",
    since: "1.0.0",
    summary: "Add one or more members to a set",
    complexity: "O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const SREM: CommandSpec = CommandSpec {
    name: "srem",
    arity: -3,
    flags: &["write", "fast"],
    keys: KeySpec::ONE,
    acl: &["@write", "@set", "@fast"],
    group: "set",
    since: "1.0.0",
    summary: "Remove one or more members from a set",
    complexity: "O(N) where N is the number of members to be removed.",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const SMEMBERS: CommandSpec = CommandSpec {
    name: "smembers",
    arity: 2,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@set", "@slow"],
    group: "set",
    since: "1.0.0",
    summary: "Get all the members in a set",
    complexity: "O(N) where N is the set cardinality.",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const SISMEMBER: CommandSpec = CommandSpec {
    name: "sismember",
    arity: 3,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: &["@read", "@set", "@fast"],
    group: "set",
    since: "1.0.0",
    summary: "Determine if a given value is a member of a set",
    complexity: "O(1)",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const SMISMEMBER: CommandSpec = CommandSpec {
    name: "smismember",
    arity: -3,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: &["@read", "@set", "@fast"],
    group: "set",
    since: "6.2.0",
    summary: "Returns the membership associated with the given elements for a set",
    complexity: "O(N) where N is the number of elements being checked for membership",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const SCARD: CommandSpec = CommandSpec {
    name: "scard",
    arity: 2,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: &["@read", "@set", "@fast"],
    group: "set",
    since: "1.0.0",
    summary: "Get the number of members in a set",
    complexity: "O(1)",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const SPOP: CommandSpec = CommandSpec {
    name: "spop",
    arity: -2,
    flags: &["write", "fast"],
    keys: KeySpec::ONE,
    acl: &["@write", "@set", "@fast"],
    group: "set",
    since: "1.0.0",
    summary: "Remove and return one or multiple random members from a set",
    complexity: "Without the count argument O(1), otherwise O(N) where N is the value of the passed count.",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const SRANDMEMBER: CommandSpec = CommandSpec {
    name: "srandmember",
    arity: -2,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@set", "@slow"],
    group: "set",
    since: "1.0.0",
    summary: "Get one or multiple random members from a set",
    complexity: "Without the count argument O(1), otherwise O(N) where N is the absolute value of the passed count.",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const SSCAN: CommandSpec = CommandSpec {
    name: "sscan",
    arity: -3,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@set", "@slow"],
    group: "set",
    since: "2.8.0",
    summary: "Incrementally iterate Set elements",
    complexity: "O(1) for every call. O(N) for a complete iteration, including enough command calls for the cursor to return back to 0. N is the number of elements inside the collection..",
    run: read_key,
    ..CommandSpec::DEFAULT
};
