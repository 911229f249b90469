//! The `cjson` library scripts know from Redis (lua-cjson 2.1): `cjson.encode`, `cjson.decode` and
//! `cjson.null`, with lua-cjson's rules and error texts: numbers as `%.14g`, `/` escaped, tables
//! with only positive integer keys as arrays (holes as `null`, refused when excessively sparse),
//! other tables as objects in table order, an empty table as `{}`.

use mlua::{LightUserData, Lua, Table, Value, Variadic};

use super::convert::fmt_g;

/// How deep tables may nest, both ways (lua-cjson's default).
const MAX_DEPTH: usize = 1000;
/// lua-cjson's `encode_sparse_array` defaults: ratio 2, safe 10.
const SPARSE_RATIO: usize = 2;
const SPARSE_SAFE: usize = 10;

pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let cjson = lua.create_table()?;
    cjson.raw_set(
        "encode",
        lua.create_function(|lua, v: Variadic<Value>| {
            if v.len() != 1 {
                return Err(at_caller(lua, "bad argument #1 to 'encode' (expected 1 argument)"));
            }
            let mut out = Vec::new();
            encode(&v[0], &mut out, 1).map_err(|e| at_caller(lua, &e))?;
            lua.create_string(out)
        })?,
    )?;
    cjson.raw_set(
        "decode",
        lua.create_function(|lua, v: Variadic<Value>| {
            let [Value::String(s)] = v.as_slice() else {
                let msg = if v.len() != 1 {
                    "bad argument #1 to 'decode' (expected 1 argument)".to_string()
                } else {
                    format!("bad argument #1 to 'decode' (string expected, got {})", v[0].type_name())
                };
                return Err(at_caller(lua, &msg));
            };
            let bytes = s.as_bytes();
            let mut p = Parser { lua, s: &bytes, at: 0 };
            let value = p.value(1).map_err(|e| at_caller(lua, &e))?;
            let end = p.token().map_err(|e| at_caller(lua, &e))?;
            if end.kind != Tok::End {
                return Err(at_caller(lua, &expected("the end", &end)));
            }
            Ok(value)
        })?,
    )?;
    cjson.raw_set("null", Value::LightUserData(LightUserData(std::ptr::null_mut())))?;
    Ok(cjson)
}

/// An error raised by a library function, positioned at the script line that called it (as
/// `luaL_error` does): a plain error string.
pub fn at_caller(lua: &Lua, msg: &str) -> mlua::Error {
    let at = lua
        .inspect_stack(1, |d| {
            let src = d.source().short_src.map(|s| s.into_owned());
            src.zip(d.current_line()).map(|(s, l)| format!("{s}:{l}: "))
        })
        .flatten()
        .unwrap_or_default();
    mlua::Error::RuntimeError(format!("{at}{msg}"))
}

fn encode(v: &Value, out: &mut Vec<u8>, depth: usize) -> Result<(), String> {
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(n) => number(*n as f64, out)?,
        Value::Number(n) => number(*n, out)?,
        Value::String(s) => string(&s.as_bytes(), out),
        Value::Table(t) => {
            if depth > MAX_DEPTH {
                return Err(format!("Cannot serialise, excessive nesting ({depth})"));
            }
            table(t, out, depth)?;
        }
        other => return Err(format!("Cannot serialise {}: type not supported", other.type_name())),
    }
    Ok(())
}

fn number(n: f64, out: &mut Vec<u8>) -> Result<(), String> {
    if !n.is_finite() {
        return Err("Cannot serialise number: must not be NaN or Inf".into());
    }
    out.extend_from_slice(fmt_g(n, 14).as_bytes());
    Ok(())
}

fn string(s: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &c in s {
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\x08' => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\x0c' => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            0..0x20 | 0x7f => out.extend_from_slice(format!("\\u{c:04x}").as_bytes()),
            _ => out.push(c),
        }
    }
    out.push(b'"');
}

/// lua-cjson's `lua_array_length`: `Some(max)` for an array, `None` for an object.
fn array_length(t: &Table) -> Result<Option<usize>, String> {
    let (mut max, mut items) = (0usize, 0usize);
    let mut is_array = true;
    let _ = t.for_each(|k: Value, _: Value| {
        let k = match k {
            Value::Integer(i) => i as f64,
            Value::Number(f) => f,
            _ => {
                is_array = false;
                return Ok(());
            }
        };
        if k.floor() == k && k >= 1.0 {
            max = max.max(k as usize);
            items += 1;
        } else {
            is_array = false;
        }
        Ok(())
    });
    if !is_array {
        return Ok(None);
    }
    if max > items * SPARSE_RATIO && max > SPARSE_SAFE {
        return Err("Cannot serialise table: excessively sparse array".into());
    }
    Ok((max > 0).then_some(max))
}

fn table(t: &Table, out: &mut Vec<u8>, depth: usize) -> Result<(), String> {
    if let Some(len) = array_length(t)? {
        out.push(b'[');
        for i in 1..=len {
            if i > 1 {
                out.push(b',');
            }
            let v: Value = t.raw_get(i).map_err(|e| e.to_string())?;
            encode(&v, out, depth + 1)?;
        }
        out.push(b']');
        return Ok(());
    }
    out.push(b'{');
    let mut first = true;
    let mut failure = None;
    let _ = t.for_each(|k: Value, v: Value| {
        if failure.is_some() {
            return Ok(());
        }
        if !first {
            out.push(b',');
        }
        first = false;
        match &k {
            Value::String(s) => string(&s.as_bytes(), out),
            Value::Integer(n) => string(fmt_g(*n as f64, 14).as_bytes(), out),
            Value::Number(n) => string(fmt_g(*n, 14).as_bytes(), out),
            other => {
                failure = Some(format!(
                    "Cannot serialise {}: table key must be a number or string",
                    other.type_name()
                ));
                return Ok(());
            }
        }
        out.push(b':');
        if let Err(e) = encode(&v, out, depth + 1) {
            failure = Some(e);
        }
        Ok(())
    });
    if let Some(e) = failure {
        return Err(e);
    }
    out.push(b'}');
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Tok {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    Str,
    Number,
    Boolean,
    Null,
    Colon,
    Comma,
    End,
    Error(&'static str),
}

#[derive(Debug)]
struct Token {
    kind: Tok,
    /// 0-based start (messages count from 1).
    index: usize,
    /// The decoded value of strings, numbers and booleans.
    value: Option<Value>,
}

fn expected(what: &str, t: &Token) -> String {
    let found = match t.kind {
        Tok::ObjBegin => "T_OBJ_BEGIN",
        Tok::ObjEnd => "T_OBJ_END",
        Tok::ArrBegin => "T_ARR_BEGIN",
        Tok::ArrEnd => "T_ARR_END",
        Tok::Str => "T_STRING",
        Tok::Number => "T_NUMBER",
        Tok::Boolean => "T_BOOLEAN",
        Tok::Null => "T_NULL",
        Tok::Colon => "T_COLON",
        Tok::Comma => "T_COMMA",
        Tok::End => "T_END",
        Tok::Error(e) => e,
    };
    format!("Expected {what} but found {found} at character {}", t.index + 1)
}

struct Parser<'a> {
    lua: &'a Lua,
    s: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn token(&mut self) -> Result<Token, String> {
        while self.s.get(self.at).is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
        let index = self.at;
        let simple = |kind, p: &mut Self| {
            p.at += 1;
            Ok(Token { kind, index, value: None })
        };
        let Some(&c) = self.s.get(self.at) else { return Ok(Token { kind: Tok::End, index, value: None }) };
        match c {
            b'{' => simple(Tok::ObjBegin, self),
            b'}' => simple(Tok::ObjEnd, self),
            b'[' => simple(Tok::ArrBegin, self),
            b']' => simple(Tok::ArrEnd, self),
            b':' => simple(Tok::Colon, self),
            b',' => simple(Tok::Comma, self),
            b'"' => self.string_token(index),
            b'-' | b'0'..=b'9' => self.number_token(index),
            _ => {
                for (word, kind, value) in [
                    (&b"true"[..], Tok::Boolean, Value::Boolean(true)),
                    (b"false", Tok::Boolean, Value::Boolean(false)),
                    (b"null", Tok::Null, Value::LightUserData(LightUserData(std::ptr::null_mut()))),
                ] {
                    if self.s[self.at..].starts_with(word) {
                        self.at += word.len();
                        return Ok(Token { kind, index, value: Some(value) });
                    }
                }
                Ok(Token { kind: Tok::Error("invalid token"), index, value: None })
            }
        }
    }

    fn number_token(&mut self, index: usize) -> Result<Token, String> {
        let start = self.at;
        let mut end = start;
        while self.s.get(end).is_some_and(|c| matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')) {
            end += 1;
        }
        let text = std::str::from_utf8(&self.s[start..end]).unwrap_or_default();
        match text.parse::<f64>() {
            Ok(n) => {
                self.at = end;
                Ok(Token { kind: Tok::Number, index, value: Some(Value::Number(n)) })
            }
            Err(_) => Ok(Token { kind: Tok::Error("invalid number"), index, value: None }),
        }
    }

    fn string_token(&mut self, index: usize) -> Result<Token, String> {
        let mut out = Vec::new();
        let mut i = self.at + 1;
        loop {
            let Some(&c) = self.s.get(i) else {
                return Ok(Token { kind: Tok::Error("unexpected end of string"), index, value: None });
            };
            i += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let Some(&e) = self.s.get(i) else {
                        return Ok(Token {
                            kind: Tok::Error("unexpected end of string"),
                            index,
                            value: None,
                        });
                    };
                    i += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => match self.unicode(&mut i) {
                            Some(ch) => {
                                let mut buf = [0u8; 4];
                                out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                            }
                            None => {
                                return Ok(Token {
                                    kind: Tok::Error("invalid unicode escape code"),
                                    index,
                                    value: None,
                                });
                            }
                        },
                        _ => {
                            return Ok(Token { kind: Tok::Error("invalid escape code"), index, value: None });
                        }
                    }
                }
                _ => out.push(c),
            }
        }
        self.at = i;
        let s = self.lua.create_string(out).map_err(|e| e.to_string())?;
        Ok(Token { kind: Tok::Str, index, value: Some(Value::String(s)) })
    }

    fn hex4(&self, i: usize) -> Option<u32> {
        let h = self.s.get(i..i + 4)?;
        u32::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()
    }

    /// A `\uXXXX` escape (after the `u`), joining a surrogate pair.
    fn unicode(&self, i: &mut usize) -> Option<char> {
        let hi = self.hex4(*i)?;
        *i += 4;
        if (0xd800..0xdc00).contains(&hi) {
            if self.s.get(*i..*i + 2)? != b"\\u" {
                return None;
            }
            let lo = self.hex4(*i + 2)?;
            if !(0xdc00..0xe000).contains(&lo) {
                return None;
            }
            *i += 6;
            return char::from_u32(0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00));
        }
        char::from_u32(hi)
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        let t = self.token()?;
        self.value_of(t, depth)
    }

    fn value_of(&mut self, t: Token, depth: usize) -> Result<Value, String> {
        match t.kind {
            Tok::Str | Tok::Number | Tok::Boolean | Tok::Null => Ok(t.value.unwrap_or(Value::Nil)),
            Tok::ObjBegin | Tok::ArrBegin if depth > MAX_DEPTH => {
                Err(format!("Found too many nested data structures ({depth}) at character {}", t.index + 1))
            }
            Tok::ObjBegin => self.object(depth),
            Tok::ArrBegin => self.array(depth),
            _ => Err(expected("value", &t)),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, String> {
        let table = self.lua.create_table().map_err(|e| e.to_string())?;
        let mut t = self.token()?;
        if t.kind == Tok::ObjEnd {
            return Ok(Value::Table(table));
        }
        loop {
            if t.kind != Tok::Str {
                return Err(expected("object key string", &t));
            }
            let key = t.value.take().unwrap_or(Value::Nil);
            let colon = self.token()?;
            if colon.kind != Tok::Colon {
                return Err(expected("colon", &colon));
            }
            let v = self.value(depth + 1)?;
            table.raw_set(key, v).map_err(|e| e.to_string())?;
            let next = self.token()?;
            match next.kind {
                Tok::ObjEnd => return Ok(Value::Table(table)),
                Tok::Comma => t = self.token()?,
                _ => return Err(expected("comma or object end", &next)),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, String> {
        let table = self.lua.create_table().map_err(|e| e.to_string())?;
        let mut t = self.token()?;
        if t.kind == Tok::ArrEnd {
            return Ok(Value::Table(table));
        }
        for i in 1.. {
            let v = self.value_of(t, depth + 1)?;
            table.raw_set(i, v).map_err(|e| e.to_string())?;
            let next = self.token()?;
            match next.kind {
                Tok::ArrEnd => return Ok(Value::Table(table)),
                Tok::Comma => t = self.token()?,
                _ => return Err(expected("comma or array end", &next)),
            }
        }
        unreachable!("the loop returns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lua() -> Lua {
        let lua = Lua::new();
        lua.globals().set("cjson", library(&lua).unwrap()).unwrap();
        lua
    }

    #[test]
    fn encodes_like_lua_cjson() {
        let lua = lua();
        let enc = |s: &str| lua.load(s).eval::<String>().unwrap();
        assert_eq!(
            enc("return cjson.encode({1,2,'a/b',1.5,0.1,1e20,{x=1}})"),
            r#"[1,2,"a\/b",1.5,0.1,1e+20,{"x":1}]"#
        );
        assert_eq!(enc("return cjson.encode({[1]=1,[3]=3})"), "[1,null,3]");
        assert_eq!(enc("return cjson.encode({})"), "{}");
        assert_eq!(enc("return cjson.encode(123456789012345678)"), "1.2345678901235e+17");
        assert_eq!(enc(r#"return cjson.encode(string.char(1,9,127))"#), r#""\u0001\t\u007f""#);
        let err = lua.load("return cjson.encode({[1]=1,[20]=3})").eval::<String>().unwrap_err().to_string();
        assert!(err.contains("Cannot serialise table: excessively sparse array"), "{err}");
    }

    #[test]
    fn decodes_like_lua_cjson() {
        let lua = lua();
        assert_eq!(
            lua.load(r#"return cjson.decode('{"a":[1,2,{"b":"\\u00e9"}]}').a[3].b"#)
                .eval::<String>()
                .unwrap(),
            "é"
        );
        assert_eq!(lua.load("return cjson.decode('1e2')").eval::<f64>().unwrap(), 100.0);
        let err = |s: &str| lua.load(s).eval::<Value>().unwrap_err().to_string();
        assert!(
            err("return cjson.decode('[1,2')")
                .contains("Expected comma or array end but found T_END at character 5")
        );
        assert!(err("return cjson.decode('')").contains("Expected value but found T_END at character 1"));
        assert!(
            err(r#"return cjson.decode('{"a" 1}')"#)
                .contains("Expected colon but found T_NUMBER at character 6")
        );
        assert!(
            err("return cjson.decode('[1,]')").contains("Expected value but found T_ARR_END at character 4")
        );
        assert!(
            err("return cjson.decode('nul')")
                .contains("Expected value but found invalid token at character 1")
        );
        assert!(
            err("return cjson.decode('[1] x')")
                .contains("Expected the end but found invalid token at character 5")
        );
    }
}
