//! Running a command for a client: its keyspace notifications raised around it
//! (`crate::notify`), its answer wrapped as a wire reply (a frame, or RESP bytes).

use bytes::Bytes;
use shoal_wire::proto::{ErrorKind, Reply, reply};

use super::dispatch::dispatch;
use super::error::CmdResult;
use super::frame::{self, F};
use crate::store::Store;

/// Runs the command `args` (name first) and wraps its answer as a reply.
pub fn run(store: &Store, args: &[Bytes]) -> Reply {
    frame_reply(crate::notify::command(store, args, || dispatch(store, args)))
}

/// Like [`run`], answering the reply encoded in RESP2 or RESP3 (what the router writes to its
/// client as is: one-key commands, which it does not need to look into).
pub fn run_resp(store: &Store, args: &[Bytes], resp3: bool) -> Reply {
    let (frame, kind) = match crate::notify::command(store, args, || dispatch(store, args)) {
        Ok(f) => (f, ErrorKind::Other),
        Err(e) => (F::error(e.to_string()), e.kind()),
    };
    let mut out = Vec::with_capacity(64);
    frame::encode(&frame, resp3, &mut out);
    Reply { kind: Some(reply::Kind::Resp(out.into())), error_kind: kind as i32 }
}

fn frame_reply(r: CmdResult) -> Reply {
    let (frame, kind) = match r {
        Ok(f) => (f, ErrorKind::Other),
        Err(e) => (F::error(e.to_string()), e.kind()),
    };
    Reply { kind: Some(reply::Kind::Frame(frame)), error_kind: kind as i32 }
}

/// Runs a multi-key command whose keys live on several nodes: the router has fetched every key's
/// value (`inputs`; absent keys left out), the command runs on a scratch store holding just those,
/// and the reply is `[the command's reply, then per key of `outputs` its value afterwards as
/// [type, expire_at_ms, serialized value] or nil]`. The router writes those back to their owners
/// with `shoal.restore` (not atomic across nodes, as documented).
pub fn run_scratch(
    store: &Store,
    args: &[Bytes],
    inputs: &[shoal_wire::proto::ExportEntry],
    outputs: &[Bytes],
) -> Reply {
    let scratch = store.scratch();
    scratch.import(inputs.iter().map(|e| (&e.key[..], &e.value[..], e.expire_at_ms, e.value_type)));
    let reply = match dispatch(&scratch, args) {
        Ok(f) => f,
        Err(e) => return frame_reply(Err(e)),
    };
    let mut items = vec![reply];
    for k in outputs {
        items.push(match scratch.with_keys(&[k], |l| l.export(k)) {
            Some((value, expire_at, t)) => {
                F::array(vec![F::int(t as i64), F::int(expire_at as i64), F::bulk(value)])
            }
            None => F::nil(),
        });
    }
    frame_reply(Ok(F::array(items)))
}
