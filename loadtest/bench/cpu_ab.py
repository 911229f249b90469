"""Router CPU per request, build against build: user and system CPU microseconds and context
switches per request of two or more router builds under the same redis-benchmark load, in
interleaved rounds (median per build). For changes that move CPU time rather than instructions
(an allocator, a syscall pattern): rates on a shared 2-core machine swing more between rounds
than such a change moves them, while CPU per request of the process under test holds steadier.

    python3 loadtest/bench/cpu_ab.py --build head=DIR/shoal-router --build base=OTHER/shoal-router \\
        [--tests sadd,hset,spop] [--rounds 5] [--requests 300000] [--clients 50] [--pipeline 16]

Each build runs as a router with 3 embedded nodes on one worker thread (`--threads 1`), pinned to
the server CPU, redis-benchmark to the client CPU (common.SERVER_CPUS / CLIENT_CPUS); the store
is flushed before each test, `spop` first fills its set with as many SADDs (not counted). CPU
and context switches are summed over the router's threads from /proc, before and after each test.
Rounds rotate the order of the builds. Prints one line per test and build; nothing is written to
the docs (paste what a change needs, with this command).
"""
import argparse
import os
import statistics
import subprocess
import time

import common


def thread_counters(pid):
    """(user ticks, system ticks, voluntary switches, involuntary switches) over pid's threads."""
    totals = [0, 0, 0, 0]
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            totals[0] += int(fields[11])
            totals[1] += int(fields[12])
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        totals[2] += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        totals[3] += int(line.split()[1])
        except FileNotFoundError:
            pass  # a thread that ended meanwhile
    return totals


def bench(port, test, args):
    argv = ["redis-benchmark", "-p", str(port), "-c", str(args.clients), "-P", str(args.pipeline),
            "-n", str(args.requests), "-r", str(args.keys), "-t", test, "-q"]
    subprocess.run(common.pinned(argv, common.CLIENT_CPUS), capture_output=True, check=True,
                   timeout=common.CALL_LIMIT_S)


def measure(router, test, args):
    """One test on one running router: (req/s, user µs/req, sys µs/req, vol cs/1k, invol cs/1k)."""
    proc, port, _ = router
    subprocess.run(["redis-cli", "-p", str(port), "flushall"], capture_output=True, check=True, timeout=60)
    if test == "spop":
        bench(port, "sadd", args)
    before, t0 = thread_counters(proc.pid), time.time()
    bench(port, test, args)
    elapsed, after = time.time() - t0, thread_counters(proc.pid)
    d = [b - a for a, b in zip(before, after)]
    us_per_tick = 1e6 / os.sysconf("SC_CLK_TCK")
    n = args.requests
    return (n / elapsed, d[0] * us_per_tick / n, d[1] * us_per_tick / n, d[2] * 1000 / n, d[3] * 1000 / n)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", action="append", required=True, metavar="NAME=ROUTER_BIN",
                    help="a router build to measure (give two or more)")
    ap.add_argument("--tests", default="set,get,sadd,hset", help="redis-benchmark tests, comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=300_000)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--pipeline", type=int, default=16)
    ap.add_argument("--keys", type=int, default=100_000, help="redis-benchmark -r")
    args = ap.parse_args()
    builds = dict(b.split("=", 1) for b in args.build)
    if len(builds) < 2:
        ap.error("give at least two --build NAME=ROUTER_BIN")
    common.need("redis-benchmark", "Debian: apt-get install redis-tools")
    tests = args.tests.split(",")
    results = {(b, t): [] for b in builds for t in tests}
    progress = common.Progress(args.rounds * len(builds))
    names = list(builds)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            progress.step(f"round {r + 1}: {name}")
            router = common.start_shoal(builds[name], f"{name}-{r}", extra=["--threads", "1"],
                                        cpus=common.SERVER_CPUS)
            for t in tests:
                results[(name, t)].append(measure(router, t, args))
            common.stop_all()
    for t in tests:
        for name in names:
            rows = results[(name, t)]
            med = [statistics.median(row[i] for row in rows) for i in range(5)]
            print(f"{t:8} {name:12} {med[0]:10,.0f} req/s  user {med[1]:.3f} µs/req  sys {med[2]:.3f} µs/req"
                  f"  switches/1k vol {med[3]:.1f} invol {med[4]:.1f}")


if __name__ == "__main__":
    main()
