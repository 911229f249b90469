//! GEO commands on sorted sets, as Redis 7.0 runs them (`geo.c`): GEOADD (a ZADD of geohash
//! scores), GEODIST, GEOHASH, GEOPOS, and the searches GEOSEARCH, GEOSEARCHSTORE, GEORADIUS,
//! GEORADIUSBYMEMBER and their `_RO` forms. The arithmetic is in [`super::geohash`]; this file
//! parses arguments with Redis's rules and texts and shapes the replies.
//!
//! The searches run as multi-key commands (their STORE key is a second key): [`SEARCHES`] gives
//! the node's command index their handlers and how to find their keys.

use bytes::Bytes;
use shoal_wire::proto::Frame;

use super::args::int_arg;
use super::double::{not_float, parse_score};
use super::error::{CmdError, CmdResult, SYNTAX};
use super::frame::F;
use super::geohash::{self, Search, Shape};
use super::multi::{self, KeysOf, first_two, store_object};
use super::zset::{read, zadd};
use crate::store::object::{Object, ValueType, ZSet};
use crate::store::{Locked, Store};

type Handler = fn(&Store, &[Bytes]) -> CmdResult;

/// The one-key commands of this family by name (lower case), for the node's command index.
pub static TABLE: &[(&str, Handler)] =
    &[("geoadd", geoadd), ("geodist", geodist), ("geohash", geohash_command), ("geopos", geopos)];

/// The searches, with how to find their keys (the source, and the key a STORE names).
pub static SEARCHES: &[(&str, (KeysOf, multi::Handler))] = &[
    ("georadius", (radius_keys, |l, a| search(l, a, Form::Radius { member: false, nostore: false }))),
    ("georadius_ro", (first_key, |l, a| search(l, a, Form::Radius { member: false, nostore: true }))),
    ("georadiusbymember", (radius_keys, |l, a| search(l, a, Form::Radius { member: true, nostore: false }))),
    ("georadiusbymember_ro", (first_key, |l, a| search(l, a, Form::Radius { member: true, nostore: true }))),
    ("geosearch", (first_key, |l, a| search(l, a, Form::Search { store: false }))),
    ("geosearchstore", (first_two, |l, a| search(l, a, Form::Search { store: true }))),
];

fn first_key(args: &[Bytes]) -> Result<Vec<Bytes>, CmdError> {
    Ok(vec![args[1].clone()])
}

/// GEORADIUS's source and the key its STORE/STOREDIST option names, found as its parser finds
/// it (`shoal_wire::acl::commands::georadius_store`).
fn radius_keys(args: &[Bytes]) -> Result<Vec<Bytes>, CmdError> {
    let mut keys = vec![args[1].clone()];
    keys.extend(shoal_wire::acl::commands::georadius_store(args).map(|i| args[i].clone()));
    Ok(keys)
}

// --- arguments ---------------------------------------------------------------------------------

fn float(b: &[u8], text: &'static str) -> Result<f64, CmdError> {
    parse_score(b).ok_or(CmdError::Text(text))
}

/// A longitude and a latitude, checked as indexable.
fn lon_lat(lon: &[u8], lat: &[u8]) -> Result<(f64, f64), CmdError> {
    let lon = parse_score(lon).ok_or_else(not_float)?;
    let lat = parse_score(lat).ok_or_else(not_float)?;
    if !geohash::valid(lon, lat) {
        return Err(CmdError::Owned(format!("ERR invalid longitude,latitude pair {lon:.6},{lat:.6}")));
    }
    Ok((lon, lat))
}

/// Meters per unit.
fn unit(u: &[u8]) -> Result<f64, CmdError> {
    Ok(match u.to_ascii_lowercase().as_slice() {
        b"m" => 1.0,
        b"km" => 1000.0,
        b"ft" => 0.3048,
        b"mi" => 1609.34,
        _ => return Err(CmdError::Text("ERR unsupported unit provided. please use M, KM, FT, MI")),
    })
}

/// `radius unit`: the radius and meters per unit.
fn radius(r: &[u8], u: &[u8]) -> Result<(f64, f64), CmdError> {
    let r = float(r, "ERR need numeric radius")?;
    if r < 0.0 {
        return Err(CmdError::Text("ERR radius cannot be negative"));
    }
    Ok((r, unit(u)?))
}

/// `width height unit`.
fn rectangle(w: &[u8], h: &[u8], u: &[u8]) -> Result<(Shape, f64), CmdError> {
    let width = float(w, "ERR need numeric width")?;
    let height = float(h, "ERR need numeric height")?;
    if width < 0.0 || height < 0.0 {
        return Err(CmdError::Text("ERR height or width cannot be negative"));
    }
    Ok((Shape::Box { width, height }, unit(u)?))
}

/// A member's point, from its score.
fn member_point(z: &ZSet, m: &[u8]) -> Option<(f64, f64)> {
    geohash::decode_score(z.score(m)?)
}

// --- GEOADD, GEODIST, GEOHASH, GEOPOS ----------------------------------------------------------

/// GEOADD's arguments as the ZADD Redis runs in its place: `zadd key [NX|XX] [CH] score member
/// ...` with each point's geohash as its score. Also what keyspace notifications look at (GEOADD
/// raises ZADD's events).
pub fn as_zadd(args: &[Bytes]) -> Result<Vec<Bytes>, CmdError> {
    let mut first = 2;
    let (mut nx, mut xx) = (false, false);
    while let Some(a) = args.get(first) {
        if a.eq_ignore_ascii_case(b"nx") {
            nx = true;
        } else if a.eq_ignore_ascii_case(b"xx") {
            xx = true;
        } else if !a.eq_ignore_ascii_case(b"ch") {
            break;
        }
        first += 1;
    }
    if !(args.len() - first).is_multiple_of(3) || (nx && xx) {
        return Err(SYNTAX);
    }
    let mut out = Vec::with_capacity(first + (args.len() - first) / 3 * 2);
    out.push(Bytes::from_static(b"zadd"));
    out.extend(args[1..first].iter().cloned());
    for point in args[first..].chunks(3) {
        let (lon, lat) = lon_lat(&point[0], &point[1])?;
        let score = geohash::score_of(lon, lat).expect("a valid point encodes");
        out.push(Bytes::from(score.to_string()));
        out.push(point[2].clone());
    }
    Ok(out)
}

fn geoadd(store: &Store, args: &[Bytes]) -> CmdResult {
    zadd(store, &as_zadd(args)?)
}

fn geodist(store: &Store, args: &[Bytes]) -> CmdResult {
    let to_meters = match args.len() {
        4 => 1.0,
        5 => unit(&args[4])?,
        _ => return Err(SYNTAX),
    };
    read(store, &args[1], |z| {
        let (Some(a), Some(b)) =
            (z.and_then(|z| member_point(z, &args[2])), z.and_then(|z| member_point(z, &args[3])))
        else {
            return F::nil();
        };
        F::bulk(distance_text(geohash::distance(a.0, a.1, b.0, b.1) / to_meters))
    })
}

fn geohash_command(store: &Store, args: &[Bytes]) -> CmdResult {
    read(store, &args[1], |z| {
        let hashes =
            args[2..].iter().map(|m| match z.and_then(|z| z.score(m)).and_then(geohash::geohash_string) {
                Some(h) => F::bulk_from(&h),
                None => F::nil(),
            });
        F::array(hashes.collect())
    })
}

fn geopos(store: &Store, args: &[Bytes]) -> CmdResult {
    read(store, &args[1], |z| {
        let points = args[2..].iter().map(|m| match z.and_then(|z| member_point(z, m)) {
            Some((lon, lat)) => F::array(vec![coordinate(lon), coordinate(lat)]),
            None => F::null_array(),
        });
        F::array(points.collect())
    })
}

/// A distance as Redis replies with it: four decimals, rounded half to even.
fn distance_text(d: f64) -> String {
    if d == 0.0 {
        return "0.0000".into();
    }
    let n = (d * 10000.0).round_ties_even() as i64;
    let sign = if n < 0 { "-" } else { "" };
    let n = n.unsigned_abs();
    format!("{sign}{}.{:04}", n / 10000, n % 10000)
}

/// A coordinate as Redis replies with it (`%.17Lf` less its trailing zeros): a bulk string in
/// RESP2, a double in RESP3.
fn coordinate(d: f64) -> Frame {
    let s = format!("{d:.17}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    F::double(if s == "-0" { "0".into() } else { s.to_string() })
}

// --- the searches ------------------------------------------------------------------------------

/// Which search command runs.
#[derive(Debug, Clone, Copy)]
enum Form {
    /// GEORADIUS (around coordinates) or GEORADIUSBYMEMBER (`member`); `nostore`: the `_RO` forms.
    Radius { member: bool, nostore: bool },
    /// GEOSEARCH, or GEOSEARCHSTORE (`store`).
    Search { store: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sort {
    None,
    Asc,
    Desc,
}

/// A search's options, as its arguments gave them.
struct Options {
    store: Option<usize>,
    storedist: bool,
    withdist: bool,
    withhash: bool,
    withcoord: bool,
    any: bool,
    count: usize,
    sort: Sort,
    centre: Option<(f64, f64)>,
    shape: Option<(Shape, f64)>,
    /// GEOSEARCH's FROMMEMBER, FROMLONLAT, BYRADIUS and BYBOX seen (each excludes its pair's
    /// other).
    frommember: bool,
    fromlonlat: bool,
    byradius: bool,
    bybox: bool,
}

/// One point found.
struct Point {
    member: Vec<u8>,
    score: f64,
    dist: f64,
    lon: f64,
    lat: f64,
}

/// What a search does once it has read its source.
enum Outcome {
    Reply(Frame),
    /// STORE, STOREDIST, GEOSEARCHSTORE: `args[dst]` becomes these members and scores.
    Store(usize, Vec<(Vec<u8>, f64)>),
}

fn search(l: &mut Locked<'_>, args: &[Bytes], form: Form) -> CmdResult {
    let src = if matches!(form, Form::Search { store: true }) { 2 } else { 1 };
    let outcome = l.read_object(&args[src], ValueType::ZSet, |o| {
        let z = o.map(|o| match o {
            Object::ZSet(z) => z,
            _ => unreachable!("type checked by the store"),
        });
        run_search(z, args, form)
    })??;
    match outcome {
        Outcome::Reply(f) => Ok(f),
        Outcome::Store(dst, points) => {
            let limits = l.limits();
            let mut z = ZSet::default();
            for (m, s) in &points {
                z.insert(m, *s, &limits);
            }
            store_object(l, &args[dst], Object::ZSet(z))?;
            Ok(F::int(points.len() as i64))
        }
    }
}

/// The options after a search's fixed arguments, parsed in order with Redis's rules: the first
/// bad one answers its error.
fn parse_options(
    z: Option<&ZSet>,
    args: &[Bytes],
    form: Form,
    base: usize,
    o: &mut Options,
) -> Result<(), CmdError> {
    let search = matches!(form, Form::Search { .. });
    let can_store = matches!(form, Form::Radius { nostore: false, .. });
    let mut i = base;
    while i < args.len() {
        let a = args[i].to_ascii_lowercase();
        let left = args.len() - i - 1;
        match a.as_slice() {
            b"withdist" => o.withdist = true,
            b"withhash" => o.withhash = true,
            b"withcoord" => o.withcoord = true,
            b"any" => o.any = true,
            b"asc" => o.sort = Sort::Asc,
            b"desc" => o.sort = Sort::Desc,
            b"count" if left >= 1 => {
                let n = int_arg(&args[i + 1])?;
                if n <= 0 {
                    return Err(CmdError::Text("ERR COUNT must be > 0"));
                }
                o.count = n as usize;
                i += 1;
            }
            b"store" | b"storedist" if left >= 1 && can_store => {
                o.store = Some(i + 1);
                o.storedist = a == b"storedist";
                i += 1;
            }
            b"storedist" if matches!(form, Form::Search { store: true }) => o.storedist = true,
            b"frommember" if left >= 1 && search && !o.fromlonlat => {
                o.frommember = true;
                i += 1;
                // Without a source the parse goes on, and the search answers empty.
                if let Some(z) = z {
                    let p = member_point(z, &args[i])
                        .ok_or(CmdError::Text("ERR could not decode requested zset member"))?;
                    o.centre = Some(p);
                }
            }
            b"fromlonlat" if left >= 2 && search && !o.frommember => {
                o.centre = Some(lon_lat(&args[i + 1], &args[i + 2])?);
                o.fromlonlat = true;
                i += 2;
            }
            b"byradius" if left >= 2 && search && !o.bybox => {
                let (r, conversion) = radius(&args[i + 1], &args[i + 2])?;
                o.shape = Some((Shape::Radius(r), conversion));
                o.byradius = true;
                i += 2;
            }
            b"bybox" if left >= 3 && search && !o.byradius => {
                o.shape = Some(rectangle(&args[i + 1], &args[i + 2], &args[i + 3])?);
                o.bybox = true;
                i += 3;
            }
            _ => return Err(SYNTAX),
        }
        i += 1;
    }
    Ok(())
}

/// Options with nothing given.
const NO_OPTIONS: Options = Options {
    store: None,
    storedist: false,
    withdist: false,
    withhash: false,
    withcoord: false,
    any: false,
    count: 0,
    sort: Sort::None,
    centre: None,
    shape: None,
    frommember: false,
    fromlonlat: false,
    byradius: false,
    bybox: false,
};

/// The arguments before the options (GEORADIUS's centre and radius, GEORADIUSBYMEMBER's member
/// and radius, GEOSEARCHSTORE's destination); answers where the options start.
fn fixed_args(z: Option<&ZSet>, args: &[Bytes], form: Form, o: &mut Options) -> Result<usize, CmdError> {
    Ok(match form {
        Form::Radius { member: false, .. } => {
            o.centre = Some(lon_lat(&args[2], &args[3])?);
            let (r, conversion) = radius(&args[4], &args[5])?;
            o.shape = Some((Shape::Radius(r), conversion));
            6
        }
        // Without a source the parse goes on (to know which empty answer to give).
        Form::Radius { member: true, .. } if z.is_none() => 5,
        Form::Radius { member: true, .. } => {
            let z = z.expect("checked above");
            o.centre = Some(
                member_point(z, &args[2])
                    .ok_or(CmdError::Text("ERR could not decode requested zset member"))?,
            );
            let (r, conversion) = radius(&args[3], &args[4])?;
            o.shape = Some((Shape::Radius(r), conversion));
            5
        }
        Form::Search { store: true } => {
            o.store = Some(1);
            3
        }
        Form::Search { store: false } => 2,
    })
}

/// The checks Redis makes once every option is read, in its order.
fn check_options(o: &Options, args: &[Bytes], form: Form) -> Result<(), CmdError> {
    let search_form = matches!(form, Form::Search { .. });
    if o.store.is_some() && (o.withdist || o.withhash || o.withcoord) {
        return Err(CmdError::Owned(format!(
            "ERR {} is not compatible with WITHDIST, WITHHASH and WITHCOORD options",
            if search_form { "GEOSEARCHSTORE" } else { "STORE option in GEORADIUS" }
        )));
    }
    let name = String::from_utf8_lossy(&args[0]);
    if search_form && !(o.frommember || o.fromlonlat) {
        return Err(CmdError::Owned(format!(
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}"
        )));
    }
    if search_form && !(o.byradius || o.bybox) {
        return Err(CmdError::Owned(format!(
            "ERR exactly one of BYRADIUS and BYBOX can be specified for {name}"
        )));
    }
    if o.any && o.count == 0 {
        return Err(CmdError::Text("ERR the ANY argument requires COUNT argument"));
    }
    Ok(())
}

fn run_search(z: Option<&ZSet>, args: &[Bytes], form: Form) -> Result<Outcome, CmdError> {
    let mut o = NO_OPTIONS;
    let base = fixed_args(z, args, form, &mut o)?;
    parse_options(z, args, form, base, &mut o)?;
    check_options(&o, args, form)?;
    let Some(z) = z else {
        return Ok(match o.store {
            Some(dst) => Outcome::Store(dst, Vec::new()),
            None => Outcome::Reply(F::array(Vec::new())),
        });
    };
    let ((lon, lat), (shape, conversion)) = (o.centre.expect("parsed"), o.shape.expect("parsed"));
    let search = Search { lon, lat, shape, conversion };
    if o.count != 0 && o.sort == Sort::None && !o.any {
        o.sort = Sort::Asc;
    }
    let mut points = find(z, &search, if o.any { o.count } else { 0 });
    sort(&mut points, o.sort, o.count);
    if o.count != 0 {
        points.truncate(o.count);
    }
    if let Some(dst) = o.store {
        let stored = points
            .into_iter()
            .map(|p| (p.member, if o.storedist { p.dist / conversion } else { p.score }))
            .collect();
        return Ok(Outcome::Store(dst, stored));
    }
    Ok(Outcome::Reply(reply(points, &o, conversion)))
}

/// Sorts the points found by distance as Redis does: Redis compares distances only, so points
/// at one distance keep whatever order the sort leaves them in, and that differs between its two
/// sorts (all points, or the first `count`).
fn sort(points: &mut [Point], sort: Sort, count: usize) {
    if sort == Sort::None {
        return;
    }
    let desc = sort == Sort::Desc;
    let cmp = |a: &Point, b: &Point| {
        let c = if a.dist > b.dist {
            1
        } else if a.dist == b.dist {
            0
        } else {
            -1
        };
        if desc { -c } else { c }
    };
    if count == 0 || count >= points.len() {
        // glibc's qsort, a stable merge sort.
        points.sort_by(|a, b| cmp(a, b).cmp(&0));
    } else {
        super::pqsort::partial_sort(points, &cmp, count - 1);
    }
}

/// The points as a search answers them: members, or each member with its distance, hash and
/// coordinates as asked (always in that order).
fn reply(points: Vec<Point>, o: &Options, conversion: f64) -> Frame {
    let with = [o.withdist, o.withhash, o.withcoord].iter().filter(|&&w| w).count();
    let items = points.into_iter().map(|p| {
        if with == 0 {
            return F::bulk(p.member);
        }
        let mut item = Vec::with_capacity(with + 1);
        item.push(F::bulk(p.member));
        if o.withdist {
            item.push(F::bulk(distance_text(p.dist / conversion)));
        }
        if o.withhash {
            item.push(F::int(p.score as i64));
        }
        if o.withcoord {
            item.push(F::array(vec![coordinate(p.lon), coordinate(p.lat)]));
        }
        F::array(item)
    });
    F::array(items.collect())
}

/// The members inside the search's shape, box by box in Redis's order (a box equal to the one
/// scanned before it is skipped), each box's members in score order; with `limit` (ANY), the
/// first `limit` found.
fn find(z: &ZSet, search: &Search, limit: usize) -> Vec<Point> {
    use std::ops::Bound::{Excluded, Included};
    let boxes = search.boxes();
    let mut out = Vec::new();
    let mut last: Option<usize> = None;
    let full = |out: &Vec<Point>| limit != 0 && out.len() >= limit;
    for (i, b) in boxes.iter().enumerate() {
        if *b == geohash::Hash::default() {
            continue;
        }
        // Redis compares with the box scanned last, but never with the centre's (index 0).
        if last.is_some_and(|j| j != 0 && boxes[j] == *b) {
            continue;
        }
        if full(&out) {
            break;
        }
        let (min, max) = b.score_range();
        for (m, score) in z.score_range(Included(min), Excluded(max)) {
            if let Some((lon, lat)) = geohash::decode_score(score)
                && let Some(dist) = search.within(lon, lat)
            {
                out.push(Point { member: m.to_vec(), score, dist, lon, lat });
            }
            if full(&out) {
                break;
            }
        }
        last = Some(i);
    }
    out
}
