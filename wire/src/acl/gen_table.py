#!/usr/bin/env python3
"""Regenerates table.rs: Redis 7.0.15's command table (every command and subcommand: arity,
flags, legacy key positions, ACL categories, key specs and the docs fields Shoal answers
COMMAND DOCS with), read from a running redis-server:

    redis-server --port 7390 --save '' --daemonize yes
    python3 wire/src/acl/gen_table.py 7390 > wire/src/acl/table.rs && cargo fmt --all

It also writes docs.resp beside itself: for every command and subcommand, redis-server's own
RESP3 bytes of its COMMAND INFO tips and key specs and of its COMMAND DOCS entry (less the
subcommands, which the router lists from what it serves), read by `docs.rs`, so that COMMAND
INFO, COMMAND DOCS and COMMAND GETKEYSANDFLAGS answer Redis's bytes without a Rust constant per
argument.

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


def resp3_items(data, at):
    """The RESP3 value starting at data[at]: (kind, value, end). Aggregates' values are lists of
    (start, end) spans of their elements (maps: keys and values alternating)."""
    nl = data.index(b"\r\n", at)
    kind, head = data[at:at + 1], data[at + 1:nl]
    at = nl + 2
    if kind == b"$":
        n = int(head)
        return kind, data[at:at + n], at + n + 2
    if kind in (b"+", b":", b"-", b",", b"#", b"_"):
        return kind, head, at
    n = int(head) * (2 if kind == b"%" else 1)
    spans = []
    for _ in range(n):
        start = at
        _, _, at = resp3_items(data, at)
        spans.append((start, at))
    return kind, spans, at


def read_resp3(sock, command):
    """One command's whole RESP3 reply, raw."""
    sock.sendall(b"".join([b"*%d\r\n" % len(command)] + [b"$%d\r\n%s\r\n" % (len(a), a) for a in command]))
    data = b""
    while True:
        data += sock.recv(1 << 20)
        try:
            _, _, end = resp3_items(data, 0)
        except (ValueError, IndexError):
            continue
        if end <= len(data):
            return data[:end]


def docs_resp(port):
    """docs.resp: a RESP3 map, name -> [tips, key specs, docs entry less its subcommands]."""
    import socket
    sock = socket.create_connection(("127.0.0.1", port))
    read_resp3(sock, [b"HELLO", b"3"])
    info = read_resp3(sock, [b"COMMAND"])
    docs = read_resp3(sock, [b"COMMAND", b"DOCS"])
    out = {}

    def doc_fields(span, name):
        """The docs map at span, without subcommands, re-encoded; and its subcommands' spans."""
        _, items, _ = resp3_items(docs, span[0])
        kept, subs = [], {}
        for k, v in zip(items[0::2], items[1::2]):
            key = resp3_items(docs, k[0])[1]
            if key == b"subcommands":
                _, sub_items, _ = resp3_items(docs, v[0])
                for sk, sv in zip(sub_items[0::2], sub_items[1::2]):
                    subs[resp3_items(docs, sk[0])[1].decode().lower()] = sv
            else:
                kept.append(docs[k[0]:k[1]] + docs[v[0]:v[1]])
        return b"%%%d\r\n" % len(kept) + b"".join(kept), subs

    def walk(span, doc_span):
        _, fields, _ = resp3_items(info, span[0])
        name = resp3_items(info, fields[0][0])[1].decode().lower()
        tips, specs = (info[a:b] for a, b in fields[7:9])
        entry, sub_docs = doc_fields(doc_span, name) if doc_span else (b"%0\r\n", {})
        out[name] = tips + specs + entry
        if len(fields) > 9:
            _, subs, _ = resp3_items(info, fields[9][0])
            for sub in subs:
                _, sf, _ = resp3_items(info, sub[0])
                sub_name = resp3_items(info, sf[0][0])[1].decode().lower()
                walk(sub, sub_docs.get(sub_name))

    _, top_docs, _ = resp3_items(docs, 0)
    doc_of = {resp3_items(docs, k[0])[1].decode().lower(): v for k, v in zip(top_docs[0::2], top_docs[1::2])}
    _, commands, _ = resp3_items(info, 0)
    for c in commands:
        _, f, _ = resp3_items(info, c[0])
        walk(c, doc_of.get(resp3_items(info, f[0][0])[1].decode().lower()))
    body = b"".join(b"$%d\r\n%s\r\n*3\r\n%s" % (len(n), n.encode(), v) for n, v in sorted(out.items()))
    return b"%%%d\r\n" % len(out) + body


def main():
    import pathlib
    (pathlib.Path(__file__).parent / "docs.resp").write_bytes(docs_resp(int(sys.argv[1])))
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
