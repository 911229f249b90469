//! Redis commands on typed values (hashes, ...), run on the node from a wire `Command` op.
//!
//! The router has looked the command up, checked its arity and routed it by its key; the node
//! parses the remaining arguments with Redis's rules and texts and answers a [`Frame`], which the
//! router encodes for the client's protocol (RESP2 or RESP3). Each family has its file:
//! [`hash`], [`list`], [`set`], [`zset`], [`bits`], [`hll`], [`multi`] (commands over several keys),
//! [`object`], [`scan`] (HSCAN and its kin).
//!
//! Every handler runs inside one `Store::read_object`/`write_object` call, so a command is atomic
//! on its key, exactly as on a single-threaded Redis.

mod bits;
mod frame;
mod hash;
mod hll;
mod list;
mod multi;
mod object;
mod random;
mod scan;
mod set;
pub(crate) mod zset;

use bytes::Bytes;
use shoal_wire::proto::{Reply, reply};

pub use frame::{F, raw_bulks};
pub use zset::{fmt_g, fmt_g17};

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
    frame_reply(crate::notify::command(store, args, || dispatch(store, args)))
}

/// Runs a command for the node's own look at the data (no notifications): its frame, if it
/// answered one.
pub fn frame_of(store: &Store, args: &[Bytes]) -> Option<shoal_wire::proto::frame::Kind> {
    dispatch(store, args).ok().and_then(|f| f.kind)
}

/// Like [`run`], answering the reply encoded in RESP2 or RESP3 (what the router writes to its
/// client as is: one-key commands, which it does not need to look into).
pub fn run_resp(store: &Store, args: &[Bytes], resp3: bool) -> Reply {
    let frame = crate::notify::command(store, args, || dispatch(store, args))
        .unwrap_or_else(|e| F::error(e.to_string()));
    let mut out = Vec::with_capacity(64);
    frame::encode(&frame, resp3, &mut out);
    Reply { kind: Some(reply::Kind::Resp(out.into())) }
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

/// What runs a command: a one-key handler, or a multi-key one with the function that finds its
/// keys (the shards of every key are locked together).
#[derive(Clone, Copy)]
enum Entry {
    One(OneKey),
    Multi(multi::KeysOf, multi::Handler),
}

type OneKey = fn(&Store, &[Bytes]) -> CmdResult;

/// Every command the node runs, by lower-case name: one hash lookup per command, where trying
/// each family's name list in turn compared the name with dozens of others.
fn index() -> &'static std::collections::HashMap<&'static [u8], Entry> {
    static INDEX: std::sync::LazyLock<std::collections::HashMap<&'static [u8], Entry>> =
        std::sync::LazyLock::new(|| {
            let mut m = std::collections::HashMap::new();
            let ones: [(&str, OneKey); 4] = [
                ("object", object::object),
                ("memory", object::memory),
                ("shoal.restore", restore),
                ("pfadd", hll::pfadd),
            ];
            let families = [hash::TABLE, set::TABLE, list::TABLE, zset::TABLE, bits::TABLE];
            for (name, f) in ones.into_iter().chain(families.into_iter().flatten().copied()) {
                m.insert(name.as_bytes(), Entry::One(f));
            }
            for &(name, (keys_of, handler)) in multi::TABLE {
                m.insert(name.as_bytes(), Entry::Multi(keys_of, handler));
            }
            m
        });
    &INDEX
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
    match index().get(name_lc) {
        Some(Entry::One(handler)) => handler(store, args),
        Some(Entry::Multi(keys_of, handler)) => {
            let keys = keys_of(args)?;
            // Redis's `denyoom` multi-key commands: make room (or refuse with -OOM) before the
            // shards are locked (eviction takes shard locks of its own).
            if multi::DENYOOM.contains(&name_lc) {
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
        Some(Entry::Multi(keys_of, _)) => Some(keys_of(args)),
        _ => None,
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

/// The most elements HRANDFIELD, SRANDMEMBER and ZRANDMEMBER return for a negative count (which
/// allows repeats, so the count alone sizes the reply). Redis would try to build any size; a
/// node answering billions of elements would run out of memory, so larger counts are refused.
pub const MAX_RANDOM_REPEATS: u64 = 10_000_000;

/// Refuses a negative random-member count past [`MAX_RANDOM_REPEATS`].
pub fn check_repeats(n: i64) -> Result<(), CmdError> {
    if n < 0 && n.unsigned_abs() > MAX_RANDOM_REPEATS {
        return Err(CmdError::Owned(format!(
            "ERR count is too large: at most {MAX_RANDOM_REPEATS} elements with repeats in one reply"
        )));
    }
    Ok(())
}

/// A count or limit that must not be negative, with the one text Redis gives both for a
/// non-integer and a negative value (`getPositiveLongFromObjectOrReply` with a message).
pub fn non_negative(b: &[u8], text: &'static str) -> Result<usize, CmdError> {
    match shoal_wire::num::parse_i64(b) {
        Some(n) if n >= 0 => Ok(n as usize),
        _ => Err(CmdError::Text(text)),
    }
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

/// The sorted-set argument fuzz property (`fuzz/fuzz_targets/zrange_args.rs` and the regression
/// test that replays saved inputs): ZRANGE and its older forms, ZADD and the other score- and
/// lex-range commands, given any arguments, answer without a panic, on a small store holding a
/// packed sorted set (`z`), one past the thresholds (`big`), a string (`s`), and no `none`.
///
/// The first input byte picks the command (low 4 bits) and the key (next 2 bits); the rest, split
/// at NUL bytes, are the arguments after the key. Argument counts the router's arity check
/// refuses never reach the node, so they are skipped here too. Afterwards each sorted set must
/// still agree with itself: its rank order, its count and its serialized form.
#[doc(hidden)]
pub fn fuzz_check_zset_args(data: &[u8]) {
    use crate::store::object::{Limits, Object};
    use crate::store::{ManualClock, StoreConfig};

    const COMMANDS: [&str; 16] = [
        "ZRANGE",
        "ZRANGEBYSCORE",
        "ZREVRANGEBYSCORE",
        "ZRANGEBYLEX",
        "ZREVRANGEBYLEX",
        "ZREVRANGE",
        "ZADD",
        "ZCOUNT",
        "ZLEXCOUNT",
        "ZREMRANGEBYSCORE",
        "ZREMRANGEBYLEX",
        "ZREMRANGEBYRANK",
        "ZRANGESTORE",
        "ZINCRBY",
        "ZRANK",
        "ZPOPMIN",
    ];
    // Redis's arity of each (negative: at least).
    const ARITY: [i32; 16] = [-4, -4, -4, -4, -4, -4, -4, 4, 4, 4, 4, 4, -5, 4, -3, -2];
    const KEYS: [&str; 4] = ["z", "big", "s", "none"];

    let Some((&control, rest)) = data.split_first() else { return };
    let which = usize::from(control & 0x0f);
    let key = KEYS[usize::from((control >> 4) & 3)];
    let mut args = vec![Bytes::from_static(COMMANDS[which].as_bytes()), Bytes::from_static(key.as_bytes())];
    if !rest.is_empty() {
        args.extend(rest.split(|&b| b == 0).map(Bytes::copy_from_slice));
    }
    let arity = ARITY[which];
    let n = args.len() as i32;
    if (arity > 0 && n != arity) || (arity < 0 && n < -arity) {
        return;
    }
    let store = Store::new(
        StoreConfig { shards: 1, limits: Limits::TINY, ..Default::default() },
        std::sync::Arc::new(ManualClock::new(1_900_000_000_000)),
    );
    let fill = |key: &str, pairs: &[(&str, &str)]| {
        let mut a = vec![Bytes::from_static(b"ZADD"), Bytes::copy_from_slice(key.as_bytes())];
        for (score, member) in pairs {
            a.push(Bytes::copy_from_slice(score.as_bytes()));
            a.push(Bytes::copy_from_slice(member.as_bytes()));
        }
        dispatch(&store, &a).expect("filled");
    };
    fill("z", &[("1", "a"), ("1", "b"), ("2.5", "c"), ("-inf", "")]);
    fill(
        "big",
        &[
            ("0", "a"),
            ("0", "b"),
            ("1", "c"),
            ("1", "d"),
            ("-1", "e"),
            ("+inf", "f"),
            ("-inf", "g"),
            ("1e308", "h"),
            ("5e-324", "i"),
            ("-5e-324", "j"),
            ("3", "a-member-past-the-limit"),
            ("0", ""),
        ],
    );
    store.set(b"s", b"a string", Default::default()).expect("string set");

    let reply = run(&store, &args);
    assert!(matches!(reply.kind, Some(reply::Kind::Frame(_))), "a frame for {args:?}");

    for key in ["z", "big", "none"] {
        let value = store
            .read_object(key.as_bytes(), ValueType::ZSet, |o| {
                o.map(|o| match o {
                    Object::ZSet(z) => {
                        let order: Vec<(Vec<u8>, f64)> = z.iter().map(|(m, s)| (m.to_vec(), s)).collect();
                        assert_eq!(order.len(), z.len(), "{key}: iteration and count agree");
                        for w in order.windows(2) {
                            assert!(
                                (w[0].1, &w[0].0) < (w[1].1, &w[1].0),
                                "{key}: (score, member) order kept after {args:?}"
                            );
                        }
                        for (i, (m, s)) in order.iter().enumerate() {
                            assert_eq!(z.score(m), Some(*s), "{key}: score of a member");
                            assert_eq!(z.rank(m), Some(i), "{key}: rank of a member");
                        }
                        o.serialize()
                    }
                    _ => unreachable!("type checked by the store"),
                })
            })
            .ok()
            .flatten();
        if let Some(bytes) = value {
            let back =
                Object::deserialize(ValueType::ZSet, &bytes, &Limits::TINY).expect("a stored value decodes");
            assert_eq!(back.serialize(), bytes, "{key}: a sorted set serializes in its own order");
        }
    }
}
