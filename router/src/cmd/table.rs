//! The command table: names, arities, flags and key positions as Redis 7 declares them (so arity
//! errors and COMMAND replies agree with Redis), and the function that runs each command.

use std::collections::HashMap;
use std::sync::LazyLock;

use super::{Args, Ctx, Pending};
use super::{client, command, connection, del, expire, get, getex, incr, info, keys, mget, mset, scan, set};
use super::{persistence, shoal, strings, ttl};

pub struct CommandSpec {
    /// Lowercase full name; subcommands are `parent|sub`, as Redis names them in errors.
    pub name: &'static str,
    /// Redis arity: N means exactly N arguments (name included), -N at least N.
    pub arity: i32,
    pub flags: &'static [&'static str],
    /// First key, last key, step (COMMAND INFO).
    pub keys: (i32, i32, i32),
    pub acl: &'static [&'static str],
    pub group: &'static str,
    pub since: &'static str,
    pub summary: &'static str,
    pub complexity: &'static str,
    pub run: fn(&Args, &mut Ctx) -> Pending,
    pub subcommands: &'static [CommandSpec],
}

impl CommandSpec {
    /// The name without its parent (`setname` for `client|setname`).
    pub fn short_name(&self) -> &'static str {
        self.name.rsplit('|').next().unwrap_or(self.name)
    }

    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i32;
        if self.arity >= 0 { argc == self.arity } else { argc >= -self.arity }
    }

    /// Whether the command runs before authentication (AUTH, HELLO, QUIT, RESET).
    pub fn no_auth(&self) -> bool {
        self.flags.contains(&"no_auth")
    }

    pub fn subcommand(&self, name: &[u8]) -> Option<&'static CommandSpec> {
        self.subcommands.iter().find(|s| s.short_name().as_bytes().eq_ignore_ascii_case(name))
    }
}

/// Finds a command by name, ignoring case.
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    static BY_NAME: LazyLock<HashMap<&'static str, &'static CommandSpec>> =
        LazyLock::new(|| COMMANDS.iter().map(|c| (c.name, c)).collect());
    if name.len() > 32 {
        return None;
    }
    let mut lower = [0u8; 32];
    for (d, s) in lower.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    std::str::from_utf8(&lower[..name.len()]).ok().and_then(|n| BY_NAME.get(n).copied())
}

const FAST_CONN: &[&str] = &["@fast", "@connection"];
const SLOW_CONN: &[&str] = &["@slow", "@connection"];
const READ_STRING_FAST: &[&str] = &["@read", "@string", "@fast"];
const WRITE_STRING_FAST: &[&str] = &["@write", "@string", "@fast"];
const WRITE_STRING_SLOW: &[&str] = &["@write", "@string", "@slow"];
const KEYSPACE_READ_FAST: &[&str] = &["@keyspace", "@read", "@fast"];
const KEYSPACE_WRITE_FAST: &[&str] = &["@keyspace", "@write", "@fast"];
const NO_AUTH: &[&str] = &["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"];
const SUB_FLAGS: &[&str] = &["noscript", "loading", "stale"];
const ONE_KEY: (i32, i32, i32) = (1, 1, 1);
const NO_KEYS: (i32, i32, i32) = (0, 0, 0);

macro_rules! spec {
    ($name:expr, $arity:expr, $flags:expr, $keys:expr, $acl:expr, $group:expr, $since:expr, $summary:expr,
     $complexity:expr, $run:expr) => {
        spec!($name, $arity, $flags, $keys, $acl, $group, $since, $summary, $complexity, $run, &[])
    };
    ($name:expr, $arity:expr, $flags:expr, $keys:expr, $acl:expr, $group:expr, $since:expr, $summary:expr,
     $complexity:expr, $run:expr, $subs:expr) => {
        CommandSpec {
            name: $name,
            arity: $arity,
            flags: $flags,
            keys: $keys,
            acl: $acl,
            group: $group,
            since: $since,
            summary: $summary,
            complexity: $complexity,
            run: $run,
            subcommands: $subs,
        }
    };
}

const CLIENT_SUBCOMMANDS: &[CommandSpec] = &[
    spec!(
        "client|setname",
        3,
        SUB_FLAGS,
        NO_KEYS,
        SLOW_CONN,
        "connection",
        "2.6.9",
        "Set the current connection name",
        "O(1)",
        client::setname
    ),
    spec!(
        "client|getname",
        2,
        SUB_FLAGS,
        NO_KEYS,
        SLOW_CONN,
        "connection",
        "2.6.9",
        "Get the current connection name",
        "O(1)",
        client::getname
    ),
    spec!(
        "client|id",
        2,
        SUB_FLAGS,
        NO_KEYS,
        SLOW_CONN,
        "connection",
        "5.0.0",
        "Returns the client ID for the current connection",
        "O(1)",
        client::id
    ),
    spec!(
        "client|setinfo",
        4,
        SUB_FLAGS,
        NO_KEYS,
        SLOW_CONN,
        "connection",
        "7.2.0",
        "Set client or connection specific info",
        "O(1)",
        client::setinfo
    ),
    spec!(
        "client|info",
        2,
        SUB_FLAGS,
        NO_KEYS,
        SLOW_CONN,
        "connection",
        "6.2.0",
        "Returns information about the current client connection.",
        "O(1)",
        client::info
    ),
    spec!(
        "client|help",
        2,
        &["loading", "stale"],
        NO_KEYS,
        SLOW_CONN,
        "connection",
        "5.0.0",
        "Show helpful text about the different subcommands",
        "O(1)",
        client::help
    ),
];

const COMMAND_SUBCOMMANDS: &[CommandSpec] = &[
    spec!(
        "command|count",
        2,
        &["loading", "stale"],
        NO_KEYS,
        SLOW_CONN,
        "server",
        "2.8.13",
        "Get total number of Redis commands",
        "O(1)",
        command::count
    ),
    spec!(
        "command|docs",
        -2,
        &["loading", "stale"],
        NO_KEYS,
        SLOW_CONN,
        "server",
        "7.0.0",
        "Get array of specific Redis command documentation",
        "O(N) where N is the number of commands to look up",
        command::docs
    ),
    spec!(
        "command|info",
        -2,
        &["loading", "stale"],
        NO_KEYS,
        SLOW_CONN,
        "server",
        "2.8.13",
        "Get array of specific Redis command details, or all when no argument is given.",
        "O(N) where N is the number of commands to look up",
        command::info
    ),
    spec!(
        "command|list",
        -2,
        &["loading", "stale"],
        NO_KEYS,
        SLOW_CONN,
        "server",
        "7.0.0",
        "Get an array of Redis command names",
        "O(N) where N is the total number of Redis commands",
        command::list
    ),
    spec!(
        "command|help",
        2,
        &["loading", "stale"],
        NO_KEYS,
        SLOW_CONN,
        "server",
        "5.0.0",
        "Show helpful text about the different subcommands",
        "O(1)",
        command::help
    ),
];

const SHOAL_SUBCOMMANDS: &[CommandSpec] = &[
    spec!(
        "shoal|topology",
        2,
        &["loading", "stale"],
        NO_KEYS,
        &["@slow"],
        "shoal",
        "0.1.0",
        "Show the topology: version, nodes, slot ranges",
        "O(N) where N is the number of nodes",
        shoal::topology
    ),
    spec!(
        "shoal|nodes",
        2,
        &["loading", "stale"],
        NO_KEYS,
        &["@slow"],
        "shoal",
        "0.1.0",
        "One line per node: id, address, slots, keys, reachability",
        "O(N) where N is the number of nodes",
        shoal::nodes
    ),
    spec!(
        "shoal|keyslot",
        3,
        &["loading", "stale", "fast"],
        NO_KEYS,
        &["@fast"],
        "shoal",
        "0.1.0",
        "The hash slot of a key",
        "O(N) where N is the key length",
        shoal::keyslot
    ),
    spec!(
        "shoal|snapshot",
        2,
        &["loading", "stale"],
        NO_KEYS,
        &["@admin", "@slow"],
        "shoal",
        "0.1.0",
        "Write a snapshot on every node and wait; one line per node",
        "O(N) where N is the number of keys",
        persistence::shoal_snapshot
    ),
    spec!(
        "shoal|scale",
        3,
        &["admin"],
        NO_KEYS,
        &["@admin", "@slow"],
        "shoal",
        "0.1.0",
        "Grow or shrink the embedded cluster to n nodes, moving data online",
        "O(N) where N is the number of keys that move",
        shoal::scale
    ),
    spec!(
        "shoal|help",
        2,
        &["loading", "stale"],
        NO_KEYS,
        &["@slow"],
        "shoal",
        "0.1.0",
        "Show helpful text about the different subcommands",
        "O(1)",
        shoal::help
    ),
];

/// Every command the router understands.
pub static COMMANDS: &[CommandSpec] = &[
    // connection
    spec!(
        "ping",
        -1,
        &["fast"],
        NO_KEYS,
        FAST_CONN,
        "connection",
        "1.0.0",
        "Ping the server",
        "O(1)",
        connection::ping
    ),
    spec!(
        "echo",
        2,
        &["loading", "stale", "fast"],
        NO_KEYS,
        FAST_CONN,
        "connection",
        "1.0.0",
        "Echo the given string",
        "O(1)",
        connection::echo
    ),
    spec!(
        "hello",
        -1,
        NO_AUTH,
        NO_KEYS,
        FAST_CONN,
        "connection",
        "6.0.0",
        "Handshake with Redis",
        "O(1)",
        connection::hello
    ),
    spec!(
        "auth",
        -2,
        NO_AUTH,
        NO_KEYS,
        FAST_CONN,
        "connection",
        "1.0.0",
        "Authenticate to the server",
        "O(N) where N is the number of passwords defined for the user",
        connection::auth
    ),
    spec!(
        "select",
        2,
        &["loading", "stale", "fast"],
        NO_KEYS,
        FAST_CONN,
        "connection",
        "1.0.0",
        "Change the selected database for the current connection",
        "O(1)",
        connection::select
    ),
    spec!(
        "quit",
        -1,
        NO_AUTH,
        NO_KEYS,
        FAST_CONN,
        "connection",
        "1.0.0",
        "Close the connection",
        "O(1)",
        connection::quit
    ),
    spec!(
        "reset",
        1,
        NO_AUTH,
        NO_KEYS,
        FAST_CONN,
        "connection",
        "6.2.0",
        "Reset the connection",
        "O(1)",
        connection::reset
    ),
    spec!(
        "client",
        -2,
        &[],
        NO_KEYS,
        &["@slow"],
        "connection",
        "2.4.0",
        "A container for client connection commands",
        "Depends on subcommand.",
        client::container,
        CLIENT_SUBCOMMANDS
    ),
    // server
    spec!(
        "command",
        -1,
        &["loading", "stale"],
        NO_KEYS,
        SLOW_CONN,
        "server",
        "2.8.13",
        "Get array of Redis command details",
        "O(N) where N is the total number of Redis commands",
        command::all,
        COMMAND_SUBCOMMANDS
    ),
    spec!(
        "info",
        -1,
        &["loading", "stale"],
        NO_KEYS,
        &["@slow", "@dangerous"],
        "server",
        "1.0.0",
        "Get information and statistics about the server",
        "O(1)",
        info::info
    ),
    spec!(
        "dbsize",
        1,
        &["readonly", "fast"],
        NO_KEYS,
        KEYSPACE_READ_FAST,
        "server",
        "1.0.0",
        "Return the number of keys in the selected database",
        "O(1)",
        keys::dbsize
    ),
    spec!(
        "flushall",
        -1,
        &["write"],
        NO_KEYS,
        &["@keyspace", "@write", "@slow", "@dangerous"],
        "server",
        "1.0.0",
        "Remove all keys from all databases",
        "O(N) where N is the total number of keys in all databases",
        keys::flushall
    ),
    spec!(
        "flushdb",
        -1,
        &["write"],
        NO_KEYS,
        &["@keyspace", "@write", "@slow", "@dangerous"],
        "server",
        "1.0.0",
        "Remove all keys from the current database",
        "O(N) where N is the number of keys in the selected database",
        keys::flushdb
    ),
    spec!(
        "save",
        1,
        &["admin", "noscript", "no_async_loading", "no_multi"],
        NO_KEYS,
        &["@admin", "@slow", "@dangerous"],
        "server",
        "1.0.0",
        "Synchronously save the dataset to disk",
        "O(N) where N is the total number of keys in all databases",
        persistence::save
    ),
    spec!(
        "bgsave",
        -1,
        &["admin", "noscript", "no_async_loading"],
        NO_KEYS,
        &["@admin", "@slow", "@dangerous"],
        "server",
        "1.0.0",
        "Asynchronously save the dataset to disk",
        "O(1)",
        persistence::bgsave
    ),
    spec!(
        "lastsave",
        1,
        &["loading", "stale", "fast"],
        NO_KEYS,
        &["@admin", "@fast", "@dangerous"],
        "server",
        "1.0.0",
        "Get the UNIX time stamp of the last successful save to disk",
        "O(1)",
        persistence::lastsave
    ),
    spec!(
        "time",
        1,
        &["loading", "stale", "fast"],
        NO_KEYS,
        &["@fast"],
        "server",
        "2.6.0",
        "Return the current server time",
        "O(1)",
        connection::time
    ),
    // strings
    spec!(
        "get",
        2,
        &["readonly", "fast"],
        ONE_KEY,
        READ_STRING_FAST,
        "string",
        "1.0.0",
        "Get the value of a key",
        "O(1)",
        get::get
    ),
    spec!(
        "set",
        -3,
        &["write", "denyoom"],
        ONE_KEY,
        WRITE_STRING_SLOW,
        "string",
        "1.0.0",
        "Set the string value of a key",
        "O(1)",
        set::set
    ),
    spec!(
        "setnx",
        3,
        &["write", "denyoom", "fast"],
        ONE_KEY,
        WRITE_STRING_FAST,
        "string",
        "1.0.0",
        "Set the value of a key, only if the key does not exist",
        "O(1)",
        set::setnx
    ),
    spec!(
        "setex",
        4,
        &["write", "denyoom"],
        ONE_KEY,
        WRITE_STRING_SLOW,
        "string",
        "2.0.0",
        "Set the value and expiration of a key",
        "O(1)",
        set::setex
    ),
    spec!(
        "psetex",
        4,
        &["write", "denyoom"],
        ONE_KEY,
        WRITE_STRING_SLOW,
        "string",
        "2.6.0",
        "Set the value and expiration in milliseconds of a key",
        "O(1)",
        set::psetex
    ),
    spec!(
        "getset",
        3,
        &["write", "denyoom", "fast"],
        ONE_KEY,
        WRITE_STRING_FAST,
        "string",
        "1.0.0",
        "Set the string value of a key and return its old value",
        "O(1)",
        set::getset
    ),
    spec!(
        "getdel",
        2,
        &["write", "fast"],
        ONE_KEY,
        WRITE_STRING_FAST,
        "string",
        "6.2.0",
        "Get the value of a key and delete the key",
        "O(1)",
        get::getdel
    ),
    spec!(
        "getex",
        -2,
        &["write", "fast"],
        ONE_KEY,
        WRITE_STRING_FAST,
        "string",
        "6.2.0",
        "Get the value of a key and optionally set its expiration",
        "O(1)",
        getex::getex
    ),
    spec!(
        "mget",
        -2,
        &["readonly", "fast"],
        (1, -1, 1),
        READ_STRING_FAST,
        "string",
        "1.0.0",
        "Get the values of all the given keys",
        "O(N) where N is the number of keys to retrieve.",
        mget::mget
    ),
    spec!(
        "mset",
        -3,
        &["write", "denyoom"],
        (1, -1, 2),
        WRITE_STRING_SLOW,
        "string",
        "1.0.1",
        "Set multiple keys to multiple values",
        "O(N) where N is the number of keys to set.",
        mset::mset
    ),
    spec!(
        "msetnx",
        -3,
        &["write", "denyoom"],
        (1, -1, 2),
        WRITE_STRING_SLOW,
        "string",
        "1.0.1",
        "Set multiple keys to multiple values, only if none of the keys exist",
        "O(N) where N is the number of keys to set.",
        mset::msetnx
    ),
    spec!(
        "append",
        3,
        &["write", "denyoom", "fast"],
        ONE_KEY,
        WRITE_STRING_FAST,
        "string",
        "2.0.0",
        "Append a value to a key",
        "O(1)",
        strings::append
    ),
    spec!(
        "strlen",
        2,
        &["readonly", "fast"],
        ONE_KEY,
        READ_STRING_FAST,
        "string",
        "2.2.0",
        "Get the length of the value stored in a key",
        "O(1)",
        strings::strlen
    ),
    spec!(
        "getrange",
        4,
        &["readonly"],
        ONE_KEY,
        &["@read", "@string", "@slow"],
        "string",
        "2.4.0",
        "Get a substring of the string stored at a key",
        "O(N) where N is the length of the returned string.",
        strings::getrange
    ),
    spec!(
        "setrange",
        4,
        &["write", "denyoom"],
        ONE_KEY,
        WRITE_STRING_SLOW,
        "string",
        "2.2.0",
        "Overwrite part of a string at key starting at the specified offset",
        "O(1), not counting the time taken to copy the new string in place.",
        strings::setrange
    ),
    spec!(
        "incr",
        2,
        &["write", "denyoom", "fast"],
        ONE_KEY,
        WRITE_STRING_FAST,
        "string",
        "1.0.0",
        "Increment the integer value of a key by one",
        "O(1)",
        incr::incr
    ),
    spec!(
        "decr",
        2,
        &["write", "denyoom", "fast"],
        ONE_KEY,
        WRITE_STRING_FAST,
        "string",
        "1.0.0",
        "Decrement the integer value of a key by one",
        "O(1)",
        incr::decr
    ),
    spec!(
        "incrby",
        3,
        &["write", "denyoom", "fast"],
        ONE_KEY,
        WRITE_STRING_FAST,
        "string",
        "1.0.0",
        "Increment the integer value of a key by the given amount",
        "O(1)",
        incr::incrby
    ),
    spec!(
        "decrby",
        3,
        &["write", "denyoom", "fast"],
        ONE_KEY,
        WRITE_STRING_FAST,
        "string",
        "1.0.0",
        "Decrement the integer value of a key by the given number",
        "O(1)",
        incr::decrby
    ),
    spec!(
        "incrbyfloat",
        3,
        &["write", "denyoom", "fast"],
        ONE_KEY,
        WRITE_STRING_FAST,
        "string",
        "2.6.0",
        "Increment the float value of a key by the given amount",
        "O(1)",
        incr::incrbyfloat
    ),
    // keyspace
    spec!(
        "del",
        -2,
        &["write"],
        (1, -1, 1),
        &["@keyspace", "@write", "@slow"],
        "generic",
        "1.0.0",
        "Delete a key",
        "O(N) where N is the number of keys that will be removed.",
        del::del
    ),
    spec!(
        "unlink",
        -2,
        &["write", "fast"],
        (1, -1, 1),
        KEYSPACE_WRITE_FAST,
        "generic",
        "4.0.0",
        "Delete a key asynchronously in another thread. Otherwise it is just as DEL, but non blocking.",
        "O(1) for each key removed regardless of its size.",
        del::unlink
    ),
    spec!(
        "exists",
        -2,
        &["readonly", "fast"],
        (1, -1, 1),
        KEYSPACE_READ_FAST,
        "generic",
        "1.0.0",
        "Determine if a key exists",
        "O(N) where N is the number of keys to check.",
        del::exists
    ),
    spec!(
        "touch",
        -2,
        &["readonly", "fast"],
        (1, -1, 1),
        KEYSPACE_READ_FAST,
        "generic",
        "3.2.1",
        "Alters the last access time of a key(s). Returns the number of existing keys specified.",
        "O(N) where N is the number of keys that will be touched.",
        del::touch
    ),
    spec!(
        "type",
        2,
        &["readonly", "fast"],
        ONE_KEY,
        KEYSPACE_READ_FAST,
        "generic",
        "1.0.0",
        "Determine the type stored at key",
        "O(1)",
        strings::type_of
    ),
    spec!(
        "expire",
        -3,
        &["write", "fast"],
        ONE_KEY,
        KEYSPACE_WRITE_FAST,
        "generic",
        "1.0.0",
        "Set a key's time to live in seconds",
        "O(1)",
        expire::expire
    ),
    spec!(
        "pexpire",
        -3,
        &["write", "fast"],
        ONE_KEY,
        KEYSPACE_WRITE_FAST,
        "generic",
        "2.6.0",
        "Set a key's time to live in milliseconds",
        "O(1)",
        expire::pexpire
    ),
    spec!(
        "expireat",
        -3,
        &["write", "fast"],
        ONE_KEY,
        KEYSPACE_WRITE_FAST,
        "generic",
        "1.2.0",
        "Set the expiration for a key as a UNIX timestamp",
        "O(1)",
        expire::expireat
    ),
    spec!(
        "pexpireat",
        -3,
        &["write", "fast"],
        ONE_KEY,
        KEYSPACE_WRITE_FAST,
        "generic",
        "2.6.0",
        "Set the expiration for a key as a UNIX timestamp specified in milliseconds",
        "O(1)",
        expire::pexpireat
    ),
    spec!(
        "persist",
        2,
        &["write", "fast"],
        ONE_KEY,
        KEYSPACE_WRITE_FAST,
        "generic",
        "2.2.0",
        "Remove the expiration from a key",
        "O(1)",
        expire::persist
    ),
    spec!(
        "ttl",
        2,
        &["readonly", "fast"],
        ONE_KEY,
        KEYSPACE_READ_FAST,
        "generic",
        "1.0.0",
        "Get the time to live for a key in seconds",
        "O(1)",
        ttl::ttl
    ),
    spec!(
        "pttl",
        2,
        &["readonly", "fast"],
        ONE_KEY,
        KEYSPACE_READ_FAST,
        "generic",
        "2.6.0",
        "Get the time to live for a key in milliseconds",
        "O(1)",
        ttl::pttl
    ),
    spec!(
        "expiretime",
        2,
        &["readonly", "fast"],
        ONE_KEY,
        KEYSPACE_READ_FAST,
        "generic",
        "7.0.0",
        "Get the expiration Unix timestamp for a key",
        "O(1)",
        ttl::expiretime
    ),
    spec!(
        "pexpiretime",
        2,
        &["readonly", "fast"],
        ONE_KEY,
        KEYSPACE_READ_FAST,
        "generic",
        "7.0.0",
        "Get the expiration Unix timestamp for a key in milliseconds",
        "O(1)",
        ttl::pexpiretime
    ),
    spec!(
        "scan",
        -2,
        &["readonly"],
        NO_KEYS,
        &["@keyspace", "@read", "@slow"],
        "generic",
        "2.8.0",
        "Incrementally iterate the keys space",
        "O(1) for every call. O(N) for a complete iteration.",
        scan::scan
    ),
    spec!(
        "keys",
        2,
        &["readonly"],
        NO_KEYS,
        &["@keyspace", "@read", "@slow", "@dangerous"],
        "generic",
        "1.0.0",
        "Find all keys matching the given pattern",
        "O(N) with N being the number of keys in the database",
        keys::keys
    ),
    spec!(
        "randomkey",
        1,
        &["readonly"],
        NO_KEYS,
        &["@keyspace", "@read", "@slow"],
        "generic",
        "1.0.0",
        "Return a random key from the keyspace",
        "O(1)",
        keys::randomkey
    ),
    // Shoal administration
    spec!(
        "shoal",
        -2,
        &[],
        NO_KEYS,
        &["@slow"],
        "shoal",
        "0.1.0",
        "Shoal cluster administration (TOPOLOGY, NODES, KEYSLOT)",
        "Depends on subcommand.",
        shoal::container,
        SHOAL_SUBCOMMANDS
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_ignores_case_and_rejects_unknown() {
        assert_eq!(lookup(b"GeT").unwrap().name, "get");
        assert!(lookup(b"nope").is_none());
        assert!(lookup(&[b'x'; 100]).is_none());
        assert_eq!(lookup(b"CLIENT").unwrap().subcommand(b"SetName").unwrap().name, "client|setname");
    }

    #[test]
    fn arity_rules() {
        let get = lookup(b"get").unwrap();
        assert!(get.arity_ok(2) && !get.arity_ok(1) && !get.arity_ok(3));
        let set = lookup(b"set").unwrap();
        assert!(set.arity_ok(3) && set.arity_ok(9) && !set.arity_ok(2));
    }

    #[test]
    fn names_are_unique_and_lowercase() {
        let mut names: Vec<_> = COMMANDS.iter().map(|c| c.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n);
        assert!(COMMANDS.iter().all(|c| c.name == c.name.to_ascii_lowercase()));
    }
}
