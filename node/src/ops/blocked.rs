//! Blocking commands (BLPOP, BLMOVE, BZPOPMIN, ...): the first attempt and the wait of a `Block`
//! call, and serving waiters when a write makes one of their keys ready. The store keeps the
//! queues (`store::blocked`); what waits there is this layer's business.

use prost::Message as _;
use shoal_wire::proto::{self, Op, Reply, op::Kind, reply};
use tokio::sync::oneshot;

use super::check::{check, owned_keys};
use super::reply::moved;
use super::run::{Counted, apply_uncounted, seen_written};
use crate::membership::view::NodeView;
use crate::store::Store;
use crate::store::blocked::Waiter;

/// A blocked client's command, parked in the store's registry (which keeps it opaque: it cannot
/// name protocol types). Only this file parks and unparks one.
struct Parked {
    /// The non-blocking form of the command, run when a key is ready.
    op: Op,
    /// The topology version the router routed by.
    version: u64,
    /// Only watching (a pop over keys of several nodes): answered with the ready key's name,
    /// the command not run (the router pops with an ordinary call).
    watch: bool,
    reply: oneshot::Sender<Reply>,
}

fn parked(w: &Waiter) -> &Parked {
    w.parked.downcast_ref().expect("every waiter is parked by ops/blocked.rs")
}

fn unparked(w: Waiter) -> Parked {
    *w.parked.downcast().expect("every waiter is parked by ops/blocked.rs")
}

/// What a `Block` call does first, under the gate (`_shared`, taken by the caller, which may not
/// wait for it on its thread) and the registry lock: the command's attempt (a watch's: whether
/// a key is ready); `Ok(reply)` if it found something (or failed, or the slot is not served
/// here), else the waiter is queued and its id returned.
pub fn block_or_queue(
    store: &Store,
    _shared: parking_lot::RwLockReadGuard<'_, ()>,
    view: &NodeView,
    version: u64,
    op: Op,
    watch: bool,
    reply: oneshot::Sender<Reply>,
) -> Result<Reply, u64> {
    // Counted before the attempt, uncounted after the registry guard has counted the waiter
    // (declared first, dropped last): see `Blocked::arriving`.
    let _arriving = store.blocked.arriving();
    let mut locked = store.blocked.lock();
    if watch {
        if let Err(v) = check(view, version, &op) {
            return Ok(moved(v));
        }
        let keys = owned_keys(&op);
        if let Some(key) = keys.iter().find(|k| waits_for_type_of(store, &op, k)) {
            return Ok(ready_answer(key));
        }
        return Err(locked
            .queues
            .register(Waiter { keys, parked: Box::new(Parked { op, version, watch, reply }) }));
    }
    let op = pin_dollar(store, op);
    let first = attempt_blocked(store, view, version, &op);
    if !found_nothing(&first) {
        drop(locked);
        // What the attempt wrote (BLMOVE's destination) may unblock others.
        if store.blocked.active() {
            serve_blocked(store, view, owned_keys(&op));
        }
        return Ok(first);
    }
    #[cfg(test)]
    between_attempt_and_registration::run(store);
    let keys = owned_keys(&op);
    Err(locked.queues.register(Waiter { keys, parked: Box::new(Parked { op, version, watch, reply }) }))
}

/// A watch's answer: `key` holds what its command pops from.
fn ready_answer(key: &bytes::Bytes) -> Reply {
    let frame = shoal_wire::proto::Frame { kind: Some(shoal_wire::proto::frame::Kind::Bulk(key.clone())) };
    Reply { kind: Some(reply::Kind::Frame(frame)), ..Default::default() }
}

/// Withdraws waiter `id` (timeout, moved slot, cancelled call); false if it was served first.
pub fn withdraw(store: &Store, id: u64) -> bool {
    store.blocked.lock().queues.remove(id).is_some()
}

/// After a script: the clients blocked on keys it wrote are served (as after a transaction).
pub(crate) fn serve_blocked_after(store: &Store, view: &NodeView, written: Vec<bytes::Bytes>) {
    if !written.is_empty() && store.blocked.active() {
        serve_blocked(store, view, written);
    }
}

/// Serves the clients blocked on `keys`, longest waiting first, while their commands find
/// something; a served command that writes other keys (BLMOVE's destination) makes those keys
/// ready in turn. As in Redis, a client is served from the key that became ready (not from the
/// first of its keys that holds something), and a key of another type than a client waits for
/// (a string SET where BLPOP waits) serves nobody.
pub(super) fn serve_blocked(store: &Store, view: &NodeView, keys: Vec<bytes::Bytes>) {
    let mut locked = store.blocked.lock();
    let mut ready: std::collections::VecDeque<bytes::Bytes> =
        keys.into_iter().filter(|k| locked.queues.has(k)).collect();
    while let Some(key) = ready.pop_front() {
        // Once a pop finds nothing here, every pop behind it would too (the key is gone or
        // emptied); the stream readers behind it are still looked at: each reads from its own
        // ID, and a group reader whose key went is ended (UNBLOCKED) whatever waits ahead of it.
        let mut pops_done = false;
        for id in locked.queues.waiting_on(&key) {
            let Some(w) = locked.queues.get(id).map(parked) else { continue };
            if w.watch {
                // A watch takes nothing: it is told, and those behind it are served as if it
                // were not there (were they held back for it, a watcher whose router went away
                // would leave them waiting beside a ready key).
                if !waits_for_type_of(store, &w.op, &key) {
                    continue;
                }
                let w = unparked(locked.queues.remove(id).expect("a registered waiter"));
                let _ = w.reply.send(ready_answer(&key));
                continue;
            }
            let stream = is_stream_read(&w.op);
            if pops_done && !stream {
                continue;
            }
            let mut reply = attempt_blocked(store, view, w.version, &narrowed(&w.op, &key));
            if stream && is_group_read(&w.op) && store.type_of(&key) != "stream" {
                // Redis 7.0 ends a blocked XREADGROUP whose key was deleted or overwritten with
                // another type (its group cannot come back).
                reply = error_reply("UNBLOCKED the stream key no longer exists");
            } else if found_nothing(&reply) {
                pops_done |= !stream;
                continue;
            } else if stream && nogroup(&reply) {
                reply = error_reply("NOGROUP the consumer group this client was blocked on no longer exists");
            }
            if is_wrong_type(&reply) && !waits_for_type_of(store, &w.op, &key) {
                continue;
            }
            let w = unparked(locked.queues.remove(id).expect("a registered waiter"));
            ready.extend(owned_keys(&w.op).into_iter().filter(|k| *k != key && locked.queues.has(k)));
            // A client that went away meanwhile loses what its command took, as in Redis.
            let _ = w.reply.send(reply);
        }
    }
}

/// Runs the non-blocking form of a blocked command (checked at the router's version) and, when
/// it took something, tells watchers, tracking routers and replicas of what it wrote: an attempt
/// that found nothing (or met another type) changed nothing, so a WATCH of its keys (BLMOVE's
/// destination) must hold, as in Redis. The registry lock is held by the caller. Only an
/// attempt that found something (or failed) counts in the slot stats: a command that waits is
/// one command, however often it looks.
pub(super) fn attempt_blocked(store: &Store, view: &NodeView, version: u64, op: &Op) -> Reply {
    if let Err(v) = check(view, version, op) {
        return moved(v);
    }
    let counted = Counted::of(store, op);
    let reply = apply_uncounted(store, view, op.clone());
    if found_nothing(&reply) {
        return reply;
    }
    if took_something(&reply) {
        seen_written(store, op);
    }
    if let Some(counted) = counted {
        counted.record(store, reply.encoded_len() as u64);
    }
    reply
}

/// Whether an attempt that found something took it (an error took nothing).
fn took_something(reply: &Reply) -> bool {
    use shoal_wire::proto::frame;
    match &reply.kind {
        Some(reply::Kind::Error(_)) => false,
        Some(reply::Kind::Frame(f)) => !matches!(f.kind, Some(frame::Kind::Error(_))),
        _ => true,
    }
}

/// Whether a blocking command's attempt found nothing (its non-blocking form answered null).
pub(super) fn found_nothing(reply: &Reply) -> bool {
    use shoal_wire::proto::frame;
    matches!(
        &reply.kind,
        Some(reply::Kind::Frame(f)) if matches!(f.kind, Some(frame::Kind::Nil(_) | frame::Kind::NullArray(_)))
    )
}

/// Whether the blocked command is XREAD or XREADGROUP.
fn is_stream_read(op: &Op) -> bool {
    let Some(Kind::Command(c)) = &op.kind else { return false };
    c.args.first().is_some_and(|n| n.eq_ignore_ascii_case(b"xread") || n.eq_ignore_ascii_case(b"xreadgroup"))
}

fn is_group_read(op: &Op) -> bool {
    let Some(Kind::Command(c)) = &op.kind else { return false };
    c.args.first().is_some_and(|n| n.eq_ignore_ascii_case(b"xreadgroup"))
}

fn nogroup(reply: &Reply) -> bool {
    use shoal_wire::proto::frame;
    matches!(&reply.kind, Some(reply::Kind::Frame(f)) if matches!(&f.kind, Some(frame::Kind::Error(e)) if e.starts_with("NOGROUP")))
}

/// An error answer for a blocked client (Redis 7.0's texts for a stream that went away).
fn error_reply(text: &str) -> Reply {
    let frame =
        shoal_wire::proto::Frame { kind: Some(shoal_wire::proto::frame::Kind::Error(text.to_string())) };
    Reply { kind: Some(reply::Kind::Frame(frame)), ..Default::default() }
}

pub(super) fn is_wrong_type(reply: &Reply) -> bool {
    reply.error_kind() == shoal_wire::proto::ErrorKind::WrongType
}

/// Whether `key`, which became ready, holds the type the blocked command `op` pops from (a list,
/// or a sorted set for BZPOPMIN/BZPOPMAX/BZMPOP). Then a WRONGTYPE from its attempt is the
/// command's answer (its destination holds another type: BLMOVE or BRPOPLPUSH onto a string),
/// sent at once with the element left in place, as Redis does, and the next client waiting on
/// the key is served from it; otherwise the key serves nobody (a string SET where BLPOP waits)
/// and the client keeps waiting.
fn waits_for_type_of(store: &Store, op: &Op, key: &[u8]) -> bool {
    let Some(Kind::Command(c)) = &op.kind else { return false };
    let Some(name) = c.args.first() else { return false };
    let pops_from = if name.get(..2).is_some_and(|p| p.eq_ignore_ascii_case(b"bz")) {
        "zset"
    } else if name.first().is_some_and(|c| c.eq_ignore_ascii_case(&b'x')) {
        "stream"
    } else {
        "list"
    };
    store.type_of(key) == pops_from
}

/// A blocked command reduced to the key that became ready (BLPOP a b 0 served by b: BLPOP b 0).
pub(super) fn narrowed(op: &Op, key: &bytes::Bytes) -> Op {
    let Some(Kind::Command(c)) = &op.kind else { return op.clone() };
    let name = c.args[0].to_ascii_lowercase();
    let args = match &name[..] {
        b"blpop" | b"brpop" | b"bzpopmin" | b"bzpopmax" => {
            vec![c.args[0].clone(), key.clone(), c.args[c.args.len() - 1].clone()]
        }
        // XREAD/XREADGROUP [options] STREAMS key ... id ...: served from the ready key alone, as
        // Redis answers a blocked XREAD with just the stream that woke it.
        b"xread" | b"xreadgroup" => {
            let Some((_, keys)) = shoal_wire::acl::commands::xread_layout(&c.args) else { return op.clone() };
            let (at, n) = (keys.start, keys.len());
            let Some(i) = c.args[at..at + n].iter().position(|k| k == key) else { return op.clone() };
            let mut a = c.args[..at].to_vec();
            a.push(key.clone());
            a.push(c.args[at + n + i].clone());
            a
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

/// XREAD's `$` means "what arrives after the client starts waiting": it is fixed once, to the
/// stream's last ID, before the first attempt, so the attempts that follow each write read
/// from there (an attempt with `$` itself would never find anything).
fn pin_dollar(store: &Store, op: Op) -> Op {
    let Some(Kind::Command(c)) = &op.kind else { return op };
    if !c.args[0].eq_ignore_ascii_case(b"xread") || !c.args.iter().any(|a| &a[..] == b"$") {
        return op;
    }
    let Some((_, keys)) = shoal_wire::acl::commands::xread_layout(&c.args) else { return op };
    let (at, n) = (keys.start, keys.len());
    let mut args = c.args.clone();
    for i in 0..n {
        if &args[at + n + i][..] == b"$" {
            let last = store.last_stream_id(&args[at + i]).unwrap_or_default();
            args[at + n + i] = bytes::Bytes::from(last.to_string());
        }
    }
    let command = proto::Command { args, ..(**c).clone() };
    Op { kind: Some(Kind::Command(Box::new(command))), ..op }
}

/// Tests only: something to run in the window between a first attempt that found nothing and the
/// waiter's registration (where a write from another thread once went unseen: see
/// `Blocked::arriving`), so a test can put a write there every time rather than 1 in 300.
#[cfg(test)]
pub(super) mod between_attempt_and_registration {
    use std::cell::RefCell;

    use crate::store::Store;

    type Hook = Box<dyn FnOnce(&Store)>;

    thread_local! {
        static HOOK: RefCell<Option<Hook>> = const { RefCell::new(None) };
    }

    /// Runs `hook` in the window of this thread's next `block_or_queue` that waits.
    pub fn set(hook: impl FnOnce(&Store) + 'static) {
        HOOK.with(|h| *h.borrow_mut() = Some(Box::new(hook)));
    }

    pub(in crate::ops) fn run(store: &Store) {
        if let Some(hook) = HOOK.with(|h| h.borrow_mut().take()) {
            hook(store);
        }
    }
}
