//! The `bit` library scripts know from Redis (LuaBitOp): 32-bit integer operations on Lua numbers.
//! Every argument is first normalized like `bit.tobit` (taken modulo 2^32 as a signed 32-bit
//! integer), and every result is a signed 32-bit integer.

use mlua::{Lua, Table, Value, Variadic};

fn arg(v: &Value, n: usize) -> mlua::Result<i32> {
    let x = match v {
        Value::Integer(i) => *i as f64,
        Value::Number(f) => *f,
        Value::String(s) => {
            std::str::from_utf8(&s.as_bytes()).ok().and_then(|t| t.trim().parse().ok()).ok_or_else(|| {
                mlua::Error::RuntimeError(format!("bad argument #{n} (number expected, got string)"))
            })?
        }
        other => {
            return Err(mlua::Error::RuntimeError(format!(
                "bad argument #{n} (number expected, got {})",
                other.type_name()
            )));
        }
    };
    Ok(tobit(x))
}

/// LuaBitOp's normalization: the double rounded and taken modulo 2^32, as a signed 32-bit value.
pub fn tobit(x: f64) -> i32 {
    if !x.is_finite() {
        return 0;
    }
    let r = x.round_ties_even().rem_euclid(4_294_967_296.0);
    (r as u64 as u32) as i32
}

pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let bit = lua.create_table()?;
    let unary = |f: fn(i32) -> i32| {
        lua.create_function(move |_, v: Variadic<Value>| Ok(f(arg(v.first().unwrap_or(&Value::Nil), 1)?)))
    };
    bit.raw_set("tobit", unary(|x| x)?)?;
    bit.raw_set("bnot", unary(|x| !x)?)?;
    bit.raw_set("bswap", unary(|x| x.swap_bytes())?)?;
    let fold = |f: fn(i32, i32) -> i32| {
        lua.create_function(move |_, v: Variadic<Value>| {
            let mut acc = arg(v.first().unwrap_or(&Value::Nil), 1)?;
            for (i, x) in v.iter().enumerate().skip(1) {
                acc = f(acc, arg(x, i + 1)?);
            }
            Ok(acc)
        })
    };
    bit.raw_set("band", fold(|a, b| a & b)?)?;
    bit.raw_set("bor", fold(|a, b| a | b)?)?;
    bit.raw_set("bxor", fold(|a, b| a ^ b)?)?;
    let shift = |f: fn(i32, u32) -> i32| {
        lua.create_function(move |_, v: Variadic<Value>| {
            let x = arg(v.first().unwrap_or(&Value::Nil), 1)?;
            let n = arg(v.get(1).unwrap_or(&Value::Nil), 2)? as u32 & 31;
            Ok(f(x, n))
        })
    };
    bit.raw_set("lshift", shift(|x, n| ((x as u32) << n) as i32)?)?;
    bit.raw_set("rshift", shift(|x, n| ((x as u32) >> n) as i32)?)?;
    bit.raw_set("arshift", shift(|x, n| x >> n)?)?;
    bit.raw_set("rol", shift(|x, n| (x as u32).rotate_left(n) as i32)?)?;
    bit.raw_set("ror", shift(|x, n| (x as u32).rotate_right(n) as i32)?)?;
    bit.raw_set(
        "tohex",
        lua.create_function(|_, v: Variadic<Value>| {
            let x = arg(v.first().unwrap_or(&Value::Nil), 1)? as u32;
            let n = match v.get(1) {
                None | Some(Value::Nil) => 8,
                Some(other) => arg(other, 2)?,
            };
            let (upper, digits) = if n < 0 { (true, n.unsigned_abs()) } else { (false, n as u32) };
            let digits = digits.min(8) as usize;
            let masked = if digits >= 8 { x as u64 } else { x as u64 & ((1u64 << (4 * digits)) - 1) };
            Ok(if upper { format!("{masked:0digits$X}") } else { format!("{masked:0digits$x}") })
        })?,
    )?;
    Ok(bit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_luabitop() {
        assert_eq!(tobit(4_294_967_295.0), -1);
        assert_eq!(tobit(2_147_483_648.0), i32::MIN);
        assert_eq!(tobit(-1.0), -1);
        let lua = Lua::new();
        lua.globals().set("bit", library(&lua).unwrap()).unwrap();
        let eval = |s: &str| lua.load(s).eval::<Value>().unwrap();
        assert_eq!(eval("return bit.band(0xff, 0x0f)"), Value::Integer(15));
        assert_eq!(eval("return bit.bor(1, 2, 4)"), Value::Integer(7));
        assert_eq!(eval("return bit.lshift(1, 31)"), Value::Integer(i32::MIN as i64));
        assert_eq!(eval("return bit.rshift(-1, 28)"), Value::Integer(15));
        assert_eq!(eval("return bit.arshift(-256, 4)"), Value::Integer(-16));
        assert_eq!(lua.load("return bit.tohex(255)").eval::<String>().unwrap(), "000000ff");
        assert_eq!(lua.load("return bit.tohex(255, -2)").eval::<String>().unwrap(), "FF");
    }
}
