//! FCALL, FCALL_RO and FUNCTION LOAD/DELETE/FLUSH/LIST/DUMP/RESTORE/STATS/KILL/HELP.
//!
//! Libraries live on the nodes (`node/src/script/functions.rs`), every node holding all of them,
//! as Redis Cluster asks of its masters: FUNCTION LOAD, DELETE, FLUSH and RESTORE reach every
//! node (the first error any node answers is the reply); LIST and DUMP read the first node;
//! STATS asks them all and shows the one running a function, if any. FCALL goes where EVAL
//! goes (`super::scripting::send`): to the node of its keys, which must share one node
//! (`CROSSSLOT` otherwise), any node without keys.

use bytes::Bytes;
use shoal_wire::proto::{self, op::Kind, script_admin::Action};

use super::spec::*;
use super::typed::from_node;
use super::{Args, Ctx, Pending, int_arg, op, scripting};
use crate::resp::Reply;

pub const FCALL: CommandSpec =
    CommandSpec { decl: &redis::FCALL, run: |args, ctx| fcall(args, ctx, false), ..CommandSpec::DEFAULT };

pub const FCALL_RO: CommandSpec =
    CommandSpec { decl: &redis::FCALL_RO, run: |args, ctx| fcall(args, ctx, true), ..CommandSpec::DEFAULT };

pub const FUNCTION_LOAD: CommandSpec =
    CommandSpec { decl: &redis::FUNCTION_LOAD, run: everywhere, ..CommandSpec::DEFAULT };

pub const FUNCTION_DELETE: CommandSpec =
    CommandSpec { decl: &redis::FUNCTION_DELETE, run: everywhere, ..CommandSpec::DEFAULT };

pub const FUNCTION_FLUSH: CommandSpec =
    CommandSpec { decl: &redis::FUNCTION_FLUSH, run: everywhere, ..CommandSpec::DEFAULT };

pub const FUNCTION_RESTORE: CommandSpec =
    CommandSpec { decl: &redis::FUNCTION_RESTORE, run: everywhere, ..CommandSpec::DEFAULT };

pub const FUNCTION_LIST: CommandSpec =
    CommandSpec { decl: &redis::FUNCTION_LIST, run: first, ..CommandSpec::DEFAULT };

pub const FUNCTION_DUMP: CommandSpec =
    CommandSpec { decl: &redis::FUNCTION_DUMP, run: first, ..CommandSpec::DEFAULT };

pub const FUNCTION_STATS: CommandSpec =
    CommandSpec { decl: &redis::FUNCTION_STATS, run: stats, ..CommandSpec::DEFAULT };

pub const FUNCTION_KILL: CommandSpec = CommandSpec {
    decl: &redis::FUNCTION_KILL,
    run: |_, ctx| scripting::kill_running(ctx, true),
    ..CommandSpec::DEFAULT
};

pub const FUNCTION_HELP: CommandSpec =
    CommandSpec { decl: &redis::FUNCTION_HELP, run: help, ..CommandSpec::DEFAULT };

pub const FUNCTION: CommandSpec = CommandSpec {
    decl: &redis::FUNCTION,
    run: help,
    subcommands: &[
        &FUNCTION_LOAD,
        &FUNCTION_DELETE,
        &FUNCTION_FLUSH,
        &FUNCTION_RESTORE,
        &FUNCTION_LIST,
        &FUNCTION_DUMP,
        &FUNCTION_STATS,
        &FUNCTION_KILL,
        &FUNCTION_HELP,
    ],
    ..CommandSpec::DEFAULT
};

fn fcall(args: &Args, ctx: &mut Ctx, readonly: bool) -> Pending {
    let function = String::from_utf8_lossy(&args[1]).into_owned();
    let numkeys_error = match int_arg(&args[2]) {
        Err(_) => "ERR Bad number of keys provided",
        Ok(n) if n > (args.len() - 3) as i64 => "ERR Number of keys can't be greater than number of args",
        Ok(n) if n < 0 => "ERR Number of keys can't be negative",
        Ok(n) => {
            let split = 3 + n as usize;
            let script = proto::Script {
                function,
                args: args[split..].to_vec(),
                readonly,
                argv_head: vec![args[0].clone(), args[2].clone()],
                ..Default::default()
            };
            return scripting::send(script, args[3..split].to_vec(), ctx);
        }
    };
    // Any node says whether the function exists, which decides the error.
    let script = proto::Script { function, numkeys_error: numkeys_error.into(), ..Default::default() };
    scripting::send(script, Vec::new(), ctx)
}

/// The FUNCTION subcommand as the nodes take it (its arguments after FUNCTION).
fn admin(args: &Args) -> impl Fn() -> proto::Op + Send + Sync + 'static {
    let rest: Vec<Bytes> = args[1..].to_vec();
    move || {
        op(Kind::ScriptAdmin(Box::new(proto::ScriptAdmin {
            action: Action::Function as i32,
            args: rest.clone(),
            ..Default::default()
        })))
    }
}

/// Every node's replies, as client replies.
async fn replies(all: crate::backend::AllCall) -> Result<Vec<Reply>, Reply> {
    let replies = scripting::gather_all(all).await?;
    Ok(replies.into_iter().map(from_node).collect())
}

/// LOAD, DELETE, FLUSH, RESTORE: on every node; the first error, else the first reply.
fn everywhere(args: &Args, ctx: &mut Ctx) -> Pending {
    let all = ctx.call_all(admin(args));
    Pending::later(async move {
        match replies(all).await {
            Ok(rs) => {
                let error = rs.iter().position(Reply::is_error);
                rs.into_iter().nth(error.unwrap_or(0)).unwrap_or_else(|| Reply::error("ERR no node answered"))
            }
            Err(e) => e,
        }
    })
}

/// LIST and DUMP: the first node's libraries (every node holds the same).
fn first(args: &Args, ctx: &mut Ctx) -> Pending {
    let call = ctx.call_at(0, admin(args)());
    Pending::later(async move {
        match call.wait().await {
            Ok(r) => from_node(r),
            Err(e) => e.into(),
        }
    })
}

/// STATS: the node running a function if one is, else the first.
fn stats(args: &Args, ctx: &mut Ctx) -> Pending {
    let all = ctx.call_all(admin(args));
    Pending::later(async move {
        match replies(all).await {
            Ok(rs) => {
                let running = |r: &Reply| match r {
                    Reply::Map(pairs) => {
                        pairs.first().is_some_and(|(_, v)| !matches!(v, Reply::Nil | Reply::NilArray))
                    }
                    _ => false,
                };
                let pick = rs.iter().position(Reply::is_error).or_else(|| rs.iter().position(running));
                rs.into_iter().nth(pick.unwrap_or(0)).unwrap_or_else(|| Reply::error("ERR no node answered"))
            }
            Err(e) => e,
        }
    })
}

fn help(_args: &Args, _ctx: &mut Ctx) -> Pending {
    super::help_reply(&[
        "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "LOAD [REPLACE] <FUNCTION CODE>",
        "    Create a new library with the given library name and code.",
        "DELETE <LIBRARY NAME>",
        "    Delete the given library.",
        "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
        "    Return general information on all the libraries:",
        "    * Library name",
        "    * The engine used to run the Library",
        "    * Library description",
        "    * Functions list",
        "    * Library code (if WITHCODE is given)",
        "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
        "STATS",
        "    Return information about the current function running:",
        "    * Function name",
        "    * Command used to run the function",
        "    * Duration in MS that the function is running",
        "    If no function is running, return nil",
        "    In addition, returns a list of available engines.",
        "KILL",
        "    Kill the current running function.",
        "FLUSH [ASYNC|SYNC]",
        "    Delete all the libraries.",
        "    When called without the optional mode argument, the behavior is determined by the",
        "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
        "    * ASYNC: Asynchronously flush the libraries.",
        "    * SYNC: Synchronously flush the libraries.",
        "DUMP",
        "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
        "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
        "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
        "    control how to handle existing libraries (default APPEND):",
        "    * FLUSH: delete all existing libraries.",
        "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
        "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
        "      libraries with the new libraries (notice that even on this option there is a chance of failure",
        "      in case of functions name collision with another library).",
        "HELP",
        "    Prints this help.",
    ])
}
