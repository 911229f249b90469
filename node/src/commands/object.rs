//! OBJECT ENCODING/FREQ/IDLETIME/REFCOUNT (HELP is answered by the router).

use bytes::Bytes;

use super::error::{CmdError, CmdResult};
use super::frame::F;
use crate::store::object::ValueType;
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
        (b"refcount", Some(i)) => {
            let shared = i.value_type == ValueType::String
                && i.encoding == "int"
                && store
                    .get(key)
                    .and_then(|v| shoal_wire::num::parse_i64(&v))
                    .is_some_and(|n| (0..10_000).contains(&n));
            F::int(if shared { SHARED_REFCOUNT } else { 1 })
        }
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
