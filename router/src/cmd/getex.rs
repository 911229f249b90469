//! GETEX: GET, optionally changing the TTL.

use shoal_wire::proto::{self, GetExMode, op::Kind};

use super::set::{ExpireUnit, OptionsFor, parse_extended};
use super::spec::*;
use super::{Args, Ctx, Pending, op, plain};

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

/// `GETEX key [EX s|PX ms|EXAT ts|PXAT ts|PERSIST]`. Option syntax is checked here; the expiry
/// value is checked by the node after it finds the key, because Redis answers nil for a missing
/// key whatever the value.
pub fn getex(args: &Args, ctx: &mut Ctx) -> Pending {
    let o = match parse_extended(&args[2..], OptionsFor::GetEx) {
        Ok(o) => o,
        Err(e) => return e.into(),
    };
    let (mode, expire_arg) = match (&o.expire, o.persist) {
        (Some((unit, arg)), _) => {
            let mode = match unit {
                ExpireUnit::Ex => GetExMode::GetexEx,
                ExpireUnit::Px => GetExMode::GetexPx,
                ExpireUnit::Exat => GetExMode::GetexExat,
                ExpireUnit::Pxat => GetExMode::GetexPxat,
            };
            (mode, arg.clone())
        }
        (None, true) => (GetExMode::GetexPersist, Default::default()),
        (None, false) => (GetExMode::GetexGet, Default::default()),
    };
    let key = args[1].clone();
    let o = op(Kind::GetEx(proto::GetEx { key: key.clone(), mode: mode as i32, expire_arg }));
    Pending::Call(ctx.call(&key, o), plain)
}
