//! Whole-keyspace commands, fanned out to every node: DBSIZE, FLUSHALL, FLUSHDB, KEYS, RANDOMKEY.

use shoal_wire::proto::{self, op::Kind, reply};

use super::spec::*;
use super::{Args, Ctx, Pending, op, plain, sum_ints, syntax_error};
use crate::resp::Reply;

pub const DBSIZE: CommandSpec = CommandSpec {
    name: "dbsize",
    arity: 1,
    flags: &["readonly", "fast"],
    keys: KeySpec::NONE,
    acl: KEYSPACE_READ_FAST,
    group: "server",
    since: "1.0.0",
    summary: "Return the number of keys in the selected database",
    complexity: "O(1)",
    run: dbsize,
    ..CommandSpec::DEFAULT
};

pub const FLUSHALL: CommandSpec = CommandSpec {
    name: "flushall",
    arity: -1,
    flags: &["write"],
    keys: KeySpec::NONE,
    acl: &["@keyspace", "@write", "@slow", "@dangerous"],
    group: "server",
    since: "1.0.0",
    summary: "Remove all keys from all databases",
    complexity: "O(N) where N is the total number of keys in all databases",
    run: flushall,
    ..CommandSpec::DEFAULT
};

pub const FLUSHDB: CommandSpec = CommandSpec {
    name: "flushdb",
    arity: -1,
    flags: &["write"],
    keys: KeySpec::NONE,
    acl: &["@keyspace", "@write", "@slow", "@dangerous"],
    group: "server",
    since: "1.0.0",
    summary: "Remove all keys from the current database",
    complexity: "O(N) where N is the number of keys in the selected database",
    run: flushdb,
    ..CommandSpec::DEFAULT
};

pub const KEYS: CommandSpec = CommandSpec {
    name: "keys",
    arity: 2,
    flags: &["readonly"],
    keys: KeySpec::NONE,
    acl: &["@keyspace", "@read", "@slow", "@dangerous"],
    group: "generic",
    since: "1.0.0",
    summary: "Find all keys matching the given pattern",
    complexity: "O(N) with N being the number of keys in the database",
    run: keys,
    ..CommandSpec::DEFAULT
};

pub const RANDOMKEY: CommandSpec = CommandSpec {
    name: "randomkey",
    arity: 1,
    flags: &["readonly"],
    keys: KeySpec::NONE,
    acl: &["@keyspace", "@read", "@slow"],
    group: "generic",
    since: "1.0.0",
    summary: "Return a random key from the keyspace",
    complexity: "O(1)",
    run: randomkey,
    ..CommandSpec::DEFAULT
};

pub fn dbsize(_args: &Args, ctx: &mut Ctx) -> Pending {
    let calls = ctx.call_all(|| op(Kind::DbSize(proto::DbSize {})));
    Pending::later(async move { calls.gather().await.map_or_else(Reply::from, sum_ints) })
}

/// `FLUSHALL [ASYNC|SYNC]`; both modes empty every node before replying.
pub fn flushall(args: &Args, ctx: &mut Ctx) -> Pending {
    let mode_ok = match args.get(1) {
        None => true,
        Some(m) => args.len() == 2 && (m.eq_ignore_ascii_case(b"sync") || m.eq_ignore_ascii_case(b"async")),
    };
    if !mode_ok {
        return syntax_error().into();
    }
    let calls = ctx.call_all(|| op(Kind::Flush(proto::Flush {})));
    Pending::later(async move {
        match calls.gather().await {
            Ok(replies) => replies
                .into_iter()
                .find(|r| !matches!(r.kind, Some(reply::Kind::Ok(_))))
                .map_or(Reply::OK, plain),
            Err(e) => e.into(),
        }
    })
}

/// FLUSHDB: there is one database, so it is FLUSHALL.
pub fn flushdb(args: &Args, ctx: &mut Ctx) -> Pending {
    flushall(args, ctx)
}

pub fn keys(args: &Args, ctx: &mut Ctx) -> Pending {
    let pattern = args[1].clone();
    let calls = ctx.call_all(move || op(Kind::Keys(proto::Keys { pattern: pattern.clone() })));
    Pending::later(async move {
        match calls.gather().await {
            Ok(replies) => {
                // While slots move, a key can be on its old and its new owner: list it once.
                let mut seen = std::collections::HashSet::new();
                Reply::Array(
                    replies
                        .into_iter()
                        .flat_map(|r| match r.kind {
                            Some(reply::Kind::Keys(k)) => k.keys,
                            _ => Vec::new(),
                        })
                        .filter(|k| seen.insert(k.clone()))
                        .map(Reply::Bulk)
                        .collect(),
                )
            }
            Err(e) => e.into(),
        }
    })
}

/// RANDOMKEY: asks the nodes in a random order until one has a key.
pub fn randomkey(_args: &Args, ctx: &mut Ctx) -> Pending {
    let mut order: Vec<usize> = (0..ctx.routing.len()).collect();
    fastrand::shuffle(&mut order);
    let calls: Vec<_> =
        order.into_iter().map(|pos| ctx.call_at(pos, op(Kind::RandomKey(proto::RandomKey {})))).collect();
    Pending::later(async move {
        for call in calls {
            match call.wait().await {
                Ok(proto::Reply { kind: Some(reply::Kind::Nil(_)), .. }) => continue,
                Ok(r) => return plain(r),
                Err(e) => return e.into(),
            }
        }
        Reply::Nil
    })
}
