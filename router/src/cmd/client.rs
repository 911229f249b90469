//! CLIENT subcommands about the calling connection, and the CLIENT container (its HELP lists
//! every subcommand, those about other connections in [`super::clients`] too).

use super::spec::*;
use super::{Args, Ctx, Pending, clients, syntax_error};
use bytes::Bytes;

use crate::pubsub::tracking::Options;
use crate::resp::Reply;
use crate::session::Tracked;

pub const CLIENT_SETNAME: CommandSpec =
    CommandSpec { decl: &redis::CLIENT_SETNAME, run: setname, ..CommandSpec::DEFAULT };

pub const CLIENT_GETNAME: CommandSpec =
    CommandSpec { decl: &redis::CLIENT_GETNAME, run: getname, ..CommandSpec::DEFAULT };

pub const CLIENT_ID: CommandSpec = CommandSpec { decl: &redis::CLIENT_ID, run: id, ..CommandSpec::DEFAULT };

/// Shoal's own declaration: CLIENT SETINFO is Redis 7.2's (client libraries send it on connect),
/// so redis-server 7.0.15's table lacks it; declared as Redis 7.2 declares it.
const CLIENT_SETINFO_DECL: RedisCommand = RedisCommand {
    name: "client|setinfo",
    arity: 4,
    flags: flag::NOSCRIPT | flag::LOADING | flag::STALE,
    key_range: KeyRange::NONE,
    categories: cat::SLOW | cat::CONNECTION,
    container: false,
    summary: "Set client or connection specific info",
    since: "7.2.0",
    group: "connection",
    complexity: "O(1)",
    ..SHOAL_OWN
};

pub const CLIENT_SETINFO: CommandSpec =
    CommandSpec { decl: &CLIENT_SETINFO_DECL, run: setinfo, ..CommandSpec::DEFAULT };

pub const CLIENT_INFO: CommandSpec =
    CommandSpec { decl: &redis::CLIENT_INFO, run: info, ..CommandSpec::DEFAULT };

pub const CLIENT_REPLY: CommandSpec =
    CommandSpec { decl: &redis::CLIENT_REPLY, run: reply, ..CommandSpec::DEFAULT };

pub const CLIENT_NO_EVICT: CommandSpec =
    CommandSpec { decl: &redis::CLIENT_NO_EVICT, run: no_evict, ..CommandSpec::DEFAULT };

/// CLIENT NO-TOUCH is Redis 7.2's too, with SETINFO's flags and categories.
const CLIENT_NO_TOUCH_DECL: RedisCommand = RedisCommand {
    name: "client|no-touch",
    arity: 3,
    summary: "Controls whether commands sent by the client affect the LRU/LFU of accessed keys",
    ..CLIENT_SETINFO_DECL
};

pub const CLIENT_NO_TOUCH: CommandSpec =
    CommandSpec { decl: &CLIENT_NO_TOUCH_DECL, run: no_touch, ..CommandSpec::DEFAULT };

pub const CLIENT_UNBLOCK: CommandSpec =
    CommandSpec { decl: &redis::CLIENT_UNBLOCK, run: unblock, ..CommandSpec::DEFAULT };

/// `CLIENT UNBLOCK id [TIMEOUT|ERROR]`: ends another connection's blocking command (on this
/// router) as if its timeout had passed, or with an `-UNBLOCKED` error; 1 if it was blocked.
pub fn unblock(args: &Args, ctx: &mut Ctx) -> Pending {
    if args.len() > 4 {
        return Reply::error_fmt(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
            String::from_utf8_lossy(&args[1])
        ))
        .into();
    }
    let error = match args.get(3) {
        None => false,
        Some(r) if r.eq_ignore_ascii_case(b"timeout") => false,
        Some(r) if r.eq_ignore_ascii_case(b"error") => true,
        Some(_) => return Reply::error("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR").into(),
    };
    let Some(id) = shoal_wire::num::parse_i64(&args[2]) else { return super::not_integer().into() };
    let done =
        u64::try_from(id).ok().and_then(|id| ctx.state.clients.get(id)).is_some_and(|c| c.unblock(error));
    Reply::Int(i64::from(done)).into()
}

pub const CLIENT_TRACKING: CommandSpec =
    CommandSpec { decl: &redis::CLIENT_TRACKING, run: tracking, ..CommandSpec::DEFAULT };

pub const CLIENT_CACHING: CommandSpec =
    CommandSpec { decl: &redis::CLIENT_CACHING, run: caching, ..CommandSpec::DEFAULT };

pub const CLIENT_GETREDIR: CommandSpec =
    CommandSpec { decl: &redis::CLIENT_GETREDIR, run: getredir, ..CommandSpec::DEFAULT };

pub const CLIENT_TRACKINGINFO: CommandSpec =
    CommandSpec { decl: &redis::CLIENT_TRACKINGINFO, run: trackinginfo, ..CommandSpec::DEFAULT };

/// `CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p ...] [BCAST] [OPTIN] [OPTOUT] [NOLOOP]`:
/// Redis 7.0's `clientCommand` checks, in its order and with its texts.
pub fn tracking(args: &Args, ctx: &mut Ctx) -> Pending {
    let mut o = match tracking_options(args, ctx) {
        Ok(o) => o,
        Err(e) => return e.into(),
    };
    if args[2].eq_ignore_ascii_case(b"off") {
        ctx.session.tracking = None;
        ctx.session.client.set_tracking(0, -1);
        return Reply::OK.into();
    }
    if !args[2].eq_ignore_ascii_case(b"on") {
        return syntax_error().into();
    }
    if let Err(e) = tracking_modes(&o, ctx.session.tracking.as_ref()) {
        return e.into();
    }
    if o.bcast {
        let held = ctx.session.tracking.as_ref().map(|t| t.options.prefixes.clone()).unwrap_or_default();
        match all_prefixes(held, &o.prefixes) {
            Ok(all) => o.prefixes = all,
            Err(e) => return e.into(),
        }
    }
    if ctx.session.http {
        // Nothing would ever deliver its invalidations.
        return Reply::error(
            "ERR CLIENT TRACKING needs a connection: each HTTP request stands alone; use RESP",
        )
        .into();
    }
    track(o, ctx)
}

/// The options after ON|OFF (REDIRECT's target must exist).
fn tracking_options(args: &Args, ctx: &Ctx) -> Result<Options, Reply> {
    let mut o = Options::default();
    let mut j = 3;
    while j < args.len() {
        let more = j + 1 < args.len();
        let a = &args[j];
        if a.eq_ignore_ascii_case(b"redirect") && more {
            j += 1;
            if o.redirect != 0 {
                return Err(Reply::error("ERR A client can only redirect to a single other client"));
            }
            let id = super::int_arg(&args[j])?;
            if id <= 0 || ctx.state.clients.get(id as u64).is_none() {
                return Err(Reply::error("ERR The client ID you want redirect to does not exist"));
            }
            o.redirect = id as u64;
        } else if a.eq_ignore_ascii_case(b"bcast") {
            o.bcast = true;
        } else if a.eq_ignore_ascii_case(b"optin") {
            o.optin = true;
        } else if a.eq_ignore_ascii_case(b"optout") {
            o.optout = true;
        } else if a.eq_ignore_ascii_case(b"noloop") {
            o.noloop = true;
        } else if a.eq_ignore_ascii_case(b"prefix") && more {
            j += 1;
            o.prefixes.push(args[j].clone());
        } else {
            return Err(syntax_error());
        }
        j += 1;
    }
    Ok(o)
}

/// The mode checks of TRACKING ON, against the options in force (`old`).
fn tracking_modes(o: &Options, old: Option<&Tracked>) -> Result<(), Reply> {
    if !o.bcast && !o.prefixes.is_empty() {
        return Err(Reply::error("ERR PREFIX option requires BCAST mode to be enabled"));
    }
    if let Some(old) = old
        && old.options.bcast != o.bcast
    {
        return Err(Reply::error(
            "ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then \
             re-enabling it with a different mode.",
        ));
    }
    if o.bcast && (o.optin || o.optout) {
        return Err(Reply::error("ERR OPTIN and OPTOUT are not compatible with BCAST"));
    }
    if o.optin && o.optout {
        return Err(Reply::error("ERR You can't specify both OPTIN mode and OPTOUT mode"));
    }
    if let Some(old) = old
        && ((o.optin && old.options.optout) || (o.optout && old.options.optin))
    {
        return Err(Reply::error(
            "ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then \
             re-enabling it with a different mode.",
        ));
    }
    Ok(())
}

/// The BCAST prefixes after adding `new` to `held`: Redis's `checkPrefixCollisionsOrReply`
/// (prefixes of one client must not overlap).
fn all_prefixes(mut held: Vec<Bytes>, new: &[Bytes]) -> Result<Vec<Bytes>, Reply> {
    for (i, p) in new.iter().enumerate() {
        let others = held
            .iter()
            .map(|q| (q, "an existing"))
            .chain(new[i + 1..].iter().map(|q| (q, "another provided")));
        for (q, which) in others {
            if p.starts_with(q) || q.starts_with(p) {
                return Err(Reply::error_fmt(format!(
                    "ERR Prefix '{}' overlaps with {which} prefix '{}'. Prefixes for a single client \
                     must not overlap.",
                    String::from_utf8_lossy(p),
                    String::from_utf8_lossy(q)
                )));
            }
        }
    }
    held.extend(new.iter().cloned());
    Ok(held)
}

/// Turns tracking on with options `o` (checked).
fn track(o: Options, ctx: &mut Ctx) -> Pending {
    // Where its own pushes are queued (the connection writes them between replies).
    let hub = ctx.state.pubsub.clone();
    let sub = super::pubsub::own_queue(ctx);
    let flags = 1 | if o.bcast { 4 } else { 0 };
    ctx.session.client.set_tracking(flags, o.redirect as i64);
    let before = hub.tracking.bcast_prefixes();
    let target = ctx.state.clients.get(o.redirect).map(|c| std::sync::Arc::downgrade(&c));
    hub.tracking.enable(ctx.session.id, o.clone(), sub, target);
    let changed = hub.tracking.bcast_prefixes() != before;
    // Replacing the session's earlier state must not disable the client it re-enabled.
    if let Some(mut old) = ctx.session.tracking.take() {
        old.id = 0;
    }
    ctx.session.tracking = Some(Tracked { options: o, hub: hub.clone(), id: ctx.session.id });
    // BCAST: the reply waits until the nodes send the new prefixes' changes.
    let registered = hub.want_tracking(changed);
    Pending::later(async move {
        registered.await;
        Reply::OK
    })
}

pub fn caching(args: &Args, ctx: &mut Ctx) -> Pending {
    let Some(t) = &ctx.session.tracking else {
        return Reply::error(
            "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT \
             mode enabled",
        )
        .into();
    };
    let yes = if args[2].eq_ignore_ascii_case(b"yes") {
        if !t.options.optin {
            return Reply::error(
                "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
            )
            .into();
        }
        true
    } else if args[2].eq_ignore_ascii_case(b"no") {
        if !t.options.optout {
            return Reply::error(
                "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
            )
            .into();
        }
        false
    } else {
        return syntax_error().into();
    };
    ctx.session.caching = Some(yes);
    Reply::OK.into()
}

pub fn getredir(_args: &Args, ctx: &mut Ctx) -> Pending {
    Reply::Int(ctx.session.tracking.as_ref().map_or(-1, |t| t.options.redirect as i64)).into()
}

pub fn trackinginfo(_args: &Args, ctx: &mut Ctx) -> Pending {
    let t = ctx.session.tracking.as_ref();
    let mut flags = vec![Reply::bulk(if t.is_some() { "on" } else { "off" })];
    if let Some(t) = t {
        let o = &t.options;
        if o.bcast {
            flags.push(Reply::bulk("bcast"));
        }
        if o.optin {
            flags.push(Reply::bulk("optin"));
            if ctx.session.caching == Some(true) {
                flags.push(Reply::bulk("caching-yes"));
            }
        }
        if o.optout {
            flags.push(Reply::bulk("optout"));
            if ctx.session.caching == Some(false) {
                flags.push(Reply::bulk("caching-no"));
            }
        }
        if o.noloop {
            flags.push(Reply::bulk("noloop"));
        }
        if ctx.session.client.redirect_broken() {
            flags.push(Reply::bulk("broken_redirect"));
        }
    }
    let prefixes = t.map_or_else(Vec::new, |t| t.options.prefixes.iter().cloned().map(Reply::Bulk).collect());
    Reply::Map(vec![
        (Reply::bulk("flags"), Reply::Set(flags)),
        (Reply::bulk("redirect"), Reply::Int(t.map_or(-1, |t| t.options.redirect as i64))),
        (Reply::bulk("prefixes"), Reply::Array(prefixes)),
    ])
    .into()
}

pub const CLIENT_HELP: CommandSpec =
    CommandSpec { decl: &redis::CLIENT_HELP, run: help, ..CommandSpec::DEFAULT };

pub const CLIENT: CommandSpec = CommandSpec {
    decl: &redis::CLIENT,
    run: container,
    subcommands: &[
        &CLIENT_SETNAME,
        &CLIENT_GETNAME,
        &CLIENT_ID,
        &CLIENT_SETINFO,
        &CLIENT_INFO,
        &clients::CLIENT_LIST,
        &clients::CLIENT_KILL,
        &clients::CLIENT_PAUSE,
        &clients::CLIENT_UNPAUSE,
        &CLIENT_NO_EVICT,
        &CLIENT_NO_TOUCH,
        &CLIENT_REPLY,
        &CLIENT_UNBLOCK,
        &CLIENT_TRACKING,
        &CLIENT_CACHING,
        &CLIENT_GETREDIR,
        &CLIENT_TRACKINGINFO,
        &CLIENT_HELP,
    ],
    lane: LaneClass::No,
};

/// Client names may only hold printable, non-space ASCII (Redis's rule, with its text).
pub fn validate_name(name: &[u8]) -> Result<(), Reply> {
    if name.iter().all(|&c| (b'!'..=b'~').contains(&c)) {
        Ok(())
    } else {
        Err(Reply::error("ERR Client names cannot contain spaces, newlines or special characters."))
    }
}

/// `CLIENT` without a subcommand never gets here (arity); kept for the table.
pub fn container(args: &Args, ctx: &mut Ctx) -> Pending {
    help(args, ctx)
}

pub fn setname(args: &Args, ctx: &mut Ctx) -> Pending {
    if let Err(e) = validate_name(&args[2]) {
        return e.into();
    }
    ctx.session.set_name((!args[2].is_empty()).then(|| args[2].clone()));
    Reply::OK.into()
}

pub fn getname(_args: &Args, ctx: &mut Ctx) -> Pending {
    ctx.session.name().map_or(Reply::Nil, Reply::Bulk).into()
}

pub fn id(_args: &Args, ctx: &mut Ctx) -> Pending {
    Reply::Int(ctx.session.id as i64).into()
}

/// `CLIENT SETINFO LIB-NAME|LIB-VER value` (Redis 7.2; client libraries send it on connect).
pub fn setinfo(args: &Args, ctx: &mut Ctx) -> Pending {
    let attr = &args[2];
    let value = &args[3];
    let (label, lib_name) = if attr.eq_ignore_ascii_case(b"lib-name") {
        ("lib-name", true)
    } else if attr.eq_ignore_ascii_case(b"lib-ver") {
        ("lib-ver", false)
    } else {
        return Reply::error_fmt(format!("ERR Unrecognized option '{}'", String::from_utf8_lossy(attr)))
            .into();
    };
    if !value.iter().all(|&c| (b'!'..=b'~').contains(&c)) {
        return Reply::error_fmt(format!(
            "ERR {label} cannot contain spaces, newlines or special characters."
        ))
        .into();
    }
    let value = (!value.is_empty()).then(|| value.clone());
    ctx.session.client.update_names(|n| *if lib_name { &mut n.lib_name } else { &mut n.lib_ver } = value);
    Reply::OK.into()
}

pub fn info(_args: &Args, ctx: &mut Ctx) -> Pending {
    Reply::Verbatim(ctx.session.client.info_line(|s| ctx.registry.name_of(s)).into()).into()
}

/// `CLIENT REPLY ON|OFF|SKIP` (see [`crate::session::ReplyMode`]). OFF and SKIP answer nothing
/// themselves; SKIP while OFF changes nothing.
pub fn reply(args: &Args, ctx: &mut Ctx) -> Pending {
    let mode = &mut ctx.session.reply;
    if args[2].eq_ignore_ascii_case(b"on") {
        *mode = Default::default();
        return Reply::OK.into();
    }
    if args[2].eq_ignore_ascii_case(b"off") {
        mode.off = true;
    } else if args[2].eq_ignore_ascii_case(b"skip") {
        if !mode.off {
            mode.skip_next = true;
        }
    } else {
        return syntax_error().into();
    }
    Reply::Seq(vec![]).into()
}

/// `CLIENT NO-EVICT ON|OFF`: Shoal never evicts clients, so this only records the `e` flag
/// that CLIENT INFO and CLIENT LIST show (RESET keeps it, as in Redis).
pub fn no_evict(args: &Args, ctx: &mut Ctx) -> Pending {
    let Some(on) = on_off(&args[2]) else { return syntax_error().into() };
    ctx.session.client.set_no_evict(on);
    Reply::OK.into()
}

/// `CLIENT NO-TOUCH ON|OFF` (Redis 7.2): while on, this client's commands (TOUCH excepted) leave
/// the access times of the keys they read as they were (`Op.no_touch`; see `Session::no_touch`).
pub fn no_touch(args: &Args, ctx: &mut Ctx) -> Pending {
    let Some(on) = on_off(&args[2]) else { return syntax_error().into() };
    ctx.session.no_touch = on;
    ctx.session.skip_touch = false;
    ctx.session.client.set_no_touch(on);
    Reply::OK.into()
}

/// `ON` or `OFF`, any case (CLIENT NO-EVICT, NO-TOUCH).
fn on_off(arg: &[u8]) -> Option<bool> {
    if arg.eq_ignore_ascii_case(b"on") {
        Some(true)
    } else if arg.eq_ignore_ascii_case(b"off") {
        Some(false)
    } else {
        None
    }
}

/// Redis 7.0.15's CLIENT HELP, word for word and in its order, with SETINFO where Redis 7.2
/// lists it.
pub fn help(_args: &Args, _ctx: &mut Ctx) -> Pending {
    let lines = [
        "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CACHING (YES|NO)",
        "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
        "GETREDIR",
        "    Return the client ID we are redirecting to when tracking is enabled.",
        "GETNAME",
        "    Return the name of the current connection.",
        "ID",
        "    Return the ID of the current connection.",
        "INFO",
        "    Return information about the current client connection.",
        "KILL <ip:port>",
        "    Kill connection made from <ip:port>.",
        "KILL <option> <value> [<option> <value> [...]]",
        "    Kill connections. Options are:",
        "    * ADDR (<ip:port>|<unixsocket>:0)",
        "      Kill connections made from the specified address",
        "    * LADDR (<ip:port>|<unixsocket>:0)",
        "      Kill connections made to specified local address",
        "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
        "      Kill connections by type.",
        "    * USER <username>",
        "      Kill connections authenticated by <username>.",
        "    * SKIPME (YES|NO)",
        "      Skip killing current connection (default: yes).",
        "LIST [options ...]",
        "    Return information about client connections. Options:",
        "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
        "      Return clients of specified type.",
        "UNPAUSE",
        "    Stop the current client pause, resuming traffic.",
        "PAUSE <timeout> [WRITE|ALL]",
        "    Suspend all, or just write, clients for <timeout> milliseconds.",
        "REPLY (ON|OFF|SKIP)",
        "    Control the replies sent to the current connection.",
        "SETNAME <name>",
        "    Assign the name <name> to the current connection.",
        "SETINFO <option> <value>",
        "    Set client meta attr. Options are:",
        "    * LIB-NAME: the client lib name.",
        "    * LIB-VER: the client lib version.",
        "UNBLOCK <clientid> [TIMEOUT|ERROR]",
        "    Unblock the specified blocked client.",
        "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
        "         [OPTIN] [OPTOUT] [NOLOOP]",
        "    Control server assisted client side caching.",
        "TRACKINGINFO",
        "    Report tracking status for the current connection.",
        "NO-EVICT (ON|OFF)",
        "    Protect current client connection from eviction.",
        "HELP",
        "    Prints this help.",
    ];
    super::help_reply(&lines)
}
