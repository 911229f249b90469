//! Replies ↔ Lua values, with Redis 7.0's rules (`luaReplyToRedisReply` and the RESP → Lua
//! conversion of `redis.call`'s result).
//!
//! A command's reply reaches a script in the protocol the script chose with `redis.setresp`
//! (RESP2 unless it asked for 3): a null is `false` in RESP2 and `nil` in RESP3, a map is a flat
//! array in RESP2 and `{map={...}}` in RESP3, a double a string or `{double=n}`. The script's own
//! return value becomes a reply for the client: tables with an `err`, `ok`, `double`,
//! `big_number`, `map`, `set` or `verbatim_string` field are those reply types, other tables are
//! arrays up to their first nil, numbers are integers (truncated as C casts a double), `true` is
//! 1 and `false` a null (a RESP3 boolean once the script chose RESP3).

use bytes::Bytes;
use mlua::{Lua, Table, Value};
use shoal_wire::proto::{Frame, frame::Kind};

pub use crate::commands::fmt_g;
use crate::commands::{F, fmt_g17, raw_frame};

/// Redis converts a script's return value with the table being converted on top of the Lua
/// stack and each nested value pushed above it; a value the stack has no room for (Lua 5.1's
/// `LUAI_MAXCSTACK`, checked for 4 more slots) becomes the error `reached lua stack limit` in
/// its place, and the conversion goes on with the next one. These say how many slots each step
/// takes, so the same value fails at the same place as in Redis 7.0 (measured there: 7,995 nested
/// arrays, 2,665 nested maps or sets).
mod stack {
    /// Lua 5.1's limit on a C function's stack.
    pub const LIMIT: usize = 8000;
    /// Slots in use when the conversion starts (the return value and the error handler).
    pub const START: usize = 2;
    /// An array's element (its index looked up: the element above the table).
    pub const ELEMENT: usize = 1;
    /// A map's key (the `map` table, the iteration's key and value, the key copied to convert).
    pub const MAP_KEY: usize = 4;
    /// A map's value (the copy of the key consumed).
    pub const MAP_VALUE: usize = 3;
    /// A set's member (the `set` table, the key, the key copied; the `true` dropped).
    pub const SET_MEMBER: usize = 3;
    /// What this conversion may hold of references to the tables it is inside of (an array's
    /// element one, a map's table, key and value three, a set's table and member two): the
    /// engine keeps them in a Lua thread's stack, whose 8,000 slots it shares with its own, and
    /// past them a lookup silently comes back empty. So a table nesting itself ends a few levels
    /// sooner than in Redis (docs/compatibility.md).
    pub const REFS: usize = 7_700;
}

/// A command's reply as `redis.call` returns it. An error reply is `{err=...}`.
pub fn frame_to_lua(lua: &Lua, f: &Frame, resp3: bool) -> mlua::Result<Value> {
    Ok(match &f.kind {
        Some(Kind::Bulk(b)) => Value::String(lua.create_string(b)?),
        Some(Kind::Int(n)) => Value::Number(*n as f64),
        Some(Kind::Simple(s)) => status_table(lua, s.as_bytes())?,
        Some(Kind::Error(e)) => error_table(lua, e)?,
        Some(Kind::Nil(_) | Kind::NullArray(_)) | None => {
            if resp3 {
                Value::Nil
            } else {
                Value::Boolean(false)
            }
        }
        Some(Kind::Array(items)) => array(lua, items.items.iter().map(|i| frame_to_lua(lua, i, resp3)))?,
        Some(Kind::Pairs(items)) if !resp3 => {
            array(lua, items.items.iter().map(|i| frame_to_lua(lua, i, resp3)))?
        }
        Some(Kind::Pairs(items)) => {
            let t = lua.create_table_with_capacity(items.items.len() / 2, 0)?;
            for (i, pair) in items.items.chunks(2).enumerate() {
                t.raw_set(i + 1, array(lua, pair.iter().map(|p| frame_to_lua(lua, p, resp3)))?)?;
            }
            Value::Table(t)
        }
        Some(Kind::Map(items) | Kind::Keyed(items)) if resp3 => {
            let map = lua.create_table()?;
            for pair in items.items.chunks(2) {
                if let [k, v] = pair {
                    map.raw_set(frame_to_lua(lua, k, resp3)?, frame_to_lua(lua, v, resp3)?)?;
                }
            }
            wrapped(lua, "map", Value::Table(map))?
        }
        Some(Kind::Keyed(items)) => {
            let t = lua.create_table_with_capacity(items.items.len() / 2, 0)?;
            for (i, pair) in items.items.chunks(2).enumerate() {
                t.raw_set(i + 1, array(lua, pair.iter().map(|p| frame_to_lua(lua, p, resp3)))?)?;
            }
            Value::Table(t)
        }
        Some(Kind::Set(items)) if resp3 => {
            let set = lua.create_table()?;
            for item in &items.items {
                set.raw_set(frame_to_lua(lua, item, resp3)?, true)?;
            }
            wrapped(lua, "set", Value::Table(set))?
        }
        Some(Kind::Map(items) | Kind::Set(items)) => {
            array(lua, items.items.iter().map(|i| frame_to_lua(lua, i, resp3)))?
        }
        Some(Kind::Double(text)) if resp3 => {
            let n: f64 = std::str::from_utf8(text).ok().and_then(|s| s.parse().ok()).unwrap_or(f64::NAN);
            wrapped(lua, "double", Value::Number(n))?
        }
        Some(Kind::Double(text)) => Value::String(lua.create_string(text)?),
        Some(Kind::Boolean(b)) if resp3 => Value::Boolean(*b),
        Some(Kind::Boolean(b)) => Value::Number(if *b { 1.0 } else { 0.0 }),
        Some(Kind::BigNumber(n)) if resp3 => {
            wrapped(lua, "big_number", Value::String(lua.create_string(n)?))?
        }
        Some(Kind::BigNumber(n)) => Value::String(lua.create_string(n)?),
        Some(Kind::Verbatim(v)) if resp3 && v.len() >= 4 => {
            let t = lua.create_table()?;
            t.raw_set("format", lua.create_string(&v[..3])?)?;
            t.raw_set("string", lua.create_string(&v[4..])?)?;
            wrapped(lua, "verbatim_string", Value::Table(t))?
        }
        Some(Kind::Verbatim(v)) => Value::String(lua.create_string(v.get(4..).unwrap_or_default())?),
        Some(Kind::Raw(raw)) => match raw_frame(raw) {
            Some(f) => frame_to_lua(lua, &f, resp3)?,
            None => error_table(lua, "ERR a reply the script engine cannot read")?,
        },
    })
}

fn array(lua: &Lua, items: impl ExactSizeIterator<Item = mlua::Result<Value>>) -> mlua::Result<Value> {
    let t = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, item) in items.enumerate() {
        t.raw_set(i + 1, item?)?;
    }
    Ok(Value::Table(t))
}

fn wrapped(lua: &Lua, field: &str, v: Value) -> mlua::Result<Value> {
    let t = lua.create_table_with_capacity(0, 1)?;
    t.raw_set(field, v)?;
    Ok(Value::Table(t))
}

/// `{ok=text}`, a status reply.
pub fn status_table(lua: &Lua, text: &[u8]) -> mlua::Result<Value> {
    wrapped(lua, "ok", Value::String(lua.create_string(text)?))
}

/// `{err=text}`: an error reply as a script sees it (`text` is `CODE message`).
pub fn error_table(lua: &Lua, text: &str) -> mlua::Result<Value> {
    wrapped(lua, "err", Value::String(lua.create_string(text)?))
}

/// The client's reply for a script's return value. `script_resp3`: the script chose RESP3
/// (`redis.setresp(3)`), which makes booleans real booleans.
pub fn lua_to_frame(v: &Value, script_resp3: bool) -> Frame {
    to_frame(v, script_resp3, stack::START, 0)
}

/// `v` as a reply; `depth`: the Lua stack slots Redis would have in use with `v` on top; `refs`:
/// the references this conversion holds to the tables `v` is inside of.
fn to_frame(v: &Value, script_resp3: bool, depth: usize, refs: usize) -> Frame {
    if depth + 4 > stack::LIMIT || refs > stack::REFS {
        return stack_limit();
    }
    match v {
        Value::String(s) => F::bulk(Bytes::copy_from_slice(&s.as_bytes())),
        Value::Integer(n) => F::int(*n),
        Value::Number(n) => F::int(c_cast(*n)),
        Value::Boolean(b) if script_resp3 => Frame { kind: Some(Kind::Boolean(*b)) },
        Value::Boolean(true) => F::int(1),
        Value::Table(t) => table_to_frame(t, script_resp3, depth, refs),
        _ => F::nil(),
    }
}

fn table_to_frame(t: &Table, script_resp3: bool, depth: usize, refs: usize) -> Frame {
    let field = |name: &str| t.raw_get::<Value>(name).unwrap_or(Value::Nil);
    if let Value::String(e) = field("err") {
        return F::error(String::from_utf8_lossy(&e.as_bytes()).into_owned());
    }
    if let Value::String(s) = field("ok") {
        return Frame { kind: Some(Kind::Simple(String::from_utf8_lossy(&s.as_bytes()).into_owned())) };
    }
    match field("double") {
        Value::Number(n) => return Frame { kind: Some(Kind::Double(format_double(n).into())) },
        Value::Integer(n) => return Frame { kind: Some(Kind::Double(format_double(n as f64).into())) },
        _ => {}
    }
    if let Value::String(s) = field("big_number") {
        return Frame { kind: Some(Kind::BigNumber(Bytes::copy_from_slice(&s.as_bytes()))) };
    }
    if let Value::Table(map) = field("map") {
        let mut items = Vec::new();
        let walked = map.for_each(|k: Value, v: Value| {
            items.push(to_frame(&k, script_resp3, depth + stack::MAP_KEY, refs + 3));
            items.push(to_frame(&v, script_resp3, depth + stack::MAP_VALUE, refs + 3));
            Ok(())
        });
        return if walked.is_ok() { F::map(items) } else { stack_limit() };
    }
    if let Value::Table(set) = field("set") {
        let mut items = Vec::new();
        let walked = set.for_each(|k: Value, _: Value| {
            items.push(to_frame(&k, script_resp3, depth + stack::SET_MEMBER, refs + 2));
            Ok(())
        });
        return if walked.is_ok() { F::set(items) } else { stack_limit() };
    }
    if let Value::Table(v) = field("verbatim_string")
        && let (Ok(Value::String(format)), Ok(Value::String(s))) =
            (v.raw_get::<Value>("format"), v.raw_get::<Value>("string"))
    {
        let mut text = format.as_bytes().to_vec();
        text.push(b':');
        text.extend_from_slice(&s.as_bytes());
        return Frame { kind: Some(Kind::Verbatim(text.into())) };
    }
    let mut items = Vec::new();
    for i in 1.. {
        match t.raw_get::<Value>(i) {
            Ok(Value::Nil) => break,
            Ok(v) => items.push(to_frame(&v, script_resp3, depth + stack::ELEMENT, refs + 1)),
            Err(_) => {
                items.push(stack_limit());
                break;
            }
        }
    }
    F::array(items)
}

/// What stands in for a value too deep to convert: Redis's text (see [`stack`]).
fn stack_limit() -> Frame {
    F::error("ERR reached lua stack limit".to_string())
}

/// A double as Redis replies with it (`%.17g`; NaN with its sign, as glibc prints it).
pub fn format_double(n: f64) -> String {
    if n.is_nan() {
        return if n.is_sign_negative() { "-nan".into() } else { "nan".into() };
    }
    fmt_g17(n)
}

/// A double converted to `long long` the way x86-64 does it (Redis casts a Lua number so):
/// truncated toward zero, and anything out of range (NaN, infinities) becomes `i64::MIN`.
pub fn c_cast(n: f64) -> i64 {
    // 2^63: the first double past i64::MAX (and -2^63 is i64::MIN itself).
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if !(-TWO_63..TWO_63).contains(&n) { i64::MIN } else { n as i64 }
}

/// A Lua number as `redis.call` passes it to a command (`%.17g`).
pub fn number_arg(n: f64) -> Bytes {
    Bytes::from(format_double(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_convert_as_c_does() {
        assert_eq!(c_cast(3.99), 3);
        assert_eq!(c_cast(-3.99), -3);
        assert_eq!(c_cast(f64::INFINITY), i64::MIN);
        assert_eq!(c_cast(f64::NAN), i64::MIN);
        assert_eq!(c_cast(2f64.powi(63)), i64::MIN);
        assert_eq!(c_cast(-(2f64.powi(63))), i64::MIN);
        assert_eq!(number_arg(0.1), "0.10000000000000001");
        assert_eq!(number_arg(3.0), "3");
        assert_eq!(number_arg(1e20), "1e+20");
        assert_eq!(number_arg(-0.0), "-0");
        assert_eq!(number_arg(f64::INFINITY), "inf");
        assert_eq!(format_double(-f64::NAN), "-nan");
    }

    #[test]
    fn replies_round_trip_through_lua() {
        let lua = Lua::new();
        let reply = F::array(vec![F::bulk(Bytes::from("a")), F::int(2), F::nil(), F::error("ERR x".into())]);
        let v = frame_to_lua(&lua, &reply, false).unwrap();
        let Value::Table(t) = &v else { panic!("an array is a table") };
        assert_eq!(t.raw_get::<Value>(3).unwrap(), Value::Boolean(false), "RESP2 null is false");
        let back = lua_to_frame(&v, false);
        assert_eq!(back, reply.clone(), "what a script passes back unchanged is the same reply");
        let map = F::map(vec![F::bulk(Bytes::from("k")), F::bulk(Bytes::from("v"))]);
        let v = frame_to_lua(&lua, &map, true).unwrap();
        assert_eq!(lua_to_frame(&v, true), map, "RESP3 maps stay maps");
        let v = frame_to_lua(&lua, &map, false).unwrap();
        assert_eq!(
            lua_to_frame(&v, false),
            F::array(vec![F::bulk(Bytes::from("k")), F::bulk(Bytes::from("v"))]),
            "RESP2 maps are flat arrays"
        );
    }
}
