//! One ACL user: its flags, password hashes and permissions; the rules that change them
//! (`ACL SETUSER`'s modifiers, the ACL file's words); the permission check; and the describe
//! format of `ACL LIST`, `ACL GETUSER` and the ACL file, as Redis 7.0 prints it.

use std::collections::BTreeMap;

use shoal_wire::glob::glob_match;

use super::commands::{self, CATEGORIES, CommandId, REDIS_COMMANDS};

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

/// One user. Passwords are kept as SHA-256 hex, as Redis keeps them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub enabled: bool,
    pub nopass: bool,
    /// `sanitize-payload` (true) or `skip-sanitize-payload` (false) when a rule set one.
    sanitize: Option<bool>,
    passwords: Vec<String>,
    commands: Commands,
    allkeys: bool,
    keys: Vec<KeyPattern>,
    allchannels: bool,
    channels: Vec<String>,
}

/// SHA-256 of a password, in lowercase hex (how Redis stores and prints passwords).
pub fn hash_password(password: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, password);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

fn valid_hash(h: &str) -> bool {
    h.len() == 64 && h.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

impl User {
    /// A new user as `ACL SETUSER name` creates it: off, no passwords, no permissions (Redis
    /// 7.0's `acl-pubsub-default` is `resetchannels`).
    pub fn new(name: &str) -> User {
        User {
            name: name.to_string(),
            enabled: false,
            nopass: false,
            sanitize: None,
            passwords: Vec::new(),
            commands: Commands::default(),
            allkeys: false,
            keys: Vec::new(),
            allchannels: false,
            channels: Vec::new(),
        }
    }

    /// The `default` user Redis starts with: `on nopass ~* &* +@all`, or with `requirepass` the
    /// password instead of `nopass`.
    pub fn default_user(requirepass: Option<&str>) -> User {
        let mut u = User::new("default");
        for rule in ["on", "allkeys", "allchannels", "+@all"] {
            u.apply(rule).expect("a valid rule");
        }
        match requirepass {
            Some(p) => u.passwords.push(hash_password(p.as_bytes())),
            None => u.nopass = true,
        }
        u
    }

    /// Applies one rule (Redis's `ACLSetUser`).
    pub fn apply(&mut self, rule: &str) -> Result<(), RuleError> {
        let lower = rule.to_ascii_lowercase();
        match lower.as_str() {
            "on" => self.enabled = true,
            "off" => self.enabled = false,
            "nopass" => {
                self.nopass = true;
                self.passwords.clear();
            }
            "resetpass" => {
                self.nopass = false;
                self.passwords.clear();
            }
            "sanitize-payload" => self.sanitize = Some(true),
            "skip-sanitize-payload" => self.sanitize = Some(false),
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
            "reset" => {
                for r in ["resetpass", "resetkeys", "resetchannels", "off", "sanitize-payload", "-@all"] {
                    self.apply(r)?;
                }
            }
            "clearselectors" => return Err(RuleError::Selectors),
            _ => return self.apply_prefixed(rule),
        }
        Ok(())
    }

    fn apply_prefixed(&mut self, rule: &str) -> Result<(), RuleError> {
        let Some(first) = rule.chars().next() else { return Err(RuleError::Syntax) };
        let rest = &rule[first.len_utf8()..];
        match first {
            '>' => {
                let h = hash_password(rest.as_bytes());
                if !self.passwords.contains(&h) {
                    self.passwords.push(h);
                }
                self.nopass = false;
            }
            '#' => {
                if !valid_hash(rest) {
                    return Err(RuleError::BadHash);
                }
                if !self.passwords.iter().any(|p| p == rest) {
                    self.passwords.push(rest.to_string());
                }
                self.nopass = false;
            }
            '<' | '!' => {
                let h = if first == '<' {
                    hash_password(rest.as_bytes())
                } else if valid_hash(rest) {
                    rest.to_string()
                } else {
                    return Err(RuleError::BadHash);
                };
                let before = self.passwords.len();
                self.passwords.retain(|p| *p != h);
                if self.passwords.len() == before {
                    return Err(RuleError::NoSuchPassword);
                }
            }
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

    /// Whether `password` is one of this user's (any password, for a `nopass` user).
    pub fn check_password(&self, password: &[u8]) -> bool {
        if self.nopass {
            return true;
        }
        let h = hash_password(password);
        // Every hash is compared, so the time does not tell which one matched.
        self.passwords
            .iter()
            .fold(false, |ok, p| shoal_wire::auth::constant_time_eq(p.as_bytes(), h.as_bytes()) | ok)
    }

    /// Whether every command and key and channel is allowed (checks can be skipped).
    pub fn unrestricted(&self) -> bool {
        self.allkeys && self.allchannels && self.commands.bits == [u64::MAX; WORDS]
    }

    /// Whether the user may run Redis command `id` with these arguments (Redis's
    /// `ACLSelectorCheckCmd`).
    pub fn check(&self, id: CommandId, args: &[impl AsRef<[u8]>]) -> Result<(), Denied> {
        let cmd = &REDIS_COMMANDS[id];
        if !cmd.no_auth && !self.commands.get(id) {
            let at = if cmd.name.contains('|') { 2 } else { 1 };
            let allowed = self.commands.first_args.get(&id).is_some_and(|allowed| {
                args.get(at)
                    .is_some_and(|a| allowed.iter().any(|f| f.as_bytes().eq_ignore_ascii_case(a.as_ref())))
            });
            if !allowed {
                return Err(Denied::Command);
            }
        }
        if !self.allkeys {
            for k in commands::keys(id, args) {
                let key = args[k.index].as_ref();
                let ok = self.keys.iter().any(|p| {
                    (p.read || !k.read) && (p.write || !k.write) && glob_match(p.pattern.as_bytes(), key)
                });
                if !ok {
                    return Err(Denied::Key(k.index));
                }
            }
        }
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
    pub fn allows_extension(&self, categories: &[&str]) -> bool {
        self.commands.future
            && categories.iter().all(|c| {
                commands::category(c.trim_start_matches('@'))
                    .is_none_or(|flag| self.commands.count(flag).1 == 0)
            })
    }

    pub fn flags(&self) -> Vec<&'static str> {
        let mut flags = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            flags.push("nopass");
        }
        match self.sanitize {
            Some(false) => flags.push("skip-sanitize-payload"),
            Some(true) => flags.push("sanitize-payload"),
            None => {}
        }
        flags
    }

    pub fn passwords(&self) -> &[String] {
        &self.passwords
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

    /// The rules after `user <name> ` in ACL LIST and the ACL file (Redis's `ACLDescribeUser`).
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for f in self.flags() {
            out.push_str(f);
            out.push(' ');
        }
        for p in &self.passwords {
            out.push('#');
            out.push_str(p);
            out.push(' ');
        }
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

    fn user(rules: &str) -> User {
        let mut u = User::new("t");
        for r in rules.split_whitespace() {
            u.apply(r).unwrap_or_else(|e| panic!("{r}: {e}"));
        }
        u
    }

    fn id(name: &str) -> CommandId {
        commands::lookup(name).unwrap()
    }

    #[test]
    fn the_table_fits_the_bitmap() {
        assert!(REDIS_COMMANDS.len() <= WORDS * 64);
    }

    #[test]
    fn describe_like_redis_7_0() {
        // Each expected line is what redis-server 7.0.15 printed for the same rules (where several
        // single commands remain, Redis's order is its hash table's, different in each process;
        // Shoal's is by name).
        assert_eq!(User::default_user(None).describe(), "on nopass ~* &* +@all");
        assert_eq!(user("").describe(), "off resetchannels -@all");
        assert_eq!(
            user("on >p1 ~k* %R~r* %W~w* &ch* -@all +@read -get +set +client|setname +get resetchannels &x")
                .describe(),
            "on #f64551fcd6f07823cb87971cfb91446425da18286b3ab1ef935e0cbd7a69f68a ~k* %R~r* %W~w* resetchannels &x -@all +@read +client|setname +set"
        );
        assert_eq!(
            user("+@all -@dangerous +config|get").describe_commands(),
            "+@all -@dangerous +config|get"
        );
        assert_eq!(user("+@all -@dangerous -flushall").describe_commands(), "+@all -@dangerous");
        assert_eq!(user("-@all +get +set -get").describe_commands(), "-@all +set");
        assert_eq!(
            user("-@all +client +client|setname -client|kill").describe_commands(),
            "-@all +client -client|kill"
        );
        assert_eq!(user("-@all +select|0").describe_commands(), "-@all +select|0");
        assert_eq!(user("%R~a %W~a").describe_keys(), "~a", "the same pattern merges its permissions");
        assert_eq!(user("%RW~*").describe_keys(), "~*");
        assert_eq!(user("reset").describe(), "off sanitize-payload resetchannels -@all");
    }

    #[test]
    fn rule_errors() {
        let mut u = User::new("t");
        assert_eq!(u.apply("foo"), Err(RuleError::Syntax));
        assert_eq!(u.apply("+nosuch"), Err(RuleError::UnknownCommand));
        assert_eq!(u.apply("+@nosuch"), Err(RuleError::UnknownCommand));
        assert_eq!(u.apply("+client|x"), Err(RuleError::UnknownCommand));
        assert_eq!(u.apply("+client|kill|a"), Err(RuleError::FirstArgOfSubcommand));
        assert_eq!(u.apply("-get|x"), Err(RuleError::UnknownCommand));
        assert_eq!(u.apply("%X~a"), Err(RuleError::Syntax));
        assert_eq!(u.apply("%~a"), Err(RuleError::Syntax));
        assert_eq!(u.apply("#abc"), Err(RuleError::BadHash));
        assert_eq!(u.apply("<nope"), Err(RuleError::NoSuchPassword));
        u.apply("allkeys").unwrap();
        assert_eq!(u.apply("~a"), Err(RuleError::KeyAfterAll));
        u.apply("allchannels").unwrap();
        assert_eq!(u.apply("&a"), Err(RuleError::ChannelAfterAll));
    }

    #[test]
    fn passwords() {
        let mut u = user(">one >two");
        assert!(u.check_password(b"one") && u.check_password(b"two") && !u.check_password(b"three"));
        u.apply("<one").unwrap();
        assert!(!u.check_password(b"one"));
        u.apply(&format!("!{}", hash_password(b"two"))).unwrap();
        assert!(!u.check_password(b"two"));
        u.apply("nopass").unwrap();
        assert!(u.check_password(b"anything"));
        u.apply("resetpass").unwrap();
        assert!(!u.check_password(b"anything"));
        assert_eq!(hash_password(b"p1"), "f64551fcd6f07823cb87971cfb91446425da18286b3ab1ef935e0cbd7a69f68a");
    }

    #[test]
    fn permission_checks() {
        let u = user("-@all +get +set +lmove +publish +psubscribe +client|setname ~k* %R~r* %W~w* &ch*");
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
        let first = user("-@all +select|0");
        assert_eq!(first.check(id("select"), &["select", "0"]), Ok(()));
        assert_eq!(first.check(id("select"), &["select", "1"]), Err(Denied::Command));
    }

    #[test]
    fn extension_commands_need_all_of_their_categories() {
        assert!(user("+@all").allows_extension(&["@admin", "@slow"]));
        assert!(!user("+@all -config|set").allows_extension(&["@admin"]));
        assert!(!user("-@all +@admin").allows_extension(&["@admin"]), "not from +@all");
    }
}
