//! Redis 7.0.15's ACL permissions, as pure logic shared by the router (which checks every
//! command a client sends) and the nodes (which check every `redis.call`/`redis.pcall` of a
//! script against the rules of the user who ran it).
//!
//! - [`commands`]: Redis's command table (every command and subcommand, generated into
//!   [`table`] by `gen_table.py` from redis-server's `COMMAND` and `COMMAND DOCS`): arity,
//!   flags, key range, categories, docs and key specs (what the router's command specs and the
//!   node's script table take their declarations from), and the keys and channels a command's
//!   arguments name.
//! - [`docs`]: the rest of what redis-server says about each command (COMMAND INFO's tips and
//!   key specs, COMMAND DOCS's entries with arguments and history), its own RESP3 bytes
//!   (`docs.resp`, also written by `gen_table.py`) read into a tree on first use.
//! - [`perms`]: a user's permissions (commands, key patterns, channel patterns), the rules that
//!   change them, the check of one command, and their describe format.
//!
//! Users themselves (names, passwords, `on`/`off`), ACL LOG and the ACL commands are the
//! router's (`router/src/acl/`).

pub mod commands;
pub mod docs;
pub mod newer;
pub mod perms;
pub mod table;

pub use perms::{Denied, Permissions, RuleError};
