#!/usr/bin/env python3
"""BLPOP wake-up latency: Shoal as the chart runs it (a router and 3 shoal-node processes, the
cluster secret on) against one redis-server, keys on one node and on two.

    python3 loadtest/bench/blocking.py [--wakes N] [--consumers C] [--rounds R]
                                       [--baseline-router BIN --baseline-node BIN] [--write-docs]

C consumer connections each block in `BLPOP a b 0`; a producer connection pushes one element to
`b` of one blocked consumer at a time (`LPUSH b <send time>`), and the wake-up latency is the time
from just before the push is written to the consumer's reply (the element, checked). The consumer
then blocks again and the next consumer in turn is woken, N wakes per round, so each wake is
measured alone (no queueing behind other wakes). Keys on one node: `{q:c}a` and `{q:c}b` (one
hashtag: the node serves the wait itself). Keys on two nodes: `q:c:a` and a `q:c:b<k>` on another
node of the 3 (the router waits on both nodes and pops with an atomic call on the one that became
ready: docs/architecture.md, "Blocking commands", pops over keys of several nodes). redis-server runs the same
keys (one server: both rows measure the same thing there). With `--baseline-router` and
`--baseline-node`, another build runs in the same shape in the same rounds (A/B). Reported: median
of R interleaved rounds of each target's p50 and p99, and wakes per second one at a time.
"""
import argparse
import os
import socket
import statistics
import sys
import time

import common
import replicas


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(10)
        self.f = self.sock.makefile("rb")

    def send(self, *args):
        self.sock.sendall(common.resp_encode(*args))

    def read(self):
        return common.resp_read(self.f)

    def close(self):
        self.f.close()
        self.sock.close()


def run(port, wakes, consumers, spread):
    """`wakes` wake-ups, one at a time; returns their latencies in microseconds. Exits on a wrong
    reply or a consumer that is not woken within 10 s."""
    producer = Conn(port)
    cons = []
    for c in range(consumers):
        a, b = common.key_pair(b"q", c, spread)
        producer.send("DEL", a, b)
        producer.read()
        conn = Conn(port)
        conn.send("BLPOP", a, b, "0")
        cons.append((conn, a, b))
    # Every consumer should be blocked before the first push (a push that comes before its
    # BLPOP is served at once, which would flatter the target): INFO's `blocked_clients` is
    # polled until it counts them all (at most 5 s: a build that answers a BLPOP over two nodes
    # CROSSSLOT blocks none, and its first read below says so), then 50 ms more (a Shoal router
    # counts a client blocked as it sends the wait to its node, a little before the node has
    # it). Later wakes are safe: a consumer blocks again while the others are woken.
    until = time.monotonic() + 5
    while blocked(producer) < consumers and time.monotonic() < until:
        time.sleep(0.01)
    time.sleep(0.05)
    lat = []
    for i in range(wakes):
        conn, a, b = cons[i % consumers]
        sent = time.perf_counter_ns()
        producer.send("LPUSH", b, str(sent))
        reply = conn.read()
        got = time.perf_counter_ns()
        if isinstance(reply, tuple) and reply[1].startswith("CROSSSLOT"):
            close(cons, producer)
            return None  # a build that does not serve pops over keys of several nodes
        if reply != [b.decode(), str(sent)]:
            sys.exit(f"[bench] unexpected BLPOP reply on port {port}: {reply!r}")
        if producer.read() != "1":
            sys.exit(f"[bench] unexpected LPUSH reply on port {port}")
        lat.append((got - sent) / 1000)
        conn.send("BLPOP", a, b, "0")
    close(cons, producer)
    return lat


def blocked(conn):
    """INFO clients' `blocked_clients` on `conn`'s server."""
    conn.send("INFO", "clients")
    info = conn.read()
    info = info.decode() if isinstance(info, bytes) else str(info)
    for line in info.splitlines():
        if line.startswith("blocked_clients:"):
            return int(line.split(":", 1)[1])
    return 0


def close(cons, producer):
    for conn, _, _ in cons:
        conn.close()
    producer.close()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wakes", type=int, default=5000)
    ap.add_argument("--consumers", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline-router")
    ap.add_argument("--baseline-node")
    ap.add_argument("--baseline-label", default="baseline")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    if bool(args.baseline_router) != bool(args.baseline_node):
        sys.exit("--baseline-router and --baseline-node go together")
    node_bin, router_bin = common.binaries()
    shape = "shoal (router + 3 node processes, secret on)"
    targets = {shape: replicas.node_cluster(node_bin, router_bin, False, name="blk")}
    if args.baseline_router:
        label = f"shoal {args.baseline_label} (same shape)"
        targets[label] = replicas.node_cluster(args.baseline_node, args.baseline_router, False, name="blk-base")
    redis_port = common.free_port()
    common.redis_server(redis_port, cpus=common.SERVER_CPUS)
    targets["redis-server"] = redis_port
    if common.CLIENT_CPUS is not None:
        os.sched_setaffinity(0, {int(common.CLIENT_CPUS)})
    kinds = ["one", "several"]
    load_before = common.load_average()
    results = {}  # (target, kind) -> [(p50, p99, wakes/s)]
    progress = common.Progress(args.rounds * len(kinds) * len(targets))
    for r in range(args.rounds):
        for kind in kinds:
            for name, port in targets.items():
                progress.step(f"round {r + 1}: {name}, keys on {kind} node(s)")
                if run(port, min(500, args.wakes), args.consumers, kind == "several") is None:  # warm up
                    continue
                t0 = time.perf_counter()
                lat = run(port, args.wakes, args.consumers, kind == "several")
                rate = len(lat) / (time.perf_counter() - t0)
                results.setdefault((name, kind), []).append((pct(lat, 0.5), pct(lat, 0.99), rate))
    load_after = common.load_average()
    med = {k: tuple(statistics.median(x[i] for x in v) for i in range(3)) for k, v in results.items()}
    base = " --baseline-router BIN --baseline-node BIN" if args.baseline_router else ""
    lines = [
        f"Machine: {common.machine()}; 1-minute load average {load_before:.1f} at the start, "
        f"{load_after:.1f} at the end. Command: `python3 loadtest/bench/blocking.py --wakes {args.wakes} "
        f"--consumers {args.consumers} --rounds {args.rounds}{base}"
        f"{' --write-docs' if args.write_docs else ''}` (median of {args.rounds} interleaved rounds; servers "
        f"pinned to CPU {common.SERVER_CPUS}, the load generator to CPU {common.CLIENT_CPUS}). One wake: "
        "`LPUSH b <time>` to one of the consumers blocked in `BLPOP a b 0`, timed to its reply; "
        "keys on one node: `{q:c}a`, `{q:c}b`; on two nodes: `q:c:a` and a `q:c:b<k>` on another node.",
        "",
        "| target | keys | p50 wake (us) | p99 wake (us) | wakes/s one at a time | p50 / redis |",
        "|---|---|---|---|---|---|",
    ]
    for kind in kinds:
        redis_p50 = med[("redis-server", kind)][0]
        for name in targets:
            label = "one node" if kind == "one" else "two nodes"
            if (name, kind) not in med:
                lines.append(f"| {name} | {label} | CROSSSLOT (not served by that build) | | | |")
                continue
            p50, p99, rate = med[(name, kind)]
            lines.append(f"| {name} | {label} | {p50:,.0f} | {p99:,.0f} | {rate:,.0f} | {p50 / redis_p50:.2f}x |")
    body = "\n".join(lines)
    print(body)
    if args.write_docs:
        common.write_docs("blocking", body)


if __name__ == "__main__":
    main()
