//! Model-based property tests of the typed values: random command sequences over a few keys run
//! both through `commands::run` on a real store and through a plain model (`BTreeMap`, `Vec`,
//! `VecDeque`, `BTreeSet`), and every reply must match the model's. The store's encoding limits
//! are tiny, so values convert between their compact and table encodings all the time; the model
//! also predicts `OBJECT ENCODING`. After each sequence every value must survive its serialized
//! form (`Object::serialize`/`deserialize`) and a snapshot written and reopened into a new store.
//!
//! Replies whose order Redis leaves unspecified (a table-encoded HGETALL, SMEMBERS, SINTER, ...)
//! are compared sorted.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use shoal_node::commands;
use shoal_node::persistence::{Persistence, write_snapshot};
use shoal_node::store::object::{Limits, Object, ValueType};
use shoal_node::store::{ManualClock, Store, StoreConfig};
use shoal_wire::proto::{Frame, frame, reply};

const T0: u64 = 1_900_000_000_000;

/// Small thresholds, so that a few commands cross them.
const SMALL: Limits = Limits {
    hash_max_listpack_entries: 4,
    hash_max_listpack_value: 8,
    set_max_intset_entries: 4,
    zset_max_listpack_entries: 4,
    zset_max_listpack_value: 8,
    list_max_listpack_size: 3,
    stream_node: Limits::TINY.stream_node,
};

const KEYS: [&str; 3] = ["k0", "k1", "k2"];

fn new_store(clock: &ManualClock) -> Arc<Store> {
    Arc::new(Store::new(
        StoreConfig { shards: 4, limits: SMALL, ..Default::default() },
        Arc::new(clock.clone()),
    ))
}

/// 64 cases a test (a few seconds in a debug build); `PROPTEST_CASES` asks for more.
fn cases() -> ProptestConfig {
    let n = std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(64);
    ProptestConfig::with_cases(n)
}

// --- replies -----------------------------------------------------------------------------------

/// A reply in a form the model can build. Doubles are compared as numbers (`%.17g` round-trips).
#[derive(Debug, Clone, PartialEq)]
enum R {
    Int(i64),
    Bulk(String),
    Nil,
    NullArray,
    Simple(String),
    Err(String),
    Dbl(f64),
    Arr(Vec<R>),
}

fn conv(f: Frame) -> R {
    use frame::Kind::*;
    match f.kind.expect("frame kind") {
        Bulk(b) => R::Bulk(String::from_utf8(b.to_vec()).expect("utf-8 in these tests")),
        Int(n) => R::Int(n),
        Error(e) => R::Err(e),
        Nil(_) => R::Nil,
        NullArray(_) => R::NullArray,
        Simple(s) => R::Simple(s),
        Double(d) => {
            let t = std::str::from_utf8(&d).expect("double text");
            R::Dbl(t.parse().unwrap_or_else(|_| panic!("double {t:?}")))
        }
        Array(a) | Map(a) | Set(a) | Pairs(a) | Keyed(a) => R::Arr(a.items.into_iter().map(conv).collect()),
        Raw(raw) => conv(commands::raw_frame(&raw).expect("a raw reply reads back as frames")),
        Boolean(_) | BigNumber(_) | Verbatim(_) => {
            panic!("typed commands never answer script-only reply types")
        }
    }
}

fn run(s: &Store, args: &[String]) -> R {
    let args: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a.as_bytes())).collect();
    let r = commands::run(s, &args);
    let Some(reply::Kind::Frame(f)) = r.kind else { panic!("not a frame: {r:?}") };
    conv(f)
}

fn bulk(s: &str) -> R {
    R::Bulk(s.to_string())
}

fn bulks<'a>(items: impl IntoIterator<Item = &'a str>) -> R {
    R::Arr(items.into_iter().map(bulk).collect())
}

fn err(text: &str) -> R {
    R::Err(text.to_string())
}

/// An array's items sorted (for replies in unspecified order).
fn sorted(r: R) -> R {
    match r {
        R::Arr(mut items) => {
            items.sort_by_key(|i| format!("{i:?}"));
            R::Arr(items)
        }
        other => other,
    }
}

/// A flat field, value array sorted by pairs (HGETALL of a table-encoded hash).
fn sorted_pairs(r: R) -> R {
    match r {
        R::Arr(items) => {
            let mut pairs: Vec<Vec<R>> = items.chunks(2).map(<[R]>::to_vec).collect();
            pairs.sort_by_key(|p| format!("{p:?}"));
            R::Arr(pairs.into_iter().flatten().collect())
        }
        other => other,
    }
}

fn args(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

/// Runs `cmd` on the store and compares with the model's answer (`unordered`: compared sorted).
fn check(s: &Store, cmd: &[String], want: R, unordered: bool) -> Result<(), TestCaseError> {
    let got = run(s, cmd);
    let (got, want) = if unordered { (sorted(got), sorted(want)) } else { (got, want) };
    prop_assert_eq!(got, want, "command {:?}", cmd);
    Ok(())
}

fn check_encoding(s: &Store, key: &str, want: Option<&str>) -> Result<(), TestCaseError> {
    check(s, &args(&["OBJECT", "ENCODING", key]), want.map_or(R::Nil, bulk), false)
}

// --- serialized form and snapshots ---------------------------------------------------------------

/// A value's contents in a canonical form (order-free types sorted).
fn contents(o: &Object) -> Vec<String> {
    let mut out: Vec<String> = match o {
        Object::Hash(h) => h
            .iter()
            .map(|(f, v)| format!("{}={}", String::from_utf8_lossy(f), String::from_utf8_lossy(v)))
            .collect(),
        Object::List(l) => return l.iter().map(|v| String::from_utf8_lossy(v).into_owned()).collect(),
        Object::Set(s) => s.iter().map(|m| String::from_utf8_lossy(&m).into_owned()).collect(),
        Object::ZSet(z) => {
            return z
                .iter()
                .map(|(m, sc)| format!("{}@{:016x}", String::from_utf8_lossy(m), sc.to_bits()))
                .collect();
        }
        Object::Stream(_) => unreachable!("the model writes no streams (node/tests/stream_model.rs does)"),
    };
    out.sort();
    out
}

/// The encoding a value of these contents gets when built from scratch (decoding, restoring).
fn fresh_encoding(o: &Object, l: &Limits) -> &'static str {
    match o {
        Object::Hash(h) => {
            let small = h.len() <= l.hash_max_listpack_entries
                && h.iter().all(|(f, v)| {
                    f.len() <= l.hash_max_listpack_value && v.len() <= l.hash_max_listpack_value
                });
            if small { "listpack" } else { "hashtable" }
        }
        Object::List(_) => "quicklist",
        Object::Stream(_) => "stream",
        Object::Set(s) => {
            let small =
                s.len() <= l.set_max_intset_entries && s.iter().all(|m| is_int(&String::from_utf8_lossy(&m)));
            if small { "intset" } else { "hashtable" }
        }
        Object::ZSet(z) => {
            let small = z.len() <= l.zset_max_listpack_entries
                && z.iter().all(|(m, _)| m.len() <= l.zset_max_listpack_value);
            if small { "listpack" } else { "skiplist" }
        }
    }
}

/// Every key's value survives `Object::serialize`/`deserialize` (twice), and the whole store
/// survives a snapshot reopened in a fresh store: `dump` (a command reading a whole value) answers
/// the same there, after `normalize`.
fn check_round_trips(
    s: &Store,
    clock: &ManualClock,
    t: ValueType,
    dump: impl Fn(&str) -> Vec<String>,
    normalize: impl Fn(R) -> R,
) -> Result<(), TestCaseError> {
    for key in KEYS {
        let Some((bytes, before)) = s
            .read_object(key.as_bytes(), t, |o| o.map(|o| (o.serialize(), contents(o))))
            .expect("right type")
        else {
            continue;
        };
        let back =
            Object::deserialize(t, &bytes, &SMALL).map_err(|e| TestCaseError::fail(format!("{key}: {e}")))?;
        prop_assert_eq!(&contents(&back), &before, "{} through its serialized form", key);
        prop_assert_eq!(back.encoding(), fresh_encoding(&back, &SMALL), "{} decoded", key);
        let again = Object::deserialize(t, &back.serialize(), &SMALL).expect("re-serialized value decodes");
        prop_assert_eq!(&contents(&again), &before, "{} serialized twice", key);
        let roomy = Object::deserialize(t, &bytes, &Limits::default()).expect("decodes under other limits");
        prop_assert_eq!(&contents(&roomy), &before, "{} under the default limits", key);
    }
    let d = tempfile::tempdir().expect("temp dir");
    write_snapshot(s, d.path(), 3).expect("snapshot written");
    let r = new_store(clock);
    Persistence::open(r.clone(), Some(d.path().to_path_buf()), 2).expect("snapshot opened");
    for key in KEYS {
        let cmd = dump(key);
        prop_assert_eq!(normalize(run(&r, &cmd)), normalize(run(s, &cmd)), "{:?} after a snapshot", cmd);
    }
    Ok(())
}

// --- hashes --------------------------------------------------------------------------------------

const FIELDS: [&str; 8] = ["a", "b", "c", "d", "e", "f", "g", "a-long-field-name"];
const HVALUES: [&str; 9] =
    ["", "0", "1", "-3", "42", "x", "hello", "a-value-past-the-limit", "9223372036854775807"];
const DELTAS: [i64; 6] = [-5, 1, 7, 1000, i64::MAX, i64::MIN];

#[derive(Debug, Clone)]
enum HOp {
    Set(usize, Vec<(usize, usize)>),
    Del(usize, Vec<usize>),
    Get(usize, usize),
    Exists(usize, usize),
    Len(usize),
    IncrBy(usize, usize, usize),
    GetAll(usize),
}

fn hash_op() -> impl Strategy<Value = HOp> {
    let k = 0..KEYS.len();
    let f = 0..FIELDS.len();
    prop_oneof![
        4 => (k.clone(), prop::collection::vec((f.clone(), 0..HVALUES.len()), 1..4)).prop_map(|(k, p)| HOp::Set(k, p)),
        2 => (k.clone(), prop::collection::vec(f.clone(), 1..3)).prop_map(|(k, fs)| HOp::Del(k, fs)),
        1 => (k.clone(), f.clone()).prop_map(|(k, f)| HOp::Get(k, f)),
        1 => (k.clone(), f.clone()).prop_map(|(k, f)| HOp::Exists(k, f)),
        1 => k.clone().prop_map(HOp::Len),
        2 => (k.clone(), f, 0..DELTAS.len()).prop_map(|(k, f, d)| HOp::IncrBy(k, f, d)),
        1 => k.prop_map(HOp::GetAll),
    ]
}

/// A hash as Redis keeps it: fields in insertion order while packed.
#[derive(Debug, Default)]
struct HModel {
    fields: Vec<(String, String)>,
    table: bool,
}

impl HModel {
    fn get(&self, f: &str) -> Option<&str> {
        self.fields.iter().find(|(x, _)| x == f).map(|(_, v)| v.as_str())
    }

    fn set(&mut self, f: &str, v: &str, l: &Limits) -> bool {
        if f.len() > l.hash_max_listpack_value || v.len() > l.hash_max_listpack_value {
            self.table = true;
        }
        match self.fields.iter_mut().find(|(x, _)| x == f) {
            Some(slot) => {
                slot.1 = v.to_string();
                false
            }
            None => {
                self.fields.push((f.to_string(), v.to_string()));
                if self.fields.len() > l.hash_max_listpack_entries {
                    self.table = true;
                }
                true
            }
        }
    }

    fn encoding(&self) -> &'static str {
        if self.table { "hashtable" } else { "listpack" }
    }
}

fn hash_step(s: &Store, m: &mut BTreeMap<usize, HModel>, op: &HOp) -> Result<(), TestCaseError> {
    let key = |k: usize| KEYS[k].to_string();
    match op {
        HOp::Set(k, pairs) => {
            let mut cmd = vec!["HSET".to_string(), key(*k)];
            let h = m.entry(*k).or_default();
            let mut added = 0;
            for &(f, v) in pairs {
                cmd.push(FIELDS[f].into());
                cmd.push(HVALUES[v].into());
                added += i64::from(h.set(FIELDS[f], HVALUES[v], &SMALL));
            }
            check(s, &cmd, R::Int(added), false)?;
        }
        HOp::Del(k, fs) => {
            let mut cmd = vec!["HDEL".to_string(), key(*k)];
            let mut gone = 0;
            for &f in fs {
                cmd.push(FIELDS[f].into());
                if let Some(h) = m.get_mut(k)
                    && let Some(i) = h.fields.iter().position(|(x, _)| x == FIELDS[f])
                {
                    h.fields.remove(i);
                    gone += 1;
                }
            }
            if m.get(k).is_some_and(|h| h.fields.is_empty()) {
                m.remove(k);
            }
            check(s, &cmd, R::Int(gone), false)?;
        }
        HOp::Get(k, f) => {
            let want = m.get(k).and_then(|h| h.get(FIELDS[*f])).map_or(R::Nil, bulk);
            check(s, &args(&["HGET", KEYS[*k], FIELDS[*f]]), want, false)?;
        }
        HOp::Exists(k, f) => {
            let want = R::Int(i64::from(m.get(k).is_some_and(|h| h.get(FIELDS[*f]).is_some())));
            check(s, &args(&["HEXISTS", KEYS[*k], FIELDS[*f]]), want, false)?;
        }
        HOp::Len(k) => {
            check(
                s,
                &args(&["HLEN", KEYS[*k]]),
                R::Int(m.get(k).map_or(0, |h| h.fields.len() as i64)),
                false,
            )?;
        }
        HOp::IncrBy(k, f, d) => {
            let delta = DELTAS[*d];
            let h = m.entry(*k).or_default();
            let want = match h.get(FIELDS[*f]).map(str::parse::<i64>) {
                Some(Err(_)) => err("ERR hash value is not an integer"),
                cur => match cur.map_or(Ok(0), |c| c).ok().and_then(|c| c.checked_add(delta)) {
                    None => err("ERR increment or decrement would overflow"),
                    Some(n) => {
                        h.set(FIELDS[*f], &n.to_string(), &SMALL);
                        R::Int(n)
                    }
                },
            };
            if h.fields.is_empty() {
                m.remove(k);
            }
            check(s, &args(&["HINCRBY", KEYS[*k], FIELDS[*f], &delta.to_string()]), want, false)?;
        }
        HOp::GetAll(k) => {
            let h = m.get(k);
            let flat: Vec<&str> =
                h.into_iter().flat_map(|h| h.fields.iter()).flat_map(|(f, v)| [&**f, &**v]).collect();
            let got = run(s, &args(&["HGETALL", KEYS[*k]]));
            if h.is_some_and(|h| h.table) {
                prop_assert_eq!(sorted_pairs(got), sorted_pairs(bulks(flat)), "HGETALL {}", KEYS[*k]);
            } else {
                prop_assert_eq!(got, bulks(flat), "HGETALL {} (packed: insertion order)", KEYS[*k]);
            }
            check_encoding(s, KEYS[*k], h.map(HModel::encoding))?;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn hashes_follow_the_model(ops in prop::collection::vec(hash_op(), 1..200)) {
        let clock = ManualClock::new(T0);
        let s = new_store(&clock);
        let mut m = BTreeMap::new();
        for op in &ops {
            hash_step(&s, &mut m, op)?;
        }
        for k in 0..KEYS.len() {
            hash_step(&s, &mut m, &HOp::GetAll(k))?;
        }
        check_round_trips(&s, &clock, ValueType::Hash, |k| args(&["HGETALL", k]), sorted_pairs)?;
    }
}

// --- lists ---------------------------------------------------------------------------------------

const LVALUES: [&str; 5] = ["a", "b", "c", "d", "a-long-list-element"];

#[derive(Debug, Clone)]
enum LOp {
    Push(bool, usize, Vec<usize>),
    Pop(bool, usize, Option<usize>),
    Range(usize, i64, i64),
    Index(usize, i64),
    Set(usize, i64, usize),
    Insert(usize, bool, usize, usize),
    Rem(usize, i64, usize),
    Trim(usize, i64, i64),
    Len(usize),
}

fn list_op() -> impl Strategy<Value = LOp> {
    let k = 0..KEYS.len();
    let v = 0..LVALUES.len();
    let i = -8i64..8;
    prop_oneof![
        4 => (any::<bool>(), k.clone(), prop::collection::vec(v.clone(), 1..5)).prop_map(|(l, k, vs)| LOp::Push(l, k, vs)),
        2 => (any::<bool>(), k.clone(), prop::option::of(0usize..5)).prop_map(|(l, k, c)| LOp::Pop(l, k, c)),
        2 => (k.clone(), i.clone(), i.clone()).prop_map(|(k, a, b)| LOp::Range(k, a, b)),
        1 => (k.clone(), i.clone()).prop_map(|(k, a)| LOp::Index(k, a)),
        1 => (k.clone(), i.clone(), v.clone()).prop_map(|(k, a, v)| LOp::Set(k, a, v)),
        1 => (k.clone(), any::<bool>(), v.clone(), v.clone()).prop_map(|(k, a, p, v)| LOp::Insert(k, a, p, v)),
        1 => (k.clone(), -3i64..4, v).prop_map(|(k, c, v)| LOp::Rem(k, c, v)),
        1 => (k.clone(), i.clone(), i).prop_map(|(k, a, b)| LOp::Trim(k, a, b)),
        1 => k.prop_map(LOp::Len),
    ]
}

/// Redis's LRANGE/LTRIM index rules, written afresh for the model.
fn model_range(len: usize, start: i64, end: i64) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 { (len + start).max(0) } else { start };
    let end = if end < 0 { len + end } else { end }.min(len - 1);
    (start <= end && start < len).then_some((start as usize, end as usize))
}

fn model_index(len: usize, i: i64) -> Option<usize> {
    let i = if i < 0 { len as i64 + i } else { i };
    (0 <= i && i < len as i64).then_some(i as usize)
}

fn list_step(s: &Store, m: &mut BTreeMap<usize, VecDeque<String>>, op: &LOp) -> Result<(), TestCaseError> {
    let (cmd, want) = match op {
        LOp::Push(left, k, vs) => {
            let l = m.entry(*k).or_default();
            let mut cmd = args(&[if *left { "LPUSH" } else { "RPUSH" }, KEYS[*k]]);
            for &v in vs {
                cmd.push(LVALUES[v].into());
                if *left { l.push_front(LVALUES[v].into()) } else { l.push_back(LVALUES[v].into()) }
            }
            (cmd, R::Int(l.len() as i64))
        }
        LOp::Pop(left, k, count) => {
            let mut cmd = args(&[if *left { "LPOP" } else { "RPOP" }, KEYS[*k]]);
            let pop = |l: &mut VecDeque<String>| if *left { l.pop_front() } else { l.pop_back() };
            let want = match (m.get_mut(k), count) {
                (None, None) => R::Nil,
                (None, Some(_)) => R::NullArray,
                (Some(l), None) => pop(l).map_or(R::Nil, |v| bulk(&v)),
                (Some(l), Some(n)) => R::Arr((0..*n).map_while(|_| pop(l)).map(|v| bulk(&v)).collect()),
            };
            if let Some(n) = count {
                cmd.push(n.to_string());
            }
            (cmd, want)
        }
        LOp::Range(k, a, b) => {
            let want = match m.get(k).and_then(|l| Some((l, model_range(l.len(), *a, *b)?))) {
                Some((l, (a, b))) => bulks(l.range(a..=b).map(String::as_str)),
                None => R::Arr(vec![]),
            };
            (args(&["LRANGE", KEYS[*k], &a.to_string(), &b.to_string()]), want)
        }
        LOp::Index(k, i) => {
            let want = m.get(k).and_then(|l| l.get(model_index(l.len(), *i)?)).map_or(R::Nil, |v| bulk(v));
            (args(&["LINDEX", KEYS[*k], &i.to_string()]), want)
        }
        LOp::Set(k, i, v) => {
            let want = match m.get_mut(k) {
                None => err("ERR no such key"),
                Some(l) => match model_index(l.len(), *i) {
                    None => err("ERR index out of range"),
                    Some(at) => {
                        l[at] = LVALUES[*v].into();
                        R::Simple("OK".into())
                    }
                },
            };
            (args(&["LSET", KEYS[*k], &i.to_string(), LVALUES[*v]]), want)
        }
        LOp::Insert(k, after, pivot, v) => {
            let want = match m.get_mut(k) {
                None => R::Int(0),
                Some(l) => match l.iter().position(|x| x == LVALUES[*pivot]) {
                    None => R::Int(-1),
                    Some(i) => {
                        l.insert(if *after { i + 1 } else { i }, LVALUES[*v].into());
                        R::Int(l.len() as i64)
                    }
                },
            };
            let side = if *after { "AFTER" } else { "BEFORE" };
            (args(&["LINSERT", KEYS[*k], side, LVALUES[*pivot], LVALUES[*v]]), want)
        }
        LOp::Rem(k, count, v) => {
            let mut removed = 0;
            if let Some(l) = m.get_mut(k) {
                let limit = if *count == 0 { usize::MAX } else { count.unsigned_abs() as usize };
                let mut order: Vec<usize> = (0..l.len()).collect();
                if *count < 0 {
                    order.reverse();
                }
                let mut gone = BTreeSet::new();
                for i in order {
                    if gone.len() < limit && l[i] == LVALUES[*v] {
                        gone.insert(i);
                    }
                }
                removed = gone.len() as i64;
                let kept: VecDeque<String> =
                    l.drain(..).enumerate().filter(|(i, _)| !gone.contains(i)).map(|(_, x)| x).collect();
                *l = kept;
            }
            (args(&["LREM", KEYS[*k], &count.to_string(), LVALUES[*v]]), R::Int(removed))
        }
        LOp::Trim(k, a, b) => {
            if let Some(l) = m.get_mut(k) {
                let kept = match model_range(l.len(), *a, *b) {
                    Some((a, b)) => l.range(a..=b).cloned().collect(),
                    None => VecDeque::new(),
                };
                *l = kept;
            }
            (args(&["LTRIM", KEYS[*k], &a.to_string(), &b.to_string()]), R::Simple("OK".into()))
        }
        LOp::Len(k) => (args(&["LLEN", KEYS[*k]]), R::Int(m.get(k).map_or(0, |l| l.len() as i64))),
    };
    m.retain(|_, l| !l.is_empty());
    check(s, &cmd, want, false)
}

fn list_dump(k: &str) -> Vec<String> {
    args(&["LRANGE", k, "0", "-1"])
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn lists_follow_the_model(ops in prop::collection::vec(list_op(), 1..200)) {
        let clock = ManualClock::new(T0);
        let s = new_store(&clock);
        let mut m = BTreeMap::new();
        for op in &ops {
            list_step(&s, &mut m, op)?;
        }
        for (k, key) in KEYS.iter().enumerate() {
            let want = m.get(&k).map_or(R::Arr(vec![]), |l| bulks(l.iter().map(String::as_str)));
            check(&s, &list_dump(key), want, false)?;
            check_encoding(&s, key, m.get(&k).map(|_| "quicklist"))?;
        }
        check_round_trips(&s, &clock, ValueType::List, list_dump, |r| r)?;
    }
}

// --- sets ----------------------------------------------------------------------------------------

const MEMBERS: [&str; 11] = ["1", "2", "3", "10", "-5", "0", "007", "-0", "a", "b", "a-long-set-member"];

/// Redis's intset test: the canonical text of an i64.
fn is_int(m: &str) -> bool {
    m.parse::<i64>().is_ok_and(|n| n.to_string() == m)
}

#[derive(Debug, Clone)]
enum SOp {
    Add(usize, Vec<usize>),
    Rem(usize, Vec<usize>),
    IsMember(usize, usize),
    Card(usize),
    Members(usize),
    Multi(&'static str, Vec<usize>),
}

fn set_op() -> impl Strategy<Value = SOp> {
    let k = 0..KEYS.len();
    let v = 0..MEMBERS.len();
    prop_oneof![
        4 => (k.clone(), prop::collection::vec(v.clone(), 1..4)).prop_map(|(k, vs)| SOp::Add(k, vs)),
        2 => (k.clone(), prop::collection::vec(v.clone(), 1..3)).prop_map(|(k, vs)| SOp::Rem(k, vs)),
        1 => (k.clone(), v).prop_map(|(k, v)| SOp::IsMember(k, v)),
        1 => k.clone().prop_map(SOp::Card),
        1 => k.clone().prop_map(SOp::Members),
        2 => (prop::sample::select(vec!["SINTER", "SUNION", "SDIFF"]), prop::collection::vec(k, 2..4))
            .prop_map(|(c, ks)| SOp::Multi(c, ks)),
    ]
}

#[derive(Debug, Default)]
struct SModel {
    members: BTreeSet<String>,
    table: bool,
}

impl SModel {
    fn encoding(&self) -> &'static str {
        if self.table { "hashtable" } else { "intset" }
    }
}

fn set_step(s: &Store, m: &mut BTreeMap<usize, SModel>, op: &SOp) -> Result<(), TestCaseError> {
    let empty = BTreeSet::new();
    let of = |m: &BTreeMap<usize, SModel>, k: usize| m.get(&k).map(|x| x.members.clone()).unwrap_or_default();
    let (cmd, want) = match op {
        SOp::Add(k, vs) => {
            let set = m.entry(*k).or_default();
            let mut cmd = args(&["SADD", KEYS[*k]]);
            let mut added = 0;
            for &v in vs {
                cmd.push(MEMBERS[v].into());
                if !is_int(MEMBERS[v]) {
                    set.table = true;
                }
                if set.members.insert(MEMBERS[v].into()) {
                    added += 1;
                    if set.members.len() > SMALL.set_max_intset_entries {
                        set.table = true;
                    }
                }
            }
            (cmd, R::Int(added))
        }
        SOp::Rem(k, vs) => {
            let mut cmd = args(&["SREM", KEYS[*k]]);
            let mut gone = 0;
            for &v in vs {
                cmd.push(MEMBERS[v].into());
                if m.get_mut(k).is_some_and(|set| set.members.remove(MEMBERS[v])) {
                    gone += 1;
                }
            }
            (cmd, R::Int(gone))
        }
        SOp::IsMember(k, v) => {
            let want = R::Int(i64::from(m.get(k).is_some_and(|set| set.members.contains(MEMBERS[*v]))));
            (args(&["SISMEMBER", KEYS[*k], MEMBERS[*v]]), want)
        }
        SOp::Card(k) => {
            (args(&["SCARD", KEYS[*k]]), R::Int(m.get(k).map_or(0, |set| set.members.len() as i64)))
        }
        SOp::Members(k) => {
            let want = bulks(m.get(k).map_or(&empty, |set| &set.members).iter().map(String::as_str));
            let cmd = args(&["SMEMBERS", KEYS[*k]]);
            if m.get(k).is_some_and(|set| !set.table) {
                // An intset answers in ascending numeric order.
                let mut ints: Vec<i64> = m[k].members.iter().map(|x| x.parse().expect("int")).collect();
                ints.sort();
                let texts: Vec<String> = ints.iter().map(i64::to_string).collect();
                check(s, &cmd, bulks(texts.iter().map(String::as_str)), false)?;
            }
            check_encoding(s, KEYS[*k], m.get(k).map(SModel::encoding))?;
            (cmd, want)
        }
        SOp::Multi(name, ks) => {
            let sets: Vec<BTreeSet<String>> = ks.iter().map(|&k| of(m, k)).collect();
            let out: BTreeSet<String> = match *name {
                "SINTER" => {
                    sets[0].iter().filter(|x| sets[1..].iter().all(|s| s.contains(*x))).cloned().collect()
                }
                "SUNION" => sets.iter().flatten().cloned().collect(),
                _ => sets[0].iter().filter(|x| !sets[1..].iter().any(|s| s.contains(*x))).cloned().collect(),
            };
            let mut cmd = vec![name.to_string()];
            cmd.extend(ks.iter().map(|&k| KEYS[k].to_string()));
            (cmd, bulks(out.iter().map(String::as_str)))
        }
    };
    m.retain(|_, set| !set.members.is_empty());
    check(s, &cmd, want, true)
}

fn set_dump(k: &str) -> Vec<String> {
    args(&["SMEMBERS", k])
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn sets_follow_the_model(ops in prop::collection::vec(set_op(), 1..200)) {
        let clock = ManualClock::new(T0);
        let s = new_store(&clock);
        let mut m = BTreeMap::new();
        for op in &ops {
            set_step(&s, &mut m, op)?;
        }
        for k in 0..KEYS.len() {
            set_step(&s, &mut m, &SOp::Members(k))?;
        }
        check_round_trips(&s, &clock, ValueType::Set, set_dump, sorted)?;
    }
}

// --- sorted sets ---------------------------------------------------------------------------------

const ZMEMBERS: [&str; 7] = ["a", "b", "c", "d", "e", "f", "a-long-zset-member"];
const SCORES: [&str; 11] = ["0", "1", "2", "3", "-1", "1.5", "-2.5", "+inf", "-inf", "1e2", "abc"];
const SCORE_BOUNDS: [&str; 15] =
    ["-inf", "+inf", "(-inf", "(+inf", "0", "(0", "1", "(1", "1.5", "(1.5", "2", "(2", "3", "(3", "-1"];
const LEX_BOUNDS: [&str; 9] = ["-", "+", "[a", "(a", "[b", "(c", "[d", "(zz", "[a-long"];
const ZFLAGS: [&str; 6] = ["NX", "XX", "GT", "LT", "CH", "INCR"];

#[derive(Debug, Clone)]
enum ZOp {
    /// Flags (a bit per `ZFLAGS` entry), then score, member pairs.
    Add(usize, u8, Vec<(usize, usize)>),
    IncrBy(usize, usize, usize),
    Rem(usize, Vec<usize>),
    Score(usize, usize),
    Rank(usize, usize),
    RangeRank {
        k: usize,
        start: i64,
        stop: i64,
        rev: bool,
        ws: bool,
    },
    RangeScore {
        k: usize,
        min: usize,
        max: usize,
        rev: bool,
        limit: Option<(i64, i64)>,
        ws: bool,
    },
    RangeLex {
        k: usize,
        min: usize,
        max: usize,
        rev: bool,
        limit: Option<(i64, i64)>,
    },
    Count(usize, usize, usize),
    PopMin(usize, Option<usize>),
    RemRangeByScore(usize, usize, usize),
}

fn zset_op() -> impl Strategy<Value = ZOp> {
    let k = 0..KEYS.len();
    let mb = 0..ZMEMBERS.len();
    let sc = 0..SCORES.len();
    let sb = 0..SCORE_BOUNDS.len();
    let lb = 0..LEX_BOUNDS.len();
    let i = -6i64..6;
    let limit = prop::option::of((-1i64..4, -1i64..4));
    // Flags mostly absent, each one sometimes present.
    let flags = prop::collection::vec(prop::bool::weighted(0.15), 6)
        .prop_map(|b| b.iter().enumerate().fold(0u8, |acc, (i, &on)| acc | (u8::from(on) << i)));
    prop_oneof![
        5 => (k.clone(), flags, prop::collection::vec((sc.clone(), mb.clone()), 1..4))
            .prop_map(|(k, f, p)| ZOp::Add(k, f, p)),
        1 => (k.clone(), sc, mb.clone()).prop_map(|(k, s, m)| ZOp::IncrBy(k, s, m)),
        2 => (k.clone(), prop::collection::vec(mb.clone(), 1..3)).prop_map(|(k, ms)| ZOp::Rem(k, ms)),
        1 => (k.clone(), mb.clone()).prop_map(|(k, m)| ZOp::Score(k, m)),
        1 => (k.clone(), mb).prop_map(|(k, m)| ZOp::Rank(k, m)),
        2 => (k.clone(), i.clone(), i, any::<bool>(), any::<bool>())
            .prop_map(|(k, start, stop, rev, ws)| ZOp::RangeRank { k, start, stop, rev, ws }),
        3 => (k.clone(), sb.clone(), sb.clone(), any::<bool>(), limit.clone(), any::<bool>())
            .prop_map(|(k, min, max, rev, limit, ws)| ZOp::RangeScore { k, min, max, rev, limit, ws }),
        1 => (k.clone(), lb.clone(), lb, any::<bool>(), limit)
            .prop_map(|(k, min, max, rev, limit)| ZOp::RangeLex { k, min, max, rev, limit }),
        1 => (k.clone(), sb.clone(), sb.clone()).prop_map(|(k, a, b)| ZOp::Count(k, a, b)),
        1 => (k.clone(), prop::option::of(0usize..4)).prop_map(|(k, c)| ZOp::PopMin(k, c)),
        1 => (k, sb.clone(), sb).prop_map(|(k, a, b)| ZOp::RemRangeByScore(k, a, b)),
    ]
}

#[derive(Debug, Default)]
struct ZModel {
    scores: BTreeMap<String, f64>,
    table: bool,
}

impl ZModel {
    /// Members in (score, member) order.
    fn ordered(&self) -> Vec<(String, f64)> {
        let mut v: Vec<(String, f64)> = self.scores.iter().map(|(m, s)| (m.clone(), *s)).collect();
        v.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        v
    }

    fn insert(&mut self, m: &str, s: f64, l: &Limits) {
        if m.len() > l.zset_max_listpack_value {
            self.table = true;
        }
        self.scores.insert(m.to_string(), s);
        if self.scores.len() > l.zset_max_listpack_entries {
            self.table = true;
        }
    }

    fn encoding(&self) -> &'static str {
        if self.table { "skiplist" } else { "listpack" }
    }
}

fn parse_score(s: &str) -> Option<f64> {
    s.parse::<f64>().ok().filter(|x| !x.is_nan())
}

/// A score bound: (value, inclusive).
fn bound(s: &str) -> (f64, bool) {
    match s.strip_prefix('(') {
        Some(rest) => (parse_score(rest).expect("bound"), false),
        None => (parse_score(s).expect("bound"), true),
    }
}

fn in_score_range(x: f64, min: (f64, bool), max: (f64, bool)) -> bool {
    (if min.1 { x >= min.0 } else { x > min.0 }) && (if max.1 { x <= max.0 } else { x < max.0 })
}

fn in_lex_range(m: &str, min: &str, max: &str) -> bool {
    let above = match min {
        "-" => true,
        "+" => false,
        _ if min.starts_with('[') => m >= &min[1..],
        _ => m > &min[1..],
    };
    let below = match max {
        "-" => false,
        "+" => true,
        _ if max.starts_with('[') => m <= &max[1..],
        _ => m < &max[1..],
    };
    above && below
}

fn apply_limit(items: Vec<(String, f64)>, limit: Option<(i64, i64)>) -> Vec<(String, f64)> {
    match limit {
        None => items,
        Some((off, _)) if off < 0 => vec![],
        Some((off, n)) => {
            let it = items.into_iter().skip(off as usize);
            if n < 0 { it.collect() } else { it.take(n as usize).collect() }
        }
    }
}

fn members_reply(items: &[(String, f64)], ws: bool) -> R {
    R::Arr(
        items.iter().flat_map(|(m, s)| if ws { vec![bulk(m), R::Dbl(*s)] } else { vec![bulk(m)] }).collect(),
    )
}

/// ZADD as the model sees it: the reply, changing `m` only as Redis would.
fn model_zadd(m: &mut BTreeMap<usize, ZModel>, k: usize, flags: u8, pairs: &[(usize, usize)]) -> R {
    let on = |i: usize| flags & (1 << i) != 0;
    let (nx, xx, gt, lt, ch, incr) = (on(0), on(1), on(2), on(3), on(4), on(5));
    if nx && xx {
        return err("ERR XX and NX options at the same time are not compatible");
    }
    if [gt, lt, nx].iter().filter(|&&f| f).count() > 1 {
        return err("ERR GT, LT, and/or NX options at the same time are not compatible");
    }
    if incr && pairs.len() > 1 {
        return err("ERR INCR option supports a single increment-element pair");
    }
    let Some(parsed) = pairs
        .iter()
        .map(|&(s, mb)| Some((parse_score(SCORES[s])?, ZMEMBERS[mb])))
        .collect::<Option<Vec<_>>>()
    else {
        return err("ERR value is not a valid float");
    };
    if xx && !m.contains_key(&k) {
        return if incr { R::Nil } else { R::Int(0) };
    }
    let z = m.entry(k).or_default();
    let (mut added, mut changed, mut result) = (0, 0, None);
    for (score, member) in parsed {
        let new = match z.scores.get(member).copied() {
            Some(_) if nx => continue,
            None if xx => continue,
            Some(cur) => {
                let new = if incr { cur + score } else { score };
                if new.is_nan() {
                    return err("ERR resulting score is not a number (NaN)");
                }
                if (gt && new <= cur) || (lt && new >= cur) {
                    continue;
                }
                if new != cur {
                    z.insert(member, new, &SMALL);
                    changed += 1;
                }
                new
            }
            None => {
                z.insert(member, score, &SMALL);
                added += 1;
                score
            }
        };
        result = Some(new);
    }
    if incr { result.map_or(R::Nil, R::Dbl) } else { R::Int(if ch { added + changed } else { added }) }
}

fn zset_step(s: &Store, m: &mut BTreeMap<usize, ZModel>, op: &ZOp) -> Result<(), TestCaseError> {
    let (cmd, want) = match op {
        ZOp::Add(k, flags, pairs) => {
            let mut cmd = args(&["ZADD", KEYS[*k]]);
            for (i, f) in ZFLAGS.iter().enumerate() {
                if flags & (1 << i) != 0 {
                    cmd.push(f.to_string());
                }
            }
            for &(sc, mb) in pairs {
                cmd.push(SCORES[sc].into());
                cmd.push(ZMEMBERS[mb].into());
            }
            (cmd, model_zadd(m, *k, *flags, pairs))
        }
        ZOp::IncrBy(k, sc, mb) => {
            let want = match parse_score(SCORES[*sc]) {
                None => err("ERR value is not a valid float"),
                Some(by) => {
                    let z = m.entry(*k).or_default();
                    let new = z.scores.get(ZMEMBERS[*mb]).copied().unwrap_or(0.0) + by;
                    if new.is_nan() {
                        err("ERR resulting score is not a number (NaN)")
                    } else {
                        z.insert(ZMEMBERS[*mb], new, &SMALL);
                        R::Dbl(new)
                    }
                }
            };
            (args(&["ZINCRBY", KEYS[*k], SCORES[*sc], ZMEMBERS[*mb]]), want)
        }
        ZOp::Rem(k, ms) => {
            let mut cmd = args(&["ZREM", KEYS[*k]]);
            let mut gone = 0;
            for &mb in ms {
                cmd.push(ZMEMBERS[mb].into());
                if m.get_mut(k).is_some_and(|z| z.scores.remove(ZMEMBERS[mb]).is_some()) {
                    gone += 1;
                }
            }
            (cmd, R::Int(gone))
        }
        ZOp::Score(k, mb) => {
            let want = m.get(k).and_then(|z| z.scores.get(ZMEMBERS[*mb])).map_or(R::Nil, |s| R::Dbl(*s));
            (args(&["ZSCORE", KEYS[*k], ZMEMBERS[*mb]]), want)
        }
        ZOp::Rank(k, mb) => {
            let want = m
                .get(k)
                .and_then(|z| z.ordered().iter().position(|(x, _)| x == ZMEMBERS[*mb]))
                .map_or(R::Nil, |r| R::Int(r as i64));
            (args(&["ZRANK", KEYS[*k], ZMEMBERS[*mb]]), want)
        }
        ZOp::RangeRank { k, start, stop, rev, ws } => {
            let mut items = m.get(k).map(ZModel::ordered).unwrap_or_default();
            if *rev {
                items.reverse();
            }
            let items = match model_range(items.len(), *start, *stop) {
                Some((a, b)) => items[a..=b].to_vec(),
                None => vec![],
            };
            let mut cmd = args(&["ZRANGE", KEYS[*k], &start.to_string(), &stop.to_string()]);
            if *rev {
                cmd.push("REV".into());
            }
            if *ws {
                cmd.push("WITHSCORES".into());
            }
            (cmd, members_reply(&items, *ws))
        }
        ZOp::RangeScore { k, min, max, rev, limit, ws } => {
            let (lo, hi) = (bound(SCORE_BOUNDS[*min]), bound(SCORE_BOUNDS[*max]));
            let mut items: Vec<(String, f64)> = m
                .get(k)
                .map(ZModel::ordered)
                .unwrap_or_default()
                .into_iter()
                .filter(|(_, x)| in_score_range(*x, lo, hi))
                .collect();
            if *rev {
                items.reverse();
            }
            let items = apply_limit(items, *limit);
            // REV takes the bounds as max, min.
            let (a, b) = if *rev { (*max, *min) } else { (*min, *max) };
            let mut cmd = args(&["ZRANGE", KEYS[*k], SCORE_BOUNDS[a], SCORE_BOUNDS[b], "BYSCORE"]);
            if *rev {
                cmd.push("REV".into());
            }
            if let Some((off, n)) = limit {
                cmd.extend(["LIMIT".to_string(), off.to_string(), n.to_string()]);
            }
            if *ws {
                cmd.push("WITHSCORES".into());
            }
            (cmd, members_reply(&items, *ws))
        }
        ZOp::RangeLex { k, min, max, rev, limit } => {
            let (lo, hi) = (LEX_BOUNDS[*min], LEX_BOUNDS[*max]);
            let mut items: Vec<(String, f64)> = m
                .get(k)
                .map(ZModel::ordered)
                .unwrap_or_default()
                .into_iter()
                .filter(|(x, _)| in_lex_range(x, lo, hi))
                .collect();
            if *rev {
                items.reverse();
            }
            let items = apply_limit(items, *limit);
            let (a, b) = if *rev { (hi, lo) } else { (lo, hi) };
            let mut cmd = args(&["ZRANGE", KEYS[*k], a, b, "BYLEX"]);
            if *rev {
                cmd.push("REV".into());
            }
            if let Some((off, n)) = limit {
                cmd.extend(["LIMIT".to_string(), off.to_string(), n.to_string()]);
            }
            (cmd, members_reply(&items, false))
        }
        ZOp::Count(k, a, b) => {
            let (lo, hi) = (bound(SCORE_BOUNDS[*a]), bound(SCORE_BOUNDS[*b]));
            let n = m.get(k).map_or(0, |z| z.scores.values().filter(|x| in_score_range(**x, lo, hi)).count());
            (args(&["ZCOUNT", KEYS[*k], SCORE_BOUNDS[*a], SCORE_BOUNDS[*b]]), R::Int(n as i64))
        }
        ZOp::PopMin(k, count) => {
            let mut cmd = args(&["ZPOPMIN", KEYS[*k]]);
            if let Some(n) = count {
                cmd.push(n.to_string());
            }
            let mut popped = vec![];
            if let Some(z) = m.get_mut(k) {
                for (mb, sc) in z.ordered().into_iter().take(count.unwrap_or(1)) {
                    z.scores.remove(&mb);
                    popped.push((mb, sc));
                }
            }
            (cmd, members_reply(&popped, true))
        }
        ZOp::RemRangeByScore(k, a, b) => {
            let (lo, hi) = (bound(SCORE_BOUNDS[*a]), bound(SCORE_BOUNDS[*b]));
            let mut gone = 0;
            if let Some(z) = m.get_mut(k) {
                let before = z.scores.len();
                z.scores.retain(|_, x| !in_score_range(*x, lo, hi));
                gone = before - z.scores.len();
            }
            (args(&["ZREMRANGEBYSCORE", KEYS[*k], SCORE_BOUNDS[*a], SCORE_BOUNDS[*b]]), R::Int(gone as i64))
        }
    };
    m.retain(|_, z| !z.scores.is_empty());
    check(s, &cmd, want, false)
}

fn zset_dump(k: &str) -> Vec<String> {
    args(&["ZRANGE", k, "0", "-1", "WITHSCORES"])
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn sorted_sets_follow_the_model(ops in prop::collection::vec(zset_op(), 1..200)) {
        let clock = ManualClock::new(T0);
        let s = new_store(&clock);
        let mut m = BTreeMap::new();
        for op in &ops {
            zset_step(&s, &mut m, op)?;
        }
        for (k, key) in KEYS.iter().enumerate() {
            let want = members_reply(&m.get(&k).map(ZModel::ordered).unwrap_or_default(), true);
            check(&s, &zset_dump(key), want, false)?;
            check_encoding(&s, key, m.get(&k).map(ZModel::encoding))?;
        }
        check_round_trips(&s, &clock, ValueType::ZSet, zset_dump, |r| r)?;
    }
}
