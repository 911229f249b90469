//! TTL, PTTL, EXPIRETIME, PEXPIRETIME. The node answers in milliseconds (-2 missing, -1 no TTL);
//! second variants round like Redis: `(ms + 500) / 1000`.

use shoal_wire::command;

use super::spec::*;
use super::{Args, Ctx, Pending, one_key};

pub const TTL: CommandSpec = CommandSpec {
    name: "ttl",
    arity: 2,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: KEYSPACE_READ_FAST,
    group: "generic",
    since: "1.0.0",
    summary: "Get the time to live for a key in seconds",
    complexity: "O(1)",
    run: ttl,
    lane: LaneClass::OneKey,
    ..CommandSpec::DEFAULT
};

pub const PTTL: CommandSpec = CommandSpec {
    name: "pttl",
    arity: 2,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: KEYSPACE_READ_FAST,
    group: "generic",
    since: "2.6.0",
    summary: "Get the time to live for a key in milliseconds",
    complexity: "O(1)",
    run: pttl,
    lane: LaneClass::OneKey,
    ..CommandSpec::DEFAULT
};

pub const EXPIRETIME: CommandSpec = CommandSpec {
    name: "expiretime",
    arity: 2,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: KEYSPACE_READ_FAST,
    group: "generic",
    since: "7.0.0",
    summary: "Get the expiration Unix timestamp for a key",
    complexity: "O(1)",
    run: expiretime,
    ..CommandSpec::DEFAULT
};

pub const PEXPIRETIME: CommandSpec = CommandSpec {
    name: "pexpiretime",
    arity: 2,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: KEYSPACE_READ_FAST,
    group: "generic",
    since: "7.0.0",
    summary: "Get the expiration Unix timestamp for a key in milliseconds",
    complexity: "O(1)",
    run: pexpiretime,
    ..CommandSpec::DEFAULT
};

pub fn ttl(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::ttl)
}

pub fn pttl(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::pttl)
}

pub fn expiretime(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::expiretime)
}

pub fn pexpiretime(args: &Args, ctx: &mut Ctx) -> Pending {
    one_key(args, ctx, command::pexpiretime)
}
