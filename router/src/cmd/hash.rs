//! Hash commands. The node runs them (`node/src/commands/hash.rs`); these are their specs, as
//! redis-server 7.0 declares them; the field-expiry commands and HGETDEL/HGETEX/HSETEX as
//! redis-server 8.0 declares them.

use super::spec::*;
use super::typed::{read_key, write_key};

pub const HSET: CommandSpec = CommandSpec { decl: &redis::HSET, run: write_key, ..CommandSpec::DEFAULT };

pub const HSETNX: CommandSpec = CommandSpec { decl: &redis::HSETNX, run: write_key, ..CommandSpec::DEFAULT };

pub const HMSET: CommandSpec = CommandSpec { decl: &redis::HMSET, run: write_key, ..CommandSpec::DEFAULT };

pub const HGET: CommandSpec = CommandSpec { decl: &redis::HGET, run: read_key, ..CommandSpec::DEFAULT };

pub const HMGET: CommandSpec = CommandSpec { decl: &redis::HMGET, run: read_key, ..CommandSpec::DEFAULT };

pub const HGETALL: CommandSpec = CommandSpec { decl: &redis::HGETALL, run: read_key, ..CommandSpec::DEFAULT };

pub const HDEL: CommandSpec = CommandSpec { decl: &redis::HDEL, run: write_key, ..CommandSpec::DEFAULT };

pub const HEXISTS: CommandSpec = CommandSpec { decl: &redis::HEXISTS, run: read_key, ..CommandSpec::DEFAULT };

pub const HLEN: CommandSpec = CommandSpec { decl: &redis::HLEN, run: read_key, ..CommandSpec::DEFAULT };

pub const HSTRLEN: CommandSpec = CommandSpec { decl: &redis::HSTRLEN, run: read_key, ..CommandSpec::DEFAULT };

pub const HKEYS: CommandSpec = CommandSpec { decl: &redis::HKEYS, run: read_key, ..CommandSpec::DEFAULT };

pub const HVALS: CommandSpec = CommandSpec { decl: &redis::HVALS, run: read_key, ..CommandSpec::DEFAULT };

pub const HINCRBY: CommandSpec =
    CommandSpec { decl: &redis::HINCRBY, run: write_key, ..CommandSpec::DEFAULT };

pub const HINCRBYFLOAT: CommandSpec =
    CommandSpec { decl: &redis::HINCRBYFLOAT, run: write_key, ..CommandSpec::DEFAULT };

pub const HRANDFIELD: CommandSpec =
    CommandSpec { decl: &redis::HRANDFIELD, run: read_key, ..CommandSpec::DEFAULT };

pub const HSCAN: CommandSpec = CommandSpec { decl: &redis::HSCAN, run: read_key, ..CommandSpec::DEFAULT };

/// A hash command newer than Redis 7.0 (field expiry: 7.4; HGETDEL, HGETEX, HSETEX: 8.0),
/// declared as Redis declares it, with the key spec of a 7.0 command that has the same one.
macro_rules! newer {
    ($decl:ident, $spec:ident, $name:literal, $arity:literal, $flags:expr, $cats:expr, $like:ident, $since:literal, $summary:literal, $run:ident) => {
        const $decl: RedisCommand = RedisCommand {
            name: $name,
            id: None,
            arity: $arity,
            flags: $flags,
            categories: $cats,
            summary: $summary,
            since: $since,
            group: "hash",
            complexity: "O(N) where N is the number of specified fields",
            ..redis::$like
        };
        pub const $spec: CommandSpec = CommandSpec { decl: &$decl, run: $run, ..CommandSpec::DEFAULT };
    };
}

const W: u32 = flag::WRITE | flag::FAST;
const R: u32 = flag::READONLY | flag::FAST;
const CW: u32 = cat::WRITE | cat::HASH | cat::FAST;
const CR: u32 = cat::READ | cat::HASH | cat::FAST;

newer!(
    HEXPIRE_DECL,
    HEXPIRE,
    "hexpire",
    -6,
    W,
    CW,
    HINCRBY,
    "7.4.0",
    "Set expiry for hash field using relative time to expire (seconds)",
    write_key
);
newer!(
    HPEXPIRE_DECL,
    HPEXPIRE,
    "hpexpire",
    -6,
    W,
    CW,
    HINCRBY,
    "7.4.0",
    "Set expiry for hash field using relative time to expire (milliseconds)",
    write_key
);
newer!(
    HEXPIREAT_DECL,
    HEXPIREAT,
    "hexpireat",
    -6,
    W,
    CW,
    HINCRBY,
    "7.4.0",
    "Set expiry for hash field using an absolute Unix timestamp (seconds)",
    write_key
);
newer!(
    HPEXPIREAT_DECL,
    HPEXPIREAT,
    "hpexpireat",
    -6,
    W,
    CW,
    HINCRBY,
    "7.4.0",
    "Set expiry for hash field using an absolute Unix timestamp (milliseconds)",
    write_key
);
newer!(
    HTTL_DECL,
    HTTL,
    "httl",
    -5,
    R,
    CR,
    HGET,
    "7.4.0",
    "Returns the TTL in seconds of a hash field.",
    read_key
);
newer!(
    HPTTL_DECL,
    HPTTL,
    "hpttl",
    -5,
    R,
    CR,
    HGET,
    "7.4.0",
    "Returns the TTL in milliseconds of a hash field.",
    read_key
);
newer!(
    HEXPIRETIME_DECL,
    HEXPIRETIME,
    "hexpiretime",
    -5,
    R,
    CR,
    HGET,
    "7.4.0",
    "Returns the expiration time of a hash field as a Unix timestamp, in seconds.",
    read_key
);
newer!(
    HPEXPIRETIME_DECL,
    HPEXPIRETIME,
    "hpexpiretime",
    -5,
    R,
    CR,
    HGET,
    "7.4.0",
    "Returns the expiration time of a hash field as a Unix timestamp, in msec.",
    read_key
);
newer!(
    HPERSIST_DECL,
    HPERSIST,
    "hpersist",
    -5,
    W,
    CW,
    HINCRBY,
    "7.4.0",
    "Removes the expiration time for each specified field",
    write_key
);
newer!(
    HGETDEL_DECL,
    HGETDEL,
    "hgetdel",
    -5,
    W,
    CW,
    GETDEL,
    "8.0.0",
    "Returns the value of a field and deletes it from the hash.",
    write_key
);
newer!(
    HGETEX_DECL,
    HGETEX,
    "hgetex",
    -5,
    W,
    CW,
    GETEX,
    "8.0.0",
    "Get the value of one or more fields of a given hash key, and optionally set their expiration.",
    write_key
);
newer!(
    HSETEX_DECL,
    HSETEX,
    "hsetex",
    -6,
    W | flag::DENYOOM,
    CW,
    HINCRBY,
    "8.0.0",
    "Set the value of one or more fields of a given hash key, and optionally set their expiration.",
    write_key
);
