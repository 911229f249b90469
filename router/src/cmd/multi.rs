//! Commands over several keys (SINTER, SUNIONSTORE, SMOVE, LMOVE, LMPOP, ZUNION, ZMPOP,
//! ZRANGESTORE, RENAME, COPY, BITOP, LCS, PFCOUNT, PFMERGE, GEOSEARCHSTORE, GEORADIUS with
//! STORE, ...). The node runs them (`node/src/commands/multi.rs`, `geo.rs`).
//!
//! Keys on one node (same `{hashtag}`, or by chance): the whole command goes to that node, which
//! runs it atomically. Keys on several nodes, where Redis Cluster answers CROSSSLOT:
//! - commands that only read: the router fetches every key's value and a node runs the command on
//!   a scratch store holding those values;
//! - commands that write (the STORE forms, ZRANGESTORE, BITOP, COPY, RENAME, SMOVE, LMOVE,
//!   RPOPLPUSH): [`Remote::atomically`] watches every key, reads what the command needs (the
//!   values, on a scratch store; a type, a member, the element at the end of a list), and applies
//!   the writes that follow from it (the destination written back, the source deleted; SREM and
//!   SADD; the pop and the push) as one transaction over their nodes (`crate::backend::spread`),
//!   which a write to any watched key in between aborts (it then starts over). So these are
//!   atomic across nodes too: no client sees the element in neither list or in both, and a
//!   router stopped at any step leaves all of it applied or none;
//! - LMPOP and ZMPOP: one key at a time in order, each pop atomic on its node.

use bytes::Bytes;
use shoal_wire::cross::{Cross, cross_of, side};
use shoal_wire::proto::{self, Frame, frame, op::Kind, reply};
use tokio::time::Instant;

use super::spec::*;
use super::typed::{from_frame, from_node};
use super::{Args, Ctx, Pending, gather, op, unexpected};
use crate::backend::{AtomicError, Routing, SpreadOutcome};
use crate::resp::Reply;
use crate::state::RouterState;
use std::sync::Arc;

/// The keys of a multi-key command, as the node finds them; `None` when `numkeys` is not valid
/// (the node then answers the error).
fn keys_of(args: &Args) -> Option<Vec<Bytes>> {
    let name = args[0].to_ascii_lowercase();
    let numkeys = |at: usize| -> Option<Vec<Bytes>> {
        let n = shoal_wire::num::parse_i64(args.get(at)?).filter(|&n| n >= 1)? as usize;
        (n < args.len() - at).then(|| args[at + 1..at + 1 + n].to_vec())
    };
    match &name[..] {
        b"sinter" | b"sunion" | b"sdiff" | b"sinterstore" | b"sunionstore" | b"sdiffstore" | b"pfcount"
        | b"pfmerge" => Some(args[1..].to_vec()),
        b"smove" | b"lmove" | b"rpoplpush" | b"zrangestore" | b"rename" | b"renamenx" | b"copy" | b"lcs"
        | b"geosearchstore" => Some(args[1..3].to_vec()),
        b"georadius" | b"georadiusbymember" => {
            let mut keys = vec![args[1].clone()];
            keys.extend(shoal_wire::acl::commands::georadius_store(args).map(|i| args[i].clone()));
            Some(keys)
        }
        b"sintercard" | b"lmpop" | b"zmpop" | b"zunion" | b"zinter" | b"zdiff" | b"zintercard" => numkeys(1),
        b"bitop" => Some(args[2..].to_vec()),
        b"xread" | b"xreadgroup" => {
            shoal_wire::acl::commands::xread_layout(args).map(|(_, keys)| args[keys].to_vec())
        }
        b"sort" | b"sort_ro" => {
            let l = shoal_wire::sort::layout(args, name == b"sort_ro")?;
            Some(std::iter::once(args[1].clone()).chain(l.store.map(|i| args[i].clone())).collect())
        }
        b"zunionstore" | b"zinterstore" | b"zdiffstore" => {
            let mut keys = numkeys(2)?;
            keys.insert(0, args[1].clone());
            Some(keys)
        }
        _ => None,
    }
}

// --- specs, as redis-server 7.0 declares them ---------------------------------------------------

pub const SINTER: CommandSpec = CommandSpec { decl: &redis::SINTER, run, ..CommandSpec::DEFAULT };

pub const SUNION: CommandSpec = CommandSpec { decl: &redis::SUNION, run, ..CommandSpec::DEFAULT };

pub const SDIFF: CommandSpec = CommandSpec { decl: &redis::SDIFF, run, ..CommandSpec::DEFAULT };

pub const SINTERSTORE: CommandSpec = CommandSpec { decl: &redis::SINTERSTORE, run, ..CommandSpec::DEFAULT };

pub const SUNIONSTORE: CommandSpec = CommandSpec { decl: &redis::SUNIONSTORE, run, ..CommandSpec::DEFAULT };

pub const SDIFFSTORE: CommandSpec = CommandSpec { decl: &redis::SDIFFSTORE, run, ..CommandSpec::DEFAULT };

pub const SINTERCARD: CommandSpec = CommandSpec { decl: &redis::SINTERCARD, run, ..CommandSpec::DEFAULT };

pub const SMOVE: CommandSpec = CommandSpec { decl: &redis::SMOVE, run, ..CommandSpec::DEFAULT };

pub const LMOVE: CommandSpec = CommandSpec { decl: &redis::LMOVE, run, ..CommandSpec::DEFAULT };

pub const RPOPLPUSH: CommandSpec = CommandSpec { decl: &redis::RPOPLPUSH, run, ..CommandSpec::DEFAULT };

pub const LMPOP: CommandSpec = CommandSpec { decl: &redis::LMPOP, run, ..CommandSpec::DEFAULT };

pub const ZUNION: CommandSpec = CommandSpec { decl: &redis::ZUNION, run, ..CommandSpec::DEFAULT };

pub const ZINTER: CommandSpec = CommandSpec { decl: &redis::ZINTER, run, ..CommandSpec::DEFAULT };

pub const ZDIFF: CommandSpec = CommandSpec { decl: &redis::ZDIFF, run, ..CommandSpec::DEFAULT };

pub const ZUNIONSTORE: CommandSpec = CommandSpec { decl: &redis::ZUNIONSTORE, run, ..CommandSpec::DEFAULT };

pub const ZINTERSTORE: CommandSpec = CommandSpec { decl: &redis::ZINTERSTORE, run, ..CommandSpec::DEFAULT };

pub const ZDIFFSTORE: CommandSpec = CommandSpec { decl: &redis::ZDIFFSTORE, run, ..CommandSpec::DEFAULT };

pub const ZINTERCARD: CommandSpec = CommandSpec { decl: &redis::ZINTERCARD, run, ..CommandSpec::DEFAULT };

pub const ZMPOP: CommandSpec = CommandSpec { decl: &redis::ZMPOP, run, ..CommandSpec::DEFAULT };

pub const ZRANGESTORE: CommandSpec = CommandSpec { decl: &redis::ZRANGESTORE, run, ..CommandSpec::DEFAULT };

pub const RENAME: CommandSpec = CommandSpec { decl: &redis::RENAME, run, ..CommandSpec::DEFAULT };

pub const RENAMENX: CommandSpec = CommandSpec { decl: &redis::RENAMENX, run, ..CommandSpec::DEFAULT };

pub const COPY: CommandSpec = CommandSpec { decl: &redis::COPY, run, ..CommandSpec::DEFAULT };

pub const SORT: CommandSpec = CommandSpec { decl: &redis::SORT, run: sort, ..CommandSpec::DEFAULT };

pub const SORT_RO: CommandSpec = CommandSpec { decl: &redis::SORT_RO, run: sort, ..CommandSpec::DEFAULT };

/// SORT and SORT_RO: without BY/GET patterns that read other keys, a multi-key command like the
/// rest (the key, and the STORE destination). With them, the keys the patterns name are only
/// known from the elements: the elements are read first (`SORT key BY nosort`), then the sort
/// runs on a scratch store holding the key and every key its patterns name (and STORE writes
/// the destination back), wherever those keys live.
fn sort(args: &Args, ctx: &mut Ctx) -> Pending {
    let readonly = args[0].eq_ignore_ascii_case(b"sort_ro");
    let Some(layout) = shoal_wire::sort::layout(args, readonly).filter(|l| l.reads_other_keys()) else {
        return run(args, ctx);
    };
    let (state, deadline) = (ctx.state.clone(), ctx.deadline);
    let args: Vec<Bytes> = args.to_vec();
    Pending::Barrier(Box::pin(async move {
        let remote = Remote { routing: state.backend.routing(), state, deadline };
        remote.sort(&args, &layout).await.unwrap_or_else(|e| e)
    }))
}

fn command(args: &Args, readonly: bool) -> proto::Command {
    proto::Command { args: args.to_vec(), readonly, ..Default::default() }
}

/// Runs a multi-key command (see the module docs).
pub fn run(args: &Args, ctx: &mut Ctx) -> Pending {
    let (state, deadline) = (ctx.state.clone(), ctx.deadline);
    let Some(mut keys) = keys_of(args) else {
        // A bad `numkeys`: any node answers the error (no key is read).
        let scratch = proto::Command { scratch: true, ..command(args, true) };
        let call = ctx.call_at(0, op(Kind::Command(Box::new(scratch))));
        return Pending::later(async move {
            match call.wait().await {
                Ok(r) => scratch_reply(r).map_or_else(|e| e, |(reply, _)| reply),
                Err(e) => e.into(),
            }
        });
    };
    let same_node = proto::Command { keys: keys.clone(), ..command(args, false) };
    let atomic = ctx.call_atomic(keys.clone(), op(Kind::Command(Box::new(same_node))));
    let args: Vec<Bytes> = args.to_vec();
    Pending::Barrier(Box::pin(async move {
        match atomic.wait().await {
            Ok(r) => return from_node(r),
            Err(AtomicError::Backend(e)) => return e.into(),
            Err(AtomicError::Spread) => {}
        }
        keys.sort();
        keys.dedup();
        let remote = Remote { routing: state.backend.routing(), state, deadline };
        let result = match cross_of(&args) {
            Cross::Read => remote.scratch(&args, &keys, &[]).await.map(|(reply, _)| reply),
            Cross::Replace { dst, if_changed, delete_source } => {
                remote.replace(&args, &keys, dst, if_changed, delete_source).await
            }
            Cross::SMove => remote.smove(&args).await,
            Cross::LMove => remote.lmove(&args).await,
            Cross::MPop => remote.mpop(&args).await,
            Cross::Refuse => Err(Reply::error(super::CROSSSLOT)),
        };
        result.unwrap_or_else(|e| e)
    }))
}

/// LMOVE or RPOPLPUSH (`args`) over keys of two nodes, atomically (BLMOVE and BRPOPLPUSH once
/// their source is ready: `cmd/blocking.rs`).
pub(super) async fn move_across(state: Arc<RouterState>, args: &[Bytes], deadline: Instant) -> Reply {
    let remote = Remote { routing: state.backend.routing(), state, deadline };
    remote.lmove(args).await.unwrap_or_else(|e| e)
}

/// The steps of a command whose keys are on several nodes.
struct Remote {
    state: Arc<RouterState>,
    routing: Arc<Routing>,
    deadline: Instant,
}

/// A node's answer as the command's reply, or the reply to send instead (errors included).
type Step<T> = Result<T, Reply>;

/// A writing command over keys of several nodes (see [`Remote::atomically`]).
enum Job<'a> {
    /// [`Cross::Replace`] over the values of `keys`.
    Replace {
        args: &'a [Bytes],
        keys: &'a [Bytes],
        dst: usize,
        if_changed: bool,
        delete_source: bool,
    },
    SMove {
        src: &'a Bytes,
        dst: &'a Bytes,
        member: &'a Bytes,
    },
    /// LMOVE and RPOPLPUSH, by the ends they name.
    LMove {
        src: &'a Bytes,
        dst: &'a Bytes,
        from_left: bool,
        to_left: bool,
    },
}

/// What a writing command over several nodes does, once it has read what it needs.
enum Plan {
    /// Nothing to write: this is the reply.
    Answer(Reply),
    /// These one-key ops, applied together, and then this reply.
    Write(Vec<proto::Op>, Reply),
}

impl Remote {
    /// A one-key command on `key`'s owner (through any move of its slot).
    async fn on_key(&self, key: &Bytes, args: Vec<Bytes>, readonly: bool) -> Step<Reply> {
        let key_index = args.iter().skip(1).position(|a| a == key).map_or(1, |i| i as u32 + 1);
        let c = proto::Command { args, readonly, key_index, ..Default::default() };
        let call =
            self.state.backend.key(&self.routing, key.clone(), op(Kind::Command(Box::new(c))), self.deadline);
        match call.wait().await {
            Ok(r) => Ok(from_node(r)),
            Err(e) => Err(e.into()),
        }
    }

    /// The type of `key`'s value (`none` when missing).
    async fn type_of(&self, key: &Bytes) -> Step<Bytes> {
        let call = self.state.backend.key(
            &self.routing,
            key.clone(),
            op(Kind::TypeOf(proto::TypeOf { key: key.clone() })),
            self.deadline,
        );
        match call.wait().await.map(|r| r.kind) {
            Ok(Some(reply::Kind::Value(v))) => Ok(v),
            Ok(Some(reply::Kind::Error(e))) => Err(Reply::error_fmt(e)),
            Ok(other) => Err(unexpected(other)),
            Err(e) => Err(e.into()),
        }
    }

    /// Runs `args` on a scratch store holding the current values of `keys`; returns the reply and
    /// the values of `outputs` afterwards.
    async fn scratch(&self, args: &[Bytes], keys: &[Bytes], outputs: &[Bytes]) -> Step<(Reply, Vec<Frame>)> {
        let fetches = keys.iter().map(|k| (k.clone(), op(Kind::Fetch(proto::Fetch { key: k.clone() }))));
        let fetched = gather(self.state.backend.keys(&self.routing, fetches, self.deadline)).await?;
        let inputs = fetched
            .into_iter()
            .filter_map(|r| match r.kind {
                Some(reply::Kind::Entry(e)) => Some(*e),
                _ => None,
            })
            .collect();
        let c = proto::Command { scratch: true, inputs, outputs: outputs.to_vec(), ..command(args, true) };
        let call = self.state.backend.at(&self.routing, 0, op(Kind::Command(Box::new(c))), self.deadline);
        match call.wait().await {
            Ok(r) => scratch_reply(r),
            Err(e) => Err(e.into()),
        }
    }

    /// STORE forms, BITOP, PFMERGE, COPY, RENAME ([`Cross::Replace`]): compute on gathered
    /// values, then write the destination back (and delete the source, if asked) in one
    /// transaction with every key watched since the values were read.
    async fn replace(
        &self,
        args: &[Bytes],
        keys: &[Bytes],
        dst: usize,
        if_changed: bool,
        delete_source: bool,
    ) -> Step<Reply> {
        let mut watched: Vec<Bytes> = keys.to_vec();
        if !watched.contains(&args[dst]) {
            watched.push(args[dst].clone());
        }
        self.atomically(&watched, Job::Replace { args, keys, dst, if_changed, delete_source }).await
    }

    /// What `job` writes, from what it reads now (see [`Remote::atomically`]).
    async fn plan(&self, job: &Job<'_>) -> Step<Plan> {
        match *job {
            Job::Replace { args, keys, dst, if_changed, delete_source } => {
                let dst = &args[dst];
                let (reply, outputs) = self.scratch(args, keys, std::slice::from_ref(dst)).await?;
                let changed = !if_changed || matches!(reply, Reply::Simple(_) | Reply::Int(1..));
                if matches!(reply, Reply::Error(..)) || !changed {
                    return Ok(Plan::Answer(reply));
                }
                let restore = shoal_wire::cross::restore_command(dst, outputs.into_iter().next())
                    .map_err(|other| unexpected(Some(reply::Kind::Frame(Frame { kind: other }))))?;
                let mut writes = vec![one_key(restore)];
                if delete_source {
                    writes.push(op(Kind::Del(proto::Del { key: args[1].clone() })));
                }
                Ok(Plan::Write(writes, reply))
            }
            Job::SMove { src, dst, member } => {
                match &self.type_of(src).await?[..] {
                    b"none" => return Ok(Plan::Answer(Reply::Int(0))),
                    b"set" => {}
                    _ => return Ok(Plan::Answer(wrong_type())),
                }
                if !matches!(&self.type_of(dst).await?[..], b"none" | b"set") {
                    return Ok(Plan::Answer(wrong_type()));
                }
                let found =
                    fail_on_error(self.on_key(src, cmd(&["sismember"], &[src, member]), true).await?)?;
                if found != Reply::Int(1) {
                    return Ok(Plan::Answer(Reply::Int(0)));
                }
                let writes =
                    vec![one_key(cmd(&["srem"], &[src, member])), one_key(cmd(&["sadd"], &[dst, member]))];
                Ok(Plan::Write(writes, Reply::Int(1)))
            }
            Job::LMove { src, dst, from_left, to_left } => {
                match &self.type_of(src).await?[..] {
                    b"none" => return Ok(Plan::Answer(Reply::Nil)),
                    b"list" => {}
                    _ => return Ok(Plan::Answer(wrong_type())),
                }
                if !matches!(&self.type_of(dst).await?[..], b"none" | b"list") {
                    return Ok(Plan::Answer(wrong_type()));
                }
                let at = Bytes::from_static(if from_left { b"0" } else { b"-1" });
                let Reply::Bulk(v) = self.on_key(src, cmd(&["lindex"], &[src, &at]), true).await? else {
                    return Ok(Plan::Answer(Reply::Nil));
                };
                let pop = if from_left { "lpop" } else { "rpop" };
                let push = if to_left { "lpush" } else { "rpush" };
                let writes = vec![one_key(cmd(&[pop], &[src])), one_key(cmd(&[push], &[dst, &v]))];
                Ok(Plan::Write(writes, Reply::Bulk(v)))
            }
        }
    }

    /// Watches `keys` on their nodes: their versions, for [`Remote::commit`].
    async fn watch(&self, keys: &[Bytes]) -> Step<Vec<proto::Watched>> {
        let items = keys
            .iter()
            .map(|k| (k.clone(), op(Kind::Watch(proto::Watch { keys: vec![k.clone()], release: false }))));
        let replies = gather(self.state.backend.keys(&self.routing, items, self.deadline)).await?;
        let mut watched = Vec::with_capacity(keys.len());
        let mut failure = None;
        for (key, r) in keys.iter().zip(replies) {
            match super::transaction::version_of(r) {
                Ok(version) => watched.push(proto::Watched { key: key.clone(), version }),
                Err(e) => failure = Some(e),
            }
        }
        match failure {
            None => Ok(watched),
            // The keys that were registered are let go again (not left to the node's sweep).
            Some(e) => {
                super::transaction::release(
                    &self.state,
                    watched.into_iter().map(|w| (w.key, w.version)).collect(),
                );
                Err(e)
            }
        }
    }

    /// Applies `writes` (one-key commands, each on its key's node) as one transaction over their
    /// nodes, unless a key of `watched` changed since it was watched (`None`: start over).
    async fn commit(&self, writes: Vec<proto::Op>, watched: Vec<proto::Watched>) -> Step<Option<Vec<Reply>>> {
        let ops = writes.into_iter().map(|op| (0, op)).collect();
        match self.state.backend.spread_transaction(&self.routing, ops, watched, self.deadline).await {
            Ok(SpreadOutcome::Replies(r)) => Ok(Some(r.into_iter().map(from_node).collect())),
            Ok(SpreadOutcome::Refused(r)) if matches!(r.kind, Some(reply::Kind::Aborted(_))) => Ok(None),
            Ok(SpreadOutcome::Refused(r)) => Err(from_node(r)),
            Err(AtomicError::Spread) => Err(Reply::error(super::CROSSSLOT)),
            Err(AtomicError::Backend(e)) => Err(e.into()),
        }
    }

    /// A command over keys of several nodes that writes, made atomic: watch `keys`, run `plan`
    /// (its reads, and the writes that follow from them), apply the writes as one transaction
    /// over their nodes unless a watched key changed meanwhile (then again, until the deadline).
    /// Writers of this router over the same keys queue for them (`crate::keylocks`); a retry
    /// (a writer elsewhere changed a key) pauses at random first.
    async fn atomically(&self, keys: &[Bytes], job: Job<'_>) -> Step<Reply> {
        let Some(_held) = self.state.key_locks.lock(keys, self.deadline).await else {
            return Err(crate::backend::BackendError::Contended.into());
        };
        let mut round = 0;
        loop {
            let watched = self.watch(keys).await?;
            let versions: Vec<(Bytes, u64)> = watched.iter().map(|w| (w.key.clone(), w.version)).collect();
            let outcome = match self.plan(&job).await {
                Ok(Plan::Answer(reply)) => Ok(Some(reply)),
                Ok(Plan::Write(writes, reply)) => match self.commit(writes, watched).await {
                    Ok(Some(replies)) => match replies.into_iter().find(|r| matches!(r, Reply::Error(..))) {
                        Some(refused) => Err(refused),
                        None => Ok(Some(reply)),
                    },
                    Ok(None) => Ok(None),
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            super::transaction::release(&self.state, versions);
            match outcome {
                Ok(Some(reply)) => return Ok(reply),
                Ok(None) => {
                    let pause = crate::keylocks::backoff(round);
                    if Instant::now() + pause >= self.deadline {
                        return Err(crate::backend::BackendError::Contended.into());
                    }
                    self.state.backend.metrics.transaction_retries.inc();
                    round += 1;
                    tokio::time::sleep(pause).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// SORT with patterns (see [`sort`]).
    async fn sort(&self, args: &[Bytes], layout: &shoal_wire::sort::Layout) -> Step<Reply> {
        let key = &args[1];
        let listed = self
            .on_key(
                key,
                cmd(&["sort"], &[key, &Bytes::from_static(b"BY"), &Bytes::from_static(b"nosort")]),
                true,
            )
            .await?;
        // An error (the key's type) is the command's to answer, after its own syntax checks: the
        // scratch run below answers it with only the key gathered.
        let elements: Vec<Bytes> = match listed {
            Reply::Array(items) => items
                .into_iter()
                .filter_map(|r| match r {
                    Reply::Bulk(b) => Some(b),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        let mut keys = shoal_wire::sort::pattern_keys(layout, &elements);
        keys.push(key.clone());
        if let Some(dst) = layout.store {
            keys.push(args[dst].clone());
        }
        keys.sort();
        keys.dedup();
        match layout.store {
            Some(dst) => self.replace(args, &keys, dst, false, false).await,
            None => self.scratch(args, &keys, &[]).await.map(|(reply, _)| reply),
        }
    }

    /// SMOVE: the checks Redis makes, then SREM from the source and SADD to the destination in
    /// one transaction ([`Remote::atomically`]).
    async fn smove(&self, args: &[Bytes]) -> Step<Reply> {
        let (src, dst, member) = (&args[1], &args[2], &args[3]);
        self.atomically(&[src.clone(), dst.clone()], Job::SMove { src, dst, member }).await
    }

    /// LMOVE and RPOPLPUSH: the checks Redis makes and the element at the source's end, then the
    /// pop and the push in one transaction ([`Remote::atomically`]).
    async fn lmove(&self, args: &[Bytes]) -> Step<Reply> {
        let (src, dst) = (&args[1], &args[2]);
        let ends = if args[0].eq_ignore_ascii_case(b"rpoplpush") {
            (false, true)
        } else {
            match (side(&args[3]), side(&args[4])) {
                (Some(a), Some(b)) => (a, b),
                _ => return Ok(super::syntax_error()),
            }
        };
        let (from_left, to_left) = ends;
        self.atomically(&[src.clone(), dst.clone()], Job::LMove { src, dst, from_left, to_left }).await
    }

    /// LMPOP and ZMPOP: each key in order, as its own one-key command, until one pops.
    async fn mpop(&self, args: &[Bytes]) -> Step<Reply> {
        let keys = keys_of(args).unwrap_or_default();
        let rest = &args[2 + keys.len()..];
        for k in &keys {
            let mut one = vec![args[0].clone(), Bytes::from_static(b"1"), k.clone()];
            one.extend_from_slice(rest);
            match self.on_key(k, one, false).await? {
                Reply::NilArray => continue,
                other => return Ok(other),
            }
        }
        Ok(Reply::NilArray)
    }
}

/// A one-key command op (its key is `args[1]`).
fn one_key(args: Vec<Bytes>) -> proto::Op {
    op(Kind::Command(Box::new(proto::Command { args, key_index: 1, ..Default::default() })))
}

fn cmd(name: &[&str], args: &[&Bytes]) -> Vec<Bytes> {
    name.iter()
        .map(|n| Bytes::copy_from_slice(n.as_bytes()))
        .chain(args.iter().map(|a| (*a).clone()))
        .collect()
}

fn wrong_type() -> Reply {
    Reply::error("WRONGTYPE Operation against a key holding the wrong kind of value")
}

fn fail_on_error(r: Reply) -> Step<Reply> {
    match r {
        Reply::Error(..) | Reply::Failure(_) => Err(r),
        ok => Ok(ok),
    }
}

/// A scratch run's answer: `[reply, outputs...]`, or an error the command answered at once.
fn scratch_reply(r: proto::Reply) -> Step<(Reply, Vec<Frame>)> {
    match r.kind {
        Some(reply::Kind::Frame(Frame { kind: Some(frame::Kind::Array(items)) })) => {
            let mut items = items.items.into_iter();
            let reply = items.next().map_or(Reply::Nil, from_frame);
            Ok((reply, items.collect()))
        }
        other => Err(from_node(proto::Reply { kind: other, ..Default::default() })),
    }
}
