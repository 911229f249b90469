//! Model-based property test of streams: random XADD/XDEL/XTRIM/XGROUP/XREADGROUP/XACK/XCLAIM
//! sequences run through `commands::run` on a real store (nodes of at most 4 entries and 200
//! bytes, so entries cross node boundaries all the time) and through a plain model (`BTreeMap`s
//! of entries, pending entries and consumers); every reply must match the model's. Approximate
//! trimming, which depends on where nodes end, is checked against its bounds: it removes whole
//! leading runs, never more than exact trimming would. After each sequence the stream must come
//! back the same through its serialized form and a snapshot.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use shoal_node::commands;
use shoal_node::persistence::{Persistence, write_snapshot};
use shoal_node::store::object::{Limits, Object, ValueType};
use shoal_node::store::{ManualClock, Store, StoreConfig};
use shoal_wire::proto::{frame, reply};

const T0: u64 = 1_900_000_000_000;
const KEY: &str = "s";
const GROUPS: [&str; 2] = ["g1", "g2"];
const CONSUMERS: [&str; 3] = ["alice", "bob", "carol"];

fn cases() -> ProptestConfig {
    let n = std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(64);
    ProptestConfig::with_cases(n)
}

fn new_store(clock: &ManualClock) -> Arc<Store> {
    Arc::new(Store::new(
        StoreConfig { shards: 2, limits: Limits::TINY, ..Default::default() },
        Arc::new(clock.clone()),
    ))
}

/// A reply as a tree of strings (the model builds the same).
#[derive(Debug, Clone, PartialEq)]
enum R {
    S(String),
    I(i64),
    Nil,
    A(Vec<R>),
}

fn to_r(f: shoal_wire::proto::Frame) -> R {
    use frame::Kind::*;
    match f.kind.expect("a frame") {
        Bulk(b) => R::S(String::from_utf8_lossy(&b).into_owned()),
        Simple(s) => R::S(s),
        Error(e) => R::S(format!("-{e}")),
        Int(n) => R::I(n),
        Nil(_) | NullArray(_) => R::Nil,
        Array(a) | Map(a) | Set(a) | Pairs(a) | Keyed(a) => R::A(a.items.into_iter().map(to_r).collect()),
        Raw(raw) => to_r(commands::raw_frame(&raw).expect("a raw reply reads back as frames")),
        other => panic!("unexpected frame {other:?}"),
    }
}

fn run(s: &Store, args: &[String]) -> R {
    let args: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a.as_bytes())).collect();
    match commands::run(s, &args).kind {
        Some(reply::Kind::Frame(f)) => to_r(f),
        other => panic!("not a frame: {other:?}"),
    }
}

type Id = (u64, u64);

fn id(i: Id) -> String {
    format!("{}-{}", i.0, i.1)
}

#[derive(Debug, Default)]
struct Group {
    last: Id,
    /// id -> (owner, delivery count)
    pel: BTreeMap<Id, (String, i64)>,
    consumers: BTreeSet<String>,
}

#[derive(Debug, Default)]
struct Model {
    exists: bool,
    entries: BTreeMap<Id, Vec<String>>,
    last: Id,
    groups: BTreeMap<String, Group>,
}

impl Model {
    fn entry(&self, i: Id) -> R {
        R::A(vec![R::S(id(i)), R::A(self.entries[&i].iter().cloned().map(R::S).collect())])
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// XADD with `ms-*` where ms = last ms + step, and a field layout.
    Add(u64, usize),
    /// XDEL of the n-th live entry (mod len), or of an ID never used.
    Del(usize),
    TrimMaxLen(usize, bool),
    TrimMinId(usize),
    Range(usize, usize, usize, bool),
    Create(usize, bool),
    Read(usize, usize, usize),
    History(usize, usize),
    Ack(usize, usize),
    Claim(usize, usize, usize),
    Pending(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..3, 0usize..3).prop_map(|(s, f)| Op::Add(s, f)),
        1 => (0usize..20).prop_map(Op::Del),
        1 => (0usize..12, any::<bool>()).prop_map(|(n, a)| Op::TrimMaxLen(n, a)),
        1 => (0usize..20).prop_map(Op::TrimMinId),
        1 => (0usize..20, 0usize..20, 0usize..5, any::<bool>()).prop_map(|(a, b, c, r)| Op::Range(a, b, c, r)),
        1 => (0usize..2, any::<bool>()).prop_map(|(g, d)| Op::Create(g, d)),
        2 => (0usize..2, 0usize..3, 0usize..4).prop_map(|(g, c, n)| Op::Read(g, c, n)),
        1 => (0usize..2, 0usize..3).prop_map(|(g, c)| Op::History(g, c)),
        1 => (0usize..2, 0usize..20).prop_map(|(g, n)| Op::Ack(g, n)),
        1 => (0usize..2, 0usize..3, 0usize..20).prop_map(|(g, c, n)| Op::Claim(g, c, n)),
        1 => (0usize..2).prop_map(Op::Pending),
    ]
}

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// An ID around the stream's: the n-th entry's (mod len) or one past the end.
fn pick(m: &Model, n: usize) -> Id {
    let ids: Vec<Id> = m.entries.keys().copied().collect();
    if ids.is_empty() || n % 5 == 4 { (m.last.0 + 1, 0) } else { ids[n % ids.len()] }
}

fn step(s: &Store, m: &mut Model, op: &Op) -> Result<(), TestCaseError> {
    let (cmd, want): (Vec<String>, R) = match op {
        Op::Add(step, layout) => {
            let ms = m.last.0 + step;
            let new = if m.exists && ms == m.last.0 || (!m.exists && ms == 0) {
                (ms, m.last.1 + 1)
            } else {
                (ms, 0)
            };
            let fields = match layout {
                0 => strings(&["f", "1"]),
                1 => strings(&["f", "22", "g", "x"]),
                _ => vec!["other".into(), "y".repeat(30 * (*step as usize + 1))],
            };
            let mut cmd = strings(&["XADD", KEY, &format!("{ms}-*")]);
            cmd.extend(fields.iter().cloned());
            m.entries.insert(new, fields);
            m.last = new;
            m.exists = true;
            (cmd, R::S(id(new)))
        }
        Op::Del(n) => {
            let target = pick(m, *n);
            let n = i64::from(m.entries.remove(&target).is_some());
            (strings(&["XDEL", KEY, &id(target)]), R::I(n))
        }
        Op::TrimMaxLen(max, true) => {
            // Approximate: whole leading runs only, never more than exact trimming.
            let before: Vec<Id> = m.entries.keys().copied().collect();
            let got = run(s, &strings(&["XTRIM", KEY, "MAXLEN", "~", &max.to_string()]));
            let R::I(n) = got else { return Err(TestCaseError::fail(format!("XTRIM ~ answered {got:?}"))) };
            let most = before.len().saturating_sub(*max) as i64;
            prop_assert!(n >= 0 && (n <= most || !m.exists), "XTRIM ~ {max} removed {n} of {}", before.len());
            for i in &before[..n as usize] {
                m.entries.remove(i);
            }
            return Ok(());
        }
        Op::TrimMaxLen(max, false) => {
            let extra = m.entries.len().saturating_sub(*max);
            let gone: Vec<Id> = m.entries.keys().take(extra).copied().collect();
            gone.iter().for_each(|i| {
                m.entries.remove(i);
            });
            (
                strings(&["XTRIM", KEY, "MAXLEN", &max.to_string()]),
                R::I(if m.exists { extra as i64 } else { 0 }),
            )
        }
        Op::TrimMinId(n) => {
            let min = pick(m, *n);
            let gone: Vec<Id> = m.entries.range(..min).map(|(i, _)| *i).collect();
            gone.iter().for_each(|i| {
                m.entries.remove(i);
            });
            (strings(&["XTRIM", KEY, "MINID", &id(min)]), R::I(gone.len() as i64))
        }
        Op::Range(a, b, count, rev) => {
            let (lo, hi) = (pick(m, *a).min(pick(m, *b)), pick(m, *a).max(pick(m, *b)));
            let mut ids: Vec<Id> = m.entries.range(lo..=hi).map(|(i, _)| *i).collect();
            if *rev {
                ids.reverse();
            }
            if *count > 0 {
                ids.truncate(*count);
            }
            let mut cmd = if *rev {
                strings(&["XREVRANGE", KEY, &id(hi), &id(lo)])
            } else {
                strings(&["XRANGE", KEY, &id(lo), &id(hi)])
            };
            if *count > 0 {
                cmd.extend(strings(&["COUNT", &count.to_string()]));
            }
            (cmd, R::A(ids.iter().map(|i| m.entry(*i)).collect()))
        }
        Op::Create(g, dollar) => {
            let name = GROUPS[*g];
            let start = if *dollar { m.last } else { (0, 0) };
            let want = if !m.exists {
                R::S("-ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.".into())
            } else if m.groups.contains_key(name) {
                R::S("-BUSYGROUP Consumer Group name already exists".into())
            } else {
                m.groups.insert(name.into(), Group { last: start, ..Group::default() });
                R::S("OK".into())
            };
            (strings(&["XGROUP", "CREATE", KEY, name, if *dollar { "$" } else { "0" }]), want)
        }
        Op::Read(g, c, count) => {
            let (name, consumer) = (GROUPS[*g], CONSUMERS[*c]);
            let mut cmd = strings(&["XREADGROUP", "GROUP", name, consumer]);
            if *count > 0 {
                cmd.extend(strings(&["COUNT", &count.to_string()]));
            }
            cmd.extend(strings(&["STREAMS", KEY, ">"]));
            let want = match m.groups.get_mut(name) {
                None => R::S(format!(
                    "-NOGROUP No such key '{KEY}' or consumer group '{name}' in XREADGROUP with GROUP option"
                )),
                Some(grp) => {
                    let mut ids: Vec<Id> = m
                        .entries
                        .range((std::ops::Bound::Excluded(grp.last), std::ops::Bound::Unbounded))
                        .map(|(i, _)| *i)
                        .collect();
                    if ids.is_empty() {
                        R::Nil
                    } else {
                        if *count > 0 {
                            ids.truncate(*count);
                        }
                        grp.consumers.insert(consumer.into());
                        for i in &ids {
                            grp.pel.insert(*i, (consumer.into(), 1));
                        }
                        grp.last = *ids.last().expect("non-empty");
                        let entries: Vec<R> = ids.iter().map(|i| m.entry(*i)).collect();
                        R::A(vec![R::S(KEY.into()), R::A(entries)])
                    }
                }
            };
            (cmd, want)
        }
        Op::History(g, c) => {
            let (name, consumer) = (GROUPS[*g], CONSUMERS[*c]);
            let cmd = strings(&["XREADGROUP", "GROUP", name, consumer, "STREAMS", KEY, "0"]);
            let want = match m.groups.get_mut(name) {
                None => R::S(format!(
                    "-NOGROUP No such key '{KEY}' or consumer group '{name}' in XREADGROUP with GROUP option"
                )),
                Some(grp) => {
                    grp.consumers.insert(consumer.into());
                    let mut out = Vec::new();
                    for (i, (owner, n)) in grp.pel.iter_mut() {
                        if owner != consumer {
                            continue;
                        }
                        match m.entries.get(i) {
                            Some(f) => {
                                *n += 1;
                                out.push(R::A(vec![
                                    R::S(id(*i)),
                                    R::A(f.iter().cloned().map(R::S).collect()),
                                ]));
                            }
                            None => out.push(R::A(vec![R::S(id(*i)), R::Nil])),
                        }
                    }
                    R::A(vec![R::S(KEY.into()), R::A(out)])
                }
            };
            (cmd, want)
        }
        Op::Ack(g, n) => {
            let name = GROUPS[*g];
            let target = match m.groups.get(name) {
                Some(grp) if !grp.pel.is_empty() => {
                    *grp.pel.keys().nth(n % grp.pel.len()).expect("n mod len")
                }
                _ => pick(m, *n),
            };
            let acked = m.groups.get_mut(name).is_some_and(|grp| grp.pel.remove(&target).is_some());
            (strings(&["XACK", KEY, name, &id(target)]), R::I(i64::from(acked)))
        }
        Op::Claim(g, c, n) => {
            let (name, consumer) = (GROUPS[*g], CONSUMERS[*c]);
            let target = match m.groups.get(name) {
                Some(grp) if !grp.pel.is_empty() => {
                    *grp.pel.keys().nth(n % grp.pel.len()).expect("n mod len")
                }
                _ => pick(m, *n),
            };
            let cmd = strings(&["XCLAIM", KEY, name, consumer, "0", &id(target)]);
            let want = match m.groups.get_mut(name) {
                None => R::S(format!("-NOGROUP No such key '{KEY}' or consumer group '{name}'")),
                Some(grp) => match (grp.pel.contains_key(&target), m.entries.get(&target)) {
                    (true, None) => {
                        grp.pel.remove(&target);
                        R::A(Vec::new())
                    }
                    (true, Some(f)) => {
                        grp.consumers.insert(consumer.into());
                        let p = grp.pel.get_mut(&target).expect("pending");
                        *p = (consumer.into(), p.1 + 1);
                        R::A(vec![R::A(vec![R::S(id(target)), R::A(f.iter().cloned().map(R::S).collect())])])
                    }
                    (false, _) => R::A(Vec::new()),
                },
            };
            (cmd, want)
        }
        Op::Pending(g) => {
            let name = GROUPS[*g];
            let cmd = strings(&["XPENDING", KEY, name, "-", "+", "100"]);
            let want = match m.groups.get(name) {
                None => R::S(format!("-NOGROUP No such key '{KEY}' or consumer group '{name}'")),
                Some(grp) => {
                    // Idle times are the clock's: the model's clock stands still, so they are 0.
                    R::A(
                        grp.pel
                            .iter()
                            .map(|(i, (owner, n))| {
                                R::A(vec![R::S(id(*i)), R::S(owner.clone()), R::I(0), R::I(*n)])
                            })
                            .collect(),
                    )
                }
            };
            (cmd, want)
        }
    };
    let got = run(s, &cmd);
    prop_assert_eq!(&got, &want, "{:?}", cmd);
    Ok(())
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn streams_follow_the_model(ops in prop::collection::vec(op(), 1..150)) {
        let clock = ManualClock::new(T0);
        let s = new_store(&clock);
        let mut m = Model::default();
        for op in &ops {
            step(&s, &mut m, op)?;
        }
        let all = strings(&["XRANGE", KEY, "-", "+"]);
        let want = R::A(m.entries.keys().map(|i| m.entry(*i)).collect());
        prop_assert_eq!(&run(&s, &all), &want);
        prop_assert_eq!(run(&s, &strings(&["XLEN", KEY])), R::I(m.entries.len() as i64));
        if !m.exists {
            return Ok(());
        }
        // The serialized form and a snapshot give the same stream back.
        let info = strings(&["XINFO", "STREAM", KEY, "FULL"]);
        let before = run(&s, &info);
        let (bytes, _, t) = s.with_keys(&[KEY.as_bytes()], |l| l.export(KEY.as_bytes())).expect("exists");
        prop_assert_eq!(t, ValueType::Stream);
        let back = Object::deserialize(ValueType::Stream, &bytes, &Limits::TINY).expect("decodes");
        prop_assert_eq!(back.serialize(), bytes.to_vec());
        let d = tempfile::tempdir().expect("tempdir");
        write_snapshot(&s, d.path(), 3).expect("snapshot");
        let r = new_store(&clock);
        Persistence::open(r.clone(), Some(d.path().to_path_buf()), 2).expect("reopen");
        prop_assert_eq!(run(&r, &info), before);
    }
}
