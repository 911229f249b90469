//! Commands newer than Redis 7.0's table that Shoal serves, declared as the Redis (or Valkey) that
//! added them declares them: hash field expiry (Redis 7.4), HGETDEL/HGETEX/HSETEX (8.0) and
//! DELIFEQ (Valkey 9.0). Each borrows the key spec of a 7.0 command that has the same one. Shared
//! by the router (its command specs, ACL and COMMAND) and the nodes (what scripts may call).

use super::commands::{RedisCommand, cat, flag};
use super::table as redis;

const W: u32 = flag::WRITE | flag::FAST;
const R: u32 = flag::READONLY | flag::FAST;
const CW: u32 = cat::WRITE | cat::HASH | cat::FAST;
const CR: u32 = cat::READ | cat::HASH | cat::FAST;
const FIELDS: &str = "O(N) where N is the number of specified fields";

macro_rules! hash_command {
    ($decl:ident, $name:literal, $arity:literal, $flags:expr, $cats:expr, $like:ident, $since:literal, $summary:literal) => {
        pub const $decl: RedisCommand = RedisCommand {
            name: $name,
            id: None,
            arity: $arity,
            flags: $flags,
            categories: $cats,
            summary: $summary,
            since: $since,
            group: "hash",
            complexity: FIELDS,
            ..redis::$like
        };
    };
}

hash_command!(
    HEXPIRE,
    "hexpire",
    -6,
    W,
    CW,
    HINCRBY,
    "7.4.0",
    "Set expiry for hash field using relative time to expire (seconds)"
);
hash_command!(
    HPEXPIRE,
    "hpexpire",
    -6,
    W,
    CW,
    HINCRBY,
    "7.4.0",
    "Set expiry for hash field using relative time to expire (milliseconds)"
);
hash_command!(
    HEXPIREAT,
    "hexpireat",
    -6,
    W,
    CW,
    HINCRBY,
    "7.4.0",
    "Set expiry for hash field using an absolute Unix timestamp (seconds)"
);
hash_command!(
    HPEXPIREAT,
    "hpexpireat",
    -6,
    W,
    CW,
    HINCRBY,
    "7.4.0",
    "Set expiry for hash field using an absolute Unix timestamp (milliseconds)"
);
hash_command!(HTTL, "httl", -5, R, CR, HGET, "7.4.0", "Returns the TTL in seconds of a hash field.");
hash_command!(HPTTL, "hpttl", -5, R, CR, HGET, "7.4.0", "Returns the TTL in milliseconds of a hash field.");
hash_command!(
    HEXPIRETIME,
    "hexpiretime",
    -5,
    R,
    CR,
    HGET,
    "7.4.0",
    "Returns the expiration time of a hash field as a Unix timestamp, in seconds."
);
hash_command!(
    HPEXPIRETIME,
    "hpexpiretime",
    -5,
    R,
    CR,
    HGET,
    "7.4.0",
    "Returns the expiration time of a hash field as a Unix timestamp, in msec."
);
hash_command!(
    HPERSIST,
    "hpersist",
    -5,
    W,
    CW,
    HINCRBY,
    "7.4.0",
    "Removes the expiration time for each specified field"
);
hash_command!(
    HGETDEL,
    "hgetdel",
    -5,
    W,
    CW,
    GETDEL,
    "8.0.0",
    "Returns the value of a field and deletes it from the hash."
);
hash_command!(
    HGETEX,
    "hgetex",
    -5,
    W,
    CW,
    GETEX,
    "8.0.0",
    "Get the value of one or more fields of a given hash key, and optionally set their expiration."
);
hash_command!(
    HSETEX,
    "hsetex",
    -6,
    W | flag::DENYOOM,
    CW,
    HINCRBY,
    "8.0.0",
    "Set the value of one or more fields of a given hash key, and optionally set their expiration."
);

/// DELIFEQ is Valkey 9.0's (the lock release scripts used to do), with GETDEL's key spec (the key
/// is read and deleted).
pub const DELIFEQ: RedisCommand = RedisCommand {
    name: "delifeq",
    id: None,
    arity: 3,
    flags: flag::WRITE | flag::FAST,
    categories: cat::WRITE | cat::STRING | cat::FAST,
    summary: "Delete key if value matches string.",
    since: "9.0.0",
    group: "string",
    complexity: "O(1)",
    ..redis::GETDEL
};

/// Every command of this file.
pub static NEWER: &[&RedisCommand] = &[
    &HEXPIRE,
    &HPEXPIRE,
    &HEXPIREAT,
    &HPEXPIREAT,
    &HTTL,
    &HPTTL,
    &HEXPIRETIME,
    &HPEXPIRETIME,
    &HPERSIST,
    &HGETDEL,
    &HGETEX,
    &HSETEX,
    &DELIFEQ,
];

/// The command `name` of this file (any case).
pub fn lookup(name: &[u8]) -> Option<&'static RedisCommand> {
    NEWER.iter().copied().find(|c| c.name.as_bytes().eq_ignore_ascii_case(name))
}
