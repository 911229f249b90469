//! The `cmsgpack` library scripts know from Redis (lua-cmsgpack 0.4.0, as Redis 7.0 builds it on
//! Lua 5.1): `cmsgpack.pack(...)`, `cmsgpack.unpack(s)`, `cmsgpack.unpack_one(s [, offset])` and
//! `cmsgpack.unpack_limit(s, limit [, offset])`, byte for byte: numbers that are whole 64-bit
//! values as the smallest MessagePack integer, others as a float32 when that is exact, else a
//! float64; strings as fixstr/str8/str16/str32; tables whose keys are exactly 1..n as arrays,
//! others as maps in table order; tables nested 16 deep, functions and other values as nil.
//! Job queues (BullMQ packs its job options with it) depend on these bytes.

use mlua::{Lua, MultiValue, Table, Value, Variadic};

use super::cjson::at_caller;

/// Tables nested deeper than this are packed as nil (lua-cmsgpack's guard against cycles).
const MAX_NESTING: usize = 16;

pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set(
        "pack",
        lua.create_function(|lua, args: Variadic<Value>| {
            if args.is_empty() {
                return Err(at_caller(lua, "bad argument #0 to 'pack' (MessagePack pack needs input.)"));
            }
            let mut out = Vec::new();
            for v in args.iter() {
                encode(v, &mut out, 0)?;
            }
            lua.create_string(out)
        })?,
    )?;
    t.raw_set(
        "unpack",
        lua.create_function(|lua, args: Variadic<Value>| unpack(lua, &args, "unpack", 0, 0))?,
    )?;
    t.raw_set(
        "unpack_one",
        lua.create_function(|lua, args: Variadic<Value>| {
            let offset = opt_int(lua, &args, 2, "unpack_one")?;
            unpack(lua, &args, "unpack_one", 1, offset)
        })?,
    )?;
    t.raw_set(
        "unpack_limit",
        lua.create_function(|lua, args: Variadic<Value>| {
            let limit = match args.get(1).and_then(number) {
                Some(n) => n as i64,
                None => {
                    let got = args.get(1).map_or("no value", |v| v.type_name());
                    return Err(at_caller(
                        lua,
                        &format!("bad argument #2 to 'unpack_limit' (number expected, got {got})"),
                    ));
                }
            };
            let offset = opt_int(lua, &args, 3, "unpack_limit")?;
            unpack(lua, &args, "unpack_limit", limit, offset)
        })?,
    )?;
    t.raw_set("_NAME", "cmsgpack")?;
    t.raw_set("_VERSION", "lua-cmsgpack 0.4.0")?;
    t.raw_set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
    t.raw_set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    Ok(t)
}

fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(i) => Some(*i as f64),
        Value::Number(n) => Some(*n),
        Value::String(s) => std::str::from_utf8(&s.as_bytes()).ok().and_then(|t| t.trim().parse().ok()),
        _ => None,
    }
}

/// `luaL_optinteger`: absent or nil is 0; a number is truncated.
fn opt_int(lua: &Lua, args: &[Value], n: usize, name: &str) -> mlua::Result<i64> {
    match args.get(n - 1) {
        None | Some(Value::Nil) => Ok(0),
        Some(v) => number(v).map(|x| x as i64).ok_or_else(|| {
            at_caller(lua, &format!("bad argument #{n} to '{name}' (number expected, got {})", v.type_name()))
        }),
    }
}

// --- packing -------------------------------------------------------------------------------------

fn encode(v: &Value, out: &mut Vec<u8>, level: usize) -> mlua::Result<()> {
    match v {
        Value::String(s) => bytes(&s.as_bytes(), out),
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(i) => lua_number(*i as f64, out),
        Value::Number(n) => lua_number(*n, out),
        Value::Table(t) if level < MAX_NESTING => table(t, out, level)?,
        _ => out.push(0xc0),
    }
    Ok(())
}

fn bytes(s: &[u8], out: &mut Vec<u8>) {
    let n = s.len();
    if n < 32 {
        out.push(0xa0 | n as u8);
    } else if n <= 0xff {
        out.extend_from_slice(&[0xd9, n as u8]);
    } else if n <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    out.extend_from_slice(s);
}

/// A Lua 5.1 number: an integer when it is a whole value a 64-bit integer holds (C's
/// `(int64_t)x == x`, where an out-of-range conversion never compares equal), else a float.
fn lua_number(n: f64, out: &mut Vec<u8>) {
    if (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&n) && (n as i64) as f64 == n {
        int(n as i64, out);
    } else if (n as f32) as f64 == n {
        out.push(0xca);
        out.extend_from_slice(&(n as f32).to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn int(n: i64, out: &mut Vec<u8>) {
    if n >= 0 {
        match n {
            0..=127 => out.push(n as u8),
            128..=0xff => out.extend_from_slice(&[0xcc, n as u8]),
            0x100..=0xffff => {
                out.push(0xcd);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            0x1_0000..=0xffff_ffff => {
                out.push(0xce);
                out.extend_from_slice(&(n as u32).to_be_bytes());
            }
            _ => {
                out.push(0xcf);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
    } else if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as i8 as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= -2_147_483_648 {
        out.push(0xd2);
        out.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn length(out: &mut Vec<u8>, n: usize, fix: u8, b16: u8, b32: u8) {
    if n <= 15 {
        out.push(fix | n as u8);
    } else if n <= 0xffff {
        out.push(b16);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(b32);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

/// lua-cmsgpack's `table_is_an_array` (keys that are all whole numbers from 1 with none missing;
/// an empty table is an array), then the array or the map.
fn table(t: &Table, out: &mut Vec<u8>, level: usize) -> mlua::Result<()> {
    let mut pairs = Vec::new();
    for pair in t.clone().pairs::<Value, Value>() {
        pairs.push(pair?);
    }
    let (mut count, mut max, mut array) = (0i64, 0i64, true);
    for (k, _) in &pairs {
        let n = match k {
            Value::Integer(i) => *i as f64,
            Value::Number(n) => *n,
            _ => {
                array = false;
                break;
            }
        };
        // C's `IS_INT_EQUIVALENT` (an `int`) and `n > 0`.
        if n <= 0.0 || !n.is_finite() || n > f64::from(i32::MAX) || (n as i32) as f64 != n {
            array = false;
            break;
        }
        max = max.max(n as i64);
        count += 1;
    }
    if array && max == count {
        length(out, pairs.len(), 0x90, 0xdc, 0xdd);
        for i in 1..=pairs.len() {
            encode(&t.raw_get::<Value>(i)?, out, level + 1)?;
        }
    } else {
        length(out, pairs.len(), 0x80, 0xde, 0xdf);
        for (k, v) in &pairs {
            encode(k, out, level + 1)?;
            encode(v, out, level + 1)?;
        }
    }
    Ok(())
}

// --- unpacking -----------------------------------------------------------------------------------

enum Fail {
    Eof,
    BadFormat,
}

struct Cursor<'a> {
    s: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Fail> {
        let end = self.at.checked_add(n).ok_or(Fail::Eof)?;
        let b = self.s.get(self.at..end).ok_or(Fail::Eof)?;
        self.at = end;
        Ok(b)
    }

    fn be(&mut self, n: usize) -> Result<u64, Fail> {
        Ok(self.take(n)?.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    }
}

fn unpack(lua: &Lua, args: &[Value], name: &str, limit: i64, offset: i64) -> mlua::Result<MultiValue> {
    let s = match args.first() {
        Some(Value::String(s)) => s.as_bytes().to_vec(),
        // A number is taken as its text, as `luaL_checklstring` does (`%.14g`).
        Some(Value::Integer(i)) => crate::commands::fmt_g(*i as f64, 14).into_bytes(),
        Some(Value::Number(n)) => crate::commands::fmt_g(*n, 14).into_bytes(),
        other => {
            let got = other.map_or("no value", |v| v.type_name());
            return Err(at_caller(lua, &format!("bad argument #1 to '{name}' (string expected, got {got})")));
        }
    };
    let len = s.len() as i64;
    if offset < 0 || limit < 0 {
        let msg = format!(
            "Invalid request to unpack with offset of {} and limit of {}.",
            offset as i32, len as i32
        );
        return Err(at_caller(lua, &msg));
    }
    if offset > len {
        let msg = format!("Start offset {} greater than input length {}.", offset as i32, len as i32);
        return Err(at_caller(lua, &msg));
    }
    let all = limit == 0 && offset == 0;
    let limit = if all { i64::from(i32::MAX) } else { limit };
    let mut c = Cursor { s: &s, at: offset as usize };
    let mut values = Vec::new();
    while c.at < s.len() && (values.len() as i64) < limit {
        match decode(lua, &mut c, 0) {
            Ok(v) => values.push(v),
            Err(Fail::Eof) => return Err(at_caller(lua, "Missing bytes in input.")),
            Err(Fail::BadFormat) => return Err(at_caller(lua, "Bad data format in input.")),
        }
    }
    if !all {
        let next = if c.at == s.len() { -1.0 } else { c.at as f64 };
        values.insert(0, Value::Number(next));
    }
    Ok(MultiValue::from_iter(values))
}

/// An unsigned value as lua-cmsgpack pushes it on 64-bit Lua 5.1: as a signed integer, then a
/// double.
fn unsigned(u: u64) -> Value {
    Value::Number(u as i64 as f64)
}

fn decode(lua: &Lua, c: &mut Cursor<'_>, depth: usize) -> Result<Value, Fail> {
    // Far deeper than any real document; bounds the recursion on hostile input.
    if depth > 10_000 {
        return Err(Fail::BadFormat);
    }
    let b = c.take(1)?[0];
    let str = |c: &mut Cursor<'_>, n: usize| -> Result<Value, Fail> {
        let bytes = c.take(n)?;
        lua.create_string(bytes).map(Value::String).map_err(|_| Fail::BadFormat)
    };
    Ok(match b {
        0xcc => unsigned(c.be(1)?),
        0xd0 => Value::Number(f64::from(c.take(1)?[0] as i8)),
        0xcd => unsigned(c.be(2)?),
        0xd1 => Value::Number(f64::from(c.be(2)? as u16 as i16)),
        0xce => unsigned(c.be(4)?),
        0xd2 => Value::Number(f64::from(c.be(4)? as u32 as i32)),
        0xcf => unsigned(c.be(8)?),
        0xd3 => Value::Number(c.be(8)? as i64 as f64),
        0xc0 => Value::Nil,
        0xc3 => Value::Boolean(true),
        0xc2 => Value::Boolean(false),
        0xca => Value::Number(f64::from(f32::from_bits(c.be(4)? as u32))),
        0xcb => Value::Number(f64::from_bits(c.be(8)?)),
        0xd9 => {
            let n = c.be(1)? as usize;
            str(c, n)?
        }
        0xda => {
            let n = c.be(2)? as usize;
            str(c, n)?
        }
        0xdb => {
            let n = c.be(4)? as usize;
            str(c, n)?
        }
        0xdc => {
            let n = c.be(2)? as usize;
            array(lua, c, n, depth)?
        }
        0xdd => {
            let n = c.be(4)? as usize;
            array(lua, c, n, depth)?
        }
        0xde => {
            let n = c.be(2)? as usize;
            map(lua, c, n, depth)?
        }
        0xdf => {
            let n = c.be(4)? as usize;
            map(lua, c, n, depth)?
        }
        _ if b & 0x80 == 0 => Value::Number(f64::from(b)),
        _ if b & 0xe0 == 0xe0 => Value::Number(f64::from(b as i8)),
        _ if b & 0xe0 == 0xa0 => str(c, usize::from(b & 0x1f))?,
        _ if b & 0xf0 == 0x90 => array(lua, c, usize::from(b & 0xf), depth)?,
        _ if b & 0xf0 == 0x80 => map(lua, c, usize::from(b & 0xf), depth)?,
        _ => return Err(Fail::BadFormat),
    })
}

fn array(lua: &Lua, c: &mut Cursor<'_>, n: usize, depth: usize) -> Result<Value, Fail> {
    let t = lua.create_table().map_err(|_| Fail::BadFormat)?;
    for i in 1..=n {
        let v = decode(lua, c, depth + 1)?;
        t.raw_set(i, v).map_err(|_| Fail::BadFormat)?;
    }
    Ok(Value::Table(t))
}

fn map(lua: &Lua, c: &mut Cursor<'_>, n: usize, depth: usize) -> Result<Value, Fail> {
    let t = lua.create_table().map_err(|_| Fail::BadFormat)?;
    for _ in 0..n {
        let k = decode(lua, c, depth + 1)?;
        let v = decode(lua, c, depth + 1)?;
        // A nil or NaN key cannot index a table (Lua raises; a bad document here).
        if matches!(k, Value::Nil) || matches!(k, Value::Number(x) if x.is_nan()) {
            return Err(Fail::BadFormat);
        }
        t.raw_set(k, v).map_err(|_| Fail::BadFormat)?;
    }
    Ok(Value::Table(t))
}
