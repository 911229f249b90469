//! Stream commands: XADD XRANGE XREVRANGE XLEN XDEL XTRIM XSETID XGROUP XACK XPENDING XCLAIM
//! XAUTOCLAIM XINFO, and XREAD/XREADGROUP (multi-key: [`READS`]), with Redis 7.0's argument
//! order, replies and error texts (its `t_stream.c`), over `store::object::stream`.
//!
//! XREAD and XREADGROUP never wait here: a `BLOCK` is parsed and checked, then the command
//! answers what it finds now (null if nothing), which is exactly the attempt the blocking layer
//! (`ops/blocked.rs`) runs first and again whenever a write makes one of the keys ready. The
//! router strips nothing: the node knows whether the client asked to block only to refuse it
//! from scripts, as Redis does.

use std::io::Write as _;

use bytes::Bytes;

use super::error::{CmdError, CmdResult, SYNTAX, make_room, wrong_arity};
use super::frame::{F, Raw};
use super::multi::{Handler as MultiHandler, KeysOf};
use crate::store::object::stream::{Entry, Group, LISTPACK_MAX_SIZE, Stream, StreamId, Trim};
use crate::store::object::{Object, ValueType};
use crate::store::{Locked, Store};

type Handler = fn(&Store, &[Bytes]) -> CmdResult;

/// The one-key commands of this family by name (lower case), for the node's command index.
pub static TABLE: &[(&str, Handler)] = &[
    ("xadd", xadd),
    ("xrange", |s, a| xrange(s, a, false)),
    ("xrevrange", |s, a| xrange(s, a, true)),
    ("xlen", xlen),
    ("xdel", xdel),
    ("xtrim", xtrim),
    ("xsetid", xsetid),
];

/// XREAD and XREADGROUP: their keys are the first half of what follows `STREAMS`.
pub static READS: &[(&str, (KeysOf, MultiHandler))] = &[
    ("xread", (read_keys, |l, a| xread(l, a, false))),
    ("xreadgroup", (read_keys, |l, a| xread(l, a, true))),
];

const INVALID_ID: CmdError = CmdError::Text("ERR Invalid stream ID specified as stream command argument");

// --- IDs -----------------------------------------------------------------------------------------

/// Redis's `string2ull`: a canonical 64-bit integer that is not negative, or what `strtoull`
/// takes whole (leading blanks, a sign, leading zeros; a '-' wraps).
fn string2ull(s: &[u8]) -> Option<u64> {
    if let Some(n) = shoal_wire::num::parse_i64(s) {
        return u64::try_from(n).ok();
    }
    let mut i =
        s.iter().take_while(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')).count();
    let neg = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let digits = &s[i..];
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: u64 = 0;
    for d in digits {
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(if neg { v.wrapping_neg() } else { v })
}

/// Redis's `streamGenericParseIDOrReply`: `ms-seq`, `ms` (sequence `missing_seq`), `-` and `+`
/// unless `strict`; with `seq_given` the `ms-*` form too (its flag is then false).
pub(super) fn parse_id_full(
    b: &[u8],
    missing_seq: u64,
    strict: bool,
    allow_star: bool,
) -> Result<(StreamId, bool), CmdError> {
    if b.len() > 127 {
        return Err(INVALID_ID);
    }
    // Redis works on a C string: bytes past a NUL are not looked at.
    let b = &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())];
    if strict && (b == b"-" || b == b"+") {
        return Err(INVALID_ID);
    }
    match b {
        b"-" => return Ok((StreamId::MIN, true)),
        b"+" => return Ok((StreamId::MAX, true)),
        _ => {}
    }
    let (ms, seq) = match b.iter().position(|&c| c == b'-') {
        Some(dash) => (&b[..dash], Some(&b[dash + 1..])),
        None => (b, None),
    };
    let ms = string2ull(ms).ok_or(INVALID_ID)?;
    match seq {
        Some(b"*") if allow_star => Ok((StreamId::new(ms, 0), false)),
        Some(seq) => Ok((StreamId::new(ms, string2ull(seq).ok_or(INVALID_ID)?), true)),
        None => Ok((StreamId::new(ms, missing_seq), true)),
    }
}

pub(super) fn parse_id(b: &[u8], missing_seq: u64) -> Result<StreamId, CmdError> {
    parse_id_full(b, missing_seq, false, false).map(|(id, _)| id)
}

pub(super) fn parse_strict(b: &[u8]) -> Result<StreamId, CmdError> {
    parse_id_full(b, 0, true, false).map(|(id, _)| id)
}

/// A range bound: `(` makes it exclusive (then `-`/`+` are refused).
fn parse_interval(b: &[u8], missing_seq: u64) -> Result<(StreamId, bool), CmdError> {
    if b.len() > 1 && b[0] == b'(' {
        Ok((parse_id_full(&b[1..], missing_seq, true, false)?.0, true))
    } else {
        Ok((parse_id(b, missing_seq)?, false))
    }
}

pub(super) fn start_bound(b: &[u8]) -> Result<StreamId, CmdError> {
    let (id, ex) = parse_interval(b, 0)?;
    if ex { id.incr().ok_or(CmdError::Text("ERR invalid start ID for the interval")) } else { Ok(id) }
}

pub(super) fn end_bound(b: &[u8]) -> Result<StreamId, CmdError> {
    let (id, ex) = parse_interval(b, u64::MAX)?;
    if ex { id.decr().ok_or(CmdError::Text("ERR invalid end ID for the interval")) } else { Ok(id) }
}

pub(super) fn id_frame(id: StreamId) -> shoal_wire::proto::Frame {
    F::bulk(Bytes::from(id.to_string()))
}

pub(super) fn entry_frame(e: &Entry) -> shoal_wire::proto::Frame {
    F::array(vec![id_frame(e.id), F::array(e.fields.iter().map(|f| F::bulk(f.clone())).collect())])
}

/// Entries as XRANGE answers them, written as RESP at once (`[[id, [field, value, ...]], ...]`
/// reads the same in RESP2 and RESP3): one buffer, where frames cost an allocation per field.
pub(super) fn entries_frame(es: &[Entry]) -> shoal_wire::proto::Frame {
    let bytes: usize = es.iter().map(|e| 48 + e.fields.iter().map(|f| f.len() + 16).sum::<usize>()).sum();
    let mut raw = Raw::with_capacity(bytes + 16);
    raw.array(es.len());
    let mut id = Vec::with_capacity(41);
    for e in es {
        raw.array(2);
        id.clear();
        write!(id, "{}", e.id).expect("writes to a Vec");
        raw.bulk(&id);
        raw.array(e.fields.len());
        e.fields.iter().for_each(|f| raw.bulk(f));
    }
    raw.finish()
}

pub(super) fn eq(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

pub(super) fn lossy(b: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(b)
}

/// A `long long` argument with Redis's texts (`what`: the text of `getLongLongFromObjectOrReply`'s
/// message argument, or the generic one).
pub(super) fn ll(b: &[u8], what: Option<&'static str>) -> Result<i64, CmdError> {
    shoal_wire::num::parse_i64(b)
        .ok_or(CmdError::Text(what.unwrap_or("ERR value is not an integer or out of range")))
}

// --- access --------------------------------------------------------------------------------------

pub(super) fn read<R>(
    store: &Store,
    key: &[u8],
    f: impl FnOnce(Option<&Stream>) -> R,
) -> Result<R, CmdError> {
    Ok(store.read_object(key, ValueType::Stream, |o| {
        f(o.map(|o| match o {
            Object::Stream(s) => &**s,
            _ => unreachable!("type checked by the store"),
        }))
    })?)
}

/// Runs `f` on the stream at `key` for a change (`None`: no such key; `f` may create it).
pub(super) fn write<R>(
    store: &Store,
    key: &[u8],
    f: impl FnOnce(&mut Option<Box<Object>>, &crate::store::object::Limits) -> R,
) -> Result<R, CmdError> {
    Ok(store.write_object(key, ValueType::Stream, f)?)
}

pub(super) fn stream_mut(slot: &mut Option<Box<Object>>) -> Option<&mut Stream> {
    match slot.as_deref_mut() {
        Some(Object::Stream(s)) => Some(s),
        _ => None,
    }
}

pub(super) fn now_ms(store: &Store) -> i64 {
    store.now_ms() as i64
}

// --- XADD / XTRIM --------------------------------------------------------------------------------

#[derive(Default)]
struct AddTrim {
    id: Option<(StreamId, bool)>,
    no_mkstream: bool,
    trim: Option<Trim>,
    approx: bool,
    /// LIMIT's value; `None` for `~` without LIMIT, which takes the default (below).
    limit: Option<u64>,
}

impl AddTrim {
    /// How many entries an approximate trim may remove (0: no cap). Without LIMIT, Redis's
    /// default: 100 stream nodes' worth (`100 * stream-node-max-entries`), 10000 when that is 0
    /// or past a listpack's largest size.
    fn limit(&self, node: crate::store::object::limits::NodeLimits) -> u64 {
        self.limit.unwrap_or_else(|| match (node.max_entries as u64).saturating_mul(100) {
            0 => 10_000,
            n if n > LISTPACK_MAX_SIZE as u64 => 10_000,
            n => n,
        })
    }
}

/// Redis's `streamParseAddOrTrimArgsOrReply`; returns the options and the ID's position.
fn parse_add_trim(args: &[Bytes], xadd: bool) -> Result<(AddTrim, usize), CmdError> {
    let mut a = AddTrim::default();
    let mut limit_given = false;
    let mut limit: i64 = 0;
    let mut i = 2;
    let both =
        CmdError::Text("ERR syntax error, MAXLEN and MINID options at the same time are not compatible");
    while i < args.len() {
        let more = args.len() - 1 - i;
        let opt = &args[i];
        if xadd && &opt[..] == b"*" {
            break;
        } else if (eq(opt, "maxlen") || eq(opt, "minid")) && more > 0 {
            if a.trim.is_some() {
                return Err(both);
            }
            // An optional `~` (approximate) or `=` before the threshold.
            let next = &args[i + 1];
            a.approx = more >= 2 && &next[..] == b"~";
            if more >= 2 && (&next[..] == b"~" || &next[..] == b"=") {
                i += 1;
            }
            a.trim = Some(if eq(opt, "maxlen") {
                let max = ll(&args[i + 1], None)?;
                if max < 0 {
                    return Err(CmdError::Text("ERR The MAXLEN argument must be >= 0."));
                }
                Trim::MaxLen(max as u64)
            } else {
                Trim::MinId(parse_strict(&args[i + 1])?)
            });
            i += 1;
        } else if eq(opt, "limit") && more > 0 {
            limit = ll(&args[i + 1], None)?;
            if limit < 0 {
                return Err(CmdError::Text("ERR The LIMIT argument must be >= 0."));
            }
            limit_given = true;
            i += 1;
        } else if xadd && eq(opt, "nomkstream") {
            a.no_mkstream = true;
        } else if xadd {
            a.id = Some(parse_id_full(opt, 0, true, true)?);
            break;
        } else {
            return Err(SYNTAX);
        }
        i += 1;
    }
    if limit != 0 && a.trim.is_none() {
        return Err(CmdError::Text(
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy",
        ));
    }
    if !xadd && a.trim.is_none() {
        return Err(CmdError::Text("ERR syntax error, XTRIM must be called with a trimming strategy"));
    }
    if limit_given {
        if !a.approx {
            return Err(CmdError::Text(
                "ERR syntax error, LIMIT cannot be used without the special ~ option",
            ));
        }
        a.limit = Some(limit as u64);
    } else if !a.approx {
        // Exact trimming has no cap.
        a.limit = Some(0);
    }
    Ok((a, i))
}

fn xadd(store: &Store, args: &[Bytes]) -> CmdResult {
    let (opts, idpos) = parse_add_trim(args, true)?;
    let fields = &args[(idpos + 1).min(args.len())..];
    if fields.len() < 2 || fields.len() % 2 == 1 {
        return Err(wrong_arity(&args[0]));
    }
    if let Some((id, true)) = opts.id
        && id.is_zero()
    {
        return Err(CmdError::Text("ERR The ID specified in XADD must be greater than 0-0"));
    }
    make_room(store)?;
    let now = store.now_ms();
    write(store, &args[1], |slot, limits| {
        if slot.is_none() {
            if opts.no_mkstream {
                return Ok(F::nil());
            }
            *slot = Some(Box::new(Object::empty(ValueType::Stream)));
        }
        let s = stream_mut(slot).expect("a stream");
        if s.last_id == StreamId::MAX {
            return Err(CmdError::Text(
                "ERR The stream has exhausted the last possible ID, unable to add more items",
            ));
        }
        let smaller = CmdError::Text(
            "ERR The ID specified in XADD is equal or smaller than the target stream top item",
        );
        let id = match opts.id {
            Some((id, true)) => id,
            // `ms-*` where the top ID's sequence is already the largest: redis-server 7.0.15
            // answers "Elements are too large" here (7.2 says "equal or smaller").
            Some((id, false)) if id.ms == s.last_id.ms && s.last_id.seq == u64::MAX => {
                return Err(CmdError::Text("ERR Elements are too large to be stored"));
            }
            Some((id, false)) if id.ms == s.last_id.ms => s.last_id.incr().ok_or(smaller.clone())?,
            Some((id, false)) => id,
            None => s.next_id(now).unwrap_or(StreamId::MIN),
        };
        if id <= s.last_id {
            return Err(smaller);
        }
        if fields.iter().map(|f| f.len()).sum::<usize>() > LISTPACK_MAX_SIZE {
            return Err(CmdError::Text("ERR Elements are too large to be stored"));
        }
        s.append(id, fields, limits.stream_node);
        if let Some(how) = opts.trim {
            s.trim(how, opts.approx, opts.limit(limits.stream_node));
        }
        Ok(id_frame(id))
    })?
}

fn xtrim(store: &Store, args: &[Bytes]) -> CmdResult {
    let (opts, _) = parse_add_trim(args, false)?;
    let how = opts.trim.expect("checked by the parser");
    write(store, &args[1], |slot, limits| match stream_mut(slot) {
        None => F::int(0),
        Some(s) => F::int(s.trim(how, opts.approx, opts.limit(limits.stream_node)) as i64),
    })
}

// --- reads ---------------------------------------------------------------------------------------

fn xrange(store: &Store, args: &[Bytes], rev: bool) -> CmdResult {
    let (start_arg, end_arg) = if rev { (&args[3], &args[2]) } else { (&args[2], &args[3]) };
    let start = start_bound(start_arg)?;
    let end = end_bound(end_arg)?;
    let mut count: i64 = -1;
    let mut j = 4;
    while j < args.len() {
        if eq(&args[j], "count") && j + 1 < args.len() {
            count = ll(&args[j + 1], None)?.max(0);
            j += 2;
        } else {
            return Err(SYNTAX);
        }
    }
    read(store, &args[1], |s| match s {
        None => F::array(Vec::new()),
        Some(_) if count == 0 => F::null_array(),
        Some(s) => entries_frame(&s.range(start, end, rev, count.max(0) as usize)),
    })
}

fn xlen(store: &Store, args: &[Bytes]) -> CmdResult {
    if args.len() != 2 {
        return Err(wrong_arity(&args[0]));
    }
    read(store, &args[1], |s| F::int(s.map_or(0, |s| s.len() as i64)))
}

/// What XREAD/XREADGROUP asked.
struct ReadArgs {
    count: usize,
    block: bool,
    group: Option<(Bytes, Bytes)>,
    noack: bool,
    keys: Vec<Bytes>,
    ids: Vec<Bytes>,
}

fn parse_read(args: &[Bytes], group_cmd: bool) -> Result<ReadArgs, CmdError> {
    let mut r =
        ReadArgs { count: 0, block: false, group: None, noack: false, keys: Vec::new(), ids: Vec::new() };
    let mut streams_at = None;
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - i - 1;
        let o = &args[i];
        if eq(o, "block") && more > 0 {
            i += 1;
            let t = shoal_wire::num::parse_i64(&args[i])
                .ok_or(CmdError::Text("ERR timeout is not an integer or out of range"))?;
            if t < 0 {
                return Err(CmdError::Text("ERR timeout is negative"));
            }
            r.block = true;
        } else if eq(o, "count") && more > 0 {
            i += 1;
            r.count = ll(&args[i], None)?.max(0) as usize;
        } else if eq(o, "streams") && more > 0 {
            let n = args.len() - i - 1;
            if !n.is_multiple_of(2) {
                return Err(CmdError::Text(
                    "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.",
                ));
            }
            streams_at = Some(i + 1);
            break;
        } else if eq(o, "group") && more >= 2 {
            if !group_cmd {
                return Err(CmdError::Text(
                    "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            r.group = Some((args[i + 1].clone(), args[i + 2].clone()));
            i += 2;
        } else if eq(o, "noack") {
            if !group_cmd {
                return Err(CmdError::Text(
                    "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            r.noack = true;
        } else {
            return Err(SYNTAX);
        }
        i += 1;
    }
    let Some(at) = streams_at else { return Err(SYNTAX) };
    if group_cmd && r.group.is_none() {
        return Err(CmdError::Text("ERR Missing GROUP option for XREADGROUP"));
    }
    let n = (args.len() - at) / 2;
    r.keys = args[at..at + n].to_vec();
    r.ids = args[at + n..].to_vec();
    Ok(r)
}

/// XREADGROUP's group, consumer and keys, when its arguments parse (keyspace notifications).
pub fn read_group_names(args: &[Bytes]) -> Option<(Bytes, Bytes, Vec<Bytes>)> {
    let r = parse_read(args, true).ok()?;
    let (g, c) = r.group?;
    Some((g, c, r.keys))
}

fn read_keys(args: &[Bytes]) -> Result<Vec<Bytes>, CmdError> {
    let group = args[0].len() == 10;
    parse_read(args, group).map(|r| r.keys)
}

/// What one key of an XREAD/XREADGROUP asked for.
#[derive(Clone, Copy)]
enum From {
    After(StreamId),
    /// XREADGROUP `>`.
    New,
}

fn xread(l: &mut Locked<'_>, args: &[Bytes], group_cmd: bool) -> CmdResult {
    let r = parse_read(args, group_cmd)?;
    // Resolve the IDs (and the group, for each key) in argument order, as Redis does.
    let mut from = Vec::with_capacity(r.keys.len());
    for (key, id) in r.keys.iter().zip(&r.ids) {
        let last = l.read_object(key, ValueType::Stream, |o| {
            o.map(|o| match o {
                Object::Stream(s) => {
                    (s.last_id, r.group.as_ref().is_some_and(|(g, _)| s.groups.contains_key(g)))
                }
                _ => unreachable!("type checked"),
            })
        })?;
        if let Some((g, _)) = &r.group
            && !last.is_some_and(|(_, has)| has)
        {
            return Err(CmdError::Owned(format!(
                "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                lossy(key),
                lossy(g)
            )));
        }
        if &id[..] == b"$" {
            if group_cmd {
                return Err(CmdError::Text(
                    "ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.",
                ));
            }
            from.push(From::After(last.map_or(StreamId::MIN, |(id, _)| id)));
        } else if &id[..] == b">" {
            if !group_cmd {
                return Err(CmdError::Text(
                    "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.",
                ));
            }
            from.push(From::New);
        } else {
            from.push(From::After(parse_strict(id)?));
        }
    }
    let now = l.now_ms() as i64;
    let mut out = Vec::new();
    for (i, key) in r.keys.iter().enumerate() {
        let served = l.write_object(key, ValueType::Stream, |slot, _| {
            let s = stream_mut(slot)?;
            match &r.group {
                None => {
                    let From::After(gt) = from[i] else { unreachable!("checked") };
                    let start = gt.incr()?;
                    let entries = if s.last_id >= start {
                        s.range(start, StreamId::MAX, false, r.count)
                    } else {
                        Vec::new()
                    };
                    (!entries.is_empty()).then(|| entries_frame(&entries))
                }
                Some((gname, cname)) => read_group(s, gname, cname, from[i], r.count, r.noack, now),
            }
        })?;
        if let Some(frame) = served {
            out.push(F::bulk(key.clone()));
            out.push(frame);
        }
    }
    if out.is_empty() { Ok(F::null_array()) } else { Ok(F::keyed(out)) }
}

/// XREADGROUP on one stream: new entries (`>`) or the consumer's own history; `None` when
/// there is nothing to serve now (only `>` can find nothing: history always answers). The
/// consumer is created (or its seen time refreshed) only when served, as in Redis.
fn read_group(
    s: &mut Stream,
    gname: &Bytes,
    cname: &Bytes,
    from: From,
    count: usize,
    noack: bool,
    now: i64,
) -> Option<shoal_wire::proto::Frame> {
    let mut g = s.groups.remove(gname)?;
    let served = match from {
        From::After(gt) => {
            ensure_consumer(&mut g, cname, now);
            // The consumer's history: its pending IDs above `gt`, each with its entry (or a
            // null if the entry was deleted meanwhile), counted as delivered again.
            let ids: Vec<StreamId> = match gt.incr() {
                Some(start) => g.consumers[cname]
                    .pel
                    .range(start..)
                    .take(if count == 0 { usize::MAX } else { count })
                    .copied()
                    .collect(),
                None => Vec::new(),
            };
            let mut out = Vec::new();
            for id in ids {
                match s.get(id) {
                    Some(e) => {
                        if let Some(n) = g.pel.get_mut(&id) {
                            n.delivery_time = now;
                            n.delivery_count += 1;
                        }
                        out.push(entry_frame(&e));
                    }
                    None => out.push(F::array(vec![id_frame(id), F::null_array()])),
                }
            }
            Some(F::array(out))
        }
        From::New => {
            // Entries after the group's last ID, if any (what Redis's check of the last live ID
            // against it decides, without a second walk).
            let entries = match g.last_id.incr() {
                Some(start) if s.last_id >= start => s.range(start, StreamId::MAX, false, count),
                _ => Vec::new(),
            };
            if entries.is_empty() {
                s.groups.insert(gname.clone(), g);
                return None;
            }
            ensure_consumer(&mut g, cname, now);
            for e in &entries {
                s.deliver(&mut g, e.id);
                if !noack {
                    let n = g.assign(e.id, cname, now);
                    n.delivery_time = now;
                    n.delivery_count = 1;
                }
            }
            Some(entries_frame(&entries))
        }
    };
    s.groups.insert(gname.clone(), g);
    served
}

// --- XDEL / XSETID -------------------------------------------------------------------------------

fn xdel(store: &Store, args: &[Bytes]) -> CmdResult {
    write(store, &args[1], |slot, _| {
        let Some(s) = stream_mut(slot) else { return Ok(F::int(0)) };
        let ids = args[2..].iter().map(|a| parse_strict(a)).collect::<Result<Vec<_>, _>>()?;
        Ok(F::int(s.delete(&ids) as i64))
    })?
}

fn xsetid(store: &Store, args: &[Bytes]) -> CmdResult {
    let id = parse_strict(&args[2])?;
    let mut entries_added: i64 = -1;
    let mut max_xdel = StreamId::MIN;
    let mut i = 3;
    while i < args.len() {
        let more = args.len() - 1 - i;
        if eq(&args[i], "entriesadded") && more > 0 {
            entries_added = ll(&args[i + 1], None)?;
            if entries_added < 0 {
                return Err(CmdError::Text("ERR entries_added must be positive"));
            }
            i += 2;
        } else if eq(&args[i], "maxdeletedid") && more > 0 {
            max_xdel = parse_strict(&args[i + 1])?;
            if id < max_xdel {
                return Err(CmdError::Text(
                    "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
                ));
            }
            i += 2;
        } else {
            return Err(SYNTAX);
        }
    }
    write(store, &args[1], |slot, _| {
        let Some(s) = stream_mut(slot) else { return Err(CmdError::Text("ERR no such key")) };
        if s.length > 0 {
            if s.last_valid_id().is_some_and(|max| id < max) {
                return Err(CmdError::Text(
                    "ERR The ID specified in XSETID is smaller than the target stream top item",
                ));
            }
            if entries_added != -1 && s.length > entries_added as u64 {
                return Err(CmdError::Text(
                    "ERR The entries_added specified in XSETID is smaller than the target stream length",
                ));
            }
        }
        s.last_id = id;
        if entries_added != -1 {
            s.entries_added = entries_added as u64;
        }
        if !max_xdel.is_zero() {
            s.max_deleted = max_xdel;
        }
        Ok(F::ok())
    })?
}

/// The named consumer of `g`, made if missing (what reading or claiming for it does).
pub(super) fn ensure_consumer(g: &mut Group, name: &Bytes, now: i64) {
    g.consumers.entry(name.clone()).or_default().seen_time = now;
}
