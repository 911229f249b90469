//! Commands the node runs whole: typed-value commands (hashes, ...) travel as one `Command` op
//! to their key's node, which parses the arguments and answers a `Frame`; this file routes them
//! and turns the frame into a [`Reply`] for the client's protocol.

use shoal_wire::proto::{self, Frame, frame, op::Kind, reply};

use super::{Args, Ctx, Pending, op, unexpected};
use crate::resp::Reply;

/// A command that only reads its key (asked of a moving slot's new owner first, then the old).
pub fn read_key(args: &Args, ctx: &mut Ctx) -> Pending {
    forward(args, ctx, true)
}

/// A command that changes its key (the key is brought to a moving slot's new owner first).
pub fn write_key(args: &Args, ctx: &mut Ctx) -> Pending {
    forward(args, ctx, false)
}

/// A read-only subcommand whose key is the third argument (`OBJECT ENCODING key`).
pub fn read_second(args: &Args, ctx: &mut Ctx) -> Pending {
    let key = args[2].clone();
    let command = proto::Command { args: args.to_vec(), readonly: true, key_index: 2, ..Default::default() };
    Pending::Call(ctx.call(&key, op(Kind::Command(Box::new(command)))), from_node)
}

/// A subcommand that changes the key in its third argument (`XGROUP CREATE key ...`).
pub fn write_second(args: &Args, ctx: &mut Ctx) -> Pending {
    let key = args[2].clone();
    let command = proto::Command { args: args.to_vec(), readonly: false, key_index: 2, ..Default::default() };
    Pending::Call(ctx.call(&key, op(Kind::Command(Box::new(command)))), from_node)
}

fn forward(args: &Args, ctx: &mut Ctx, readonly: bool) -> Pending {
    let key = args[1].clone();
    // The node encodes the reply for this connection's protocol: the router passes it on.
    let resp = ctx.session.protocol().version() as u32;
    let command = proto::Command { args: args.to_vec(), readonly, key_index: 1, resp, ..Default::default() };
    Pending::Call(ctx.call(&key, op(Kind::Command(Box::new(command)))), from_node)
}

/// A node's reply to a `Command` op.
pub fn from_node(r: proto::Reply) -> Reply {
    match r.kind {
        Some(reply::Kind::Frame(f)) => from_frame(f),
        Some(reply::Kind::Resp(bytes)) => Reply::Raw(bytes),
        Some(reply::Kind::Error(e)) => Reply::error_fmt(e),
        other => unexpected(other),
    }
}

/// Flat `k1 v1 k2 v2 ...` as pairs.
fn paired(flat: Vec<Reply>) -> Vec<(Reply, Reply)> {
    let mut flat = flat.into_iter();
    let mut pairs = Vec::with_capacity(flat.len() / 2);
    while let (Some(k), Some(v)) = (flat.next(), flat.next()) {
        pairs.push((k, v));
    }
    pairs
}

pub fn from_frame(f: Frame) -> Reply {
    use frame::Kind as K;
    let list = |items: proto::Frames| items.items.into_iter().map(from_frame).collect::<Vec<_>>();
    match f.kind {
        Some(K::Bulk(b)) => Reply::Bulk(b),
        Some(K::Int(n)) => Reply::Int(n),
        Some(K::Error(e)) => Reply::error_fmt(e),
        Some(K::Nil(_)) | None => Reply::Nil,
        Some(K::NullArray(_)) => Reply::NilArray,
        Some(K::Array(items)) => Reply::Array(list(items)),
        Some(K::Set(items)) => Reply::Set(list(items)),
        Some(K::Pairs(items)) => Reply::Pairs(list(items)),
        Some(K::Map(items)) => Reply::Map(paired(list(items))),
        Some(K::Keyed(items)) => Reply::Keyed(paired(list(items))),
        Some(K::Double(d)) => Reply::Double(d),
        Some(K::Simple(s)) => Reply::Simple(s.into()),
        Some(K::Raw(bytes)) => Reply::Raw(bytes),
        Some(K::Boolean(b)) => Reply::Boolean(b),
        Some(K::BigNumber(n)) => Reply::BigNumber(n),
        Some(K::Verbatim(v)) => Reply::VerbatimAs(v),
    }
}
