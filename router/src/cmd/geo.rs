//! GEO commands. The node runs them on sorted sets (`node/src/commands/geo.rs`); these are their
//! specs, as redis-server 7.0 declares them. GEORADIUS and GEORADIUSBYMEMBER (whose STORE option
//! names a second key) and GEOSEARCHSTORE run as multi-key commands ([`super::multi`]): on one
//! node when their keys are, else on the gathered source with the destination written back.

use super::multi;
use super::spec::*;
use super::typed::{read_key, write_key};

pub const GEOADD: CommandSpec = CommandSpec { decl: &redis::GEOADD, run: write_key, ..CommandSpec::DEFAULT };

pub const GEODIST: CommandSpec = CommandSpec { decl: &redis::GEODIST, run: read_key, ..CommandSpec::DEFAULT };

pub const GEOHASH: CommandSpec = CommandSpec { decl: &redis::GEOHASH, run: read_key, ..CommandSpec::DEFAULT };

pub const GEOPOS: CommandSpec = CommandSpec { decl: &redis::GEOPOS, run: read_key, ..CommandSpec::DEFAULT };

pub const GEOSEARCH: CommandSpec =
    CommandSpec { decl: &redis::GEOSEARCH, run: read_key, ..CommandSpec::DEFAULT };

pub const GEORADIUS_RO: CommandSpec =
    CommandSpec { decl: &redis::GEORADIUS_RO, run: read_key, ..CommandSpec::DEFAULT };

pub const GEORADIUSBYMEMBER_RO: CommandSpec =
    CommandSpec { decl: &redis::GEORADIUSBYMEMBER_RO, run: read_key, ..CommandSpec::DEFAULT };

pub const GEORADIUS: CommandSpec =
    CommandSpec { decl: &redis::GEORADIUS, run: multi::run, ..CommandSpec::DEFAULT };

pub const GEORADIUSBYMEMBER: CommandSpec =
    CommandSpec { decl: &redis::GEORADIUSBYMEMBER, run: multi::run, ..CommandSpec::DEFAULT };

pub const GEOSEARCHSTORE: CommandSpec =
    CommandSpec { decl: &redis::GEOSEARCHSTORE, run: multi::run, ..CommandSpec::DEFAULT };
