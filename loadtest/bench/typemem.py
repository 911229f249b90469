"""Memory per element of the typed values: one shoal-node vs one redis-server.

    python3 loadtest/bench/typemem.py [--elements 1000000] [--small-keys 100000] [--write-docs]

Data sets, each loaded into a freshly started shoal-node (through a router in its own process) and
a freshly started redis-server, with the same pipelined commands (redis-cli --pipe, 1000 elements
per command for the big values):

    one hash of N fields         HSET hash:big field:%08d v%08d ...
    one set of N members         SADD set:big field:%08d ...
    one sorted set of N members  ZADD zset:big I field:%08d ...   (score I = the member's number)
    one list of N elements       RPUSH list:big v%08d ...
    K small hashes of 10 fields  HSET hash:%08d field:%08d v%08d ... (10 pairs; K x 10 elements)

Measured as the growth of the server's resident set size (everything the allocator holds) and of
its own accounting (the node's used_memory, what maxmemory compares against; Redis's used_memory),
divided by the number of elements (hash field-value pairs, set or sorted-set members, list
elements). Each load is checked: no error replies, and the value's length (HLEN, SCARD, ZCARD,
LLEN) is what was sent.
"""
import argparse
import subprocess
import sys
import time

import common

BATCH = 1000
SMALL_FIELDS = 10


def datasets(n, small):
    """[(name, label, elements, commands, check)]: check is [(command, expected reply)]."""
    def big(cmd, key, part):
        def gen(f):
            count = 0
            for start in range(0, n, BATCH):
                args = [cmd, key]
                for i in range(start, min(start + BATCH, n)):
                    args += part(i)
                f.write(common.resp_encode(*args))
                count += 1
            return count
        return gen

    def smalls(f):
        for k in range(small):
            args = ["HSET", "hash:%08d" % k]
            for j in range(SMALL_FIELDS):
                i = k * SMALL_FIELDS + j
                args += ["field:%08d" % i, "v%08d" % i]
            f.write(common.resp_encode(*args))
        return small

    return [
        ("hash", f"one hash of {n:,} fields", n, big("HSET", "hash:big", lambda i: ["field:%08d" % i, "v%08d" % i]),
         [(["HLEN", "hash:big"], n)]),
        ("set", f"one set of {n:,} members", n, big("SADD", "set:big", lambda i: ["field:%08d" % i]),
         [(["SCARD", "set:big"], n)]),
        ("zset", f"one sorted set of {n:,} members", n,
         big("ZADD", "zset:big", lambda i: [str(i), "field:%08d" % i]), [(["ZCARD", "zset:big"], n)]),
        ("list", f"one list of {n:,} elements", n, big("RPUSH", "list:big", lambda i: ["v%08d" % i]),
         [(["LLEN", "list:big"], n)]),
        ("small-hashes", f"{small:,} hashes of {SMALL_FIELDS} fields", small * SMALL_FIELDS, smalls,
         [(["HLEN", "hash:%08d" % 0], SMALL_FIELDS), (["HLEN", "hash:%08d" % (small - 1)], SMALL_FIELDS)]),
    ]


def cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True,
                          timeout=common.CALL_LIMIT_S).stdout.strip()


def info_field(port, section, field):
    for line in cli(port, "INFO", section).splitlines():
        if line.startswith(field + ":"):
            return int(line.split(":", 1)[1])
    return None


class LoadError(Exception):
    pass


def load(port, proto, commands, server):
    with open(proto, "rb") as f:
        run = subprocess.run(["redis-cli", "-p", str(port), "--pipe"], stdin=f, capture_output=True, text=True,
                             timeout=common.CALL_LIMIT_S)
    if f"errors: 0, replies: {commands}" not in run.stdout:
        with open(proto, "rb") as f:
            first = f.read(200).decode(errors="replace").split("\r\n")
        sent = " ".join(first[2:12:2]) + " ..."  # the first command's leading arguments
        output = (run.stdout + "\n" + run.stderr).splitlines()
        errors = [l for l in output if l and not l.startswith(("All data", "Last reply", "errors:"))]
        summary = [l for l in run.stdout.splitlines() if l.startswith("errors:")]
        first_error = errors[0][:160].strip() if errors else "no error text"
        raise LoadError(f"`{sent}` -> {first_error} "
                        f"({summary[0] if summary else 'exit ' + str(run.returncode)})")


def check(port, checks, server):
    for cmd, want in checks:
        got = cli(port, *cmd)
        if got != str(want):
            raise LoadError(f"`{' '.join(cmd)}` answered {got!r}, expected {want}")


def measure(pid, port, proto, commands, checks, server):
    """(RSS growth, own-accounting growth or None) in bytes for loading `proto` into the server."""
    time.sleep(0.3)
    rss0, acct0 = common.rss(pid), info_field(port, "memory", "used_memory")
    t0 = time.time()
    load(port, proto, commands, server)
    common.say(f"  {server}: loaded in {time.time() - t0:.1f}s")
    time.sleep(0.5)
    rss1, acct1 = common.rss(pid), info_field(port, "memory", "used_memory")
    check(port, checks, server)
    acct = acct1 - acct0 if acct0 is not None and acct1 is not None else None
    return rss1 - rss0, acct


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--elements", type=int, default=1_000_000, help="elements in each big value")
    ap.add_argument("--small-keys", type=int, default=100_000, help="how many 10-field hashes")
    ap.add_argument("--only", help="comma-separated subset of: hash,set,zset,list,small-hashes")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    load_start = common.load_average()
    common.need("redis-cli", "run .ci/tools/install apt")
    node_bin, router_bin = common.binaries()

    rows = []
    sets = datasets(args.elements, args.small_keys)
    if args.only:
        sets = [d for d in sets if d[0] in args.only.split(",")]
    for name, label, elements, gen, checks in sets:
        common.say(f"{label}")
        proto = common.WORK / f"{name}.proto"
        with open(proto, "wb") as f:
            commands = gen(f)

        node_port, resp = common.free_port(), common.free_port()
        node = common.start(f"node-{name}", [str(node_bin), "--listen", f"127.0.0.1:{node_port}"])
        common.start(f"router-{name}", [str(router_bin), "--nodes", f"127.0.0.1:{node_port}",
                                        "--resp", f"127.0.0.1:{resp}", "--http", f"127.0.0.1:{common.free_port()}"])
        common.wait_port(resp)
        try:
            node_rss, node_acct, node_err = *measure(node.pid, resp, proto, commands, checks, "shoal-node"), None
        except LoadError as e:
            common.say(f"  shoal-node: {e}")
            node_rss, node_acct, node_err = None, None, str(e)

        rport = common.free_port()
        redis = common.redis_server(rport)
        try:
            redis_rss, redis_used = measure(redis.pid, rport, proto, commands, checks, "redis-server")
        except LoadError as e:
            sys.exit(f"[bench] redis-server: {e}")
        key = checks[0][0][1]
        encoding = cli(rport, "OBJECT", "ENCODING", key)
        common.stop_all()
        proto.unlink()
        rows.append({"name": name, "label": label, "elements": elements, "node_err": node_err,
                     "node_rss": None if node_rss is None else node_rss / elements,
                     "node_acct": None if node_acct is None else node_acct / elements,
                     "redis_rss": redis_rss / elements, "redis_used": redis_used / elements,
                     "encoding": encoding})

    lines = ["| data | shoal-node bytes/element (RSS) | redis bytes/element (RSS) | ratio (RSS) | "
             "floor <= 1.2x (target <= 1.0x) | shoal-node (own accounting) | redis (used_memory) | "
             "ratio (accounting) | redis encoding |",
             "|---|---|---|---|---|---|---|---|---|"]
    misses, errors = [], []
    for r in rows:
        if r["node_err"]:
            errors.append(f"{r['label']}: {r['node_err']}")
            lines.append(f"| {r['label']} | error | {r['redis_rss']:.1f} | - | not measured (Shoal error below) | - | "
                         f"{r['redis_used']:.1f} | - | {r['encoding']} |")
            continue
        ratio = r["node_rss"] / r["redis_rss"]
        if ratio <= 1.0:
            verdict = "meets floor and target"
        elif ratio <= 1.2:
            verdict = "meets floor, misses target"
        else:
            verdict = "**misses floor**"
            misses.append(f"{r['label']} ({ratio:.2f}x)")
        acct = "-" if r["node_acct"] is None else f"{r['node_acct']:.1f}"
        acct_ratio = "-" if r["node_acct"] is None else f"{r['node_acct'] / r['redis_used']:.2f}x"
        lines.append(f"| {r['label']} | {r['node_rss']:.1f} | {r['redis_rss']:.1f} | **{ratio:.2f}x** | {verdict} | "
                     f"{acct} | {r['redis_used']:.1f} | {acct_ratio} | {r['encoding']} |")
    lines += ["", "Rows above the floor (RSS): " + ("; ".join(misses) if misses else "none") + "."]
    if errors:
        lines += ["", "Loads Shoal answered with an error (first error reply shown):", ""] + [f"- {e}" for e in errors]
    table = "\n".join(lines)
    print(table)
    if args.write_docs:
        cmd = (f"python3 loadtest/bench/typemem.py --elements {args.elements} --small-keys {args.small_keys}"
               + (f" --only {args.only}" if args.only else "") + " --write-docs")
        body = (f"Machine: {common.machine()}; 1-minute load average {load_start:.1f} at the start, {common.load_average():.1f} at the end (other work shares this machine). Command: `{cmd}`. Field and member names `field:%08d`, values "
                f"`v%08d`, loaded with redis-cli --pipe ({BATCH} elements per command for the big values); each "
                f"data set into a fresh shoal-node (behind a router in its own process) and a fresh redis-server "
                f"(default settings: listpack up to 128 entries). Bytes per element = growth / elements "
                f"(small hashes: {SMALL_FIELDS} elements each, so bytes per hash = 10x).\n\n{table}\n")
        common.write_docs("typemem", body)


if __name__ == "__main__":
    sys.exit(main())
