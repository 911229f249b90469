//! DEBUG: the subcommands test suites use that are safe on a shared cluster, behind
//! `--enable-debug-command` (off by default, as Redis's `enable-debug-command`). OBJECT is answered
//! by the key's node (`node/src/commands/object.rs`), SET-ACTIVE-EXPIRE is set on every node,
//! ERROR, LOG and HELP here. The rest (SLEEP, RELOAD, JMAP, SEGFAULT, POPULATE, ...) stop, crash
//! or bypass a whole server that other clients share, and are not offered.

use std::sync::Arc;

use shoal_wire::proto::NodeSettings;

use super::spec::*;
use super::typed::read_second;
use super::{Args, Ctx, Pending};
use crate::backend::futures_join;
use crate::resp::Reply;
use crate::state::DebugCommand;

pub const DEBUG: CommandSpec = CommandSpec { decl: &redis::DEBUG, run: debug, ..CommandSpec::DEFAULT };

/// Redis's refusal while `enable-debug-command` does not allow this client.
const NOT_ALLOWED: &str = "ERR DEBUG command not allowed. If the enable-debug-command option is set to \"local\", \
    you can run it from a local connection, otherwise you need to set this option in the configuration file, \
    and then restart the server.";

pub fn debug(args: &Args, ctx: &mut Ctx) -> Pending {
    if !allowed(ctx) {
        return Reply::error(NOT_ALLOWED).into();
    }
    let sub = args[1].to_ascii_lowercase();
    match (&sub[..], args.len()) {
        (b"help", 2) => help(),
        (b"object", 3) => read_second(args, ctx),
        (b"set-active-expire", 3) => set_active_expire(atoi(&args[2]) != 0, ctx),
        // Redis sends the text as the error line, its own code included (CR/LF become spaces).
        (b"error", 3) => Reply::error_fmt(String::from_utf8_lossy(&args[2]).into_owned()).into(),
        (b"log", 3) => {
            tracing::warn!(target: "shoal::debug", client = ctx.session.id, "DEBUG LOG: {}", String::from_utf8_lossy(&args[2]));
            Reply::OK.into()
        }
        (b"sleep", _) => Reply::error(
            "ERR DEBUG SLEEP is not offered: it would stop a router every other client shares (use CLIENT PAUSE to hold clients)",
        )
        .into(),
        _ => Reply::error_fmt(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try DEBUG HELP.",
            String::from_utf8_lossy(&args[1])
        ))
        .into(),
    }
}

/// Whether `--enable-debug-command` lets this client run DEBUG (`local`: loopback or the Unix
/// socket, as Redis's `islocalClient`).
fn allowed(ctx: &Ctx) -> bool {
    match ctx.state.settings.enable_debug_command {
        DebugCommand::No => false,
        DebugCommand::Yes => true,
        DebugCommand::Local => {
            let peer = &ctx.session.peer;
            let ip = peer.rsplit_once(':').map_or("", |(ip, _)| ip).trim_matches(['[', ']']);
            match ip.parse::<std::net::IpAddr>() {
                Ok(ip) => ip.is_loopback(),
                // A Unix-socket client (`path:0`); an HTTP session has an address.
                Err(_) => !ctx.session.http,
            }
        }
    }
}

/// C's `atoi`, as Redis reads SET-ACTIVE-EXPIRE's argument: leading digits, else 0.
fn atoi(arg: &[u8]) -> i64 {
    let s = String::from_utf8_lossy(arg);
    let t = s.trim_start();
    let (sign, digits) = match t.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, t.strip_prefix('+').unwrap_or(t)),
    };
    let end = digits.find(|c: char| !c.is_ascii_digit()).unwrap_or(digits.len());
    digits[..end].parse::<i64>().map_or(0, |n| sign * n)
}

/// `DEBUG SET-ACTIVE-EXPIRE 0|1` on every node and replica (keys read still expire lazily).
fn set_active_expire(on: bool, ctx: &mut Ctx) -> Pending {
    let routing = Arc::clone(ctx.routing);
    Pending::later(async move {
        let change = NodeSettings { active_expire: Some(on), ..Default::default() };
        let members = routing.nodes.iter().chain(routing.replicas.iter().flatten());
        let answers = futures_join(members.map(|n| n.configure(change.clone())).collect()).await;
        match answers.into_iter().find_map(Result::err) {
            Some(e) => Reply::error_fmt(format!("ERR DEBUG SET-ACTIVE-EXPIRE failed on a node: {e}")),
            None => Reply::OK,
        }
    })
}

/// Redis 7.0's DEBUG HELP lines for the subcommands Shoal serves, in Redis's words and order.
fn help() -> Pending {
    let lines = [
        "DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "ERROR <string>",
        "    Return a Redis protocol error with <string> as message. Useful for clients",
        "    unit tests to simulate Redis errors.",
        "LOG <message>",
        "    Write <message> to the server log.",
        "OBJECT <key>",
        "    Show low level info about `key` and associated value.",
        "SET-ACTIVE-EXPIRE <0|1>",
        "    Setting it to 0 disables expiring keys in background when they are not",
        "    accessed (otherwise the Redis behavior). Setting it to 1 reenables back the",
        "    default.",
        "HELP",
        "    Prints this help.",
    ];
    super::help_reply(&lines)
}

#[cfg(test)]
mod tests {
    use super::atoi;

    #[test]
    fn atoi_reads_like_c() {
        assert_eq!(atoi(b"1"), 1);
        assert_eq!(atoi(b"0"), 0);
        assert_eq!(atoi(b"x"), 0);
        assert_eq!(atoi(b" 12abc"), 12);
        assert_eq!(atoi(b"-3"), -3);
        assert_eq!(atoi(b""), 0);
    }
}
