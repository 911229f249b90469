//! The commands a script may call on a node: which ones (the node's own choice: the names below)
//! and what Redis declares about them (arity, the `write`/`denyoom`/`noscript` flags, where the
//! keys are), taken from Redis's command table in `shoal_wire::acl` (generated from
//! redis-server, the one the router's command specs point into too), so `redis.call` checks
//! arguments, read-only scripts and memory like Redis's `scriptCall` does.

use std::sync::LazyLock;

use shoal_wire::acl::commands::{self as redis, RedisCommand, flag};

/// The command writes (refused in read-only scripts; its keys count as changed).
pub const WRITE: u8 = 1;
/// The command may grow memory (refused with OOM when `maxmemory` is reached).
pub const DENYOOM: u8 = 2;
/// Redis refuses it in scripts.
pub const NOSCRIPT: u8 = 4;

/// Where a command's keys are among its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// No key (or keys the command finds from a `numkeys` argument: the node's multi-key
    /// commands know them).
    None,
    /// From `first` to `last` (negative: from the end) every `step` arguments.
    Range(i32, i32, i32),
}

#[derive(Debug, Clone, Copy)]
pub struct ScriptCommand {
    pub name: &'static str,
    /// Redis arity: N exactly N arguments (name included), -N at least N.
    pub arity: i32,
    pub flags: u8,
    pub keys: Keys,
}

impl ScriptCommand {
    /// What Redis's table declares about `name` (which must be in it).
    fn from_redis(name: &'static str) -> ScriptCommand {
        let id = redis::lookup(name).unwrap_or_else(|| panic!("{name} is not in Redis's table"));
        Self::from_decl(name, &redis::REDIS_COMMANDS[id])
    }

    /// What a declaration says (Redis's table's, or a newer command's: `shoal_wire::acl::newer`).
    fn from_decl(name: &'static str, c: &RedisCommand) -> ScriptCommand {
        let mut flags = 0;
        for (bit, redis_flag) in [(WRITE, flag::WRITE), (DENYOOM, flag::DENYOOM), (NOSCRIPT, flag::NOSCRIPT)]
        {
            if c.has_flag(redis_flag) {
                flags |= bit;
            }
        }
        let r = c.key_range;
        // Redis's range (its first key spec) covers SPUBLISH's channel, for cluster routing
        // only: not a key.
        let not_key = c.keys.first().is_some_and(|k| k.not_key);
        let keys = if r.first <= 0 || not_key { Keys::None } else { Keys::Range(r.first, r.last, r.step) };
        // Containers declare nothing of their own: XGROUP's subcommands all write the key after
        // the subcommand, XINFO's all read it.
        match name {
            "xgroup" => ScriptCommand { name, arity: c.arity, flags: WRITE, keys: Keys::Range(2, 2, 1) },
            "xinfo" => ScriptCommand { name, arity: c.arity, flags: 0, keys: Keys::Range(2, 2, 1) },
            _ => ScriptCommand { name, arity: c.arity, flags, keys },
        }
    }

    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i32;
        if self.arity >= 0 { argc == self.arity } else { argc >= -self.arity }
    }

    pub fn writes(&self) -> bool {
        self.flags & WRITE != 0
    }

    /// The keys among `args` by [`Keys::Range`] (a short argument list yields what is there).
    pub fn range_keys<'a>(&self, args: &'a [bytes::Bytes]) -> Vec<&'a bytes::Bytes> {
        let Keys::Range(first, last, step) = self.keys else { return Vec::new() };
        let n = args.len() as i32;
        let last = if last < 0 { n + last } else { last.min(n - 1) };
        (first..=last).step_by(step.max(1) as usize).filter_map(|i| args.get(i as usize)).collect()
    }
}

/// The data commands a script may call on a node, sorted (looked up by binary search).
pub static NAMES: &[&str] = &[
    "append",
    "bitcount",
    "bitfield",
    "bitfield_ro",
    "bitop",
    "bitpos",
    "blmove",
    "blmpop",
    "blpop",
    "brpop",
    "brpoplpush",
    "bzmpop",
    "bzpopmax",
    "bzpopmin",
    "copy",
    "dbsize",
    "decr",
    "decrby",
    "del",
    "dump",
    "exists",
    "expire",
    "expireat",
    "expiretime",
    "flushall",
    "flushdb",
    "geoadd",
    "geodist",
    "geohash",
    "geopos",
    "georadius",
    "georadius_ro",
    "georadiusbymember",
    "georadiusbymember_ro",
    "geosearch",
    "geosearchstore",
    "get",
    "getbit",
    "getdel",
    "getex",
    "getrange",
    "getset",
    "hdel",
    "hexists",
    "hget",
    "hgetall",
    "hincrby",
    "hincrbyfloat",
    "hkeys",
    "hlen",
    "hmget",
    "hmset",
    "hrandfield",
    "hscan",
    "hset",
    "hsetnx",
    "hstrlen",
    "hvals",
    "incr",
    "incrby",
    "incrbyfloat",
    "keys",
    "lcs",
    "lindex",
    "linsert",
    "llen",
    "lmove",
    "lmpop",
    "lpop",
    "lpos",
    "lpush",
    "lpushx",
    "lrange",
    "lrem",
    "lset",
    "ltrim",
    "mget",
    "mset",
    "msetnx",
    "persist",
    "pexpire",
    "pexpireat",
    "pexpiretime",
    "pfadd",
    "pfcount",
    "pfmerge",
    "psetex",
    "pttl",
    "randomkey",
    "rename",
    "renamenx",
    "restore",
    "rpop",
    "rpoplpush",
    "rpush",
    "rpushx",
    "sadd",
    "scan",
    "scard",
    "sdiff",
    "sdiffstore",
    "set",
    "setbit",
    "setex",
    "setnx",
    "setrange",
    "sinter",
    "sintercard",
    "sinterstore",
    "sismember",
    "smembers",
    "smismember",
    "smove",
    "sort",
    "sort_ro",
    "spop",
    "srandmember",
    "srem",
    "sscan",
    "strlen",
    "substr",
    "sunion",
    "sunionstore",
    "touch",
    "ttl",
    "type",
    "unlink",
    "xack",
    "xadd",
    "xautoclaim",
    "xclaim",
    "xdel",
    "xgroup",
    "xinfo",
    "xlen",
    "xpending",
    "xrange",
    "xread",
    "xreadgroup",
    "xrevrange",
    "xsetid",
    "xtrim",
    "zadd",
    "zcard",
    "zcount",
    "zdiff",
    "zdiffstore",
    "zincrby",
    "zinter",
    "zintercard",
    "zinterstore",
    "zlexcount",
    "zmpop",
    "zmscore",
    "zpopmax",
    "zpopmin",
    "zrandmember",
    "zrange",
    "zrangebylex",
    "zrangebyscore",
    "zrangestore",
    "zrank",
    "zrem",
    "zremrangebylex",
    "zremrangebyrank",
    "zremrangebyscore",
    "zrevrange",
    "zrevrangebylex",
    "zrevrangebyscore",
    "zrevrank",
    "zscan",
    "zscore",
    "zunion",
    "zunionstore",
];

/// The commands scripts can call that do not touch keys: answered by the node itself (a message
/// published from a script reaches every subscriber: each node knows every router's).
pub static SERVER_NAMES: &[&str] = &["echo", "ping", "publish", "spublish", "time"];

/// [`NAMES`] with Redis's declarations, built once.
pub static COMMANDS: LazyLock<Vec<ScriptCommand>> =
    LazyLock::new(|| NAMES.iter().map(|n| ScriptCommand::from_redis(n)).collect());

/// The commands newer than Redis 7.0's table that scripts may call too (hash field expiry,
/// HGETDEL/HGETEX/HSETEX, DELIFEQ), as `shoal_wire::acl::newer` declares them.
pub static NEWER: LazyLock<Vec<ScriptCommand>> = LazyLock::new(|| {
    shoal_wire::acl::newer::NEWER.iter().map(|c| ScriptCommand::from_decl(c.name, c)).collect()
});

/// [`SERVER_NAMES`] with Redis's declarations, built once.
pub static SERVER: LazyLock<Vec<ScriptCommand>> =
    LazyLock::new(|| SERVER_NAMES.iter().map(|n| ScriptCommand::from_redis(n)).collect());

/// Commands Redis refuses in scripts (flag `noscript`) that are not data commands above: they
/// get Redis's "not allowed" error rather than "unknown command".
pub static NOT_ALLOWED: &[&str] = &[
    "auth",
    "bgsave",
    "client",
    "discard",
    "eval",
    "eval_ro",
    "evalsha",
    "evalsha_ro",
    "exec",
    "fcall",
    "fcall_ro",
    "function",
    "hello",
    "multi",
    "psubscribe",
    "punsubscribe",
    "quit",
    "reset",
    "save",
    "script",
    "ssubscribe",
    "subscribe",
    "sunsubscribe",
    "unsubscribe",
    "unwatch",
    "wait",
    "watch",
];

/// The command `name` (any case, as commands arrive) if scripts may call it on a node.
pub fn lookup(name: &[u8]) -> Option<&'static ScriptCommand> {
    let lower = || name.iter().map(u8::to_ascii_lowercase);
    COMMANDS
        .binary_search_by(|c| c.name.bytes().cmp(lower()))
        .ok()
        .map(|i| &COMMANDS[i])
        .or_else(|| SERVER.iter().find(|c| c.name.as_bytes().eq_ignore_ascii_case(name)))
        .or_else(|| NEWER.iter().find(|c| c.name.as_bytes().eq_ignore_ascii_case(name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_finds_its_commands() {
        assert!(COMMANDS.windows(2).all(|w| w[0].name < w[1].name), "sorted, no duplicates");
        assert_eq!(lookup(b"hset").unwrap().arity, -4);
        assert!(lookup(b"set").unwrap().writes());
        assert!(!lookup(b"get").unwrap().writes());
        assert!(lookup(b"time").is_some());
        assert!(lookup(b"nosuch").is_none());
        assert_eq!(lookup(b"HSet").unwrap().name, "hset", "any case, as commands arrive");
        assert_eq!(lookup(b"TIME").unwrap().name, "time");
    }

    #[test]
    fn key_ranges() {
        let args: Vec<bytes::Bytes> =
            ["MSET", "a", "1", "b", "2"].iter().map(|s| bytes::Bytes::from(*s)).collect();
        let mset = lookup(b"mset").unwrap();
        assert_eq!(mset.range_keys(&args), vec!["a", "b"]);
        let get = lookup(b"get").unwrap();
        assert_eq!(get.range_keys(&args[..2]), vec!["a"]);
        assert!(lookup(b"keys").unwrap().range_keys(&args).is_empty());
    }

    #[test]
    fn declarations_come_from_redis_s_table() {
        let at = |name: &str| lookup(name.as_bytes()).unwrap_or_else(|| panic!("{name}"));
        assert_eq!((at("blmove").arity, at("blmove").flags), (6, WRITE | DENYOOM | NOSCRIPT));
        assert_eq!(at("get").flags, 0);
        assert_eq!(at("bitop").keys, Keys::Range(2, -1, 1));
        assert_eq!(at("blpop").keys, Keys::Range(1, -2, 1));
        assert_eq!(at("msetnx").keys, Keys::Range(1, -1, 2));
        assert_eq!(at("zinterstore").keys, Keys::Range(1, 1, 1));
        assert_eq!(at("zdiff").keys, Keys::None, "numkeys: the node's multi-key commands find them");
        assert_eq!(at("spublish").keys, Keys::None, "a shard channel is not a key");
        assert!(SERVER.iter().all(|c| c.keys == Keys::None && !c.writes()));
    }

    /// What a node refuses outright: commands Redis flags noscript (for CLIENT and SCRIPT,
    /// their subcommands but HELP are), and the function commands Shoal does not have.
    #[test]
    fn not_allowed_are_what_redis_flags_noscript() {
        for name in NOT_ALLOWED {
            if ["fcall", "fcall_ro", "function"].contains(name) {
                continue;
            }
            let id = redis::lookup(name).unwrap_or_else(|| panic!("{name} is in Redis's table"));
            let noscript = |id: usize| redis::REDIS_COMMANDS[id].has_flag(flag::NOSCRIPT);
            let mut subs = redis::subcommands(id)
                .filter(|&s| !redis::REDIS_COMMANDS[s].name.ends_with("|help"))
                .peekable();
            let subs_noscript = subs.peek().is_some() && subs.all(noscript);
            assert!(noscript(id) || subs_noscript, "{name}");
        }
    }
}
