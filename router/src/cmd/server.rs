//! MODULE, ROLE, REPLICAOF and SHUTDOWN: what clients and test harnesses ask a server about
//! itself and its role. Shoal loads no modules (MODULE LIST is empty; LOAD, LOADEX and UNLOAD answer what Redis
//! 7.0 answers with its default `enable-module-command no`, which Shoal cannot turn on), and to
//! clients the router is one master whose replicas are every shard's (as INFO's `# Replication`
//! says): REPLICAOF NO ONE leaves it so, and it cannot be made anyone's replica (a shard's
//! replicas are its topology's).

use std::sync::Arc;

use shoal_wire::proto::NodeStats;

use super::spec::*;
use super::{Args, Ctx, Pending};
use crate::resp::Reply;

const NOT_ALLOWED: &str = "ERR MODULE command not allowed. If the enable-module-command option is set to \"local\", \
you can run it from a local connection, otherwise you need to set this option in the configuration file, and then \
restart the server.";

pub const MODULE_LIST: CommandSpec = CommandSpec {
    decl: &redis::MODULE_LIST,
    run: |_, _| Reply::Array(Vec::new()).into(),
    ..CommandSpec::DEFAULT
};

pub const MODULE_LOAD: CommandSpec =
    CommandSpec { decl: &redis::MODULE_LOAD, run: not_allowed, ..CommandSpec::DEFAULT };

pub const MODULE_LOADEX: CommandSpec =
    CommandSpec { decl: &redis::MODULE_LOADEX, run: not_allowed, ..CommandSpec::DEFAULT };

pub const MODULE_UNLOAD: CommandSpec =
    CommandSpec { decl: &redis::MODULE_UNLOAD, run: not_allowed, ..CommandSpec::DEFAULT };

pub const MODULE_HELP: CommandSpec =
    CommandSpec { decl: &redis::MODULE_HELP, run: help, ..CommandSpec::DEFAULT };

pub const MODULE: CommandSpec = CommandSpec {
    decl: &redis::MODULE,
    run: help,
    subcommands: &[&MODULE_LIST, &MODULE_LOAD, &MODULE_LOADEX, &MODULE_UNLOAD, &MODULE_HELP],
    lane: LaneClass::No,
};

pub const ROLE: CommandSpec = CommandSpec { decl: &redis::ROLE, run: role, ..CommandSpec::DEFAULT };

pub const REPLICAOF: CommandSpec =
    CommandSpec { decl: &redis::REPLICAOF, run: replicaof, ..CommandSpec::DEFAULT };

pub const SLAVEOF: CommandSpec =
    CommandSpec { decl: &redis::SLAVEOF, run: replicaof, ..CommandSpec::DEFAULT };

/// MIGRATE is declared as Redis declares it (clients' key parsers look it up in COMMAND, and
/// COMMAND GETKEYS answers its keys) and refused: keys move between nodes by resharding.
pub const MIGRATE: CommandSpec = CommandSpec {
    decl: &redis::MIGRATE,
    run: |_, _| {
        Reply::error("ERR MIGRATE is not offered by Shoal: keys move between nodes by resharding (SHOAL SCALE, the operator), and DUMP/RESTORE move a key to another server")
            .into()
    },
    ..CommandSpec::DEFAULT
};

/// SHUTDOWN is declared as Redis declares it (so that inside MULTI it is refused as Redis refuses
/// it: not allowed in a transaction) and refused: a client does not stop a cluster's processes;
/// SIGTERM does (each router and node shuts down gracefully on it).
pub const SHUTDOWN: CommandSpec = CommandSpec {
    decl: &redis::SHUTDOWN,
    run: |_, _| {
        Reply::error("ERR SHUTDOWN is not offered by Shoal: stop its processes with SIGTERM (Kubernetes: scale or delete the pods)")
            .into()
    },
    ..CommandSpec::DEFAULT
};

/// `REPLICAOF host port` / `REPLICAOF NO ONE`, with Redis's checks and texts: NO ONE answers OK
/// (the router is a master already); a master to follow is refused with the reason.
fn replicaof(args: &Args, _ctx: &mut Ctx) -> Pending {
    if args[1].eq_ignore_ascii_case(b"no") && args[2].eq_ignore_ascii_case(b"one") {
        return Reply::OK.into();
    }
    match shoal_wire::num::parse_i64(&args[2]) {
        Some(port) if (0..=65535).contains(&port) => Reply::error(
            "ERR REPLICAOF is not allowed: Shoal's replicas are set per shard by its topology \
(the CacheCluster's replicas), not by clients",
        )
        .into(),
        _ => Reply::error("ERR Invalid master port").into(),
    }
}

fn not_allowed(_args: &Args, _ctx: &mut Ctx) -> Pending {
    Reply::error(NOT_ALLOWED).into()
}

fn help(_args: &Args, _ctx: &mut Ctx) -> Pending {
    super::help_reply(&[
        "MODULE <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "LIST",
        "    Return a list of loaded modules.",
        "LOAD <path> [<arg> ...]",
        "    Load a module library from <path>, passing to it any optional arguments.",
        "LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
        "    Load a module library from <path>, while passing it module configurations and optional arguments.",
        "UNLOAD <name>",
        "    Unload a module.",
        "HELP",
        "    Prints this help.",
    ])
}

/// `ROLE`: `master`, the replication offset INFO reports (the shards' summed), and every shard's
/// replicas as `[ip, port, acked offset]`, as Redis's master answers.
fn role(_args: &Args, ctx: &mut Ctx) -> Pending {
    let routing = Arc::clone(ctx.routing);
    Pending::later(async move {
        let nodes: Vec<NodeStats> = routing.stats_all().await.into_iter().flatten().collect();
        let offset: u64 = nodes.iter().map(|n| n.repl_offset).sum();
        let replicas = nodes
            .iter()
            .flat_map(|n| n.replicas.iter())
            .map(|r| {
                let (ip, port) = r.addr.rsplit_once(':').unwrap_or((r.addr.as_str(), "0"));
                Reply::Array(vec![
                    Reply::bulk(ip.to_string()),
                    Reply::bulk(port.to_string()),
                    Reply::bulk(r.acked_offset.to_string()),
                ])
            })
            .collect::<Vec<_>>();
        Reply::Array(vec![
            Reply::bulk("master"),
            Reply::Int(offset.min(i64::MAX as u64) as i64),
            Reply::Array(replicas),
        ])
    })
}
