//! EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (with NX/XX/GT/LT) and PERSIST.

use shoal_wire::command;

use super::spec::*;
use super::{Args, Ctx, Pending, one_key};

pub const EXPIRE: CommandSpec = CommandSpec {
    name: "expire",
    arity: -3,
    flags: &["write", "fast"],
    keys: KeySpec::ONE,
    acl: KEYSPACE_WRITE_FAST,
    group: "generic",
    since: "1.0.0",
    summary: "Set a key's time to live in seconds",
    complexity: "O(1)",
    run: expire,
    lane: LaneClass::OneKey,
    ..CommandSpec::DEFAULT
};

pub const PEXPIRE: CommandSpec = CommandSpec {
    name: "pexpire",
    arity: -3,
    flags: &["write", "fast"],
    keys: KeySpec::ONE,
    acl: KEYSPACE_WRITE_FAST,
    group: "generic",
    since: "2.6.0",
    summary: "Set a key's time to live in milliseconds",
    complexity: "O(1)",
    run: pexpire,
    lane: LaneClass::OneKey,
    ..CommandSpec::DEFAULT
};

pub const EXPIREAT: CommandSpec = CommandSpec {
    name: "expireat",
    arity: -3,
    flags: &["write", "fast"],
    keys: KeySpec::ONE,
    acl: KEYSPACE_WRITE_FAST,
    group: "generic",
    since: "1.2.0",
    summary: "Set the expiration for a key as a UNIX timestamp",
    complexity: "O(1)",
    run: expireat,
    ..CommandSpec::DEFAULT
};

pub const PEXPIREAT: CommandSpec = CommandSpec {
    name: "pexpireat",
    arity: -3,
    flags: &["write", "fast"],
    keys: KeySpec::ONE,
    acl: KEYSPACE_WRITE_FAST,
    group: "generic",
    since: "2.6.0",
    summary: "Set the expiration for a key as a UNIX timestamp specified in milliseconds",
    complexity: "O(1)",
    run: pexpireat,
    ..CommandSpec::DEFAULT
};

pub const PERSIST: CommandSpec = CommandSpec {
    name: "persist",
    arity: 2,
    flags: &["write", "fast"],
    keys: KeySpec::ONE,
    acl: KEYSPACE_WRITE_FAST,
    group: "generic",
    since: "2.2.0",
    summary: "Remove the expiration from a key",
    complexity: "O(1)",
    run: persist,
    ..CommandSpec::DEFAULT
};

pub fn expire(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::expire)
}

pub fn pexpire(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::pexpire)
}

pub fn expireat(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::expireat)
}

pub fn pexpireat(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::pexpireat)
}

pub fn persist(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::persist)
}
