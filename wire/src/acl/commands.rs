//! Redis's command table: every Redis 7.0.15 command and subcommand (those Shoal does not serve
//! too, since ACL rules may name them and Redis's describe format counts them), with everything
//! Redis declares about them: arity, flags, legacy key range, ACL categories, docs, and key specs,
//! from which the keys a command touches and whether it reads or writes each one are found
//! (Redis 7's per-key permission check). The one source of these declarations: the router's
//! command specs and the node's script table point into it.

use std::collections::HashMap;
use std::sync::LazyLock;

pub use super::table::REDIS_COMMANDS;

/// ACL category bits, in Redis's order (`ACL CAT` lists them so; the describe format tries them
/// in this order).
pub mod cat {
    pub const KEYSPACE: u32 = 1 << 0;
    pub const READ: u32 = 1 << 1;
    pub const WRITE: u32 = 1 << 2;
    pub const SET: u32 = 1 << 3;
    pub const SORTEDSET: u32 = 1 << 4;
    pub const LIST: u32 = 1 << 5;
    pub const HASH: u32 = 1 << 6;
    pub const STRING: u32 = 1 << 7;
    pub const BITMAP: u32 = 1 << 8;
    pub const HYPERLOGLOG: u32 = 1 << 9;
    pub const GEO: u32 = 1 << 10;
    pub const STREAM: u32 = 1 << 11;
    pub const PUBSUB: u32 = 1 << 12;
    pub const ADMIN: u32 = 1 << 13;
    pub const FAST: u32 = 1 << 14;
    pub const SLOW: u32 = 1 << 15;
    pub const BLOCKING: u32 = 1 << 16;
    pub const DANGEROUS: u32 = 1 << 17;
    pub const CONNECTION: u32 = 1 << 18;
    pub const TRANSACTION: u32 = 1 << 19;
    pub const SCRIPTING: u32 = 1 << 20;
}

/// Category names in Redis's order; bit `i` is `CATEGORIES[i]`.
pub const CATEGORIES: [&str; 21] = [
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

/// A category's bit, by name (case-insensitive).
pub fn category(name: &str) -> Option<u32> {
    CATEGORIES.iter().position(|c| c.eq_ignore_ascii_case(name)).map(|i| 1 << i)
}

/// Command flags, in the order `COMMAND` shows them (Redis's `addReplyCommandFlags`; the ones
/// it hides, such as `may_replicate`, are not here).
pub mod flag {
    pub const WRITE: u32 = 1 << 0;
    pub const READONLY: u32 = 1 << 1;
    pub const DENYOOM: u32 = 1 << 2;
    pub const MODULE: u32 = 1 << 3;
    pub const ADMIN: u32 = 1 << 4;
    pub const PUBSUB: u32 = 1 << 5;
    pub const NOSCRIPT: u32 = 1 << 6;
    pub const BLOCKING: u32 = 1 << 7;
    pub const LOADING: u32 = 1 << 8;
    pub const STALE: u32 = 1 << 9;
    pub const SKIP_MONITOR: u32 = 1 << 10;
    pub const SKIP_SLOWLOG: u32 = 1 << 11;
    pub const ASKING: u32 = 1 << 12;
    pub const FAST: u32 = 1 << 13;
    pub const NO_AUTH: u32 = 1 << 14;
    pub const NO_MANDATORY_KEYS: u32 = 1 << 15;
    pub const NO_ASYNC_LOADING: u32 = 1 << 16;
    pub const NO_MULTI: u32 = 1 << 17;
    pub const MOVABLEKEYS: u32 = 1 << 18;
    pub const ALLOW_BUSY: u32 = 1 << 19;
}

/// Flag names in `COMMAND`'s order; bit `i` is `FLAGS[i]`.
pub const FLAGS: [&str; 20] = [
    "write",
    "readonly",
    "denyoom",
    "module",
    "admin",
    "pubsub",
    "noscript",
    "blocking",
    "loading",
    "stale",
    "skip_monitor",
    "skip_slowlog",
    "asking",
    "fast",
    "no_auth",
    "no_mandatory_keys",
    "no_async_loading",
    "no_multi",
    "movablekeys",
    "allow_busy",
];

/// The names of the bits set in `mask`, in the order of `names` (`FLAGS` or `CATEGORIES`).
pub fn names<const N: usize>(
    mask: u32,
    names: &'static [&'static str; N],
) -> impl Iterator<Item = &'static str> {
    names.iter().enumerate().filter(move |&(i, _)| mask & (1 << i) != 0).map(|(_, n)| *n)
}

/// Where a command's keys are among its arguments as `COMMAND` gives them (first key, last key,
/// step: Redis's legacy range, from its first key spec).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRange {
    pub first: i32,
    /// Negative counts from the end (-1: the last argument).
    pub last: i32,
    pub step: i32,
}

impl KeyRange {
    pub const NONE: KeyRange = KeyRange { first: 0, last: 0, step: 0 };
    pub const ONE: KeyRange = KeyRange { first: 1, last: 1, step: 1 };
    /// Every argument after the name is a key (DEL, MGET, EXISTS).
    pub const ALL: KeyRange = KeyRange { first: 1, last: -1, step: 1 };
    /// Key-value pairs (MSET).
    pub const PAIRS: KeyRange = KeyRange { first: 1, last: -1, step: 2 };
}

/// One command (or `parent|sub` subcommand) of Redis's table: what Redis declares about it.
/// Commands of Shoal's own (SHOAL) are declared in this form too, by the router, with no `id`.
#[derive(Debug)]
pub struct RedisCommand {
    /// Lowercase full name; subcommands are `parent|sub`, as Redis names them in errors.
    pub name: &'static str,
    /// Its position in [`REDIS_COMMANDS`] (its ACL command id); `None`: not a Redis command.
    pub id: Option<CommandId>,
    /// Redis arity: N means exactly N arguments (name included), -N at least N.
    pub arity: i32,
    /// [`flag`] bits.
    pub flags: u32,
    pub key_range: KeyRange,
    /// [`cat`] bits.
    pub categories: u32,
    /// Has subcommands (CLIENT, CONFIG, ...).
    pub container: bool,
    pub keys: &'static [KeySpecDef],
    // What `COMMAND DOCS` answers.
    pub summary: &'static str,
    pub since: &'static str,
    pub group: &'static str,
    pub complexity: &'static str,
}

impl RedisCommand {
    pub const fn has_flag(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    /// Runs before authentication (AUTH, HELLO): never refused by ACL rules.
    pub const fn no_auth(&self) -> bool {
        self.has_flag(flag::NO_AUTH)
    }

    pub const fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i32;
        if self.arity >= 0 { argc == self.arity } else { argc >= -self.arity }
    }
}

/// Where a key spec starts looking (Redis's `begin_search`).
#[derive(Debug, Clone, Copy)]
pub enum Begin {
    Index(usize),
    /// After this keyword, searched from this index (negative: from the end, backwards).
    Keyword(&'static [u8], i32),
    Unknown,
}

/// How a key spec finds its keys from where it starts (Redis's `find_keys`).
#[derive(Debug, Clone, Copy)]
pub enum Find {
    Range { last: i32, step: i32, limit: i32 },
    Keynum { index: i32, first: i32, step: i32 },
    Unknown,
}

/// A key spec: where its keys are, and whether the command reads (`ACCESS`) or writes
/// (`INSERT`, `DELETE`, `UPDATE`) them: what `%R~` and `%W~` patterns are checked against.
#[derive(Debug, Clone, Copy)]
pub struct KeySpecDef {
    pub begin: Begin,
    pub find: Find,
    pub read: bool,
    pub write: bool,
    /// Not a key (SPUBLISH's channel, for cluster routing only): never checked.
    pub not_key: bool,
    pub incomplete: bool,
    /// The flags depend on the arguments (SET ... GET, BITFIELD): see [`keys`].
    pub variable: bool,
}

impl KeySpecDef {
    pub const DEFAULT: KeySpecDef = KeySpecDef {
        begin: Begin::Unknown,
        find: Find::Unknown,
        read: false,
        write: false,
        not_key: false,
        incomplete: false,
        variable: false,
    };
}

/// A command's position in [`REDIS_COMMANDS`]: its bit in a user's command bitmap.
pub type CommandId = usize;

static BY_NAME: LazyLock<HashMap<&'static str, CommandId>> =
    LazyLock::new(|| REDIS_COMMANDS.iter().enumerate().map(|(i, c)| (c.name, i)).collect());

/// A command by its full name (`get`, `client|kill`), case-insensitive.
pub fn lookup(name: &str) -> Option<CommandId> {
    BY_NAME.get(name.to_ascii_lowercase().as_str()).copied()
}

/// The subcommands of a container command (they follow it in the sorted table).
pub fn subcommands(id: CommandId) -> impl Iterator<Item = CommandId> {
    let prefix = format!("{}|", REDIS_COMMANDS[id].name);
    (id + 1..REDIS_COMMANDS.len()).take_while(move |&i| REDIS_COMMANDS[i].name.starts_with(&prefix))
}

/// The command a client's arguments name, as Redis's `lookupCommand` finds it: the subcommand of
/// a container when one is given and exists, else the command itself (`None`: unknown).
pub fn resolve(args: &[impl AsRef<[u8]>]) -> Option<CommandId> {
    let name = std::str::from_utf8(args.first()?.as_ref()).ok()?;
    let id = lookup(name)?;
    if !REDIS_COMMANDS[id].container || args.len() < 2 {
        return Some(id);
    }
    let sub = std::str::from_utf8(args[1].as_ref()).ok()?;
    lookup(&format!("{}|{}", REDIS_COMMANDS[id].name, sub))
}

/// The argument GEORADIUS or GEORADIUSBYMEMBER stores into (STORE or STOREDIST), found as their
/// parser finds it: options from the sixth (fifth for BYMEMBER) argument on, COUNT taking a value,
/// the last STORE/STOREDIST followed by an argument winning. (The key specs name the first STORE
/// keyword; a command that repeats it still writes where its parser says.) Router and node both
/// use this, so the key a node locks is the key it writes.
pub fn georadius_store(args: &[impl AsRef<[u8]>]) -> Option<usize> {
    let name = args.first()?.as_ref();
    let base = if name.eq_ignore_ascii_case(b"georadiusbymember") { 5 } else { 6 };
    let mut found = None;
    let mut i = base;
    while i < args.len() {
        let a = args[i].as_ref();
        let takes_value = a.eq_ignore_ascii_case(b"count")
            || a.eq_ignore_ascii_case(b"store")
            || a.eq_ignore_ascii_case(b"storedist");
        if takes_value && i + 1 < args.len() {
            if !a.eq_ignore_ascii_case(b"count") {
                found = Some(i + 1);
            }
            i += 1;
        }
        i += 1;
    }
    found
}

/// XREAD's and XREADGROUP's keys as their options lay them out (`BLOCK` and `COUNT` take a value,
/// `GROUP` two, `NOACK` none, up to `STREAMS`, then as many IDs as keys): the index of BLOCK's
/// value if given, and the keys' positions. `None` when the options read otherwise (the command
/// answers its own error). Routers route and block by it, nodes pin `$` and narrow waiters by it.
pub fn xread_layout(args: &[impl AsRef<[u8]>]) -> Option<(Option<usize>, std::ops::Range<usize>)> {
    let mut block = None;
    let mut i = 1;
    while i < args.len() {
        let w = args[i].as_ref().to_ascii_lowercase();
        match &w[..] {
            b"streams" => {
                let at = i + 1;
                let n = args.len() - at;
                return (n > 0 && n.is_multiple_of(2)).then_some((block, at..at + n / 2));
            }
            b"block" => {
                block = Some(i + 1);
                i += 2;
            }
            b"count" => i += 2,
            b"group" => i += 3,
            b"noack" => i += 1,
            _ => return None,
        }
    }
    None
}

/// SORT's keys as Redis's own finder (`sortGetKeys`) finds them, its key specs being incomplete:
/// the sorted key, and the last `STORE` destination (options LIMIT, GET and BY skip their
/// arguments). SORT_RO (`readonly`) has only the sorted key.
/// MIGRATE's keys by its own rule (Redis's `migrateGetKeys`: its key specs are incomplete): the
/// key argument, or with an empty one every argument after KEYS (AUTH's and AUTH2's values are
/// skipped on the way); none when both a key and KEYS are given.
pub fn migrate_keys(args: &[impl AsRef<[u8]>]) -> Vec<KeyUse> {
    let key = |index, spec| KeyUse { index, spec, read: true, write: true };
    let mut i = 6;
    while i < args.len() {
        let a = args[i].as_ref();
        if a.eq_ignore_ascii_case(b"keys") {
            if !args[3].as_ref().is_empty() {
                return Vec::new();
            }
            return (i + 1..args.len()).map(|k| key(k, 1)).collect();
        }
        i += if a.eq_ignore_ascii_case(b"auth") {
            2
        } else if a.eq_ignore_ascii_case(b"auth2") {
            3
        } else {
            1
        };
    }
    if args.len() > 3 { vec![key(3, 0)] } else { Vec::new() }
}

pub fn sort_keys(args: &[impl AsRef<[u8]>], readonly: bool) -> Vec<KeyUse> {
    let mut out = vec![KeyUse { index: 1, spec: 0, read: true, write: false }];
    if readonly {
        return out;
    }
    let mut store = None;
    let mut i = 2;
    while i < args.len() {
        let a = args[i].as_ref();
        if a.eq_ignore_ascii_case(b"limit") {
            i += 2;
        } else if a.eq_ignore_ascii_case(b"get") || a.eq_ignore_ascii_case(b"by") {
            i += 1;
        } else if a.eq_ignore_ascii_case(b"store") && i + 1 < args.len() {
            store = Some(i + 1);
        }
        i += 1;
    }
    out.extend(store.map(|index| KeyUse { index, spec: 1, read: false, write: true }));
    out
}

/// Whether Redis's key-spec lookup (`getKeysUsingKeySpecs`) accepts these arguments: every key
/// spec it reaches must find a `numkeys` that is a non-negative integer and a first and last key
/// inside the arguments. Where it does not, Redis falls back to its command's own key finder,
/// which finds no key for every command Shoal serves: COMMAND GETKEYS answers so.
pub fn specs_accept(id: CommandId, args: &[impl AsRef<[u8]>]) -> bool {
    let argc = args.len() as i64;
    for spec in REDIS_COMMANDS[id].keys.iter().filter(|s| !s.not_key) {
        let mut first = match spec.begin {
            Begin::Index(i) => i as i64,
            Begin::Keyword(word, from) => {
                let (start, end) = if from > 0 { (from as i64, argc - 1) } else { (argc + from as i64, 0) };
                let step = if start <= end { 1 } else { -1 };
                let mut i = start;
                let mut found = None;
                while i != end && i >= 1 && i < argc {
                    if args[i as usize].as_ref().eq_ignore_ascii_case(word) {
                        found = Some(i + 1);
                        break;
                    }
                    i += step;
                }
                match found {
                    Some(f) => f,
                    None => continue,
                }
            }
            Begin::Unknown => return false,
        };
        let last = match spec.find {
            Find::Range { last, limit, .. } => {
                if last >= 0 {
                    first + last as i64
                } else if limit == 0 {
                    argc + last as i64
                } else {
                    first + ((argc - first) / limit as i64 + last as i64)
                }
            }
            Find::Keynum { index, first: skip, .. } => {
                let Some(n) = args
                    .get((first + index as i64) as usize)
                    .and_then(|a| crate::num::parse_i64(a.as_ref()))
                    .filter(|&n| n >= 0 && (index as i64) < argc)
                else {
                    return false;
                };
                first += skip as i64;
                first + n - 1
            }
            Find::Unknown => return false,
        };
        if last >= argc || last < first || first >= argc {
            return false;
        }
    }
    true
}

/// One key a command touches: its argument index and what the command does with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyUse {
    pub index: usize,
    /// The key spec that found it (its position in the command's `keys`).
    pub spec: usize,
    pub read: bool,
    pub write: bool,
}

/// The keys of a command's arguments (`args[0]` is the name), by its key specs, as Redis's
/// `getKeysFromCommandWithSpecs`; specs whose flags depend on the arguments use the command's
/// own rule (SET with GET reads its key; BITFIELD with only GETs does not write it).
pub fn keys(id: CommandId, args: &[impl AsRef<[u8]>]) -> Vec<KeyUse> {
    keys_of(&REDIS_COMMANDS[id], args)
}

/// [`keys`] by a declaration's key specs (also for commands newer than Redis 7.0's table).
pub fn keys_of(cmd: &RedisCommand, args: &[impl AsRef<[u8]>]) -> Vec<KeyUse> {
    let argc = args.len();
    let mut out = Vec::new();
    for (spec_index, spec) in cmd.keys.iter().enumerate() {
        if spec.not_key {
            continue;
        }
        let first = match spec.begin {
            Begin::Index(i) => i,
            Begin::Keyword(word, from) => {
                let found = if from > 0 {
                    (from as usize..argc).find(|&i| args[i].as_ref().eq_ignore_ascii_case(word))
                } else {
                    let start = argc as i64 + from as i64;
                    (1..=start.max(0) as usize).rev().find(|&i| args[i].as_ref().eq_ignore_ascii_case(word))
                };
                match found {
                    Some(i) => i + 1,
                    None => continue,
                }
            }
            Begin::Unknown => continue,
        };
        let (first, last, step) = match spec.find {
            Find::Range { last, step, limit } => {
                let end = if last >= 0 {
                    first as i64 + last as i64
                } else if limit == 0 {
                    argc as i64 + last as i64
                } else {
                    first as i64 + ((argc as i64 - first as i64) / limit as i64 + last as i64)
                };
                (first, end, step.max(1))
            }
            Find::Keynum { index, first: skip, step } => {
                let Some(n) = args
                    .get(first + index as usize)
                    .and_then(|a| crate::num::parse_i64(a.as_ref()))
                    .filter(|&n| n >= 0)
                else {
                    continue; // a bad count: the command refuses it itself
                };
                let start = first + skip as usize;
                (start, start as i64 + (n - 1) * step.max(1) as i64, step.max(1))
            }
            Find::Unknown => continue,
        };
        let (read, write) =
            if spec.variable { variable_flags(cmd.name, args) } else { (spec.read, spec.write) };
        let mut i = first as i64;
        while i <= last {
            if i as usize >= argc || (i as usize) < first {
                break;
            }
            out.push(KeyUse { index: i as usize, spec: spec_index, read, write });
            i += step as i64;
        }
    }
    out
}

/// The flags of a key spec marked VARIABLE_FLAGS, from the command's arguments (Redis's
/// `setGetKeys` and `bitfieldGetKeys`).
fn variable_flags(name: &str, args: &[impl AsRef<[u8]>]) -> (bool, bool) {
    match name {
        "set" => {
            let get = args.iter().skip(3).any(|a| a.as_ref().eq_ignore_ascii_case(b"get"));
            (get, true)
        }
        "bitfield" => {
            let mut i = 2;
            let mut readonly = true;
            while i < args.len() {
                let rem = args.len() - i - 1;
                let a = args[i].as_ref();
                if a.eq_ignore_ascii_case(b"get") && rem >= 2 {
                    i += 3;
                } else if a.eq_ignore_ascii_case(b"overflow") && rem >= 1 {
                    i += 2;
                } else {
                    readonly = false;
                    break;
                }
            }
            (true, !readonly)
        }
        _ => (true, true),
    }
}

/// One channel a command names: its argument index, and whether it is a pattern (PSUBSCRIBE),
/// which must equal an allowed pattern rather than match it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelUse {
    pub index: usize,
    pub pattern: bool,
}

/// The channels a command publishes to or subscribes to (Redis's `getChannelsFromCommand`;
/// unsubscribing is never refused).
pub fn channels(id: CommandId, argc: usize) -> Vec<ChannelUse> {
    let (from, to, pattern) = match REDIS_COMMANDS[id].name {
        "publish" | "spublish" => (1, 2.min(argc), false),
        "subscribe" | "ssubscribe" => (1, argc, false),
        "psubscribe" => (1, argc, true),
        _ => return Vec::new(),
    };
    (from..to).map(|index| ChannelUse { index, pattern }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn georadius_stores_where_its_parser_says() {
        let a = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
        assert_eq!(georadius_store(&a("GEORADIUS k 1 2 3 km")), None);
        assert_eq!(georadius_store(&a("GEORADIUS k 1 2 3 km STORE d")), Some(7));
        assert_eq!(georadius_store(&a("georadius k 1 2 3 km count 5 storedist d withdist")), Some(9));
        assert_eq!(georadius_store(&a("GEORADIUS k 1 2 3 km STORE a STOREDIST b")), Some(9), "the last one");
        // COUNT's value is never a keyword; a trailing STORE names nothing.
        assert_eq!(georadius_store(&a("GEORADIUS k 1 2 3 km COUNT store")), None);
        assert_eq!(georadius_store(&a("GEORADIUS k 1 2 3 km STORE")), None);
        assert_eq!(georadius_store(&a("GEORADIUSBYMEMBER k m 3 km STORE d")), Some(6));
    }

    fn uses(cmd: &str, args: &[&str]) -> Vec<(usize, bool, bool)> {
        let id = resolve(args).unwrap_or_else(|| panic!("{cmd}"));
        keys(id, args).into_iter().map(|k| (k.index, k.read, k.write)).collect()
    }

    #[test]
    fn table_and_lookup() {
        assert!(REDIS_COMMANDS.windows(2).all(|w| w[0].name < w[1].name), "sorted");
        assert!(REDIS_COMMANDS.iter().enumerate().all(|(i, c)| c.id == Some(i)), "ids are positions");
        let client = lookup("CLIENT").unwrap();
        assert!(REDIS_COMMANDS[client].container);
        assert!(subcommands(client).any(|s| REDIS_COMMANDS[s].name == "client|kill"));
        assert!(!subcommands(client).any(|s| REDIS_COMMANDS[s].name == "clients"));
        assert_eq!(REDIS_COMMANDS[resolve(&["client", "KILL"]).unwrap()].name, "client|kill");
        assert!(resolve(&["client", "nope"]).is_none());
        assert_eq!(REDIS_COMMANDS[resolve(&["client"]).unwrap()].name, "client");
        assert!(REDIS_COMMANDS[lookup("auth").unwrap()].no_auth());
        assert_eq!(category("Read"), Some(cat::READ));
        let get = &super::super::table::GET;
        assert_eq!(names(get.flags, &FLAGS).collect::<Vec<_>>(), ["readonly", "fast"]);
        assert_eq!(names(get.categories, &CATEGORIES).collect::<Vec<_>>(), ["read", "string", "fast"]);
        assert_eq!(get.key_range, KeyRange::ONE);
        assert!(get.arity_ok(2) && !get.arity_ok(3));
        assert_eq!(category("nope"), None);
    }

    #[test]
    fn key_flags_follow_the_specs() {
        assert_eq!(uses("get", &["get", "k"]), [(1, true, false)]);
        assert_eq!(uses("set", &["set", "k", "v"]), [(1, false, true)], "SET overwrites");
        assert_eq!(uses("set", &["set", "k", "v", "GET"]), [(1, true, true)], "SET ... GET reads too");
        assert_eq!(uses("mset", &["mset", "a", "1", "b", "2"]), [(1, false, true), (3, false, true)]);
        assert_eq!(uses("lmove", &["lmove", "s", "d", "left", "left"]), [(1, true, true), (2, false, true)]);
        assert_eq!(
            uses("eval", &["eval", "s", "2", "a", "b", "x"]),
            [(3, true, true), (4, true, true)],
            "numkeys"
        );
        assert_eq!(uses("eval", &["eval", "s", "x"]), [], "a bad count finds no keys");
        assert_eq!(uses("bitfield", &["bitfield", "k", "get", "u8", "0"]), [(1, true, false)]);
        assert_eq!(uses("bitfield", &["bitfield", "k", "set", "u8", "0", "1"]), [(1, true, true)]);
        assert_eq!(uses("del", &["del", "a", "b"]), [(1, false, true), (2, false, true)]);
        assert_eq!(uses("spublish", &["spublish", "c", "m"]), [], "a shard channel is not a key");
    }

    #[test]
    fn channel_positions() {
        let p = lookup("psubscribe").unwrap();
        assert_eq!(
            channels(p, 3),
            [ChannelUse { index: 1, pattern: true }, ChannelUse { index: 2, pattern: true }]
        );
        assert_eq!(channels(lookup("publish").unwrap(), 3), [ChannelUse { index: 1, pattern: false }]);
        assert!(channels(lookup("unsubscribe").unwrap(), 3).is_empty());
    }
}
