//! OBJECT ENCODING/FREQ/IDLETIME/REFCOUNT (HELP is answered by the router), MEMORY USAGE and
//! DEBUG OBJECT: what the node knows of a key, read without touching it.

use bytes::Bytes;

use super::error::{CmdError, CmdResult};
use super::frame::F;
use super::payload;
use crate::store::object::{Object, ValueType};
use crate::store::{KeyInfo, Store};

/// Redis's OBJ_SHARED_REFCOUNT: what REFCOUNT says of the shared small integers.
const SHARED_REFCOUNT: i64 = i32::MAX as i64;

/// `MEMORY USAGE key [SAMPLES count]`: the bytes the key costs here (entry, key, value), as the
/// node accounts them for maxmemory; every element is counted (SAMPLES is checked, not needed).
pub fn memory(store: &Store, args: &[Bytes]) -> CmdResult {
    if !args[1].eq_ignore_ascii_case(b"usage") {
        return Err(CmdError::Owned(format!(
            "ERR unknown subcommand '{}'. Try MEMORY HELP.",
            String::from_utf8_lossy(&args[1])
        )));
    }
    let key = args.get(2).ok_or_else(|| super::error::wrong_arity(b"memory|usage"))?;
    match &args[3..] {
        [] => {}
        [opt, n] if opt.eq_ignore_ascii_case(b"samples") => {
            super::args::int_arg(n)?;
        }
        _ => return Err(super::error::SYNTAX),
    }
    Ok(store.key_info(key).map_or_else(F::nil, |i| F::int(i.memory as i64)))
}

pub fn object(store: &Store, args: &[Bytes]) -> CmdResult {
    let sub = args[1].to_ascii_lowercase();
    let Some(key) = args.get(2) else { return Err(super::error::wrong_arity(b"object")) };
    let info = store.key_info(key);
    Ok(match (&sub[..], info) {
        (b"encoding", None) | (b"idletime", None) | (b"refcount", None) | (b"freq", None) => F::nil(),
        (b"encoding", Some(i)) => F::bulk(i.encoding),
        (b"idletime", Some(i)) if i.freq.is_none() => F::int(i.idle_secs as i64),
        (b"idletime", Some(_)) => {
            return Err(CmdError::Text(
                "ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when \
                 switching between policies at runtime LRU and LFU data will take some time to adjust.",
            ));
        }
        (b"freq", Some(KeyInfo { freq: Some(f), .. })) => F::int(i64::from(f)),
        (b"refcount", Some(i)) => F::int(object_refcount(store, key, &i)),
        (b"freq", Some(_)) => {
            return Err(CmdError::Text(
                "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that \
                 when switching between policies at runtime LRU and LFU data will take some time to adjust.",
            ));
        }
        _ => {
            return Err(CmdError::Owned(format!(
                "ERR unknown subcommand '{}'. Try OBJECT HELP.",
                String::from_utf8_lossy(&args[1])
            )));
        }
    })
}

/// `DEBUG OBJECT key` (the router sends only this subcommand here, and only when
/// `enable-debug-command` allows DEBUG): Redis's line about the value, read without touching it.
/// `Value at` is the node's own address of the entry's data, `serializedlength` the length of
/// the value's RDB encoding (what DUMP writes, less its type byte, version and checksum), `lru`
/// the access clock in seconds on Redis's 24-bit clock; a list adds its chunk counts as Redis's
/// `ql_*` fields (Shoal's chunks are Redis's quicklist nodes; none is ever compressed).
pub fn debug(store: &Store, args: &[Bytes]) -> CmdResult {
    if args.len() != 3 || !args[1].eq_ignore_ascii_case(b"object") {
        return Err(CmdError::Owned(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try DEBUG HELP.",
            String::from_utf8_lossy(&args[1])
        )));
    }
    let key = &args[2];
    let Some(info) = store.key_info(key) else { return Err(CmdError::Text("ERR no such key")) };
    let detail = crate::store::without_touching(|| {
        store.with_keys(&[key], |l| -> Result<_, CmdError> {
            if info.value_type == ValueType::String {
                return Ok(l.read_string(key, |v| v.map(|v| (payload::dump_string(v).len(), None)))?);
            }
            Ok(l.read_object(key, info.value_type, |o| {
                o.map(|o| {
                    let chunks = match o {
                        Object::List(list) => Some((list.chunk_stats(), list.len(), list.fill)),
                        _ => None,
                    };
                    (payload::dump_object(o).len(), chunks)
                })
            })?)
        })
    })?;
    let Some((dumped, chunks)) = detail else { return Err(CmdError::Text("ERR no such key")) };
    let refcount = object_refcount(store, key, &info);
    let mut line = format!(
        "Value at:{:p} refcount:{refcount} encoding:{} serializedlength:{} lru:{} lru_seconds_idle:{}",
        key.as_ptr(),
        info.encoding,
        dumped.saturating_sub(11),
        info.lru_secs,
        info.idle_secs
    );
    if let Some(((nodes, bytes), len, fill)) = chunks {
        let avg = if nodes == 0 { 0.0 } else { len as f64 / nodes as f64 };
        line.push_str(&format!(
            " ql_nodes:{nodes} ql_avg_node:{avg:.2} ql_listpack_max:{fill} ql_compressed:0 ql_uncompressed_size:{bytes}"
        ));
    }
    Ok(F::status(&line))
}

/// OBJECT REFCOUNT's answer for an existing key (read without touching it, as OBJECT reads).
fn object_refcount(store: &Store, key: &[u8], info: &KeyInfo) -> i64 {
    let shared = info.value_type == ValueType::String
        && info.encoding == "int"
        && crate::store::without_touching(|| store.get(key))
            .and_then(|v| shoal_wire::num::parse_i64(&v))
            .is_some_and(|n| (0..10_000).contains(&n));
    if shared { SHARED_REFCOUNT } else { 1 }
}
