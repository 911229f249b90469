//! `redis.call` and `redis.pcall`: one command from a script, checked as Redis's `scriptCall`
//! checks it (known command, arity, `noscript`, writes in read-only scripts, memory, keys served
//! here) and applied to the store as the same op a router would send for it (string commands
//! through `shoal_wire::command`, typed ones through the node's command table), after the user's
//! ACL rules ([`super::acl`]). The script holds
//! the store's gate, so the op runs with nothing in between; a write touches watched keys like
//! any write, and the keys it wrote serve blocked clients once the script is done.

use std::sync::Arc;

use bytes::Bytes;
use shoal_wire::command::{Answer, builder};
use shoal_wire::cross::{Cross, cross_of};
use shoal_wire::proto::{self, Frame, Op, Reply, op::Kind, reply};

use super::reach::{self, Place, Reach};
pub use super::reach::{CROSS_NODE, MOVING, NON_LOCAL};
use super::table::{self, DENYOOM, NOSCRIPT, ScriptCommand};
use crate::commands::F;
use crate::membership::view::NodeView;
use crate::store::Store;

/// What a running script's calls need; set up per script run.
pub struct RunCtx {
    pub store: Arc<Store>,
    pub view: Arc<NodeView>,
    pub version: u64,
    /// EVAL_RO / EVALSHA_RO (or a `no-writes` shebang): writes are refused.
    pub readonly: bool,
    /// A shebang's `allow-oom`: writes that grow memory are not refused at the limit.
    pub allow_oom: bool,
    /// The script chose RESP3 (`redis.setresp(3)`): replies reach it as RESP3 types.
    pub resp3: bool,
    /// Keys written, in order (blocked clients waiting on them are served after the script).
    pub written: Vec<Bytes>,
    /// Where the first write is recorded (SCRIPT KILL may no longer stop the script then).
    pub shared: Arc<super::shared::Shared>,
    /// The permissions of the user running the script, when restricted: every call is checked.
    pub perms: Option<Arc<shoal_wire::acl::Permissions>>,
    /// The refusals met so far (for the router's ACL LOG).
    pub denials: Vec<proto::AclDenial>,
    /// The commands run so far, one entry per name (for the router's INFO commandstats).
    pub calls: Vec<proto::ScriptCall>,
    /// MONITOR's `[0 lua]` lines of the calls so far, while some router monitors: shown once
    /// the run is over, unless it is given up to be sent again (its calls would show twice).
    pub monitor: Vec<Bytes>,
    /// The other nodes this script holds, and its calls on their keys ([`super::reach`]).
    pub reach: Reach,
    /// Where the current call's keys live (`per_key`: each of its ops goes by its own key).
    target: Place,
    per_key: bool,
    /// The current call's keys live on several nodes and it is done in steps ([`super::spread`]):
    /// how, and its keys.
    spread: Option<(Cross, Vec<Bytes>)>,
}

impl RunCtx {
    /// The context of one run; `reach` says which other nodes it may call.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Arc<Store>,
        view: Arc<NodeView>,
        version: u64,
        readonly: bool,
        shared: Arc<super::shared::Shared>,
        perms: Option<Arc<shoal_wire::acl::Permissions>>,
        reach: Reach,
    ) -> RunCtx {
        RunCtx {
            store,
            view,
            version,
            readonly,
            allow_oom: false,
            resp3: false,
            written: Vec::new(),
            shared,
            perms,
            denials: Vec::new(),
            calls: Vec::new(),
            monitor: Vec::new(),
            reach,
            target: Place::Here,
            per_key: false,
            spread: None,
        }
    }
}

impl RunCtx {
    /// Counts one run of `name` that took `took` (`failed`: it answered an error).
    fn count(&mut self, name: &str, took: std::time::Duration, failed: bool) {
        let i = match self.calls.iter().position(|c| c.name == name) {
            Some(i) => i,
            None => {
                self.calls.push(proto::ScriptCall { name: name.to_string(), ..Default::default() });
                self.calls.len() - 1
            }
        };
        let c = &mut self.calls[i];
        c.calls += 1;
        c.failed += u64::from(failed);
        c.usec += took.as_micros() as u64;
    }
}

pub const UNKNOWN: &str = "ERR Unknown Redis command called from script";
pub const WRONG_ARITY: &str = "ERR Wrong number of args calling Redis command from script";
pub const NOT_ALLOWED: &str = "ERR This Redis command is not allowed from script";
pub const READ_ONLY: &str = "ERR Write commands are not allowed from read-only scripts.";
pub const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";
pub const GIVEN_UP: &str = "ERR the script stopped to be sent again: a node it reached is held elsewhere";
pub const REACH_REFUSED: &str = "ERR Script attempted to access a key of another node that stayed held elsewhere; \
    its earlier writes stand (declare the keys a script uses, or send it again)";

/// Runs `args` (name first) for a script; an error is an error frame (`redis.call` raises it,
/// `redis.pcall` returns it).
pub fn call(ctx: &mut RunCtx, args: &[Bytes]) -> Frame {
    let cmd = match checked(ctx, args) {
        Ok(cmd) => cmd,
        Err(e) => return F::error(e),
    };
    let started = std::time::Instant::now();
    let frame = run(ctx, cmd, args).unwrap_or_else(F::error);
    monitor(ctx, args);
    let failed = matches!(frame.kind, Some(proto::frame::Kind::Error(_)));
    ctx.count(cmd.name, started.elapsed(), failed);
    frame
}

/// MONITOR's `[0 lua]` line for a call that ran (Redis feeds it once the call is done), while
/// some router's client monitors; kept until the run is over ([`RunCtx::monitor`]).
fn monitor(ctx: &mut RunCtx, args: &[Bytes]) {
    if !ctx.store.events.sink().is_some_and(|s| s.monitored()) {
        return;
    }
    let micros = shoal_wire::clock::Clock::now_us(&shoal_wire::clock::SystemClock);
    ctx.monitor.push(shoal_wire::monitor::line(u128::from(micros), "lua", args));
}

fn checked(ctx: &mut RunCtx, args: &[Bytes]) -> Result<&'static ScriptCommand, String> {
    if ctx.reach.given_up.is_some() {
        // The run is over, to be sent again: nothing more runs (a `pcall` goes on to this).
        return Err(GIVEN_UP.into());
    }
    let name = args[0].to_ascii_lowercase();
    let Some(cmd) = table::lookup(&name) else {
        let name = String::from_utf8_lossy(&name).into_owned();
        if table::NOT_ALLOWED.contains(&name.as_str()) {
            return Err(NOT_ALLOWED.into());
        }
        if ROUTER_ONLY.contains(&name.as_str()) {
            return Err(format!(
                "ERR '{name}' is not available to scripts in Shoal: routers answer it, and a script runs on a node"
            ));
        }
        return Err(UNKNOWN.into());
    };
    if !cmd.arity_ok(args.len()) {
        return Err(WRONG_ARITY.into());
    }
    if cmd.flags & NOSCRIPT != 0 {
        return Err(NOT_ALLOWED.into());
    }
    // The user's ACL rules, where Redis's `scriptCall` checks them: after arity and `noscript`,
    // before read-only scripts, memory and the cluster's keys.
    if let Some(perms) = &ctx.perms {
        super::acl::check(perms, args, &mut ctx.denials)?;
    }
    if cmd.writes() && ctx.readonly {
        return Err(READ_ONLY.into());
    }
    if cmd.flags & DENYOOM != 0 && !ctx.allow_oom && ctx.store.make_room().is_err() {
        return Err(OOM.into());
    }
    if matches!(cmd.name, "flushall" | "flushdb" | "scan") {
        return Err(format!(
            "ERR '{}' is not available to scripts in Shoal: a script runs on one node, and it spans them all",
            cmd.name
        ));
    }
    if matches!(cmd.name, "xread" | "xreadgroup") && blocks(args) {
        return Err(format!(
            "ERR {} command is not allowed with BLOCK option from scripts",
            String::from_utf8_lossy(&args[0])
        ));
    }
    let keys = match crate::commands::multi_key_keys(name.as_slice(), args) {
        Some(Ok(keys)) => keys,
        // The command's own error (a bad numkeys) is its reply: let it answer.
        Some(Err(_)) => Vec::new(),
        None => {
            let mut keys: Vec<bytes::Bytes> = cmd.range_keys(args).into_iter().cloned().collect();
            // SORT's STORE destination is a key the legacy range does not cover.
            if cmd.name == "sort" {
                keys.extend(crate::commands::sort_store_key(args));
            }
            keys
        }
    };
    // Commands the calls below split into one op per key may span nodes, and so may those done
    // in steps over several nodes ([`super::spread`]); the others are one op, on one node.
    let per_key = matches!(cmd.name, "mget" | "mset" | "del" | "unlink" | "exists" | "touch");
    let mut spread = false;
    let mut one_place = None;
    for key in &keys {
        let place = ctx.reach.locate(key)?;
        if let Place::There(id) = place {
            if !ctx.reach.holds(id) {
                reach_for(ctx, id)?;
            } else if !ctx.reach.is_declared(id) {
                // Held only because every node is: the router learns that the script reaches.
                ctx.reach.reached = true;
            }
        }
        if !per_key && one_place.is_some_and(|p| p != place) {
            spread = true;
        }
        one_place = Some(place);
    }
    ctx.spread = None;
    if spread {
        match in_steps(cmd.name, args) {
            Some(cross) => ctx.spread = Some((cross, keys.clone())),
            None => return Err(CROSS_NODE.into()),
        }
    }
    ctx.target = one_place.unwrap_or(Place::Here);
    ctx.per_key = per_key;
    if cmd.writes() {
        ctx.shared.wrote.store(true, std::sync::atomic::Ordering::Release);
        ctx.written.extend(keys);
    }
    Ok(cmd)
}

/// How a command over keys of several nodes is done in steps, if it can be: not XREAD or
/// XREADGROUP (a script's XREAD over streams of several nodes answers CROSSSLOT).
fn in_steps(name: &str, args: &[Bytes]) -> Option<Cross> {
    match name {
        // Inside a script these never block: a pop key by key, or a move.
        "blpop" | "brpop" | "bzpopmin" | "bzpopmax" | "blmpop" | "bzmpop" => Some(Cross::MPop),
        "blmove" | "brpoplpush" => Some(Cross::LMove),
        "xread" | "xreadgroup" => None,
        _ if crate::commands::multi_key_keys(name.as_bytes(), args).is_none() => None,
        _ => Some(cross_of(args)).filter(|c| *c != Cross::Refuse),
    }
}

/// A call on an undeclared key of node `id`, not held: hold it now (see `reach.rs`: before any
/// write, a refusal ends the run to be sent again; after one, it fails this call).
fn reach_for(ctx: &mut RunCtx, id: u32) -> Result<(), String> {
    ctx.reach.reached = true;
    let wrote = ctx.shared.wrote.load(std::sync::atomic::Ordering::Acquire);
    ctx.shared.waiting_after_write.store(wrote, std::sync::atomic::Ordering::Release);
    let held = ctx.reach.hold(id, Vec::new(), Vec::new(), wrote);
    ctx.shared.waiting_after_write.store(false, std::sync::atomic::Ordering::Release);
    match held {
        Ok(()) => Ok(()),
        Err(refusal) if !wrote => {
            ctx.reach.given_up = Some(reach::given_up_to_router(reach::refusal_to_router(refusal)));
            Err(GIVEN_UP.into())
        }
        Err(_) => {
            ctx.shared.reach_refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Err(REACH_REFUSED.into())
        }
    }
}

/// Whether an XREAD/XREADGROUP asks to BLOCK, read as Redis's `xreadCommand` reads its options
/// up to that one (an option that fails before it is the command's own error to answer).
fn blocks(args: &[bytes::Bytes]) -> bool {
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - i - 1;
        let w = args[i].to_ascii_lowercase();
        match &w[..] {
            b"block" if more > 0 => return true,
            b"count" if more > 0 && shoal_wire::num::parse_i64(&args[i + 1]).is_some() => i += 2,
            b"group" if more >= 2 && args[0].len() == 10 => i += 3,
            b"noack" if args[0].len() == 10 => i += 1,
            _ => return false,
        }
    }
    false
}

/// Commands Redis has that the router answers (a node does not know them).
const ROUTER_ONLY: &[&str] = &[
    "command",
    "config",
    "info",
    "lastsave",
    "latency",
    "memory",
    "object",
    "pubsub",
    "select",
    "shoal",
    "slowlog",
    "bgrewriteaof",
    "cluster",
    "readonly",
    "readwrite",
];

fn run(ctx: &mut RunCtx, cmd: &ScriptCommand, args: &[Bytes]) -> Result<Frame, String> {
    let write = cmd.writes();
    let name = cmd.name;
    if let Some((cross, keys)) = ctx.spread.take() {
        return super::spread::run(&mut Steps(ctx), cross, args, &keys);
    }
    if let Some(build) = builder(name.as_bytes()) {
        let now = ctx.store.now_ms() as i64;
        let b = build(args, now).map_err(|e| e.into_owned())?;
        return Ok(to_frame(apply(ctx, b.op, write), b.answer));
    }
    let each_key = |kind: fn(Bytes) -> Kind| args[1..].iter().map(move |k| op(kind(k.clone())));
    Ok(match name {
        "mget" => {
            let replies = each_key(|key| Kind::Get(proto::Get { key, nil_if_not_string: true, track: 0 }))
                .map(|o| to_frame(apply(ctx, o, write), Answer::Plain))
                .collect();
            F::array(replies)
        }
        "mset" => {
            if args.len() % 2 != 1 {
                return Err(WRONG_ARITY.into());
            }
            let plain = shoal_wire::command::ExtendedOptions::default();
            for pair in args[1..].chunks(2) {
                let o = shoal_wire::command::set_op(pair[0].clone(), pair[1].clone(), &plain, None);
                if let Some(reply::Kind::Error(e)) = apply(ctx, o, write).kind {
                    return Err(e);
                }
            }
            F::ok()
        }
        "msetnx" => {
            if args.len() % 2 != 1 {
                return Err(WRONG_ARITY.into());
            }
            let (keys, values) = args[1..].chunks(2).map(|p| (p[0].clone(), p[1].clone())).unzip();
            to_frame(apply(ctx, op(Kind::MsetNx(proto::MSetNx { keys, values })), write), Answer::Plain)
        }
        "del" | "unlink" => sum(ctx, each_key(|key| Kind::Del(proto::Del { key })).collect(), write)?,
        "exists" => sum(ctx, each_key(|key| Kind::Exists(proto::Exists { key })).collect(), write)?,
        "touch" => sum(ctx, each_key(|key| Kind::Touch(proto::Touch { key })).collect(), write)?,
        "keys" => to_frame(
            apply(ctx, op(Kind::Keys(proto::Keys { pattern: args[1].clone() })), write),
            Answer::Plain,
        ),
        "randomkey" => to_frame(apply(ctx, op(Kind::RandomKey(proto::RandomKey {})), write), Answer::Plain),
        "dbsize" => to_frame(apply(ctx, op(Kind::DbSize(proto::DbSize {})), write), Answer::Plain),
        "ping" if args.len() == 1 => Frame { kind: Some(proto::frame::Kind::Simple("PONG".into())) },
        "ping" if args.len() == 2 => F::bulk(args[1].clone()),
        "ping" => return Err("ERR wrong number of arguments for 'ping' command".into()),
        "echo" => F::bulk(args[1].clone()),
        "publish" | "spublish" => {
            let publish = proto::Publish {
                channel: args[1].clone(),
                message: args[2].clone(),
                sharded: name == "spublish",
            };
            to_frame(apply(ctx, op(Kind::Publish(publish)), write), Answer::Plain)
        }
        "time" => {
            let us = ctx.store.now_us();
            F::array(vec![
                F::bulk(Bytes::from((us / 1_000_000).to_string())),
                F::bulk(Bytes::from((us % 1_000_000).to_string())),
            ])
        }
        _ => {
            let keys = match crate::commands::multi_key_keys(name.as_bytes(), args) {
                Some(Ok(keys)) => keys,
                _ => Vec::new(),
            };
            // The key's place among the arguments (XGROUP CREATE's is the third): what the node
            // holding it checks the op by, and what WATCH sees it touch.
            let key_index = match cmd.keys {
                table::Keys::Range(first, ..) if first >= 1 => first as u32,
                _ => 1,
            };
            let command = proto::Command {
                args: args.to_vec(),
                readonly: !write,
                key_index,
                keys,
                ..Default::default()
            };
            to_frame(apply(ctx, op(Kind::Command(Box::new(command))), write), Answer::Plain)
        }
    })
}

fn op(kind: Kind) -> Op {
    Op { kind: Some(kind), ..Default::default() }
}

/// Applies `op` where the call's keys live (`checked` found the place; the ops of a command
/// split per key, MGET or DEL, each go by their own key): here, or on the held node that owns
/// them.
fn apply(ctx: &mut RunCtx, op: Op, write: bool) -> Reply {
    let place = if ctx.per_key {
        let first = shoal_wire::ops::keys_of(&op).first().map(|k| ctx.reach.locate(k));
        match first {
            Some(Ok(p)) => p,
            _ => Place::Here,
        }
    } else {
        ctx.target
    };
    apply_at(ctx, place, op, write)
}

/// Applies `op` at `place`: here, or on the held node that owns its keys.
fn apply_at(ctx: &mut RunCtx, place: Place, op: Op, write: bool) -> Reply {
    match place {
        Place::There(id) => ctx.reach.apply(id, op, write),
        Place::Here => crate::ops::apply_for_script(&ctx.store, &ctx.view, op, write),
    }
}

/// DEL, EXISTS, TOUCH, UNLINK: one op per key, the integers added up.
fn sum(ctx: &mut RunCtx, ops: Vec<Op>, write: bool) -> Result<Frame, String> {
    let mut total = 0;
    for o in ops {
        match apply(ctx, o, write).kind {
            Some(reply::Kind::Int(n)) => total += n,
            Some(reply::Kind::Error(e)) => return Err(e),
            other => return Err(format!("ERR unexpected reply {other:?}")),
        }
    }
    Ok(F::int(total))
}

/// A node reply as the command's client reply, read as `answer` says (the router's
/// `cmd::answer` does the same for its clients).
fn to_frame(r: Reply, answer: Answer) -> Frame {
    use proto::frame::Kind as K;
    match (r.kind, answer) {
        (Some(reply::Kind::Ok(_)), Answer::StoredAsInt) => F::int(1),
        (Some(reply::Kind::Nil(_)), Answer::StoredAsInt) => F::int(0),
        (Some(reply::Kind::Value(v)), Answer::Status) => {
            Frame { kind: Some(K::Simple(String::from_utf8_lossy(&v).into_owned())) }
        }
        (Some(reply::Kind::Int(ms)), Answer::Seconds) => F::int(shoal_wire::command::ms_to_seconds(ms)),
        (Some(reply::Kind::Ok(_)), _) => F::ok(),
        (Some(reply::Kind::Nil(_)) | None, _) => F::nil(),
        (Some(reply::Kind::Value(v)), _) => F::bulk(v),
        (Some(reply::Kind::Int(n)), _) => F::int(n),
        (Some(reply::Kind::Error(e)), _) => F::error(e),
        (Some(reply::Kind::Keys(k)), _) => F::array(k.keys.into_iter().map(F::bulk).collect()),
        (Some(reply::Kind::Frame(f)), _) => f,
        (other, _) => F::error(format!("ERR unexpected reply {other:?}")),
    }
}

/// What a call done in steps ([`super::spread`]) needs of its run.
struct Steps<'a>(&'a mut RunCtx);

impl super::spread::Steps for Steps<'_> {
    fn locate(&mut self, key: &[u8]) -> Result<Place, String> {
        self.0.reach.locate(key).map_err(String::from)
    }

    fn apply_at(&mut self, place: Place, op: Op, write: bool) -> Reply {
        apply_at(self.0, place, op, write)
    }

    fn store(&self) -> &Store {
        &self.0.store
    }
}
