//! Redis commands on typed values (hashes, ...), run on the node from a wire `Command` op.
//!
//! The router has looked the command up, checked its arity and routed it by its key; the node
//! parses the remaining arguments with Redis's rules and texts and answers a [`Frame`], which the
//! router encodes for the client's protocol (RESP2 or RESP3). Each family has its file:
//! [`hash`], [`list`], [`set`], [`zset`], [`hll`], [`multi`] (commands over several keys), [`object`], [`scan`] (HSCAN and its kin).
//!
//! Every handler runs inside one `Store::read_object`/`write_object` call, so a command is atomic
//! on its key, exactly as on a single-threaded Redis.

mod frame;
mod hash;
mod hll;
mod list;
mod multi;
mod object;
mod scan;
mod set;
mod zset;

use bytes::Bytes;
use shoal_wire::proto::{Reply, reply};

pub use frame::F;

use crate::store::object::ValueType;
use crate::store::{Store, StoreError};

/// A command's failure: its Redis error line.
pub type CmdResult = Result<shoal_wire::proto::Frame, CmdError>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmdError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Text(&'static str),
    #[error("{0}")]
    Owned(String),
}

pub const NOT_INTEGER: CmdError = CmdError::Text("ERR value is not an integer or out of range");
pub const SYNTAX: CmdError = CmdError::Text("ERR syntax error");

/// Runs the command `args` (name first) and wraps its answer as a reply.
pub fn run(store: &Store, args: &[Bytes]) -> Reply {
    frame_reply(dispatch(store, args))
}

fn frame_reply(r: CmdResult) -> Reply {
    let frame = r.unwrap_or_else(|e| F::error(e.to_string()));
    Reply { kind: Some(reply::Kind::Frame(frame)) }
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

/// `shoal.restore key [type expire_at_ms value]`: makes `key` hold exactly that value (or deletes
/// it): how the router writes back the results of a cross-node command. Not a client command
/// (the router never forwards this name).
fn restore(store: &Store, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    store.with_keys(&[key], |l| {
        if args.len() == 2 {
            l.delete(key);
            return Ok(F::ok());
        }
        if args.len() != 5 {
            return Err(wrong_arity(&args[0]));
        }
        let t = int_arg(&args[2])
            .ok()
            .and_then(|n| ValueType::from_u32(n as u32))
            .ok_or(CmdError::Text("ERR bad value type"))?;
        let expire_at = int_arg(&args[3])?.max(0) as u64;
        l.restore(key, &args[4], expire_at, t)?;
        Ok(F::ok())
    })
}

fn dispatch(store: &Store, args: &[Bytes]) -> CmdResult {
    let Some(name) = args.first() else { return Err(CmdError::Text("ERR empty command")) };
    if args.len() < 2 {
        return Err(wrong_arity(name));
    }
    let mut lower = [0u8; 24];
    if name.len() > lower.len() {
        return Err(unknown(name));
    }
    lower[..name.len()].copy_from_slice(name);
    lower[..name.len()].make_ascii_lowercase();
    let name_lc = &lower[..name.len()];
    if let Some((keys_of, handler)) = multi::find(name_lc) {
        let keys = keys_of(args)?;
        if name_lc == b"pfmerge" {
            // Denied at maxmemory like Redis's `denyoom` commands; checked before the shards
            // are locked, since eviction takes their locks.
            make_room(store)?;
        }
        let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        return store.with_keys(&keys, |l| handler(l, args));
    }
    match name_lc {
        b"object" => object::object(store, args),
        b"shoal.restore" => restore(store, args),
        b"pfadd" => hll::pfadd(store, args),
        _ => match hash::find(name_lc)
            .or_else(|| set::find(name_lc))
            .or_else(|| list::find(name_lc))
            .or_else(|| zset::find(name_lc))
        {
            Some(handler) => handler(store, args),
            None => Err(unknown(name)),
        },
    }
}

fn unknown(name: &[u8]) -> CmdError {
    CmdError::Owned(format!("ERR unknown command '{}'", String::from_utf8_lossy(name)))
}

pub fn wrong_arity(name: &[u8]) -> CmdError {
    CmdError::Owned(format!(
        "ERR wrong number of arguments for '{}' command",
        String::from_utf8_lossy(name).to_ascii_lowercase()
    ))
}

/// A Redis integer argument.
pub fn int_arg(b: &[u8]) -> Result<i64, CmdError> {
    shoal_wire::num::parse_i64(b).ok_or(NOT_INTEGER)
}

/// Refuses a write with `-OOM` when `maxmemory` is reached and nothing can be evicted (commands
/// Redis flags `denyoom`).
pub fn make_room(store: &Store) -> Result<(), CmdError> {
    store.make_room().map_err(CmdError::from)
}
