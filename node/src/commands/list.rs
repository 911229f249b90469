//! List commands on one key: LPUSH RPUSH LPUSHX RPUSHX LPOP RPOP LLEN LRANGE LINDEX LSET LINSERT
//! LREM LTRIM LPOS. (LMOVE, RPOPLPUSH and LMPOP, which take several keys, are in `multi.rs`.)

use bytes::Bytes;

use super::args::{int_arg, positive_count, range};
use super::error::{CmdError, CmdResult, SYNTAX, make_room};
use super::frame::F;
use crate::store::Store;
use crate::store::object::{List, Object, ValueType};

type Handler = fn(&Store, &[Bytes]) -> CmdResult;

/// The commands of this family by name (lower case), for the node's command index (`super::index`).
pub static TABLE: &[(&str, Handler)] = &[
    ("lpush", |s, a| push(s, a, true, false)),
    ("rpush", |s, a| push(s, a, false, false)),
    ("lpushx", |s, a| push(s, a, true, true)),
    ("rpushx", |s, a| push(s, a, false, true)),
    ("lpop", |s, a| pop(s, a, true)),
    ("rpop", |s, a| pop(s, a, false)),
    ("llen", llen),
    ("lrange", lrange),
    ("lindex", lindex),
    ("lset", lset),
    ("linsert", linsert),
    ("lrem", lrem),
    ("ltrim", ltrim),
    ("lpos", lpos),
];

pub fn read<R>(store: &Store, key: &[u8], f: impl FnOnce(Option<&List>) -> R) -> Result<R, CmdError> {
    Ok(store.read_object(key, ValueType::List, |o| {
        f(o.map(|o| match o {
            Object::List(l) => l,
            _ => unreachable!("type checked by the store"),
        }))
    })?)
}

/// Runs `f` on the list at `key` for a change (`None`: no such key); with `create`, a missing
/// key starts as an empty list (deleted again if `f` leaves it empty).
pub fn write<R>(
    store: &Store,
    key: &[u8],
    create: bool,
    f: impl FnOnce(Option<&mut List>) -> R,
) -> Result<R, CmdError> {
    Ok(store.write_object(key, ValueType::List, |slot, limits| {
        if create && slot.is_none() {
            *slot = Some(Box::new(Object::empty(ValueType::List)));
        }
        match slot.as_deref_mut() {
            Some(Object::List(l)) => {
                l.fill = limits.list_max_listpack_size;
                f(Some(l))
            }
            _ => f(None),
        }
    })?)
}

fn push(store: &Store, args: &[Bytes], front: bool, only_existing: bool) -> CmdResult {
    make_room(store)?;
    write(store, &args[1], !only_existing, |l| {
        let Some(l) = l else { return F::int(0) };
        for v in &args[2..] {
            l.push(v, front);
        }
        F::int(l.len() as i64)
    })
}

/// Pops up to `count` elements from one end.
pub fn pop_n(l: &mut List, count: usize, front: bool) -> Vec<Box<[u8]>> {
    (0..count.min(l.len())).filter_map(|_| l.pop(front)).collect()
}

fn pop(store: &Store, args: &[Bytes], front: bool) -> CmdResult {
    if args.len() > 3 {
        return Err(super::error::wrong_arity(&args[0]));
    }
    let count = args.get(2).map(|c| positive_count(c)).transpose()?;
    write(store, &args[1], false, |l| match (l, count) {
        (None, Some(_)) => F::null_array(),
        (None, None) => F::nil(),
        (Some(l), None) => F::bulk_or_nil(l.pop(front).as_deref()),
        (Some(l), Some(n)) => F::bulk_array(pop_n(l, n, front).iter().map(|v| &**v)),
    })
}

fn llen(store: &Store, args: &[Bytes]) -> CmdResult {
    read(store, &args[1], |l| F::int(l.map_or(0, |l| l.len() as i64)))
}

fn lrange(store: &Store, args: &[Bytes]) -> CmdResult {
    let (start, end) = (int_arg(&args[2])?, int_arg(&args[3])?);
    read(store, &args[1], |l| {
        let Some(l) = l else { return F::array(Vec::new()) };
        match range(l.len(), start, end) {
            Some((a, b)) => F::bulk_array(l.range(a, b)),
            None => F::array(Vec::new()),
        }
    })
}

/// A list index (negative from the end) as a position, if it is inside the list.
fn position(len: usize, index: i64) -> Option<usize> {
    let i = if index < 0 { len as i64 + index } else { index };
    (0..len as i64).contains(&i).then_some(i as usize)
}

fn lindex(store: &Store, args: &[Bytes]) -> CmdResult {
    let index = int_arg(&args[2])?;
    read(store, &args[1], |l| F::bulk_or_nil(l.and_then(|l| position(l.len(), index).map(|i| l.get(i)))))
}

fn lset(store: &Store, args: &[Bytes]) -> CmdResult {
    let index = int_arg(&args[2])?;
    make_room(store)?;
    write(store, &args[1], false, |l| {
        let l = l.ok_or(CmdError::Text("ERR no such key"))?;
        let i = position(l.len(), index).ok_or(CmdError::Text("ERR index out of range"))?;
        l.set(i, &args[3]);
        Ok(F::ok())
    })?
}

fn linsert(store: &Store, args: &[Bytes]) -> CmdResult {
    let after = if args[2].eq_ignore_ascii_case(b"after") {
        true
    } else if args[2].eq_ignore_ascii_case(b"before") {
        false
    } else {
        return Err(SYNTAX);
    };
    make_room(store)?;
    write(store, &args[1], false, |l| {
        let Some(l) = l else { return F::int(0) };
        let found = l.iter().position(|v| v == &args[3][..]);
        match found {
            Some(i) => {
                l.insert(if after { i + 1 } else { i }, &args[4]);
                F::int(l.len() as i64)
            }
            None => F::int(-1),
        }
    })
}

fn lrem(store: &Store, args: &[Bytes]) -> CmdResult {
    let count = int_arg(&args[2])?;
    write(store, &args[1], false, |l| {
        let Some(l) = l else { return F::int(0) };
        let limit = if count == 0 { usize::MAX } else { count.unsigned_abs() as usize };
        F::int(l.retain_count(limit, count < 0, |v| v == &args[3][..]) as i64)
    })
}

fn ltrim(store: &Store, args: &[Bytes]) -> CmdResult {
    let (start, end) = (int_arg(&args[2])?, int_arg(&args[3])?);
    write(store, &args[1], false, |l| {
        if let Some(l) = l {
            match range(l.len(), start, end) {
                Some((a, b)) => l.keep(a, b + 1),
                None => l.keep(0, 0),
            }
        }
        F::ok()
    })
}

fn lpos(store: &Store, args: &[Bytes]) -> CmdResult {
    let (mut rank, mut count, mut maxlen): (i64, Option<usize>, usize) = (1, None, 0);
    let mut j = 3;
    while j < args.len() {
        let more = j + 1 < args.len();
        let opt = &args[j];
        if more && opt.eq_ignore_ascii_case(b"rank") {
            rank = int_arg(&args[j + 1])?;
            if rank == 0 {
                return Err(CmdError::Text(
                    "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use \
                     negative to start from the end of the list",
                ));
            }
        } else if more && opt.eq_ignore_ascii_case(b"count") {
            count = Some(super::args::non_negative(&args[j + 1], "ERR COUNT can't be negative")?);
        } else if more && opt.eq_ignore_ascii_case(b"maxlen") {
            maxlen = super::args::non_negative(&args[j + 1], "ERR MAXLEN can't be negative")?;
        } else {
            return Err(SYNTAX);
        }
        j += 2;
    }
    read(store, &args[1], |l| {
        let Some(l) = l else { return if count.is_some() { F::array(Vec::new()) } else { F::nil() } };
        let len = l.len();
        let from_tail = rank < 0;
        // Redis negates the rank in a C long: the most negative one stays negative, and every
        // match then counts (it answers the last match).
        let skip = if rank == i64::MIN { 0 } else { rank.unsigned_abs() as usize - 1 };
        let wanted = match count {
            Some(0) => usize::MAX,
            Some(n) => n,
            None => 1,
        };
        let scan = if maxlen == 0 { len } else { maxlen.min(len) };
        let mut found = Vec::new();
        let mut matches = 0;
        let walk: Box<dyn Iterator<Item = &[u8]>> =
            if from_tail { Box::new(l.iter().rev()) } else { Box::new(l.iter()) };
        for (step, v) in walk.take(scan).enumerate() {
            let i = if from_tail { len - 1 - step } else { step };
            if v == &args[2][..] {
                matches += 1;
                if matches > skip {
                    found.push(i as i64);
                    if found.len() == wanted {
                        break;
                    }
                }
            }
        }
        match count {
            Some(_) => F::array(found.into_iter().map(F::int).collect()),
            None => found.first().map_or_else(F::nil, |&i| F::int(i)),
        }
    })
}
