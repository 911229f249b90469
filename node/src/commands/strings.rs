//! String commands the node runs by name rather than as typed ops: DELIFEQ (Valkey 9.0), the
//! lock release that used to take a script (`if GET == token then DEL`), in one atomic step.

use bytes::Bytes;

use super::error::CmdResult;
use super::frame::F;
use crate::store::Store;
use crate::store::object::ValueType;

type Handler = fn(&Store, &[Bytes]) -> CmdResult;

pub static TABLE: &[(&str, Handler)] = &[("delifeq", delifeq), ("shoal-room", room)];

/// `shoal-room key` (the router's own, never a client's: no router lists it): whether a write to
/// the key's node may grow memory now, evicting as a write would; OOM if not. The router asks it
/// for a `denyoom` command queued in MULTI, as Redis refuses one at queueing when memory is full.
fn room(store: &Store, _args: &[Bytes]) -> CmdResult {
    super::error::make_room(store)?;
    Ok(F::ok())
}

/// `DELIFEQ key value`: 1 when the key held exactly `value` and is deleted, else 0 (a missing
/// key, another value); WRONGTYPE for a key of another type, as Valkey answers.
fn delifeq(store: &Store, args: &[Bytes]) -> CmdResult {
    if args.len() != 3 {
        return Err(super::error::wrong_arity(&args[0]));
    }
    let (key, expected) = (&args[1], &args[2]);
    store.with_keys(&[key], |l| {
        match l.value_type(key) {
            None => return Ok(F::int(0)),
            Some(ValueType::String) => {}
            Some(_) => return Err(crate::store::StoreError::WrongType.into()),
        }
        let equal = l.read_string(key, |v| v == Some(&expected[..]))?;
        Ok(F::int(i64::from(equal && l.delete(key))))
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::{ManualClock, SetOptions, StoreConfig};

    fn run(store: &Store, args: &[&str]) -> CmdResult {
        let args: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a.as_bytes())).collect();
        delifeq(store, &args)
    }

    #[test]
    fn deletes_only_an_equal_string() {
        let store = Store::new(StoreConfig::default(), Arc::new(ManualClock::new(1_000)));
        store.set(b"lock", b"token-1", SetOptions::default()).unwrap();
        assert_eq!(run(&store, &["delifeq", "lock", "token-2"]).unwrap(), F::int(0));
        assert!(store.exists(b"lock"));
        assert_eq!(run(&store, &["delifeq", "lock", "token-1"]).unwrap(), F::int(1));
        assert!(!store.exists(b"lock"));
        assert_eq!(run(&store, &["delifeq", "lock", "token-1"]).unwrap(), F::int(0), "gone");
        store
            .write_object(b"h", ValueType::Hash, |slot, limits| {
                let o = slot
                    .get_or_insert_with(|| Box::new(crate::store::object::Object::empty(ValueType::Hash)));
                let crate::store::object::Object::Hash(h) = &mut **o else { unreachable!() };
                h.set(b"f", b"v", limits)
            })
            .unwrap();
        let wrong = run(&store, &["delifeq", "h", "v"]).unwrap_err();
        assert_eq!(wrong, crate::store::StoreError::WrongType.into());
        assert!(run(&store, &["delifeq", "h"]).is_err(), "arity");
    }
}
