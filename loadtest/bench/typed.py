"""redis-benchmark on the typed values (lists, sets, hashes, sorted sets), side by side in one run:
Shoal (router + 3 embedded nodes, one worker thread), one redis-server, and twemproxy in front of
3 redis-servers, every server pinned to one core and redis-benchmark to another.

(Named typed.py, not types.py: a script's directory comes first on Python's path, and a types.py
there would shadow the standard library's `types`, breaking every other script of this folder.)

    python3 loadtest/bench/typed.py [--rounds 3] [--requests 100000] [--pipelines 1,16]
        [--tests lpush,rpush,lpop,rpop,sadd,hset,spop,zadd,zpopmin,lrange_100] [--baseline ROUTER_BIN]
        [--json FILE] [--write-docs]

With --baseline, another shoal-router build (an earlier commit's, say) runs as one more target,
interleaved with the others, and the table gains a Shoal/baseline column.

All tests run in ONE redis-benchmark invocation per (target, pipeline depth, round), in the order
redis-benchmark gives them, because its pop tests (LPOP, RPOP, SPOP, ZPOPMIN) pop from the keys the
push tests before them filled in the same invocation. The benchmark's keys are deleted before every
invocation, so each one starts from the same empty state. Rounds are interleaved across targets and
the median rate per test is reported; ratios compare targets within this run only.

Before measuring, every command the benchmark sends is tried once on each target (on keys of its
own) and its reply checked: a command whose reply is an error, or that makes the server close the
connection (twemproxy does that for commands it does not know), is reported in the table and left
out of that target's invocation. redis-benchmark itself exits on the first error reply, which
fails the run.
"""
import argparse
import csv
import io
import json
import math
import socket
import statistics
import subprocess
import sys

import common

CLIENTS = 50
RANDOM_KEYS = 100_000  # -r: members/fields element:0..99999 for SADD, HSET, ZADD
TESTS = "lpush,rpush,lpop,rpop,sadd,hset,spop,zadd,zpopmin,lrange_100"
# redis-benchmark's --csv row name per -t test.
ROW = {"lpush": "LPUSH", "rpush": "RPUSH", "lpop": "LPOP", "rpop": "RPOP", "sadd": "SADD", "hset": "HSET",
       "spop": "SPOP", "zadd": "ZADD", "zpopmin": "ZPOPMIN", "lrange_100": "LRANGE_100 (first 100 elements)"}
FILL_ROW = "LPUSH (needed to benchmark LRANGE)"
# One command of each kind redis-benchmark sends for a test (on probe keys, not the benchmark's).
PROBES = {
    "lpush": [["LPUSH", "probe:list", "xxx"]],
    "rpush": [["RPUSH", "probe:list", "xxx"]],
    "lpop": [["LPOP", "probe:list"]],
    "rpop": [["RPOP", "probe:list"]],
    "sadd": [["SADD", "probe:set", "element:1"]],
    "hset": [["HSET", "probe:hash", "element:1", "xxx"]],
    "spop": [["SPOP", "probe:set"]],
    "zadd": [["ZADD", "probe:zset", "1", "element:1"]],
    "zpopmin": [["ZPOPMIN", "probe:zset"]],
    "lrange_100": [["LPUSH", "probe:list", "xxx"], ["LRANGE", "probe:list", "0", "99"]],
}
BENCH_KEYS = ["mylist", "myset", "myhash", "myzset"]  # what redis-benchmark writes (no cluster tag)
PROBE_KEYS = ["probe:list", "probe:set", "probe:hash", "probe:zset"]


def call(port, cmd):
    """Sends one command on a fresh connection; returns (ok, reply or error text)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(common.resp_encode(*cmd))
            reply = common.resp_read(s.makefile("rb"))
    except (OSError, ConnectionError) as e:
        return False, f"no reply ({e})"
    if isinstance(reply, tuple):
        return False, f"-{reply[1]}"
    return True, reply


def probe(port, tests):
    """{test: None if its commands work, else "COMMAND ARGS -> error"}."""
    result = {}
    for test in tests:
        result[test] = None
        for cmd in PROBES[test]:
            ok, reply = call(port, cmd)
            if not ok:
                result[test] = f"`{' '.join(cmd)}` -> {str(reply).strip()}"
                break
    for key in PROBE_KEYS:
        call(port, ["DEL", key])
    return result


def reset(port):
    """Deletes the benchmark's keys (one DEL per key: twemproxy routes each alone)."""
    for key in BENCH_KEYS:
        ok, reply = call(port, ["DEL", key])
        if not ok:
            sys.exit(f"[bench] DEL {key} on port {port} failed: {reply}")


def requests_at(base, pipeline):
    """Deeper pipelines get ceil(sqrt(P)) x the requests, so each test lasts long enough to measure."""
    return base * math.ceil(math.sqrt(pipeline))


def bench(port, tests, pipeline, requests):
    """One redis-benchmark invocation running `tests` in its own order; returns {test: row}."""
    argv = common.pinned(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(CLIENTS),
                          "-n", str(requests), "-r", str(RANDOM_KEYS), "-P", str(pipeline),
                          "-t", ",".join(tests), "--csv"], common.CLIENT_CPUS)
    run = subprocess.run(argv, capture_output=True, text=True, timeout=common.CALL_LIMIT_S)
    rows = {}
    lines = [l for l in run.stdout.splitlines() if l.startswith('"')]
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        rows[row["test"]] = row
    missing = [t for t in tests if ROW[t] not in rows]
    if run.returncode != 0 or missing:
        sys.exit(f"[bench] redis-benchmark on port {port} (P={pipeline}) failed (exit {run.returncode}, "
                 f"no rows for {missing}):\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
    out = {t: {"rps": float(rows[ROW[t]]["rps"]), "p50": float(rows[ROW[t]]["p50_latency_ms"]),
               "p99": float(rows[ROW[t]]["p99_latency_ms"])} for t in tests}
    return out


def start_targets(router_bin, baseline=None):
    """{name: {"port": port, "pids": [...]}}, every server pinned to common.SERVER_CPUS."""
    cpus, targets = common.SERVER_CPUS, {}
    p, resp, _ = common.start_shoal(router_bin, "shoal", ["--threads", "1"], cpus=cpus)
    targets["shoal"] = {"port": resp, "pids": [p.pid]}
    if baseline:
        p, resp, _ = common.start_shoal(baseline, "shoal-baseline", ["--threads", "1"], cpus=cpus)
        targets["baseline"] = {"port": resp, "pids": [p.pid]}

    port = common.free_port()
    targets["redis"] = {"port": port, "pids": [common.redis_server(port, cpus=cpus).pid]}

    backends = [common.free_port() for _ in range(3)]
    pids = [common.redis_server(b, cpus=cpus).pid for b in backends]
    tw = common.free_port()
    servers = "".join(f"   - 127.0.0.1:{b}:1\n" for b in backends)
    conf = common.WORK / "nutcracker-types.yml"
    conf.write_text(f"bench_tcp:\n  listen: 127.0.0.1:{tw}\n  hash: fnv1a_64\n  distribution: ketama\n"
                    f"  redis: true\n  auto_eject_hosts: false\n  servers:\n{servers}")
    # -s: twemproxy's stats port, on loopback too.
    nc = common.start("nutcracker-types", ["nutcracker", "-c", str(conf), "-a", "127.0.0.1",
                                           "-s", str(common.free_port())], cpus=cpus)
    common.wait_port(tw)
    targets["twemproxy"] = {"port": tw, "pids": [nc.pid, *pids]}
    return targets


NAMES = {"shoal": "Shoal (router, 1 thread, 3 embedded nodes)", "redis": "redis-server",
         "twemproxy": "twemproxy -> 3 redis-servers", "baseline": "the baseline build of Shoal (same shape)"}
FLOORS = {1: ("redis", 0.8), 16: ("twemproxy", 1.0)}  # the floors: ratio of Shoal to this


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=100_000, help="requests per test at P=1")
    ap.add_argument("--pipelines", default="1,16")
    ap.add_argument("--tests", default=TESTS)
    ap.add_argument("--baseline", help="also measure this shoal-router binary (e.g. a build of an earlier "
                    "commit), in the same shape")
    ap.add_argument("--baseline-label", default="BASELINE/shoal-router",
                    help="how the baseline binary is named in the report's command line")
    ap.add_argument("--json", help="also write raw results here")
    ap.add_argument("--write-docs", action="store_true", help=f"update {common.DOCS}")
    args = ap.parse_args()
    load_start = common.load_average()
    common.need("redis-benchmark", "run .ci/tools/install apt")
    common.need("nutcracker", "run .ci/tools/install apt")
    _, router_bin = common.binaries()
    pipelines = [int(x) for x in args.pipelines.split(",")]
    tests = args.tests.split(",")
    unknown = [t for t in tests if t not in ROW]
    if unknown:
        sys.exit(f"[bench] unknown tests {unknown} (known: {','.join(ROW)})")

    targets = start_targets(router_bin, args.baseline)
    failed = {}
    for name, t in targets.items():
        failed[name] = probe(t["port"], tests)
        for test, why in failed[name].items():
            if why:
                common.say(f"{name}: {test} left out: {why}")
    runnable = {name: [t for t in tests if not failed[name][t]] for name in targets}

    cells = [(name, pl) for pl in pipelines for name in targets]
    runs = {(name, pl, t): [] for name, pl in cells for t in runnable[name]}
    cpu = {(name, pl): [] for name, pl in cells}
    progress = common.Progress(len(cells) * args.rounds)
    names = list(targets)
    for r in range(args.rounds):
        # The targets take turns going first (round r starts with the r-th): a fixed order put
        # the same target first after the previous depth's heavier runs in every round, and
        # single P=1 cells moved by up to 13% between two full runs of the same binaries.
        order = names[r % len(names):] + names[:r % len(names)]
        for pl in pipelines:
            for name in order:
                progress.step(f"round {r + 1}: {name} P={pl}")
                target, n = targets[name], requests_at(args.requests, pl)
                if not runnable[name]:
                    continue
                reset(target["port"])
                before = common.cpu_total(target["pids"])
                out = bench(target["port"], runnable[name], pl, n)
                # Server CPU for the whole invocation, per request (the LRANGE fill's requests included).
                total = n * (len(runnable[name]) + (1 if "lrange_100" in runnable[name] else 0))
                cpu[(name, pl)].append((common.cpu_total(target["pids"]) - before) / total * 1e6)
                for t, row in out.items():
                    runs[(name, pl, t)].append(row)

    med = {k: {f: statistics.median(x[f] for x in v) for f in ("rps", "p50", "p99")} for k, v in runs.items()}
    cpu_med = {k: statistics.median(v) if v else None for k, v in cpu.items()}
    cmd = (f"python3 loadtest/bench/typed.py --rounds {args.rounds} --requests {args.requests} "
           f"--pipelines {args.pipelines} --tests {args.tests}"
           + (f" --baseline {args.baseline_label}" if args.baseline else "") + " --write-docs")
    machine = common.machine()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "command": cmd, "failed": failed, "cpu_us_per_request":
                       {f"{n} P={p}": v for (n, p), v in cpu_med.items()},
                       "results": [{"target": n, "pipeline": p, "test": t, **v} for (n, p, t), v in med.items()]},
                      f, indent=2)

    def rate(name, pl, t):
        if failed[name][t]:
            return "not supported" if name == "twemproxy" and "no reply" in failed[name][t] else "error"
        return f"{med[(name, pl, t)]['rps']:,.0f}"

    def ratio(pl, t, other):
        if failed["shoal"][t] or failed[other][t]:
            return None
        return med[("shoal", pl, t)]["rps"] / med[(other, pl, t)]["rps"]

    blocks, misses, unchecked = [], [], []
    for pl in pipelines:
        floor = FLOORS.get(pl)
        head = "| test | Shoal ops/s | redis ops/s | twemproxy ops/s | Shoal/redis | Shoal/twemproxy |"
        sep = "|---|---|---|---|---|---|"
        if "baseline" in targets:
            head += " baseline ops/s | Shoal/baseline |"
            sep += "---|---|"
        if floor:
            head += f" floor: >= {floor[1]:.1f}x {floor[0]} |"
            sep += "---|"
        lines = [f"#### Pipeline depth {pl} (-P {pl}, -n {requests_at(args.requests, pl):,})", "", head, sep]
        for t in tests:
            rs, rt = ratio(pl, t, "redis"), ratio(pl, t, "twemproxy")
            row = (f"| {ROW[t]} | {rate('shoal', pl, t)} | {rate('redis', pl, t)} | {rate('twemproxy', pl, t)} | "
                   + (f"{rs:.2f}x" if rs is not None else "-") + " | " + (f"{rt:.2f}x" if rt is not None else "-") + " |")
            if "baseline" in targets:
                rb = ratio(pl, t, "baseline")
                row += f" {rate('baseline', pl, t)} | " + (f"{rb:.2f}x" if rb is not None else "-") + " |"
            if floor:
                value = rs if floor[0] == "redis" else rt
                if value is None:
                    verdict = "n/a (" + ("Shoal error" if failed["shoal"][t] else f"{floor[0]} cannot run it") + ")"
                    unchecked.append(f"{ROW[t]} at P={pl}")
                elif value >= floor[1]:
                    verdict = "meets"
                else:
                    verdict = f"**misses** ({value:.3f}x)"
                    misses.append(f"{ROW[t]} at P={pl}: {value:.3f}x {floor[0]}")
                row += f" {verdict} |"
            lines.append(row)
        cpus = " / ".join(f"{k} {cpu_med[(k, pl)]:.1f}" for k in targets if cpu_med[(k, pl)] is not None)
        lines += ["", f"Server CPU-µs per request over the whole invocation (all its tests): {cpus}."]
        blocks.append("\n".join(lines))
    notes = []
    for name in targets:
        for t, why in failed[name].items():
            if why:
                notes.append(f"- {NAMES[name]}: {ROW[t]} not measured: {why}")
    if notes:
        blocks.append("Left out (the command's reply, tried once before the benchmark):\n\n" + "\n".join(notes))
    blocks.append("Rows below the issue's floor: " + ("; ".join(misses) if misses else "none") + "."
                  + (" Rows the floor could not be checked on: " + "; ".join(unchecked) + "." if unchecked else ""))
    table = "\n\n".join(blocks)
    print(table)

    if args.write_docs:
        pin = (f"servers pinned to CPU {common.SERVER_CPUS} and redis-benchmark to CPU {common.CLIENT_CPUS} "
               "(`taskset -c`)" if common.SERVER_CPUS else "no CPU pinning (one core)")
        body = (f"Machine: {machine}; 1-minute load average {load_start:.1f} at the start, {common.load_average():.1f} at the end (other work shares this machine). Command: `{cmd}` (one `redis-benchmark -c {CLIENTS} -r {RANDOM_KEYS} "
                f"-n N -P P -t TESTS --csv` per target, depth and round; N = {args.requests:,} x ceil(sqrt(P)); "
                f"median of {args.rounds} interleaved rounds; {pin}). Targets: "
                + ", ".join(NAMES.values()) + ".\n\n" + table + "\n")
        common.write_docs("types", body)


if __name__ == "__main__":
    sys.exit(main())
