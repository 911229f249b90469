//! `SHOAL SLOT-STATS`: per-slot numbers gathered from every node, in the shape of Redis 8's
//! `CLUSTER SLOT-STATS`: an array of `[slot, {key-count, reads, writes, network-bytes-in,
//! network-bytes-out}]` (the inner part a map in RESP3, a flat array in RESP2). Each node answers
//! for the slots it owns (see the `SlotStats` op); `cpu-usec` is not measured.

use shoal_wire::SLOT_COUNT;
use shoal_wire::proto::{self, op::Kind, reply};

use super::spec::*;
use super::{Args, Ctx, Pending, op};
use crate::resp::Reply;

/// Shoal's own declaration (SHOAL is Shoal's: Redis has no `shoal|slot-stats`).
const SHOAL_SLOT_STATS_DECL: RedisCommand = RedisCommand {
    name: "shoal|slot-stats",
    arity: -2,
    flags: flag::LOADING | flag::STALE,
    key_range: KeyRange::NONE,
    categories: cat::SLOW,
    container: false,
    summary: "Per-slot key count, reads, writes and bytes, from every node",
    since: "0.1.0",
    group: "shoal",
    complexity: "O(N) where N is the number of keys (each node counts its keys per slot)",
    ..SHOAL_OWN
};

pub const SHOAL_SLOT_STATS: CommandSpec =
    CommandSpec { decl: &SHOAL_SLOT_STATS_DECL, run: slot_stats, ..CommandSpec::DEFAULT };

/// What ORDERBY sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Metric {
    Keys,
    Reads,
    Writes,
    BytesIn,
    BytesOut,
    /// In and out together.
    Bytes,
}

impl Metric {
    fn parse(word: &[u8]) -> Option<Metric> {
        let w = String::from_utf8_lossy(word).to_ascii_lowercase();
        Some(match w.as_str() {
            "key-count" | "keys" => Metric::Keys,
            "reads" => Metric::Reads,
            "writes" => Metric::Writes,
            "network-bytes-in" => Metric::BytesIn,
            "network-bytes-out" => Metric::BytesOut,
            "bytes" => Metric::Bytes,
            _ => return None,
        })
    }

    fn of(self, s: &proto::SlotStat) -> u64 {
        match self {
            Metric::Keys => s.keys,
            Metric::Reads => s.reads,
            Metric::Writes => s.writes,
            Metric::BytesIn => s.bytes_in,
            Metric::BytesOut => s.bytes_out,
            Metric::Bytes => s.bytes_in.saturating_add(s.bytes_out),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Request {
    Range(u16, u16),
    OrderBy { metric: Metric, limit: usize, descending: bool },
}

fn parse(args: &Args) -> Result<Request, Reply> {
    let slot = |b: &[u8]| match super::int_arg(b) {
        Ok(n) if (0..SLOT_COUNT as i64).contains(&n) => Ok(n as u16),
        _ => Err(Reply::error("ERR Invalid or out of range slot")),
    };
    let Some(kind) = args.get(2) else { return Ok(Request::Range(0, (SLOT_COUNT - 1) as u16)) };
    if kind.eq_ignore_ascii_case(b"slotsrange") {
        if args.len() != 5 {
            return Err(super::syntax_error());
        }
        let (first, last) = (slot(&args[3])?, slot(&args[4])?);
        if first > last {
            return Err(Reply::error_fmt(format!(
                "ERR Start slot number {first} is greater than end slot number {last}"
            )));
        }
        return Ok(Request::Range(first, last));
    }
    if !kind.eq_ignore_ascii_case(b"orderby") {
        return Err(super::syntax_error());
    }
    let metric = args.get(3).ok_or_else(super::syntax_error).and_then(|m| {
        Metric::parse(m).ok_or_else(|| Reply::error("ERR Unrecognized sort metric for ORDERBY."))
    })?;
    let (mut limit, mut descending) = (16usize, true);
    let mut rest = args[4..].iter();
    while let Some(word) = rest.next() {
        if word.eq_ignore_ascii_case(b"limit") {
            let n = rest.next().ok_or_else(super::syntax_error)?;
            limit = match super::int_arg(n)? {
                n if (1..=SLOT_COUNT as i64).contains(&n) => n as usize,
                _ => {
                    return Err(Reply::error(
                        "ERR Limit has to lie in between 1 and 16384 (maximum number of slots).",
                    ));
                }
            };
        } else if word.eq_ignore_ascii_case(b"asc") {
            descending = false;
        } else if word.eq_ignore_ascii_case(b"desc") {
            descending = true;
        } else {
            return Err(super::syntax_error());
        }
    }
    Ok(Request::OrderBy { metric, limit, descending })
}

/// `SHOAL SLOT-STATS [SLOTSRANGE <first> <last> | ORDERBY <metric> [LIMIT <n>] [ASC|DESC]]`.
pub fn slot_stats(args: &Args, ctx: &mut Ctx) -> Pending {
    let request = match parse(args) {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let (first, last) = match request {
        Request::Range(first, last) => (first, last),
        Request::OrderBy { .. } => (0, (SLOT_COUNT - 1) as u16),
    };
    let make = move || {
        op(Kind::SlotStats(proto::SlotStats {
            first_slot: u32::from(first),
            last_slot: u32::from(last),
            reset: false,
        }))
    };
    let calls = ctx.call_all(make);
    Pending::later(async move {
        let replies = match calls.gather().await {
            Ok(r) => r,
            Err(e) => return e.into(),
        };
        // A slot two nodes both count (an overlap while a topology changes) is summed.
        let mut by_slot: std::collections::BTreeMap<u32, proto::SlotStat> = Default::default();
        for r in replies {
            match r.kind {
                Some(reply::Kind::SlotStats(s)) => {
                    for s in s.slots {
                        let e = by_slot
                            .entry(s.slot)
                            .or_insert_with(|| proto::SlotStat { slot: s.slot, ..Default::default() });
                        e.keys += s.keys;
                        e.reads += s.reads;
                        e.writes += s.writes;
                        e.bytes_in += s.bytes_in;
                        e.bytes_out += s.bytes_out;
                    }
                }
                Some(reply::Kind::Error(e)) => return Reply::error_fmt(e),
                other => return super::unexpected(other),
            }
        }
        let mut rows: Vec<proto::SlotStat> = by_slot.into_values().collect();
        if let Request::OrderBy { metric, limit, descending } = request {
            // Ties in slot order, as Redis.
            rows.sort_by(|a, b| {
                let (x, y) = (metric.of(a), metric.of(b));
                let ord = if descending { y.cmp(&x) } else { x.cmp(&y) };
                ord.then(a.slot.cmp(&b.slot))
            });
            rows.truncate(limit);
        }
        Reply::Array(rows.iter().map(row).collect())
    })
}

/// CONFIG RESETSTAT's op: every slot a node owns starts counting again from zero.
pub fn reset_op() -> proto::Op {
    op(Kind::SlotStats(proto::SlotStats { first_slot: 0, last_slot: (SLOT_COUNT - 1) as u32, reset: true }))
}

fn row(s: &proto::SlotStat) -> Reply {
    let field = |name: &'static str, n: u64| (Reply::simple(name), Reply::Int(n.min(i64::MAX as u64) as i64));
    Reply::Array(vec![
        Reply::Int(i64::from(s.slot)),
        Reply::Map(vec![
            field("key-count", s.keys),
            field("reads", s.reads),
            field("writes", s.writes),
            field("network-bytes-in", s.bytes_in),
            field("network-bytes-out", s.bytes_out),
        ]),
    ])
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn args(a: &str) -> Vec<Bytes> {
        a.split(' ').map(|s| Bytes::from(s.to_string())).collect()
    }

    #[test]
    fn arguments_like_redis() {
        assert_eq!(parse(&args("SHOAL SLOT-STATS")), Ok(Request::Range(0, 16383)));
        assert_eq!(parse(&args("SHOAL SLOT-STATS SLOTSRANGE 5 9")), Ok(Request::Range(5, 9)));
        assert_eq!(
            parse(&args("SHOAL SLOT-STATS orderby key-count limit 3 asc")),
            Ok(Request::OrderBy { metric: Metric::Keys, limit: 3, descending: false })
        );
        assert_eq!(
            parse(&args("SHOAL SLOT-STATS ORDERBY writes")),
            Ok(Request::OrderBy { metric: Metric::Writes, limit: 16, descending: true })
        );
        for bad in [
            "SHOAL SLOT-STATS SLOTSRANGE 9 5",
            "SHOAL SLOT-STATS SLOTSRANGE 0 16384",
            "SHOAL SLOT-STATS SLOTSRANGE 0",
            "SHOAL SLOT-STATS ORDERBY cpu-usec",
            "SHOAL SLOT-STATS ORDERBY reads LIMIT 0",
            "SHOAL SLOT-STATS ORDERBY reads sideways",
            "SHOAL SLOT-STATS SIDEWAYS",
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad}");
        }
    }
}
