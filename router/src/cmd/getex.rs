//! GETEX: GET, optionally changing the TTL.

use shoal_wire::command;

use super::spec::*;
use super::{Args, Ctx, Pending, one_key};

pub const GETEX: CommandSpec = CommandSpec {
    name: "getex",
    arity: -2,
    flags: &["write", "fast"],
    keys: KeySpec::ONE,
    acl: WRITE_STRING_FAST,
    group: "string",
    since: "6.2.0",
    summary: "Get the value of a key and optionally set its expiration",
    complexity: "O(1)",
    run: getex,
    ..CommandSpec::DEFAULT
};

/// `GETEX key [EX s|PX ms|EXAT ts|PXAT ts|PERSIST]` (the node checks the expiry value once it
/// has found the key: Redis answers nil for a missing key whatever the value).
pub fn getex(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::getex)
}
