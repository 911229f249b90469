//! List commands. The node runs them (`node/src/commands/list.rs`); these are their specs, as
//! redis-server 7.0 declares them.

use super::spec::*;
use super::typed::{read_key, write_key};

pub const LPUSH: CommandSpec = CommandSpec {
    name: "lpush",
    arity: -3,
    flags: &["write", "denyoom", "fast"],
    keys: KeySpec::ONE,
    acl: &["@write", "@list", "@fast"],
    group: "list",
    since: "1.0.0",
    summary: "Prepend one or multiple elements to a list",
    complexity: "O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const RPUSH: CommandSpec = CommandSpec {
    name: "rpush",
    arity: -3,
    flags: &["write", "denyoom", "fast"],
    keys: KeySpec::ONE,
    acl: &["@write", "@list", "@fast"],
    group: "list",
    since: "1.0.0",
    summary: "Append one or multiple elements to a list",
    complexity: "O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const LPUSHX: CommandSpec = CommandSpec {
    name: "lpushx",
    arity: -3,
    flags: &["write", "denyoom", "fast"],
    keys: KeySpec::ONE,
    acl: &["@write", "@list", "@fast"],
    group: "list",
    since: "2.2.0",
    summary: "Prepend an element to a list, only if the list exists",
    complexity: "O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const RPUSHX: CommandSpec = CommandSpec {
    name: "rpushx",
    arity: -3,
    flags: &["write", "denyoom", "fast"],
    keys: KeySpec::ONE,
    acl: &["@write", "@list", "@fast"],
    group: "list",
    since: "2.2.0",
    summary: "Append an element to a list, only if the list exists",
    complexity: "O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const LPOP: CommandSpec = CommandSpec {
    name: "lpop",
    arity: -2,
    flags: &["write", "fast"],
    keys: KeySpec::ONE,
    acl: &["@write", "@list", "@fast"],
    group: "list",
    since: "1.0.0",
    summary: "Remove and get the first elements in a list",
    complexity: "O(N) where N is the number of elements returned",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const RPOP: CommandSpec = CommandSpec {
    name: "rpop",
    arity: -2,
    flags: &["write", "fast"],
    keys: KeySpec::ONE,
    acl: &["@write", "@list", "@fast"],
    group: "list",
    since: "1.0.0",
    summary: "Remove and get the last elements in a list",
    complexity: "O(N) where N is the number of elements returned",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const LLEN: CommandSpec = CommandSpec {
    name: "llen",
    arity: 2,
    flags: &["readonly", "fast"],
    keys: KeySpec::ONE,
    acl: &["@read", "@list", "@fast"],
    group: "list",
    since: "1.0.0",
    summary: "Get the length of a list",
    complexity: "O(1)",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const LRANGE: CommandSpec = CommandSpec {
    name: "lrange",
    arity: 4,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@list", "@slow"],
    group: "list",
    since: "1.0.0",
    summary: "Get a range of elements from a list",
    complexity: "O(S+N) where S is the distance of start offset from HEAD for small lists, from nearest end (HEAD or TAIL) for large lists; and N is the number of elements in the specified range.",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const LINDEX: CommandSpec = CommandSpec {
    name: "lindex",
    arity: 3,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@list", "@slow"],
    group: "list",
    since: "1.0.0",
    summary: "Get an element from a list by its index",
    complexity: "O(N) where N is the number of elements to traverse to get to the element at index. This makes asking for the first or the last element of the list O(1).",
    run: read_key,
    ..CommandSpec::DEFAULT
};

pub const LSET: CommandSpec = CommandSpec {
    name: "lset",
    arity: 4,
    flags: &["write", "denyoom"],
    keys: KeySpec::ONE,
    acl: &["@write", "@list", "@slow"],
    group: "list",
    since: "1.0.0",
    summary: "Set the value of an element in a list by its index",
    complexity: "O(N) where N is the length of the list. Setting either the first or the last element of the list is O(1).",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const LINSERT: CommandSpec = CommandSpec {
    name: "linsert",
    arity: 5,
    flags: &["write", "denyoom"],
    keys: KeySpec::ONE,
    acl: &["@write", "@list", "@slow"],
    group: "list",
    since: "2.2.0",
    summary: "Insert an element before or after another element in a list",
    complexity: "O(N) where N is the number of elements to traverse before seeing the value pivot. This means that inserting somewhere on the left end on the list (head) can be considered O(1) and inserting somewhere on the right end (tail) is O(N).",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const LREM: CommandSpec = CommandSpec {
    name: "lrem",
    arity: 4,
    flags: &["write"],
    keys: KeySpec::ONE,
    acl: &["@write", "@list", "@slow"],
    group: "list",
    since: "1.0.0",
    summary: "Remove elements from a list",
    complexity: "O(N+M) where N is the length of the list and M is the number of elements removed.",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const LTRIM: CommandSpec = CommandSpec {
    name: "ltrim",
    arity: 4,
    flags: &["write"],
    keys: KeySpec::ONE,
    acl: &["@write", "@list", "@slow"],
    group: "list",
    since: "1.0.0",
    summary: "Trim a list to the specified range",
    complexity: "O(N) where N is the number of elements to be removed by the operation.",
    run: write_key,
    ..CommandSpec::DEFAULT
};

pub const LPOS: CommandSpec = CommandSpec {
    name: "lpos",
    arity: -3,
    flags: &["readonly"],
    keys: KeySpec::ONE,
    acl: &["@read", "@list", "@slow"],
    group: "list",
    since: "6.0.6",
    summary: "Return the index of matching elements on a list",
    complexity: "O(N) where N is the number of elements in the list, for the average case. When searching for elements near the head or the tail of the list, or when the MAXLEN option is provided, the command may run in constant time.",
    run: read_key,
    ..CommandSpec::DEFAULT
};
