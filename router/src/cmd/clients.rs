//! CLIENT subcommands about other connections and the router as a whole: LIST, KILL, PAUSE,
//! UNPAUSE. They see this router's RESP connections ([`crate::clients`]) and pause this router
//! only (docs/compatibility.md).

use std::time::Duration;

use super::spec::*;
use super::{Args, Ctx, Pending, syntax_error};
use crate::clients::{ClientType, Filter};
use crate::pause::PauseMode;
use crate::resp::Reply;

pub const CLIENT_LIST: CommandSpec =
    CommandSpec { decl: &redis::CLIENT_LIST, run: list, ..CommandSpec::DEFAULT };

pub const CLIENT_KILL: CommandSpec =
    CommandSpec { decl: &redis::CLIENT_KILL, run: kill, ..CommandSpec::DEFAULT };

pub const CLIENT_PAUSE: CommandSpec =
    CommandSpec { decl: &redis::CLIENT_PAUSE, run: pause, ..CommandSpec::DEFAULT };

pub const CLIENT_UNPAUSE: CommandSpec =
    CommandSpec { decl: &redis::CLIENT_UNPAUSE, run: unpause, ..CommandSpec::DEFAULT };

fn client_type(name: &[u8]) -> Result<ClientType, Reply> {
    ClientType::parse(name).ok_or_else(|| {
        Reply::error_fmt(format!("ERR Unknown client type '{}'", String::from_utf8_lossy(name)))
    })
}

/// `CLIENT LIST [TYPE type] | [ID id ...]`: one line per connection, in connection order: this
/// router's, then every other router's of the cluster (asked through a node: see
/// `crate::pubsub::Hub::ask_clients`; a router that does not answer in time is left out).
pub fn list(args: &Args, ctx: &mut Ctx) -> Pending {
    let filter = if args.len() == 4 && args[2].eq_ignore_ascii_case(b"type") {
        match client_type(&args[3]) {
            Ok(kind) => Filter { kind: Some(kind), ..Filter::default() },
            Err(e) => return e.into(),
        }
    } else if args.len() > 3 && args[2].eq_ignore_ascii_case(b"id") {
        let mut ids = Vec::new();
        for arg in &args[3..] {
            let Some(id) = shoal_wire::num::parse_i64(arg) else {
                return Reply::error("ERR Invalid client ID").into();
            };
            ids.extend(u64::try_from(id).ok());
        }
        Filter { ids: Some(ids), ..Filter::default() }
    } else if args.len() == 2 {
        Filter::default()
    } else {
        return syntax_error().into();
    };
    let mine = ctx.state.clients.list(&filter, |s| ctx.registry.name_of(s));
    let others = ctx.state.pubsub.clone().ask_clients(filter.query(false));
    Pending::later(async move {
        let mut text = mine.into_bytes();
        if let Ok(reply) = others.await {
            text.extend_from_slice(&reply.lines);
        }
        Reply::Verbatim(text.into())
    })
}

/// CLIENT KILL's filters; Redis parses the options in order and answers the first bad one.
fn kill_filter(args: &Args, acl: &crate::acl::Acl, me: u64) -> Result<Filter, Reply> {
    let mut f = Filter { skip: Some(me), ..Filter::default() };
    let mut i = 2;
    while i < args.len() {
        let (opt, value) = match args.get(i + 1) {
            Some(v) => (args[i].to_ascii_lowercase(), v),
            None => return Err(syntax_error()),
        };
        match &opt[..] {
            b"id" => match shoal_wire::num::parse_i64(value).filter(|&n| n >= 1) {
                Some(n) => f.ids = Some(vec![n as u64]),
                None => return Err(Reply::error("ERR client-id should be greater than 0")),
            },
            b"type" => f.kind = Some(client_type(value)?),
            b"addr" => f.addr = Some(value.clone()),
            b"laddr" => f.laddr = Some(value.clone()),
            // A user ACL knows (as Redis, an unknown one is an error, not "none killed").
            b"user" if acl.user(value).is_some() => f.user = Some(value.clone()),
            b"user" => {
                return Err(Reply::error_fmt(format!(
                    "ERR No such user '{}'",
                    String::from_utf8_lossy(value)
                )));
            }
            b"skipme" if value.eq_ignore_ascii_case(b"yes") => f.skip = Some(me),
            b"skipme" if value.eq_ignore_ascii_case(b"no") => f.skip = None,
            _ => return Err(syntax_error()),
        }
        i += 2;
    }
    Ok(f)
}

/// `CLIENT KILL ip:port` (answers OK or an error; may close the caller) or `CLIENT KILL
/// <filter> <value> ...` (answers how many it closed; skips the caller unless `SKIPME no`), over
/// the clients of every router of the cluster (as CLIENT LIST). The caller, if it is one of
/// them, gets its reply and then is closed, as in Redis; that reply counts this router's
/// clients only (the others' are closed all the same, without waiting for their count).
pub fn kill(args: &Args, ctx: &mut Ctx) -> Pending {
    let me = ctx.session.client.id;
    let old_form = args.len() == 3;
    let filter = if old_form {
        Filter { addr: Some(args[2].clone()), ..Filter::default() }
    } else {
        match kill_filter(args, &ctx.state.acl, me) {
            Ok(f) => f,
            Err(e) => return e.into(),
        }
    };
    let (mine, close_me) = ctx.state.clients.kill(&filter, Some(me));
    let answer = move |killed: u64| match (old_form, killed) {
        (true, 0) => Reply::error("ERR No such client"),
        (true, _) => Reply::OK,
        (false, n) => Reply::Int(n as i64),
    };
    // The old form names one address: found here, it is not asked elsewhere.
    if old_form && mine > 0 {
        return if close_me { Pending::Close(answer(mine)) } else { answer(mine).into() };
    }
    let others = ctx.state.pubsub.clone().ask_clients(filter.query(true));
    if close_me {
        tokio::spawn(others);
        return Pending::Close(answer(mine));
    }
    Pending::later(async move { answer(mine + others.await.map_or(0, |r| r.killed)) })
}

/// `CLIENT PAUSE timeout [WRITE|ALL]`: pauses this router's clients (see [`crate::pause`]).
pub fn pause(args: &Args, ctx: &mut Ctx) -> Pending {
    if args.len() > 4 {
        // Redis's arity allows more; its handler answers this.
        return Reply::error_fmt(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
            String::from_utf8_lossy(&args[1])
        ))
        .into();
    }
    // Redis checks the mode before the timeout.
    let mode = match args.get(3) {
        None => PauseMode::All,
        Some(m) if m.eq_ignore_ascii_case(b"write") => PauseMode::Write,
        Some(m) if m.eq_ignore_ascii_case(b"all") => PauseMode::All,
        Some(_) => return Reply::error("ERR CLIENT PAUSE mode must be WRITE or ALL").into(),
    };
    let Some(ms) = shoal_wire::num::parse_i64(&args[2]) else {
        return Reply::error("ERR timeout is not an integer or out of range").into();
    };
    if ms < 0 {
        return Reply::error("ERR timeout is negative").into();
    }
    // Redis adds the timeout to the Unix time in ms without checking: a sum past i64::MAX wraps
    // into the past, and such a pause has already ended.
    let now_ms = ctx.now_ms();
    let ms = if ms > i64::MAX - now_ms { 0 } else { ms as u64 };
    let now = tokio::time::Instant::now();
    // Past what an Instant can hold: a century is as good as forever.
    let until =
        now.checked_add(Duration::from_millis(ms)).unwrap_or(now + Duration::from_secs(100 * 365 * 86_400));
    ctx.state.pause.pause(mode, until);
    Reply::OK.into()
}

/// `CLIENT UNPAUSE`: lifts this router's pause; held commands run.
pub fn unpause(_args: &Args, ctx: &mut Ctx) -> Pending {
    ctx.state.pause.unpause();
    Reply::OK.into()
}
