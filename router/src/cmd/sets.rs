//! Set commands. The node runs them (`node/src/commands/set.rs`); these are their specs, as
//! redis-server 7.0 declares them.

use super::spec::*;
use super::typed::{read_key, write_key};

pub const SADD: CommandSpec = CommandSpec { decl: &redis::SADD, run: write_key, ..CommandSpec::DEFAULT };

pub const SREM: CommandSpec = CommandSpec { decl: &redis::SREM, run: write_key, ..CommandSpec::DEFAULT };

pub const SMEMBERS: CommandSpec =
    CommandSpec { decl: &redis::SMEMBERS, run: read_key, ..CommandSpec::DEFAULT };

pub const SISMEMBER: CommandSpec =
    CommandSpec { decl: &redis::SISMEMBER, run: read_key, ..CommandSpec::DEFAULT };

pub const SMISMEMBER: CommandSpec =
    CommandSpec { decl: &redis::SMISMEMBER, run: read_key, ..CommandSpec::DEFAULT };

pub const SCARD: CommandSpec = CommandSpec { decl: &redis::SCARD, run: read_key, ..CommandSpec::DEFAULT };

pub const SPOP: CommandSpec = CommandSpec { decl: &redis::SPOP, run: write_key, ..CommandSpec::DEFAULT };

pub const SRANDMEMBER: CommandSpec =
    CommandSpec { decl: &redis::SRANDMEMBER, run: read_key, ..CommandSpec::DEFAULT };

pub const SSCAN: CommandSpec = CommandSpec { decl: &redis::SSCAN, run: read_key, ..CommandSpec::DEFAULT };
