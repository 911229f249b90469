//! One ACL user: its flags, password hashes and permissions; the rules that change them
//! (`ACL SETUSER`'s modifiers, the ACL file's words); and the describe format of `ACL LIST`,
//! `ACL GETUSER` and the ACL file, as Redis 7.0 prints it. The permissions themselves (commands,
//! keys, channels, their rules and check) are [`shoal_wire::acl::Permissions`], which nodes share
//! to check a script's calls; this file adds what only the router needs.

use shoal_wire::acl::commands::{CommandId, RedisCommand};
pub use shoal_wire::acl::{Denied, Permissions, RuleError};

/// One user. Passwords are kept as SHA-256 hex, as Redis keeps them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub enabled: bool,
    pub nopass: bool,
    /// `sanitize-payload` (true) or `skip-sanitize-payload` (false) when a rule set one.
    sanitize: Option<bool>,
    passwords: Vec<String>,
    perms: Permissions,
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
            perms: Permissions::default(),
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
            "reset" => {
                for r in ["resetpass", "resetkeys", "resetchannels", "off", "sanitize-payload", "-@all"] {
                    self.apply(r)?;
                }
            }
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
            // Everything else is about what the user may do.
            _ => return self.perms.apply(rule),
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

    /// The user's permissions (what a script of theirs carries to a node, when restricted).
    pub fn perms(&self) -> &Permissions {
        &self.perms
    }

    /// Whether every command and key and channel is allowed (checks can be skipped).
    pub fn unrestricted(&self) -> bool {
        self.perms.unrestricted()
    }

    /// Whether the user may run Redis command `id` with these arguments.
    pub fn check(&self, id: CommandId, args: &[impl AsRef<[u8]>]) -> Result<(), Denied> {
        self.perms.check(id, args)
    }

    /// See [`Permissions::check_extension`]: a command newer than Redis 7.0, with its keys.
    pub fn check_extension(&self, cmd: &RedisCommand, args: &[impl AsRef<[u8]>]) -> Result<(), Denied> {
        self.perms.check_extension(cmd, args)
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
        self.perms.describe_keys()
    }

    /// `&a &b`, or `&*` (GETUSER's `channels`).
    pub fn describe_channels(&self) -> String {
        self.perms.describe_channels()
    }

    /// The command rules (GETUSER's `commands`).
    pub fn describe_commands(&self) -> String {
        self.perms.describe_commands()
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
        out.push_str(&self.perms.describe());
        out
    }
}

/// Whether a name may be a user's (Redis refuses spaces and NUL bytes).
pub fn valid_name(name: &str) -> bool {
    !name.bytes().any(|b| b == b' ' || b == 0)
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
}
