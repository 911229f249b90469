//! Which handler runs a command: the index of every command the node runs, by name, and the
//! dispatch that locks a command's keys and runs it. Below [`super::run`] and the keyspace
//! notifier (`crate::notify`), which look at the data through [`frame_of`].

use bytes::Bytes;

use super::args::int_arg;
use super::bits;
use super::error::{CmdError, CmdResult, make_room, wrong_arity};
use super::frame::F;
use super::geo;
use super::hash;
use super::hll;
use super::list;
use super::multi;
use super::object;
use super::set;
use super::sort;
use super::zset;
use super::{dump, hash_ttl, stream, stream_group, strings};
use crate::store::Store;
use crate::store::object::ValueType;

/// Runs a command for the node's own look at the data (no notifications): its frame, if it
/// answered one.
pub fn frame_of(store: &Store, args: &[Bytes]) -> Option<shoal_wire::proto::frame::Kind> {
    dispatch(store, args).ok().and_then(|f| f.kind)
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

/// What runs a command: a one-key handler, or a multi-key one with the function that finds its
/// keys (the shards of every key are locked together) and whether Redis flags it `denyoom`
/// (from Redis's table in `shoal_wire::acl`).
#[derive(Clone, Copy)]
enum Entry {
    One(OneKey),
    Multi(multi::KeysOf, multi::Handler, bool),
}

type OneKey = fn(&Store, &[Bytes]) -> CmdResult;

/// Every command the node runs, by lower-case name: one hash lookup per command, where trying
/// each family's name list in turn compared the name with dozens of others.
fn index() -> &'static std::collections::HashMap<&'static [u8], Entry> {
    static INDEX: std::sync::LazyLock<std::collections::HashMap<&'static [u8], Entry>> =
        std::sync::LazyLock::new(|| {
            let mut m = std::collections::HashMap::new();
            let ones: [(&str, OneKey); 5] = [
                ("object", object::object),
                ("debug", object::debug),
                ("memory", object::memory),
                ("shoal.restore", restore),
                ("pfadd", hll::pfadd),
            ];
            let families = [
                hash::TABLE,
                set::TABLE,
                list::TABLE,
                zset::TABLE,
                bits::TABLE,
                geo::TABLE,
                stream::TABLE,
                stream_group::TABLE,
                sort::TABLE,
                dump::TABLE,
                strings::TABLE,
                hash_ttl::TABLE,
            ];
            for (name, f) in ones.into_iter().chain(families.into_iter().flatten().copied()) {
                m.insert(name.as_bytes(), Entry::One(f));
            }
            for &(name, (keys_of, handler)) in multi::TABLE.iter().chain(geo::SEARCHES).chain(stream::READS) {
                m.insert(name.as_bytes(), Entry::Multi(keys_of, handler, denyoom(name)));
            }
            m
        });
    &INDEX
}

/// Whether Redis flags the command `denyoom` (refused with -OOM at the memory limit).
fn denyoom(name: &str) -> bool {
    use shoal_wire::acl::commands::{REDIS_COMMANDS, flag, lookup};
    lookup(name).is_some_and(|id| REDIS_COMMANDS[id].has_flag(flag::DENYOOM))
}

pub(super) fn dispatch(store: &Store, args: &[Bytes]) -> CmdResult {
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
    match index().get(name_lc) {
        Some(Entry::One(handler)) => handler(store, args),
        Some(Entry::Multi(keys_of, handler, denyoom)) => {
            let keys = keys_of(args)?;
            // Redis's `denyoom` multi-key commands: make room (or refuse with -OOM) before the
            // shards are locked (eviction takes shard locks of its own).
            if *denyoom {
                make_room(store)?;
            }
            let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
            store.with_keys(&keys, |l| handler(l, args))
        }
        None => Err(unknown(name)),
    }
}

/// The keys of a multi-key command the node runs (`name` lower case): `None` for other commands,
/// an error when its arguments do not say (a bad `numkeys`: the command answers that itself).
pub fn multi_key_keys(name: &[u8], args: &[Bytes]) -> Option<Result<Vec<Bytes>, CmdError>> {
    match index().get(name) {
        Some(Entry::Multi(keys_of, _, _)) => Some(keys_of(args)),
        _ => None,
    }
}

fn unknown(name: &[u8]) -> CmdError {
    CmdError::Owned(format!("ERR unknown command '{}'", String::from_utf8_lossy(name)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn denyoom_is_redis_s() {
        assert!(super::denyoom("sinterstore") && super::denyoom("copy") && super::denyoom("pfmerge"));
        assert!(!super::denyoom("sinter") && !super::denyoom("zmpop") && !super::denyoom("smove"));
    }
}
