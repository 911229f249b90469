//! Pub/sub: SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, SSUBSCRIBE, SUNSUBSCRIBE, PUBLISH,
//! SPUBLISH and PUBSUB (CHANNELS, NUMSUB, NUMPAT, SHARDCHANNELS, SHARDNUMSUB, HELP).
//!
//! Subscriptions live in the router's hub (`crate::pubsub`), which registers them with every
//! node; a (un)subscribe replies once the nodes have acknowledged it. PUBLISH and SPUBLISH are a
//! `Publish` op sent to the node that owns the channel's slot (like a key; the old owner while
//! the slot moves, since it is the node every router has long been registered with), which
//! delivers it to every subscribed router and answers Redis's receiver count. A publisher whose
//! channel changes node waits for its earlier PUBLISH replies before sending to the new one, so
//! its messages do not race each other down two nodes. PUBSUB asks one node: each knows every
//! router's registrations.

use bytes::Bytes;
use shoal_wire::proto::{self, op::Kind, pub_sub_query::What};

use super::spec::*;
use super::typed::from_frame;
use super::{Args, Ctx, Pending, op, reply_int};
use crate::pubsub::{Kind as SubKind, LeaveOnDrop, Subscriber};
use crate::resp::Reply;

pub const SUBSCRIBE: CommandSpec =
    CommandSpec { decl: &redis::SUBSCRIBE, run: subscribe, ..CommandSpec::DEFAULT };

pub const UNSUBSCRIBE: CommandSpec =
    CommandSpec { decl: &redis::UNSUBSCRIBE, run: unsubscribe, ..CommandSpec::DEFAULT };

pub const PSUBSCRIBE: CommandSpec =
    CommandSpec { decl: &redis::PSUBSCRIBE, run: subscribe, ..CommandSpec::DEFAULT };

pub const PUNSUBSCRIBE: CommandSpec =
    CommandSpec { decl: &redis::PUNSUBSCRIBE, run: unsubscribe, ..CommandSpec::DEFAULT };

pub const SSUBSCRIBE: CommandSpec =
    CommandSpec { decl: &redis::SSUBSCRIBE, run: subscribe, ..CommandSpec::DEFAULT };

pub const SUNSUBSCRIBE: CommandSpec =
    CommandSpec { decl: &redis::SUNSUBSCRIBE, run: unsubscribe, ..CommandSpec::DEFAULT };

pub const PUBLISH: CommandSpec = CommandSpec { decl: &redis::PUBLISH, run: publish, ..CommandSpec::DEFAULT };

pub const SPUBLISH: CommandSpec =
    CommandSpec { decl: &redis::SPUBLISH, run: publish, ..CommandSpec::DEFAULT };

pub const PUBSUB_CHANNELS: CommandSpec =
    CommandSpec { decl: &redis::PUBSUB_CHANNELS, run: pubsub_info, ..CommandSpec::DEFAULT };

pub const PUBSUB_NUMPAT: CommandSpec =
    CommandSpec { decl: &redis::PUBSUB_NUMPAT, run: pubsub_info, ..CommandSpec::DEFAULT };

pub const PUBSUB_NUMSUB: CommandSpec =
    CommandSpec { decl: &redis::PUBSUB_NUMSUB, run: pubsub_info, ..CommandSpec::DEFAULT };

pub const PUBSUB_SHARDCHANNELS: CommandSpec =
    CommandSpec { decl: &redis::PUBSUB_SHARDCHANNELS, run: pubsub_info, ..CommandSpec::DEFAULT };

pub const PUBSUB_SHARDNUMSUB: CommandSpec =
    CommandSpec { decl: &redis::PUBSUB_SHARDNUMSUB, run: pubsub_info, ..CommandSpec::DEFAULT };

pub const PUBSUB_HELP: CommandSpec =
    CommandSpec { decl: &redis::PUBSUB_HELP, run: help, ..CommandSpec::DEFAULT };

pub const PUBSUB: CommandSpec = CommandSpec {
    decl: &redis::PUBSUB,
    run: help,
    subcommands: &[
        &PUBSUB_CHANNELS,
        &PUBSUB_NUMPAT,
        &PUBSUB_NUMSUB,
        &PUBSUB_SHARDCHANNELS,
        &PUBSUB_SHARDNUMSUB,
        &PUBSUB_HELP,
    ],
    ..CommandSpec::DEFAULT
};

/// The commands a RESP2 connection may run while subscribed (Redis's list, with its text for the
/// others).
pub fn allowed_while_subscribed(spec: &CommandSpec) -> bool {
    matches!(
        spec.name(),
        "ping"
            | "subscribe"
            | "ssubscribe"
            | "unsubscribe"
            | "sunsubscribe"
            | "psubscribe"
            | "punsubscribe"
            | "quit"
            | "reset"
    )
}

pub fn refused_while_subscribed(spec: &CommandSpec) -> Reply {
    Reply::error_fmt(format!(
        "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
        spec.name()
    ))
}

fn kind_of(name: &[u8]) -> SubKind {
    match &name.to_ascii_lowercase()[..] {
        b"psubscribe" | b"punsubscribe" => SubKind::Pattern,
        b"ssubscribe" | b"sunsubscribe" => SubKind::Shard,
        _ => SubKind::Channel,
    }
}

fn http_refusal() -> Pending {
    Reply::error("ERR subscribing needs a connection: each HTTP request stands alone; use RESP").into()
}

fn subscribe(args: &Args, ctx: &mut Ctx) -> Pending {
    change(args, ctx, true)
}

fn unsubscribe(args: &Args, ctx: &mut Ctx) -> Pending {
    change(args, ctx, false)
}

fn change(args: &Args, ctx: &mut Ctx, add: bool) -> Pending {
    if ctx.session.http {
        return http_refusal();
    }
    let kind = kind_of(&args[0]);
    let hub = ctx.state.pubsub.clone();
    let sub = match &ctx.session.subscriber {
        Some(s) => s.sub.clone(),
        None if !add => {
            // Nothing to drop: Redis still answers (a null name and a count of 0).
            let (replies, _) =
                hub.change(&Subscriber::new(ctx.session.client.clone()), kind, &args[1..], false);
            return Reply::Seq(replies).into();
        }
        None => own_queue(ctx),
    };
    let (replies, acked) = hub.change(&sub, kind, &args[1..], add);
    Pending::later(async move {
        acked.await;
        Reply::Seq(replies)
    })
}

/// PUBLISH and SPUBLISH.
fn publish(args: &Args, ctx: &mut Ctx) -> Pending {
    let sharded = args[0].eq_ignore_ascii_case(b"spublish");
    let publish =
        op(Kind::Publish(proto::Publish { channel: args[1].clone(), message: args[2].clone(), sharded }));
    let (owner, moving_from) = ctx.routing.locate(&args[1]);
    let pos = moving_from.unwrap_or(owner);
    let node = ctx.routing.nodes[pos].ident().id;
    let same_node = ctx.session.last_publish_node.replace(node) == Some(node);
    if same_node || ctx.routing.capturing {
        let call = ctx.call_at(pos, publish);
        return Pending::later(async move { receivers(call.wait().await) });
    }
    // Another node than this client's last PUBLISH went to: sent only once the replies before it
    // are in (a reply is awaited after the previous one), so the earlier messages have left
    // their node before this one is sent to its own; and a barrier, so that the PUBLISHes after
    // it in the pipeline (sent at once, to the same node) cannot overtake it.
    let (state, routing, deadline) = (ctx.state.clone(), ctx.routing.clone(), ctx.deadline);
    Pending::Barrier(Box::pin(async move {
        let call = state.backend.at(&routing, pos, publish, deadline);
        receivers(call.wait().await)
    }))
}

/// PUBLISH's reply: how many clients received the message, or why it was not published.
fn receivers(reply: Result<proto::Reply, crate::backend::BackendError>) -> Reply {
    reply.map_or_else(Reply::from, |r| reply_int(r).map_or_else(|e| e, Reply::Int))
}

fn pubsub_info(args: &Args, ctx: &mut Ctx) -> Pending {
    let sub = args[1].to_ascii_lowercase();
    let what = match &sub[..] {
        b"channels" => What::Channels,
        b"numsub" => What::Numsub,
        b"numpat" => What::Numpat,
        b"shardchannels" => What::Shardchannels,
        _ => What::Shardnumsub,
    };
    let mut q = proto::PubSubQuery { what: what as i32, ..Default::default() };
    match what {
        What::Channels | What::Shardchannels => match args.len() {
            2 => {}
            3 => {
                q.pattern = args[2].clone();
                q.has_pattern = true;
            }
            _ => {
                return Reply::error_fmt(format!(
                    "ERR unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
                    String::from_utf8_lossy(&args[1])
                ))
                .into();
            }
        },
        What::Numsub | What::Shardnumsub => q.channels = args[2..].to_vec(),
        What::Numpat => {}
    }
    let hub = ctx.state.pubsub.clone();
    Pending::later(async move {
        match hub.query(q).await {
            Ok(f) => from_frame(f),
            Err(e) => e.into(),
        }
    })
}

fn help(_args: &Args, _ctx: &mut Ctx) -> Pending {
    super::help_reply(&[
        "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CHANNELS [<pattern>]",
        "    Return the currently active channels matching a <pattern> (default: '*').",
        "NUMPAT",
        "    Return number of subscriptions to patterns.",
        "NUMSUB [<channel> ...]",
        "    Return the number of subscribers for the specified channels, excluding",
        "    pattern subscriptions(default: no channels).",
        "SHARDCHANNELS [<pattern>]",
        "    Return the currently active shard level channels matching a <pattern> (default: '*').",
        "SHARDNUMSUB [<shardchannel> ...]",
        "    Return the number of subscribers for the specified shard level channel(s)",
        "HELP",
        "    Prints this help.",
    ])
}

/// PING while subscribed on RESP2: `pong` and the argument (empty by default) as an array.
pub fn subscribed_ping(args: &Args) -> Reply {
    let arg = args.get(1).cloned().unwrap_or_else(Bytes::new);
    Reply::Array(vec![Reply::bulk("pong"), Reply::Bulk(arg)])
}

/// This connection's queue of pushes (pub/sub messages, invalidations, MONITOR's lines), made
/// on first use: the connection writes what it holds between replies, and leaves the hub when
/// it closes or RESETs.
pub(super) fn own_queue(ctx: &mut Ctx) -> std::sync::Arc<Subscriber> {
    if let Some(s) = &ctx.session.subscriber {
        return s.sub.clone();
    }
    let hub = ctx.state.pubsub.clone();
    let sub = Subscriber::new(ctx.session.client.clone());
    // A CLIENT TRACKING REDIRECT target is found by its id.
    hub.tracking.register_queue(ctx.session.id, &sub);
    ctx.session.subscriber = Some(LeaveOnDrop { hub, sub: sub.clone() });
    sub
}
