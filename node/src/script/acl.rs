//! ACL checks of a script's `redis.call`/`redis.pcall`, as Redis 7.0's `scriptVerifyACL` does
//! them: the user who ran the script (whose rules the router sends with the `Script` op, only
//! when they are restricted) must be allowed the command, its keys and its channels. A refusal
//! is the call's error, with Redis's texts, and is kept for the reply so that the router can add
//! it to ACL LOG with context `lua`.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use shoal_wire::acl::{Denied, Permissions, RuleError, commands};
use shoal_wire::proto::AclDenial;

pub const DENIED_COMMAND: &str = "ERR The user executing the script can't run this command or subcommand";
pub const DENIED_KEY: &str = "ERR The user executing the script can't access at least one of the keys mentioned in the command arguments";
pub const DENIED_CHANNEL: &str =
    "ERR The user executing the script can't publish to the channel mentioned in the command";

/// Distinct rule texts kept parsed; past this the cache starts over (a router sends a few users'
/// rules over and over, so a bound this small still spares nearly every parse).
const CACHE_MAX: usize = 64;
/// Distinct (reason, object) refusals one script run reports; later new ones are dropped (a
/// script refused in a loop over many keys must not make its reply grow without end). Repeats of
/// a kept one are still counted.
const DENIALS_MAX: usize = 128;

/// Parsed permissions by their text.
#[derive(Debug, Default)]
pub struct Cache {
    parsed: HashMap<String, Arc<Permissions>>,
}

impl Cache {
    /// The permissions `rules` describes; `None` for empty rules (nothing is checked).
    pub fn get(&mut self, rules: &str) -> Result<Option<Arc<Permissions>>, RuleError> {
        if rules.is_empty() {
            return Ok(None);
        }
        if let Some(p) = self.parsed.get(rules) {
            return Ok(Some(p.clone()));
        }
        let p = Arc::new(Permissions::parse(rules)?);
        if self.parsed.len() >= CACHE_MAX {
            self.parsed.clear();
        }
        self.parsed.insert(rules.to_string(), p.clone());
        Ok(Some(p))
    }

    pub fn len(&self) -> usize {
        self.parsed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parsed.is_empty()
    }
}

/// Checks one call (`args[0]` is the name) against `perms`; a refusal is recorded in `denials`
/// and returned as Redis's text.
pub fn check(perms: &Permissions, args: &[Bytes], denials: &mut Vec<AclDenial>) -> Result<(), &'static str> {
    // Every command a script may call is in Redis's table or declared among the newer ones (a
    // test says so); one that were in neither is refused rather than let through unchecked.
    let (denied, name) = match commands::resolve(args) {
        Some(id) => (perms.check(id, args).err(), commands::REDIS_COMMANDS[id].name.as_bytes()),
        None => match shoal_wire::acl::newer::lookup(&args[0]) {
            Some(decl) => (perms.check_extension(decl, args).err(), decl.name.as_bytes()),
            None => (Some(Denied::Command), &args[0][..]),
        },
    };
    let Some(denied) = denied else { return Ok(()) };
    let (reason, object, text) = match denied {
        Denied::Command => ("command", Bytes::copy_from_slice(&name.to_ascii_lowercase()), DENIED_COMMAND),
        Denied::Key(i) => ("key", args[i].clone(), DENIED_KEY),
        Denied::Channel(i) => ("channel", args[i].clone(), DENIED_CHANNEL),
    };
    let kept = denials.len();
    match denials.iter_mut().find(|d| d.reason == reason && d.object == object) {
        Some(d) => d.count += 1,
        None if kept < DENIALS_MAX => denials.push(AclDenial { reason: reason.into(), object, count: 1 }),
        None => {}
    }
    Err(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<Bytes> {
        a.iter().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect()
    }

    #[test]
    fn refusals_with_redis_texts_and_counted() {
        let perms = Permissions::parse("~k* &ch* +@all -set").unwrap();
        let mut denials = Vec::new();
        assert_eq!(check(&perms, &args(&["get", "k1"]), &mut denials), Ok(()));
        assert_eq!(check(&perms, &args(&["SET", "k1", "v"]), &mut denials), Err(DENIED_COMMAND));
        assert_eq!(check(&perms, &args(&["get", "x1"]), &mut denials), Err(DENIED_KEY));
        assert_eq!(check(&perms, &args(&["get", "x1"]), &mut denials), Err(DENIED_KEY));
        assert_eq!(check(&perms, &args(&["publish", "zz", "m"]), &mut denials), Err(DENIED_CHANNEL));
        assert_eq!(check(&perms, &args(&["publish", "ch1", "m"]), &mut denials), Ok(()));
        assert_eq!(check(&perms, &args(&["nosuch"]), &mut denials), Err(DENIED_COMMAND));
        let seen: Vec<_> = denials.iter().map(|d| (d.reason.as_str(), &d.object[..], d.count)).collect();
        assert_eq!(
            seen,
            [
                ("command", &b"set"[..], 1),
                ("key", b"x1", 2),
                ("channel", b"zz", 1),
                ("command", b"nosuch", 1)
            ]
        );
        for i in 0..(DENIALS_MAX * 2) {
            let _ = check(&perms, &args(&["get", &format!("x{i}")]), &mut denials);
        }
        assert_eq!(denials.len(), DENIALS_MAX, "bounded");
    }

    #[test]
    fn cache_parses_once_and_stays_bounded() {
        let mut cache = Cache::default();
        assert!(cache.get("").unwrap().is_none(), "empty: unrestricted, nothing to check");
        let a = cache.get("~k* resetchannels -@all +get").unwrap().unwrap();
        let b = cache.get("~k* resetchannels -@all +get").unwrap().unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(cache.get("+nosuch").unwrap_err(), RuleError::UnknownCommand);
        for i in 0..(CACHE_MAX * 2) {
            cache.get(&format!("~k{i} -@all")).unwrap();
        }
        assert!(cache.len() <= CACHE_MAX);
    }

    #[test]
    fn every_script_command_is_in_redis_table() {
        for c in super::super::table::COMMANDS.iter().chain(super::super::table::SERVER.iter()) {
            assert!(commands::lookup(c.name).is_some(), "{}", c.name);
        }
        for c in super::super::table::NEWER.iter() {
            assert!(shoal_wire::acl::newer::lookup(c.name.as_bytes()).is_some(), "{}", c.name);
        }
    }

    #[test]
    fn newer_commands_are_checked_by_their_categories_and_keys() {
        let mut denials = Vec::new();
        let perms = Permissions::parse("~k* +@all").unwrap();
        let call = args(&["hexpire", "k1", "10", "FIELDS", "1", "f"]);
        assert_eq!(check(&perms, &call, &mut denials), Ok(()));
        let call = args(&["hexpire", "x1", "10", "FIELDS", "1", "f"]);
        assert_eq!(check(&perms, &call, &mut denials), Err(DENIED_KEY));
        let perms = Permissions::parse("~* +@all -@hash").unwrap();
        assert_eq!(
            check(&perms, &args(&["httl", "k1", "FIELDS", "1", "f"]), &mut denials),
            Err(DENIED_COMMAND)
        );
    }
}
