//! DEL, UNLINK, EXISTS, TOUCH: per-key ops grouped per node, counted.

use bytes::Bytes;
use shoal_wire::proto::{self, Op, op::Kind};

use super::spec::*;
use super::{Args, Ctx, Pending, op, sum};

pub const DEL: CommandSpec = CommandSpec {
    name: "del",
    arity: -2,
    flags: &["write"],
    keys: KeySpec { first: 1, last: -1, step: 1 },
    acl: &["@keyspace", "@write", "@slow"],
    group: "generic",
    since: "1.0.0",
    summary: "Delete a key",
    complexity: "O(N) where N is the number of keys that will be removed.",
    run: del,
    ..CommandSpec::DEFAULT
};

pub const UNLINK: CommandSpec = CommandSpec {
    name: "unlink",
    arity: -2,
    flags: &["write", "fast"],
    keys: KeySpec { first: 1, last: -1, step: 1 },
    acl: KEYSPACE_WRITE_FAST,
    group: "generic",
    since: "4.0.0",
    summary: "Delete a key asynchronously in another thread. Otherwise it is just as DEL, but non blocking.",
    complexity: "O(1) for each key removed regardless of its size.",
    run: unlink,
    ..CommandSpec::DEFAULT
};

pub const EXISTS: CommandSpec = CommandSpec {
    name: "exists",
    arity: -2,
    flags: &["readonly", "fast"],
    keys: KeySpec { first: 1, last: -1, step: 1 },
    acl: KEYSPACE_READ_FAST,
    group: "generic",
    since: "1.0.0",
    summary: "Determine if a key exists",
    complexity: "O(N) where N is the number of keys to check.",
    run: exists,
    ..CommandSpec::DEFAULT
};

pub const TOUCH: CommandSpec = CommandSpec {
    name: "touch",
    arity: -2,
    flags: &["readonly", "fast"],
    keys: KeySpec { first: 1, last: -1, step: 1 },
    acl: KEYSPACE_READ_FAST,
    group: "generic",
    since: "3.2.1",
    summary: "Alters the last access time of a key(s). Returns the number of existing keys specified.",
    complexity: "O(N) where N is the number of keys that will be touched.",
    run: touch,
    ..CommandSpec::DEFAULT
};

fn count(args: &Args, ctx: &mut Ctx, make: fn(Bytes) -> Op) -> Pending {
    let call = ctx.call_keys(args[1..].iter().map(|k| (k.clone(), make(k.clone()))));
    Pending::later(sum(call))
}

pub fn del(args: &Args, ctx: &mut Ctx) -> Pending {
    count(args, ctx, |key| op(Kind::Del(proto::Del { key })))
}

/// UNLINK: the same as DEL here; freeing memory never blocks a node's other shards.
pub fn unlink(args: &Args, ctx: &mut Ctx) -> Pending {
    del(args, ctx)
}

pub fn exists(args: &Args, ctx: &mut Ctx) -> Pending {
    count(args, ctx, |key| op(Kind::Exists(proto::Exists { key })))
}

pub fn touch(args: &Args, ctx: &mut Ctx) -> Pending {
    count(args, ctx, |key| op(Kind::Touch(proto::Touch { key })))
}
