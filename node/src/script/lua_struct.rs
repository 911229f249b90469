//! The `struct` library Redis ships to scripts (Roberto Ierusalimschy's lua_struct, as Redis
//! builds it on x86-64: little-endian native order, `long` and `size_t` of 8 bytes, doubles
//! aligned to 8): `struct.pack`, `struct.unpack` and `struct.size` with its format letters,
//! alignment rules and error texts.

use mlua::{Lua, MultiValue, Table, Value};

use super::cjson::at_caller;
use crate::commands::fmt_g;

/// Widest `i`/`I` integer (`MAXINTSIZE`).
const MAX_INT_SIZE: usize = 32;
/// The default of `!` (`MAXALIGN`: a double's alignment).
const MAX_ALIGN: usize = 8;

pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("pack", lua.create_function(pack)?)?;
    t.raw_set("unpack", lua.create_function(unpack)?)?;
    t.raw_set("size", lua.create_function(size)?)?;
    Ok(t)
}

/// The format being read and its current byte order and alignment.
struct Format<'a> {
    fmt: &'a [u8],
    at: usize,
    little: bool,
    align: usize,
    /// The library function, for error texts.
    name: &'static str,
}

impl<'a> Format<'a> {
    fn new(fmt: &'a [u8], name: &'static str) -> Format<'a> {
        // A NUL ends the format, as it ends the C string.
        let end = fmt.iter().position(|&b| b == 0).unwrap_or(fmt.len());
        Format { fmt: &fmt[..end], at: 0, little: true, align: 1, name }
    }

    fn next(&mut self) -> Option<u8> {
        let c = *self.fmt.get(self.at)?;
        self.at += 1;
        Some(c)
    }

    /// `getnum`: a decimal number at the cursor, or `default`.
    fn number(&mut self, lua: &Lua, default: usize) -> mlua::Result<usize> {
        if !self.fmt.get(self.at).is_some_and(u8::is_ascii_digit) {
            return Ok(default);
        }
        let mut a: usize = 0;
        while let Some(&d) = self.fmt.get(self.at).filter(|d| d.is_ascii_digit()) {
            let digit = usize::from(d - b'0');
            if a > (i32::MAX as usize) / 10 || a * 10 > i32::MAX as usize - digit {
                return Err(at_caller(lua, "integral size overflow"));
            }
            a = a * 10 + digit;
            self.at += 1;
        }
        Ok(a)
    }

    /// `optsize`: the bytes option `opt` takes (0 for options without a size).
    fn size(&mut self, lua: &Lua, opt: u8) -> mlua::Result<usize> {
        Ok(match opt {
            b'B' | b'b' | b'x' => 1,
            b'H' | b'h' => 2,
            b'L' | b'l' | b'T' | b'd' => 8,
            b'f' => 4,
            b'c' => self.number(lua, 1)?,
            b'i' | b'I' => {
                let n = self.number(lua, 4)?;
                if n > MAX_INT_SIZE {
                    let msg = format!("integral size {n} is larger than limit of {MAX_INT_SIZE}");
                    return Err(at_caller(lua, &msg));
                }
                n
            }
            _ => 0,
        })
    }

    /// `gettoalign`: padding before an item of `size` at offset `len`.
    fn padding(&self, len: usize, opt: u8, size: usize) -> usize {
        if size == 0 || opt == b'c' {
            return 0;
        }
        let size = size.min(self.align);
        (size.wrapping_sub(len & size.wrapping_sub(1))) & size.wrapping_sub(1)
    }

    /// `controloptions`: byte order, alignment, spaces; anything else is an error.
    fn control(&mut self, lua: &Lua, opt: u8) -> mlua::Result<()> {
        match opt {
            b' ' => {}
            b'>' => self.little = false,
            b'<' => self.little = true,
            b'!' => {
                let a = self.number(lua, MAX_ALIGN)?;
                if a == 0 || a & (a - 1) != 0 {
                    return Err(at_caller(lua, &format!("alignment {a} is not a power of 2")));
                }
                self.align = a;
            }
            other => {
                let msg = format!("invalid format option '{}'", other as char);
                return Err(arg_error(lua, 1, self.name, &msg));
            }
        }
        Ok(())
    }
}

/// `luaL_argerror`'s text, positioned at the calling line.
fn arg_error(lua: &Lua, n: usize, name: &str, msg: &str) -> mlua::Error {
    at_caller(lua, &format!("bad argument #{n} to '{name}' ({msg})"))
}

fn type_name(v: Option<&Value>) -> &'static str {
    match v {
        None => "no value",
        Some(v) => match v {
            Value::Integer(_) => "number",
            other => other.type_name(),
        },
    }
}

/// `luaL_checknumber`: a number, or a string that reads as one.
fn number_arg(lua: &Lua, args: &[Value], n: usize, name: &str) -> mlua::Result<f64> {
    let v = args.get(n - 1);
    let got = match v {
        Some(Value::Integer(i)) => Some(*i as f64),
        Some(Value::Number(f)) => Some(*f),
        Some(Value::String(s)) => std::str::from_utf8(&s.as_bytes()).ok().and_then(|t| t.trim().parse().ok()),
        _ => None,
    };
    got.ok_or_else(|| arg_error(lua, n, name, &format!("number expected, got {}", type_name(v))))
}

/// `luaL_checklstring`: a string, or a number as Lua writes it.
fn string_arg(lua: &Lua, args: &[Value], n: usize, name: &str) -> mlua::Result<Vec<u8>> {
    let v = args.get(n - 1);
    match v {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        // As Lua writes a number (`%.14g`).
        Some(Value::Integer(i)) => Ok(fmt_g(*i as f64, 14).into_bytes()),
        Some(Value::Number(x)) => Ok(fmt_g(*x, 14).into_bytes()),
        _ => Err(arg_error(lua, n, name, &format!("string expected, got {}", type_name(v)))),
    }
}

fn pack(lua: &Lua, args: MultiValue) -> mlua::Result<Value> {
    let mut args: Vec<Value> = args.into_iter().collect();
    // The C function pushes a nil to mark where its arguments end: a missing argument right
    // after the last one reads as nil there, not as "no value".
    args.push(Value::Nil);
    let fmt = string_arg(lua, &args, 1, "pack")?;
    let mut f = Format::new(&fmt, "pack");
    let mut out: Vec<u8> = Vec::new();
    let mut arg = 2;
    while let Some(opt) = f.next() {
        let mut size = f.size(lua, opt)?;
        let pad = f.padding(out.len(), opt, size);
        out.resize(out.len() + pad, 0);
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let n = number_arg(lua, &args, arg, "pack")?;
                arg += 1;
                let value = if n < 0.0 { n as i64 as u64 } else { n as u64 };
                let mut bytes: Vec<u8> =
                    (0..size).map(|i| if i < 8 { (value >> (8 * i)) as u8 } else { 0 }).collect();
                if !f.little {
                    bytes.reverse();
                }
                out.extend_from_slice(&bytes);
            }
            b'x' => out.push(0),
            b'f' => {
                let n = number_arg(lua, &args, arg, "pack")? as f32;
                arg += 1;
                out.extend_from_slice(&if f.little { n.to_le_bytes() } else { n.to_be_bytes() });
            }
            b'd' => {
                let n = number_arg(lua, &args, arg, "pack")?;
                arg += 1;
                out.extend_from_slice(&if f.little { n.to_le_bytes() } else { n.to_be_bytes() });
            }
            b'c' | b's' => {
                let s = string_arg(lua, &args, arg, "pack")?;
                arg += 1;
                if size == 0 {
                    size = s.len();
                }
                if s.len() < size {
                    // (Redis's check names the argument after this one.)
                    return Err(arg_error(lua, arg, "pack", "string too short"));
                }
                out.extend_from_slice(&s[..size]);
                if opt == b's' {
                    out.push(0);
                }
            }
            other => f.control(lua, other)?,
        }
    }
    Ok(Value::String(lua.create_string(&out)?))
}

fn unpack(lua: &Lua, args: MultiValue) -> mlua::Result<MultiValue> {
    let args: Vec<Value> = args.into_iter().collect();
    let fmt = string_arg(lua, &args, 1, "unpack")?;
    let data = string_arg(lua, &args, 2, "unpack")?;
    let pos = match args.get(2) {
        None | Some(Value::Nil) => 1.0,
        Some(_) => number_arg(lua, &args, 3, "unpack")?,
    } as i64;
    if pos <= 0 {
        return Err(arg_error(lua, 3, "unpack", "offset must be 1 or greater"));
    }
    let mut pos = (pos - 1) as usize;
    let ld = data.len();
    let mut f = Format::new(&fmt, "unpack");
    let mut out: Vec<Value> = Vec::new();
    let short = |lua: &Lua| arg_error(lua, 2, "unpack", "data string too short");
    while let Some(opt) = f.next() {
        let mut size = f.size(lua, opt)?;
        pos += f.padding(pos, opt, size);
        if size > ld || pos > ld - size {
            return Err(short(lua));
        }
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let bytes = &data[pos..pos + size];
                let mut l: u64 = 0;
                let ordered: Box<dyn Iterator<Item = &u8>> =
                    if f.little { Box::new(bytes.iter().rev()) } else { Box::new(bytes.iter()) };
                for &b in ordered {
                    l = l.wrapping_shl(8) | u64::from(b);
                }
                let n = if opt.is_ascii_lowercase() {
                    let mask = (!0u64).wrapping_shl((size * 8).wrapping_sub(1) as u32);
                    if l & mask != 0 {
                        l |= mask;
                    }
                    l as i64 as f64
                } else {
                    l as f64
                };
                out.push(Value::Number(n));
            }
            b'x' => {}
            b'f' => {
                let b: [u8; 4] = data[pos..pos + 4].try_into().expect("4 bytes");
                let v = if f.little { f32::from_le_bytes(b) } else { f32::from_be_bytes(b) };
                out.push(Value::Number(f64::from(v)));
            }
            b'd' => {
                let b: [u8; 8] = data[pos..pos + 8].try_into().expect("8 bytes");
                let v = if f.little { f64::from_le_bytes(b) } else { f64::from_be_bytes(b) };
                out.push(Value::Number(v));
            }
            b'c' => {
                if size == 0 {
                    let previous = match out.last() {
                        Some(Value::Number(n)) => Some(*n),
                        Some(Value::Integer(n)) => Some(*n as f64),
                        _ => None,
                    };
                    let Some(n) = previous else {
                        return Err(at_caller(lua, "format 'c0' needs a previous size"));
                    };
                    out.pop();
                    size = n as usize;
                    if size > ld || pos > ld - size {
                        return Err(short(lua));
                    }
                }
                out.push(Value::String(lua.create_string(&data[pos..pos + size])?));
            }
            b's' => {
                let Some(end) = data[pos..].iter().position(|&b| b == 0) else {
                    return Err(at_caller(lua, "unfinished string in data"));
                };
                size = end + 1;
                out.push(Value::String(lua.create_string(&data[pos..pos + end])?));
            }
            other => f.control(lua, other)?,
        }
        pos += size;
    }
    out.push(Value::Integer(pos as i64 + 1));
    Ok(MultiValue::from_iter(out))
}

fn size(lua: &Lua, args: MultiValue) -> mlua::Result<Value> {
    let args: Vec<Value> = args.into_iter().collect();
    let fmt = string_arg(lua, &args, 1, "size")?;
    let mut f = Format::new(&fmt, "size");
    let mut pos = 0usize;
    while let Some(opt) = f.next() {
        let size = f.size(lua, opt)?;
        pos += f.padding(pos, opt, size);
        if opt == b's' {
            return Err(arg_error(lua, 1, "size", "option 's' has no fixed size"));
        } else if opt == b'c' && size == 0 {
            return Err(arg_error(lua, 1, "size", "option 'c0' has no fixed size"));
        }
        if !opt.is_ascii_alphanumeric() {
            f.control(lua, opt)?;
        }
        pos += size;
    }
    Ok(Value::Integer(pos as i64))
}
