//! What a command declares about itself, as Redis 7 declares it (so arity errors and `COMMAND`
//! replies agree with Redis), next to the function that runs it: each command file has a
//! `pub const NAME: CommandSpec` beside its handler, and [`super::registry`] lists them.

use super::{Args, Ctx, Pending};
use crate::resp::Reply;

/// Where a command's keys are among its arguments (`COMMAND INFO`'s first key, last key, step).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySpec {
    pub first: i32,
    /// Negative counts from the end (-1: the last argument).
    pub last: i32,
    pub step: i32,
}

impl KeySpec {
    pub const NONE: KeySpec = KeySpec { first: 0, last: 0, step: 0 };
    pub const ONE: KeySpec = KeySpec { first: 1, last: 1, step: 1 };
    /// Every argument after the name is a key (DEL, MGET, EXISTS).
    pub const ALL: KeySpec = KeySpec { first: 1, last: -1, step: 1 };
    /// Key-value pairs (MSET).
    pub const PAIRS: KeySpec = KeySpec { first: 1, last: -1, step: 2 };
}

#[derive(Debug)]
pub struct CommandSpec {
    /// Lowercase full name; subcommands are `parent|sub`, as Redis names them in errors.
    pub name: &'static str,
    /// Redis arity: N means exactly N arguments (name included), -N at least N.
    pub arity: i32,
    pub flags: &'static [&'static str],
    pub keys: KeySpec,
    /// ACL categories (`@read`, `@string`, ...).
    pub acl: &'static [&'static str],
    /// The command group `COMMAND DOCS` reports.
    pub group: &'static str,
    pub since: &'static str,
    pub summary: &'static str,
    pub complexity: &'static str,
    pub run: fn(&Args, &mut Ctx) -> Pending,
    pub subcommands: &'static [&'static CommandSpec],
}

impl CommandSpec {
    /// The base every spec is written over (`..CommandSpec::DEFAULT`).
    pub const DEFAULT: CommandSpec = CommandSpec {
        name: "",
        arity: 0,
        flags: &[],
        keys: KeySpec::NONE,
        acl: &[],
        group: "",
        since: "",
        summary: "",
        complexity: "",
        run: |_, _| Reply::error("ERR command not implemented").into(),
        subcommands: &[],
    };

    /// The name without its parent (`setname` for `client|setname`).
    pub fn short_name(&self) -> &'static str {
        self.name.rsplit('|').next().unwrap_or(self.name)
    }

    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i32;
        if self.arity >= 0 { argc == self.arity } else { argc >= -self.arity }
    }

    /// Whether the command runs before authentication (AUTH, HELLO, QUIT, RESET).
    pub fn no_auth(&self) -> bool {
        self.flags.contains(&"no_auth")
    }

    pub fn subcommand(&self, name: &[u8]) -> Option<&'static CommandSpec> {
        self.subcommands.iter().copied().find(|s| s.short_name().as_bytes().eq_ignore_ascii_case(name))
    }
}

// ACL category sets and flag sets that many commands share.
pub const FAST_CONN: &[&str] = &["@fast", "@connection"];
pub const SLOW_CONN: &[&str] = &["@slow", "@connection"];
pub const READ_STRING_FAST: &[&str] = &["@read", "@string", "@fast"];
pub const WRITE_STRING_FAST: &[&str] = &["@write", "@string", "@fast"];
pub const WRITE_STRING_SLOW: &[&str] = &["@write", "@string", "@slow"];
pub const KEYSPACE_READ_FAST: &[&str] = &["@keyspace", "@read", "@fast"];
pub const KEYSPACE_WRITE_FAST: &[&str] = &["@keyspace", "@write", "@fast"];
pub const NO_AUTH: &[&str] = &["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"];
pub const SUB_FLAGS: &[&str] = &["noscript", "loading", "stale"];
/// Flags and ACL categories of the server-administration subcommands (CONFIG, SLOWLOG, LATENCY, ...).
pub const ADMIN_FLAGS: &[&str] = &["admin", "noscript", "loading", "stale"];
pub const ADMIN_ACL: &[&str] = &["@admin", "@slow", "@dangerous"];
