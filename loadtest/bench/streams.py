"""Stream commands side by side in one run (issue 39): redis-benchmark against one redis-server,
Shoal as users deploy it (a router and 3 shoal-node processes, cluster secret on) and Shoal's
embedded cluster (router + 3 in-process nodes), every server pinned to one core and
redis-benchmark to the other; and the memory one stream entry costs.

    python3 loadtest/bench/streams.py [--rounds 5] [--requests 100000] [--pipelines 1,16] [--write-docs]

Entries look like a job queue's: two fields, `job` (an integer) and `payload` (64 bytes). Before
measuring, each target gets `s:idx` (100,000 entries, IDs 1-0 .. 100000-0) and `s:grp` (as many
entries as the largest test reads, with group `g`). Tests: XADD with an automatic ID, XRANGE of 10
entries from a random ID, XREADGROUP `>` COUNT 1 (the group is recreated before each run, so
every call delivers a new entry and adds it to the PEL), and XACK of a random delivered ID. Rounds
are interleaved across targets; the median rate is reported with the Shoal/redis ratio of this run.
Memory per entry: `MEMORY USAGE s:idx` over its 100,000 entries on each target.
"""
import argparse
import socket
import subprocess
import sys

import common
import replicas

CLIENTS = 50
INDEXED = 100_000
PAYLOAD = "p" * 64
TESTS = {
    "XADD *": (["XADD", "s:add", "*", "job", "__rand_int__", "payload", PAYLOAD], INDEXED),
    "XRANGE 10": (["XRANGE", "s:idx", "__rand_int__", "+", "COUNT", "10"], INDEXED),
    "XREADGROUP > COUNT 1": (["XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s:grp", ">"], INDEXED),
    "XACK": (["XACK", "s:grp", "g", "__rand_int__"], INDEXED),
}


def call(s, f, *args):
    s.sendall(common.resp_encode(*args))
    return common.resp_read(f)


def fill(port, key, n):
    """`n` entries with IDs 1-0 .. n-0 into `key`, in pipelined batches; checks XLEN."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        f = s.makefile("rb")
        call(s, f, "DEL", key)
        batch = 1000
        for start in range(1, n + 1, batch):
            end = min(start + batch, n + 1)
            s.sendall(b"".join(common.resp_encode("XADD", key, f"{i}-0", "job", str(i), "payload", PAYLOAD)
                               for i in range(start, end)))
            for _ in range(start, end):
                common.resp_read(f)
        if call(s, f, "XLEN", key) != str(n):
            sys.exit(f"[bench] port {port}: {key} does not hold {n} entries")


def regroup(port):
    with socket.create_connection(("127.0.0.1", port)) as s:
        f = s.makefile("rb")
        call(s, f, "XGROUP", "DESTROY", "s:grp", "g")
        if call(s, f, "XGROUP", "CREATE", "s:grp", "g", "0") != "OK":
            sys.exit(f"[bench] port {port}: XGROUP CREATE failed")


def memory(port):
    with socket.create_connection(("127.0.0.1", port)) as s:
        f = s.makefile("rb")
        return int(call(s, f, "MEMORY", "USAGE", "s:idx", "SAMPLES", "0"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--pipelines", default="1,16")
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args()
    common.need("redis-benchmark", "run .ci/tools/install apt")
    node_bin, router_bin = common.binaries()
    targets = {}
    redis_port = common.free_port()
    common.redis_server(redis_port, cpus=common.SERVER_CPUS)
    targets["redis-server"] = redis_port
    targets["Shoal: router + 3 node processes, secret on"] = replicas.node_cluster(node_bin, router_bin, False)
    _, embedded, _ = common.start_shoal(router_bin, "shoal-embedded", ["--threads", "1"], cpus=common.SERVER_CPUS)
    targets["Shoal: router with 3 embedded nodes"] = embedded
    pipelines = [int(p) for p in a.pipelines.split(",")]
    most = a.requests * (4 if max(pipelines) > 1 else 1)
    for name, port in targets.items():
        common.say(f"loading {INDEXED} + {most} entries into {name}")
        fill(port, "s:idx", INDEXED)
        fill(port, "s:grp", most)
    mem = {name: memory(port) for name, port in targets.items()}
    rates = {}
    for r in range(a.rounds):
        for test, (command, rand) in TESTS.items():
            for p in pipelines:
                for name, port in targets.items():
                    if test.startswith("XREADGROUP"):
                        regroup(port)
                    n = a.requests * (4 if p > 1 else 1)
                    rates.setdefault((test, p, name), []).append(common.benchmark_rps(port, command, p, n, rand, CLIENTS))
        common.say(f"round {r + 1}/{a.rounds} done")
    names = list(targets)
    lines = [
        f"Machine: {common.machine()}. Command: `python3 loadtest/bench/streams.py --rounds {a.rounds} "
        f"--requests {a.requests} --pipelines {a.pipelines}` (redis-benchmark -c {CLIENTS}; servers pinned to "
        f"one core, redis-benchmark to the other; entries of two fields, a 64-byte payload; median of "
        f"{a.rounds} interleaved rounds; load average at the end {common.load_average():.1f}).",
        "",
    ]
    lines += common.ratio_table(TESTS, pipelines, names, rates)
    lines += [
        "",
        f"Memory of `s:idx` ({INDEXED:,} entries; `MEMORY USAGE s:idx SAMPLES 0`): "
        + ", ".join(f"{n}: {mem[n] / INDEXED:.1f} bytes/entry ({mem[n] / mem[names[0]]:.2f}x)" for n in names)
        + ".",
    ]
    table = "\n".join(lines)
    print(table)
    if a.write_docs:
        common.write_docs("streams", table)


if __name__ == "__main__":
    main()
