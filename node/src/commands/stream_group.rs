//! Consumer-group stream commands: XGROUP XACK XPENDING XCLAIM XAUTOCLAIM, and XINFO (which
//! reports on groups and consumers as well as the stream), with Redis 7.0's argument order,
//! replies and error texts. Reading through a group (XREADGROUP) stays with XREAD in
//! `super::stream`, whose ID parsing and access helpers these share.

use bytes::Bytes;

use super::error::{CmdError, CmdResult, SYNTAX, make_room};
use super::frame::F;
use super::stream::{
    end_bound, ensure_consumer, entries_frame, entry_frame, eq, id_frame, ll, lossy, now_ms, parse_id,
    parse_strict, read, start_bound, stream_mut, write,
};
use crate::store::Store;
use crate::store::object::stream::{ENTRIES_READ_UNKNOWN, Group, Stream, StreamId};
use crate::store::object::{Object, ValueType};

type Handler = fn(&Store, &[Bytes]) -> CmdResult;

/// The group commands by name (lower case), for the node's command index.
pub static TABLE: &[(&str, Handler)] = &[
    ("xgroup", xgroup),
    ("xack", xack),
    ("xpending", xpending),
    ("xclaim", xclaim),
    ("xautoclaim", xautoclaim),
    ("xinfo", xinfo),
];

// --- XGROUP --------------------------------------------------------------------------------------

fn subcommand_error(args: &[Bytes]) -> CmdError {
    CmdError::Owned(format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.",
        lossy(&args[1][..args[1].len().min(128)]),
        lossy(&args[0]).to_ascii_uppercase()
    ))
}

fn xgroup(store: &Store, args: &[Bytes]) -> CmdResult {
    let sub = args[1].to_ascii_lowercase();
    if args.len() < 4 {
        return Err(subcommand_error(args));
    }
    let mut mkstream = false;
    let mut entries_read = ENTRIES_READ_UNKNOWN;
    let mut i = 5;
    while i < args.len() {
        if sub == b"create" && eq(&args[i], "mkstream") {
            mkstream = true;
            i += 1;
        } else if (sub == b"create" || sub == b"setid") && eq(&args[i], "entriesread") && i + 1 < args.len() {
            entries_read = ll(&args[i + 1], None)?;
            if entries_read < 0 && entries_read != ENTRIES_READ_UNKNOWN {
                return Err(CmdError::Text("ERR value for ENTRIESREAD must be positive or -1"));
            }
            i += 2;
        } else {
            return Err(subcommand_error(args));
        }
    }
    let key = &args[2];
    let gname = &args[3];
    let argc = args.len();
    let now = now_ms(store);
    if sub == b"create" {
        make_room(store)?;
    }
    write(store, key, |slot, _| {
        if !mkstream {
            let Some(s) = stream_mut(slot) else {
                return Err(CmdError::Text(
                    "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.",
                ));
            };
            if !s.groups.contains_key(gname)
                && matches!(&sub[..], b"setid" | b"createconsumer" | b"delconsumer")
            {
                return Err(CmdError::Owned(format!(
                    "NOGROUP No such consumer group '{}' for key name '{}'",
                    lossy(gname),
                    lossy(key)
                )));
            }
        }
        match &sub[..] {
            b"create" if (5..=8).contains(&argc) => {
                let id = if &args[4][..] == b"$" {
                    stream_mut(slot).map_or(StreamId::MIN, |s| s.last_id)
                } else {
                    parse_strict(&args[4])?
                };
                if slot.is_none() {
                    *slot = Some(Box::new(Object::empty(ValueType::Stream)));
                }
                let s = stream_mut(slot).expect("a stream");
                if s.groups.contains_key(gname) {
                    return Err(CmdError::Text("BUSYGROUP Consumer Group name already exists"));
                }
                s.groups.insert(gname.clone(), Group::new(id, entries_read));
                Ok(F::ok())
            }
            b"setid" if argc == 5 || argc == 7 => {
                let s = stream_mut(slot).expect("checked above");
                let id = if &args[4][..] == b"$" { s.last_id } else { parse_id(&args[4], 0)? };
                let g = s.groups.get_mut(gname).expect("checked above");
                g.last_id = id;
                g.entries_read = entries_read;
                Ok(F::ok())
            }
            b"destroy" if argc == 4 => {
                let Some(s) = stream_mut(slot) else { return Err(subcommand_error(args)) };
                Ok(F::int(i64::from(s.groups.remove(gname).is_some())))
            }
            b"createconsumer" if argc == 5 => {
                let g = stream_mut(slot).and_then(|s| s.groups.get_mut(gname)).expect("checked above");
                if g.consumers.contains_key(&args[4]) {
                    return Ok(F::int(0));
                }
                g.consumers.insert(
                    args[4].clone(),
                    crate::store::object::stream::Consumer { seen_time: now, ..Default::default() },
                );
                Ok(F::int(1))
            }
            b"delconsumer" if argc == 5 => {
                let g = stream_mut(slot).and_then(|s| s.groups.get_mut(gname)).expect("checked above");
                let Some(c) = g.consumers.remove(&args[4]) else { return Ok(F::int(0)) };
                for id in &c.pel {
                    g.pel.remove(id);
                }
                Ok(F::int(c.pel.len() as i64))
            }
            _ => Err(subcommand_error(args)),
        }
    })?
}

// --- XACK / XPENDING -----------------------------------------------------------------------------

fn xack(store: &Store, args: &[Bytes]) -> CmdResult {
    write(store, &args[1], |slot, _| {
        let Some(g) = stream_mut(slot).and_then(|s| s.groups.get_mut(&args[2])) else { return Ok(F::int(0)) };
        let ids = args[3..].iter().map(|a| parse_strict(a)).collect::<Result<Vec<_>, _>>()?;
        Ok(F::int(ids.into_iter().filter(|&id| g.ack(id)).count() as i64))
    })?
}

fn nogroup(key: &[u8], group: &[u8]) -> CmdError {
    CmdError::Owned(format!("NOGROUP No such key '{}' or consumer group '{}'", lossy(key), lossy(group)))
}

fn xpending(store: &Store, args: &[Bytes]) -> CmdResult {
    let argc = args.len();
    if argc != 3 && !(6..=9).contains(&argc) {
        return Err(SYNTAX);
    }
    let mut range = None;
    if argc >= 6 {
        let mut at = 3;
        let mut minidle = 0;
        if eq(&args[3], "idle") {
            minidle = ll(&args[4], None)?;
            if argc < 8 {
                return Err(SYNTAX);
            }
            at += 2;
        }
        let count = ll(&args[at + 2], None)?.max(0);
        let start = start_bound(&args[at])?;
        let end = end_bound(&args[at + 1])?;
        let consumer = args.get(at + 3).cloned();
        range = Some((minidle, count as usize, start, end, consumer));
    }
    let now = now_ms(store);
    read(store, &args[1], |s| {
        let g = s.and_then(|s| s.groups.get(&args[2])).ok_or_else(|| nogroup(&args[1], &args[2]))?;
        let Some((minidle, count, start, end, consumer)) = range else {
            let (Some(first), Some(last)) = (g.pel.keys().next(), g.pel.keys().next_back()) else {
                return Ok(F::array(vec![F::int(0), F::nil(), F::nil(), F::null_array()]));
            };
            let owners = g
                .consumers
                .iter()
                .filter(|(_, c)| !c.pel.is_empty())
                .map(|(n, c)| {
                    F::array(vec![F::bulk(n.clone()), F::bulk(Bytes::from(c.pel.len().to_string()))])
                })
                .collect();
            return Ok(F::array(vec![
                F::int(g.pel.len() as i64),
                id_frame(*first),
                id_frame(*last),
                F::array(owners),
            ]));
        };
        let ids: Vec<StreamId> = match &consumer {
            Some(c) => match g.consumers.get(c) {
                None => return Ok(F::array(Vec::new())),
                Some(c) => c.pel.range(start..).copied().collect(),
            },
            None => g.pel.range(start..).map(|(id, _)| *id).collect(),
        };
        let mut out = Vec::new();
        for id in ids {
            if out.len() >= count || id > end {
                break;
            }
            let n = &g.pel[&id];
            let idle = (now - n.delivery_time).max(0);
            if minidle != 0 && now - n.delivery_time < minidle {
                continue;
            }
            out.push(F::array(vec![
                id_frame(id),
                F::bulk(n.consumer.clone()),
                F::int(idle),
                F::int(n.delivery_count as i64),
            ]));
        }
        Ok(F::array(out))
    })?
}

// --- XCLAIM / XAUTOCLAIM -------------------------------------------------------------------------

fn xclaim(store: &Store, args: &[Bytes]) -> CmdResult {
    let now = now_ms(store);
    write(store, &args[1], |slot, _| {
        let Some(s) = stream_mut(slot) else { return Err(nogroup(&args[1], &args[2])) };
        if !s.groups.contains_key(&args[2]) {
            return Err(nogroup(&args[1], &args[2]));
        }
        let minidle = ll(&args[4], Some("ERR Invalid min-idle-time argument for XCLAIM"))?.max(0);
        let mut ids = Vec::new();
        let mut j = 5;
        while j < args.len() {
            match parse_strict(&args[j]) {
                Ok(id) => ids.push(id),
                Err(_) => break,
            }
            j += 1;
        }
        let (mut force, mut justid) = (false, false);
        let mut retrycount: i64 = -1;
        let mut deliverytime: i64 = -1;
        let mut last_id = StreamId::MIN;
        while j < args.len() {
            let more = args.len() - 1 - j;
            let opt = &args[j];
            if eq(opt, "force") {
                force = true;
            } else if eq(opt, "justid") {
                justid = true;
            } else if eq(opt, "idle") && more > 0 {
                j += 1;
                deliverytime = now - ll(&args[j], Some("ERR Invalid IDLE option argument for XCLAIM"))?;
            } else if eq(opt, "time") && more > 0 {
                j += 1;
                deliverytime = ll(&args[j], Some("ERR Invalid TIME option argument for XCLAIM"))?;
            } else if eq(opt, "retrycount") && more > 0 {
                j += 1;
                retrycount = ll(&args[j], Some("ERR Invalid RETRYCOUNT option argument for XCLAIM"))?;
            } else if eq(opt, "lastid") && more > 0 {
                j += 1;
                last_id = parse_strict(&args[j])?;
            } else {
                return Err(CmdError::Owned(format!("ERR Unrecognized XCLAIM option '{}'", lossy(opt))));
            }
            j += 1;
        }
        let mut g = s.groups.remove(&args[2]).expect("checked");
        if last_id > g.last_id {
            g.last_id = last_id;
        }
        if deliverytime == -1 || deliverytime < 0 || deliverytime > now {
            deliverytime = now;
        }
        let name = &args[3];
        let mut out = Vec::new();
        let mut have_consumer = false;
        for id in ids {
            let pending = g.pel.contains_key(&id);
            let entry = s.get(id);
            if entry.is_none() {
                if pending {
                    g.ack(id);
                }
                continue;
            }
            if !pending && !force {
                continue;
            }
            if let Some(n) = g.pel.get(&id)
                && minidle > 0
                && now - n.delivery_time < minidle
            {
                continue;
            }
            if !have_consumer {
                ensure_consumer(&mut g, name, now);
                have_consumer = true;
            }
            // A FORCEd new entry starts at one delivery, as Redis's `streamCreateNACK`.
            let n = g.assign(id, name, now);
            n.delivery_time = deliverytime;
            if retrycount >= 0 {
                n.delivery_count = retrycount as u64;
            } else if !justid {
                n.delivery_count += 1;
            }
            out.push(if justid { id_frame(id) } else { entry_frame(&entry.expect("exists")) });
        }
        s.groups.insert(args[2].clone(), g);
        Ok(F::array(out))
    })?
}

fn xautoclaim(store: &Store, args: &[Bytes]) -> CmdResult {
    let minidle = ll(&args[4], Some("ERR Invalid min-idle-time argument for XAUTOCLAIM"))?.max(0);
    let start = start_bound(&args[5])?;
    let mut count: i64 = 100;
    let mut justid = false;
    let mut j = 6;
    while j < args.len() {
        let more = args.len() - 1 - j;
        if eq(&args[j], "count") && more > 0 {
            let max = i64::MAX / 16;
            count = match shoal_wire::num::parse_i64(&args[j + 1]) {
                Some(n) if (1..=max).contains(&n) => n,
                _ => return Err(CmdError::Text("ERR COUNT must be > 0")),
            };
            j += 1;
        } else if eq(&args[j], "justid") {
            justid = true;
        } else {
            return Err(SYNTAX);
        }
        j += 1;
    }
    let now = now_ms(store);
    write(store, &args[1], |slot, _| {
        let Some(s) = stream_mut(slot) else { return Err(nogroup(&args[1], &args[2])) };
        let Some(mut g) = s.groups.remove(&args[2]) else { return Err(nogroup(&args[1], &args[2])) };
        let name = &args[3];
        let mut attempts = count * 10;
        let mut count = count;
        let mut claimed = Vec::new();
        let mut deleted = Vec::new();
        let mut have_consumer = false;
        let mut cursor = Some(start);
        while let Some(from) = cursor {
            if attempts == 0 || count == 0 {
                break;
            }
            let Some((&id, n)) = g.pel.range(from..).next() else {
                cursor = None;
                break;
            };
            attempts -= 1;
            cursor = id.incr();
            let delivered = n.delivery_time;
            let Some(entry) = s.get(id) else {
                g.ack(id);
                deleted.push(id_frame(id));
                count -= 1;
                continue;
            };
            if minidle > 0 && now - delivered < minidle {
                continue;
            }
            if !have_consumer {
                ensure_consumer(&mut g, name, now);
                have_consumer = true;
            }
            let n = g.assign(id, name, now);
            n.delivery_time = now;
            if !justid {
                n.delivery_count += 1;
            }
            claimed.push(if justid { id_frame(id) } else { entry_frame(&entry) });
            count -= 1;
        }
        // The next cursor: the first pending ID after the last one looked at (0-0: the end).
        let next = cursor.and_then(|c| g.pel.range(c..).next().map(|(id, _)| *id)).unwrap_or(StreamId::MIN);
        s.groups.insert(args[2].clone(), g);
        Ok(F::array(vec![id_frame(next), F::array(claimed), F::array(deleted)]))
    })?
}

// --- XINFO ---------------------------------------------------------------------------------------

fn lag_frame(s: &Stream, g: &Group) -> shoal_wire::proto::Frame {
    s.lag(g).map_or_else(F::nil, F::int)
}

fn entries_read_frame(g: &Group) -> shoal_wire::proto::Frame {
    if g.entries_read == ENTRIES_READ_UNKNOWN { F::nil() } else { F::int(g.entries_read) }
}

fn name(n: &str) -> shoal_wire::proto::Frame {
    F::bulk(Bytes::copy_from_slice(n.as_bytes()))
}

fn xinfo(store: &Store, args: &[Bytes]) -> CmdResult {
    if args.len() < 3 {
        return Err(subcommand_error(args));
    }
    let sub = args[1].to_ascii_lowercase();
    let now = now_ms(store);
    read(store, &args[2], |s| {
        let s = s.ok_or(CmdError::Text("ERR no such key"))?;
        match &sub[..] {
            b"consumers" if args.len() == 4 => {
                let g = s.groups.get(&args[3]).ok_or_else(|| {
                    CmdError::Owned(format!(
                        "NOGROUP No such consumer group '{}' for key name '{}'",
                        lossy(&args[3]),
                        lossy(&args[2])
                    ))
                })?;
                Ok(F::array(
                    g.consumers
                        .iter()
                        .map(|(n, c)| {
                            F::map(vec![
                                name("name"),
                                F::bulk(n.clone()),
                                name("pending"),
                                F::int(c.pel.len() as i64),
                                name("idle"),
                                F::int((now - c.seen_time).max(0)),
                            ])
                        })
                        .collect(),
                ))
            }
            b"groups" if args.len() == 3 => Ok(F::array(
                s.groups
                    .iter()
                    .map(|(n, g)| {
                        F::map(vec![
                            name("name"),
                            F::bulk(n.clone()),
                            name("consumers"),
                            F::int(g.consumers.len() as i64),
                            name("pending"),
                            F::int(g.pel.len() as i64),
                            name("last-delivered-id"),
                            id_frame(g.last_id),
                            name("entries-read"),
                            entries_read_frame(g),
                            name("lag"),
                            lag_frame(s, g),
                        ])
                    })
                    .collect(),
            )),
            b"stream" => stream_info(s, args),
            _ => Err(subcommand_error(args)),
        }
    })?
}

fn stream_info(s: &Stream, args: &[Bytes]) -> CmdResult {
    let opts = &args[3..];
    let full = !opts.is_empty();
    let mut count: i64 = 10;
    if full {
        if (opts.len() != 1 && opts.len() != 3) || !eq(&opts[0], "full") {
            return Err(subcommand_error(args));
        }
        if opts.len() == 3 {
            if !eq(&opts[1], "count") {
                return Err(subcommand_error(args));
            }
            count = ll(&opts[2], None)?;
            if count < 0 {
                count = 10;
            }
        }
    }
    let mut m = vec![
        name("length"),
        F::int(s.length as i64),
        name("radix-tree-keys"),
        F::int(s.node_count() as i64),
        name("radix-tree-nodes"),
        F::int(s.rax_nodes() as i64),
        name("last-generated-id"),
        id_frame(s.last_id),
        name("max-deleted-entry-id"),
        id_frame(s.max_deleted),
        name("entries-added"),
        F::int(s.entries_added as i64),
        name("recorded-first-entry-id"),
        id_frame(s.first_id),
    ];
    if !full {
        let first = s.range(StreamId::MIN, StreamId::MAX, false, 1);
        let last = s.range(StreamId::MIN, StreamId::MAX, true, 1);
        m.extend([
            name("groups"),
            F::int(s.groups.len() as i64),
            name("first-entry"),
            first.first().map_or_else(F::nil, entry_frame),
            name("last-entry"),
            last.first().map_or_else(F::nil, entry_frame),
        ]);
        return Ok(F::map(m));
    }
    let count = count as usize;
    m.push(name("entries"));
    m.push(entries_frame(&s.range(StreamId::MIN, StreamId::MAX, false, count)));
    m.push(name("groups"));
    m.push(F::array(s.groups.iter().map(|(n, g)| group_full(s, n, g, count)).collect()));
    Ok(F::map(m))
}

/// One group in `XINFO STREAM FULL`: its counters, up to `count` pending entries (0: all), and
/// each consumer with up to `count` of its own.
fn group_full(s: &Stream, n: &Bytes, g: &Group, count: usize) -> shoal_wire::proto::Frame {
    let within = |i: usize| count == 0 || i < count;
    let pending = g
        .pel
        .iter()
        .enumerate()
        .take_while(|(i, _)| within(*i))
        .map(|(_, (id, p))| {
            F::array(vec![
                id_frame(*id),
                F::bulk(p.consumer.clone()),
                F::int(p.delivery_time),
                F::int(p.delivery_count as i64),
            ])
        })
        .collect();
    let consumers = g
        .consumers
        .iter()
        .map(|(cn, c)| {
            let pel = c
                .pel
                .iter()
                .enumerate()
                .take_while(|(i, _)| within(*i))
                .map(|(_, id)| {
                    let p = &g.pel[id];
                    F::array(vec![id_frame(*id), F::int(p.delivery_time), F::int(p.delivery_count as i64)])
                })
                .collect();
            F::map(vec![
                name("name"),
                F::bulk(cn.clone()),
                name("seen-time"),
                F::int(c.seen_time),
                name("pel-count"),
                F::int(c.pel.len() as i64),
                name("pending"),
                F::array(pel),
            ])
        })
        .collect();
    F::map(vec![
        name("name"),
        F::bulk(n.clone()),
        name("last-delivered-id"),
        id_frame(g.last_id),
        name("entries-read"),
        entries_read_frame(g),
        name("lag"),
        lag_frame(s, g),
        name("pel-count"),
        F::int(g.pel.len() as i64),
        name("pending"),
        F::array(pending),
        name("consumers"),
        F::array(consumers),
    ])
}
