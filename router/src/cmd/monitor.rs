//! MONITOR: this connection gets a line for every command the router runs from now on
//! ([`crate::monitor`]), written between its own replies like pub/sub messages; RESET or closing
//! ends it. Shoal's MONITOR shows the commands of the router it is sent to (its clients'; a
//! script's own calls run on the nodes and are not shown).

use super::spec::*;
use super::{Args, Ctx, Pending};
use crate::resp::Reply;

pub const MONITOR: CommandSpec = CommandSpec { decl: &redis::MONITOR, run: monitor, ..CommandSpec::DEFAULT };

fn monitor(_args: &Args, ctx: &mut Ctx) -> Pending {
    let queue = super::pubsub::own_queue(ctx);
    ctx.state.monitors.add(&queue);
    Reply::OK.into()
}
