//! Connection commands: PING, ECHO, HELLO, AUTH, SELECT, QUIT, RESET, and TIME.

use super::spec::*;
use super::{Args, Ctx, Pending, int_arg, syntax_error, wrong_arity};
use crate::resp::{Protocol, Reply};

pub const PING: CommandSpec = CommandSpec { decl: &redis::PING, run: ping, ..CommandSpec::DEFAULT };

pub const ECHO: CommandSpec = CommandSpec { decl: &redis::ECHO, run: echo, ..CommandSpec::DEFAULT };

pub const READONLY: CommandSpec =
    CommandSpec { decl: &redis::READONLY, run: readonly, ..CommandSpec::DEFAULT };

pub const READWRITE: CommandSpec =
    CommandSpec { decl: &redis::READWRITE, run: readwrite, ..CommandSpec::DEFAULT };

pub const HELLO: CommandSpec = CommandSpec { decl: &redis::HELLO, run: hello, ..CommandSpec::DEFAULT };

pub const AUTH: CommandSpec = CommandSpec { decl: &redis::AUTH, run: auth, ..CommandSpec::DEFAULT };

pub const SELECT: CommandSpec = CommandSpec { decl: &redis::SELECT, run: select, ..CommandSpec::DEFAULT };

pub const QUIT: CommandSpec = CommandSpec { decl: &redis::QUIT, run: quit, ..CommandSpec::DEFAULT };

pub const RESET: CommandSpec = CommandSpec { decl: &redis::RESET, run: reset, ..CommandSpec::DEFAULT };

pub const TIME: CommandSpec = CommandSpec { decl: &redis::TIME, run: time, ..CommandSpec::DEFAULT };

/// The Redis version Shoal presents itself as (HELLO, INFO): the one its replies are checked
/// against.
pub const REDIS_COMPAT_VERSION: &str = "7.0.15";

pub fn ping(args: &Args, ctx: &mut Ctx) -> Pending {
    if args.len() <= 2 && ctx.session.protocol() == Protocol::Resp2 && ctx.session.subscribed() {
        return super::pubsub::subscribed_ping(args).into();
    }
    match args.len() {
        1 => Reply::simple("PONG").into(),
        2 => Reply::Bulk(args[1].clone()).into(),
        _ => wrong_arity("ping").into(),
    }
}

pub fn echo(args: &Args, _ctx: &mut Ctx) -> Pending {
    Reply::Bulk(args[1].clone()).into()
}

/// `READONLY`: this connection's read-only commands on one key may be served by a replica of the
/// key's shard (as a Redis Cluster client asks of a replica node); they may then miss the
/// latest writes. Writes still go to the primary.
pub fn readonly(_args: &Args, ctx: &mut Ctx) -> Pending {
    ctx.session.readonly = true;
    Reply::OK.into()
}

/// `READWRITE`: back to reading from primaries (unless the router's --read-from says otherwise).
pub fn readwrite(_args: &Args, ctx: &mut Ctx) -> Pending {
    ctx.session.readonly = false;
    Reply::OK.into()
}

/// `HELLO [protover [AUTH username password] [SETNAME clientname]]`.
pub fn hello(args: &Args, ctx: &mut Ctx) -> Pending {
    let mut version = None;
    let mut i = 1;
    if let Some(v) = args.get(1) {
        match shoal_wire::num::parse_i64(v) {
            None => return Reply::error("ERR Protocol version is not an integer or out of range").into(),
            Some(2) => version = Some(Protocol::Resp2),
            Some(3) => version = Some(Protocol::Resp3),
            Some(_) => return Reply::error("NOPROTO unsupported protocol version").into(),
        }
        i = 2;
    }
    let mut credentials = None;
    let mut name = None;
    while i < args.len() {
        let more = args.len() - 1 - i;
        if args[i].eq_ignore_ascii_case(b"AUTH") && more >= 2 {
            credentials = Some((&args[i + 1], &args[i + 2]));
            i += 3;
        } else if args[i].eq_ignore_ascii_case(b"SETNAME") && more >= 1 {
            if let Err(e) = super::client::validate_name(&args[i + 1]) {
                return e.into();
            }
            name = Some(args[i + 1].clone());
            i += 2;
        } else {
            let opt = String::from_utf8_lossy(&args[i]).into_owned();
            return Reply::error_fmt(format!("ERR Syntax error in HELLO option '{opt}'")).into();
        }
    }
    if let Some((user, pass)) = credentials
        && !authenticate(ctx, "hello", user, pass)
    {
        return wrongpass().into();
    }
    if !ctx.session.authenticated {
        return Reply::error(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> \
             AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol \
             version at the same time",
        )
        .into();
    }
    if let Some(name) = name {
        ctx.session.set_name((!name.is_empty()).then_some(name));
    }
    if let Some(v) = version {
        ctx.session.set_protocol(v);
    }
    Reply::Map(vec![
        (Reply::bulk("server"), Reply::bulk("redis")),
        (Reply::bulk("version"), Reply::bulk(REDIS_COMPAT_VERSION)),
        (Reply::bulk("proto"), Reply::Int(ctx.session.protocol().version())),
        (Reply::bulk("id"), Reply::Int(ctx.session.id as i64)),
        (Reply::bulk("mode"), Reply::bulk("standalone")),
        (Reply::bulk("role"), Reply::bulk("master")),
        (Reply::bulk("modules"), Reply::Array(vec![])),
    ])
    .into()
}

fn wrongpass() -> Reply {
    Reply::error("WRONGPASS invalid username-password pair or user is disabled.")
}

/// `AUTH [username] password`.
pub fn auth(args: &Args, ctx: &mut Ctx) -> Pending {
    if args.len() > 3 {
        return syntax_error().into();
    }
    let (user, pass): (&[u8], &[u8]) = if args.len() == 2 {
        if ctx.state.acl.default_nopass() {
            return Reply::error(
                "ERR AUTH <password> called without any password configured for the default user. Are you sure \
                 your configuration is correct?",
            )
            .into();
        }
        (b"default", &args[1])
    } else {
        (&args[1], &args[2])
    };
    if authenticate(ctx, "auth", user, pass) { Reply::OK.into() } else { wrongpass().into() }
}

/// Checks a user and password for AUTH or HELLO AUTH: a match authenticates the session as that
/// user; a mismatch (or a user that does not exist or is off) is counted in
/// `shoal_router_auth_failures_total` and logged in ACL LOG.
fn authenticate(ctx: &mut Ctx, command: &str, user: &[u8], pass: &[u8]) -> bool {
    match ctx.state.acl.authenticate(user, pass) {
        Some(cell) => {
            ctx.session.authenticated = true;
            let default = std::sync::Arc::ptr_eq(&cell, ctx.state.acl.default_user());
            ctx.session.set_user((!default).then_some(cell));
            true
        }
        None => {
            ctx.state.metrics.auth_failures.inc();
            super::acl::log_auth_failure(ctx, command, user);
            false
        }
    }
}

/// SELECT: Shoal has one database, 0.
pub fn select(args: &Args, _ctx: &mut Ctx) -> Pending {
    match int_arg(&args[1]) {
        Ok(n) if i32::try_from(n).is_err() => {
            Reply::error("ERR value is out of range, value must between -2147483648 and 2147483647").into()
        }
        Ok(0) => Reply::OK.into(),
        Ok(_) => Reply::error("ERR DB index is out of range").into(),
        Err(e) => e.into(),
    }
}

pub fn quit(_args: &Args, _ctx: &mut Ctx) -> Pending {
    Pending::Close(Reply::OK)
}

pub fn reset(_args: &Args, ctx: &mut Ctx) -> Pending {
    // Out of pub/sub: answered once the nodes know (a PUBSUB right after agrees).
    let left = ctx.session.subscriber.take().map(|s| s.leave());
    ctx.session.reset(!ctx.state.acl.default_open());
    super::transaction::release(ctx.state, ctx.session.watched.take());
    match left {
        Some(left) => Pending::later(async move {
            left.await;
            Reply::simple("RESET")
        }),
        None => Reply::simple("RESET").into(),
    }
}

pub fn time(_args: &Args, ctx: &mut Ctx) -> Pending {
    let us = ctx.state.clock.now_us();
    Reply::Array(vec![Reply::bulk((us / 1_000_000).to_string()), Reply::bulk((us % 1_000_000).to_string())])
        .into()
}
