//! GET and GETDEL.

use shoal_wire::command;

use super::spec::*;
use super::{Args, Ctx, Pending, one_key};

pub const GET: CommandSpec = CommandSpec {
    name: "get",
    arity: 2,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: READ_STRING_FAST,
    group: "string",
    since: "1.0.0",
    summary: "Get the value of a key",
    complexity: "O(1)",
    run: get,
    lane: LaneClass::NearRead,
    ..CommandSpec::DEFAULT
};

pub const GETDEL: CommandSpec = CommandSpec {
    name: "getdel",
    arity: 2,
    flags: &["write", "fast"],
    keys: KeySpec::ONE,
    acl: WRITE_STRING_FAST,
    group: "string",
    since: "6.2.0",
    summary: "Get the value of a key and delete the key",
    complexity: "O(1)",
    run: getdel,
    lane: LaneClass::OneKey,
    ..CommandSpec::DEFAULT
};

/// GET: its one op. The pipeline answers a GET from the near cache, when one is on and holds
/// the key, before this runs, and fetches a miss through it (`crate::pipeline::near`).
pub fn get(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::get)
}

pub fn getdel(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::getdel)
}
