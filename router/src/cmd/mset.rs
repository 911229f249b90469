//! MSET and MSETNX.
//!
//! MSET sends one group of SETs per node. Like Redis Cluster without hash tags, it is atomic per
//! node, not across nodes: a reader may briefly see some pairs set and not others.
//!
//! MSETNX is atomic when all keys live on one node (one MSetNx op). Across nodes it checks that
//! no key exists, then runs MSetNx on every node; a key created concurrently between the two
//! steps makes that node refuse, the reply is 0, and pairs already set on other nodes stay set
//! (documented in docs/architecture.md). Being two steps, it is a pipeline barrier.

use std::sync::Arc;

use bytes::Bytes;
use shoal_wire::proto::{self, op::Kind};

use super::{Args, Ctx, Pending, backend_error, fan_out, op, plain, reply_int, wrong_arity};
use crate::resp::Reply;

fn pairs(args: &Args) -> impl Iterator<Item = (&Bytes, &Bytes)> {
    args[1..].chunks_exact(2).map(|p| (&p[0], &p[1]))
}

pub fn mset(args: &Args, ctx: &mut Ctx) -> Pending {
    if args.len().is_multiple_of(2) {
        return wrong_arity("mset").into();
    }
    let no_options = super::set::ExtendedOptions::default();
    let calls = fan_out(
        ctx,
        pairs(args).map(|(k, v)| (k.clone(), super::set::set_op(k.clone(), v.clone(), &no_options, None))),
    );
    Pending::later(async move {
        match calls.gather().await {
            Ok(_) => Reply::OK,
            Err(e) => e,
        }
    })
}

pub fn msetnx(args: &Args, ctx: &mut Ctx) -> Pending {
    if args.len().is_multiple_of(2) {
        return wrong_arity("msetnx").into();
    }
    // Pairs grouped by owning node, in argument order within each group.
    let mut groups: Vec<(Vec<Bytes>, Vec<Bytes>)> = vec![Default::default(); ctx.routing.len()];
    let mut moving = false;
    for (k, v) in pairs(args) {
        let (pos, from) = ctx.routing.locate(k);
        moving |= from.is_some();
        groups[pos].0.push(k.clone());
        groups[pos].1.push(v.clone());
    }
    let involved: Vec<usize> = (0..groups.len()).filter(|&p| !groups[p].0.is_empty()).collect();
    let msetnx_op = |g: &(Vec<Bytes>, Vec<Bytes>)| {
        op(Kind::MsetNx(proto::MSetNx { keys: g.0.clone(), values: g.1.clone() }))
    };
    if let ([only], false) = (&involved[..], moving) {
        let first = groups[*only].0[0].clone();
        return Pending::Call(ctx.call(&first, msetnx_op(&groups[*only])), plain);
    }
    let exists = fan_out(
        ctx,
        pairs(args).map(|(k, _)| (k.clone(), op(Kind::Exists(proto::Exists { key: k.clone() })))),
    );
    let routing = Arc::clone(ctx.routing);
    let deadline = ctx.deadline;
    Pending::Barrier(Box::pin(async move {
        match exists.sum().await {
            Reply::Int(0) => {}
            Reply::Int(_) => return Reply::Int(0),
            err => return err,
        }
        let calls: Vec<_> = involved
            .iter()
            .map(|&p| routing.links[p].call(msetnx_op(&groups[p]), routing.version(), deadline))
            .collect();
        let mut all_set = true;
        for call in calls {
            match call.wait().await.map_err(backend_error).and_then(reply_int) {
                Ok(n) => all_set &= n == 1,
                Err(e) => return e,
            }
        }
        Reply::Int(i64::from(all_set))
    }))
}
