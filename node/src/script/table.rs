//! The commands a script may call on a node, with what Redis declares about them (arity, flags,
//! where the keys are), so `redis.call` checks arguments, read-only scripts and memory like Redis's
//! `scriptCall` does. The same declarations live in the router's command specs (`router/src/cmd`);
//! a router test (`script_table_agrees_with_the_router_specs`) keeps the two in step.

/// The command writes (refused in read-only scripts; its keys count as changed).
pub const WRITE: u8 = 1;
/// The command may grow memory (refused with OOM when `maxmemory` is reached).
pub const DENYOOM: u8 = 2;
/// Redis refuses it in scripts.
pub const NOSCRIPT: u8 = 4;
/// Reads only.
pub const READ: u8 = 0;

/// Where a command's keys are among its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// No key (or keys the command finds from a `numkeys` argument: the node's multi-key
    /// commands know them).
    None,
    /// From `first` to `last` (negative: from the end) every `step` arguments.
    Range(i32, i32, i32),
}

pub const ONE: Keys = Keys::Range(1, 1, 1);
pub const NONE: Keys = Keys::None;

#[derive(Debug, Clone, Copy)]
pub struct ScriptCommand {
    pub name: &'static str,
    /// Redis arity: N exactly N arguments (name included), -N at least N.
    pub arity: i32,
    pub flags: u8,
    pub keys: Keys,
}

impl ScriptCommand {
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

const fn c(name: &'static str, arity: i32, flags: u8, keys: Keys) -> ScriptCommand {
    ScriptCommand { name, arity, flags, keys }
}

/// Sorted by name (looked up by binary search).
pub static COMMANDS: &[ScriptCommand] = &[
    c("append", 3, WRITE | DENYOOM, ONE),
    c("bitcount", -2, READ, ONE),
    c("bitfield", -2, WRITE | DENYOOM, ONE),
    c("bitfield_ro", -2, READ, ONE),
    c("bitop", -4, WRITE | DENYOOM, Keys::Range(2, -1, 1)),
    c("bitpos", -3, READ, ONE),
    c("blmove", 6, WRITE | DENYOOM | NOSCRIPT, Keys::Range(1, 2, 1)),
    c("blmpop", -5, WRITE, NONE),
    c("blpop", -3, WRITE | NOSCRIPT, Keys::Range(1, -2, 1)),
    c("brpop", -3, WRITE | NOSCRIPT, Keys::Range(1, -2, 1)),
    c("brpoplpush", 4, WRITE | DENYOOM | NOSCRIPT, Keys::Range(1, 2, 1)),
    c("bzmpop", -5, WRITE, NONE),
    c("bzpopmax", -3, WRITE | NOSCRIPT, Keys::Range(1, -2, 1)),
    c("bzpopmin", -3, WRITE | NOSCRIPT, Keys::Range(1, -2, 1)),
    c("copy", -3, WRITE | DENYOOM, Keys::Range(1, 2, 1)),
    c("dbsize", 1, READ, NONE),
    c("decr", 2, WRITE | DENYOOM, ONE),
    c("decrby", 3, WRITE | DENYOOM, ONE),
    c("del", -2, WRITE, Keys::Range(1, -1, 1)),
    c("exists", -2, READ, Keys::Range(1, -1, 1)),
    c("expire", -3, WRITE, ONE),
    c("expireat", -3, WRITE, ONE),
    c("expiretime", 2, READ, ONE),
    c("flushall", -1, WRITE, NONE),
    c("flushdb", -1, WRITE, NONE),
    c("get", 2, READ, ONE),
    c("getbit", 3, READ, ONE),
    c("getdel", 2, WRITE, ONE),
    c("getex", -2, WRITE, ONE),
    c("getrange", 4, READ, ONE),
    c("getset", 3, WRITE | DENYOOM, ONE),
    c("hdel", -3, WRITE, ONE),
    c("hexists", 3, READ, ONE),
    c("hget", 3, READ, ONE),
    c("hgetall", 2, READ, ONE),
    c("hincrby", 4, WRITE | DENYOOM, ONE),
    c("hincrbyfloat", 4, WRITE | DENYOOM, ONE),
    c("hkeys", 2, READ, ONE),
    c("hlen", 2, READ, ONE),
    c("hmget", -3, READ, ONE),
    c("hmset", -4, WRITE | DENYOOM, ONE),
    c("hrandfield", -2, READ, ONE),
    c("hscan", -3, READ, ONE),
    c("hset", -4, WRITE | DENYOOM, ONE),
    c("hsetnx", 4, WRITE | DENYOOM, ONE),
    c("hstrlen", 3, READ, ONE),
    c("hvals", 2, READ, ONE),
    c("incr", 2, WRITE | DENYOOM, ONE),
    c("incrby", 3, WRITE | DENYOOM, ONE),
    c("incrbyfloat", 3, WRITE | DENYOOM, ONE),
    c("keys", 2, READ, NONE),
    c("lcs", -3, READ, Keys::Range(1, 2, 1)),
    c("lindex", 3, READ, ONE),
    c("linsert", 5, WRITE | DENYOOM, ONE),
    c("llen", 2, READ, ONE),
    c("lmove", 5, WRITE | DENYOOM, Keys::Range(1, 2, 1)),
    c("lmpop", -4, WRITE, NONE),
    c("lpop", -2, WRITE, ONE),
    c("lpos", -3, READ, ONE),
    c("lpush", -3, WRITE | DENYOOM, ONE),
    c("lpushx", -3, WRITE | DENYOOM, ONE),
    c("lrange", 4, READ, ONE),
    c("lrem", 4, WRITE, ONE),
    c("lset", 4, WRITE | DENYOOM, ONE),
    c("ltrim", 4, WRITE, ONE),
    c("mget", -2, READ, Keys::Range(1, -1, 1)),
    c("mset", -3, WRITE | DENYOOM, Keys::Range(1, -1, 2)),
    c("msetnx", -3, WRITE | DENYOOM, Keys::Range(1, -1, 2)),
    c("persist", 2, WRITE, ONE),
    c("pexpire", -3, WRITE, ONE),
    c("pexpireat", -3, WRITE, ONE),
    c("pexpiretime", 2, READ, ONE),
    c("pfadd", -2, WRITE | DENYOOM, ONE),
    c("pfcount", -2, READ, Keys::Range(1, -1, 1)),
    c("pfmerge", -2, WRITE | DENYOOM, Keys::Range(1, -1, 1)),
    c("psetex", 4, WRITE | DENYOOM, ONE),
    c("pttl", 2, READ, ONE),
    c("randomkey", 1, READ, NONE),
    c("rename", 3, WRITE, Keys::Range(1, 2, 1)),
    c("renamenx", 3, WRITE, Keys::Range(1, 2, 1)),
    c("rpop", -2, WRITE, ONE),
    c("rpoplpush", 3, WRITE | DENYOOM, Keys::Range(1, 2, 1)),
    c("rpush", -3, WRITE | DENYOOM, ONE),
    c("rpushx", -3, WRITE | DENYOOM, ONE),
    c("sadd", -3, WRITE | DENYOOM, ONE),
    c("scan", -2, READ, NONE),
    c("scard", 2, READ, ONE),
    c("sdiff", -2, READ, Keys::Range(1, -1, 1)),
    c("sdiffstore", -3, WRITE | DENYOOM, Keys::Range(1, -1, 1)),
    c("set", -3, WRITE | DENYOOM, ONE),
    c("setbit", 4, WRITE | DENYOOM, ONE),
    c("setex", 4, WRITE | DENYOOM, ONE),
    c("setnx", 3, WRITE | DENYOOM, ONE),
    c("setrange", 4, WRITE | DENYOOM, ONE),
    c("sinter", -2, READ, Keys::Range(1, -1, 1)),
    c("sintercard", -3, READ, NONE),
    c("sinterstore", -3, WRITE | DENYOOM, Keys::Range(1, -1, 1)),
    c("sismember", 3, READ, ONE),
    c("smembers", 2, READ, ONE),
    c("smismember", -3, READ, ONE),
    c("smove", 4, WRITE, Keys::Range(1, 2, 1)),
    c("spop", -2, WRITE, ONE),
    c("srandmember", -2, READ, ONE),
    c("srem", -3, WRITE, ONE),
    c("sscan", -3, READ, ONE),
    c("strlen", 2, READ, ONE),
    c("substr", 4, READ, ONE),
    c("sunion", -2, READ, Keys::Range(1, -1, 1)),
    c("sunionstore", -3, WRITE | DENYOOM, Keys::Range(1, -1, 1)),
    c("touch", -2, READ, Keys::Range(1, -1, 1)),
    c("ttl", 2, READ, ONE),
    c("type", 2, READ, ONE),
    c("unlink", -2, WRITE, Keys::Range(1, -1, 1)),
    c("zadd", -4, WRITE | DENYOOM, ONE),
    c("zcard", 2, READ, ONE),
    c("zcount", 4, READ, ONE),
    c("zdiff", -3, READ, NONE),
    c("zdiffstore", -4, WRITE | DENYOOM, ONE),
    c("zincrby", 4, WRITE | DENYOOM, ONE),
    c("zinter", -3, READ, NONE),
    c("zintercard", -3, READ, NONE),
    c("zinterstore", -4, WRITE | DENYOOM, ONE),
    c("zlexcount", 4, READ, ONE),
    c("zmpop", -4, WRITE, NONE),
    c("zmscore", -3, READ, ONE),
    c("zpopmax", -2, WRITE, ONE),
    c("zpopmin", -2, WRITE, ONE),
    c("zrandmember", -2, READ, ONE),
    c("zrange", -4, READ, ONE),
    c("zrangebylex", -4, READ, ONE),
    c("zrangebyscore", -4, READ, ONE),
    c("zrangestore", -5, WRITE | DENYOOM, Keys::Range(1, 2, 1)),
    c("zrank", 3, READ, ONE),
    c("zrem", -3, WRITE, ONE),
    c("zremrangebylex", 4, WRITE, ONE),
    c("zremrangebyrank", 4, WRITE, ONE),
    c("zremrangebyscore", 4, WRITE, ONE),
    c("zrevrange", -4, READ, ONE),
    c("zrevrangebylex", -4, READ, ONE),
    c("zrevrangebyscore", -4, READ, ONE),
    c("zrevrank", 3, READ, ONE),
    c("zscan", -3, READ, ONE),
    c("zscore", 3, READ, ONE),
    c("zunion", -3, READ, NONE),
    c("zunionstore", -4, WRITE | DENYOOM, ONE),
];

/// The commands scripts can call that do not touch keys: answered by the node itself (a message
/// published from a script reaches every subscriber: each node knows every router's).
pub static SERVER: &[ScriptCommand] = &[
    c("echo", 2, READ, NONE),
    c("ping", -1, READ, NONE),
    c("publish", 3, READ, NONE),
    c("spublish", 3, READ, NONE),
    c("time", 1, READ, NONE),
];

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
}
