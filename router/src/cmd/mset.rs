//! MSET and MSETNX.
//!
//! MSET sends one group of SETs per node. Like Redis Cluster without hash tags, it is atomic per
//! node, not across nodes: a reader may briefly see some pairs set and not others.
//!
//! MSETNX is atomic when all keys live on one node (one MSetNx op, applied by the node as one
//! unit). Across nodes (or while one of the keys' slots moves) it checks that no key exists, then
//! sets each node's pairs: with one MSetNx per node, or SETNX per key for keys in moving slots.
//! A key created concurrently between the two steps makes the reply 0 while pairs already set
//! elsewhere stay set (documented in docs/architecture.md). Being two steps, it is a pipeline
//! barrier.

use bytes::Bytes;
use shoal_wire::proto::{self, op::Kind};

use super::spec::*;
use super::{Args, Ctx, Pending, gather, op, plain, reply_int, sum, wrong_arity};
use crate::backend::AtomicError;
use crate::resp::Reply;

pub const MSET: CommandSpec = CommandSpec { decl: &redis::MSET, run: mset, ..CommandSpec::DEFAULT };

pub const MSETNX: CommandSpec = CommandSpec { decl: &redis::MSETNX, run: msetnx, ..CommandSpec::DEFAULT };

fn pairs(args: &Args) -> impl Iterator<Item = (&Bytes, &Bytes)> {
    args[1..].chunks_exact(2).map(|p| (&p[0], &p[1]))
}

pub fn mset(args: &Args, ctx: &mut Ctx) -> Pending {
    if args.len().is_multiple_of(2) {
        return wrong_arity("mset").into();
    }
    let no_options = shoal_wire::command::ExtendedOptions::default();
    let call = ctx.call_keys(
        pairs(args)
            .map(|(k, v)| (k.clone(), shoal_wire::command::set_op(k.clone(), v.clone(), &no_options, None))),
    );
    Pending::later(async move {
        match gather(call).await {
            Ok(_) => Reply::OK,
            Err(e) => e,
        }
    })
}

fn msetnx_op(pairs: &[(Bytes, Bytes)]) -> proto::Op {
    let (keys, values) = pairs.iter().cloned().unzip();
    op(Kind::MsetNx(proto::MSetNx { keys, values }))
}

pub fn msetnx(args: &Args, ctx: &mut Ctx) -> Pending {
    if args.len().is_multiple_of(2) {
        return wrong_arity("msetnx").into();
    }
    let all: Vec<(Bytes, Bytes)> = pairs(args).map(|(k, v)| (k.clone(), v.clone())).collect();
    let keys: Vec<Bytes> = all.iter().map(|(k, _)| k.clone()).collect();
    // Atomic when the keys share a node; the backend says when they do not (now or after a
    // topology change), and nothing has run then.
    let atomic = ctx.call_atomic(keys.clone(), msetnx_op(&all));
    let (state, deadline) = (ctx.state.clone(), ctx.deadline);
    Pending::Barrier(Box::pin(async move {
        match atomic.wait().await {
            Ok(r) => return plain(r),
            Err(AtomicError::Backend(e)) => return e.into(),
            Err(AtomicError::Spread) => {}
        }
        let routing = state.backend.routing();
        let exists = keys.iter().map(|k| (k.clone(), op(Kind::Exists(proto::Exists { key: k.clone() }))));
        match sum(state.backend.keys(&routing, exists, deadline)).await {
            Reply::Int(0) => {}
            Reply::Int(_) => return Reply::Int(0),
            err => return err,
        }
        // Each node's pairs as one MSetNx; pairs in moving slots (or whose node changed since)
        // one by one as SET NX, which the backend routes through the move.
        let mut per_node: Vec<Vec<(Bytes, Bytes)>> = vec![Vec::new(); routing.len()];
        let mut alone = Vec::new();
        for (k, v) in all {
            match routing.locate(&k) {
                (pos, None) => per_node[pos].push((k, v)),
                (_, Some(_)) => alone.push((k, v)),
            }
        }
        let mut calls = Vec::new();
        for group in per_node.into_iter().filter(|g| !g.is_empty()) {
            let keys = group.iter().map(|(k, _)| k.clone()).collect();
            calls.push((state.backend.atomic(&routing, keys, msetnx_op(&group), deadline), group));
        }
        let nx = shoal_wire::command::ExtendedOptions { nx: true, ..Default::default() };
        let mut all_set = true;
        let mut by_key = Vec::new();
        for (call, group) in calls {
            match call.wait().await {
                Ok(r) => match reply_int(r) {
                    Ok(n) => all_set &= n == 1,
                    Err(e) => return e,
                },
                Err(AtomicError::Spread) => alone.extend(group),
                Err(AtomicError::Backend(e)) => return e.into(),
            }
        }
        for (k, v) in alone {
            by_key.push(state.backend.key(
                &routing,
                k.clone(),
                shoal_wire::command::set_op(k, v, &nx, None),
                deadline,
            ));
        }
        for call in by_key {
            match call.wait().await {
                Ok(r) => all_set &= matches!(r.kind, Some(proto::reply::Kind::Ok(_))),
                Err(e) => return e.into(),
            }
        }
        Reply::Int(i64::from(all_set))
    }))
}
