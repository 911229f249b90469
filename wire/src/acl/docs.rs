//! What redis-server 7.0.15 says about each command beyond [`super::table`]'s numbers: its COMMAND
//! INFO tips and key specs and its COMMAND DOCS entry (summary, history, arguments, ...), kept as
//! redis-server's own RESP3 bytes (`docs.resp`, written by `gen_table.py`) and read here into a
//! tree on first use. A router answers COMMAND INFO, COMMAND DOCS and COMMAND GETKEYSANDFLAGS
//! from it in either protocol.

use std::collections::HashMap;
use std::sync::LazyLock;

static DATA: &[u8] = include_bytes!("docs.resp");

/// A RESP3 value of the data (borrowed from it).
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Map(Vec<(Node, Node)>),
    Array(Vec<Node>),
    Set(Vec<Node>),
    Simple(&'static str),
    Bulk(&'static [u8]),
    Int(i64),
}

impl Node {
    /// The value of `key` in a map.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(pairs) => pairs.iter().find(|(k, _)| k.text() == Some(key)).map(|(_, v)| v),
            _ => None,
        }
    }

    /// A string's text.
    pub fn text(&self) -> Option<&'static str> {
        match self {
            Node::Simple(s) => Some(s),
            Node::Bulk(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The elements of an array or a set.
    pub fn items(&self) -> &[Node] {
        match self {
            Node::Array(v) | Node::Set(v) => v,
            _ => &[],
        }
    }
}

/// One command's (or subcommand's) entry.
#[derive(Debug)]
pub struct Docs {
    /// COMMAND INFO's tips (a set).
    pub tips: Node,
    /// COMMAND INFO's key specs (a set of maps), in the order key spec indexes count.
    pub key_specs: Node,
    /// COMMAND DOCS's map, without `subcommands`.
    pub docs: Node,
}

/// Every command and subcommand by lower-case full name (`get`, `client|kill`).
static ALL: LazyLock<HashMap<&'static str, Docs>> = LazyLock::new(|| {
    let (root, end) = parse(DATA, 0).expect("docs.resp parses");
    assert_eq!(end, DATA.len(), "docs.resp holds one map");
    let Node::Map(pairs) = root else { panic!("docs.resp is not a map") };
    pairs
        .into_iter()
        .map(|(name, entry)| {
            let name = name.text().expect("a command name");
            let Node::Array(mut parts) = entry else { panic!("{name}: not an array") };
            assert_eq!(parts.len(), 3, "{name}: tips, key specs, docs");
            let docs = parts.pop().expect("three parts");
            let key_specs = parts.pop().expect("three parts");
            let tips = parts.pop().expect("three parts");
            (name, Docs { tips, key_specs, docs })
        })
        .collect()
});

/// The entry of a command (`name` lower case, `parent|sub` for a subcommand).
pub fn docs(name: &str) -> Option<&'static Docs> {
    ALL.get(name)
}

/// The flag names of a command's key spec `index` (`RW`, `access`, `update`, ...), as COMMAND
/// INFO and COMMAND GETKEYSANDFLAGS list them.
pub fn key_spec_flags(name: &str, index: usize) -> Vec<&'static str> {
    docs(name)
        .and_then(|d| d.key_specs.items().get(index))
        .and_then(|spec| spec.get("flags"))
        .map(|f| f.items().iter().filter_map(Node::text).collect())
        .unwrap_or_default()
}

fn line(data: &'static [u8], at: usize) -> Option<(&'static [u8], usize)> {
    let end = at + data.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
    Some((&data[at..end], end + 2))
}

fn number(b: &[u8]) -> Option<i64> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// The RESP3 value at `at` and where it ends (only the types COMMAND's replies use).
fn parse(data: &'static [u8], at: usize) -> Option<(Node, usize)> {
    let (head, mut at) = line(data, at)?;
    let (kind, rest) = head.split_first()?;
    let many = |n: usize, mut at: usize| -> Option<(Vec<Node>, usize)> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let (node, end) = parse(data, at)?;
            out.push(node);
            at = end;
        }
        Some((out, at))
    };
    Some(match kind {
        b'$' => {
            let n = usize::try_from(number(rest)?).ok()?;
            let body = data.get(at..at + n)?;
            (Node::Bulk(body), at + n + 2)
        }
        b'+' => (Node::Simple(std::str::from_utf8(rest).ok()?), at),
        b':' => (Node::Int(number(rest)?), at),
        b'*' | b'~' => {
            let (items, end) = many(usize::try_from(number(rest)?).ok()?, at)?;
            (if *kind == b'*' { Node::Array(items) } else { Node::Set(items) }, end)
        }
        b'%' => {
            let n = usize::try_from(number(rest)?).ok()?;
            let mut pairs = Vec::with_capacity(n);
            for _ in 0..n {
                let (k, end) = parse(data, at)?;
                let (v, end) = parse(data, end)?;
                pairs.push((k, v));
                at = end;
            }
            (Node::Map(pairs), at)
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_of_the_table_has_its_docs() {
        for c in super::super::commands::REDIS_COMMANDS {
            let d = docs(c.name).unwrap_or_else(|| panic!("{} has no docs", c.name));
            assert_eq!(d.key_specs.items().len(), c.keys.len(), "{}: one key spec each", c.name);
        }
        let get = docs("get").unwrap();
        assert_eq!(get.docs.get("summary").and_then(Node::text), Some("Get the value of a key"));
        assert_eq!(key_spec_flags("get", 0), ["RO", "access"]);
        assert_eq!(key_spec_flags("set", 0), ["RW", "access", "update", "variable_flags"]);
        assert!(docs("client|kill").unwrap().docs.get("arguments").is_some());
        assert_eq!(
            docs("georadius").unwrap().docs.get("deprecated_since").and_then(Node::text),
            Some("6.2.0")
        );
    }
}
