//! LATENCY.
//!
//! LATENCY HISTOGRAM reports each command's latency distribution from the router's stats
//! (`crate::stats`: power-of-two microsecond buckets, end to end as clients see it). The latency
//! *monitor* (LATEST, HISTORY, GRAPH, DOCTOR, RESET) answers over this router's command events
//! and every node's expiry and eviction events (`crate::latency`), gathered per call from the
//! nodes' stats.

use std::collections::BTreeMap;
use std::sync::Arc;

use shoal_wire::latency::{self, Series};
use shoal_wire::proto::NodeStats;

use crate::state::RouterState;

use super::spec::*;
use super::{Args, Ctx, Pending};
use crate::resp::Reply;
use crate::stats::BUCKETS;

pub const LATENCY_LATEST: CommandSpec =
    CommandSpec { decl: &redis::LATENCY_LATEST, run: latest, ..CommandSpec::DEFAULT };

pub const LATENCY_HISTORY: CommandSpec =
    CommandSpec { decl: &redis::LATENCY_HISTORY, run: history, ..CommandSpec::DEFAULT };

pub const LATENCY_RESET: CommandSpec =
    CommandSpec { decl: &redis::LATENCY_RESET, run: reset, ..CommandSpec::DEFAULT };

pub const LATENCY_DOCTOR: CommandSpec =
    CommandSpec { decl: &redis::LATENCY_DOCTOR, run: doctor, ..CommandSpec::DEFAULT };

pub const LATENCY_GRAPH: CommandSpec =
    CommandSpec { decl: &redis::LATENCY_GRAPH, run: graph, ..CommandSpec::DEFAULT };

pub const LATENCY_HISTOGRAM: CommandSpec =
    CommandSpec { decl: &redis::LATENCY_HISTOGRAM, run: histogram, ..CommandSpec::DEFAULT };

pub const LATENCY_HELP: CommandSpec =
    CommandSpec { decl: &redis::LATENCY_HELP, run: help, ..CommandSpec::DEFAULT };

pub const LATENCY: CommandSpec = CommandSpec {
    decl: &redis::LATENCY,
    run: help,
    subcommands: &[
        &LATENCY_LATEST,
        &LATENCY_HISTORY,
        &LATENCY_RESET,
        &LATENCY_DOCTOR,
        &LATENCY_GRAPH,
        &LATENCY_HISTOGRAM,
        &LATENCY_HELP,
    ],
    lane: LaneClass::No,
};

/// Runs `answer` over every event this router and the nodes that answered know, with the
/// nodes' stats at hand, and the time (Unix ms).
fn over_events(
    ctx: &mut Ctx,
    answer: impl FnOnce(&RouterState, BTreeMap<String, Series>, &[NodeStats], u64) -> Reply + Send + 'static,
) -> Pending {
    let state = Arc::clone(ctx.state);
    let routing = Arc::clone(ctx.routing);
    Pending::later(async move {
        let nodes: Vec<NodeStats> = routing.stats_all().await.into_iter().flatten().collect();
        let events = state.latency.events(&nodes);
        let now_ms = state.clock.now_ms();
        answer(&state, events, &nodes, now_ms)
    })
}

/// `LATENCY LATEST`: per event, its name, its latest sample's time and latency, its worst.
pub fn latest(_args: &Args, ctx: &mut Ctx) -> Pending {
    over_events(ctx, |_, events, _, _| {
        Reply::Array(
            events
                .into_iter()
                .filter_map(|(name, s)| {
                    let &(time, latency, _) = s.samples.last()?;
                    Some(Reply::Array(vec![
                        Reply::bulk(name.into_bytes()),
                        Reply::Int(time as i64),
                        Reply::Int(latency as i64),
                        Reply::Int(s.max as i64),
                    ]))
                })
                .collect(),
        )
    })
}

/// `LATENCY HISTORY event`: its samples, oldest first, as (time, latency) pairs.
pub fn history(args: &Args, ctx: &mut Ctx) -> Pending {
    let event = String::from_utf8_lossy(&args[2]).into_owned();
    over_events(ctx, move |_, events, _, _| {
        let samples = events.get(&event).map(|s| s.samples.clone()).unwrap_or_default();
        Reply::Array(
            samples
                .into_iter()
                .map(|(time, latency, _)| {
                    Reply::Array(vec![Reply::Int(time as i64), Reply::Int(latency as i64)])
                })
                .collect(),
        )
    })
}

/// `LATENCY RESET [event ...]`: how many events were forgotten.
pub fn reset(args: &Args, ctx: &mut Ctx) -> Pending {
    let events: Vec<String> = args[2..].iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    over_events(ctx, move |state, _, nodes, now_ms| {
        Reply::Int(state.latency.reset(&events, nodes, now_ms) as i64)
    })
}

/// `LATENCY GRAPH event`: Redis's ASCII sparkline of the event's samples.
pub fn graph(args: &Args, ctx: &mut Ctx) -> Pending {
    let event = String::from_utf8_lossy(&args[2]).into_owned();
    over_events(ctx, move |_, events, _, now_ms| match events.get(&event) {
        Some(s) => Reply::Verbatim(latency::graph(&event, s, now_ms / 1000).into()),
        None => Reply::error_fmt(format!("ERR No samples available for event '{event}'")),
    })
}

/// `LATENCY DOCTOR`: Redis's report over the events.
pub fn doctor(_args: &Args, ctx: &mut Ctx) -> Pending {
    over_events(ctx, |state, events, _, now_ms| {
        let threshold = state.latency.monitor.threshold();
        let slower_than = state.stats.slower_than_us.load(std::sync::atomic::Ordering::Relaxed);
        Reply::Verbatim(latency::doctor(&events, threshold, slower_than, now_ms / 1000).into())
    })
}

/// `LATENCY HISTOGRAM [command ...]`: per command, its calls and the cumulative count of calls
/// at or below each power-of-two microsecond bound (Redis's shape).
pub fn histogram(args: &Args, ctx: &mut Ctx) -> Pending {
    let wanted: Vec<Vec<u8>> = args[2..].iter().map(|a| a.to_ascii_lowercase()).collect();
    let entries = ctx
        .state
        .stats
        .snapshot(|s| ctx.registry.name_of(s))
        .into_iter()
        // A container's name (CLIENT) stands for its subcommands too (client|id, client|list).
        .filter(|n| {
            let name = n.name.as_bytes();
            wanted.is_empty()
                || wanted.iter().any(|w| {
                    w == name || name.strip_prefix(&w[..]).is_some_and(|rest| rest.starts_with(b"|"))
                })
        })
        .map(|n| {
            let mut cumulative = 0;
            let mut points = Vec::new();
            for k in 0..BUCKETS {
                if n.buckets[k] == 0 {
                    continue;
                }
                cumulative += n.buckets[k];
                points.push((Reply::Int(1i64 << k), Reply::Int(cumulative as i64)));
            }
            let body = vec![
                (Reply::bulk("calls"), Reply::Int(n.calls as i64)),
                (Reply::bulk("histogram_usec"), Reply::Map(points)),
            ];
            (Reply::bulk(n.name), Reply::Map(body))
        })
        .collect();
    Reply::Map(entries).into()
}

pub fn help(_args: &Args, _ctx: &mut Ctx) -> Pending {
    let lines = [
        "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "DOCTOR",
        "    Return a human readable latency analysis report.",
        "GRAPH <event>",
        "    Return an ASCII latency graph for the <event> class.",
        "HISTORY <event>",
        "    Return time-latency samples for the <event> class.",
        "LATEST",
        "    Return the latest latency samples for all events.",
        "RESET [<event> ...]",
        "    Reset latency data of one or more <event> classes.",
        "    (default: reset all data for all event classes)",
        "HISTOGRAM [COMMAND ...]",
        "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
        "    If no commands are specified then all histograms are replied.",
        "HELP",
        "    Prints this help.",
    ];
    super::help_reply(&lines)
}
