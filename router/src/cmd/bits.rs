//! Bitmap commands and the string commands LCS and SUBSTR. The node runs SETBIT GETBIT BITCOUNT
//! BITPOS BITFIELD BITFIELD_RO on their key, BITOP and LCS as commands over several keys
//! ([`super::multi`]); SUBSTR is GETRANGE under its old name. These are their specs, as
//! redis-server 7.0 declares them.

use super::spec::*;
use super::typed::{read_key, write_key};
use super::{multi, strings};

pub const SETBIT: CommandSpec = CommandSpec {
    name: "setbit",
    arity: 4,
    flags: &["write", "denyoom"],
    keys: KeySpec::ONE,
    acl: &["@write", "@bitmap", "@slow"],
    group: "bitmap",
    since: "2.2.0",
    summary: "Sets or clears the bit at offset in the string value stored at key",
    complexity: "O(1)",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const GETBIT: CommandSpec = CommandSpec {
    name: "getbit",
    arity: 3,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: &["@read", "@bitmap", "@fast"],
    group: "bitmap",
    since: "2.2.0",
    summary: "Returns the bit value at offset in the string value stored at key",
    complexity: "O(1)",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const BITCOUNT: CommandSpec = CommandSpec {
    name: "bitcount",
    arity: -2,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@bitmap", "@slow"],
    group: "bitmap",
    since: "2.6.0",
    summary: "Count set bits in a string",
    complexity: "O(N)",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const BITPOS: CommandSpec = CommandSpec {
    name: "bitpos",
    arity: -3,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@bitmap", "@slow"],
    group: "bitmap",
    since: "2.8.7",
    summary: "Find first bit set or clear in a string",
    complexity: "O(N)",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const BITOP: CommandSpec = CommandSpec {
    name: "bitop",
    arity: -4,
    flags: &["write", "denyoom"],
    keys: KeySpec { first: 2, last: -1, step: 1 },
    acl: &["@write", "@bitmap", "@slow"],
    group: "bitmap",
    since: "2.6.0",
    summary: "Perform bitwise operations between strings",
    complexity: "O(N)",
    run: multi::run,
    ..CommandSpec::DEFAULT
};

pub const BITFIELD: CommandSpec = CommandSpec {
    name: "bitfield",
    arity: -2,
    flags: &["write", "denyoom"],
    keys: KeySpec::ONE,
    acl: &["@write", "@bitmap", "@slow"],
    group: "bitmap",
    since: "3.2.0",
    summary: "Perform arbitrary bitfield integer operations on strings",
    complexity: "O(1) for each subcommand specified",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const BITFIELD_RO: CommandSpec = CommandSpec {
    name: "bitfield_ro",
    arity: -2,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: &["@read", "@bitmap", "@fast"],
    group: "bitmap",
    since: "6.0.0",
    summary: "Perform arbitrary bitfield integer operations on strings. Read-only variant of BITFIELD",
    complexity: "O(1) for each subcommand specified",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const LCS: CommandSpec = CommandSpec {
    name: "lcs",
    arity: -3,
    flags: &["readonly"],
    keys: KeySpec { first: 1, last: 2, step: 1 },
    acl: &["@read", "@string", "@slow"],
    group: "string",
    since: "7.0.0",
    summary: "Find longest common substring",
    complexity: "O(N*M) where N and M are the lengths of s1 and s2, respectively",
    run: multi::run,
    ..CommandSpec::DEFAULT
};

pub const SUBSTR: CommandSpec = CommandSpec {
    name: "substr",
    arity: 4,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@string", "@slow"],
    group: "string",
    since: "1.0.0",
    summary: "Get a substring of the string stored at a key",
    complexity: "O(N) where N is the length of the returned string. The complexity is ultimately determined by the returned length, but because creating a substring from an existing string is very cheap, it can be considered O(1) for small strings.",
    run: strings::getrange,
    ..CommandSpec::DEFAULT
};
