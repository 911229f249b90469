//! The node's scripting ([`Scripts`]): the handle the `Execute` stream and the RPCs hold, and the
//! script thread it starts, which runs each script op under the store's gate (see the module
//! map in `script/mod.rs` for the flow).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;
use shoal_wire::proto::{self, Op, Reply, op::Kind, reply, script_admin::Action};
use shoal_wire::script::{NOSCRIPT, sha1_hex};
use tokio::sync::oneshot;

use super::acl;
use super::call;
use super::engine;
use super::reach::{self, Peers, Place, Reach};
use super::shared::Shared;
use crate::commands::F;
use crate::membership::view::NodeView;
use crate::store::Store;

pub use super::shared::BUSY;
/// The script thread's stack (see `start_thread`).
const SCRIPT_STACK_BYTES: usize = 64 << 20;

/// Redis's default `busy-reply-threshold`, in ms.
pub const DEFAULT_BUSY_MS: u64 = 5_000;

/// The Lua VM's memory limit unless `--lua-memory-limit` says otherwise.
pub const DEFAULT_MEMORY_LIMIT: usize = 256 << 20;

/// What SCRIPT KILL found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kill {
    NotBusy,
    Killed,
    Unkillable,
    /// What runs is of the other kind (a function for SCRIPT KILL, a script for FUNCTION KILL).
    OtherKind,
}

struct Job {
    op: Op,
    view: Arc<NodeView>,
    version: u64,
    reply: oneshot::Sender<Reply>,
    /// Where the job is (the stream may let later ops go on once it holds the store, past
    /// busy-reply-threshold; or give up on it while it is still queued: see [`Progress`]).
    started: Arc<Progress>,
}

/// A submitted job's progress, shared by the stream waiting for it and the script thread:
/// queued, taken by the thread, holding the store; or cancelled while still queued (the stream
/// answered BUSY for it: it never runs).
#[derive(Debug, Default)]
pub struct Progress(std::sync::atomic::AtomicU8);

const QUEUED: u8 = 0;
const TAKEN: u8 = 1;
const HOLDING: u8 = 2;
const CANCELLED: u8 = 3;

impl Progress {
    /// The job holds the store: nothing behind it can run before it any more.
    pub fn holds_store(&self) -> bool {
        self.0.load(Ordering::Acquire) == HOLDING
    }

    /// Gives up on a job the thread has not taken (it will not run); false if it has. A stream
    /// does so for a job queued behind a script past busy-reply-threshold, answering BUSY as
    /// Redis answers every command then: no client waits on a script that may never end.
    pub fn cancel(&self) -> bool {
        self.0.compare_exchange(QUEUED, CANCELLED, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// The thread takes the job; false if it was cancelled.
    fn take(&self) -> bool {
        self.0.compare_exchange(QUEUED, TAKEN, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    fn hold(&self) {
        self.0.store(HOLDING, Ordering::Release);
    }
}

/// A node's scripting: the cache, the script thread (started with the first script) and the
/// state of the script running now.
#[derive(Debug)]
pub struct Scripts {
    pub(super) shared: Arc<Shared>,
    store: Arc<Store>,
    memory_limit: std::sync::atomic::AtomicUsize,
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    /// How scripts reach other nodes (set once the node has its membership).
    peers: std::sync::OnceLock<Arc<Peers>>,
}

impl Scripts {
    pub fn new(store: Arc<Store>, memory_limit: usize, busy_ms: u64) -> Scripts {
        let shared = Arc::new(Shared {
            cache: Mutex::new(HashMap::new()),
            flushes: AtomicU64::new(0),
            epoch: Instant::now(),
            running_since: AtomicU64::new(0),
            held_since: AtomicU64::new(0),
            held_function: AtomicBool::new(false),
            started: tokio::sync::Notify::new(),
            holding: AtomicBool::new(false),
            wrote: AtomicBool::new(false),
            kill: AtomicBool::new(false),
            busy_ms: AtomicU64::new(busy_ms),
            acl: Mutex::new(acl::Cache::default()),
            functions: Mutex::new(super::registry::Registry::default()),
            load_deadline: AtomicU64::new(0),
            current: Mutex::new(None),
            reaching: Mutex::new(Default::default()),
            vetted: Mutex::new(Default::default()),
            spread_runs: AtomicU64::new(0),
            reach_refused: AtomicU64::new(0),
            waiting_after_write: AtomicBool::new(false),
        });
        Scripts {
            shared,
            store,
            memory_limit: memory_limit.into(),
            jobs: Mutex::new(None),
            peers: std::sync::OnceLock::new(),
        }
    }

    /// Lets scripts reach the other nodes of the cluster `membership` serves (keys of several
    /// nodes: `reach.rs`). Without it a script's keys must all live here.
    pub fn attach(&self, membership: Arc<crate::membership::Membership>) {
        let _ = self.peers.set(Arc::new(Peers::new(membership)));
    }

    /// Scripts run here holding other nodes, so far.
    pub fn spread_runs(&self) -> u64 {
        self.shared.spread_runs.load(Ordering::Relaxed)
    }

    /// The script running here has written and waits for another node's gate: whatever waits
    /// for this node's gate (and wrote nothing) should give up rather than wait in a circle.
    pub fn stuck_after_write(&self) -> bool {
        self.shared.waiting_after_write.load(Ordering::Acquire)
    }

    /// Mid-run reaches for another node refused after the script wrote, so far.
    pub fn reach_refused(&self) -> u64 {
        self.shared.reach_refused.load(Ordering::Relaxed)
    }

    /// Sets the VM's memory limit (for a VM not started yet) and the busy threshold.
    pub fn set_limits(&self, memory_limit: usize, busy_ms: u64) {
        self.memory_limit.store(memory_limit, Ordering::Relaxed);
        self.set_busy_reply_threshold(busy_ms);
    }

    /// Whether `op` runs on the script thread (EVAL and SCRIPT LOAD, which compiles).
    pub fn is_script_op(op: &Op) -> bool {
        match &op.kind {
            Some(Kind::Script(_)) => true,
            Some(Kind::ScriptAdmin(a)) => match a.action() {
                Action::Load => true,
                // FUNCTION STATS answers beside a running script; the rest compile or read the
                // libraries on the script thread.
                Action::Function => !a.args.first().is_some_and(|s| s.eq_ignore_ascii_case(b"stats")),
                _ => false,
            },
            // EVAL inside MULTI: the whole transaction runs where the VM is.
            Some(Kind::Transaction(_)) => crate::ops::holds_script(op),
            _ => false,
        }
    }

    /// Hands a script op to the script thread; the reply arrives on the receiver, and its
    /// progress says when the script holds the store (or lets the caller give up on it).
    pub fn submit(
        &self,
        op: Op,
        view: Arc<NodeView>,
        version: u64,
    ) -> (oneshot::Receiver<Reply>, Arc<Progress>) {
        let (tx, rx) = oneshot::channel();
        let started = Arc::new(Progress::default());
        let job = Job { op, view, version, reply: tx, started: started.clone() };
        let mut jobs = self.jobs.lock();
        let sender = jobs.get_or_insert_with(|| self.start_thread());
        if let Err(mpsc::SendError(job)) = sender.send(job) {
            // The thread is gone (it cannot be, short of a bug): say so rather than hang.
            *jobs = None;
            let _ = job.reply.send(crate::ops::error("ERR the script engine is not running"));
        }
        (rx, started)
    }

    fn start_thread(&self) -> mpsc::Sender<Job> {
        let (tx, rx) = mpsc::channel::<Job>();
        let (store, shared) = (self.store.clone(), self.shared.clone());
        let limit = self.memory_limit.load(Ordering::Relaxed);
        // Calls to other nodes run on the runtime that submitted the first script.
        let peers = self.peers.get().cloned().zip(tokio::runtime::Handle::try_current().ok());
        let spawned = std::thread::Builder::new()
            .name("shoal-lua".into())
            // A returned table nested as deep as Redis allows (7,995 arrays) is converted by
            // recursion; the stack is reserved, not committed, beyond what a script uses.
            .stack_size(SCRIPT_STACK_BYTES)
            .spawn(move || worker(store, shared, peers, rx, limit));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "could not start the script thread");
        }
        tx
    }

    /// SCRIPT EXISTS, FLUSH and GET: answered from the cache at once.
    pub fn admin(&self, a: &proto::ScriptAdmin) -> Reply {
        match a.action() {
            Action::Exists => {
                let cache = self.shared.cache.lock();
                let found = a
                    .shas
                    .iter()
                    .map(|s| F::int(i64::from(cache.contains_key(&s.to_ascii_lowercase()))))
                    .collect();
                frame(F::array(found))
            }
            Action::Flush => {
                self.shared.cache.lock().clear();
                self.shared.flushes.fetch_add(1, Ordering::Relaxed);
                Reply { kind: Some(reply::Kind::Ok(proto::Empty {})), ..Default::default() }
            }
            Action::Get => {
                let body = a
                    .shas
                    .first()
                    .and_then(|s| self.shared.cache.lock().get(&s.to_ascii_lowercase()).cloned());
                match body {
                    Some(b) => Reply { kind: Some(reply::Kind::Value(b)), ..Default::default() },
                    None => Reply { kind: Some(reply::Kind::Nil(proto::Empty {})), ..Default::default() },
                }
            }
            Action::Function => frame(super::functions::stats(&self.shared)),
            Action::Load => crate::ops::error("ERR SCRIPT LOAD runs on the script thread"),
        }
    }

    /// A script runs now.
    pub fn running(&self) -> bool {
        self.shared.running_since.load(Ordering::Acquire) != 0
    }

    /// The script thread holds the store's gate (or is about to): an op that finds it taken
    /// waits for it without holding a thread.
    pub fn holds_store(&self) -> bool {
        self.shared.holding.load(Ordering::Acquire)
    }

    /// FUNCTION STATS goes to the script thread when no script runs there (its libraries may
    /// have arrived with slots or a snapshot and not be compiled yet); beside it otherwise.
    pub fn stats_on_thread(&self, op: &Op) -> bool {
        matches!(&op.kind, Some(Kind::ScriptAdmin(a)) if a.action() == Action::Function) && !self.running()
    }

    /// SCRIPT KILL (`function` false) or FUNCTION KILL (true).
    pub fn kill(&self, function: bool) -> Kill {
        let Some(running) = self.shared.running() else {
            return Kill::NotBusy;
        };
        if self.shared.wrote.load(Ordering::Acquire) {
            return Kill::Unkillable;
        }
        if running.function != function {
            return Kill::OtherKind;
        }
        self.shared.kill.store(true, Ordering::Release);
        Kill::Killed
    }

    pub fn busy_reply_threshold(&self) -> u64 {
        self.shared.busy_ms.load(Ordering::Relaxed)
    }

    pub fn set_busy_reply_threshold(&self, ms: u64) {
        self.shared.busy_ms.store(ms, Ordering::Relaxed);
    }
}

fn frame(f: proto::Frame) -> Reply {
    Reply { kind: Some(reply::Kind::Frame(f)), ..Default::default() }
}

/// The script thread: one job at a time, each under the store's gate.
fn worker(
    store: Arc<Store>,
    shared: Arc<Shared>,
    peers: Option<(Arc<Peers>, tokio::runtime::Handle)>,
    jobs: mpsc::Receiver<Job>,
    memory_limit: usize,
) {
    let mut engine: Option<engine::Engine> = None;
    let mut flushes_seen = 0;
    for job in jobs {
        let Job { op, view, version, reply, started } = job;
        if !started.take() {
            continue; // answered BUSY while it waited in the queue
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let flushes = shared.flushes.load(Ordering::Relaxed);
            if flushes != flushes_seen {
                flushes_seen = flushes;
                if let Some(e) = engine.as_mut() {
                    e.flush();
                }
            }
            if engine.is_none() {
                match engine::Engine::new(shared.clone(), memory_limit, super::functions::load_api) {
                    Ok(e) => engine = Some(e),
                    Err(e) => {
                        return crate::ops::error(&format!("ERR the script engine could not start: {e}"));
                    }
                }
            }
            let e = engine.as_mut().expect("started above");
            let at =
                At { store: &store, shared: &shared, peers: &peers, view: &view, version, started: &started };
            match op.kind {
                Some(Kind::Script(s)) => run(&at, e, *s),
                // FUNCTION LOAD and RESTORE are `denyoom` in Redis: refused at maxmemory.
                Some(Kind::ScriptAdmin(a))
                    if a.action() == Action::Function
                        && super::functions::denies_oom(&a.args)
                        && store.make_room().is_err() =>
                {
                    frame(F::error(call::OOM.into()))
                }
                Some(Kind::ScriptAdmin(a)) if a.action() == Action::Function => {
                    frame(super::functions::command(e, &shared, &store.libraries, &a.args))
                }
                Some(Kind::ScriptAdmin(a)) => load(&shared, e, &a.body),
                Some(Kind::Transaction(t))
                    if t.refuse_unknown_scripts && !knows_every_script(&shared, e, &t) =>
                {
                    Reply {
                        error_kind: proto::ErrorKind::NoScript as i32,
                        ..frame(F::error(NOSCRIPT.into()))
                    }
                }
                Some(Kind::Transaction(t)) if !t.nodes.is_empty() => held_transaction(&at, e, t),
                Some(Kind::Transaction(t)) => {
                    let mut written = Vec::new();
                    let _holding = Holding::mark(&shared);
                    let exclusive = store.gate.write();
                    started.hold();
                    let reply =
                        crate::ops::transaction_with(&store, &view, version, exclusive, t, &mut |s| {
                            let mut reach = Reach::local(view.clone(), version);
                            let (reply, w) = run_unlocked(&at, e, s, &mut reach);
                            written.extend(w);
                            reply
                        });
                    crate::ops::serve_blocked_after(&store, &view, written);
                    reply
                }
                _ => crate::ops::error("ERR not a script"),
            }
        }));
        let answer = outcome.unwrap_or_else(|_| {
            // A bug, not a script error: start over with a fresh VM rather than trust this one.
            engine = None;
            shared.running_since.store(0, Ordering::Release);
            tracing::error!("the script engine panicked; it starts afresh");
            crate::ops::error("ERR the script engine failed running this script")
        });
        let _ = reply.send(answer);
    }
}

/// Whether every script op of `t` that comes without its body (EVALSHA inside MULTI) names a
/// script this node has: compiled, or its body cached.
fn knows_every_script(shared: &Shared, engine: &engine::Engine, t: &proto::Transaction) -> bool {
    t.ops.iter().all(|op| match &op.kind {
        Some(Kind::Script(s)) if shoal_wire::script::by_sha_only(s) => {
            let sha = s.sha.to_ascii_lowercase();
            engine.has(&sha) || shared.cache.lock().contains_key(&sha)
        }
        _ => true,
    })
}

/// SCRIPT LOAD: compiles and keeps the body; answers its SHA.
fn load(shared: &Shared, engine: &mut engine::Engine, body: &Bytes) -> Reply {
    let sha = sha1_hex(body);
    if let Err(e) = engine.compile(&sha, body) {
        return crate::ops::error(&e);
    }
    shared.cache.lock().insert(sha.clone(), body.clone());
    Reply { kind: Some(reply::Kind::Value(Bytes::from(sha))), ..Default::default() }
}

/// Marks the script thread as holding the store's gate until dropped (declared before the gate's
/// guard, so it is dropped after it).
struct Holding<'a>(&'a AtomicBool);

impl Holding<'_> {
    fn mark(shared: &Shared) -> Holding<'_> {
        shared.holding.store(true, Ordering::Release);
        Holding(&shared.holding)
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Where a script runs: the node's store, its scripting state, and the view and topology version
/// its op was routed by.
struct At<'a> {
    store: &'a Arc<Store>,
    shared: &'a Arc<Shared>,
    /// How a script reaches other nodes (none outside a cluster).
    peers: &'a Option<(Arc<Peers>, tokio::runtime::Handle)>,
    view: &'a Arc<NodeView>,
    version: u64,
    /// Marked once the store is held (see [`Job::started`]).
    started: &'a Progress,
}

/// The store held by the script thread for a script or a transaction with scripts: marked as
/// held, the gate taken exclusively, and replicas given what it writes as one unit. Fields drop
/// in order: the unit, then the gate, then the mark.
struct HeldStore<'a> {
    _unit: crate::store::changes::UnitGuard<'a>,
    _exclusive: parking_lot::RwLockWriteGuard<'a, ()>,
    _holding: Holding<'a>,
}

impl<'a> HeldStore<'a> {
    fn take(at: &At<'a>) -> HeldStore<'a> {
        let holding = Holding::mark(at.shared);
        let exclusive = at.store.gate.write();
        let unit = at.store.events.changes.unit();
        at.started.hold();
        HeldStore { _unit: unit, _exclusive: exclusive, _holding: holding }
    }
}

/// A script on its own: the store's gate, its keys' slots checked as a group, then the script.
fn run(at: &At, engine: &mut engine::Engine, s: proto::Script) -> Reply {
    let _store = HeldStore::take(at);
    let mut reach = Reach::new(at.peers.clone(), at.view.clone(), at.version);
    reach.function = !s.function.is_empty();
    // The declared keys served here are checked as a group; the nodes of the others are held
    // (with those keys checked there), and every node for a script known to reach beyond them.
    let mut others: std::collections::BTreeMap<u32, Vec<Bytes>> = Default::default();
    for key in &s.keys {
        match reach.locate(key) {
            Ok(Place::Here) => {}
            Ok(Place::There(id)) => others.entry(id).or_default().push(key.clone()),
            // In a slot moving between nodes (here or elsewhere): once the move is done.
            Err(call::MOVING) => return crate::ops::try_again(),
            // Not served here at the router's version: the group check's `moved`.
            Err(_) => {
                if let Err(refused) = crate::ops::check_group(at.view, at.version, [&key[..]]) {
                    return refused;
                }
            }
        }
    }
    // A script known to reach beyond its declared keys' nodes, and any script's first run here,
    // holds every node, from the first node (a first run finds out whether the script reaches:
    // `reach.rs`); elsewhere it goes back to the router, which sends it there. (Routers send
    // SHAs in lowercase.)
    let name: &str = if s.function.is_empty() { &s.sha } else { &s.function };
    let several = reach.several();
    let learned = several && at.shared.reaching.lock().contains(name);
    let first = several && !learned && remember(&at.shared.vetted, name);
    if (learned || first) && !s.hold_all && !reach.first_node() {
        return reach::from_the_first_node(learned);
    }
    reach.declare(others.keys().copied());
    if s.hold_all || learned || first {
        for id in reach.others() {
            others.entry(id).or_default();
        }
    }
    if !others.is_empty() {
        at.shared.spread_runs.fetch_add(1, Ordering::Relaxed);
    }
    // In the order of the nodes' positions, as transactions take theirs.
    for id in reach.in_order(others.keys().copied()) {
        let keys = others.remove(&id).unwrap_or_default();
        if let Err(refused) = reach.hold(id, keys, Vec::new(), false) {
            return reach::refusal_to_router(refused);
        }
    }
    let (reply, written) = run_unlocked(at, engine, s, &mut reach);
    crate::ops::serve_blocked_after(at.store, at.view, written);
    reply
}

/// A transaction holding a script over keys of several nodes (`Transaction.nodes`), sent here,
/// the first node: it runs on this script thread, holding every other node as a script over
/// several nodes does (`reach.rs`), each op applied where its keys live (an op without keys on
/// the node `nodes` names for it; a script here, where the VM is). Its WATCHes are checked on
/// their nodes before anything runs (`aborted`); replicas get each node's part as one unit.
fn held_transaction(at: &At, engine: &mut engine::Engine, t: proto::Transaction) -> Reply {
    use shoal_wire::ops::{OpClass, class_of, keys_of};
    let _store = HeldStore::take(at);
    let mut reach = Reach::new(at.peers.clone(), at.view.clone(), at.version);
    let Some(own) = reach.own() else {
        return crate::ops::error("ERR a transaction over several nodes needs this node in a cluster");
    };
    let copied = |keys: Vec<&[u8]>| keys.into_iter().map(Bytes::copy_from_slice).collect::<Vec<_>>();
    // Where each op runs, and what each node checks before anything runs.
    let mut places = Vec::with_capacity(t.ops.len());
    let mut here = proto::Transaction::default();
    let mut there: std::collections::BTreeMap<u32, (Vec<Bytes>, Vec<proto::Watched>)> = Default::default();
    for (i, op) in t.ops.iter().enumerate() {
        let mut place = None;
        for key in keys_of(op) {
            let p = match reach.locate(key) {
                Ok(p) => p,
                Err(call::MOVING) => return crate::ops::try_again(),
                Err(_) => return crate::ops::moved(at.view.version()),
            };
            if let Place::There(id) = p {
                there.entry(id).or_default().0.push(Bytes::copy_from_slice(key));
            }
            if !matches!(op.kind, Some(Kind::Script(_))) && place.is_some_and(|q| q != p) {
                return crate::ops::error(call::CROSS_NODE);
            }
            place = Some(p);
        }
        let place = match (&op.kind, place) {
            (Some(Kind::Script(_)), _) => Place::Here,
            (_, Some(p)) => p,
            (_, None) => match t.nodes.get(i) {
                Some(&id) if id != own => Place::There(id),
                _ => Place::Here,
            },
        };
        if place == Place::Here && !matches!(op.kind, Some(Kind::Script(_))) {
            here.ops.push(op.clone());
        }
        places.push(place);
    }
    for w in &t.watches {
        match reach.locate(&w.key) {
            Ok(Place::There(id)) => there.entry(id).or_default().1.push(w.clone()),
            // Here, or refused by the checks below.
            _ => here.watches.push(w.clone()),
        }
    }
    if let Err(refused) = crate::ops::admit(at.store, at.view, at.version, here) {
        return refused;
    }
    for id in reach.others() {
        there.entry(id).or_default();
    }
    for id in reach.in_order(there.keys().copied()) {
        let (keys, watches) = there.remove(&id).unwrap_or_default();
        if let Err(refused) = reach.hold(id, keys, watches, false) {
            return match refused.kind {
                Some(reply::Kind::Aborted(_)) => refused,
                _ => reach::refusal_to_router(refused),
            };
        }
    }
    at.shared.spread_runs.fetch_add(1, Ordering::Relaxed);
    // Every node is held: the scripts inside reach nothing new (nothing to learn from them).
    let others = reach.others();
    reach.declare(others);
    let mut written = Vec::new();
    let mut replies = Vec::with_capacity(t.ops.len());
    for (op, place) in t.ops.into_iter().zip(places) {
        let write = class_of(&op) != OpClass::Read;
        let reply = match (op.kind, place) {
            (Some(Kind::Script(s)), _) => {
                let (r, w) = run_unlocked(at, engine, *s, &mut reach);
                written.extend(w);
                r
            }
            (kind, place) => {
                let op = Op { kind, ..op };
                match place {
                    Place::There(id) => reach.apply(id, op, write),
                    Place::Here => {
                        if write {
                            written.extend(copied(keys_of(&op)));
                        }
                        crate::ops::apply_for_script(at.store, at.view, op, write)
                    }
                }
            }
        };
        replies.push(reply);
    }
    drop(reach);
    crate::ops::serve_blocked_after(at.store, at.view, written);
    Reply { kind: Some(reply::Kind::Replies(proto::Replies { replies })), ..Default::default() }
}

/// Adds `name` to a bounded set (past [`REACHING_MAX`] it starts over); true if it was new.
fn remember(set: &Mutex<std::collections::HashSet<String>>, name: &str) -> bool {
    let mut set = set.lock();
    if set.contains(name) {
        return false;
    }
    if set.len() >= super::shared::REACHING_MAX {
        set.clear();
    }
    set.insert(name.to_string())
}

/// Runs script `s` (the caller holds the gate): found by SHA or compiled from the body it
/// carries, its calls reaching the nodes `reach` holds (or may hold). Returns its reply and the
/// keys it wrote here.
fn run_unlocked(
    at: &At,
    engine: &mut engine::Engine,
    s: proto::Script,
    reach: &mut Reach,
) -> (Reply, Vec<Bytes>) {
    let shared = at.shared;
    if !s.function.is_empty() {
        engine.sync_library(shared, &at.store.libraries.get());
        match engine.library.get(&s.function.to_ascii_lowercase()) {
            None => return (frame(F::error(engine::FUNCTION_NOT_FOUND.into())), Vec::new()),
            // FCALL with a bad `numkeys` reaches a node only to learn whether the function
            // exists (Redis looks it up first).
            Some(_) if !s.numkeys_error.is_empty() => return (frame(F::error(s.numkeys_error)), Vec::new()),
            Some(f) if s.readonly && !f.flags.no_writes => {
                let text = "ERR Can not execute a script with write flag using *_ro command.";
                return (frame(F::error(text.into())), Vec::new());
            }
            Some(_) => {}
        }
    }
    let sha = s.sha.to_ascii_lowercase();
    if s.function.is_empty() && !engine.has(&sha) {
        let body =
            if s.body.is_empty() { shared.cache.lock().get(&sha).cloned() } else { Some(s.body.clone()) };
        let Some(body) = body else {
            let noscript =
                Reply { error_kind: proto::ErrorKind::NoScript as i32, ..frame(F::error(NOSCRIPT.into())) };
            return (noscript, Vec::new());
        };
        if let Err(e) = engine.compile(&sha, &body) {
            return (frame(F::error(e)), Vec::new());
        }
        shared.cache.lock().insert(sha.clone(), body);
    }
    let perms = match shared.acl.lock().get(&s.acl) {
        Ok(p) => p,
        // Rules this node cannot read (a router of another version): refuse rather than run the
        // script unchecked.
        Err(e) => {
            return (
                frame(F::error(format!("ERR the script's ACL rules are not valid here: {e}"))),
                Vec::new(),
            );
        }
    };
    shared.kill.store(false, Ordering::Relaxed);
    shared.wrote.store(false, Ordering::Relaxed);
    *shared.current.lock() = Some(super::shared::Current {
        function: !s.function.is_empty(),
        name: if s.function.is_empty() { sha.clone() } else { s.function.clone() },
        command: fcall_command(&s),
    });
    shared.running_since.store(shared.now() + 1, Ordering::Release);
    shared.started.notify_one();
    let ctx = call::RunCtx::new(
        at.store.clone(),
        at.view.clone(),
        at.version,
        s.readonly,
        shared.clone(),
        perms,
        std::mem::replace(reach, Reach::local(at.view.clone(), at.version)),
    );
    let outcome = if s.function.is_empty() {
        engine.run(&sha, &s.keys, &s.args, ctx)
    } else {
        engine.call_function(&s.function, &s.keys, &s.args, ctx)
    };
    shared.running_since.store(0, Ordering::Release);
    shared.kill.store(false, Ordering::Relaxed); // a kill is for this run, not the Lua after it
    *shared.current.lock() = None;
    // (Converted, and a deep reply dropped, here on the script thread, whose stack has room.)
    if let Some(given_back) = outcome.reach {
        *reach = given_back;
    }
    let reached = std::mem::take(&mut reach.reached);
    if reached {
        remember(&shared.reaching, if s.function.is_empty() { &sha } else { &s.function });
    }
    if let Some(given_up) = reach.given_up.take() {
        // Nothing was written: the router sends the script again, holding every node then
        // (`reach::given_up_to_router`). Its calls show when that run makes them.
        return (given_up, Vec::new());
    }
    at.store.events.monitor_lines(outcome.monitor);
    let returned = crate::commands::for_the_wire(outcome.reply, s.resp == 3);
    let reply = if outcome.denials.is_empty() && outcome.calls.is_empty() && !reached {
        frame(returned)
    } else {
        let r = proto::ScriptReply {
            frame: Some(returned),
            denials: outcome.denials,
            calls: outcome.calls,
            reached,
        };
        Reply { kind: Some(reply::Kind::Script(Box::new(r))), ..Default::default() }
    };
    (reply, outcome.written)
}

/// The command FUNCTION STATS shows for a running function (as the client sent it, bar the
/// command name's case); empty for EVAL scripts, which FUNCTION STATS does not describe.
fn fcall_command(s: &proto::Script) -> Vec<Bytes> {
    if s.function.is_empty() {
        return Vec::new();
    }
    // The client's own spelling of the name and numkeys (an older router sends neither).
    let (name, numkeys) = match &s.argv_head[..] {
        [name, numkeys] => (name.clone(), numkeys.clone()),
        _ => (
            Bytes::from_static(if s.readonly { b"FCALL_RO" } else { b"FCALL" }),
            Bytes::from(s.keys.len().to_string()),
        ),
    };
    let mut command = vec![name, Bytes::from(s.function.clone()), numkeys];
    command.extend(s.keys.iter().cloned());
    command.extend(s.args.iter().cloned());
    command
}
