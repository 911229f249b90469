//! One admitted op against the store: the wire op becomes a store call (or a typed command,
//! `crate::commands`) and its result a wire reply. The one place where `proto` types meet the
//! store's own.

use bytes::Bytes;
use shoal_wire::ops::{OpClass, class_of, key_of};
use shoal_wire::proto::{self, Op, Reply, op::Kind, reply};

use super::reply::{error, int, nil, ok, result_int, result_value, store_error, value, value_or_nil};
use crate::membership::view::NodeView;
use crate::store::{ExpireFlags, Presence, SetCondition, SetExpiry, SetOptions, Store, TtlState};

pub(super) fn apply_op(store: &Store, view: &NodeView, op: Op) -> Reply {
    if op.fallback
        && class_of(&op) == OpClass::Read
        && let Some(key) = key_of(&op)
        && store.presence(key) == Presence::Absent
    {
        return Reply { kind: Some(reply::Kind::Absent(proto::Empty {})), ..Default::default() };
    }
    let Some(kind) = op.kind else { return error("ERR empty operation") };
    match kind {
        Kind::Get(o) if o.track != 0 => tracked_get(store, view, o),
        Kind::Get(o) if o.nil_if_not_string => value_or_nil(store.get(&o.key)),
        Kind::Get(o) => result_value(store.get_checked(&o.key)),
        Kind::Set(o) => set(store, o, None),
        Kind::SetIfEqual(o) => match o.set {
            Some(s) => set(store, s, Some(o.compare)),
            None => error("ERR SET without its key"),
        },
        Kind::Del(o) => int(store.del(&o.key)),
        Kind::Exists(o) => int(store.exists(&o.key)),
        Kind::Touch(o) => int(store.touch(&o.key)),
        Kind::TypeOf(o) => value(store.type_of(&o.key).as_bytes().to_vec().into()),
        Kind::Append(o) => result_int(store.append(&o.key, &o.value)),
        Kind::Strlen(o) => result_int(store.strlen(&o.key)),
        Kind::GetRange(o) => store.getrange(&o.key, o.start, o.end).map_or_else(store_error, value),
        Kind::SetRange(o) => result_int(store.setrange(&o.key, o.offset, &o.value)),
        Kind::IncrBy(o) => result_int(store.incr_by(&o.key, o.delta)),
        Kind::IncrByFloat(o) => store.incr_by_float(&o.key, &o.increment).map_or_else(store_error, value),
        Kind::GetDel(o) => result_value(store.getdel(&o.key)),
        Kind::GetEx(o) => getex(store, o),
        Kind::Expire(o) => {
            let at = o.at.map_or(0, |e| absolute_ms_signed(store, e));
            int(store.expire(&o.key, at, ExpireFlags { nx: o.nx, xx: o.xx, gt: o.gt, lt: o.lt }))
        }
        Kind::Persist(o) => int(store.persist(&o.key)),
        Kind::Ttl(o) => ttl(store, o),
        Kind::Scan(o) => scan(store, o),
        Kind::Keys(o) => Reply {
            kind: Some(reply::Kind::Keys(proto::KeyList { keys: store.keys(&o.pattern) })),
            ..Default::default()
        },
        Kind::RandomKey(_) => value_or_nil(store.random_key()),
        Kind::DbSize(_) => int(store.len()),
        Kind::SlotStats(o) => slot_stats(store, view, o),
        Kind::Flush(_) => flush(store, view),
        Kind::MsetNx(o) => msetnx(store, o),
        Kind::Fetch(o) => fetch(store, o),
        // `check` has already refused the whole op unless every entry's slot is moving in.
        Kind::Import(o) => {
            int(store
                .import(o.entries.iter().map(|e| (&e.key[..], &e.value[..], e.expire_at_ms, e.value_type))))
        }
        Kind::Command(c) if c.scratch => crate::commands::run_scratch(store, &c.args, &c.inputs, &c.outputs),
        Kind::Command(c) if c.resp != 0 => crate::commands::run_resp(store, &c.args, c.resp == 3),
        Kind::Command(c) => crate::commands::run(store, &c.args),
        Kind::Piece(_) | Kind::Assembled(_) => error("ERR a piece of an op arrived outside its op"),
        Kind::Watch(o) => watch(store, o),
        Kind::Transaction(_) => error("ERR a transaction cannot hold a transaction"),
        Kind::Publish(p) => {
            int(store.events.sink().map_or(0, |s| s.publish(&p.channel, &p.message, p.sharded)) as i64)
        }
        Kind::Script(_) | Kind::ScriptAdmin(_) => {
            error("ERR scripts run on the node's script thread, not here")
        }
    }
}

/// SET with its condition, expiry and GET options; `compare`: IFEQ's value.
fn set(store: &Store, o: proto::Set, compare: Option<Bytes>) -> Reply {
    let expiry = match o.expiry {
        Some(e) => SetExpiry::At(absolute_ms(store, e)),
        None if o.keep_ttl => SetExpiry::Keep,
        None => SetExpiry::Clear,
    };
    let condition = match o.condition() {
        proto::SetCondition::SetAlways => SetCondition::Always,
        proto::SetCondition::SetIfAbsent => SetCondition::IfAbsent,
        proto::SetCondition::SetIfPresent => SetCondition::IfPresent,
        proto::SetCondition::SetIfEqual => SetCondition::IfEqual(compare.unwrap_or_default()),
    };
    match store.set(&o.key, &o.value, SetOptions { condition, expiry, get: o.get }) {
        Ok(out) if o.get => value_or_nil(out.old),
        Ok(out) if out.stored => ok(),
        Ok(_) => nil(),
        Err(e) => store_error(e),
    }
}

/// A key's remaining ms (-2: missing, -1: no expiry), or with `absolute` its expiry time.
fn ttl(store: &Store, o: proto::Ttl) -> Reply {
    int(match store.ttl(&o.key) {
        TtlState::Missing => -2,
        TtlState::Persistent => -1,
        TtlState::ExpiresAt(at) if o.absolute => at as i64,
        TtlState::ExpiresAt(at) => at.saturating_sub(store.now_ms()) as i64,
    })
}

/// One SCAN page of this node's keys.
fn scan(store: &Store, o: proto::Scan) -> Reply {
    let pattern = o.has_pattern.then_some(&o.pattern[..]);
    let page = store.scan(o.cursor, o.count as usize, pattern, &o.type_filter);
    Reply {
        kind: Some(reply::Kind::Scan(proto::ScanPage { cursor: page.cursor, keys: page.keys })),
        ..Default::default()
    }
}

/// FLUSHALL, refused while slots move: a flush racing a move could let copies still in flight
/// bring flushed keys back.
fn flush(store: &Store, view: &NodeView) -> Reply {
    if view.topology.as_ref().is_some_and(|t| !t.migrations.is_empty()) {
        return error(
            "ERR FLUSHALL cannot run while slots are moving between nodes; try again once SHOAL \
             TOPOLOGY shows migrations=0",
        );
    }
    store.flush();
    ok()
}

fn msetnx(store: &Store, o: proto::MSetNx) -> Reply {
    if o.keys.len() != o.values.len() {
        return error("ERR wrong number of arguments for 'msetnx' command");
    }
    let pairs: Vec<(&[u8], &[u8])> =
        o.keys.iter().zip(o.values.iter()).map(|(k, v)| (&k[..], &v[..])).collect();
    result_int(store.mset_nx(&pairs))
}

/// A migration's copy of one key: its value, expiry and type, or nil.
fn fetch(store: &Store, o: proto::Fetch) -> Reply {
    match store.fetch(&o.key) {
        Some((value, expire_at_ms, value_type)) => Reply {
            kind: Some(reply::Kind::Entry(Box::new(proto::ExportEntry {
                slot: shoal_wire::key_slot(&o.key).into(),
                key: o.key,
                value,
                expire_at_ms,
                partial: false,
                value_type: value_type as u32,
            }))),
            ..Default::default()
        },
        None => nil(),
    }
}

/// GETEX: nil for a missing key whatever the arguments; otherwise the expiry argument is
/// validated with Redis's rules and texts before the value is returned and the TTL changed.
pub(super) fn getex(store: &Store, o: proto::GetEx) -> Reply {
    use proto::GetExMode::*;
    let mode = o.mode();
    let expiry = match mode {
        GetexGet => SetExpiry::Keep,
        GetexPersist => SetExpiry::Clear,
        GetexEx | GetexPx | GetexExat | GetexPxat => {
            if !store.exists(&o.key) {
                return nil();
            }
            let Some(n) = shoal_wire::num::parse_i64(&o.expire_arg) else {
                return error("ERR value is not an integer or out of range");
            };
            let seconds = matches!(mode, GetexEx | GetexExat);
            if n <= 0 || (seconds && n > i64::MAX / 1000) {
                return error("ERR invalid expire time in 'getex' command");
            }
            let ms = if seconds { n * 1000 } else { n };
            let at = if matches!(mode, GetexEx | GetexPx) {
                match (store.now_ms() as i64).checked_add(ms) {
                    Some(at) => at,
                    None => return error("ERR invalid expire time in 'getex' command"),
                }
            } else {
                ms
            };
            SetExpiry::At(at as u64)
        }
    };
    result_value(store.getex(&o.key, expiry))
}

/// A wire expiry as absolute Unix ms; relative times are taken from the node's clock. Negative
/// results clamp to 0, which every caller treats as "already past".
pub(super) fn absolute_ms(store: &Store, e: proto::Expiry) -> u64 {
    absolute_ms_signed(store, e).max(0) as u64
}

pub(super) fn absolute_ms_signed(store: &Store, e: proto::Expiry) -> i64 {
    if e.relative { (store.now_ms() as i64).saturating_add(e.ms) } else { e.ms }
}

/// A GET for a router's near cache: registered for invalidation *before* the read (see
/// store/tracking.rs), and answered as `tracked` (with the TTL) only if the router tracks here and
/// this node owns the slot outright; otherwise as a plain GET, which the router does not cache.
pub(super) const TRACKED_VALUE_MAX: usize = 512 << 10;

pub(super) fn tracked_get(store: &Store, view: &NodeView, o: proto::Get) -> Reply {
    let tracked =
        view.owns_outright(shoal_wire::key_slot(&o.key)) && store.watches.tracking.track(o.track, &o.key);
    match store.get_with_expiry(&o.key) {
        // A large value keeps its zero-copy path in pieces (`Value` only); routers do not cache
        // values this large anyway.
        Ok(Some((v, at))) if tracked && v.len() <= TRACKED_VALUE_MAX => {
            let ttl_ms = if at == 0 { 0 } else { at.saturating_sub(store.now_ms()).max(1) };
            Reply {
                kind: Some(reply::Kind::Tracked(proto::Tracked { value: v, ttl_ms })),
                ..Default::default()
            }
        }
        Ok(v) => value_or_nil(v.map(|(v, _)| v)),
        Err(_) if o.nil_if_not_string => nil(),
        Err(e) => store_error(e),
    }
}

/// SHOAL SLOT-STATS: the numbers of the slots in the range that this node owns.
pub(super) fn slot_stats(store: &Store, view: &NodeView, o: proto::SlotStats) -> Reply {
    let last = o.last_slot.min(shoal_wire::SLOT_COUNT as u32 - 1);
    let owned: Vec<u16> = (o.first_slot..=last).map(|s| s as u16).filter(|&s| view.owns(s)).collect();
    if o.reset {
        // CONFIG RESETSTAT: no numbers wanted back (counting keys walks the whole store).
        owned.iter().for_each(|&slot| store.slot_traffic.reset(slot));
        return Reply {
            kind: Some(reply::Kind::SlotStats(proto::SlotStatsReply { slots: Vec::new() })),
            ..Default::default()
        };
    }
    let keys = if owned.is_empty() { Vec::new() } else { store.keys_per_slot() };
    let slots = owned
        .into_iter()
        .map(|slot| {
            let t = store.slot_traffic.get(slot);
            proto::SlotStat {
                slot: u32::from(slot),
                keys: keys[usize::from(slot)],
                reads: t.reads,
                writes: t.writes,
                bytes_in: t.bytes_in,
                bytes_out: t.bytes_out,
            }
        })
        .collect();
    Reply { kind: Some(reply::Kind::SlotStats(proto::SlotStatsReply { slots })), ..Default::default() }
}

pub(super) fn watch(store: &Store, o: proto::Watch) -> Reply {
    if o.release {
        o.keys.iter().for_each(|k| store.watches.release(k));
        return ok();
    }
    let versions = o
        .keys
        .iter()
        .map(|k| {
            // A key that has already expired is gone before the watch starts (as in Redis, its
            // later removal is no change).
            store.presence(k);
            store.watches.register(k)
        })
        .collect();
    Reply { kind: Some(reply::Kind::Versions(proto::Versions { versions })), ..Default::default() }
}
