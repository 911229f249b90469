//! The sorted-set argument fuzz property (`fuzz/fuzz_targets/zrange_args.rs`).

use bytes::Bytes;
use shoal_wire::proto::reply;

use super::dispatch::dispatch;
use super::run::run;
use crate::store::object::{Limits, Object, ValueType};
use crate::store::{ManualClock, Store, StoreConfig};

/// The sorted-set argument fuzz property (`fuzz/fuzz_targets/zrange_args.rs` and the regression
/// test that replays saved inputs): ZRANGE and its older forms, ZADD and the other score- and
/// lex-range commands, given any arguments, answer without a panic, on a small store holding a
/// packed sorted set (`z`), one past the thresholds (`big`), a string (`s`), and no `none`.
///
/// The first input byte picks the command (low 4 bits) and the key (next 2 bits); the rest, split
/// at NUL bytes, are the arguments after the key. Argument counts the router's arity check
/// refuses never reach the node, so they are skipped here too. Afterwards each sorted set must
/// still agree with itself: its rank order, its count and its serialized form.
#[doc(hidden)]
pub fn fuzz_check_zset_args(data: &[u8]) {
    const COMMANDS: [&str; 16] = [
        "ZRANGE",
        "ZRANGEBYSCORE",
        "ZREVRANGEBYSCORE",
        "ZRANGEBYLEX",
        "ZREVRANGEBYLEX",
        "ZREVRANGE",
        "ZADD",
        "ZCOUNT",
        "ZLEXCOUNT",
        "ZREMRANGEBYSCORE",
        "ZREMRANGEBYLEX",
        "ZREMRANGEBYRANK",
        "ZRANGESTORE",
        "ZINCRBY",
        "ZRANK",
        "ZPOPMIN",
    ];
    // Redis's arity of each (negative: at least).
    const ARITY: [i32; 16] = [-4, -4, -4, -4, -4, -4, -4, 4, 4, 4, 4, 4, -5, 4, -3, -2];
    const KEYS: [&str; 4] = ["z", "big", "s", "none"];

    let Some((&control, rest)) = data.split_first() else { return };
    let which = usize::from(control & 0x0f);
    let key = KEYS[usize::from((control >> 4) & 3)];
    let mut args = vec![Bytes::from_static(COMMANDS[which].as_bytes()), Bytes::from_static(key.as_bytes())];
    if !rest.is_empty() {
        args.extend(rest.split(|&b| b == 0).map(Bytes::copy_from_slice));
    }
    let arity = ARITY[which];
    let n = args.len() as i32;
    if (arity > 0 && n != arity) || (arity < 0 && n < -arity) {
        return;
    }
    let store = fuzz_store();
    let reply = run(&store, &args);
    assert!(matches!(reply.kind, Some(reply::Kind::Frame(_))), "a frame for {args:?}");
    for key in ["z", "big", "none"] {
        check_zset(&store, key, &args);
    }
}

/// The store the property runs on: a packed sorted set `z`, one past the thresholds `big`, and a
/// string `s`.
fn fuzz_store() -> Store {
    let store = Store::new(
        StoreConfig { shards: 1, limits: Limits::TINY, ..Default::default() },
        std::sync::Arc::new(ManualClock::new(1_900_000_000_000)),
    );
    let fill = |key: &str, pairs: &[(&str, &str)]| {
        let mut a = vec![Bytes::from_static(b"ZADD"), Bytes::copy_from_slice(key.as_bytes())];
        for (score, member) in pairs {
            a.push(Bytes::copy_from_slice(score.as_bytes()));
            a.push(Bytes::copy_from_slice(member.as_bytes()));
        }
        dispatch(&store, &a).expect("filled");
    };
    fill("z", &[("1", "a"), ("1", "b"), ("2.5", "c"), ("-inf", "")]);
    fill(
        "big",
        &[
            ("0", "a"),
            ("0", "b"),
            ("1", "c"),
            ("1", "d"),
            ("-1", "e"),
            ("+inf", "f"),
            ("-inf", "g"),
            ("1e308", "h"),
            ("5e-324", "i"),
            ("-5e-324", "j"),
            ("3", "a-member-past-the-limit"),
            ("0", ""),
        ],
    );
    store.set(b"s", b"a string", Default::default()).expect("string set");
    store
}

/// The sorted set at `key` (if any) still agrees with itself after `args` ran: its rank order,
/// its count and its serialized form.
fn check_zset(store: &Store, key: &str, args: &[Bytes]) {
    let value = store
        .read_object(key.as_bytes(), ValueType::ZSet, |o| {
            o.map(|o| match o {
                Object::ZSet(z) => {
                    let order: Vec<(Vec<u8>, f64)> = z.iter().map(|(m, s)| (m.to_vec(), s)).collect();
                    assert_eq!(order.len(), z.len(), "{key}: iteration and count agree");
                    for w in order.windows(2) {
                        assert!(
                            (w[0].1, &w[0].0) < (w[1].1, &w[1].0),
                            "{key}: (score, member) order kept after {args:?}"
                        );
                    }
                    for (i, (m, s)) in order.iter().enumerate() {
                        assert_eq!(z.score(m), Some(*s), "{key}: score of a member");
                        assert_eq!(z.rank(m), Some(i), "{key}: rank of a member");
                    }
                    o.serialize()
                }
                _ => unreachable!("type checked by the store"),
            })
        })
        .ok()
        .flatten();
    if let Some(bytes) = value {
        let back =
            Object::deserialize(ValueType::ZSet, &bytes, &Limits::TINY).expect("a stored value decodes");
        assert_eq!(back.serialize(), bytes, "{key}: a sorted set serializes in its own order");
    }
}

/// The DUMP payload fuzz property (`fuzz/fuzz_targets/dump_payload.rs` and the regression test):
/// any bytes RESTORE could be sent decode or are refused without a panic. With the first byte's
/// low bit set, the rest is sealed as a payload first (right version and checksum), so the value
/// decoder itself is what is fuzzed; otherwise the bytes are the payload as a client sends it.
/// A value that decodes dumps to a payload that decodes again and dumps to the same bytes.
#[doc(hidden)]
pub fn fuzz_check_payload(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else { return };
    let payload = if control & 1 == 1 {
        let mut p = rest.to_vec();
        crate::rdb::seal(&mut p);
        p
    } else {
        rest.to_vec()
    };
    let limits = if control & 2 == 2 { Limits::TINY } else { Limits::default() };
    let Some(Ok(value)) = super::payload::undump(&payload, &limits) else { return };
    let dump = |v: &super::payload::Value| match v {
        super::payload::Value::String(s) => super::payload::dump_string(s),
        super::payload::Value::Object(o) => super::payload::dump_object(o),
    };
    let first = dump(&value);
    let again = super::payload::undump(&first, &limits)
        .expect("a payload DUMP wrote has the right checksum")
        .expect("a payload DUMP wrote decodes");
    assert_eq!(dump(&again), first, "a decoded value dumps the same twice");
}

/// The stream ID fuzz property (`fuzz/fuzz_targets/stream_ids.rs`): any argument, read as an ID
/// in every form XADD, XRANGE and the group commands accept, parses or is refused without a
/// panic; an ID that parses prints as `ms-seq` and parses back to itself; exclusive bounds
/// step past their ID or are refused at the ends.
#[doc(hidden)]
pub fn fuzz_check_stream_id(data: &[u8]) {
    for (missing, strict, star) in [(0, false, false), (u64::MAX, true, false), (0, false, true)] {
        if let Ok((id, _)) = super::stream::parse_id_full(data, missing, strict, star) {
            let text = id.to_string();
            let back = super::stream::parse_id_full(text.as_bytes(), missing, true, false);
            assert_eq!(back.map(|(b, _)| b), Ok(id), "{text} parses back");
        }
    }
    if let (Ok(start), Ok(plain)) = (super::stream::start_bound(data), super::stream::parse_id(data, 0))
        && data.first() != Some(&b'(')
    {
        assert_eq!(start, plain, "an inclusive start is the ID itself");
    }
    let _ = super::stream::end_bound(data);
}
