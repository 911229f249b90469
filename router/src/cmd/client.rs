//! CLIENT subcommands about the calling connection.

use super::{Args, Ctx, Pending};
use crate::resp::Reply;

/// Client names may only hold printable, non-space ASCII (Redis's rule, with its text).
pub fn validate_name(name: &[u8]) -> Result<(), Reply> {
    if name.iter().all(|&c| (b'!'..=b'~').contains(&c)) {
        Ok(())
    } else {
        Err(Reply::error("ERR Client names cannot contain spaces, newlines or special characters."))
    }
}

/// `CLIENT` without a subcommand never gets here (arity); kept for the table.
pub fn container(args: &Args, ctx: &mut Ctx) -> Pending {
    help(args, ctx)
}

pub fn setname(args: &Args, ctx: &mut Ctx) -> Pending {
    if let Err(e) = validate_name(&args[2]) {
        return e.into();
    }
    ctx.session.name = (!args[2].is_empty()).then(|| args[2].clone());
    Reply::OK.into()
}

pub fn getname(_args: &Args, ctx: &mut Ctx) -> Pending {
    ctx.session.name.clone().map_or(Reply::Nil, Reply::Bulk).into()
}

pub fn id(_args: &Args, ctx: &mut Ctx) -> Pending {
    Reply::Int(ctx.session.id as i64).into()
}

/// `CLIENT SETINFO LIB-NAME|LIB-VER value` (Redis 7.2; client libraries send it on connect).
pub fn setinfo(args: &Args, ctx: &mut Ctx) -> Pending {
    let attr = &args[2];
    let value = &args[3];
    let (label, slot) = if attr.eq_ignore_ascii_case(b"lib-name") {
        ("lib-name", &mut ctx.session.lib_name)
    } else if attr.eq_ignore_ascii_case(b"lib-ver") {
        ("lib-ver", &mut ctx.session.lib_ver)
    } else {
        return Reply::error_fmt(format!("ERR Unrecognized option '{}'", String::from_utf8_lossy(attr)))
            .into();
    };
    if !value.iter().all(|&c| (b'!'..=b'~').contains(&c)) {
        return Reply::error_fmt(format!(
            "ERR {label} cannot contain spaces, newlines or special characters."
        ))
        .into();
    }
    *slot = (!value.is_empty()).then(|| value.clone());
    Reply::OK.into()
}

pub fn info(_args: &Args, ctx: &mut Ctx) -> Pending {
    Reply::Verbatim(ctx.session.info_line().into()).into()
}

pub fn help(_args: &Args, _ctx: &mut Ctx) -> Pending {
    let lines = [
        "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "GETNAME",
        "    Return the name of the current connection.",
        "ID",
        "    Return the ID of the current connection.",
        "INFO",
        "    Return information about the current client connection.",
        "SETINFO <option> <value>",
        "    Set client meta attr. Options are:",
        "    * LIB-NAME: the client lib name.",
        "    * LIB-VER: the client lib version.",
        "SETNAME <name>",
        "    Assign the name <name> to the current connection.",
        "HELP",
        "    Print this help.",
    ];
    Reply::Array(lines.iter().map(|l| Reply::simple(l)).collect()).into()
}
