//! GETEX: GET, optionally changing the TTL.

use shoal_wire::command;

use super::spec::*;
use super::{Args, Ctx, Pending, one_key};

pub const GETEX: CommandSpec = CommandSpec { decl: &redis::GETEX, run: getex, ..CommandSpec::DEFAULT };

/// `GETEX key [EX s|PX ms|EXAT ts|PXAT ts|PERSIST]` (the node checks the expiry value once it
/// has found the key: Redis answers nil for a missing key whatever the value).
pub fn getex(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::getex)
}
