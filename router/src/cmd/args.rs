//! Redis's argument and dispatch error texts, shared by the handlers.

use super::spec::{Args, Pending};
use crate::resp::Reply;

/// `-ERR unknown command 'x', with args beginning with: 'a' 'b' `, built like Redis: at most 128
/// bytes of the name and about 128 bytes of arguments, each cut at a NUL byte.
pub fn unknown_command(args: &Args) -> Reply {
    let mut listed = String::new();
    for arg in &args[1..] {
        if listed.len() >= 128 {
            break;
        }
        let room = 128 - listed.len();
        listed.push('\'');
        listed.push_str(&clip(arg, room));
        listed.push_str("' ");
    }
    Reply::error_fmt(format!(
        "ERR unknown command '{}', with args beginning with: {}",
        clip(&args[0], 128),
        listed
    ))
}

/// At most `max` bytes of `b`, stopping at a NUL (C-string semantics), as text.
pub fn clip(b: &[u8], max: usize) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len()).min(max);
    String::from_utf8_lossy(&b[..end]).into_owned()
}

pub fn wrong_arity(name: &str) -> Reply {
    Reply::error_fmt(format!("ERR wrong number of arguments for '{name}' command"))
}

/// A HELP subcommand's reply: one simple string per line, as Redis's `addReplyHelp`.
pub fn help_reply(lines: &[&'static str]) -> Pending {
    Reply::Array(lines.iter().map(|l| Reply::simple(l)).collect()).into()
}

pub fn syntax_error() -> Reply {
    Reply::error(shoal_wire::command::SYNTAX)
}

pub fn not_integer() -> Reply {
    Reply::error(shoal_wire::command::NOT_INTEGER)
}

/// Parses a Redis integer argument or answers with Redis's error (the text the shared argument
/// builders in `shoal_wire::command` use too).
pub fn int_arg(b: &[u8]) -> Result<i64, Reply> {
    shoal_wire::num::parse_i64(b).ok_or_else(not_integer)
}

/// Keys of one command (or transaction) on several nodes, where Redis Cluster answers CROSSSLOT.
pub const CROSSSLOT: &str =
    "CROSSSLOT Keys in request don't hash to the same node; give them a common {hashtag}";

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn unknown_command_text_like_redis() {
        let args: Vec<Bytes> = ["FOO", "a", "b"].iter().map(|s| Bytes::from(*s)).collect();
        assert_eq!(
            unknown_command(&args).to_bytes(crate::resp::Protocol::Resp2),
            "-ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n"
        );
        let long: Vec<Bytes> = vec![Bytes::from("x"), Bytes::from("y".repeat(300))];
        let Reply::Error(text, _) = unknown_command(&long) else { panic!() };
        assert!(text.len() < 200, "arguments are cut at 128 bytes");
        let nul: Vec<Bytes> = vec![Bytes::from("x"), Bytes::from(&b"a\0b"[..])];
        let Reply::Error(text, _) = unknown_command(&nul) else { panic!() };
        assert!(text.ends_with("'a' "));
    }
}
