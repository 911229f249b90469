#!/usr/bin/env python3
"""MULTI/EXEC throughput: Shoal as the chart runs it (a router and 3 shoal-node processes, the
cluster secret on) and in one process (router, 1 thread, 3 embedded nodes) against one redis-server.

    python3 loadtest/bench/transactions.py [--transactions N] [--connections C] [--depths 1,16]
                                           [--rounds R] [--keys one,several]
                                           [--baseline-router BIN --baseline-node BIN] [--write-docs]

Each transaction is `MULTI; SET {tx:c}a v; SET {tx:c}b v; GET {tx:c}a; EXEC` on keys of its own
connection (one hashtag, so one Shoal node); `--keys several` runs the same on two keys without a
hashtag chosen to live on two different nodes of the 3 (`tx:c:a`, `tx:c:b<k>`: a transaction over
several nodes, in two phases), `--keys one,several` both, each with its own row. Its replies are always the same bytes, so the load
generator (this script, pinned to its own core) checks every reply by comparing bytes and spends
almost nothing per transaction. C connections each keep D transactions in flight (D=1: one at a
time; D=16: sixteen sent in one write), N transactions in all. Reported per system: transactions
per second and server CPU-us per transaction (what the run cost the server processes, whatever
limited the rate), median of R interleaved rounds, and Shoal's ratio to redis-server. With
`--baseline-router` and `--baseline-node`, another build runs in the processes shape in the same
rounds (A/B).
"""
import argparse
import selectors
import socket
import statistics
import sys
import time

import common
import replicas

VALUE = b"v" * 16


def transaction(c, spread=False):
    a, b = common.key_pair(b"tx", c, spread)
    commands = [(b"MULTI",), (b"SET", a, VALUE), (b"SET", b, VALUE), (b"GET", a), (b"EXEC",)]
    request = b"".join(common.resp_encode(*c) for c in commands)
    reply = b"+OK\r\n" + b"+QUEUED\r\n" * 3 + b"*3\r\n+OK\r\n+OK\r\n$%d\r\n%s\r\n" % (len(VALUE), VALUE)
    return request, reply


def run(port, total, connections, depth, spread=False):
    """Runs `total` transactions; returns the seconds they took. Exits on a wrong reply."""
    sel = selectors.DefaultSelector()
    conns = []
    for c in range(connections):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        request, reply = transaction(c, spread)
        conns.append({"sock": s, "req": request * depth, "want": reply * depth, "buf": b"", "left": 0})
    per_conn = total // (connections * depth)
    t0 = time.perf_counter()
    deadline = t0 + common.CALL_LIMIT_S
    for c in conns:
        c["left"] = per_conn
        c["sock"].sendall(c["req"])
        sel.register(c["sock"], selectors.EVENT_READ, c)
    active = len(conns)
    while active:
        if time.perf_counter() > deadline:
            sys.exit("[bench] transactions did not finish in time")
        for key, _ in sel.select(timeout=5):
            c = key.data
            data = c["sock"].recv(1 << 20)
            if not data:
                sys.exit("[bench] a server closed a connection")
            c["buf"] += data
            if len(c["buf"]) < len(c["want"]):
                continue
            if c["buf"] != c["want"]:
                sys.exit(f"[bench] unexpected replies on port {port}: {c['buf'][:200]!r}")
            c["buf"] = b""
            c["left"] -= 1
            if c["left"] == 0:
                sel.unregister(c["sock"])
                active -= 1
            else:
                c["sock"].sendall(c["req"])
    elapsed = time.perf_counter() - t0
    for c in conns:
        c["sock"].close()
    return elapsed, per_conn * connections * depth


PROCESSES = "shoal (router + 3 node processes, secret on)"
EMBEDDED = "shoal (embedded, 1 thread)"


def processes(node_bin, router_bin, name):
    """Shoal as the chart runs it, on the server CPU: (resp port, [router and node pids])."""
    roles = {}
    port = replicas.node_cluster(node_bin, router_bin, False, name=name, roles=roles)
    return port, roles["router"] + roles["primaries"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transactions", type=int, default=100_000)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--depths", default="1,16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keys", default="one", help="one (a hashtag: one node), several (two nodes), or both")
    ap.add_argument("--baseline-router")
    ap.add_argument("--baseline-node")
    ap.add_argument("--baseline-label", default="baseline")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    kinds = args.keys.split(",")
    if any(k not in ("one", "several") for k in kinds):
        sys.exit("--keys takes one, several or one,several")
    if bool(args.baseline_router) != bool(args.baseline_node):
        sys.exit("--baseline-router and --baseline-node go together")
    targets = {PROCESSES: processes(*common.binaries(), "tx")}
    if args.baseline_router:
        targets[f"shoal {args.baseline_label} (processes)"] = processes(args.baseline_node, args.baseline_router,
                                                                        "tx-base")
    embedded = common.shoal_vs_redis()
    targets[EMBEDDED] = embedded["shoal"]
    targets["redis"] = embedded["redis"]
    if common.CLIENT_CPUS is not None:
        import os
        os.sched_setaffinity(0, {int(common.CLIENT_CPUS)})
    load_before = common.load_average()
    results = {}  # (target, depth) -> [(tx/s, cpu-us per tx)]
    progress = common.Progress(args.rounds * len(depths) * len(targets) * len(kinds))
    for r in range(args.rounds):
        for kind in kinds:
            spread = kind == "several"
            for depth in depths:
                for name, (port, pids) in targets.items():
                    progress.step(f"round {r + 1}: {name}, keys on {kind} node(s), {depth} in flight")
                    run(port, 2000, args.connections, depth, spread)  # warm up (connections, keys)
                    cpu0 = common.cpu_total(pids)
                    secs, done = run(port, args.transactions, args.connections, depth, spread)
                    cpu = common.cpu_total(pids) - cpu0
                    results.setdefault((name, kind, depth), []).append((done / secs, cpu / done * 1e6))
    load_after = common.load_average()
    med = {k: (statistics.median(x for x, _ in v), statistics.median(c for _, c in v)) for k, v in results.items()}
    lines = [
        f"Machine: {common.machine()}; 1-minute load average {load_before:.1f} at the start, "
        f"{load_after:.1f} at the end. Command: `python3 loadtest/bench/transactions.py --transactions "
        f"{args.transactions} --connections {args.connections} --depths {args.depths} --rounds {args.rounds}"
        f" --keys {args.keys}{' --baseline-router BIN --baseline-node BIN' if args.baseline_router else ''}"
        f"{' --write-docs' if args.write_docs else ''}` (median of {args.rounds} interleaved rounds; servers "
        f"pinned to CPU {common.SERVER_CPUS}, the load generator to CPU {common.CLIENT_CPUS}). One transaction: "
        "`MULTI; SET {tx:c}a v; SET {tx:c}b v; GET {tx:c}a; EXEC` (16-byte values), every reply checked; "
        "keys on several nodes: the same over `tx:c:a` and a `tx:c:b<k>` on another node (two phases).",
        "",
        "| target | keys | in flight per connection | tx/s | / redis | server CPU-us/tx |",
        "|---|---|---|---|---|---|",
    ]
    for kind in kinds:
        for depth in depths:
            rt = med[("redis", kind, depth)][0]
            label = "one node" if kind == "one" else "two nodes"
            for name in targets:
                t, c = med[(name, kind, depth)]
                lines.append(f"| {name} | {label} | {depth} | {t:,.0f} | {t / rt:.2f}x | {c:.1f} |")
    body = "\n".join(lines)
    print(body)
    if args.write_docs:
        # An A/B against another build is a section of its own beside the main table.
        common.write_docs("transactions-ab" if args.baseline_router else "transactions", body)


if __name__ == "__main__":
    main()
