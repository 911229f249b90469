//! Bitmap commands and the string commands LCS and SUBSTR. The node runs SETBIT GETBIT BITCOUNT
//! BITPOS BITFIELD BITFIELD_RO on their key, BITOP and LCS as commands over several keys
//! ([`super::multi`]); SUBSTR is GETRANGE under its old name. These are their specs, as
//! redis-server 7.0 declares them.

use super::spec::*;
use super::typed::{read_key, write_key};
use super::{multi, strings};

pub const SETBIT: CommandSpec = CommandSpec { decl: &redis::SETBIT, run: write_key, ..CommandSpec::DEFAULT };

pub const GETBIT: CommandSpec = CommandSpec { decl: &redis::GETBIT, run: read_key, ..CommandSpec::DEFAULT };

pub const BITCOUNT: CommandSpec =
    CommandSpec { decl: &redis::BITCOUNT, run: read_key, ..CommandSpec::DEFAULT };

pub const BITPOS: CommandSpec = CommandSpec { decl: &redis::BITPOS, run: read_key, ..CommandSpec::DEFAULT };

pub const BITOP: CommandSpec = CommandSpec { decl: &redis::BITOP, run: multi::run, ..CommandSpec::DEFAULT };

pub const BITFIELD: CommandSpec =
    CommandSpec { decl: &redis::BITFIELD, run: write_key, ..CommandSpec::DEFAULT };

pub const BITFIELD_RO: CommandSpec =
    CommandSpec { decl: &redis::BITFIELD_RO, run: read_key, ..CommandSpec::DEFAULT };

pub const LCS: CommandSpec = CommandSpec { decl: &redis::LCS, run: multi::run, ..CommandSpec::DEFAULT };

pub const SUBSTR: CommandSpec =
    CommandSpec { decl: &redis::SUBSTR, run: strings::getrange, ..CommandSpec::DEFAULT };
