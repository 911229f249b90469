//! How a command over several keys is done when its keys live on several nodes, where Redis
//! Cluster answers CROSSSLOT. One classification for the router (its clients' commands,
//! `router/src/cmd/multi.rs`) and for a node's scripts (a `redis.call` over keys of nodes the
//! script holds, `node/src/script/spread.rs`), so that both split a command the same way.

use bytes::Bytes;

/// How a command runs when its keys are on several nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cross {
    /// Reads only: run on gathered values.
    Read,
    /// Writes the key at `args[dst]`: run on gathered values, then write it back; with
    /// `if_changed`, only when the reply says the command wrote it (COPY, RENAMENX answer 0 when
    /// they did not); with `delete_source`, then delete `args[1]` (RENAME).
    Replace { dst: usize, if_changed: bool, delete_source: bool },
    /// SMOVE: Redis's checks, then a removal and an add.
    SMove,
    /// LMOVE (ends given) and RPOPLPUSH: Redis's checks, then a pop and a push.
    LMove,
    /// LMPOP and ZMPOP: one key at a time, in order, until one pops.
    MPop,
    /// Answers CROSSSLOT, as Redis Cluster does.
    Refuse,
}

/// How `args` (a command over several keys, name first) runs over keys of several nodes.
pub fn cross_of(args: &[Bytes]) -> Cross {
    match &args[0].to_ascii_lowercase()[..] {
        b"sinterstore" | b"sunionstore" | b"sdiffstore" | b"zunionstore" | b"zinterstore" | b"zdiffstore"
        | b"zrangestore" | b"pfmerge" | b"geosearchstore" => {
            Cross::Replace { dst: 1, if_changed: false, delete_source: false }
        }
        b"georadius" | b"georadiusbymember" => match crate::acl::commands::georadius_store(args) {
            Some(dst) => Cross::Replace { dst, if_changed: false, delete_source: false },
            None => Cross::Read,
        },
        b"bitop" => Cross::Replace { dst: 2, if_changed: false, delete_source: false },
        b"copy" => Cross::Replace { dst: 2, if_changed: true, delete_source: false },
        b"rename" | b"renamenx" => Cross::Replace { dst: 2, if_changed: true, delete_source: true },
        b"smove" => Cross::SMove,
        b"lmove" | b"rpoplpush" => Cross::LMove,
        b"lmpop" | b"zmpop" => Cross::MPop,
        // It changes its groups on every key it reads: only where all of them are.
        b"xreadgroup" => Cross::Refuse,
        b"sort" => match crate::sort::layout(args, false).and_then(|l| l.store) {
            Some(dst) => Cross::Replace { dst, if_changed: false, delete_source: false },
            None => Cross::Read,
        },
        _ => Cross::Read,
    }
}

/// LMOVE's and BLMOVE's end argument: `Some(true)` for LEFT, `Some(false)` for RIGHT.
pub fn side(b: &[u8]) -> Option<bool> {
    if b.eq_ignore_ascii_case(b"left") {
        Some(true)
    } else if b.eq_ignore_ascii_case(b"right") {
        Some(false)
    } else {
        None
    }
}

/// The `shoal.restore` command that makes `dst` hold what a scratch run left in it: `output` is
/// the run's `[type, expire_at_ms, value]` for `dst`, or nil (then the command deletes `dst`).
/// `Err` carries an output of another shape.
pub fn restore_command(
    dst: &Bytes,
    output: Option<crate::proto::Frame>,
) -> Result<Vec<Bytes>, Option<crate::proto::frame::Kind>> {
    use crate::proto::{Frame, frame::Kind};
    let mut restore = vec![Bytes::from_static(b"shoal.restore"), dst.clone()];
    if let Some(Frame { kind: Some(Kind::Array(v)) }) = output {
        for f in v.items {
            match f.kind {
                Some(Kind::Int(n)) => restore.push(Bytes::from(n.to_string())),
                Some(Kind::Bulk(b)) => restore.push(b),
                other => return Err(other),
            }
        }
    }
    Ok(restore)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(words: &[&str]) -> Cross {
        cross_of(&words.iter().map(|w| Bytes::copy_from_slice(w.as_bytes())).collect::<Vec<_>>())
    }

    #[test]
    fn writers_name_their_destination() {
        assert_eq!(
            of(&["RENAME", "a", "b"]),
            Cross::Replace { dst: 2, if_changed: true, delete_source: true }
        );
        assert_eq!(
            of(&["bitop", "and", "d", "a", "b"]),
            Cross::Replace { dst: 2, if_changed: false, delete_source: false }
        );
        assert_eq!(
            of(&["sort", "a", "store", "d"]),
            Cross::Replace { dst: 3, if_changed: false, delete_source: false }
        );
        assert_eq!(of(&["sort", "a"]), Cross::Read);
        assert_eq!(of(&["rpoplpush", "a", "b"]), Cross::LMove);
        assert_eq!(of(&["xreadgroup", "group", "g", "c", "streams", "a", "b", ">", ">"]), Cross::Refuse);
        assert_eq!(side(b"Left"), Some(true));
        assert_eq!(side(b"up"), None);
    }
}
