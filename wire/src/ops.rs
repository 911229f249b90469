//! What an op is, as both sides of the wire must agree: the key it is about, and how it behaves
//! while its slot moves between nodes (the router picks a path by it, the node answers a
//! `fallback` read by it).

use crate::proto::{Op, op::Kind};

/// How an op behaves while its key's slot moves (docs/architecture.md, "Rules that make it
/// lossless").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpClass {
    /// Reads the key only: asked of the new owner first, of the old one if the new has nothing
    /// (not even a recorded delete).
    Read,
    /// Replaces the key whatever it held: goes to the new owner only.
    Write,
    /// Removes the key: goes to the old owner, then (unless it refused) to the new one.
    Delete,
    /// Depends on the key's current value: the key is copied to the new owner first.
    ReadModifyWrite,
    /// About no single key (whole-keyspace ops, multi-key ops, migration plumbing).
    NoKey,
}

/// The key `op` is about, if it is about exactly one.
pub fn key_of(op: &Op) -> Option<&[u8]> {
    Some(match op.kind.as_ref()? {
        Kind::Get(o) => &o.key,
        Kind::Set(o) => &o.key,
        Kind::SetIfEqual(o) => &o.set.as_ref()?.key,
        Kind::Del(o) => &o.key,
        Kind::Exists(o) => &o.key,
        Kind::Touch(o) => &o.key,
        Kind::TypeOf(o) => &o.key,
        Kind::Append(o) => &o.key,
        Kind::Strlen(o) => &o.key,
        Kind::GetRange(o) => &o.key,
        Kind::SetRange(o) => &o.key,
        Kind::IncrBy(o) => &o.key,
        Kind::IncrByFloat(o) => &o.key,
        Kind::GetDel(o) => &o.key,
        Kind::GetEx(o) => &o.key,
        Kind::Expire(o) => &o.key,
        Kind::Persist(o) => &o.key,
        Kind::Ttl(o) => &o.key,
        Kind::Fetch(o) => &o.key,
        // Multi-key commands (and scratch runs) are about no single key.
        Kind::Command(o) if o.scratch || !o.keys.is_empty() => return None,
        Kind::Command(o) => o.args.get((o.key_index as usize).max(1))?,
        Kind::Scan(_) | Kind::Keys(_) | Kind::RandomKey(_) | Kind::DbSize(_) | Kind::Flush(_) => return None,
        Kind::SlotStats(_) => return None,
        Kind::MsetNx(_) | Kind::Import(_) | Kind::Piece(_) | Kind::Assembled(_) => return None,
        // The router watches (and releases) one key per op.
        Kind::Watch(o) if o.keys.len() == 1 => &o.keys[0],
        Kind::Transaction(_) | Kind::Watch(_) => return None,
        // A channel is not a key: any node delivers a message (see the `Publish` message).
        Kind::Publish(_) => return None,
        // A script's keys are checked as a group on the node; script admin ops name none.
        Kind::Script(_) | Kind::ScriptAdmin(_) => return None,
    })
}

/// Every key `op` names (a transaction's: its ops' keys, in order), for checks that need all
/// of them. Whole-keyspace ops name none.
pub fn keys_of(op: &Op) -> Vec<&[u8]> {
    let mut out = Vec::new();
    push_keys(op, &mut out);
    out
}

fn push_keys<'a>(op: &'a Op, out: &mut Vec<&'a [u8]>) {
    if let Some(k) = key_of(op) {
        out.push(k);
        return;
    }
    match &op.kind {
        Some(Kind::MsetNx(o)) => out.extend(o.keys.iter().map(|k| &k[..])),
        Some(Kind::Command(o)) if !o.scratch => out.extend(o.keys.iter().map(|k| &k[..])),
        Some(Kind::Import(o)) => out.extend(o.entries.iter().map(|e| &e.key[..])),
        Some(Kind::Watch(o)) => out.extend(o.keys.iter().map(|k| &k[..])),
        Some(Kind::Transaction(t)) => {
            for op in &t.ops {
                push_keys(op, out);
            }
            out.extend(t.watches.iter().map(|w| &w.key[..]));
        }
        Some(Kind::Script(s)) => out.extend(s.keys.iter().map(|k| &k[..])),
        _ => {}
    }
}

pub fn class_of(op: &Op) -> OpClass {
    let Some(kind) = &op.kind else { return OpClass::NoKey };
    match kind {
        Kind::Get(_)
        | Kind::Exists(_)
        | Kind::Touch(_)
        | Kind::TypeOf(_)
        | Kind::Strlen(_)
        | Kind::GetRange(_)
        | Kind::Ttl(_) => OpClass::Read,
        Kind::Command(c) if c.readonly => OpClass::Read,
        Kind::Set(s) if s.condition == 0 && !s.get && !s.keep_ttl => OpClass::Write,
        Kind::Del(_) => OpClass::Delete,
        _ if key_of(op).is_none() => OpClass::NoKey,
        _ => OpClass::ReadModifyWrite,
    }
}

/// Whether `op` changes nothing, so that sending it again after its first attempt's fate became
/// unknown (a link that failed with it in flight) cannot apply anything twice: reads, and the
/// read-only whole-keyspace and migration ops.
pub fn resendable(op: &Op) -> bool {
    match &op.kind {
        Some(
            Kind::Fetch(_)
            | Kind::Scan(_)
            | Kind::Keys(_)
            | Kind::RandomKey(_)
            | Kind::DbSize(_)
            | Kind::SlotStats(_),
        ) => true,
        _ => class_of(op) == OpClass::Read,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Get, Set, SetCondition};

    #[test]
    fn only_ops_that_change_nothing_are_resendable() {
        let get = op(Kind::Get(Get { key: "k".into(), ..Default::default() }));
        let set = op(Kind::Set(Set { key: "k".into(), value: "v".into(), ..Default::default() }));
        assert!(resendable(&get));
        assert!(!resendable(&set), "a SET may have run; a second one could overwrite a later write");
        let push = crate::proto::Command {
            args: vec!["rpush".into(), "l".into(), "x".into()],
            ..Default::default()
        };
        assert!(!resendable(&op(Kind::Command(Box::new(push.clone())))));
        let read = crate::proto::Command { readonly: true, args: vec!["lrange".into(), "l".into()], ..push };
        assert!(resendable(&op(Kind::Command(Box::new(read)))));
    }

    fn op(kind: Kind) -> Op {
        Op { kind: Some(kind), ..Default::default() }
    }

    #[test]
    fn only_unconditional_sets_are_plain_writes() {
        assert_eq!(class_of(&op(Kind::Get(Get { key: "k".into(), ..Default::default() }))), OpClass::Read);
        let set = |f: fn(&mut Set)| {
            let mut s = Set { key: "k".into(), ..Default::default() };
            f(&mut s);
            class_of(&op(Kind::Set(s)))
        };
        assert_eq!(set(|_| {}), OpClass::Write);
        assert_eq!(set(|s| s.condition = SetCondition::SetIfAbsent as i32), OpClass::ReadModifyWrite);
        assert_eq!(set(|s| s.get = true), OpClass::ReadModifyWrite);
        assert_eq!(set(|s| s.keep_ttl = true), OpClass::ReadModifyWrite);
        assert_eq!(class_of(&op(Kind::DbSize(Default::default()))), OpClass::NoKey);
        assert_eq!(class_of(&Op::default()), OpClass::NoKey);
    }
}
