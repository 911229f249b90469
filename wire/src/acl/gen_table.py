#!/usr/bin/env python3
"""Regenerates table.rs: Redis 7.0.15's command table (every command and subcommand: arity,
flags, legacy key positions, ACL categories, key specs and the docs fields Shoal answers
COMMAND DOCS with), read from a running redis-server:

    redis-server --port 7390 --save '' --daemonize yes
    python3 wire/src/acl/gen_table.py 7390 > wire/src/acl/table.rs && cargo fmt --all

ACL rules name any Redis command (`-debug`, `+@all -xadd`), and Redis's describe format picks
categories by counting every command in them, so the table is Redis's, not only Shoal's. Each
command is a `pub const` (the router's specs point at them in const context) and
`REDIS_COMMANDS` lists them sorted (a command's index is its ACL command id)."""
import sys

import redis

CATS = ["keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap",
        "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking",
        "dangerous", "connection", "transaction", "scripting"]

# The flags COMMAND shows, in the order it shows them (`flag::*` in commands.rs, same order).
FLAGS = ["write", "readonly", "denyoom", "module", "admin", "pubsub", "noscript", "blocking",
         "loading", "stale", "skip_monitor", "skip_slowlog", "asking", "fast", "no_auth",
         "no_mandatory_keys", "no_async_loading", "no_multi", "movablekeys", "allow_busy"]

# The COMMAND DOCS fields Shoal answers with (router/src/cmd/command.rs).
DOCS = ["summary", "since", "group", "complexity"]


def pairs(v):
    return {v[i].decode() if isinstance(v[i], bytes) else v[i]: v[i + 1] for i in range(0, len(v), 2)}


def s(x):
    return x.decode() if isinstance(x, bytes) else x


def rust_str(x):
    return '"' + x.replace("\\", "\\\\").replace('"', '\\"') + '"'


def const_name(name):
    return name.upper().replace("|", "_").replace("-", "_")


def spec(ks):
    d = pairs(ks)
    flags = {s(f) for f in d["flags"]}
    bs = pairs(d["begin_search"])
    bspec = pairs(bs["spec"]) if bs["spec"] else {}
    if s(bs["type"]) == "index":
        begin = f"Begin::Index({bspec['index']})"
    elif s(bs["type"]) == "keyword":
        begin = f"Begin::Keyword(b\"{s(bspec['keyword'])}\", {bspec['startfrom']})"
    else:
        begin = "Begin::Unknown"
    fk = pairs(d["find_keys"])
    fspec = pairs(fk["spec"]) if fk["spec"] else {}
    if s(fk["type"]) == "range":
        find = f"Find::Range {{ last: {fspec['lastkey']}, step: {fspec['keystep']}, limit: {fspec['limit']} }}"
    elif s(fk["type"]) == "keynum":
        find = f"Find::Keynum {{ index: {fspec['keynumidx']}, first: {fspec['firstkey']}, step: {fspec['keystep']} }}"
    else:
        find = "Find::Unknown"
    read = "access" in flags
    write = bool(flags & {"insert", "delete", "update"})
    extra = []
    if "not_key" in flags:
        extra.append("not_key: true")
    if "incomplete" in flags:
        extra.append("incomplete: true")
    if "variable_flags" in flags:
        extra.append("variable: true")
    tail = "".join(", " + e for e in extra)
    return f"KeySpecDef {{ begin: {begin}, find: {find}, read: {str(read).lower()}, write: {str(write).lower()}{tail}, ..KeySpecDef::DEFAULT }}"


def flag_mask(info, name):
    shown = [s(f) for f in info[2]]
    unknown = [f for f in shown if f not in FLAGS]
    assert not unknown, f"{name}: flags {unknown} not in FLAGS"
    assert shown == sorted(shown, key=FLAGS.index), f"{name}: {shown} not in FLAGS order"
    return " | ".join(f"flag::{f.upper()}" for f in shown) or "0"


def entries(info, docs):
    """(name, info, docs of it) for a command and its subcommands, sorted."""
    name = s(info[0]).lower()
    yield name, info, docs.get(name, {})
    subdocs = {s(k): pairs(v) for k, v in pairs(docs.get(name, {}).get("subcommands", [])).items()}
    for sub in sorted(info[9] if len(info) > 9 else [], key=lambda x: s(x[0])):
        yield from entries(sub, subdocs)


def render(i, name, info, doc):
    cats = [s(c)[1:] for c in info[6]]
    assert cats == sorted(cats, key=CATS.index), f"{name}: {cats} not in CATS order"
    mask = " | ".join(f"cat::{c.upper()}" for c in cats) or "0"
    specs = ", ".join(spec(k) for k in info[8])
    subs = info[9] if len(info) > 9 else []
    fields = "".join(f", {f}: {rust_str(s(doc.get(f, b'')))}" for f in DOCS)
    return (f"pub const {const_name(name)}: RedisCommand = RedisCommand {{ name: {rust_str(name)}, id: Some({i}), "
            f"arity: {info[1]}, flags: {flag_mask(info, name)}, "
            f"key_range: KeyRange {{ first: {info[3]}, last: {info[4]}, step: {info[5]} }}, "
            f"categories: {mask}, container: {str(bool(subs)).lower()}, keys: &[{specs}]{fields} }};")


def main():
    r = redis.Redis(port=int(sys.argv[1]), protocol=2)
    conn = r.connection_pool.get_connection()
    conn.send_command("COMMAND")
    raw = conn.read_response()
    conn.send_command("COMMAND", "DOCS")
    docs = {s(k): pairs(v) for k, v in pairs(conn.read_response()).items()}
    rows = []
    for info in sorted(raw, key=lambda x: s(x[0])):
        rows.extend(entries(info, docs))
    consts = [const_name(n) for n, _, _ in rows]
    assert len(set(consts)) == len(consts), "two commands with one constant name"
    print("// @generated by wire/src/acl/gen_table.py from redis-server 7.0.15 (COMMAND, COMMAND DOCS);")
    print("// do not edit.")
    print("use super::commands::{Begin, Find, KeyRange, KeySpecDef, RedisCommand, cat, flag};")
    print()
    for i, (name, info, doc) in enumerate(rows):
        print(render(i, name, info, doc))
    print()
    print("/// Every Redis 7.0.15 command and subcommand (`parent|sub`), sorted by name; a command's")
    print("/// index is its `id`.")
    print("pub static REDIS_COMMANDS: &[RedisCommand] = &[")
    for c in consts:
        print(f"    {c},")
    print("];")


main()
