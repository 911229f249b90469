//! OBJECT ENCODING/FREQ/IDLETIME/REFCOUNT/HELP: the node answers about the key
//! (`node/src/commands/object.rs`); HELP is answered here.

use super::spec::*;
use super::typed::read_second;
use super::{Args, Ctx, Pending};

pub const OBJECT_ENCODING: CommandSpec = CommandSpec {
    name: "object|encoding",
    arity: 3,
    flags: &["readonly"],
    keys: KeySpec { first: 2, last: 2, step: 1 },
    acl: &["@keyspace", "@read", "@slow"],
    group: "generic",
    since: "2.2.3",
    summary: "Inspect the internal encoding of a Redis object",
    complexity: "O(1)",
    run: read_second,
    ..CommandSpec::DEFAULT
};

pub const OBJECT_FREQ: CommandSpec = CommandSpec {
    name: "object|freq",
    arity: 3,
    flags: &["readonly"],
    keys: KeySpec { first: 2, last: 2, step: 1 },
    acl: &["@keyspace", "@read", "@slow"],
    group: "generic",
    since: "4.0.0",
    summary: "Get the logarithmic access frequency counter of a Redis object",
    complexity: "O(1)",
    run: read_second,
    ..CommandSpec::DEFAULT
};

pub const OBJECT_IDLETIME: CommandSpec = CommandSpec {
    name: "object|idletime",
    arity: 3,
    flags: &["readonly"],
    keys: KeySpec { first: 2, last: 2, step: 1 },
    acl: &["@keyspace", "@read", "@slow"],
    group: "generic",
    since: "2.2.3",
    summary: "Get the time since a Redis object was last accessed",
    complexity: "O(1)",
    run: read_second,
    ..CommandSpec::DEFAULT
};

pub const OBJECT_REFCOUNT: CommandSpec = CommandSpec {
    name: "object|refcount",
    arity: 3,
    flags: &["readonly"],
    keys: KeySpec { first: 2, last: 2, step: 1 },
    acl: &["@keyspace", "@read", "@slow"],
    group: "generic",
    since: "2.2.3",
    summary: "Get the number of references to the value of the key",
    complexity: "O(1)",
    run: read_second,
    ..CommandSpec::DEFAULT
};

pub const OBJECT_HELP: CommandSpec = CommandSpec {
    name: "object|help",
    arity: 2,
    flags: &["loading", "stale"],
    keys: KeySpec::NONE,
    acl: &["@keyspace", "@slow"],
    group: "generic",
    since: "6.2.0",
    summary: "Show helpful text about the different subcommands",
    complexity: "O(1)",
    run: help,
    ..CommandSpec::DEFAULT
};

pub const OBJECT: CommandSpec = CommandSpec {
    name: "object",
    arity: -2,
    flags: &[],
    keys: KeySpec::NONE,
    acl: &["@slow"],
    group: "generic",
    since: "2.2.3",
    summary: "A container for object introspection commands",
    complexity: "Depends on subcommand.",
    run: container,
    subcommands: &[&OBJECT_ENCODING, &OBJECT_FREQ, &OBJECT_IDLETIME, &OBJECT_REFCOUNT, &OBJECT_HELP],
    lane: LaneClass::No,
};

/// `OBJECT` with a known subcommand always dispatches to it; anything else is the help.
pub fn container(args: &Args, ctx: &mut Ctx) -> Pending {
    help(args, ctx)
}

pub fn help(_args: &Args, _ctx: &mut Ctx) -> Pending {
    let lines = [
        "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "ENCODING <key>",
        "    Return the kind of internal representation used in order to store the value",
        "    associated with a <key>.",
        "FREQ <key>",
        "    Return the access frequency index of the <key>. The returned integer is",
        "    proportional to the logarithm of the recent access frequency of the key.",
        "IDLETIME <key>",
        "    Return the idle time of the <key>, that is the approximated number of",
        "    seconds elapsed since the last access to the key.",
        "REFCOUNT <key>",
        "    Return the number of references of the value associated with the specified",
        "    <key>.",
        "HELP",
        "    Prints this help.",
    ];
    super::help_reply(&lines)
}
