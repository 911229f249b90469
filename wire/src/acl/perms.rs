//! What an ACL user may do: its commands, key patterns and channel patterns; the rules that
//! change them (the `+@cat`, `-cmd`, `~pat`, `%R~pat`, `&chan`, ... modifiers of `ACL SETUSER`
//! and the ACL file); the permission check of one command (Redis 7.0's `ACLSelectorCheckCmd`);
//! and their part of the describe format, as Redis 7.0 prints it.
//!
//! A user's name, flags and passwords stay with the router (`router/src/acl/user.rs`): a node
//! checks a script's calls against [`Permissions`] alone, parsed from [`Permissions::describe`],
//! so no password hash ever leaves the router.

use std::collections::BTreeMap;

use crate::glob::glob_match;

use super::commands::{self, CATEGORIES, CommandId, REDIS_COMMANDS, RedisCommand};

/// Enough 64-bit words for one bit per command of Redis's table.
const WORDS: usize = 8;

/// Why a rule was refused; the texts are Redis's (`ERR Error in ACL SETUSER modifier '...': <text>`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("Syntax error")]
    Syntax,
    #[error("Unknown command or category name in ACL")]
    UnknownCommand,
    #[error("Allowing first-arg of a subcommand is not supported")]
    FirstArgOfSubcommand,
    #[error(
        "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters"
    )]
    BadHash,
    #[error("The password you are trying to remove from the user does not exist")]
    NoSuchPassword,
    #[error(
        "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns"
    )]
    KeyAfterAll,
    #[error(
        "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels"
    )]
    ChannelAfterAll,
    /// Redis 7 selectors (`(...)`, `clearselectors`) are not supported by Shoal.
    #[error("Selectors are not supported by Shoal")]
    Selectors,
}

/// Why a command was refused, with the argument index of the key or channel that was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    Command,
    Key(usize),
    Channel(usize),
}

/// Which commands a user may run: Redis's bitmap of command ids, plus the reserved "future
/// commands" bit that only `+@all` sets (it makes the describe format start with `+@all`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Commands {
    bits: [u64; WORDS],
    future: bool,
    /// `+select|0`: first arguments allowed for an otherwise refused command without subcommands.
    first_args: BTreeMap<CommandId, Vec<String>>,
}

impl Commands {
    fn get(&self, id: CommandId) -> bool {
        self.bits[id / 64] & (1 << (id % 64)) != 0
    }

    fn set(&mut self, id: CommandId, on: bool) {
        if on {
            self.bits[id / 64] |= 1 << (id % 64);
        } else {
            self.bits[id / 64] &= !(1 << (id % 64));
        }
    }

    /// Redis's `ACLChangeSelectorPerm`: the command and all its subcommands, first args dropped.
    fn change(&mut self, id: CommandId, on: bool) {
        self.set(id, on);
        self.first_args.remove(&id);
        if REDIS_COMMANDS[id].container {
            for sub in commands::subcommands(id) {
                self.set(sub, on);
            }
        }
    }

    fn all(&mut self, on: bool) {
        self.bits = if on { [u64::MAX; WORDS] } else { [0; WORDS] };
        self.future = on;
        self.first_args.clear();
    }

    fn category(&mut self, flag: u32, on: bool) {
        for (id, cmd) in REDIS_COMMANDS.iter().enumerate() {
            if cmd.categories & flag != 0 {
                self.change(id, on);
            }
        }
    }

    /// Commands of the category this allows and refuses.
    fn count(&self, flag: u32) -> (usize, usize) {
        let (mut on, mut off) = (0, 0);
        for (id, cmd) in REDIS_COMMANDS.iter().enumerate() {
            if cmd.categories & flag != 0 {
                if self.get(id) { on += 1 } else { off += 1 }
            }
        }
        (on, off)
    }

    /// Redis 7.0's `ACLDescribeSelectorCommandRules`: `+@all` or `-@all`, then the categories
    /// that best fit the bitmap (each time the one with the fewest exceptions), then single
    /// commands for what is left. Where several single commands remain, Redis prints them in
    /// its hash table's order, which changes from one Redis process to the next; Shoal prints
    /// them in name order.
    fn describe(&self) -> String {
        let mut rules = String::new();
        let mut fake = Commands::default();
        let additive = !self.future;
        fake.all(!additive);
        rules.push_str(if additive { "-@all " } else { "+@all " });
        let mut temp = Commands { bits: self.bits, ..Commands::default() };
        loop {
            let mut best = None;
            let (mut min_diff, mut max_same) = (usize::MAX, 0);
            for (i, _) in CATEGORIES.iter().enumerate() {
                let (on, off) = temp.count(1 << i);
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && (diff < min_diff || (diff == min_diff && same > max_same)) {
                    best = Some(i);
                    min_diff = diff;
                    max_same = same;
                }
            }
            let Some(i) = best else { break };
            fake.category(1 << i, additive);
            temp.category(1 << i, !additive);
            rules.push_str(if additive { "+@" } else { "-@" });
            rules.push_str(CATEGORIES[i]);
            rules.push(' ');
        }
        for (id, cmd) in REDIS_COMMANDS.iter().enumerate() {
            let on = self.get(id);
            if on != fake.get(id) {
                rules.push(if on { '+' } else { '-' });
                rules.push_str(cmd.name);
                rules.push(' ');
                fake.change(id, on);
            }
            if !on && let Some(args) = self.first_args.get(&id) {
                for arg in args {
                    rules.push_str(&format!("+{}|{} ", cmd.name, arg));
                }
            }
        }
        rules.pop();
        rules
    }
}

/// A key pattern and what it allows: `~p` both, `%R~p` reading, `%W~p` writing.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KeyPattern {
    pattern: String,
    read: bool,
    write: bool,
}

impl KeyPattern {
    fn describe(&self) -> String {
        match (self.read, self.write) {
            (true, true) => format!("~{}", self.pattern),
            (true, false) => format!("%R~{}", self.pattern),
            _ => format!("%W~{}", self.pattern),
        }
    }
}

/// A user's permissions: commands, keys and channels.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Permissions {
    commands: Commands,
    allkeys: bool,
    keys: Vec<KeyPattern>,
    allchannels: bool,
    channels: Vec<String>,
}

impl Permissions {
    /// Everything allowed: `~* &* +@all` (Redis's initial `default` user).
    pub fn all() -> Permissions {
        let mut p = Permissions::default();
        for rule in ["allkeys", "allchannels", "+@all"] {
            p.apply(rule).expect("a valid rule");
        }
        p
    }

    /// Parses the rules [`Permissions::describe`] wrote (or any permission rules, separated by
    /// spaces), from nothing allowed.
    pub fn parse(rules: &str) -> Result<Permissions, RuleError> {
        let mut p = Permissions::default();
        for rule in rules.split(' ').filter(|r| !r.is_empty()) {
            p.apply(rule)?;
        }
        Ok(p)
    }

    /// Applies one permission rule (Redis's `ACLSetSelector`); anything else is a syntax error
    /// (the router handles the user's flags and passwords before it asks here).
    pub fn apply(&mut self, rule: &str) -> Result<(), RuleError> {
        let lower = rule.to_ascii_lowercase();
        match lower.as_str() {
            "allkeys" => {
                self.allkeys = true;
                self.keys.clear();
            }
            "resetkeys" => {
                self.allkeys = false;
                self.keys.clear();
            }
            "allchannels" => {
                self.allchannels = true;
                self.channels.clear();
            }
            "resetchannels" => {
                self.allchannels = false;
                self.channels.clear();
            }
            "allcommands" | "+@all" => self.commands.all(true),
            "nocommands" | "-@all" => self.commands.all(false),
            "clearselectors" => return Err(RuleError::Selectors),
            _ => return self.apply_prefixed(rule),
        }
        Ok(())
    }

    fn apply_prefixed(&mut self, rule: &str) -> Result<(), RuleError> {
        let Some(first) = rule.chars().next() else { return Err(RuleError::Syntax) };
        let rest = &rule[first.len_utf8()..];
        match first {
            '~' | '%' => self.add_key_pattern(rule)?,
            '&' => {
                if self.allchannels {
                    return Err(RuleError::ChannelAfterAll);
                }
                if rest == "*" {
                    return self.apply("allchannels");
                }
                if !self.channels.iter().any(|c| c == rest) {
                    self.channels.push(rest.to_string());
                }
            }
            '+' | '-' => self.command_rule(first == '+', rest)?,
            '(' => return Err(RuleError::Selectors),
            _ => return Err(RuleError::Syntax),
        }
        Ok(())
    }
    fn add_key_pattern(&mut self, rule: &str) -> Result<(), RuleError> {
        if self.allkeys {
            return Err(RuleError::KeyAfterAll);
        }
        let (read, write, pattern) = if let Some(rest) = rule.strip_prefix('%') {
            let (mut read, mut write) = (false, false);
            let mut pattern = None;
            for (i, c) in rest.char_indices() {
                match c {
                    'R' | 'r' if !read => read = true,
                    'W' | 'w' if !write => write = true,
                    '~' => {
                        pattern = Some(&rest[i + 1..]);
                        break;
                    }
                    _ => return Err(RuleError::Syntax),
                }
            }
            match pattern {
                Some(p) if read || write => (read, write, p),
                _ => return Err(RuleError::Syntax),
            }
        } else {
            (true, true, &rule[1..])
        };
        if pattern == "*" && read && write {
            return self.apply("allkeys");
        }
        match self.keys.iter_mut().find(|k| k.pattern == pattern) {
            Some(k) => {
                k.read |= read;
                k.write |= write;
            }
            None => self.keys.push(KeyPattern { pattern: pattern.to_string(), read, write }),
        }
        Ok(())
    }

    /// `+cmd`, `-cmd`, `+cmd|sub`, `+@category`, `-@category`.
    fn command_rule(&mut self, allow: bool, name: &str) -> Result<(), RuleError> {
        if let Some(cat) = name.strip_prefix('@') {
            let flag = commands::category(cat).ok_or(RuleError::UnknownCommand)?;
            self.commands.category(flag, allow);
            return Ok(());
        }
        let split = name.rfind('|').filter(|_| allow);
        let Some(bar) = split else {
            let id = commands::lookup(name).ok_or(RuleError::UnknownCommand)?;
            self.commands.change(id, allow);
            return Ok(());
        };
        let (parent, sub) = (&name[..bar], &name[bar + 1..]);
        let id = commands::lookup(parent).ok_or(RuleError::UnknownCommand)?;
        if parent.contains('|') {
            return Err(RuleError::FirstArgOfSubcommand);
        }
        if REDIS_COMMANDS[id].container {
            let sub_id = commands::lookup(name).ok_or(RuleError::UnknownCommand)?;
            self.commands.change(sub_id, true);
        } else {
            let args = self.commands.first_args.entry(id).or_default();
            if !args.iter().any(|a| a.eq_ignore_ascii_case(sub)) {
                args.push(sub.to_string());
            }
        }
        Ok(())
    }

    /// Whether every command and key and channel is allowed (checks can be skipped).
    pub fn unrestricted(&self) -> bool {
        self.allkeys && self.allchannels && self.commands.bits == [u64::MAX; WORDS]
    }

    /// Whether the user may run Redis command `id` with these arguments (Redis's
    /// `ACLSelectorCheckCmd`).
    pub fn check(&self, id: CommandId, args: &[impl AsRef<[u8]>]) -> Result<(), Denied> {
        let cmd = &REDIS_COMMANDS[id];
        if !cmd.no_auth() && !self.commands.get(id) {
            let at = if cmd.name.contains('|') { 2 } else { 1 };
            let allowed = self.commands.first_args.get(&id).is_some_and(|allowed| {
                args.get(at)
                    .is_some_and(|a| allowed.iter().any(|f| f.as_bytes().eq_ignore_ascii_case(a.as_ref())))
            });
            if !allowed {
                return Err(Denied::Command);
            }
        }
        self.check_keys(cmd, args)?;
        if !self.allchannels {
            for c in commands::channels(id, args.len()) {
                let channel = args[c.index].as_ref();
                let ok = self.channels.iter().any(|p| {
                    if c.pattern { p.as_bytes() == channel } else { glob_match(p.as_bytes(), channel) }
                });
                if !ok {
                    return Err(Denied::Channel(c.index));
                }
            }
        }
        Ok(())
    }

    /// For commands Shoal has and Redis does not (SHOAL): allowed when the rules started from
    /// `+@all` (as Redis treats commands newer than the rules) and no command of the command's
    /// categories was taken away.
    pub fn allows_extension(&self, categories: u32) -> bool {
        self.commands.future
            && (0..CATEGORIES.len())
                .map(|i| 1 << i)
                .filter(|bit| categories & bit != 0)
                .all(|bit| self.commands.count(bit).1 == 0)
    }

    /// [`Self::allows_extension`] for a command declared with key specs (a command newer than
    /// Redis 7.0, such as DELIFEQ): the command by its categories, then its keys as [`Self::check`]
    /// checks them.
    pub fn check_extension(&self, cmd: &RedisCommand, args: &[impl AsRef<[u8]>]) -> Result<(), Denied> {
        if !self.allows_extension(cmd.categories) {
            return Err(Denied::Command);
        }
        self.check_keys(cmd, args)
    }

    /// Every key `cmd` reads or writes matches a pattern that allows that access.
    fn check_keys(&self, cmd: &RedisCommand, args: &[impl AsRef<[u8]>]) -> Result<(), Denied> {
        if self.allkeys {
            return Ok(());
        }
        for k in commands::keys_of(cmd, args) {
            let key = args[k.index].as_ref();
            let ok = self.keys.iter().any(|p| {
                (p.read || !k.read) && (p.write || !k.write) && glob_match(p.pattern.as_bytes(), key)
            });
            if !ok {
                return Err(Denied::Key(k.index));
            }
        }
        Ok(())
    }

    /// `~a %R~b`, or `~*` (GETUSER's `keys`).
    pub fn describe_keys(&self) -> String {
        if self.allkeys {
            return "~*".into();
        }
        self.keys.iter().map(KeyPattern::describe).collect::<Vec<_>>().join(" ")
    }

    /// `&a &b`, or `&*` (GETUSER's `channels`).
    pub fn describe_channels(&self) -> String {
        if self.allchannels {
            return "&*".into();
        }
        self.channels.iter().map(|c| format!("&{c}")).collect::<Vec<_>>().join(" ")
    }

    /// The command rules (GETUSER's `commands`).
    pub fn describe_commands(&self) -> String {
        self.commands.describe()
    }

    /// The rules that give a fresh user these permissions, in the order and words of Redis's
    /// `ACLDescribeUser` after the flags and passwords: keys, channels (after `resetchannels`
    /// unless all are allowed), commands.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        if self.allkeys {
            out.push_str("~* ");
        } else {
            for k in &self.keys {
                out.push_str(&k.describe());
                out.push(' ');
            }
        }
        if self.allchannels {
            out.push_str("&* ");
        } else {
            out.push_str("resetchannels ");
            for c in &self.channels {
                out.push('&');
                out.push_str(c);
                out.push(' ');
            }
        }
        out.push_str(&self.commands.describe());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::commands::cat;

    fn perms(rules: &str) -> Permissions {
        Permissions::parse(rules).unwrap_or_else(|e| panic!("{rules}: {e}"))
    }

    fn id(name: &str) -> CommandId {
        commands::lookup(name).unwrap()
    }

    #[test]
    fn the_table_fits_the_bitmap() {
        assert!(REDIS_COMMANDS.len() <= WORDS * 64);
    }

    #[test]
    fn describe_parses_back_to_the_same_permissions() {
        // What a router sends a node for a script is `describe()`: parsing it must give back
        // exactly the permissions it was written from.
        for rules in [
            "",
            "~k* %R~r* %W~w* &ch* -@all +@read -get +set +client|setname",
            "allkeys allchannels +@all -@dangerous +config|get",
            "-@all +select|0 %R~a %W~a %W~b",
            "+@all -set ~k*",
            "-@all +client -client|kill &a &b",
        ] {
            let p = perms(rules);
            assert_eq!(Permissions::parse(&p.describe()), Ok(p.clone()), "{rules} -> {}", p.describe());
        }
        assert_eq!(Permissions::all().describe(), "~* &* +@all");
        assert!(Permissions::all().unrestricted());
        assert!(!perms("+@all ~* &a").unrestricted());
        assert!(!perms("allkeys allchannels +@all -set").unrestricted());
    }

    #[test]
    fn rule_errors() {
        let mut p = Permissions::default();
        assert_eq!(p.apply("foo"), Err(RuleError::Syntax));
        assert_eq!(p.apply(">password"), Err(RuleError::Syntax), "passwords are the router's");
        assert_eq!(p.apply("on"), Err(RuleError::Syntax), "flags are the router's");
        assert_eq!(p.apply("+nosuch"), Err(RuleError::UnknownCommand));
        assert_eq!(p.apply("+@nosuch"), Err(RuleError::UnknownCommand));
        assert_eq!(p.apply("+client|x"), Err(RuleError::UnknownCommand));
        assert_eq!(p.apply("+client|kill|a"), Err(RuleError::FirstArgOfSubcommand));
        assert_eq!(p.apply("-get|x"), Err(RuleError::UnknownCommand));
        assert_eq!(p.apply("%X~a"), Err(RuleError::Syntax));
        assert_eq!(p.apply("%~a"), Err(RuleError::Syntax));
        assert_eq!(p.apply("(~a +get)"), Err(RuleError::Selectors));
        p.apply("allkeys").unwrap();
        assert_eq!(p.apply("~a"), Err(RuleError::KeyAfterAll));
        p.apply("allchannels").unwrap();
        assert_eq!(p.apply("&a"), Err(RuleError::ChannelAfterAll));
        assert_eq!(Permissions::parse("~a +nosuch"), Err(RuleError::UnknownCommand));
    }

    #[test]
    fn permission_checks() {
        let u = perms("-@all +get +set +lmove +publish +psubscribe +client|setname ~k* %R~r* %W~w* &ch*");
        assert_eq!(u.check(id("get"), &["get", "k1"]), Ok(()));
        assert_eq!(u.check(id("del"), &["del", "k1"]), Err(Denied::Command));
        assert_eq!(u.check(id("get"), &["get", "r1"]), Ok(()));
        assert_eq!(u.check(id("get"), &["get", "w1"]), Err(Denied::Key(1)));
        assert_eq!(u.check(id("set"), &["set", "w1", "v"]), Ok(()));
        assert_eq!(u.check(id("set"), &["set", "w1", "v", "get"]), Err(Denied::Key(1)));
        assert_eq!(u.check(id("set"), &["set", "r1", "v"]), Err(Denied::Key(1)));
        assert_eq!(u.check(id("lmove"), &["lmove", "k1", "w1", "left", "left"]), Ok(()));
        assert_eq!(u.check(id("lmove"), &["lmove", "r1", "k1", "left", "left"]), Err(Denied::Key(1)));
        assert_eq!(u.check(id("publish"), &["publish", "zz", "m"]), Err(Denied::Channel(1)));
        assert_eq!(u.check(id("publish"), &["publish", "ch1", "m"]), Ok(()));
        assert_eq!(u.check(id("psubscribe"), &["psubscribe", "c*"]), Err(Denied::Channel(1)));
        assert_eq!(u.check(id("psubscribe"), &["psubscribe", "ch*"]), Ok(()), "a pattern must equal one");
        assert_eq!(u.check(id("client|setname"), &["client", "setname", "x"]), Ok(()));
        assert_eq!(u.check(id("client|kill"), &["client", "kill", "x"]), Err(Denied::Command));
        assert_eq!(u.check(id("auth"), &["auth", "x"]), Ok(()), "no_auth commands are never refused");
        let first = perms("-@all +select|0");
        assert_eq!(first.check(id("select"), &["select", "0"]), Ok(()));
        assert_eq!(first.check(id("select"), &["select", "1"]), Err(Denied::Command));
    }

    #[test]
    fn extension_commands_need_all_of_their_categories() {
        assert!(perms("+@all").allows_extension(cat::ADMIN | cat::SLOW));
        assert!(!perms("+@all -config|set").allows_extension(cat::ADMIN));
        assert!(!perms("-@all +@admin").allows_extension(cat::ADMIN), "not from +@all");
        // A newer command's keys are checked by its own key specs.
        let delifeq = RedisCommand {
            name: "delifeq",
            categories: cat::WRITE | cat::STRING | cat::FAST,
            keys: REDIS_COMMANDS[id("getdel")].keys,
            ..REDIS_COMMANDS[id("getdel")]
        };
        assert_eq!(perms("+@all ~k*").check_extension(&delifeq, &["delifeq", "k1", "v"]), Ok(()));
        assert_eq!(perms("+@all ~k*").check_extension(&delifeq, &["delifeq", "x", "v"]), Err(Denied::Key(1)));
        assert_eq!(
            perms("+@all %R~k*").check_extension(&delifeq, &["delifeq", "k1", "v"]),
            Err(Denied::Key(1))
        );
        assert_eq!(
            perms("+@all -@string").check_extension(&delifeq, &["delifeq", "k1", "v"]),
            Err(Denied::Command)
        );
    }
}
