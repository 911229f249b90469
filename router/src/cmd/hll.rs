//! HyperLogLog commands (PFADD PFCOUNT PFMERGE). The node runs them
//! (`node/src/commands/hll.rs`); these are their specs, as redis-server 7.0 declares them.
//!
//! PFCOUNT of one key may write (it stores the recomputed count in the value's cache), so it goes
//! to the key's owner as a write; of several keys it only reads and runs like SUNION
//! (`multi::run`). PFMERGE replaces its destination like the STORE forms.

use super::spec::*;
use super::typed::write_key;
use super::{Args, Ctx, Pending, multi};

pub const PFADD: CommandSpec = CommandSpec { decl: &redis::PFADD, run: write_key, ..CommandSpec::DEFAULT };

pub const PFCOUNT: CommandSpec = CommandSpec { decl: &redis::PFCOUNT, run: pfcount, ..CommandSpec::DEFAULT };

pub const PFMERGE: CommandSpec =
    CommandSpec { decl: &redis::PFMERGE, run: multi::run, ..CommandSpec::DEFAULT };

fn pfcount(args: &Args, ctx: &mut Ctx) -> Pending {
    if args.len() == 2 { write_key(args, ctx) } else { multi::run(args, ctx) }
}
