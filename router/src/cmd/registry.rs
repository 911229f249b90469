//! Every command the router understands: the registry of the specs that each command file
//! declares beside its handler, and their stats slots. Adding a command is one spec in its file
//! and one line here. Handlers that list or name commands (COMMAND, INFO, CLIENT LIST) see it
//! through their `Ctx` ([`REGISTRY`]), so that no handler imports the list of every handler.

use std::sync::LazyLock;

use super::spec::{CommandSpec, Registry};
use super::{
    acl, bits, blocking, client, cluster, command, config, connection, debug, del, expire, functions, geo,
    get, getex, hash, hll, incr, info, keys, latency, lists, lolwut, memory, mget, monitor, mset, multi,
    object, persistence, pubsub, scan, scripting, server, set, sets, shoal, slowlog, streams, strings,
    transaction, ttl, zsets,
};

/// Every command, in the order `COMMAND` lists them.
pub static COMMANDS: &[&CommandSpec] = &[
    &connection::PING,
    &connection::ECHO,
    &connection::HELLO,
    &connection::AUTH,
    &connection::SELECT,
    &connection::READONLY,
    &connection::READWRITE,
    &cluster::ASKING,
    &cluster::CLUSTER,
    &connection::QUIT,
    &connection::RESET,
    &client::CLIENT,
    &command::COMMAND,
    &info::INFO,
    &config::CONFIG,
    &debug::DEBUG,
    &slowlog::SLOWLOG,
    &acl::ACL,
    &latency::LATENCY,
    &memory::MEMORY,
    &server::MODULE,
    &server::ROLE,
    &server::SHUTDOWN,
    &server::MIGRATE,
    &server::REPLICAOF,
    &server::SLAVEOF,
    &lolwut::LOLWUT,
    &monitor::MONITOR,
    &keys::DBSIZE,
    &keys::FLUSHALL,
    &keys::FLUSHDB,
    &persistence::SAVE,
    &persistence::BGSAVE,
    &persistence::LASTSAVE,
    &connection::TIME,
    &transaction::MULTI,
    &transaction::EXEC,
    &transaction::DISCARD,
    &transaction::WATCH,
    &transaction::UNWATCH,
    &blocking::WAIT,
    &blocking::BLPOP,
    &blocking::BRPOP,
    &blocking::BLMOVE,
    &blocking::BRPOPLPUSH,
    &blocking::BLMPOP,
    &blocking::BZPOPMIN,
    &blocking::BZPOPMAX,
    &blocking::BZMPOP,
    &get::GET,
    &set::SET,
    &set::SETNX,
    &set::SETEX,
    &set::PSETEX,
    &set::GETSET,
    &get::GETDEL,
    &strings::DELIFEQ,
    &getex::GETEX,
    &mget::MGET,
    &mset::MSET,
    &mset::MSETNX,
    &strings::APPEND,
    &strings::STRLEN,
    &strings::GETRANGE,
    &strings::SETRANGE,
    &bits::SUBSTR,
    &bits::LCS,
    &bits::SETBIT,
    &bits::GETBIT,
    &bits::BITCOUNT,
    &bits::BITPOS,
    &bits::BITOP,
    &bits::BITFIELD,
    &bits::BITFIELD_RO,
    &incr::INCR,
    &incr::DECR,
    &incr::INCRBY,
    &incr::DECRBY,
    &incr::INCRBYFLOAT,
    &del::DEL,
    &del::UNLINK,
    &del::EXISTS,
    &del::TOUCH,
    &strings::TYPE,
    &expire::EXPIRE,
    &expire::PEXPIRE,
    &expire::EXPIREAT,
    &expire::PEXPIREAT,
    &expire::PERSIST,
    &ttl::TTL,
    &ttl::PTTL,
    &ttl::EXPIRETIME,
    &ttl::PEXPIRETIME,
    &scan::SCAN,
    &keys::KEYS,
    &keys::RANDOMKEY,
    &hash::HSET,
    &hash::HSETNX,
    &hash::HMSET,
    &hash::HGET,
    &hash::HMGET,
    &hash::HGETALL,
    &hash::HDEL,
    &hash::HEXISTS,
    &hash::HLEN,
    &hash::HSTRLEN,
    &hash::HKEYS,
    &hash::HVALS,
    &hash::HINCRBY,
    &hash::HINCRBYFLOAT,
    &hash::HRANDFIELD,
    &hash::HSCAN,
    &hash::HEXPIRE,
    &hash::HPEXPIRE,
    &hash::HEXPIREAT,
    &hash::HPEXPIREAT,
    &hash::HTTL,
    &hash::HPTTL,
    &hash::HEXPIRETIME,
    &hash::HPEXPIRETIME,
    &hash::HPERSIST,
    &hash::HGETDEL,
    &hash::HGETEX,
    &hash::HSETEX,
    &sets::SADD,
    &sets::SREM,
    &sets::SMEMBERS,
    &sets::SISMEMBER,
    &sets::SMISMEMBER,
    &sets::SCARD,
    &sets::SPOP,
    &sets::SRANDMEMBER,
    &sets::SSCAN,
    &lists::LPUSH,
    &lists::RPUSH,
    &lists::LPUSHX,
    &lists::RPUSHX,
    &lists::LPOP,
    &lists::RPOP,
    &lists::LLEN,
    &lists::LRANGE,
    &lists::LINDEX,
    &lists::LSET,
    &lists::LINSERT,
    &lists::LREM,
    &lists::LTRIM,
    &lists::LPOS,
    &zsets::ZADD,
    &zsets::ZINCRBY,
    &zsets::ZREM,
    &zsets::ZSCORE,
    &zsets::ZMSCORE,
    &zsets::ZCARD,
    &zsets::ZCOUNT,
    &zsets::ZLEXCOUNT,
    &zsets::ZRANGE,
    &zsets::ZRANGEBYSCORE,
    &zsets::ZREVRANGEBYSCORE,
    &zsets::ZRANGEBYLEX,
    &zsets::ZREVRANGEBYLEX,
    &zsets::ZREVRANGE,
    &zsets::ZRANK,
    &zsets::ZREVRANK,
    &zsets::ZPOPMIN,
    &zsets::ZPOPMAX,
    &zsets::ZRANDMEMBER,
    &zsets::ZREMRANGEBYRANK,
    &zsets::ZREMRANGEBYSCORE,
    &zsets::ZREMRANGEBYLEX,
    &zsets::ZSCAN,
    &multi::SINTER,
    &multi::SUNION,
    &multi::SDIFF,
    &multi::SINTERSTORE,
    &multi::SUNIONSTORE,
    &multi::SDIFFSTORE,
    &multi::SINTERCARD,
    &multi::SMOVE,
    &multi::LMOVE,
    &multi::RPOPLPUSH,
    &multi::LMPOP,
    &multi::ZUNION,
    &multi::ZINTER,
    &multi::ZDIFF,
    &multi::ZUNIONSTORE,
    &multi::ZINTERSTORE,
    &multi::ZDIFFSTORE,
    &multi::ZINTERCARD,
    &multi::ZMPOP,
    &multi::ZRANGESTORE,
    &geo::GEOADD,
    &geo::GEODIST,
    &geo::GEOHASH,
    &geo::GEOPOS,
    &geo::GEORADIUS,
    &geo::GEORADIUS_RO,
    &geo::GEORADIUSBYMEMBER,
    &geo::GEORADIUSBYMEMBER_RO,
    &geo::GEOSEARCH,
    &geo::GEOSEARCHSTORE,
    &streams::XADD,
    &streams::XRANGE,
    &streams::XREVRANGE,
    &streams::XLEN,
    &streams::XDEL,
    &streams::XTRIM,
    &streams::XSETID,
    &streams::XACK,
    &streams::XPENDING,
    &streams::XCLAIM,
    &streams::XAUTOCLAIM,
    &streams::XREAD,
    &streams::XREADGROUP,
    &streams::XGROUP,
    &streams::XINFO,
    &multi::RENAME,
    &multi::RENAMENX,
    &multi::COPY,
    &multi::SORT,
    &multi::SORT_RO,
    &hll::PFADD,
    &hll::PFCOUNT,
    &hll::PFMERGE,
    &pubsub::SUBSCRIBE,
    &pubsub::UNSUBSCRIBE,
    &pubsub::PSUBSCRIBE,
    &pubsub::PUNSUBSCRIBE,
    &pubsub::SSUBSCRIBE,
    &pubsub::SUNSUBSCRIBE,
    &pubsub::PUBLISH,
    &pubsub::SPUBLISH,
    &pubsub::PUBSUB,
    &object::OBJECT,
    &object::DUMP,
    &object::RESTORE,
    &scripting::EVAL,
    &scripting::EVALSHA,
    &scripting::EVAL_RO,
    &scripting::EVALSHA_RO,
    &scripting::SCRIPT,
    &functions::FCALL,
    &functions::FCALL_RO,
    &functions::FUNCTION,
    &shoal::SHOAL,
];

/// Finds a command by name, ignoring case.
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    // foldhash (hashbrown's default): every command looks its name up here.
    static BY_NAME: LazyLock<hashbrown::HashMap<&'static str, &'static CommandSpec>> =
        LazyLock::new(|| COMMANDS.iter().map(|c| (c.name(), *c)).collect());
    if name.len() > 32 {
        return None;
    }
    let mut lower = [0u8; 32];
    for (d, s) in lower.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    std::str::from_utf8(&lower[..name.len()]).ok().and_then(|n| BY_NAME.get(n).copied())
}

/// The registry as handlers see it (in their `Ctx`).
pub static REGISTRY: Registry = Registry::new(COMMANDS, lookup, slot_of, spec_at);

// The stats slot of every command and subcommand (INFO commandstats, CLIENT LIST's `cmd`, a
// session's last command): parents then their subcommands, in registry order.

/// Every spec, parents then their subcommands, with its slot.
static SPECS: LazyLock<Vec<&'static CommandSpec>> = LazyLock::new(|| {
    let mut all = Vec::new();
    for c in COMMANDS {
        all.push(*c);
        all.extend(c.subcommands.iter().copied());
    }
    all
});

/// `(spec address, slot)`, sorted by address: found by binary search, which is cheaper per
/// command than hashing.
static SLOT_OF: LazyLock<Vec<(usize, usize)>> = LazyLock::new(|| {
    let mut v: Vec<(usize, usize)> =
        SPECS.iter().enumerate().map(|(i, s)| (*s as *const CommandSpec as usize, i)).collect();
    v.sort_unstable();
    v
});

/// The stats slot of `spec`.
pub fn slot_of(spec: &'static CommandSpec) -> Option<usize> {
    // A pipeline repeats its command: the last answer on this thread first.
    thread_local!(static LAST: std::cell::Cell<(usize, Option<usize>)> = const { std::cell::Cell::new((0, None)) });
    let addr = spec as *const CommandSpec as usize;
    let (last, slot) = LAST.get();
    if last == addr {
        return slot;
    }
    let slot = SLOT_OF.binary_search_by_key(&addr, |&(a, _)| a).ok().map(|i| SLOT_OF[i].1);
    LAST.set((addr, slot));
    slot
}

/// The spec in stats slot `slot` (CLIENT LIST's `cmd`).
pub fn spec_at(slot: usize) -> Option<&'static CommandSpec> {
    SPECS.get(slot).copied()
}

/// The name of the command in stats slot `slot`.
pub fn name_of(slot: usize) -> Option<&'static str> {
    spec_at(slot).map(|s| s.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec written without `run:` answers DEFAULT's "not implemented" (a conversion once
    /// dropped it from every multi-key command): each registered command and subcommand names its
    /// own handler.
    #[test]
    fn every_command_names_its_handler() {
        let unimplemented = CommandSpec::DEFAULT.run as usize;
        let missing: Vec<_> =
            SPECS.iter().filter(|s| s.run as usize == unimplemented).map(|s| s.name()).collect();
        assert!(missing.is_empty(), "specs without a handler: {missing:?}");
    }

    #[test]
    fn every_command_has_a_stats_slot() {
        assert!(SPECS.len() <= crate::stats::SLOTS, "raise stats::SLOTS to {}", SPECS.len());
    }

    #[test]
    fn lookup_ignores_case_and_rejects_unknown() {
        assert_eq!(lookup(b"GeT").unwrap().name(), "get");
        assert!(lookup(b"nope").is_none());
        assert!(lookup(&[b'x'; 100]).is_none());
        assert_eq!(lookup(b"CLIENT").unwrap().subcommand(b"SetName").unwrap().name(), "client|setname");
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
        let mut names: Vec<_> = COMMANDS.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n);
        assert!(COMMANDS.iter().all(|c| c.name() == c.name().to_ascii_lowercase()));
    }
}
