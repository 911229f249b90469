//! MONITOR: this connection gets a line for every command the router runs from now on
//! ([`crate::monitor`]), written between its own replies like pub/sub messages; RESET or closing
//! ends it. Shoal's MONITOR shows the commands of every router of the cluster and the calls of
//! scripts on the nodes (`[0 lua]`); those come through a node, a little later than this
//! router's own.

use super::spec::*;
use super::{Args, Ctx, Pending};
use crate::resp::Reply;

pub const MONITOR: CommandSpec = CommandSpec { decl: &redis::MONITOR, run: monitor, ..CommandSpec::DEFAULT };

fn monitor(_args: &Args, ctx: &mut Ctx) -> Pending {
    let queue = super::pubsub::own_queue(ctx);
    ctx.state.pubsub.add_monitor(&queue);
    Reply::OK.into()
}
