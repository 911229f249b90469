//! Redis 6/7 ACL users, as redis-server 7.0.15 has them (pure logic; the commands are in
//! `cmd/acl.rs`, the checks in `cmd::dispatch`).
//!
//! - [`commands`]: Redis's command table (categories, key specs), from
//!   [`shoal_wire::acl::commands`], which nodes share for the calls of scripts.
//! - [`user`]: one user, its rules (`on`, `>pass`, `~pat`, `%R~pat`, `&chan`, `+@cat`, ...) and
//!   Redis's describe format; its permissions and their check are
//!   [`shoal_wire::acl::Permissions`].
//! - [`file`]: the ACL file (`user <name> <rules>` lines): parse and write.
//! - [`log`]: ACL LOG.
//!
//! [`Acl`] holds the users of one router. A connection holds its user's [`UserCell`], so that
//! ACL SETUSER changes what its connections may do at their next command, as in Redis.

pub mod file;
pub mod log;
pub mod user;

pub use shoal_wire::acl::commands;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Mutex, RwLock};

pub use user::{Denied, RuleError, User, valid_name};

/// A user as connections hold it: rules replaced in place by ACL SETUSER and ACL LOAD.
#[derive(Debug)]
pub struct UserCell {
    pub name: String,
    rules: RwLock<Arc<User>>,
    /// Whether `rules` allow everything, kept beside them (written with them): every command
    /// asks, and a read of the lock was two atomic adds per command.
    unrestricted: AtomicBool,
    /// Deleted (ACL DELUSER, ACL LOAD, a changed ACL file): its connections are closed.
    removed: AtomicBool,
    /// The permissions a script of this user carries to a node, for the rules they were written
    /// from: describing takes a walk over Redis's table, so it is done once per change of rules.
    script_rules: Mutex<Option<(Arc<User>, Arc<str>)>>,
}

impl UserCell {
    fn new(user: User) -> Arc<UserCell> {
        Arc::new(UserCell {
            name: user.name.clone(),
            unrestricted: AtomicBool::new(user.unrestricted()),
            rules: RwLock::new(Arc::new(user)),
            removed: AtomicBool::new(false),
            script_rules: Mutex::new(None),
        })
    }

    pub fn get(&self) -> Arc<User> {
        self.rules.read().clone()
    }

    /// Whether the user may run anything on any key and channel, read in place (dispatch asks
    /// this for every command; most users are such).
    pub fn unrestricted(&self) -> bool {
        self.unrestricted.load(Ordering::Acquire)
    }

    /// New rules in place (ACL SETUSER, ACL LOAD).
    fn set_rules(&self, user: User) {
        let mut rules = self.rules.write();
        self.unrestricted.store(user.unrestricted(), Ordering::Release);
        *rules = Arc::new(user);
    }

    pub fn removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// What a `Script` op carries for this user: nothing when every command, key and channel is
    /// allowed (the common case costs nothing), else the permissions a node checks the script's
    /// calls against.
    pub fn script_rules(&self) -> Arc<str> {
        let user = self.get();
        if user.unrestricted() {
            return Arc::from("");
        }
        let mut cached = self.script_rules.lock();
        match &*cached {
            Some((from, text)) if Arc::ptr_eq(from, &user) => text.clone(),
            _ => {
                let text: Arc<str> = Arc::from(user.perms().describe());
                *cached = Some((user, text.clone()));
                text
            }
        }
    }
}

/// Why an ACL SETUSER was refused.
#[derive(Debug, thiserror::Error)]
pub enum SetUserError {
    #[error("Usernames can't contain spaces or null characters")]
    BadName,
    #[error("Error in ACL SETUSER modifier '{rule}': {error}")]
    Rule { rule: String, error: RuleError },
}

/// The users of one router.
#[derive(Debug)]
pub struct Acl {
    users: RwLock<BTreeMap<String, Arc<UserCell>>>,
    /// The `default` user, which always exists (ACL LOAD copies into it, as Redis does).
    default: Arc<UserCell>,
    pub log: Mutex<log::AclLog>,
    /// `--aclfile`.
    pub file: Option<PathBuf>,
    /// `--requirepass`: the default user's password when a loaded file defines no `default`.
    requirepass: Option<String>,
}

impl Acl {
    /// The users Redis starts with: `default`, with `requirepass` as its password if given.
    pub fn new(requirepass: Option<&str>, file: Option<PathBuf>) -> Acl {
        let default = UserCell::new(User::default_user(requirepass));
        let users = BTreeMap::from([("default".to_string(), default.clone())]);
        Acl {
            users: RwLock::new(users),
            default,
            log: Mutex::new(log::AclLog::default()),
            file,
            requirepass: requirepass.map(str::to_string),
        }
    }

    pub fn default_user(&self) -> &Arc<UserCell> {
        &self.default
    }

    /// Whether a new connection starts authenticated (the default user is on and `nopass`).
    pub fn default_open(&self) -> bool {
        let d = self.default.get();
        d.enabled && d.nopass
    }

    /// Whether the default user needs no password (Redis's protected mode applies then).
    pub fn default_nopass(&self) -> bool {
        self.default.get().nopass
    }

    pub fn user(&self, name: &[u8]) -> Option<Arc<UserCell>> {
        let name = std::str::from_utf8(name).ok()?;
        self.users.read().get(name).cloned()
    }

    /// Checks a user/password pair (AUTH): the user, if it exists, is on and the password is
    /// one of its own.
    pub fn authenticate(&self, name: &[u8], password: &[u8]) -> Option<Arc<UserCell>> {
        let cell = self.user(name)?;
        let u = cell.get();
        (u.enabled && u.check_password(password)).then_some(cell)
    }

    /// The first user (by name) that is on and has `password` (HTTP `Bearer` tokens); users
    /// without a password (`nopass`) are not matched by a token.
    pub fn by_password(&self, password: &[u8]) -> Option<Arc<UserCell>> {
        let users = self.users.read();
        users
            .values()
            .find(|c| {
                let u = c.get();
                u.enabled && !u.nopass && u.check_password(password)
            })
            .cloned()
    }

    /// ACL SETUSER: every rule applies, or none does.
    pub fn set_user(&self, name: &str, rules: &[String]) -> Result<(), SetUserError> {
        if !valid_name(name) {
            return Err(SetUserError::BadName);
        }
        let mut users = self.users.write();
        let mut user = users.get(name).map_or_else(|| User::new(name), |c| (*c.get()).clone());
        for rule in rules {
            user.apply(rule).map_err(|error| SetUserError::Rule { rule: rule.clone(), error })?;
        }
        match users.get(name) {
            Some(cell) => cell.set_rules(user),
            None => {
                users.insert(name.to_string(), UserCell::new(user));
            }
        }
        Ok(())
    }

    /// ACL DELUSER: removes the users that exist (never `default`, which the caller refuses),
    /// and returns them (their connections are to be closed).
    pub fn delete(&self, names: &[String]) -> Vec<Arc<UserCell>> {
        let mut users = self.users.write();
        let mut gone = Vec::new();
        for n in names {
            if n == "default" {
                continue;
            }
            if let Some(cell) = users.remove(n) {
                cell.removed.store(true, Ordering::Release);
                gone.push(cell);
            }
        }
        gone
    }

    /// Every user, by name.
    pub fn users(&self) -> Vec<Arc<User>> {
        self.users.read().values().map(|c| c.get()).collect()
    }

    /// Replaces every user with `loaded` (ACL LOAD, a changed ACL file). The default user's
    /// rules are copied into the one that exists (connections keep it); when `loaded` has none
    /// it gets Redis's initial rules, with `--requirepass` as its password if one was given
    /// (Redis would leave it `nopass`: a file of other users must not open the cluster to
    /// anyone; see docs/compatibility.md). With `keep_same`, users that are still defined
    /// keep their connections (their rules change in place); otherwise, as Redis's ACL LOAD
    /// does, every other user is replaced and its connections closed. Returns the users whose
    /// connections are to be closed.
    pub fn replace(&self, loaded: Vec<User>, keep_same: bool) -> Vec<Arc<UserCell>> {
        let mut users = self.users.write();
        let mut next = BTreeMap::new();
        let mut default = User::default_user(self.requirepass.as_deref());
        for u in loaded {
            if u.name == "default" {
                default = u;
                continue;
            }
            let cell = match users.get(&u.name) {
                Some(old) if keep_same => {
                    old.set_rules(u);
                    old.clone()
                }
                _ => UserCell::new(u),
            };
            next.insert(cell.name.clone(), cell);
        }
        self.default.set_rules(default);
        next.insert("default".to_string(), self.default.clone());
        let old = std::mem::replace(&mut *users, next);
        let mut gone = Vec::new();
        for (name, cell) in old {
            if name != "default" && !users.get(&name).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
                cell.removed.store(true, Ordering::Release);
                gone.push(cell);
            }
        }
        gone
    }

    /// The ACL file's text for the current users.
    pub fn save_text(&self) -> String {
        file::render(&self.users())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(r: &[&str]) -> Vec<String> {
        r.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn requirepass_is_the_default_users_password() {
        let open = Acl::new(None, None);
        assert!(open.default_open());
        assert!(open.authenticate(b"default", b"anything").is_some());
        let locked = Acl::new(Some("s3cret"), None);
        assert!(!locked.default_open() && !locked.default_nopass());
        assert!(locked.authenticate(b"default", b"s3cret").is_some());
        assert!(locked.authenticate(b"default", b"s3cre").is_none());
        assert!(locked.authenticate(b"bob", b"s3cret").is_none());
    }

    #[test]
    fn setuser_is_all_or_nothing_and_shared_with_connections() {
        let acl = Acl::new(None, None);
        acl.set_user("bob", &rules(&["on", ">pw"])).unwrap();
        let held = acl.authenticate(b"bob", b"pw").expect("on, with that password");
        let err = acl.set_user("bob", &rules(&["off", "+nosuch"])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL"
        );
        assert!(held.get().enabled, "nothing applied");
        // What every command asks first follows the rules a connection holds.
        assert!(!held.unrestricted(), "a new user may run nothing");
        acl.set_user("bob", &rules(&["+@all", "allkeys", "allchannels"])).unwrap();
        assert!(held.unrestricted());
        acl.set_user("bob", &rules(&["-get"])).unwrap();
        assert!(!held.unrestricted());
        acl.replace(vec![User::new("bob")], true);
        assert!(!held.unrestricted() && !held.removed(), "ACL LOAD kept bob, with the file's rules");
        let default = acl.default_user().clone();
        assert!(default.unrestricted());
        acl.replace(vec![User::new("default")], true);
        assert!(!default.unrestricted(), "a loaded default user with no rules");
        acl.set_user("bob", &rules(&["off"])).unwrap();
        assert!(!held.get().enabled, "a connection sees the change");
        assert!(acl.authenticate(b"bob", b"pw").is_none(), "off");
        assert!(matches!(acl.set_user("a b", &[]), Err(SetUserError::BadName)));
        let gone = acl.delete(&rules(&["bob", "nobody", "default"]));
        assert_eq!(gone.len(), 1);
        assert!(held.removed());
        assert!(acl.user(b"default").is_some());
    }

    #[test]
    fn replace_keeps_default_and_maybe_the_others() {
        let acl = Acl::new(None, None);
        acl.set_user("a", &rules(&["on", "nopass"])).unwrap();
        acl.set_user("b", &rules(&["on", "nopass"])).unwrap();
        let a = acl.user(b"a").unwrap();
        let b = acl.user(b"b").unwrap();
        let mut new_a = User::new("a");
        new_a.apply("+@all").unwrap();
        let mut new_default = User::new("default");
        new_default.apply(">x").unwrap();
        let gone = acl.replace(vec![new_a.clone(), new_default], true);
        assert_eq!(gone.len(), 1);
        assert!(b.removed() && !a.removed());
        assert_eq!(a.get().describe(), new_a.describe());
        assert!(!acl.default_nopass(), "the default user took the file's rules");
        let gone = acl.replace(vec![new_a], false);
        assert!(a.removed(), "Redis's ACL LOAD replaces every other user");
        assert_eq!(gone.len(), 1);
        assert!(acl.default_open(), "no default user in the file: Redis's initial one");
    }

    #[test]
    fn script_rules_are_empty_for_unrestricted_users() {
        let acl = Acl::new(None, None);
        assert_eq!(&*acl.default_user().script_rules(), "", "the default user sends nothing");
        acl.set_user("all", &rules(&["on", "nopass", "~*", "&*", "+@all"])).unwrap();
        assert_eq!(&*acl.user(b"all").unwrap().script_rules(), "");
        acl.set_user("u", &rules(&["on", ">p", "~k*", "+@all", "-set"])).unwrap();
        let u = acl.user(b"u").unwrap();
        let sent = u.script_rules();
        assert_eq!(&*sent, "~k* resetchannels +@all -set", "permissions only, no password hash");
        assert!(Arc::ptr_eq(&sent, &u.script_rules()), "described once per change of rules");
        acl.set_user("u", &rules(&["allchannels"])).unwrap();
        assert_eq!(&*u.script_rules(), "~k* &* +@all -set", "a change of rules is seen");
        let parsed = shoal_wire::acl::Permissions::parse(&u.script_rules()).unwrap();
        assert_eq!(&parsed, u.get().perms(), "a node parses back the same permissions");
    }

    #[test]
    fn tokens_match_users_with_that_password() {
        let acl = Acl::new(None, None);
        acl.set_user("svc", &rules(&["on", ">tok"])).unwrap();
        acl.set_user("zed", &rules(&["off", ">tok2"])).unwrap();
        assert_eq!(acl.by_password(b"tok").unwrap().name, "svc");
        assert!(acl.by_password(b"tok2").is_none(), "off");
        assert!(acl.by_password(b"whatever").is_none(), "the nopass default user is no token's");
    }
}
