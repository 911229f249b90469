//! List commands. The node runs them (`node/src/commands/list.rs`); these are their specs, as
//! redis-server 7.0 declares them.

use super::spec::*;
use super::typed::{read_key, write_key};

pub const LPUSH: CommandSpec = CommandSpec { decl: &redis::LPUSH, run: write_key, ..CommandSpec::DEFAULT };

pub const RPUSH: CommandSpec = CommandSpec { decl: &redis::RPUSH, run: write_key, ..CommandSpec::DEFAULT };

pub const LPUSHX: CommandSpec = CommandSpec { decl: &redis::LPUSHX, run: write_key, ..CommandSpec::DEFAULT };

pub const RPUSHX: CommandSpec = CommandSpec { decl: &redis::RPUSHX, run: write_key, ..CommandSpec::DEFAULT };

pub const LPOP: CommandSpec = CommandSpec { decl: &redis::LPOP, run: write_key, ..CommandSpec::DEFAULT };

pub const RPOP: CommandSpec = CommandSpec { decl: &redis::RPOP, run: write_key, ..CommandSpec::DEFAULT };

pub const LLEN: CommandSpec = CommandSpec { decl: &redis::LLEN, run: read_key, ..CommandSpec::DEFAULT };

pub const LRANGE: CommandSpec = CommandSpec { decl: &redis::LRANGE, run: read_key, ..CommandSpec::DEFAULT };

pub const LINDEX: CommandSpec = CommandSpec { decl: &redis::LINDEX, run: read_key, ..CommandSpec::DEFAULT };

pub const LSET: CommandSpec = CommandSpec { decl: &redis::LSET, run: write_key, ..CommandSpec::DEFAULT };

pub const LINSERT: CommandSpec =
    CommandSpec { decl: &redis::LINSERT, run: write_key, ..CommandSpec::DEFAULT };

pub const LREM: CommandSpec = CommandSpec { decl: &redis::LREM, run: write_key, ..CommandSpec::DEFAULT };

pub const LTRIM: CommandSpec = CommandSpec { decl: &redis::LTRIM, run: write_key, ..CommandSpec::DEFAULT };

pub const LPOS: CommandSpec = CommandSpec { decl: &redis::LPOS, run: read_key, ..CommandSpec::DEFAULT };
