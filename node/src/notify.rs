//! Keyspace notifications of commands (`notify-keyspace-events`): the one place that decides
//! which events a command raises, with Redis 7.0's names, classes and order (its
//! `notifyKeyspaceEvent` calls), from what the command did.
//!
//! The ops layer calls [`op`] around every typed op and the command layer calls [`command`]
//! around every command on typed values; both run the op first, then look at its reply (and,
//! for the few commands whose reply does not say what changed, at what a quick look before it
//! found) and raise the events through the store's [`Events`](crate::store::events::Events),
//! which publishes them on this node's pub/sub registry. Expiry and eviction are raised by the
//! store itself (`expired`, `evicted`). With notifications off, each call costs one relaxed
//! atomic load.
//!
//! Raised: `new` (a write created the key), `del` (also when a command empties a collection or
//! an EXPIRE lies in the past), `expire`, `persist`, `rename_from`/`rename_to`, `copy_to`,
//! `restore`, `set`, `append`, `setrange`, `incrby`, `incrbyfloat`, `setbit`, `pfadd`, the list, hash, set
//! sorted-set and stream events of their commands. Not raised: `keymiss` (class `m` is accepted
//! and shown by CONFIG GET, but reads do not report misses), module events (no modules).

use bytes::Bytes;
use shoal_wire::notify::{GENERIC, HASH, LIST, NEW, SET, STREAM, STRING, ZSET};
use shoal_wire::proto::{Frame, Op, Reply, frame, op::Kind, reply};

use crate::commands::dispatch::frame_of;
use crate::commands::error::CmdResult;
use crate::commands::zset::add_flags;
use crate::store::{Store, TtlState};

/// Events one command raised, in order: (class, event, key).
type Raised = Vec<(u32, &'static str, Bytes)>;

/// What had to be looked at before the command ran.
#[derive(Default)]
struct Before {
    /// Whether each of the command's first two keys existed (for `new`, and for commands that
    /// raise only if a key was there: LTRIM, the STORE forms' `del`).
    existed: [bool; 2],
    /// ZADD without CH or INCR: the members' scores before (the reply counts only additions,
    /// while Redis also raises `zadd` for a changed score).
    scores: Option<Frame>,
    /// SMOVE: the destination already held the member (then no `sadd`).
    member_there: bool,
    /// GEOSEARCHSTORE and GEORADIUS's STORE: the destination's argument index and whether it
    /// existed (an empty result deletes it: `del`).
    dst: Option<(usize, bool)>,
    /// XADD with MAXLEN/MINID: the stream's length before (an `xtrim` follows `xadd` when the
    /// length did not grow by one).
    stream_len: Option<u64>,
    /// XREADGROUP, XCLAIM, XAUTOCLAIM and XGROUP DELCONSUMER: per key, its group, the consumer
    /// and whether the consumer existed (created: `xgroup-createconsumer`; deleted:
    /// `xgroup-delconsumer`).
    consumers: Vec<(Bytes, Bytes, Bytes, bool)>,
}

/// Runs a typed op (not a `Command`: see [`command`]) and raises its events.
pub fn op(store: &Store, op: Op, run: impl FnOnce(Op) -> Reply) -> Reply {
    let flags = store.events.flags();
    if !store.events.publishing() || matches!(op.kind, Some(Kind::Command(_)) | None) {
        return run(op);
    }
    // MSETNX sets every key or none: `set` on each when it did.
    if let Some(Kind::MsetNx(m)) = &op.kind {
        let keys = m.keys.clone();
        let existed: Vec<bool> = keys.iter().map(|k| flags & NEW != 0 && store.exists(k)).collect();
        let reply = run(op);
        if matches!(reply.kind, Some(reply::Kind::Int(1))) {
            let created = created(store, flags, &keys, &existed);
            emit(store, keys.into_iter().map(|k| (STRING, "set", k)).collect(), &created);
        }
        return reply;
    }
    let Some(shape) = OpShape::of(&op) else { return run(op) };
    let Some(key) = shoal_wire::ops::key_of(&op).map(Bytes::copy_from_slice) else { return run(op) };
    let existed = [flags & NEW != 0 && store.exists(&key)];
    let had_ttl = matches!(shape, OpShape::GetEx { persist: true, .. })
        && matches!(store.ttl(&key), TtlState::ExpiresAt(_));
    let reply = run(op);
    let mut raised = Raised::new();
    op_events(store, shape, key.clone(), had_ttl, &reply, &mut raised);
    let created = created(store, flags, std::slice::from_ref(&key), &existed);
    emit(store, raised, &created);
    reply
}

/// The keys among `keys` that did not exist before (`existed`) and do now, when `new` is on.
fn created(store: &Store, flags: u32, keys: &[Bytes], existed: &[bool]) -> Vec<Bytes> {
    if flags & NEW == 0 {
        return Vec::new();
    }
    keys.iter().zip(existed).filter(|(k, e)| !**e && store.exists(k)).map(|(k, _)| k.clone()).collect()
}

/// The parts of an op its events depend on (the op itself is consumed by running it).
#[derive(Clone)]
enum OpShape {
    /// `compare`: IFEQ's value (condition 3).
    Set {
        get: bool,
        condition: i32,
        expiry: bool,
        compare: Bytes,
    },
    Del,
    GetDel,
    GetEx {
        persist: bool,
        expire: bool,
    },
    Expire,
    Persist,
    Append,
    SetRange {
        empty: bool,
    },
    IncrBy,
    IncrByFloat,
}

impl OpShape {
    fn of(op: &Op) -> Option<OpShape> {
        use shoal_wire::proto::GetExMode::*;
        Some(match op.kind.as_ref()? {
            Kind::Set(s) => OpShape::Set {
                get: s.get,
                condition: s.condition,
                expiry: s.expiry.is_some(),
                compare: Bytes::new(),
            },
            Kind::SetIfEqual(o) => {
                let s = o.set.as_ref()?;
                OpShape::Set {
                    get: s.get,
                    condition: s.condition,
                    expiry: s.expiry.is_some(),
                    compare: o.compare.clone(),
                }
            }
            Kind::Del(_) => OpShape::Del,
            Kind::GetDel(_) => OpShape::GetDel,
            Kind::GetEx(g) => OpShape::GetEx {
                persist: g.mode() == GetexPersist,
                expire: matches!(g.mode(), GetexEx | GetexPx | GetexExat | GetexPxat),
            },
            Kind::Expire(_) => OpShape::Expire,
            Kind::Persist(_) => OpShape::Persist,
            Kind::Append(_) => OpShape::Append,
            Kind::SetRange(s) => OpShape::SetRange { empty: s.value.is_empty() },
            Kind::IncrBy(_) => OpShape::IncrBy,
            Kind::IncrByFloat(_) => OpShape::IncrByFloat,
            _ => return None,
        })
    }
}

fn op_events(store: &Store, shape: OpShape, key: Bytes, had_ttl: bool, reply: &Reply, out: &mut Raised) {
    use reply::Kind as R;
    let r = reply.kind.as_ref();
    let failed = matches!(r, Some(R::Error(_)) | Some(R::Moved(_)) | None);
    if failed {
        return;
    }
    let int = |n: i64| matches!(r, Some(R::Int(v)) if *v == n);
    match shape {
        OpShape::Set { get, condition, expiry, compare } => {
            let stored = if get {
                // SET ... GET answers the old value: whether it stored follows from the condition.
                match condition {
                    1 => matches!(r, Some(R::Nil(_))),
                    2 => !matches!(r, Some(R::Nil(_))),
                    3 => matches!(r, Some(R::Value(v)) if *v == compare),
                    _ => true,
                }
            } else {
                matches!(r, Some(R::Ok(_)))
            };
            if stored {
                out.push((STRING, "set", key.clone()));
                if expiry {
                    out.push((GENERIC, "expire", key));
                }
            }
        }
        OpShape::Del | OpShape::Persist if int(1) => {
            out.push((GENERIC, if matches!(shape, OpShape::Del) { "del" } else { "persist" }, key))
        }
        OpShape::GetDel if matches!(r, Some(R::Value(_))) => out.push((GENERIC, "del", key)),
        OpShape::GetEx { persist, expire } if matches!(r, Some(R::Value(_))) => {
            if persist && had_ttl {
                out.push((GENERIC, "persist", key));
            } else if expire {
                let gone = !store.exists(&key);
                out.push((GENERIC, if gone { "del" } else { "expire" }, key));
            }
        }
        // An expiry in the past deletes the key: Redis then raises `del`.
        OpShape::Expire if int(1) => {
            let gone = !store.exists(&key);
            out.push((GENERIC, if gone { "del" } else { "expire" }, key));
        }
        OpShape::Append => out.push((STRING, "append", key)),
        OpShape::SetRange { empty: false } => out.push((STRING, "setrange", key)),
        OpShape::IncrBy => out.push((STRING, "incrby", key)),
        OpShape::IncrByFloat => out.push((STRING, "incrbyfloat", key)),
        _ => {}
    }
}

/// Raises `raised` in order; a key created by the command first gets `new` (keys in `created`).
fn emit(store: &Store, raised: Raised, created: &[Bytes]) {
    let mut announced: Vec<&Bytes> = Vec::new();
    for (class, event, key) in &raised {
        if created.contains(key) && !announced.contains(&key) {
            announced.push(key);
            store.events.emit(NEW, "new", key);
        }
        store.events.emit(*class, event, key);
    }
}

/// Runs a command on typed values (`args`, name first) and raises its events.
pub fn command(store: &Store, args: &[Bytes], run: impl FnOnce() -> CmdResult) -> CmdResult {
    let flags = store.events.flags();
    if !store.events.publishing() || args.len() < 2 {
        return run();
    }
    let name = args[0].to_ascii_lowercase();
    // GEOADD is the ZADD Redis runs in its place, and raises ZADD's events.
    if name == b"geoadd"
        && let Ok(zadd) = crate::commands::geo::as_zadd(args)
    {
        return command(store, &zadd, run);
    }
    let before = look_before(store, &name, args, flags);
    let result = run();
    if let Ok(frame) = &result {
        let mut raised = Raised::new();
        command_events(store, &name, args, frame, &before, &mut raised);
        let mut created = created(store, flags, &args[1..args.len().min(3)], &before.existed);
        if let Some((i, false)) = before.dst
            && i >= 3
        {
            created.extend(self::created(store, flags, &args[i..=i], &[false]));
        }
        emit(store, raised, &created);
    }
    result
}

fn look_before(store: &Store, name: &[u8], args: &[Bytes], flags: u32) -> Before {
    let mut b = Before::default();
    let exists = |i: usize| args.get(i).is_some_and(|k| store.exists(k));
    if flags & NEW != 0 {
        b.existed = [exists(1), exists(2)];
    }
    match name {
        b"ltrim" | b"restore" => b.existed[0] = exists(1),
        b"sinterstore" | b"sunionstore" | b"sdiffstore" | b"zunionstore" | b"zinterstore" | b"zdiffstore"
        | b"zrangestore" => b.existed[0] = exists(1),
        b"bitop" => b.existed[1] = exists(2),
        b"geosearchstore" => b.dst = Some((1, exists(1))),
        b"sort" => {
            b.dst = shoal_wire::sort::layout(args, false).and_then(|l| l.store).map(|i| (i, exists(i)))
        }
        b"georadius" | b"georadiusbymember" => {
            b.dst = shoal_wire::acl::commands::georadius_store(args).map(|i| (i, exists(i)));
        }
        b"smove" if args.len() == 4 => {
            let ask = [Bytes::from_static(b"sismember"), args[2].clone(), args[3].clone()];
            b.member_there = matches!(frame_of(store, &ask), Some(frame::Kind::Int(1)));
        }
        b"xadd" if flags & STREAM != 0 => {
            let trims = args
                .iter()
                .skip(2)
                .any(|a| a.eq_ignore_ascii_case(b"maxlen") || a.eq_ignore_ascii_case(b"minid"));
            if trims {
                b.stream_len = Some(stream_len(store, &args[1]));
            }
        }
        b"xreadgroup" | b"xclaim" | b"xautoclaim" | b"xgroup" if flags & STREAM != 0 => {
            let named = match name {
                b"xreadgroup" => crate::commands::read_group_names(args),
                b"xgroup" if args.len() == 5 && args[1].eq_ignore_ascii_case(b"delconsumer") => {
                    Some((args[3].clone(), args[4].clone(), vec![args[2].clone()]))
                }
                b"xgroup" => None,
                _ if args.len() > 3 => Some((args[2].clone(), args[3].clone(), vec![args[1].clone()])),
                _ => None,
            };
            if let Some((group, consumer, keys)) = named {
                for k in keys {
                    let there = has_consumer(store, &k, &group, &consumer);
                    b.consumers.push((k, group.clone(), consumer.clone(), there));
                }
            }
        }
        b"zadd" if flags & ZSET != 0 => {
            let (options, _) = add_flags(args);
            if !options.ch && !options.incr {
                b.scores = Some(scores(store, args));
            }
        }
        _ => {}
    }
    b
}

/// The length of the stream at `key` (0: none).
fn stream_len(store: &Store, key: &[u8]) -> u64 {
    use crate::store::object::{Object, ValueType};
    store
        .read_object(key, ValueType::Stream, |o| match o {
            Some(Object::Stream(s)) => s.length,
            _ => 0,
        })
        .unwrap_or(0)
}

/// Whether the stream at `key` has `consumer` in `group`.
fn has_consumer(store: &Store, key: &[u8], group: &[u8], consumer: &[u8]) -> bool {
    use crate::store::object::{Object, ValueType};
    store
        .read_object(key, ValueType::Stream, |o| match o {
            Some(Object::Stream(s)) => {
                s.groups.get(group).is_some_and(|g| g.consumers.contains_key(consumer))
            }
            _ => false,
        })
        .unwrap_or(false)
}

/// ZMSCORE of the members a ZADD names (its arguments after the options, in pairs).
fn scores(store: &Store, args: &[Bytes]) -> Frame {
    let (_, first) = add_flags(args);
    let mut ask = vec![Bytes::from_static(b"zmscore"), args[1].clone()];
    ask.extend(args[first..].iter().skip(1).step_by(2).cloned());
    Frame { kind: frame_of(store, &ask) }
}

/// What a command did, as its reply says it: the view the per-family rules below read.
struct Done<'a> {
    store: &'a Store,
    name: &'a [u8],
    args: &'a [Bytes],
    f: &'a Frame,
    before: &'a Before,
    /// The reply is a positive integer.
    positive: bool,
    /// The reply is null, or an empty array or set (nothing popped, nothing found).
    null: bool,
}

impl Done<'_> {
    /// Argument `i` (a key, usually), empty if missing.
    fn k(&self, i: usize) -> Bytes {
        self.args.get(i).cloned().unwrap_or_default()
    }

    /// After a removal, a collection left empty is deleted: Redis raises `del` for it.
    fn emptied(&self, key: Bytes, out: &mut Raised) {
        if !self.store.exists(&key) {
            out.push((GENERIC, "del", key));
        }
    }

    /// Whether argument `i` is `word` (LEFT, MIN, ...), in any case.
    fn word(&self, i: usize, word: &[u8]) -> bool {
        self.args.get(i).is_some_and(|a| a.eq_ignore_ascii_case(word))
    }

    /// The key a served pop names first in its reply (`[key, ...]`), else `or`.
    fn popped_from(&self, or: Bytes) -> Bytes {
        match &self.f.kind {
            Some(frame::Kind::Array(a)) => bulk_of(a.items.first()).unwrap_or(or),
            _ => or,
        }
    }

    /// LMPOP, ZMPOP and their blocking forms: the key popped from (named in the reply) and
    /// whether the direction word after the keys is `word`.
    fn mpop(&self, blocking: bool, word: &[u8]) -> (Bytes, bool) {
        let at = if blocking { 2 } else { 1 };
        let numkeys = shoal_wire::num::parse_i64(&self.k(at)).unwrap_or(0).max(0) as usize;
        (self.popped_from(Bytes::new()), self.word(at + numkeys + 1, word))
    }
}

/// The events of a command that ran without error (`f` is its reply), appended to `out` in
/// Redis's order. Each family's rules are a function below; a command name belongs to one.
fn command_events(store: &Store, name: &[u8], args: &[Bytes], f: &Frame, before: &Before, out: &mut Raised) {
    use frame::Kind as F;
    if matches!(&f.kind, Some(F::Error(_))) {
        return;
    }
    let positive = matches!(&f.kind, Some(F::Int(n)) if *n > 0);
    let null = matches!(&f.kind, Some(F::Nil(_) | F::NullArray(_)))
        || matches!(&f.kind, Some(F::Array(a) | F::Set(a)) if a.items.is_empty());
    let done = Done { store, name, args, f, before, positive, null };
    hash_events(&done, out);
    list_events(&done, out);
    set_events(&done, out);
    zset_events(&done, out);
    stream_events(&done, out);
    other_events(&done, out);
}

fn stream_events(d: &Done, out: &mut Raised) {
    let ok = matches!(&d.f.kind, Some(frame::Kind::Simple(_)));
    match d.name {
        b"xadd" if !d.null => {
            out.push((STREAM, "xadd", d.k(1)));
            if let Some(before) = d.before.stream_len
                && stream_len(d.store, &d.k(1)) <= before
            {
                out.push((STREAM, "xtrim", d.k(1)));
            }
        }
        b"xtrim" if d.positive => out.push((STREAM, "xtrim", d.k(1))),
        b"xdel" if d.positive => out.push((STREAM, "xdel", d.k(1))),
        b"xsetid" if ok => out.push((STREAM, "xsetid", d.k(1))),
        b"xgroup" => {
            let sub = d.k(1).to_ascii_lowercase();
            match &sub[..] {
                b"create" if ok => out.push((STREAM, "xgroup-create", d.k(2))),
                b"setid" if ok => out.push((STREAM, "xgroup-setid", d.k(2))),
                b"destroy" if d.positive => out.push((STREAM, "xgroup-destroy", d.k(2))),
                b"createconsumer" if d.positive => out.push((STREAM, "xgroup-createconsumer", d.k(2))),
                b"delconsumer" if d.before.consumers.first().is_some_and(|c| c.3) => {
                    out.push((STREAM, "xgroup-delconsumer", d.k(2)))
                }
                _ => {}
            }
        }
        b"xreadgroup" | b"xclaim" | b"xautoclaim" => {
            for (k, g, c, there) in &d.before.consumers {
                if !there && has_consumer(d.store, k, g, c) {
                    out.push((STREAM, "xgroup-createconsumer", k.clone()));
                }
            }
        }
        _ => {}
    }
}

fn hash_events(d: &Done, out: &mut Raised) {
    match d.name {
        b"hset" | b"hmset" => out.push((HASH, "hset", d.k(1))),
        b"hsetnx" if d.positive => out.push((HASH, "hset", d.k(1))),
        b"hincrby" => out.push((HASH, "hincrby", d.k(1))),
        b"hincrbyfloat" => out.push((HASH, "hincrbyfloat", d.k(1))),
        b"hdel" if d.positive => {
            out.push((HASH, "hdel", d.k(1)));
            d.emptied(d.k(1), out);
        }
        _ => field_expiry_events(d, out),
    }
}

/// Hash field expiry (Redis 7.4) and HGETDEL/HGETEX/HSETEX (8.0), from their per-field replies:
/// a field a time in the past deleted raises `hdel` rather than `hexpire`, as in Redis. HGETEX
/// and HSETEX do not say per field what they did; their events are read from what the hash holds
/// after (a field asked for and gone was deleted by a past time).
fn field_expiry_events(d: &Done, out: &mut Raised) {
    let codes: Vec<Option<i64>> = match &d.f.kind {
        Some(frame::Kind::Array(a)) => a
            .items
            .iter()
            .map(|f| match f.kind {
                Some(frame::Kind::Int(n)) => Some(n),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let key = d.k(1);
    let any = |n: i64| codes.contains(&Some(n));
    let served = match &d.f.kind {
        Some(frame::Kind::Array(a)) => a.items.iter().any(|f| bulk_of(Some(f)).is_some()),
        _ => false,
    };
    let field_gone = |from: usize| d.args[from..].iter().any(|f| !hash_has(d.store, &key, f));
    match d.name {
        b"hexpire" | b"hpexpire" | b"hexpireat" | b"hpexpireat" => {
            if any(2) {
                out.push((HASH, "hdel", key.clone()));
            } else if any(1) {
                out.push((HASH, "hexpire", key.clone()));
            }
            if any(2) {
                d.emptied(key, out);
            }
        }
        b"hpersist" if any(1) => out.push((HASH, "hpersist", key)),
        b"hgetdel" if served => {
            out.push((HASH, "hdel", key.clone()));
            d.emptied(key, out);
        }
        b"hgetex" if served && d.word(2, b"PERSIST") => out.push((HASH, "hpersist", key)),
        b"hgetex" if served && !d.word(2, b"FIELDS") => {
            let deleted = field_gone(6);
            out.push((HASH, if deleted { "hdel" } else { "hexpire" }, key.clone()));
            if deleted {
                d.emptied(key, out);
            }
        }
        b"hsetex" if d.positive => {
            out.push((HASH, "hset", key.clone()));
            let at = d.args.iter().position(|a| a.eq_ignore_ascii_case(b"FIELDS")).unwrap_or(d.args.len());
            let timed = d.args[2..at]
                .iter()
                .any(|a| [&b"EX"[..], b"PX", b"EXAT", b"PXAT"].iter().any(|w| a.eq_ignore_ascii_case(w)));
            if timed {
                let fields: Vec<Bytes> =
                    d.args[(at + 2).min(d.args.len())..].iter().step_by(2).cloned().collect();
                let deleted = fields.iter().any(|f| !hash_has(d.store, &key, f));
                out.push((HASH, if deleted { "hdel" } else { "hexpire" }, key.clone()));
                if deleted {
                    d.emptied(key, out);
                }
            }
        }
        _ => {}
    }
}

/// Whether the hash at `key` holds `field` now.
fn hash_has(store: &Store, key: &[u8], field: &[u8]) -> bool {
    use crate::store::object::{Object, ValueType};
    store
        .read_object(key, ValueType::Hash, |o| matches!(o, Some(Object::Hash(h)) if h.get(field).is_some()))
        .unwrap_or(false)
}

fn list_events(d: &Done, out: &mut Raised) {
    let (name, k) = (d.name, |i| d.k(i));
    match name {
        b"lpush" | b"lpushx" if d.positive => out.push((LIST, "lpush", k(1))),
        b"rpush" | b"rpushx" if d.positive => out.push((LIST, "rpush", k(1))),
        b"linsert" if d.positive => out.push((LIST, "linsert", k(1))),
        b"lset" => out.push((LIST, "lset", k(1))),
        b"lpop" | b"rpop" if !d.null => {
            out.push((LIST, if name == b"lpop" { "lpop" } else { "rpop" }, k(1)));
            d.emptied(k(1), out);
        }
        // Served blocked pops run their one-key form: the key is the first (or the one named in
        // the reply).
        b"blpop" | b"brpop" if !d.null => {
            let key = d.popped_from(k(1));
            out.push((LIST, if name == b"blpop" { "lpop" } else { "rpop" }, key.clone()));
            d.emptied(key, out);
        }
        b"lmpop" | b"blmpop" if !d.null => {
            let (key, left) = d.mpop(name == b"blmpop", b"left");
            out.push((LIST, if left { "lpop" } else { "rpop" }, key.clone()));
            d.emptied(key, out);
        }
        b"lrem" if d.positive => {
            out.push((LIST, "lrem", k(1)));
            d.emptied(k(1), out);
        }
        b"ltrim" if d.before.existed[0] => {
            out.push((LIST, "ltrim", k(1)));
            d.emptied(k(1), out);
        }
        b"lmove" | b"blmove" | b"rpoplpush" | b"brpoplpush" if !d.null => {
            let (from_left, to_left) = match name {
                b"lmove" | b"blmove" => (d.word(3, b"left"), d.word(4, b"left")),
                _ => (false, true),
            };
            out.push((LIST, if to_left { "lpush" } else { "rpush" }, k(2)));
            out.push((LIST, if from_left { "lpop" } else { "rpop" }, k(1)));
            d.emptied(k(1), out);
        }
        _ => {}
    }
}

fn set_events(d: &Done, out: &mut Raised) {
    let k = |i| d.k(i);
    match d.name {
        b"sadd" if d.positive => out.push((SET, "sadd", k(1))),
        b"srem" if d.positive => {
            out.push((SET, "srem", k(1)));
            d.emptied(k(1), out);
        }
        b"spop" if !d.null => {
            out.push((SET, "spop", k(1)));
            d.emptied(k(1), out);
        }
        b"smove" if d.positive => {
            out.push((SET, "srem", k(1)));
            d.emptied(k(1), out);
            if !d.before.member_there {
                out.push((SET, "sadd", k(2)));
            }
        }
        // The STORE forms of both families: an empty result deletes the destination.
        b"sinterstore" | b"sunionstore" | b"sdiffstore" | b"zunionstore" | b"zinterstore" | b"zdiffstore"
        | b"zrangestore" => {
            if d.positive {
                out.push((if d.name[0] == b's' { SET } else { ZSET }, event_name(d.name), k(1)));
            } else if d.before.existed[0] {
                out.push((GENERIC, "del", k(1)));
            }
        }
        _ => {}
    }
}

fn zset_events(d: &Done, out: &mut Raised) {
    let (name, k) = (d.name, |i| d.k(i));
    match name {
        b"zadd" => {
            let incr = add_flags(d.args).0.incr;
            let changed = match &d.before.scores {
                _ if incr => !d.null,
                None => d.positive,
                Some(old) => d.positive || scores(d.store, d.args) != *old,
            };
            if changed {
                out.push((ZSET, if incr { "zincr" } else { "zadd" }, k(1)));
            }
        }
        b"zincrby" => out.push((ZSET, "zincr", k(1))),
        b"geosearchstore" | b"georadius" | b"georadiusbymember" => match d.before.dst {
            Some((i, _)) if d.positive => {
                out.push((ZSET, if name[3] == b's' { "geosearchstore" } else { "georadiusstore" }, k(i)));
            }
            Some((i, true)) => out.push((GENERIC, "del", k(i))),
            _ => {}
        },
        b"zrem" | b"zremrangebyrank" | b"zremrangebyscore" | b"zremrangebylex" if d.positive => {
            out.push((ZSET, event_name(name), k(1)));
            d.emptied(k(1), out);
        }
        b"zpopmin" | b"zpopmax" if !d.null => {
            out.push((ZSET, event_name(name), k(1)));
            d.emptied(k(1), out);
        }
        b"bzpopmin" | b"bzpopmax" if !d.null => {
            let key = d.popped_from(k(1));
            out.push((ZSET, if name == b"bzpopmin" { "zpopmin" } else { "zpopmax" }, key.clone()));
            d.emptied(key, out);
        }
        b"zmpop" | b"bzmpop" if !d.null => {
            let (key, min) = d.mpop(name == b"bzmpop", b"min");
            out.push((ZSET, if min { "zpopmin" } else { "zpopmax" }, key.clone()));
            d.emptied(key, out);
        }
        _ => {}
    }
}

/// Strings' bit and HyperLogLog commands, and the generic key commands.
fn other_events(d: &Done, out: &mut Raised) {
    let k = |i| d.k(i);
    match d.name {
        b"setbit" => out.push((STRING, "setbit", k(1))),
        b"bitfield"
            if d.args[2..]
                .iter()
                .any(|a| a.eq_ignore_ascii_case(b"set") || a.eq_ignore_ascii_case(b"incrby")) =>
        {
            out.push((STRING, "setbit", k(1)))
        }
        b"bitop" => {
            if d.positive {
                out.push((STRING, "set", k(2)));
            } else if d.before.existed[1] {
                out.push((GENERIC, "del", k(2)));
            }
        }
        b"pfadd" if d.positive => out.push((STRING, "pfadd", k(1))),
        b"pfmerge" => out.push((STRING, "pfadd", k(1))),
        b"rename" | b"renamenx" if matches!(&d.f.kind, Some(frame::Kind::Simple(_))) || d.positive => {
            out.push((GENERIC, "rename_from", k(1)));
            out.push((GENERIC, "rename_to", k(2)));
        }
        b"copy" if d.positive => out.push((GENERIC, "copy_to", k(2))),
        b"delifeq" if d.positive => out.push((GENERIC, "del", k(1))),
        // RESTORE stores the key (`restore`), or, with a TTL already past, stores nothing and
        // REPLACE has deleted what was there (`del`).
        b"restore" if matches!(&d.f.kind, Some(frame::Kind::Simple(_))) => {
            if d.store.exists(&k(1)) {
                out.push((GENERIC, "restore", k(1)));
            } else if d.before.existed[0] {
                out.push((GENERIC, "del", k(1)));
            }
        }
        b"sort" => match d.before.dst {
            Some((i, _)) if d.positive => out.push((LIST, "sortstore", k(i))),
            Some((i, true)) => out.push((GENERIC, "del", k(i))),
            _ => {}
        },
        _ => {}
    }
}

fn bulk_of(f: Option<&Frame>) -> Option<Bytes> {
    match f?.kind.as_ref()? {
        frame::Kind::Bulk(b) => Some(b.clone()),
        _ => None,
    }
}

/// The event a command raises under its own name (`sinterstore`, `zremrangebyrank`, ...).
fn event_name(name: &[u8]) -> &'static str {
    const NAMES: [&str; 13] = [
        "sinterstore",
        "sunionstore",
        "sdiffstore",
        "zunionstore",
        "zinterstore",
        "zdiffstore",
        "zrangestore",
        "zrem",
        "zremrangebyrank",
        "zremrangebyscore",
        "zremrangebylex",
        "zpopmin",
        "zpopmax",
    ];
    NAMES.iter().find(|n| n.as_bytes() == name).copied().unwrap_or("")
}
