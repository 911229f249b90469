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

/// The hash commands newer than Redis 7.0 (field expiry: 7.4; HGETDEL, HGETEX, HSETEX: 8.0), as
/// `shoal_wire::acl::newer` declares them.
const fn newer(
    decl: &'static RedisCommand,
    run: fn(&super::Args, &mut super::Ctx) -> super::Pending,
) -> CommandSpec {
    CommandSpec { decl, run, ..CommandSpec::DEFAULT }
}

use shoal_wire::acl::newer as v;

pub const HEXPIRE: CommandSpec = newer(&v::HEXPIRE, write_key);
pub const HPEXPIRE: CommandSpec = newer(&v::HPEXPIRE, write_key);
pub const HEXPIREAT: CommandSpec = newer(&v::HEXPIREAT, write_key);
pub const HPEXPIREAT: CommandSpec = newer(&v::HPEXPIREAT, write_key);
pub const HTTL: CommandSpec = newer(&v::HTTL, read_key);
pub const HPTTL: CommandSpec = newer(&v::HPTTL, read_key);
pub const HEXPIRETIME: CommandSpec = newer(&v::HEXPIRETIME, read_key);
pub const HPEXPIRETIME: CommandSpec = newer(&v::HPEXPIRETIME, read_key);
pub const HPERSIST: CommandSpec = newer(&v::HPERSIST, write_key);
pub const HGETDEL: CommandSpec = newer(&v::HGETDEL, write_key);
pub const HGETEX: CommandSpec = newer(&v::HGETEX, write_key);
pub const HSETEX: CommandSpec = newer(&v::HSETEX, write_key);
