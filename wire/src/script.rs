//! A Lua script's name on the wire: the lowercase hex SHA1 of its body, as Redis names scripts
//! (EVALSHA, SCRIPT LOAD's reply, `redis.sha1hex`). Routers and nodes both compute it.

use sha1::{Digest, Sha1};

/// Redis's error for an EVALSHA of a script the server does not hold: the node answers it, and
/// the router recognizes it to send the body from another node.
pub const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";

/// Redis's answer while a script (EVAL) has run past busy-reply-threshold: the node running it
/// answers it, and so do routers with `--busy-reply-scope cluster`.
pub const BUSY_SCRIPT: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
/// [`BUSY_SCRIPT`] while a library function (FCALL) runs.
pub const BUSY_FUNCTION: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";

/// Whether a script op names its script by SHA alone (EVALSHA: no body, not a library function):
/// the ops a node may not hold the script of, which the router sends again with the body.
pub fn by_sha_only(s: &crate::proto::Script) -> bool {
    s.body.is_empty() && s.function.is_empty()
}

pub fn sha1_hex(body: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha1::digest(body);
    let mut s = String::with_capacity(40);
    for b in digest {
        s.push(HEX[usize::from(b >> 4)] as char);
        s.push(HEX[usize::from(b & 15)] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn redis_names() {
        assert_eq!(super::sha1_hex(b"abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(super::sha1_hex(b"return 1"), "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
    }
}
