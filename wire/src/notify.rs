//! Keyspace notification classes (`notify-keyspace-events`): Redis's flag letters, how a value is
//! parsed and how CONFIG GET shows it, so a router's CONFIG SET and a node agree on them.

/// `K`: publish `__keyspace@0__:<key>` messages (payload: the event).
pub const KEYSPACE: u32 = 1 << 0;
/// `E`: publish `__keyevent@0__:<event>` messages (payload: the key).
pub const KEYEVENT: u32 = 1 << 1;
/// `g`: generic commands (DEL, EXPIRE, RENAME, ...).
pub const GENERIC: u32 = 1 << 2;
/// `$`: string commands.
pub const STRING: u32 = 1 << 3;
/// `l`: list commands.
pub const LIST: u32 = 1 << 4;
/// `s`: set commands.
pub const SET: u32 = 1 << 5;
/// `h`: hash commands.
pub const HASH: u32 = 1 << 6;
/// `z`: sorted set commands.
pub const ZSET: u32 = 1 << 7;
/// `x`: a key expired (lazily or by active expiry).
pub const EXPIRED: u32 = 1 << 8;
/// `e`: a key was evicted under `maxmemory`.
pub const EVICTED: u32 = 1 << 9;
/// `t`: stream commands (Shoal has none: accepted, never raised).
pub const STREAM: u32 = 1 << 10;
/// `m`: a read found no key (`keymiss`).
pub const KEY_MISS: u32 = 1 << 11;
/// `d`: module events (Shoal has none: accepted, never raised).
pub const MODULE: u32 = 1 << 12;
/// `n`: a key was created (`new`).
pub const NEW: u32 = 1 << 13;
/// `A`: every class but `m` and `n`, as in Redis.
pub const ALL: u32 = GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// Redis's CONFIG SET reason for a letter it does not know.
pub const BAD_CLASS: &str = "Invalid event class character. Use 'Ag$lshzxeKEtmdn'.";

/// Parses Redis's flag letters (`keyspaceEventsStringToFlags`); `None` for an unknown letter.
pub fn parse(classes: &[u8]) -> Option<u32> {
    let mut flags = 0;
    for c in classes {
        flags |= match c {
            b'A' => ALL,
            b'g' => GENERIC,
            b'$' => STRING,
            b'l' => LIST,
            b's' => SET,
            b'h' => HASH,
            b'z' => ZSET,
            b'x' => EXPIRED,
            b'e' => EVICTED,
            b'K' => KEYSPACE,
            b'E' => KEYEVENT,
            b't' => STREAM,
            b'm' => KEY_MISS,
            b'd' => MODULE,
            b'n' => NEW,
            _ => return None,
        };
    }
    Some(flags)
}

/// The flags as CONFIG GET shows them (`keyspaceEventsFlagsToString`): `A` for every class it
/// covers (then `n` is not shown, as in Redis), else the class letters, then `K`, `E`, `m`.
pub fn to_string(flags: u32) -> String {
    let mut s = String::new();
    if flags & ALL == ALL {
        s.push('A');
    } else {
        for (bit, c) in [
            (GENERIC, 'g'),
            (STRING, '$'),
            (LIST, 'l'),
            (SET, 's'),
            (HASH, 'h'),
            (ZSET, 'z'),
            (EXPIRED, 'x'),
            (EVICTED, 'e'),
            (STREAM, 't'),
            (MODULE, 'd'),
            (NEW, 'n'),
        ] {
            if flags & bit != 0 {
                s.push(c);
            }
        }
    }
    for (bit, c) in [(KEYSPACE, 'K'), (KEYEVENT, 'E'), (KEY_MISS, 'm')] {
        if flags & bit != 0 {
            s.push(c);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_round_trip_like_redis() {
        let show = |s: &str| to_string(parse(s.as_bytes()).unwrap());
        // What redis-server 7.0.15 answers to CONFIG GET after CONFIG SET of these.
        assert_eq!(show("g"), "g");
        assert_eq!(show("KEA"), "AKE");
        assert_eq!(show("KEAmn"), "AKEm");
        assert_eq!(show("lgE$"), "g$lE");
        assert_eq!(show(""), "");
        assert_eq!(parse(b"xyz"), None);
        assert_eq!(parse(b"KEAmn").unwrap() & NEW, NEW, "n is kept though A hides it");
    }
}
