"""Where a request's CPU goes in the shape users deploy, at P=1 (issue 42): the router and the
node processes side by side with redis-server, per request: user and kernel CPU, system calls
and context switches of each process group, and the rate.

    python3 loadtest/bench/hop_profile.py [--requests 150000] [--rounds 3] [--write-docs]
        [--profile]   (then one more GET load under `perf record`: each side's top symbols)

Targets: Shoal as the chart runs it (a router, `--threads 1`, and 3 shoal-node processes talking
gRPC over loopback with the cluster secret on; throughput.start_processes) and one redis-server,
every server process pinned to the server CPU, redis-benchmark (-c 50 -P 1 -d 32 -r 100000) to
the client CPU (common.SERVER_CPUS / CLIENT_CPUS). For each round, test (SET, GET) and target,
in interleaved order: CPU ticks and context switches summed over every thread of each process
(/proc/PID/task/*/{stat,status}) before and after the load, and system calls counted by
`perf stat -e raw_syscalls:sys_enter` attached to the group's processes for the load's
duration. Per-request numbers are the medians over rounds. Writes the `hop-profile` section of
docs/benchmarks.md with --write-docs; prints it otherwise.
"""
import argparse
import os
import re
import statistics
import subprocess
import time

import common
import throughput
from cpu_ab import thread_counters

TESTS = ("SET", "GET")


def load(port, test, requests):
    """redis-benchmark at P=1 on the client CPU; its requests per second."""
    return common.benchmark_rps(port, ["-t", test.lower(), "-d", "32"], 1, requests, rand=100_000)


def perf_syscalls(pids):
    """Starts counting system calls of `pids` (every thread); returns the perf process."""
    argv = ["perf", "stat", "-x", ",", "-e", "raw_syscalls:sys_enter", "-p", ",".join(map(str, pids))]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop_perf(p):
    """Stops a counting perf (SIGINT makes it print) and returns the count."""
    p.send_signal(2)
    _, err = p.communicate(timeout=30)
    for line in err.splitlines():
        m = re.match(r"\s*(\d+),", line)
        if m and "raw_syscalls:sys_enter" in line:
            return int(m.group(1))
    raise SystemExit(f"[bench] perf counted nothing: {err!r}")


def measure(groups, port, test, requests):
    """One load of `test`; per group of processes: (user ticks, system ticks, switches, syscalls);
    and the rate."""
    before = {g: [thread_counters(pid) for pid in pids] for g, pids in groups.items()}
    perfs = {g: perf_syscalls(pids) for g, pids in groups.items()}
    time.sleep(0.5)  # perf attached
    rate = load(port, test, requests)
    calls = {g: stop_perf(p) for g, p in perfs.items()}
    out = {}
    for g, pids in groups.items():
        after = [thread_counters(pid) for pid in pids]
        d = [sum(a[i] - b[i] for a, b in zip(after, before[g])) for i in range(4)]
        out[g] = (d[0], d[1], d[2] + d[3], calls[g])
    return out, rate


def top_symbols(groups, port, requests):
    """One GET load with `perf record` (1,999 Hz) on each group; prints each group's symbols
    above 1.2% of its samples (`perf report --no-children --sort sym`)."""
    records = {}
    for g, pids in groups.items():
        out = common.WORK / f"perf.{g.replace(' ', '-')}"
        records[g] = (out, subprocess.Popen(["perf", "record", "-F", "1999", "-o", str(out), "-p",
                                             ",".join(map(str, pids))], stderr=subprocess.DEVNULL))
    time.sleep(0.5)
    load(port, "GET", requests)
    for g, (out, p) in records.items():
        p.send_signal(2)
        p.wait(timeout=60)
        report = subprocess.run(["perf", "report", "-i", str(out), "--no-children", "--sort", "sym", "--stdio",
                                 "-q", "--percent-limit", "1.2"], capture_output=True, text=True, timeout=300).stdout
        print(f"\n{g}: symbols above 1.2% of its samples under a P=1 GET load")
        print("\n".join(line.rstrip()[:140] for line in report.splitlines() if line.strip()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=150_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--profile", action="store_true", help="also print each side's top symbols (perf record)")
    args = ap.parse_args()
    common.need("perf", "Debian: apt-get install linux-perf")
    common.need("redis-benchmark", "run .ci/tools/install apt")
    node_bin, router_bin = common.binaries()
    shoal = throughput.start_processes(node_bin, router_bin, "hop")
    redis_port = common.free_port()
    redis = common.redis_server(redis_port, cpus=common.SERVER_CPUS)
    targets = {
        "shoal (router + 3 node processes, secret on)": (shoal["tcp"], {
            "router": shoal["procs"]["shoal-router"], "3 nodes": shoal["procs"]["3 shoal-nodes"]}),
        "redis-server": (redis_port, {"redis-server": [redis.pid]}),
    }
    tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
    samples = {}  # (target, test, group) -> [(user_us, sys_us, switches, syscalls) per request]
    rates = {}  # (target, test) -> [rps]
    progress = common.Progress(args.rounds * len(TESTS) * len(targets))
    for r in range(args.rounds):
        order = list(targets.items())
        if r % 2:
            order.reverse()
        for test in TESTS:
            for name, (port, groups) in order:
                progress.step(f"round {r + 1}: {name} {test}")
                per_group, rate = measure(groups, port, test, args.requests)
                rates.setdefault((name, test), []).append(rate)
                for g, (user, system, switches, calls) in per_group.items():
                    n = args.requests
                    samples.setdefault((name, test, g), []).append(
                        (user * tick_us / n, system * tick_us / n, switches / n, calls / n))
    rows = ["| target | test | req/s | process | user µs/req | kernel µs/req | syscalls/req | context switches/req |",
            "|---|---|---|---|---|---|---|---|"]
    med = statistics.median
    for test in TESTS:
        for name, (_, groups) in targets.items():
            for g in list(groups) + (["all"] if len(groups) > 1 else []):
                keys = [(name, test, x) for x in groups] if g == "all" else [(name, test, g)]
                cols = [med([sum(samples[k][i][c] for k in keys) for i in range(args.rounds)]) for c in range(4)]
                user, kernel, switches, calls = cols
                rows.append(f"| {name} | {test} | {med(rates[(name, test)]):,.0f} | {g} | {user:.2f} | "
                            f"{kernel:.2f} | {calls:.2f} | {switches:.2f} |")
    body = (f"Machine: {common.machine()}. Command: `python3 loadtest/bench/hop_profile.py --requests {args.requests} "
            f"--rounds {args.rounds}{' --write-docs' if args.write_docs else ''}` (redis-benchmark -c 50 -P 1 -d 32 "
            "-r 100000 on the client CPU, every server process on the server CPU; medians of interleaved rounds; "
            f"1-minute load at the end {common.load_average():.2f}).\n\n" + "\n".join(rows))
    if args.write_docs:
        common.write_docs("hop-profile", body)
    print(body)
    if args.profile:
        port, groups = targets["shoal (router + 3 node processes, secret on)"]
        top_symbols(groups, port, args.requests * 2)


if __name__ == "__main__":
    main()
