//! Sorted-set commands. The node runs them (`node/src/commands/zset.rs`); these are their specs,
//! as redis-server 7.0 declares them.

use super::spec::*;
use super::typed::{read_key, write_key};

pub const ZADD: CommandSpec = CommandSpec { decl: &redis::ZADD, run: write_key, ..CommandSpec::DEFAULT };

pub const ZINCRBY: CommandSpec =
    CommandSpec { decl: &redis::ZINCRBY, run: write_key, ..CommandSpec::DEFAULT };

pub const ZREM: CommandSpec = CommandSpec { decl: &redis::ZREM, run: write_key, ..CommandSpec::DEFAULT };

pub const ZSCORE: CommandSpec = CommandSpec { decl: &redis::ZSCORE, run: read_key, ..CommandSpec::DEFAULT };

pub const ZMSCORE: CommandSpec = CommandSpec { decl: &redis::ZMSCORE, run: read_key, ..CommandSpec::DEFAULT };

pub const ZCARD: CommandSpec = CommandSpec { decl: &redis::ZCARD, run: read_key, ..CommandSpec::DEFAULT };

pub const ZCOUNT: CommandSpec = CommandSpec { decl: &redis::ZCOUNT, run: read_key, ..CommandSpec::DEFAULT };

pub const ZLEXCOUNT: CommandSpec =
    CommandSpec { decl: &redis::ZLEXCOUNT, run: read_key, ..CommandSpec::DEFAULT };

pub const ZRANGE: CommandSpec = CommandSpec { decl: &redis::ZRANGE, run: read_key, ..CommandSpec::DEFAULT };

pub const ZRANGEBYSCORE: CommandSpec =
    CommandSpec { decl: &redis::ZRANGEBYSCORE, run: read_key, ..CommandSpec::DEFAULT };

pub const ZREVRANGEBYSCORE: CommandSpec =
    CommandSpec { decl: &redis::ZREVRANGEBYSCORE, run: read_key, ..CommandSpec::DEFAULT };

pub const ZRANGEBYLEX: CommandSpec =
    CommandSpec { decl: &redis::ZRANGEBYLEX, run: read_key, ..CommandSpec::DEFAULT };

pub const ZREVRANGEBYLEX: CommandSpec =
    CommandSpec { decl: &redis::ZREVRANGEBYLEX, run: read_key, ..CommandSpec::DEFAULT };

pub const ZREVRANGE: CommandSpec =
    CommandSpec { decl: &redis::ZREVRANGE, run: read_key, ..CommandSpec::DEFAULT };

/// ZRANK and ZREVRANK take Redis 7.2's WITHSCORE (7.0's arity is exactly 3).
const ZRANK_7_2: shoal_wire::acl::commands::RedisCommand =
    shoal_wire::acl::commands::RedisCommand { arity: -3, ..redis::ZRANK };
const ZREVRANK_7_2: shoal_wire::acl::commands::RedisCommand =
    shoal_wire::acl::commands::RedisCommand { arity: -3, ..redis::ZREVRANK };

pub const ZRANK: CommandSpec = CommandSpec { decl: &ZRANK_7_2, run: read_key, ..CommandSpec::DEFAULT };

pub const ZREVRANK: CommandSpec = CommandSpec { decl: &ZREVRANK_7_2, run: read_key, ..CommandSpec::DEFAULT };

pub const ZPOPMIN: CommandSpec =
    CommandSpec { decl: &redis::ZPOPMIN, run: write_key, ..CommandSpec::DEFAULT };

pub const ZPOPMAX: CommandSpec =
    CommandSpec { decl: &redis::ZPOPMAX, run: write_key, ..CommandSpec::DEFAULT };

pub const ZRANDMEMBER: CommandSpec =
    CommandSpec { decl: &redis::ZRANDMEMBER, run: read_key, ..CommandSpec::DEFAULT };

pub const ZREMRANGEBYRANK: CommandSpec =
    CommandSpec { decl: &redis::ZREMRANGEBYRANK, run: write_key, ..CommandSpec::DEFAULT };

pub const ZREMRANGEBYSCORE: CommandSpec =
    CommandSpec { decl: &redis::ZREMRANGEBYSCORE, run: write_key, ..CommandSpec::DEFAULT };

pub const ZREMRANGEBYLEX: CommandSpec =
    CommandSpec { decl: &redis::ZREMRANGEBYLEX, run: write_key, ..CommandSpec::DEFAULT };

pub const ZSCAN: CommandSpec = CommandSpec { decl: &redis::ZSCAN, run: read_key, ..CommandSpec::DEFAULT };
