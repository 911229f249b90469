//! CLIENT subcommands about other connections and the router as a whole: LIST, KILL, PAUSE,
//! UNPAUSE. They see this router's RESP connections ([`crate::clients`]) and pause this router
//! only (docs/compatibility.md).

use std::time::Duration;

use super::spec::*;
use super::{Args, Ctx, Pending, syntax_error};
use crate::clients::ClientHandle;
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

/// A client type, as CLIENT LIST TYPE and CLIENT KILL TYPE name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientType {
    Normal,
    /// Subscribed to a channel, pattern or shard channel (Redis's pub/sub clients).
    Pubsub,
    /// Master or replica: Shoal has no such clients, so these match none.
    Other,
}

impl ClientType {
    fn of(c: &ClientHandle) -> ClientType {
        if c.is_pubsub() { ClientType::Pubsub } else { ClientType::Normal }
    }
}

fn client_type(name: &[u8]) -> Result<ClientType, Reply> {
    match &name.to_ascii_lowercase()[..] {
        b"normal" => Ok(ClientType::Normal),
        b"pubsub" => Ok(ClientType::Pubsub),
        b"master" | b"replica" | b"slave" => Ok(ClientType::Other),
        _ => Err(Reply::error_fmt(format!("ERR Unknown client type '{}'", String::from_utf8_lossy(name)))),
    }
}

/// `CLIENT LIST [TYPE type] | [ID id ...]`: one line per connection, in connection order.
pub fn list(args: &Args, ctx: &mut Ctx) -> Pending {
    let chosen: Vec<std::sync::Arc<ClientHandle>> =
        if args.len() == 4 && args[2].eq_ignore_ascii_case(b"type") {
            match client_type(&args[3]) {
                Ok(wanted) => {
                    ctx.state.clients.all().into_iter().filter(|c| ClientType::of(c) == wanted).collect()
                }
                Err(e) => return e.into(),
            }
        } else if args.len() > 3 && args[2].eq_ignore_ascii_case(b"id") {
            let mut chosen = Vec::new();
            for arg in &args[3..] {
                let Some(id) = shoal_wire::num::parse_i64(arg) else {
                    return Reply::error("ERR Invalid client ID").into();
                };
                // Redis lists an ID as often as it is given.
                chosen.extend(u64::try_from(id).ok().and_then(|id| ctx.state.clients.get(id)));
            }
            chosen
        } else if args.len() == 2 {
            ctx.state.clients.all()
        } else {
            return syntax_error().into();
        };
    let text: String = chosen.iter().map(|c| c.info_line(|s| ctx.registry.name_of(s))).collect();
    Reply::Verbatim(text.into()).into()
}

/// Which connections CLIENT KILL closes: every given filter must match.
#[derive(Debug, Default)]
struct Filter<'a> {
    addr: Option<&'a [u8]>,
    laddr: Option<&'a [u8]>,
    kind: Option<ClientType>,
    id: Option<u64>,
    user: Option<&'a [u8]>,
    skip_me: bool,
}

impl Filter<'_> {
    /// Redis parses the options in order and answers the first bad one.
    fn parse<'a>(args: &'a Args, acl: &crate::acl::Acl) -> Result<Filter<'a>, Reply> {
        let mut f = Filter { skip_me: true, ..Filter::default() };
        let mut i = 2;
        while i < args.len() {
            let (opt, value) = match args.get(i + 1) {
                Some(v) => (args[i].to_ascii_lowercase(), v),
                None => return Err(syntax_error()),
            };
            match &opt[..] {
                b"id" => match shoal_wire::num::parse_i64(value).filter(|&n| n >= 1) {
                    Some(n) => f.id = Some(n as u64),
                    None => return Err(Reply::error("ERR client-id should be greater than 0")),
                },
                b"type" => f.kind = Some(client_type(value)?),
                b"addr" => f.addr = Some(value),
                b"laddr" => f.laddr = Some(value),
                // A user ACL knows (as Redis, an unknown one is an error, not "none killed").
                b"user" if acl.user(value).is_some() => f.user = Some(value),
                b"user" => {
                    return Err(Reply::error_fmt(format!(
                        "ERR No such user '{}'",
                        String::from_utf8_lossy(value)
                    )));
                }
                b"skipme" if value.eq_ignore_ascii_case(b"yes") => f.skip_me = true,
                b"skipme" if value.eq_ignore_ascii_case(b"no") => f.skip_me = false,
                _ => return Err(syntax_error()),
            }
            i += 2;
        }
        Ok(f)
    }

    fn matches(&self, c: &ClientHandle, me: u64) -> bool {
        self.addr.is_none_or(|a| a == c.peer.as_bytes())
            && self.laddr.is_none_or(|a| a == c.local.as_bytes())
            && self.kind.is_none_or(|k| k == ClientType::of(c))
            && self.id.is_none_or(|id| id == c.id)
            && self.user.is_none_or(|u| c.names().user.as_deref().unwrap_or("default").as_bytes() == u)
            && !(self.skip_me && c.id == me)
    }
}

/// `CLIENT KILL ip:port` (answers OK or an error; may close the caller) or `CLIENT KILL
/// <filter> <value> ...` (answers how many it closed; skips the caller unless `SKIPME no`).
/// The caller, if it is one of them, gets its reply and then is closed, as in Redis.
pub fn kill(args: &Args, ctx: &mut Ctx) -> Pending {
    let old_form = args.len() == 3;
    let filter = if old_form {
        Filter { addr: Some(&args[2]), ..Filter::default() }
    } else {
        match Filter::parse(args, &ctx.state.acl) {
            Ok(f) => f,
            Err(e) => return e.into(),
        }
    };
    let me = ctx.session.client.id;
    let mut killed = 0;
    let mut close_me = false;
    for c in ctx.state.clients.all() {
        // One killed already is gone for Redis (freed at once), though its connection may not
        // have closed here yet: a second kill does not count it.
        if !filter.matches(&c, me) || c.is_killed() {
            continue;
        }
        if c.id == me {
            close_me = true;
        } else {
            c.kill();
        }
        killed += 1;
    }
    let reply = match (old_form, killed) {
        (true, 0) => Reply::error("ERR No such client"),
        (true, _) => Reply::OK,
        (false, n) => Reply::Int(n),
    };
    if close_me { Pending::Close(reply) } else { reply.into() }
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
