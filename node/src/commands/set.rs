//! Set commands on one key: SADD SREM SMEMBERS SISMEMBER SMISMEMBER SCARD SPOP SRANDMEMBER SSCAN.
//! (The multi-key ones, SINTER and friends, are in `multi.rs`.)

use bytes::Bytes;

use super::args::positive_count;
use super::error::{CmdError, CmdResult, SYNTAX, make_room};
use super::frame::F;
use super::random::{self, Whole};
use crate::store::Store;
use crate::store::object::{Limits, Object, Set, ValueType};

type Handler = fn(&Store, &[Bytes]) -> CmdResult;

/// The commands of this family by name (lower case), for the node's command index (`super::index`).
pub static TABLE: &[(&str, Handler)] = &[
    ("sadd", sadd),
    ("srem", srem),
    ("smembers", smembers),
    ("sismember", sismember),
    ("smismember", smismember),
    ("scard", scard),
    ("spop", spop),
    ("srandmember", srandmember),
    ("sscan", |s, a| super::scan::scan_value(s, a, ValueType::Set)),
];

/// Runs `f` on the set at `key` (`None`: no such key).
pub fn read<R>(store: &Store, key: &[u8], f: impl FnOnce(Option<&Set>) -> R) -> Result<R, CmdError> {
    Ok(store.read_object(key, ValueType::Set, |o| {
        f(o.map(|o| match o {
            Object::Set(s) => s,
            _ => unreachable!("type checked by the store"),
        }))
    })?)
}

/// Runs `f` on the set at `key` for a change; `f` sees `None` for a missing key (and may not
/// create it); use [`write_or_create`] to create.
pub fn write<R>(
    store: &Store,
    key: &[u8],
    f: impl FnOnce(Option<&mut Set>, &Limits) -> R,
) -> Result<R, CmdError> {
    Ok(store.write_object(key, ValueType::Set, |slot, limits| match slot.as_deref_mut() {
        Some(Object::Set(s)) => f(Some(s), limits),
        _ => f(None, limits),
    })?)
}

pub fn write_or_create<R>(
    store: &Store,
    key: &[u8],
    f: impl FnOnce(&mut Set, &Limits) -> R,
) -> Result<R, CmdError> {
    Ok(store.write_object(key, ValueType::Set, |slot, limits| {
        let o = slot.get_or_insert_with(|| Box::new(Object::empty(ValueType::Set)));
        match &mut **o {
            Object::Set(s) => f(s, limits),
            _ => unreachable!("type checked by the store"),
        }
    })?)
}

fn sadd(store: &Store, args: &[Bytes]) -> CmdResult {
    make_room(store)?;
    write_or_create(store, &args[1], |s, limits| {
        F::int(args[2..].iter().filter(|m| s.add(m, limits)).count() as i64)
    })
}

fn srem(store: &Store, args: &[Bytes]) -> CmdResult {
    write(store, &args[1], |s, _| {
        F::int(s.map_or(0, |s| args[2..].iter().filter(|m| s.remove(m)).count() as i64))
    })
}

pub fn members(s: &Set) -> Vec<shoal_wire::proto::Frame> {
    s.iter().map(|m| F::bulk_from(&m)).collect()
}

fn smembers(store: &Store, args: &[Bytes]) -> CmdResult {
    read(store, &args[1], |s| F::set(s.map(members).unwrap_or_default()))
}

fn sismember(store: &Store, args: &[Bytes]) -> CmdResult {
    read(store, &args[1], |s| F::int(i64::from(s.is_some_and(|s| s.contains(&args[2])))))
}

fn smismember(store: &Store, args: &[Bytes]) -> CmdResult {
    read(store, &args[1], |s| {
        F::array(args[2..].iter().map(|m| F::int(i64::from(s.is_some_and(|s| s.contains(m))))).collect())
    })
}

fn scard(store: &Store, args: &[Bytes]) -> CmdResult {
    read(store, &args[1], |s| F::int(s.map_or(0, |s| s.len() as i64)))
}

fn spop(store: &Store, args: &[Bytes]) -> CmdResult {
    match args.len() {
        2 => write(store, &args[1], |s, _| {
            let Some(s) = s.filter(|s| !s.is_empty()) else { return F::nil() };
            let m = s.random().expect("not empty");
            s.remove(&m);
            F::bulk(m)
        }),
        3 => {
            let count = positive_count(&args[2])?;
            write(store, &args[1], |s, _| {
                let Some(s) = s else { return F::set(Vec::new()) };
                let mut out = Vec::with_capacity(count.min(s.len()));
                if count >= s.len() {
                    out = members(s);
                    *s = Set::default();
                    return F::set(out);
                }
                for _ in 0..count {
                    let m = s.random().expect("count < len");
                    s.remove(&m);
                    out.push(F::bulk(m));
                }
                F::set(out)
            })
        }
        _ => Err(SYNTAX),
    }
}

fn srandmember(store: &Store, args: &[Bytes]) -> CmdResult {
    if args.len() == 2 {
        return read(store, &args[1], |s| s.and_then(Set::random).map_or_else(F::nil, F::bulk));
    }
    if args.len() > 3 {
        return Err(SYNTAX);
    }
    let count = random::parse(args, None)?;
    read(store, &args[1], |s| {
        let Some(s) = s else { return F::array(Vec::new()) };
        if count.n < 0 {
            // Repeats: each pick is O(1) (Set::random), no list of positions.
            if let Err(e) = super::args::check_repeats(count.n) {
                return F::error(e.to_string());
            }
            return F::array((0..count.n.unsigned_abs()).filter_map(|_| s.random().map(F::bulk)).collect());
        }
        let picked = match random::picks(count.n, s.len(), Whole::Forward, true) {
            Ok(p) => p,
            Err(e) => return F::error(e.to_string()),
        };
        let mut picked = picked.into_iter().peekable();
        let mut out = Vec::new();
        for (i, m) in s.iter().enumerate() {
            while picked.peek() == Some(&i) {
                picked.next();
                out.push(F::bulk_from(&m));
            }
        }
        F::array(out)
    })
}
