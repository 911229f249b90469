//! OBJECT ENCODING/FREQ/IDLETIME/REFCOUNT/HELP: the node answers about the key
//! (`node/src/commands/object.rs`); HELP is answered here. DUMP and RESTORE: the key's value as
//! Redis's serialized payload and back, run by the key's node (`node/src/commands/dump.rs`).

use super::spec::*;
use super::typed::{read_key, read_second, write_key};
use super::{Args, Ctx, Pending};

pub const OBJECT_ENCODING: CommandSpec =
    CommandSpec { decl: &redis::OBJECT_ENCODING, run: read_second, ..CommandSpec::DEFAULT };

pub const OBJECT_FREQ: CommandSpec =
    CommandSpec { decl: &redis::OBJECT_FREQ, run: read_second, ..CommandSpec::DEFAULT };

pub const OBJECT_IDLETIME: CommandSpec =
    CommandSpec { decl: &redis::OBJECT_IDLETIME, run: read_second, ..CommandSpec::DEFAULT };

pub const OBJECT_REFCOUNT: CommandSpec =
    CommandSpec { decl: &redis::OBJECT_REFCOUNT, run: read_second, ..CommandSpec::DEFAULT };

pub const DUMP: CommandSpec = CommandSpec { decl: &redis::DUMP, run: read_key, ..CommandSpec::DEFAULT };

pub const RESTORE: CommandSpec =
    CommandSpec { decl: &redis::RESTORE, run: write_key, ..CommandSpec::DEFAULT };

pub const OBJECT_HELP: CommandSpec =
    CommandSpec { decl: &redis::OBJECT_HELP, run: help, ..CommandSpec::DEFAULT };

pub const OBJECT: CommandSpec = CommandSpec {
    decl: &redis::OBJECT,
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
