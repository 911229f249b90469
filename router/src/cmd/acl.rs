//! ACL SETUSER/GETUSER/DELUSER/LIST/USERS/WHOAMI/CAT/DRYRUN/LOG/SAVE/LOAD/GENPASS/HELP over the
//! router's users ([`crate::acl`]), the permission check [`super::dispatch`] runs before every
//! command, and the `--aclfile` follower.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::spec::*;
use super::{Args, Ctx, Pending};
use crate::acl::commands::{self as table, CATEGORIES, REDIS_COMMANDS};
use crate::acl::log::Entry;
use crate::acl::{Denied, UserCell, file};
use crate::resp::Reply;
use crate::state::RouterState;

pub const ACL_CAT: CommandSpec = CommandSpec { decl: &redis::ACL_CAT, run: cat, ..CommandSpec::DEFAULT };

pub const ACL_DELUSER: CommandSpec =
    CommandSpec { decl: &redis::ACL_DELUSER, run: deluser, ..CommandSpec::DEFAULT };

pub const ACL_DRYRUN: CommandSpec =
    CommandSpec { decl: &redis::ACL_DRYRUN, run: dryrun, ..CommandSpec::DEFAULT };

pub const ACL_GENPASS: CommandSpec =
    CommandSpec { decl: &redis::ACL_GENPASS, run: genpass, ..CommandSpec::DEFAULT };

pub const ACL_GETUSER: CommandSpec =
    CommandSpec { decl: &redis::ACL_GETUSER, run: getuser, ..CommandSpec::DEFAULT };

pub const ACL_HELP: CommandSpec = CommandSpec { decl: &redis::ACL_HELP, run: help, ..CommandSpec::DEFAULT };

pub const ACL_LIST: CommandSpec = CommandSpec { decl: &redis::ACL_LIST, run: list, ..CommandSpec::DEFAULT };

pub const ACL_LOAD: CommandSpec = CommandSpec { decl: &redis::ACL_LOAD, run: load, ..CommandSpec::DEFAULT };

pub const ACL_LOG: CommandSpec = CommandSpec { decl: &redis::ACL_LOG, run: log_cmd, ..CommandSpec::DEFAULT };

pub const ACL_SAVE: CommandSpec = CommandSpec { decl: &redis::ACL_SAVE, run: save, ..CommandSpec::DEFAULT };

pub const ACL_SETUSER: CommandSpec =
    CommandSpec { decl: &redis::ACL_SETUSER, run: setuser, ..CommandSpec::DEFAULT };

pub const ACL_USERS: CommandSpec =
    CommandSpec { decl: &redis::ACL_USERS, run: users, ..CommandSpec::DEFAULT };

pub const ACL_WHOAMI: CommandSpec =
    CommandSpec { decl: &redis::ACL_WHOAMI, run: whoami, ..CommandSpec::DEFAULT };

pub const ACL: CommandSpec = CommandSpec {
    decl: &redis::ACL,
    run: help,
    subcommands: &[
        &ACL_CAT,
        &ACL_DELUSER,
        &ACL_DRYRUN,
        &ACL_GENPASS,
        &ACL_GETUSER,
        &ACL_HELP,
        &ACL_LIST,
        &ACL_LOAD,
        &ACL_LOG,
        &ACL_SAVE,
        &ACL_SETUSER,
        &ACL_USERS,
        &ACL_WHOAMI,
    ],
    lane: LaneClass::No,
};

/// Redis's reply when ACL SAVE or ACL LOAD has no file to use.
const NO_FILE: &str = "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via \
                       the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration \
                       file set) in order to store users in the Redis configuration.";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The user a session acts as (`None` in the session: the default user).
pub fn session_user(ctx: &Ctx) -> Arc<UserCell> {
    session_cell(ctx).clone()
}

/// The session's user, borrowed (no reference count touched on the dispatch path).
fn session_cell<'a>(ctx: &'a Ctx) -> &'a Arc<UserCell> {
    cell_of(ctx.state, ctx.session)
}

/// [`session_cell`] without a [`Ctx`].
pub(crate) fn cell_of<'a>(state: &'a RouterState, session: &'a crate::session::Session) -> &'a Arc<UserCell> {
    session.user.as_ref().unwrap_or_else(|| state.acl.default_user())
}

/// Whether [`check`] lets anything this session sends through without looking at it: a user
/// not removed who may run every command on every key and channel.
pub(crate) fn lets_all_through(state: &RouterState, session: &crate::session::Session) -> bool {
    let cell = cell_of(state, session);
    !cell.removed() && cell.unrestricted()
}

/// Where a refusal happened, for ACL LOG's `context`.
#[derive(Debug, Clone, Copy)]
pub enum Context {
    Toplevel,
    Multi,
    Lua,
}

/// Checks the session's user may run `spec` with `args` (Redis's `ACLCheckAllPerm`); a refusal
/// is logged in ACL LOG and answered with Redis's NOPERM text.
pub fn check(spec: &CommandSpec, args: &Args, ctx: &Ctx) -> Result<(), Reply> {
    let cell = session_cell(ctx);
    if cell.removed() {
        // Its connections are being closed (ACL DELUSER): nothing more runs for them.
        return Err(Reply::error("NOAUTH Authentication required."));
    }
    if cell.unrestricted() {
        return Ok(());
    }
    let user = cell.get();
    let denied = match spec.decl.id {
        Some(id) => user.check(id, args).err(),
        // A command Redis 7.0 does not have (SHOAL, DELIFEQ): by its categories and key specs.
        None => user.check_extension(spec.decl, args).err(),
    };
    let Some(denied) = denied else { return Ok(()) };
    let context = if ctx.session.multi.is_some() { Context::Multi } else { Context::Toplevel };
    log(ctx, denied, context, spec.name(), args, &cell.name);
    Err(Reply::refusal(
        crate::resp::ErrorKind::NoPerm,
        match denied {
            Denied::Command => {
                format!("NOPERM this user has no permissions to run the '{}' command", spec.name())
            }
            Denied::Key(_) => {
                "NOPERM this user has no permissions to access one of the keys used as arguments".into()
            }
            Denied::Channel(_) => {
                "NOPERM this user has no permissions to access one of the channels used as arguments".into()
            }
        },
    ))
}

/// Adds a refusal to ACL LOG.
pub fn log(ctx: &Ctx, denied: Denied, context: Context, command: &str, args: &Args, user: &str) {
    let (reason, object) = match denied {
        Denied::Command => ("command", command.to_string()),
        Denied::Key(i) => ("key", text(&args[i])),
        Denied::Channel(i) => ("channel", text(&args[i])),
    };
    log_entry(ctx, reason, context, object, user);
}

fn log_entry(ctx: &Ctx, reason: &'static str, context: Context, object: String, user: &str) {
    let context = match context {
        Context::Toplevel => "toplevel",
        Context::Multi => "multi",
        Context::Lua => "lua",
    };
    let client_info = ctx.session.client.info_line(|s| ctx.registry.name_of(s)).trim_end().to_string();
    let entry =
        Entry { count: 1, reason, context, object, username: user.to_string(), at_ms: 0, client_info };
    ctx.state.acl.log.lock().add(entry, ctx.state.clock.now_ms());
}

/// The refusals a script's calls met on a node, for ACL LOG (context `lua`, as Redis logs
/// them), with the client's info as it is when the script's reply arrives.
pub fn log_script_denials(
    state: &RouterState,
    registry: &super::Registry,
    client: &crate::clients::ClientHandle,
    user: &str,
    denials: &[shoal_wire::proto::AclDenial],
) {
    let client_info = client.info_line(|s| registry.name_of(s)).trim_end().to_string();
    let now = state.clock.now_ms();
    let mut log = state.acl.log.lock();
    for d in denials {
        let reason = match d.reason.as_str() {
            "command" => "command",
            "key" => "key",
            "channel" => "channel",
            // A reason this router does not know (a node of another version): not logged.
            _ => continue,
        };
        let entry = Entry {
            count: 1,
            reason,
            context: "lua",
            object: text(&d.object),
            username: user.to_string(),
            at_ms: 0,
            client_info: client_info.clone(),
        };
        log.add_times(entry, d.count, now);
    }
}

/// A failed AUTH or HELLO AUTH, for ACL LOG.
pub fn log_auth_failure(ctx: &Ctx, command: &str, user: &[u8]) {
    let context = if ctx.session.multi.is_some() { Context::Multi } else { Context::Toplevel };
    log_entry(ctx, "auth", context, command.to_string(), &text(user));
}

/// Closes the connections of users that no longer exist (Redis frees their clients).
pub fn disconnect(state: &RouterState, gone: &[Arc<UserCell>]) {
    if gone.is_empty() {
        return;
    }
    for client in state.clients.all() {
        let user = client.names().user;
        if gone.iter().any(|g| user.as_deref() == Some(g.name.as_str())) {
            client.kill();
        }
    }
}

fn strings(args: &[Bytes]) -> Vec<String> {
    args.iter().map(|a| text(a)).collect()
}

pub fn setuser(args: &Args, ctx: &mut Ctx) -> Pending {
    match ctx.state.acl.set_user(&text(&args[2]), &strings(&args[3..])) {
        Ok(()) => Reply::OK.into(),
        Err(e) => Reply::error_fmt(format!("ERR {e}")).into(),
    }
}

pub fn getuser(args: &Args, ctx: &mut Ctx) -> Pending {
    let Some(cell) = ctx.state.acl.user(&args[2]) else { return Reply::Nil.into() };
    let u = cell.get();
    Reply::Map(vec![
        (Reply::bulk("flags"), Reply::Set(u.flags().into_iter().map(Reply::bulk).collect())),
        (
            Reply::bulk("passwords"),
            Reply::Array(u.passwords().iter().map(|p| Reply::bulk(p.clone())).collect()),
        ),
        (Reply::bulk("commands"), Reply::bulk(u.describe_commands())),
        (Reply::bulk("keys"), Reply::bulk(u.describe_keys())),
        (Reply::bulk("channels"), Reply::bulk(u.describe_channels())),
        (Reply::bulk("selectors"), Reply::Array(vec![])),
    ])
    .into()
}

pub fn deluser(args: &Args, ctx: &mut Ctx) -> Pending {
    let names = strings(&args[2..]);
    if names.iter().any(|n| n == "default") {
        return Reply::error("ERR The 'default' user cannot be removed").into();
    }
    let gone = ctx.state.acl.delete(&names);
    disconnect(ctx.state, &gone);
    Reply::Int(gone.len() as i64).into()
}

pub fn list(_args: &Args, ctx: &mut Ctx) -> Pending {
    let users = ctx.state.acl.users();
    Reply::Array(users.iter().map(|u| Reply::bulk(format!("user {} {}", u.name, u.describe()))).collect())
        .into()
}

pub fn users(_args: &Args, ctx: &mut Ctx) -> Pending {
    Reply::Array(ctx.state.acl.users().iter().map(|u| Reply::bulk(u.name.clone())).collect()).into()
}

pub fn whoami(_args: &Args, ctx: &mut Ctx) -> Pending {
    Reply::bulk(session_user(ctx).name.clone()).into()
}

/// ACL CAT: the categories, or every Redis command (and subcommand) in one.
pub fn cat(args: &Args, _ctx: &mut Ctx) -> Pending {
    let Some(name) = args.get(2) else {
        return Reply::Array(CATEGORIES.iter().map(|c| Reply::bulk(*c)).collect()).into();
    };
    let name = text(name);
    let Some(flag) = table::category(&name) else {
        return Reply::error_fmt(format!("ERR Unknown category '{name}'")).into();
    };
    let names = REDIS_COMMANDS.iter().filter(|c| c.categories & flag != 0).map(|c| Reply::bulk(c.name));
    Reply::Array(names.collect()).into()
}

/// ACL DRYRUN user command [args...]: Redis's answers, a bulk text when refused.
pub fn dryrun(args: &Args, ctx: &mut Ctx) -> Pending {
    let Some(cell) = ctx.state.acl.user(&args[2]) else {
        return Reply::error_fmt(format!("ERR User '{}' not found", text(&args[2]))).into();
    };
    let cmd_args = &args[3..];
    let Some(id) = table::resolve(cmd_args) else {
        return Reply::error_fmt(format!("ERR Command '{}' not found", text(&args[3]))).into();
    };
    let cmd = &REDIS_COMMANDS[id];
    let argc = cmd_args.len() as i32;
    if (cmd.arity > 0 && cmd.arity != argc) || argc < -cmd.arity {
        return super::wrong_arity(cmd.name).into();
    }
    match cell.get().check(id, cmd_args) {
        Ok(()) => Reply::OK.into(),
        Err(Denied::Command) => {
            Reply::bulk(format!("This user has no permissions to run the '{}' command", cmd.name)).into()
        }
        Err(Denied::Key(i)) => {
            Reply::bulk(format!("This user has no permissions to access the '{}' key", text(&cmd_args[i])))
                .into()
        }
        Err(Denied::Channel(i)) => Reply::bulk(format!(
            "This user has no permissions to access the '{}' channel",
            text(&cmd_args[i])
        ))
        .into(),
    }
}

/// ACL LOG [count | RESET].
pub fn log_cmd(args: &Args, ctx: &mut Ctx) -> Pending {
    let n = match args.get(2) {
        None => 10,
        Some(a) if args.len() == 3 && a.eq_ignore_ascii_case(b"reset") => {
            ctx.state.acl.log.lock().reset();
            return Reply::OK.into();
        }
        Some(a) if args.len() == 3 => match shoal_wire::num::parse_i64(a) {
            Some(n) if n >= 0 => n as usize,
            _ => return Reply::error("ERR value is not an integer or out of range").into(),
        },
        Some(_) => {
            // Redis names the subcommand as the client wrote it.
            return Reply::error_fmt(format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try ACL HELP.",
                text(&args[1])
            ))
            .into();
        }
    };
    let now = ctx.state.clock.now_ms();
    let entries = ctx.state.acl.log.lock().latest(n);
    Reply::Array(
        entries
            .into_iter()
            .map(|e| {
                let age = now.saturating_sub(e.at_ms) as f64 / 1000.0;
                Reply::Map(vec![
                    (Reply::bulk("count"), Reply::Int(e.count as i64)),
                    (Reply::bulk("reason"), Reply::bulk(e.reason)),
                    (Reply::bulk("context"), Reply::bulk(e.context)),
                    (Reply::bulk("object"), Reply::bulk(e.object)),
                    (Reply::bulk("username"), Reply::bulk(e.username)),
                    (Reply::bulk("age-seconds"), Reply::Double(Bytes::from(format_double(age)))),
                    (Reply::bulk("client-info"), Reply::bulk(e.client_info)),
                ])
            })
            .collect(),
    )
    .into()
}

/// A double as Redis's `%.17g` prints it (shortest form that reads back the same).
fn format_double(d: f64) -> String {
    // Rust's shortest round-trip form agrees with %.17g for the millisecond ages printed here.
    format!("{d}")
}

pub fn save(_args: &Args, ctx: &mut Ctx) -> Pending {
    let Some(path) = &ctx.state.acl.file else { return Reply::error(NO_FILE).into() };
    match file::write(path, &ctx.state.acl.save_text()) {
        Ok(()) => Reply::OK.into(),
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "ACL SAVE failed");
            Reply::error(
                "ERR There was an error trying to save the ACLs. Please check the server logs for more information",
            )
            .into()
        }
    }
}

pub fn load(_args: &Args, ctx: &mut Ctx) -> Pending {
    let Some(path) = &ctx.state.acl.file else { return Reply::error(NO_FILE).into() };
    match file::read(path) {
        Ok(users) => {
            let gone = ctx.state.acl.replace(users, false);
            disconnect(ctx.state, &gone);
            Reply::OK.into()
        }
        Err(e) => Reply::error_fmt(format!("ERR {e}")).into(),
    }
}

/// ACL GENPASS [bits]: random hex from the system's CSPRNG, 256 bits unless told.
pub fn genpass(args: &Args, _ctx: &mut Ctx) -> Pending {
    let bits = match args.get(2) {
        None => 256,
        Some(a) => match shoal_wire::num::parse_i64(a) {
            Some(n) if (1..=4096).contains(&n) => n as usize,
            _ => {
                return Reply::error(
                    "ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096",
                )
                .into();
            }
        },
    };
    let chars = bits.div_ceil(4);
    let mut bytes = vec![0u8; chars.div_ceil(2)];
    if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).is_err() {
        return Reply::error("ERR cannot read random bytes").into();
    }
    let mut hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    hex.truncate(chars);
    Reply::bulk(hex).into()
}

pub fn help(_args: &Args, _ctx: &mut Ctx) -> Pending {
    super::help_reply(&[
        "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CAT [<category>]",
        "    List all commands that belong to <category>, or all command categories",
        "    when no category is specified.",
        "DELUSER <username> [<username> ...]",
        "    Delete a list of users.",
        "DRYRUN <username> <command> [<arg> ...]",
        "    Returns whether the user can execute the given command without executing the command.",
        "GETUSER <username>",
        "    Get the user's details.",
        "GENPASS [<bits>]",
        "    Generate a secure 256-bit user password. The optional `bits` argument can",
        "    be used to specify a different size.",
        "LIST",
        "    Show users details in config file format.",
        "LOAD",
        "    Reload users from the ACL file.",
        "LOG [<count> | RESET]",
        "    Show the ACL log entries.",
        "SAVE",
        "    Save the current config to the ACL file.",
        "SETUSER <username> <attribute> [<attribute> ...]",
        "    Create or modify a user with the specified attributes.",
        "USERS",
        "    List all the registered usernames.",
        "WHOAMI",
        "    Return the current connection username.",
        "HELP",
        "    Prints this help.",
    ])
}

/// `--aclfile`: loads the users at start (an unreadable or bad file stops the router, as it
/// stops Redis), then re-reads the file every second and adopts it when its contents change,
/// so that every router sharing the file (a Kubernetes Secret) agrees. A bad file is logged and
/// the users in force kept. Users still defined keep their connections; the connections of
/// users no longer defined are closed.
pub fn follow_file(
    state: &Arc<RouterState>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Option<tokio::task::JoinHandle<()>>, file::FileError> {
    let Some(path) = state.acl.file.clone() else { return Ok(None) };
    let users = file::read(&path)?;
    if state.settings.requirepass.is_some() && users.iter().any(|u| u.name == "default") {
        tracing::warn!(
            "--requirepass is ignored: the ACL file defines the default user (as in Redis, where the ACL file \
             replaces the default user that requirepass set)"
        );
    }
    state.acl.replace(users, true);
    let mut seen = std::fs::read(&path).ok();
    let state = state.clone();
    Ok(Some(tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            let now = std::fs::read(&path).ok();
            if now.is_none() || now == seen {
                continue;
            }
            seen = now;
            match file::read(&path) {
                Ok(users) => {
                    let gone = state.acl.replace(users, true);
                    disconnect(&state, &gone);
                    tracing::info!(file = %path.display(), "ACL file changed: users reloaded");
                }
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "ACL file changed but is invalid; keeping the users in force")
                }
            }
        }
    })))
}
