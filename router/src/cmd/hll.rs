//! HyperLogLog commands (PFADD PFCOUNT PFMERGE). The node runs them
//! (`node/src/commands/hll.rs`); these are their specs, as redis-server 7.0 declares them.
//!
//! PFCOUNT of one key may write (it stores the recomputed count in the value's cache), so it goes
//! to the key's owner as a write; of several keys it only reads and runs like SUNION
//! (`multi::run`). PFMERGE replaces its destination like the STORE forms.

use super::spec::*;
use super::typed::write_key;
use super::{Args, Ctx, Pending, multi};

pub const PFADD: CommandSpec = CommandSpec {
    name: "pfadd",
    arity: -2,
    flags: &["write", "denyoom", "fast"],
    keys: KeySpec::ONE,
    acl: &["@write", "@hyperloglog", "@fast"],
    group: "hyperloglog",
    since: "2.8.9",
    summary: "Adds the specified elements to the specified HyperLogLog.",
    complexity: "O(1) to add every element.",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const PFCOUNT: CommandSpec = CommandSpec {
    name: "pfcount",
    arity: -2,
    flags: &["readonly"],
    keys: KeySpec { first: 1, last: -1, step: 1 },
    acl: &["@read", "@hyperloglog", "@slow"],
    group: "hyperloglog",
    since: "2.8.9",
    summary: "Return the approximated cardinality of the set(s) observed by the HyperLogLog at key(s).",
    complexity: "O(1) with a very small average constant time when called with a single key. O(N) with N being the number of keys, and much bigger constant times, when called with multiple keys.",
    run: pfcount,
    ..CommandSpec::DEFAULT
};

pub const PFMERGE: CommandSpec = CommandSpec {
    name: "pfmerge",
    arity: -2,
    flags: &["write", "denyoom"],
    keys: KeySpec { first: 1, last: -1, step: 1 },
    acl: &["@write", "@hyperloglog", "@slow"],
    group: "hyperloglog",
    since: "2.8.9",
    summary: "Merge N different HyperLogLogs into a single one.",
    complexity: "O(N) to merge N HyperLogLogs, but with high constant times.",
    run: multi::run,
    ..CommandSpec::DEFAULT
};

fn pfcount(args: &Args, ctx: &mut Ctx) -> Pending {
    if args.len() == 2 { write_key(args, ctx) } else { multi::run(args, ctx) }
}
