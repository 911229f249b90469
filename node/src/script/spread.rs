//! One `redis.call` over keys of several nodes (RPOPLPUSH from a queue's wait list to its active
//! list, RENAME, SUNIONSTORE, ...; BullMQ's scripts do the first two with its default key names).
//! The script holds every node it touches ([`super::reach`]), so nothing can come between the
//! steps below: the command is done as the router does it for its clients over several nodes
//! (`router/src/cmd/multi.rs`, classified by the same [`shoal_wire::cross::cross_of`]) without
//! the router's watch and retry:
//! - LMOVE/RPOPLPUSH and SMOVE: Redis's checks (types, the element or member), then the push
//!   (add) on the destination's node and only then the pop (removal) on the source's, so that a
//!   refused push leaves both keys as they were;
//! - LMPOP/ZMPOP and the blocking pops (which never block inside a script, as in Redis): one key
//!   at a time in order, each popped where it lives, until one has data;
//! - the rest: the keys' values fetched into a scratch store on this node, the command run
//!   there, and what it wrote (the destination; RENAME also deletes its source) written back
//!   where it lives.

use bytes::Bytes;
use shoal_wire::cross::{Cross, restore_command, side};
use shoal_wire::proto::{self, Frame, Op, frame, op::Kind, reply};

use super::reach::{CROSS_NODE, Place};
use crate::commands::F;
use crate::store::Store;

/// What the steps need of the script's run (`call.rs` gives it): where a key lives, an op
/// applied there (here, or over the hold on its node), and this node's store (for scratch).
pub(super) trait Steps {
    fn locate(&mut self, key: &[u8]) -> Result<Place, String>;
    fn apply_at(&mut self, place: Place, op: Op, write: bool) -> proto::Reply;
    fn store(&self) -> &Store;
}

fn op(kind: Kind) -> Op {
    Op { kind: Some(kind), ..Default::default() }
}

const WRONG_TYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// Runs `args`, whose keys (`keys`) live on several nodes the script holds.
pub(super) fn run(
    ctx: &mut impl Steps,
    cross: Cross,
    args: &[Bytes],
    keys: &[Bytes],
) -> Result<Frame, String> {
    match cross {
        Cross::Read => scratch(ctx, args, keys, &[]).map(|(reply, _)| reply),
        Cross::Replace { dst, if_changed, delete_source } => {
            let (reply, outputs) = scratch(ctx, args, keys, std::slice::from_ref(&args[dst]))?;
            let changed =
                !if_changed || matches!(reply.kind, Some(frame::Kind::Simple(_) | frame::Kind::Int(1..)));
            if !changed {
                return Ok(reply);
            }
            let restore = restore_command(&args[dst], outputs.into_iter().next())
                .map_err(|other| format!("ERR unexpected scratch output {other:?}"))?;
            on_key(ctx, restore, true)?;
            if delete_source {
                let src = args[1].clone();
                let place = ctx.locate(&src)?;
                if let Some(reply::Kind::Error(e)) =
                    ctx.apply_at(place, op(Kind::Del(proto::Del { key: src })), true).kind
                {
                    return Err(e);
                }
            }
            Ok(reply)
        }
        Cross::LMove => lmove(ctx, args),
        Cross::SMove => smove(ctx, args),
        Cross::MPop => {
            // Each key's own command: `BLPOP k timeout`, `BLMPOP timeout 1 k ...`, `LMPOP 1 k ...`
            // (a blocking command inside a script does not block, as in Redis).
            let name = args[0].to_ascii_lowercase();
            for k in keys {
                let (one, at) = match &name[..] {
                    b"blpop" | b"brpop" | b"bzpopmin" | b"bzpopmax" => {
                        (vec![args[0].clone(), k.clone(), args[args.len() - 1].clone()], 1)
                    }
                    b"blmpop" | b"bzmpop" => {
                        let mut one =
                            vec![args[0].clone(), args[1].clone(), Bytes::from_static(b"1"), k.clone()];
                        one.extend_from_slice(&args[3 + keys.len()..]);
                        (one, 3)
                    }
                    _ => {
                        let mut one = vec![args[0].clone(), Bytes::from_static(b"1"), k.clone()];
                        one.extend_from_slice(&args[2 + keys.len()..]);
                        (one, 2)
                    }
                };
                match on_key_at(ctx, one, at, true)?.kind {
                    Some(frame::Kind::NullArray(_) | frame::Kind::Nil(_)) | None => continue,
                    other => return Ok(Frame { kind: other }),
                }
            }
            Ok(F::null_array())
        }
        Cross::Refuse => Err(CROSS_NODE.into()),
    }
}

/// LMOVE and RPOPLPUSH: Redis's checks (a missing source answers nil, then both types), the
/// element at the source's end, pushed to the destination, then popped from the source.
fn lmove(ctx: &mut impl Steps, args: &[Bytes]) -> Result<Frame, String> {
    let (src, dst) = (&args[1], &args[2]);
    let name = args[0].to_ascii_lowercase();
    let (from_left, to_left) = if name.ends_with(b"rpoplpush") {
        (false, true)
    } else {
        match (side(&args[3]), side(&args[4])) {
            (Some(a), Some(b)) => (a, b),
            _ => return Err("ERR syntax error".into()),
        }
    };
    // BLMOVE and BRPOPLPUSH do not block in a script; finding nothing they answer a null array.
    let nothing = if name.starts_with(b"b") { F::null_array() } else { F::nil() };
    match &type_of(ctx, src)?[..] {
        b"none" => return Ok(nothing),
        b"list" => {}
        _ => return Err(WRONG_TYPE.into()),
    }
    if !matches!(&type_of(ctx, dst)?[..], b"none" | b"list") {
        return Err(WRONG_TYPE.into());
    }
    let at = Bytes::from_static(if from_left { b"0" } else { b"-1" });
    let Some(frame::Kind::Bulk(element)) = on_key(ctx, words(&["lindex"], &[src, &at]), false)?.kind else {
        return Ok(nothing);
    };
    on_key(ctx, words(&[if to_left { "lpush" } else { "rpush" }], &[dst, &element]), true)?;
    on_key(ctx, words(&[if from_left { "lpop" } else { "rpop" }], &[src]), true)?;
    Ok(F::bulk(element))
}

/// SMOVE: Redis's checks (a missing source answers 0, then both types, then the member), the
/// member added to the destination, then removed from the source.
fn smove(ctx: &mut impl Steps, args: &[Bytes]) -> Result<Frame, String> {
    let (src, dst, member) = (&args[1], &args[2], &args[3]);
    match &type_of(ctx, src)?[..] {
        b"none" => return Ok(F::int(0)),
        b"set" => {}
        _ => return Err(WRONG_TYPE.into()),
    }
    if !matches!(&type_of(ctx, dst)?[..], b"none" | b"set") {
        return Err(WRONG_TYPE.into());
    }
    if on_key(ctx, words(&["sismember"], &[src, member]), false)?.kind != Some(frame::Kind::Int(1)) {
        return Ok(F::int(0));
    }
    on_key(ctx, words(&["sadd"], &[dst, member]), true)?;
    on_key(ctx, words(&["srem"], &[src, member]), true)?;
    Ok(F::int(1))
}

/// Runs `args` on a scratch store holding the values of `keys` (fetched where they live); its
/// reply, and the values of `outputs` afterwards (`[type, expire_at_ms, value]` or nil).
fn scratch(
    ctx: &mut impl Steps,
    args: &[Bytes],
    keys: &[Bytes],
    outputs: &[Bytes],
) -> Result<(Frame, Vec<Frame>), String> {
    let mut inputs = Vec::with_capacity(keys.len());
    for (i, key) in keys.iter().enumerate() {
        if keys[..i].contains(key) {
            continue;
        }
        let place = ctx.locate(key)?;
        match ctx.apply_at(place, op(Kind::Fetch(proto::Fetch { key: key.clone() })), false).kind {
            Some(reply::Kind::Entry(e)) => inputs.push(*e),
            Some(reply::Kind::Error(e)) => return Err(e),
            _ => {}
        }
    }
    match crate::commands::run_scratch(ctx.store(), args, &inputs, outputs).kind {
        Some(reply::Kind::Frame(Frame { kind: Some(frame::Kind::Array(items)) })) => {
            let mut items = items.items.into_iter();
            Ok((items.next().unwrap_or_else(F::nil), items.collect()))
        }
        Some(reply::Kind::Frame(Frame { kind: Some(frame::Kind::Error(e)) })) => Err(e),
        other => Err(format!("ERR unexpected scratch reply {other:?}")),
    }
}

/// The type of `key`'s value, asked where it lives (`none` when missing).
fn type_of(ctx: &mut impl Steps, key: &Bytes) -> Result<Bytes, String> {
    let place = ctx.locate(key)?;
    match ctx.apply_at(place, op(Kind::TypeOf(proto::TypeOf { key: key.clone() })), false).kind {
        Some(reply::Kind::Value(v)) => Ok(v),
        Some(reply::Kind::Error(e)) => Err(e),
        other => Err(format!("ERR unexpected reply {other:?}")),
    }
}

/// A one-key command (its key is `args[1]`) where its key lives; an error answer is `Err`.
fn on_key(ctx: &mut impl Steps, args: Vec<Bytes>, write: bool) -> Result<Frame, String> {
    on_key_at(ctx, args, 1, write)
}

/// A one-key command whose key is `args[at]`, where its key lives.
fn on_key_at(ctx: &mut impl Steps, args: Vec<Bytes>, at: usize, write: bool) -> Result<Frame, String> {
    let place = ctx.locate(&args[at])?;
    let c = proto::Command { args, readonly: !write, key_index: at as u32, ..Default::default() };
    let o: Op = op(Kind::Command(Box::new(c)));
    match ctx.apply_at(place, o, write).kind {
        Some(reply::Kind::Frame(Frame { kind: Some(frame::Kind::Error(e)) }))
        | Some(reply::Kind::Error(e)) => Err(e),
        Some(reply::Kind::Frame(f)) => Ok(f),
        other => Err(format!("ERR unexpected reply {other:?}")),
    }
}

fn words(name: &[&str], args: &[&Bytes]) -> Vec<Bytes> {
    name.iter()
        .map(|n| Bytes::copy_from_slice(n.as_bytes()))
        .chain(args.iter().map(|a| (*a).clone()))
        .collect()
}
