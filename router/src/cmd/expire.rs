//! EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (with NX/XX/GT/LT) and PERSIST.

use shoal_wire::proto::{self, op::Kind};

use super::{Args, Ctx, Pending, int_arg, op, plain};
use crate::resp::Reply;

fn expire_generic(args: &Args, ctx: &mut Ctx, seconds: bool, relative: bool, name: &str) -> Pending {
    // Redis checks the options first, then the time, then overflow; all before the key.
    let flags = match parse_flags(&args[3..]) {
        Ok(f) => f,
        Err(e) => return e.into(),
    };
    let when = match int_arg(&args[2]) {
        Ok(w) => w,
        Err(e) => return e.into(),
    };
    let invalid = || Reply::error_fmt(format!("ERR invalid expire time in '{name}' command")).into();
    let ms = if seconds {
        if !(i64::MIN / 1000..=i64::MAX / 1000).contains(&when) {
            return invalid();
        }
        when * 1000
    } else {
        when
    };
    if relative && ms > i64::MAX - now_ms() {
        return invalid();
    }
    let key = args[1].clone();
    let o = op(Kind::Expire(proto::Expire {
        key: key.clone(),
        at: Some(proto::Expiry { ms, relative }),
        nx: flags.0,
        xx: flags.1,
        gt: flags.2,
        lt: flags.3,
    }));
    Pending::Call(ctx.call(&key, o), plain)
}

/// NX, XX, GT, LT in any case and order; Redis's texts for unknown and incompatible options.
fn parse_flags(opts: &[bytes::Bytes]) -> Result<(bool, bool, bool, bool), Reply> {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in opts {
        match opt.to_ascii_lowercase().as_slice() {
            b"nx" => nx = true,
            b"xx" => xx = true,
            b"gt" => gt = true,
            b"lt" => lt = true,
            _ => {
                return Err(Reply::error_fmt(format!(
                    "ERR Unsupported option {}",
                    String::from_utf8_lossy(opt)
                )));
            }
        }
    }
    if nx && (xx || gt || lt) {
        return Err(Reply::error("ERR NX and XX, GT or LT options at the same time are not compatible"));
    }
    if gt && lt {
        return Err(Reply::error("ERR GT and LT options at the same time are not compatible"));
    }
    Ok((nx, xx, gt, lt))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

pub fn expire(args: &Args, ctx: &mut Ctx) -> Pending {
    expire_generic(args, ctx, true, true, "expire")
}

pub fn pexpire(args: &Args, ctx: &mut Ctx) -> Pending {
    expire_generic(args, ctx, false, true, "pexpire")
}

pub fn expireat(args: &Args, ctx: &mut Ctx) -> Pending {
    expire_generic(args, ctx, true, false, "expireat")
}

pub fn pexpireat(args: &Args, ctx: &mut Ctx) -> Pending {
    expire_generic(args, ctx, false, false, "pexpireat")
}

pub fn persist(args: &Args, ctx: &mut Ctx) -> Pending {
    let key = args[1].clone();
    Pending::Call(ctx.call(&key, op(Kind::Persist(proto::Persist { key: key.clone() }))), plain)
}
