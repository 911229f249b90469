//! Hash commands: HSET HSETNX HMSET HGET HMGET HGETALL HDEL HEXISTS HLEN HSTRLEN HKEYS HVALS
//! HINCRBY HINCRBYFLOAT HRANDFIELD HSCAN.

use super::args::int_arg;
use super::error::{CmdError, CmdResult, make_room, wrong_arity};
use super::frame::F;
use super::random::{self, Whole};
use crate::store::object::{Hash, Object, ValueType};
use crate::store::{Store, float};
use bytes::Bytes;

type Handler = fn(&Store, &[Bytes]) -> CmdResult;

/// The commands of this family by name (lower case), for the node's command index (`super::index`).
pub static TABLE: &[(&str, Handler)] = &[
    ("hset", hset),
    ("hmset", hmset),
    ("hsetnx", hsetnx),
    ("hget", hget),
    ("hmget", hmget),
    ("hgetall", hgetall),
    ("hdel", hdel),
    ("hexists", hexists),
    ("hlen", hlen),
    ("hstrlen", hstrlen),
    ("hkeys", hkeys),
    ("hvals", hvals),
    ("hincrby", hincrby),
    ("hincrbyfloat", hincrbyfloat),
    ("hrandfield", hrandfield),
    ("hscan", super::scan::hscan),
];

/// Runs `f` on the hash at `args[1]` (`None`: no such key).
fn read<R>(store: &Store, args: &[Bytes], f: impl FnOnce(Option<&Hash>) -> R) -> Result<R, CmdError> {
    Ok(store.read_object(&args[1], ValueType::Hash, |o| {
        f(o.map(|o| match o {
            Object::Hash(h) => h,
            _ => unreachable!("type checked by the store"),
        }))
    })?)
}

/// Runs `f` on the hash at `args[1]` for a change, creating it if missing.
fn write<R>(
    store: &Store,
    args: &[Bytes],
    f: impl FnOnce(&mut Hash, &crate::store::object::Limits) -> R,
) -> Result<R, CmdError> {
    Ok(store.write_object(&args[1], ValueType::Hash, |slot, limits| {
        let o = slot.get_or_insert_with(|| Box::new(Object::empty(ValueType::Hash)));
        match &mut **o {
            Object::Hash(h) => f(h, limits),
            _ => unreachable!("type checked by the store"),
        }
    })?)
}

fn set_pairs(store: &Store, args: &[Bytes]) -> Result<i64, CmdError> {
    if !args.len().is_multiple_of(2) {
        return Err(wrong_arity(&args[0]));
    }
    make_room(store)?;
    write(store, args, |h, limits| args[2..].chunks(2).map(|p| i64::from(h.set(&p[0], &p[1], limits))).sum())
}

fn hset(store: &Store, args: &[Bytes]) -> CmdResult {
    set_pairs(store, args).map(F::int)
}

fn hmset(store: &Store, args: &[Bytes]) -> CmdResult {
    set_pairs(store, args).map(|_| F::ok())
}

fn hsetnx(store: &Store, args: &[Bytes]) -> CmdResult {
    make_room(store)?;
    write(store, args, |h, limits| {
        if h.get(&args[2]).is_some() {
            F::int(0)
        } else {
            F::int(i64::from(h.set(&args[2], &args[3], limits)))
        }
    })
}

fn hget(store: &Store, args: &[Bytes]) -> CmdResult {
    read(store, args, |h| F::bulk_or_nil(h.and_then(|h| h.get(&args[2]))))
}

fn hmget(store: &Store, args: &[Bytes]) -> CmdResult {
    read(store, args, |h| {
        F::array(args[2..].iter().map(|f| F::bulk_or_nil(h.and_then(|h| h.get(f)))).collect())
    })
}

fn hgetall(store: &Store, args: &[Bytes]) -> CmdResult {
    read(store, args, |h| {
        let mut flat = Vec::with_capacity(h.map_or(0, |h| h.len() * 2));
        for (f, v) in h.into_iter().flat_map(|h| h.iter()) {
            flat.push(F::bulk_from(f));
            flat.push(F::bulk_from(v));
        }
        F::map(flat)
    })
}

fn hkeys(store: &Store, args: &[Bytes]) -> CmdResult {
    read(store, args, |h| F::bulk_array(h.into_iter().flat_map(|h| h.iter()).map(|(f, _)| f)))
}

fn hvals(store: &Store, args: &[Bytes]) -> CmdResult {
    read(store, args, |h| F::bulk_array(h.into_iter().flat_map(|h| h.iter()).map(|(_, v)| v)))
}

fn hdel(store: &Store, args: &[Bytes]) -> CmdResult {
    // Not `write`: a missing key must stay missing.
    Ok(F::int(store.write_object(&args[1], ValueType::Hash, |slot, _| match slot.as_deref_mut() {
        Some(Object::Hash(h)) => args[2..].iter().map(|f| i64::from(h.remove(f))).sum(),
        _ => 0,
    })?))
}

fn hexists(store: &Store, args: &[Bytes]) -> CmdResult {
    read(store, args, |h| F::int(i64::from(h.is_some_and(|h| h.get(&args[2]).is_some()))))
}

fn hlen(store: &Store, args: &[Bytes]) -> CmdResult {
    read(store, args, |h| F::int(h.map_or(0, |h| h.len() as i64)))
}

fn hstrlen(store: &Store, args: &[Bytes]) -> CmdResult {
    read(store, args, |h| F::int(h.and_then(|h| h.get(&args[2])).map_or(0, |v| v.len() as i64)))
}

fn hincrby(store: &Store, args: &[Bytes]) -> CmdResult {
    let delta = int_arg(&args[3])?;
    make_room(store)?;
    write(store, args, |h, limits| {
        let current = match h.get(&args[2]) {
            Some(v) => {
                shoal_wire::num::parse_i64(v).ok_or(CmdError::Text("ERR hash value is not an integer"))?
            }
            None => 0,
        };
        let next =
            current.checked_add(delta).ok_or(CmdError::Text("ERR increment or decrement would overflow"))?;
        h.set_keep_ttl(&args[2], &shoal_wire::num::format_i64(next), limits);
        Ok(F::int(next))
    })?
}

fn hincrbyfloat(store: &Store, args: &[Bytes]) -> CmdResult {
    match float::parse(&args[3]) {
        None => return Err(CmdError::Store(float::FloatError::NotFloat.into())),
        Some(x) if !rustc_apfloat::Float::is_finite(x) => {
            return Err(CmdError::Text("ERR value is NaN or Infinity"));
        }
        Some(_) => {}
    }
    make_room(store)?;
    write(store, args, |h, limits| {
        let current = h.get(&args[2]).unwrap_or(b"0");
        if float::parse(current).is_none() {
            return Err(CmdError::Text("ERR hash value is not a float"));
        }
        let next = float::incr_by_float(current, &args[3]).map_err(|e| CmdError::Store(e.into()))?;
        h.set_keep_ttl(&args[2], &next, limits);
        Ok(F::bulk(next))
    })?
}

fn hrandfield(store: &Store, args: &[Bytes]) -> CmdResult {
    if args.len() == 2 {
        return read(store, args, |h| {
            let h = h.filter(|h| !h.is_empty())?;
            let i = fastrand::usize(..h.len());
            h.iter().nth(i).map(|(f, _)| F::bulk_from(f))
        })
        .map(|f| f.unwrap_or_else(F::nil));
    }
    let count = random::parse(args, Some(b"withvalues"))?;
    let with_values = count.with;
    read(store, args, |h| {
        let Some(h) = h else { return F::array(Vec::new()) };
        let pairs: Vec<(&[u8], &[u8])> = h.iter().collect();
        let picked = match random::picks(count.n, pairs.len(), Whole::Forward, false) {
            Ok(p) => p,
            Err(e) => return F::error(e.to_string()),
        };
        let mut flat = Vec::with_capacity(picked.len() * if with_values { 2 } else { 1 });
        for i in picked {
            flat.push(F::bulk_from(pairs[i].0));
            if with_values {
                flat.push(F::bulk_from(pairs[i].1));
            }
        }
        if with_values { F::pairs(flat) } else { F::array(flat) }
    })
}
