//! Applies wire ops to the store: the one place where `proto` types meet `store` types, and where
//! store errors become wire errors (their `Display` is already Redis's text).

use prost::Message as _;
use shoal_wire::ops::{OpClass, class_of, key_of, keys_of};
use shoal_wire::proto::{self, Op, Reply, op::Kind, reply};

use crate::membership::view::NodeView;
use crate::store::{ExpireFlags, Presence, SetCondition, SetExpiry, SetOptions, Store, StoreError, TtlState};

/// Applies every op of a batch in order, returning one reply per op (tests and tools; the
/// service applies ops one at a time with [`apply_checked`] so that large replies can leave in
/// pieces before later ops run).
pub fn apply_batch(store: &Store, view: &NodeView, batch_version: u64, ops: Vec<Op>) -> Vec<Reply> {
    ops.into_iter().map(|op| apply_checked(store, view, batch_version, op)).collect()
}

/// Applies one op routed by `batch_version`: ops for slots this node does not serve at that
/// version get a `moved` reply instead (see `membership.rs`).
pub fn apply_checked(store: &Store, view: &NodeView, batch_version: u64, op: Op) -> Reply {
    if let Some(Kind::Transaction(t)) = op.kind {
        return transaction(store, view, batch_version, store.gate.write(), t);
    }
    let shared = store.gate.read();
    apply_gated(store, view, batch_version, op, shared)
}

/// Like [`apply_checked`], but without waiting for the store's gate: `Err(op)` when something
/// holds it exclusively (a script, or a transaction), so that the caller can wait for it without
/// holding a thread (a script may hold the gate for seconds).
pub fn try_apply_checked(store: &Store, view: &NodeView, batch_version: u64, op: Op) -> Result<Reply, Op> {
    if let Some(Kind::Transaction(_)) = &op.kind {
        let Some(exclusive) = store.gate.try_write() else { return Err(op) };
        let Some(Kind::Transaction(t)) = op.kind else { unreachable!("matched above") };
        return Ok(transaction(store, view, batch_version, exclusive, t));
    }
    match store.gate.try_read() {
        Some(shared) => Ok(apply_gated(store, view, batch_version, op, shared)),
        None => Err(op),
    }
}

fn apply_gated(
    store: &Store,
    view: &NodeView,
    batch_version: u64,
    op: Op,
    _shared: parking_lot::RwLockReadGuard<'_, ()>,
) -> Reply {
    match check(view, batch_version, &op) {
        // The common case: nobody watches, nobody is blocked and no replica follows this node.
        Ok(())
            if !store.watches.active()
                && !store.blocked.active()
                && !store.events.changes.active()
                && !store.watches.tracking.active() =>
        {
            apply(store, view, op)
        }
        Ok(()) => {
            let write = class_of(&op) != OpClass::Read;
            // Clients blocked on a key this op writes run right after it (as Redis serves them
            // after the command that made their key ready).
            let ready = (write && store.blocked.active()).then(|| owned_keys(&op));
            let reply = apply_seen(store, view, op, write);
            if let Some(keys) = ready {
                serve_blocked(store, view, keys);
            }
            reply
        }
        Err(version) => moved(version),
    }
}

fn owned_keys(op: &Op) -> Vec<bytes::Bytes> {
    keys_of(op).into_iter().map(bytes::Bytes::copy_from_slice).collect()
}

/// Whether a blocking command's attempt found nothing (its non-blocking form answered null).
fn found_nothing(reply: &Reply) -> bool {
    use shoal_wire::proto::frame;
    matches!(
        &reply.kind,
        Some(reply::Kind::Frame(f)) if matches!(f.kind, Some(frame::Kind::Nil(_) | frame::Kind::NullArray(_)))
    )
}

/// Runs the non-blocking form of a blocked command (checked at the router's version) and, when
/// it found something, touches what it wrote. The registry lock is held by the caller. Only an
/// attempt that found something (or failed) counts in the slot stats: a command that waits is
/// one command, however often it looks.
fn attempt_blocked(store: &Store, view: &NodeView, version: u64, op: &Op) -> Reply {
    if let Err(v) = check(view, version, op) {
        return moved(v);
    }
    let counted = Counted::of(store, op);
    let reply = apply_seen_with(store, view, op.clone(), true, false);
    if let Some(counted) = counted
        && !found_nothing(&reply)
    {
        counted.record(store, reply.encoded_len() as u64);
    }
    reply
}

/// Applies `op`, which [`check`] admitted, where watchers and replicas see it: a write touches
/// its watched keys first (under the gate, no EXEC runs between the two) and is recorded in the
/// change log after it ran (replicas read the keys' state as the write left it). A FLUSHALL
/// records itself (`Store::flush`), and so does a SET, value and all, under its shard lock
/// (`Store::set`; see store/changes.rs).
fn apply_seen(store: &Store, view: &NodeView, op: Op, write: bool) -> Reply {
    apply_seen_with(store, view, op, write, true)
}

/// [`apply_seen`], counted in the slot stats or not (`count`).
fn apply_seen_with(store: &Store, view: &NodeView, op: Op, write: bool, count: bool) -> Reply {
    if write && store.watches.active() {
        touch_keys(store, &op);
    }
    // A SET records its own change, value and all, under its shard lock (store/changes.rs).
    let log = write && store.events.changes.active() && !matches!(op.kind, Some(Kind::Set(_)));
    let written = (log || (write && store.watches.tracking.active())).then(|| owned_keys(&op));
    let reply = if count { apply(store, view, op) } else { apply_uncounted(store, view, op) };
    if let Some(keys) = written {
        // Routers caching these keys hear of the write now, after it is applied and before its
        // reply leaves (see store/tracking.rs for why after).
        if store.watches.tracking.active() {
            keys.iter().for_each(|k| store.watches.tracking.touch(k));
        }
        if log {
            store.events.changes.keys(keys);
        }
    }
    reply
}

/// Serves the clients blocked on `keys`, longest waiting first, while their commands find
/// something; a served command that writes other keys (BLMOVE's destination) makes those keys
/// ready in turn. As in Redis, a client is served from the key that became ready (not from the
/// first of its keys that holds something), and a key of another type than a client waits for
/// (a string SET where BLPOP waits) serves nobody.
fn serve_blocked(store: &Store, view: &NodeView, keys: Vec<bytes::Bytes>) {
    let mut locked = store.blocked.lock();
    let mut ready: std::collections::VecDeque<bytes::Bytes> =
        keys.into_iter().filter(|k| locked.queues.has(k)).collect();
    while let Some(key) = ready.pop_front() {
        for id in locked.queues.waiting_on(&key) {
            let Some(w) = locked.queues.get(id) else { continue };
            let reply = attempt_blocked(store, view, w.version, &narrowed(&w.op, &key));
            if found_nothing(&reply) {
                break;
            }
            if is_wrong_type(&reply) {
                continue;
            }
            let w = locked.queues.remove(id).expect("a registered waiter");
            ready.extend(owned_keys(&w.op).into_iter().filter(|k| *k != key && locked.queues.has(k)));
            // A client that went away meanwhile loses what its command took, as in Redis.
            let _ = w.reply.send(reply);
        }
    }
}

fn is_wrong_type(reply: &Reply) -> bool {
    use shoal_wire::proto::frame;
    matches!(
        &reply.kind,
        Some(reply::Kind::Frame(f)) if matches!(&f.kind, Some(frame::Kind::Error(e)) if e.starts_with("WRONGTYPE"))
    )
}

/// A blocked command reduced to the key that became ready (BLPOP a b 0 served by b: BLPOP b 0).
fn narrowed(op: &Op, key: &bytes::Bytes) -> Op {
    let Some(Kind::Command(c)) = &op.kind else { return op.clone() };
    let name = c.args[0].to_ascii_lowercase();
    let args = match &name[..] {
        b"blpop" | b"brpop" | b"bzpopmin" | b"bzpopmax" => {
            vec![c.args[0].clone(), key.clone(), c.args[c.args.len() - 1].clone()]
        }
        // BLMPOP timeout numkeys key ... rest
        b"blmpop" | b"bzmpop" if c.args.len() >= 3 + c.keys.len() => {
            let mut a =
                vec![c.args[0].clone(), c.args[1].clone(), bytes::Bytes::from_static(b"1"), key.clone()];
            a.extend_from_slice(&c.args[3 + c.keys.len()..]);
            a
        }
        _ => return op.clone(),
    };
    let command = proto::Command { args, keys: vec![key.clone()], ..(**c).clone() };
    Op { kind: Some(Kind::Command(Box::new(command))), ..op.clone() }
}

/// What a `Block` call does first, under the gate and the registry lock: the command's attempt;
/// `Ok(reply)` if it found something (or failed, or the slot is not served here), else the
/// waiter is queued and its id returned.
pub fn block_or_queue(
    store: &Store,
    view: &NodeView,
    version: u64,
    op: Op,
    reply: tokio::sync::oneshot::Sender<Reply>,
) -> Result<Reply, u64> {
    let _shared = store.gate.read();
    let mut locked = store.blocked.lock();
    let first = attempt_blocked(store, view, version, &op);
    if !found_nothing(&first) {
        drop(locked);
        // What the attempt wrote (BLMOVE's destination) may unblock others.
        if store.blocked.active() {
            serve_blocked(store, view, owned_keys(&op));
        }
        return Ok(first);
    }
    let keys = owned_keys(&op);
    Err(locked.queues.register(crate::store::blocked::Waiter { keys, op, version, reply }))
}

/// Withdraws waiter `id` (timeout, moved slot, cancelled call); false if it was served first.
pub fn withdraw(store: &Store, id: u64) -> bool {
    store.blocked.lock().queues.remove(id).is_some()
}

/// Whether waiter `id`'s command may still wait here: its keys' slots are served at its version
/// by the current view (`Err`: the version to answer `moved` with).
pub fn still_served(view: &NodeView, version: u64, op: &Op) -> Result<(), u64> {
    check(view, version, op)
}

/// Whether `op` only reads (a replica may serve it for replica reads): the single-key reads
/// (`class_of`), the whole-keyspace ones, and typed commands the router flags read-only when the
/// node's own table (the script table's flags) agrees, so no router mistake writes a replica.
pub(crate) fn reads_only(op: &Op) -> bool {
    match &op.kind {
        Some(Kind::Scan(_) | Kind::Keys(_) | Kind::RandomKey(_) | Kind::DbSize(_)) => true,
        Some(Kind::Command(c)) => {
            c.readonly
                && c.args
                    .first()
                    .and_then(|name| crate::script::table::lookup(name))
                    .is_some_and(|cmd| !cmd.writes() && cmd.flags & crate::script::table::NOSCRIPT == 0)
        }
        _ => class_of(op) == OpClass::Read,
    }
}

pub(crate) fn moved(version: u64) -> Reply {
    Reply { kind: Some(reply::Kind::Moved(version)) }
}

/// Tells the watches that `op` writes its keys.
fn touch_keys(store: &Store, op: &Op) {
    match &op.kind {
        Some(Kind::Flush(_)) => store.watches.touch_all_watched(),
        Some(Kind::Watch(_) | Kind::Fetch(_)) => {}
        _ => keys_of(op).into_iter().for_each(|k| store.watches.touch_watched(k)),
    }
}

/// MULTI/EXEC: every op of `t` applied with no other op in between, or none of them (see the
/// `Transaction` message in the proto for the checks and replies).
fn transaction(
    store: &Store,
    view: &NodeView,
    batch_version: u64,
    exclusive: parking_lot::RwLockWriteGuard<'_, ()>,
    t: proto::Transaction,
) -> Reply {
    transaction_with(store, view, batch_version, exclusive, t, &mut |_| {
        error("ERR a transaction with a script runs on the node's script thread")
    })
}

/// Whether a transaction holds a script (it then runs on the script thread, which has the VM).
pub fn holds_script(op: &Op) -> bool {
    matches!(&op.kind, Some(Kind::Transaction(t)) if t.ops.iter().any(|o| matches!(o.kind, Some(Kind::Script(_)))))
}

/// A transaction whose script ops `script` runs (EVAL inside MULTI), under `exclusive`.
pub(crate) fn transaction_with(
    store: &Store,
    view: &NodeView,
    batch_version: u64,
    _exclusive: parking_lot::RwLockWriteGuard<'_, ()>,
    t: proto::Transaction,
    script: &mut dyn FnMut(proto::Script) -> Reply,
) -> Reply {
    for op in &t.ops {
        if matches!(op.kind, Some(Kind::Transaction(_) | Kind::Watch(_))) {
            return error("ERR a transaction cannot hold a transaction or a watch");
        }
        if let Err(version) = check(view, batch_version, op) {
            return moved(version);
        }
    }
    let whole = Op { kind: Some(Kind::Transaction(t)), ..Default::default() };
    if let Err(refused) = check_group(view, batch_version, keys_of(&whole)) {
        return refused;
    }
    let Some(Kind::Transaction(t)) = whole.kind else { unreachable!("built above") };
    for w in &t.watches {
        // A watched key that has expired since counts as changed: expire it now (which touches it).
        store.presence(&w.key);
        if !store.watches.unchanged(&w.key, w.version) {
            return Reply { kind: Some(reply::Kind::Aborted(proto::Empty {})) };
        }
    }
    let ready: Vec<bytes::Bytes> = if store.blocked.active() {
        // A script's keys are served by the script thread, after it ran, from what it wrote.
        t.ops
            .iter()
            .filter(|op| class_of(op) != OpClass::Read && !matches!(op.kind, Some(Kind::Script(_))))
            .flat_map(owned_keys)
            .collect()
    } else {
        Vec::new()
    };
    // Replicas get the transaction's keys as one unit (dropped before the gate is).
    let _unit = store.events.changes.unit();
    let replies = t
        .ops
        .into_iter()
        .map(|op| {
            if let Some(Kind::Script(s)) = op.kind {
                return script(*s);
            }
            let write = class_of(&op) != OpClass::Read;
            apply_seen(store, view, op, write)
        })
        .collect();
    // Blocked clients are served after the whole transaction, as in Redis.
    if !ready.is_empty() {
        serve_blocked(store, view, ready);
    }
    Reply { kind: Some(reply::Kind::Replies(proto::Replies { replies })) }
}

/// A transaction's (or script's) keys are in a slot that is moving between nodes: the router
/// tries again (until its deadline) rather than run it while the keys may be on either node.
pub const TRYAGAIN: &str = "TRYAGAIN a key of the transaction is in a slot moving between nodes; try again";

/// The checks of an op group that must run on one node as a whole (a transaction, a script):
/// every key's slot served here at `version` (else `moved` for the whole group) and none of them
/// moving (else `TRYAGAIN`: the router sends the group again once the move is done).
pub(crate) fn check_group<'a>(
    view: &NodeView,
    version: u64,
    keys: impl IntoIterator<Item = &'a [u8]>,
) -> Result<(), Reply> {
    for key in keys {
        let slot = shoal_wire::key_slot(key);
        if let Err(v) = view.check(slot, version) {
            return Err(moved(v));
        }
        if view.is_moving(slot) {
            return Err(error(TRYAGAIN));
        }
    }
    Ok(())
}

/// An op from a running script, which holds the gate: seen by watchers and replicas as any op.
pub(crate) fn apply_for_script(store: &Store, view: &NodeView, op: Op, write: bool) -> Reply {
    apply_seen(store, view, op, write)
}

/// After a script: the clients blocked on keys it wrote are served (as after a transaction).
pub(crate) fn serve_blocked_after(store: &Store, view: &NodeView, written: Vec<bytes::Bytes>) {
    if !written.is_empty() && store.blocked.active() {
        serve_blocked(store, view, written);
    }
}

fn watch(store: &Store, o: proto::Watch) -> Reply {
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
    Reply { kind: Some(reply::Kind::Versions(proto::Versions { versions })) }
}

fn check(view: &NodeView, batch_version: u64, op: &Op) -> Result<(), u64> {
    if let Some(key) = key_of(op) {
        return view.check(shoal_wire::key_slot(key), batch_version);
    }
    match &op.kind {
        Some(Kind::MsetNx(o)) => {
            for k in &o.keys {
                view.check(shoal_wire::key_slot(k), batch_version)?;
            }
        }
        Some(Kind::Command(o)) => {
            for k in &o.keys {
                view.check(shoal_wire::key_slot(k), batch_version)?;
            }
        }
        // A release goes wherever the key is now; a node that has no such watch ignores it.
        Some(Kind::Watch(o)) if !o.release => {
            for k in &o.keys {
                view.check(shoal_wire::key_slot(k), batch_version)?;
            }
        }
        Some(Kind::Import(o)) => {
            for e in &o.entries {
                view.check_import(shoal_wire::key_slot(&e.key), batch_version)?;
            }
        }
        // Whole-keyspace ops must see every node at one version (a router that missed a new node
        // would leave its keys out of DBSIZE, KEYS or FLUSHALL).
        Some(
            Kind::Scan(_)
            | Kind::Keys(_)
            | Kind::RandomKey(_)
            | Kind::DbSize(_)
            | Kind::Flush(_)
            | Kind::SlotStats(_),
        ) => {
            view.check_version(batch_version)?;
        }
        _ => {}
    }
    Ok(())
}

/// Runs one op that [`check`] admitted, raising its keyspace notifications (`notify.rs`).
fn apply(store: &Store, view: &NodeView, op: Op) -> Reply {
    // Per-slot traffic (SHOAL SLOT-STATS), counted here where every op a client caused runs
    // (batches, transactions, scripts' calls). A one-key op costs a CRC16 and a few relaxed adds;
    // only ops naming several keys gather them.
    let Some(counted) = Counted::of(store, &op) else {
        return apply_uncounted(store, view, op);
    };
    let reply = apply_uncounted(store, view, op);
    counted.record(store, reply.encoded_len() as u64);
    reply
}

/// [`apply`] without the slot stats.
fn apply_uncounted(store: &Store, view: &NodeView, op: Op) -> Reply {
    crate::notify::op(store, op, |op| apply_op(store, view, op))
}

/// What [`apply`] counts of an op before running it: its keys' slots, read or write, its size.
enum Counted {
    One { slot: u16, write: bool, bytes_in: u64 },
    Many { slots: Vec<u16>, write: bool, bytes_in: u64 },
}

impl Counted {
    /// `None` when counting is off (`cluster-slot-stats-enabled`) or `op` is not client traffic.
    fn of(store: &Store, op: &Op) -> Option<Counted> {
        if !store.slot_traffic.enabled() {
            return None;
        }
        let write = class_of(op) != OpClass::Read;
        if let Some(key) = key_of(op) {
            // WATCH is bookkeeping, and FETCH a slot migration's copy of the key: neither is
            // client traffic on it.
            if matches!(op.kind, Some(Kind::Watch(_) | Kind::Fetch(_))) {
                return None;
            }
            return Some(Counted::One {
                slot: shoal_wire::key_slot(key),
                write,
                bytes_in: op.encoded_len() as u64,
            });
        }
        // Migration plumbing and watches are not client traffic; a transaction's ops are counted
        // one by one as they run.
        let slots: Vec<u16> = match &op.kind {
            Some(Kind::MsetNx(_) | Kind::Command(_)) => {
                keys_of(op).into_iter().map(shoal_wire::key_slot).collect()
            }
            _ => return None,
        };
        (!slots.is_empty()).then(|| Counted::Many { slots, write, bytes_in: op.encoded_len() as u64 })
    }

    fn record(self, store: &Store, bytes_out: u64) {
        match self {
            Counted::One { slot, write, bytes_in } => {
                store.slot_traffic.record(slot, write, bytes_in, bytes_out)
            }
            Counted::Many { slots, write, bytes_in } => {
                let n = slots.len() as u64;
                for slot in slots {
                    store.slot_traffic.record(slot, write, bytes_in / n, bytes_out / n);
                }
            }
        }
    }
}

/// SHOAL SLOT-STATS: the numbers of the slots in the range that this node owns.
fn slot_stats(store: &Store, view: &NodeView, o: proto::SlotStats) -> Reply {
    let last = o.last_slot.min(shoal_wire::SLOT_COUNT as u32 - 1);
    let owned: Vec<u16> = (o.first_slot..=last).map(|s| s as u16).filter(|&s| view.owns(s)).collect();
    if o.reset {
        // CONFIG RESETSTAT: no numbers wanted back (counting keys walks the whole store).
        owned.iter().for_each(|&slot| store.slot_traffic.reset(slot));
        return Reply { kind: Some(reply::Kind::SlotStats(proto::SlotStatsReply { slots: Vec::new() })) };
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
    Reply { kind: Some(reply::Kind::SlotStats(proto::SlotStatsReply { slots })) }
}

fn apply_op(store: &Store, view: &NodeView, op: Op) -> Reply {
    if op.fallback
        && class_of(&op) == OpClass::Read
        && let Some(key) = key_of(&op)
        && store.presence(key) == Presence::Absent
    {
        return Reply { kind: Some(reply::Kind::Absent(proto::Empty {})) };
    }
    let Some(kind) = op.kind else { return error("ERR empty operation") };
    match kind {
        Kind::Get(o) if o.track != 0 => tracked_get(store, view, o),
        Kind::Get(o) if o.nil_if_not_string => value_or_nil(store.get(&o.key)),
        Kind::Get(o) => result_value(store.get_checked(&o.key)),
        Kind::Set(o) => {
            let expiry = match o.expiry {
                Some(e) => SetExpiry::At(absolute_ms(store, e)),
                None if o.keep_ttl => SetExpiry::Keep,
                None => SetExpiry::Clear,
            };
            let condition = match o.condition() {
                proto::SetCondition::SetAlways => SetCondition::Always,
                proto::SetCondition::SetIfAbsent => SetCondition::IfAbsent,
                proto::SetCondition::SetIfPresent => SetCondition::IfPresent,
            };
            match store.set(&o.key, &o.value, SetOptions { condition, expiry, get: o.get }) {
                Ok(out) if o.get => value_or_nil(out.old),
                Ok(out) if out.stored => ok(),
                Ok(_) => nil(),
                Err(e) => store_error(e),
            }
        }
        Kind::Del(o) => int(store.del(&o.key)),
        Kind::Exists(o) => int(store.exists(&o.key)),
        Kind::Touch(o) => int(store.touch(&o.key)),
        Kind::TypeOf(o) => value(store.type_of(&o.key).as_bytes().to_vec().into()),
        Kind::Append(o) => result_int(store.append(&o.key, &o.value)),
        Kind::Strlen(o) => result_int(store.strlen(&o.key)),
        Kind::GetRange(o) => match store.getrange(&o.key, o.start, o.end) {
            Ok(v) => value(v),
            Err(e) => store_error(e),
        },
        Kind::SetRange(o) => result_int(store.setrange(&o.key, o.offset, &o.value)),
        Kind::IncrBy(o) => match store.incr_by(&o.key, o.delta) {
            Ok(n) => int(n),
            Err(e) => store_error(e),
        },
        Kind::IncrByFloat(o) => match store.incr_by_float(&o.key, &o.increment) {
            Ok(v) => value(v),
            Err(e) => store_error(e),
        },
        Kind::GetDel(o) => result_value(store.getdel(&o.key)),
        Kind::GetEx(o) => getex(store, o),
        Kind::Expire(o) => {
            let at = o.at.map_or(0, |e| absolute_ms_signed(store, e));
            int(store.expire(&o.key, at, ExpireFlags { nx: o.nx, xx: o.xx, gt: o.gt, lt: o.lt }))
        }
        Kind::Persist(o) => int(store.persist(&o.key)),
        Kind::Ttl(o) => int(match store.ttl(&o.key) {
            TtlState::Missing => -2,
            TtlState::Persistent => -1,
            TtlState::ExpiresAt(at) if o.absolute => at as i64,
            TtlState::ExpiresAt(at) => at.saturating_sub(store.now_ms()) as i64,
        }),
        Kind::Scan(o) => {
            let pattern = o.has_pattern.then_some(&o.pattern[..]);
            let page = store.scan(o.cursor, o.count as usize, pattern, &o.type_filter);
            Reply { kind: Some(reply::Kind::Scan(proto::ScanPage { cursor: page.cursor, keys: page.keys })) }
        }
        Kind::Keys(o) => {
            Reply { kind: Some(reply::Kind::Keys(proto::KeyList { keys: store.keys(&o.pattern) })) }
        }
        Kind::RandomKey(_) => value_or_nil(store.random_key()),
        Kind::DbSize(_) => int(store.len()),
        Kind::SlotStats(o) => slot_stats(store, view, o),
        Kind::Flush(_) => {
            // A flush racing a move could let copies still in flight bring flushed keys back.
            if view.topology.as_ref().is_some_and(|t| !t.migrations.is_empty()) {
                return error(
                    "ERR FLUSHALL cannot run while slots are moving between nodes; try again once SHOAL \
                     TOPOLOGY shows migrations=0",
                );
            }
            store.flush();
            ok()
        }
        Kind::MsetNx(o) => {
            if o.keys.len() != o.values.len() {
                return error("ERR wrong number of arguments for 'msetnx' command");
            }
            let pairs: Vec<(&[u8], &[u8])> =
                o.keys.iter().zip(o.values.iter()).map(|(k, v)| (&k[..], &v[..])).collect();
            result_int(store.mset_nx(&pairs))
        }
        Kind::Fetch(o) => match store.fetch(&o.key) {
            Some((value, expire_at_ms, value_type)) => Reply {
                kind: Some(reply::Kind::Entry(Box::new(proto::ExportEntry {
                    slot: shoal_wire::key_slot(&o.key).into(),
                    key: o.key,
                    value,
                    expire_at_ms,
                    partial: false,
                    value_type: value_type as u32,
                }))),
            },
            None => nil(),
        },
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

/// GETEX: nil for a missing key whatever the arguments; otherwise the expiry argument is
/// validated with Redis's rules and texts before the value is returned and the TTL changed.
fn getex(store: &Store, o: proto::GetEx) -> Reply {
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
fn absolute_ms(store: &Store, e: proto::Expiry) -> u64 {
    absolute_ms_signed(store, e).max(0) as u64
}

fn absolute_ms_signed(store: &Store, e: proto::Expiry) -> i64 {
    if e.relative { (store.now_ms() as i64).saturating_add(e.ms) } else { e.ms }
}

fn ok() -> Reply {
    Reply { kind: Some(reply::Kind::Ok(proto::Empty {})) }
}

fn nil() -> Reply {
    Reply { kind: Some(reply::Kind::Nil(proto::Empty {})) }
}

fn value(v: bytes::Bytes) -> Reply {
    Reply { kind: Some(reply::Kind::Value(v)) }
}

/// A GET for a router's near cache: registered for invalidation *before* the read (see
/// store/tracking.rs), and answered as `tracked` (with the TTL) only if the router tracks here and
/// this node owns the slot outright; otherwise as a plain GET, which the router does not cache.
const TRACKED_VALUE_MAX: usize = 512 << 10;

fn tracked_get(store: &Store, view: &NodeView, o: proto::Get) -> Reply {
    let tracked =
        view.owns_outright(shoal_wire::key_slot(&o.key)) && store.watches.tracking.track(o.track, &o.key);
    match store.get_with_expiry(&o.key) {
        // A large value keeps its zero-copy path in pieces (`Value` only); routers do not cache
        // values this large anyway.
        Ok(Some((v, at))) if tracked && v.len() <= TRACKED_VALUE_MAX => {
            let ttl_ms = if at == 0 { 0 } else { at.saturating_sub(store.now_ms()).max(1) };
            Reply { kind: Some(reply::Kind::Tracked(proto::Tracked { value: v, ttl_ms })) }
        }
        Ok(v) => value_or_nil(v.map(|(v, _)| v)),
        Err(_) if o.nil_if_not_string => nil(),
        Err(e) => store_error(e),
    }
}

fn value_or_nil(v: Option<bytes::Bytes>) -> Reply {
    v.map_or_else(nil, value)
}

fn result_value(r: Result<Option<bytes::Bytes>, StoreError>) -> Reply {
    r.map_or_else(store_error, value_or_nil)
}

fn int(v: impl IntoI64) -> Reply {
    Reply { kind: Some(reply::Kind::Int(v.into_i64())) }
}

fn result_int<T: IntoI64>(r: Result<T, StoreError>) -> Reply {
    match r {
        Ok(v) => int(v),
        Err(e) => store_error(e),
    }
}

pub fn error(text: &str) -> Reply {
    Reply { kind: Some(reply::Kind::Error(text.to_string())) }
}

fn store_error(e: StoreError) -> Reply {
    error(&e.to_string())
}

trait IntoI64 {
    fn into_i64(self) -> i64;
}

impl IntoI64 for bool {
    fn into_i64(self) -> i64 {
        i64::from(self)
    }
}

impl IntoI64 for i64 {
    fn into_i64(self) -> i64 {
        self
    }
}

impl IntoI64 for usize {
    fn into_i64(self) -> i64 {
        self as i64
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use shoal_wire::proto::{Expiry, Get, IncrBy, Set, Ttl};

    use super::*;
    use crate::store::{ManualClock, StoreConfig};

    fn op(kind: Kind) -> Op {
        Op { kind: Some(kind), ..Default::default() }
    }

    /// A router stream tracking on `store`, read the way the Subscribe stream reads it.
    struct TrackingStream {
        outbox: Arc<crate::pubsub::Outbox>,
        rx: tokio::sync::mpsc::UnboundedReceiver<crate::pubsub::Out>,
    }

    fn tracking_stream(
        store: &Store,
        pubsub: &crate::pubsub::PubSub,
        token: u64,
        prefixes: Option<Vec<Bytes>>,
    ) -> TrackingStream {
        let (id, outbox, rx) = pubsub.attach();
        store.watches.tracking.enable(token, id, outbox.clone(), prefixes);
        TrackingStream { outbox, rx }
    }

    /// What the stream's queue received since the last call, as text; each delivery is marked
    /// taken as the stream does (a taken `invalidate_all` lets later invalidations queue again).
    fn invalidations(stream: &mut TrackingStream) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(o) = stream.rx.try_recv() {
            let list = match o {
                crate::pubsub::Out::Delivery(d) => vec![d],
                crate::pubsub::Out::Group(g) => g,
                crate::pubsub::Out::Overflow => break,
            };
            for d in list {
                stream.outbox.taken(&d);
                out.extend(d.invalidate.iter().map(|k| String::from_utf8_lossy(k).into_owned()));
                if d.invalidate_all {
                    out.push("*".into());
                }
            }
        }
        out
    }

    fn set(key: &str, value: &str, ttl_ms: Option<i64>) -> Op {
        op(Kind::Set(Set {
            key: Bytes::from(key.to_string()),
            value: Bytes::from(value.to_string()),
            expiry: ttl_ms.map(|ms| Expiry { ms, relative: true }),
            ..Default::default()
        }))
    }

    fn tracked_get(key: &str, token: u64) -> Op {
        op(Kind::Get(Get { key: Bytes::from(key.to_string()), track: token, ..Default::default() }))
    }

    #[test]
    fn a_set_records_its_value_once_and_inside_a_transaction_only_its_key_in_the_unit() {
        use crate::store::changes::{Change, Recorded};
        let store = Store::new(StoreConfig::default(), Arc::new(ManualClock::new(5_000)));
        let view = NodeView::unmanaged();
        store.events.changes.activate();
        let b = |s: &str| Bytes::from(s.to_string());
        let set = |k: &str, v: &str| op(Kind::Set(Set { key: b(k), value: b(v), ..Default::default() }));
        apply_checked(&store, &view, 0, set("a", "1"));
        apply_checked(&store, &view, 0, op(Kind::IncrBy(IncrBy { key: b("n"), delta: 1 })));
        let multi = proto::Transaction {
            ops: vec![set("b", "2"), set("c", "3"), op(Kind::IncrBy(IncrBy { key: b("n"), delta: 1 }))],
            watches: Vec::new(),
        };
        apply_checked(&store, &view, 0, op(Kind::Transaction(multi)));
        let (changes, _) = store.events.changes.read(0, 10, usize::MAX).unwrap();
        assert_eq!(
            changes,
            vec![
                Change::Value(Recorded { key: b("a"), value: b("1"), expire_at: 0 }),
                Change::Key(b("n")),
                Change::Unit(vec![b("b"), b("c"), b("n")]),
            ]
        );
    }

    #[test]
    fn a_blocked_command_counts_once_in_the_slot_stats() {
        let store = Store::new(StoreConfig::default(), Arc::new(ManualClock::new(5_000)));
        let view = NodeView::unmanaged();
        let command = |args: &[&str], key: &str| {
            op(Kind::Command(Box::new(proto::Command {
                args: args.iter().map(|a| Bytes::from(a.to_string())).collect(),
                keys: vec![Bytes::from(key.to_string())],
                ..Default::default()
            })))
        };
        store.slot_traffic.set_enabled(true);
        let slot = shoal_wire::key_slot(b"list");
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let queued = block_or_queue(&store, &view, 0, command(&["BLPOP", "list", "0"], "list"), tx);
        assert!(queued.is_err(), "nothing to pop: it waits");
        assert_eq!(store.slot_traffic.get(slot).writes, 0, "waiting is not a command run");
        // The push serves the waiter (apply serves blocked clients after a write): one push,
        // one pop counted.
        apply_batch(&store, &view, 0, vec![command(&["RPUSH", "list", "a"], "list")]);
        assert!(rx.try_recv().is_ok(), "the waiter was served");
        assert_eq!(store.slot_traffic.get(slot).writes, 2, "the push and the one pop that found something");
    }

    #[test]
    fn slot_traffic_counts_client_ops_not_migration_copies() {
        let store = Store::new(StoreConfig::default(), Arc::new(ManualClock::new(5_000)));
        let view = NodeView::unmanaged();
        let slot = shoal_wire::key_slot(b"k");
        // Off (the default, as Redis 8's cluster-slot-stats-enabled): nothing is counted.
        apply_batch(&store, &view, 0, vec![set("k", "v", None)]);
        assert_eq!(store.slot_traffic.get(slot), Default::default());
        store.slot_traffic.set_enabled(true);
        apply_batch(&store, &view, 0, vec![set("k", "v", None), tracked_get("k", 0)]);
        let fetch = op(Kind::Fetch(proto::Fetch { key: Bytes::from("k") }));
        apply_batch(&store, &view, 0, vec![fetch]);
        let t = store.slot_traffic.get(slot);
        assert_eq!((t.writes, t.reads), (1, 1), "the migration's FETCH is not a client read or write");
    }

    #[test]
    fn a_tracked_read_hears_of_each_kind_of_change_once() {
        let clock = ManualClock::new(5_000);
        let store = Store::new(StoreConfig::default(), Arc::new(clock.clone()));
        let pubsub = crate::pubsub::PubSub::default();
        let view = NodeView::unmanaged();
        let mut rx = tracking_stream(&store, &pubsub, 7, None);
        let run = |ops: Vec<Op>| apply_batch(&store, &view, 0, ops);
        let del = |k: &str| op(Kind::Del(proto::Del { key: Bytes::from(k.to_string()) }));

        // An untracked token or a missing key: a plain reply.
        run(vec![set("k", "v1", Some(10_000))]);
        assert_eq!(run(vec![tracked_get("k", 99)])[0].kind, Some(reply::Kind::Value(Bytes::from("v1"))));
        let r = run(vec![tracked_get("k", 7)]);
        assert_eq!(
            r[0].kind,
            Some(reply::Kind::Tracked(proto::Tracked { value: Bytes::from("v1"), ttl_ms: 10_000 })),
            "the value with its remaining TTL"
        );
        run(vec![tracked_get("k", 7)]);
        assert!(invalidations(&mut rx).is_empty(), "reads invalidate nothing");
        run(vec![set("k", "v2", None), set("k", "v3", None)]);
        assert_eq!(invalidations(&mut rx), ["k"], "one invalidation, then forgotten");

        // Delete.
        run(vec![tracked_get("k", 7)]);
        run(vec![del("k")]);
        assert_eq!(invalidations(&mut rx), ["k"]);

        // Expiry (lazy: the key is found expired by a later op).
        run(vec![set("t", "x", Some(100)), tracked_get("t", 7)]);
        clock.advance(200);
        assert_eq!(
            run(vec![op(Kind::Exists(proto::Exists { key: Bytes::from("t") }))])[0].kind,
            Some(reply::Kind::Int(0))
        );
        assert_eq!(invalidations(&mut rx), ["t"]);

        // Active expiry.
        run(vec![set("a", "x", Some(100)), tracked_get("a", 7)]);
        clock.advance(200);
        store.purge_expired(100);
        assert_eq!(invalidations(&mut rx), ["a"]);

        // Flush: one invalidate-all.
        run(vec![set("f", "x", None), tracked_get("f", 7)]);
        run(vec![op(Kind::Flush(proto::Flush {}))]);
        assert_eq!(invalidations(&mut rx), ["*"]);
        assert_eq!(store.watches.tracking.len(), 0);

        // A typed command (through the node's command table) changing a tracked key.
        run(vec![set("h", "x", None), tracked_get("h", 7), del("h")]);
        assert_eq!(invalidations(&mut rx), ["h"]);
        run(vec![tracked_get("h", 7)]);
        run(vec![op(Kind::Command(Box::new(proto::Command {
            args: vec![Bytes::from("HSET"), Bytes::from("h"), Bytes::from("f"), Bytes::from("v")],
            keys: vec![Bytes::from("h")],
            ..Default::default()
        })))]);
        assert_eq!(invalidations(&mut rx), ["h"], "a key read while missing is tracked too");
        // A typed value is answered plainly (not cached).
        assert!(matches!(run(vec![tracked_get("h", 7)])[0].kind, Some(reply::Kind::Error(_))));
    }

    #[test]
    fn eviction_invalidates_tracked_keys() {
        let clock = ManualClock::new(5_000);
        let config = StoreConfig {
            maxmemory: 64 << 10,
            policy: crate::store::EvictionPolicy::AllKeysRandom,
            ..StoreConfig::default()
        };
        let store = Store::new(config, Arc::new(clock.clone()));
        let pubsub = crate::pubsub::PubSub::default();
        let view = NodeView::unmanaged();
        let mut rx = tracking_stream(&store, &pubsub, 7, None);
        let value = "x".repeat(1000);
        let tracked: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
        for k in &tracked {
            apply_batch(&store, &view, 0, vec![set(k, &value, None), tracked_get(k, 7)]);
        }
        assert!(invalidations(&mut rx).is_empty());
        for i in 0..500 {
            apply_batch(&store, &view, 0, vec![set(&format!("filler{i}"), &value, None)]);
        }
        let gone: Vec<String> =
            tracked.iter().filter(|k| store.get(k.as_bytes()).is_none()).cloned().collect();
        assert!(!gone.is_empty(), "the limit evicted some tracked keys");
        let mut heard = invalidations(&mut rx);
        heard.sort();
        let mut expected = gone.clone();
        expected.sort();
        assert_eq!(heard, expected, "each evicted tracked key invalidated once");
    }

    #[test]
    fn bcast_hears_every_change_under_its_prefixes() {
        let store = Store::new(StoreConfig::default(), Arc::new(ManualClock::new(5_000)));
        let pubsub = crate::pubsub::PubSub::default();
        let view = NodeView::unmanaged();
        let mut rx = tracking_stream(&store, &pubsub, 7, Some(vec![Bytes::from("user:")]));
        apply_batch(
            &store,
            &view,
            0,
            vec![
                set("user:1", "a", None),
                set("user:1", "b", None),
                set("other", "c", None),
                set("user:2", "d", None),
            ],
        );
        assert_eq!(invalidations(&mut rx), ["user:1", "user:1", "user:2"]);
    }

    #[test]
    fn batch_replies_line_up_with_ops() {
        let clock = ManualClock::new(5_000);
        let store = Store::new(StoreConfig::default(), Arc::new(clock.clone()));
        let replies = apply_batch(
            &store,
            &NodeView::unmanaged(),
            0,
            vec![
                op(Kind::Set(Set {
                    key: Bytes::from("k"),
                    value: Bytes::from("v"),
                    expiry: Some(Expiry { ms: 1_500, relative: true }),
                    ..Default::default()
                })),
                op(Kind::Get(Get { key: Bytes::from("k"), ..Default::default() })),
                op(Kind::Ttl(Ttl { key: Bytes::from("k"), absolute: true })),
                op(Kind::IncrBy(IncrBy { key: Bytes::from("k"), delta: 1 })),
                Op::default(),
            ],
        );
        let kinds: Vec<_> = replies.into_iter().map(|r| r.kind.unwrap()).collect();
        assert_eq!(kinds[0], reply::Kind::Ok(proto::Empty {}));
        assert_eq!(kinds[1], reply::Kind::Value(Bytes::from("v")));
        assert_eq!(kinds[2], reply::Kind::Int(6_500), "relative TTLs use the node's clock");
        assert_eq!(kinds[3], reply::Kind::Error("ERR value is not an integer or out of range".into()));
        assert!(matches!(kinds[4], reply::Kind::Error(_)));
    }
}
