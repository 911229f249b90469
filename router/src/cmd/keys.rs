//! Whole-keyspace commands, fanned out to every node: DBSIZE, FLUSHALL, FLUSHDB, KEYS, RANDOMKEY.

use shoal_wire::proto::{self, op::Kind, reply};

use super::spec::*;
use super::{Args, Ctx, Pending, op, plain, sum_ints, syntax_error};
use crate::resp::Reply;

pub const DBSIZE: CommandSpec = CommandSpec { decl: &redis::DBSIZE, run: dbsize, ..CommandSpec::DEFAULT };

pub const FLUSHALL: CommandSpec =
    CommandSpec { decl: &redis::FLUSHALL, run: flushall, ..CommandSpec::DEFAULT };

pub const FLUSHDB: CommandSpec = CommandSpec { decl: &redis::FLUSHDB, run: flushdb, ..CommandSpec::DEFAULT };

pub const KEYS: CommandSpec = CommandSpec { decl: &redis::KEYS, run: keys, ..CommandSpec::DEFAULT };

pub const RANDOMKEY: CommandSpec =
    CommandSpec { decl: &redis::RANDOMKEY, run: randomkey, ..CommandSpec::DEFAULT };

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
