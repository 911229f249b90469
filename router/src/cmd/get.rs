//! GET and GETDEL.

use shoal_wire::command;

use super::spec::*;
use super::{Args, Ctx, Pending, one_key};

pub const GET: CommandSpec =
    CommandSpec { decl: &redis::GET, run: get, lane: LaneClass::NearRead, ..CommandSpec::DEFAULT };

pub const GETDEL: CommandSpec =
    CommandSpec { decl: &redis::GETDEL, run: getdel, lane: LaneClass::OneKey, ..CommandSpec::DEFAULT };

/// GET: its one op. The pipeline answers a GET from the near cache, when one is on and holds
/// the key, before this runs, and fetches a miss through it (`crate::pipeline::near`).
pub fn get(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::get)
}

pub fn getdel(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::getdel)
}
