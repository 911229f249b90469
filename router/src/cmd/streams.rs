//! Stream commands. The node runs them (`node/src/commands/stream.rs`); these are their specs,
//! as redis-server 7.0 declares them, and the routing of XREAD/XREADGROUP: their keys follow
//! `STREAMS`; with `BLOCK` (outside MULTI) they wait as BLPOP does (`super::blocking`: every key
//! on one node, woken in arrival order by the write that makes a key ready), without it they run
//! once, on the node holding every key (XREAD over keys of several nodes reads copies of them,
//! as SINTER does; XREADGROUP, which changes its groups, answers CROSSSLOT there).

use bytes::Bytes;

use super::spec::*;
use shoal_wire::proto::{self, op::Kind};

use super::typed::{from_node, read_key, read_second, write_key, write_second};
use super::{Args, Ctx, Pending, op};

/// Where XREAD/XREADGROUP's `BLOCK` value is (if given) and its keys, when its options read
/// as such (else the node answers the error).
fn read_layout(args: &[Bytes]) -> Option<(Option<usize>, Vec<Bytes>)> {
    shoal_wire::acl::commands::xread_layout(args).map(|(block, keys)| (block, args[keys].to_vec()))
}

fn read(args: &Args, ctx: &mut Ctx) -> Pending {
    match read_layout(args) {
        Some((Some(_), _)) if !ctx.routing.capturing => super::blocking::block(args, ctx),
        // One stream (the usual case): a plain call to its node, which encodes the reply for
        // this connection; it pipelines like any one-key command.
        Some((_, keys)) if keys.len() == 1 => {
            let key = keys[0].clone();
            let key_index = (args.len() - 2) as u32;
            let readonly = args[0].eq_ignore_ascii_case(b"xread");
            let resp = ctx.session.protocol().version() as u32;
            let command =
                proto::Command { args: args.to_vec(), readonly, key_index, resp, ..Default::default() };
            Pending::Call(ctx.call(&key, op(Kind::Command(Box::new(command)))), from_node)
        }
        _ => super::multi::run(args, ctx),
    }
}

pub const XADD: CommandSpec = CommandSpec { decl: &redis::XADD, run: write_key, ..CommandSpec::DEFAULT };

pub const XRANGE: CommandSpec = CommandSpec { decl: &redis::XRANGE, run: read_key, ..CommandSpec::DEFAULT };

pub const XREVRANGE: CommandSpec =
    CommandSpec { decl: &redis::XREVRANGE, run: read_key, ..CommandSpec::DEFAULT };

pub const XLEN: CommandSpec = CommandSpec { decl: &redis::XLEN, run: read_key, ..CommandSpec::DEFAULT };

pub const XDEL: CommandSpec = CommandSpec { decl: &redis::XDEL, run: write_key, ..CommandSpec::DEFAULT };

pub const XTRIM: CommandSpec = CommandSpec { decl: &redis::XTRIM, run: write_key, ..CommandSpec::DEFAULT };

pub const XSETID: CommandSpec = CommandSpec { decl: &redis::XSETID, run: write_key, ..CommandSpec::DEFAULT };

pub const XACK: CommandSpec = CommandSpec { decl: &redis::XACK, run: write_key, ..CommandSpec::DEFAULT };

pub const XPENDING: CommandSpec =
    CommandSpec { decl: &redis::XPENDING, run: read_key, ..CommandSpec::DEFAULT };

pub const XCLAIM: CommandSpec = CommandSpec { decl: &redis::XCLAIM, run: write_key, ..CommandSpec::DEFAULT };

pub const XAUTOCLAIM: CommandSpec =
    CommandSpec { decl: &redis::XAUTOCLAIM, run: write_key, ..CommandSpec::DEFAULT };

pub const XREAD: CommandSpec = CommandSpec { decl: &redis::XREAD, run: read, ..CommandSpec::DEFAULT };

pub const XREADGROUP: CommandSpec =
    CommandSpec { decl: &redis::XREADGROUP, run: read, ..CommandSpec::DEFAULT };

pub const XGROUP_CREATE: CommandSpec =
    CommandSpec { decl: &redis::XGROUP_CREATE, run: write_second, ..CommandSpec::DEFAULT };

pub const XGROUP_CREATECONSUMER: CommandSpec =
    CommandSpec { decl: &redis::XGROUP_CREATECONSUMER, run: write_second, ..CommandSpec::DEFAULT };

pub const XGROUP_DELCONSUMER: CommandSpec =
    CommandSpec { decl: &redis::XGROUP_DELCONSUMER, run: write_second, ..CommandSpec::DEFAULT };

pub const XGROUP_DESTROY: CommandSpec =
    CommandSpec { decl: &redis::XGROUP_DESTROY, run: write_second, ..CommandSpec::DEFAULT };

pub const XGROUP_SETID: CommandSpec =
    CommandSpec { decl: &redis::XGROUP_SETID, run: write_second, ..CommandSpec::DEFAULT };

pub const XGROUP_HELP: CommandSpec =
    CommandSpec { decl: &redis::XGROUP_HELP, run: xgroup_help, ..CommandSpec::DEFAULT };

pub const XGROUP: CommandSpec = CommandSpec {
    decl: &redis::XGROUP,
    run: xgroup_help,
    subcommands: &[
        &XGROUP_CREATE,
        &XGROUP_CREATECONSUMER,
        &XGROUP_DELCONSUMER,
        &XGROUP_DESTROY,
        &XGROUP_SETID,
        &XGROUP_HELP,
    ],
    lane: LaneClass::No,
};

pub const XINFO_CONSUMERS: CommandSpec =
    CommandSpec { decl: &redis::XINFO_CONSUMERS, run: read_second, ..CommandSpec::DEFAULT };

pub const XINFO_GROUPS: CommandSpec =
    CommandSpec { decl: &redis::XINFO_GROUPS, run: read_second, ..CommandSpec::DEFAULT };

pub const XINFO_STREAM: CommandSpec =
    CommandSpec { decl: &redis::XINFO_STREAM, run: read_second, ..CommandSpec::DEFAULT };

pub const XINFO_HELP: CommandSpec =
    CommandSpec { decl: &redis::XINFO_HELP, run: xinfo_help, ..CommandSpec::DEFAULT };

pub const XINFO: CommandSpec = CommandSpec {
    decl: &redis::XINFO,
    run: xinfo_help,
    subcommands: &[&XINFO_CONSUMERS, &XINFO_GROUPS, &XINFO_STREAM, &XINFO_HELP],
    lane: LaneClass::No,
};

fn xgroup_help(_args: &Args, _ctx: &mut Ctx) -> Pending {
    super::help_reply(&[
        "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CREATE <key> <groupname> <id|$> [option]",
        "    Create a new consumer group. Options are:",
        "    * MKSTREAM",
        "      Create the empty stream if it does not exist.",
        "    * ENTRIESREAD entries_read",
        "      Set the group's entries_read counter (internal use).",
        "CREATECONSUMER <key> <groupname> <consumer>",
        "    Create a new consumer in the specified group.",
        "DELCONSUMER <key> <groupname> <consumer>",
        "    Remove the specified consumer.",
        "DESTROY <key> <groupname>",
        "    Remove the specified group.",
        "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
        "    Set the current group ID and entries_read counter.",
        "HELP",
        "    Prints this help.",
    ])
}

fn xinfo_help(_args: &Args, _ctx: &mut Ctx) -> Pending {
    super::help_reply(&[
        "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CONSUMERS <key> <groupname>",
        "    Show consumers of <groupname>.",
        "GROUPS <key>",
        "    Show the stream consumer groups.",
        "STREAM <key> [FULL [COUNT <count>]",
        "    Show information about the stream.",
        "HELP",
        "    Prints this help.",
    ])
}
