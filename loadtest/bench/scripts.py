#!/usr/bin/env python3
"""EVALSHA throughput: Shoal (router, 1 thread, 3 embedded nodes) against one redis-server, side by
side in one run, servers pinned to one core and redis-benchmark to the other.

    python3 loadtest/bench/scripts.py [--requests N] [--pipelines 1,16] [--rounds R]
                                      [--keys one,several] [--baseline ROUTER] [--write-docs]

The script is small and typical of rate limiters and counters: `return redis.call('incr', KEYS[1])`
on a random key of 100,000 (`redis-benchmark -r 100000 EVALSHA <sha> 1 script:__rand_int__`, 50
clients), loaded first with SCRIPT LOAD on each target. `--keys several` runs a script over two
keys instead (`redis.call('incr', KEYS[1]) return redis.call('incr', KEYS[2])` on
`sa:__rand_int__ sb:__rand_int__`, each drawn on its own, so two thirds of the calls have keys on
two of Shoal's three nodes: the script's node holds the other while it runs). `--baseline` also
measures that shoal-router binary (an earlier build) in the same shape, the targets taking turns
going first round by round (for the one-key script only: a build from before scripts over
several nodes answers the other CROSSSLOT). Reported: requests per second, p99 latency
and server CPU-us per request (all server processes), median of R interleaved rounds, and Shoal's
ratio to redis-server. No floor is set for scripts; the numbers show what a script costs through a
router (one op on the node's batched stream, a hop to the node's script thread, the Lua call).
"""
import argparse
import csv
import io
import socket
import statistics
import subprocess
import sys

import common

CLIENTS = 50
RANDOM_KEYS = 100_000
SCRIPTS = {
    "one": (b"return redis.call('incr', KEYS[1])", ["1", "script:__rand_int__"]),
    "several": (b"redis.call('incr', KEYS[1]) return redis.call('incr', KEYS[2])",
                ["2", "sa:__rand_int__", "sb:__rand_int__"]),
}


def load(port, script):
    """SCRIPT LOAD on the target; returns the SHA1 it answers."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$%d\r\n%s\r\n" % (len(script), script))
        reply = s.recv(1024)
    if not reply.startswith(b"$40\r\n"):
        sys.exit(f"[bench] SCRIPT LOAD on port {port} answered {reply!r}")
    return reply[5:45].decode()


def bench(port, sha, keys, pipeline, requests):
    argv = common.pinned(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(CLIENTS),
                          "-n", str(requests), "-r", str(RANDOM_KEYS), "-P", str(pipeline), "--csv",
                          "EVALSHA", sha, *keys], common.CLIENT_CPUS)
    run = subprocess.run(argv, capture_output=True, text=True, timeout=common.CALL_LIMIT_S)
    lines = [l for l in run.stdout.splitlines() if l.startswith('"')]
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    if run.returncode != 0 or not rows:
        sys.exit(f"[bench] redis-benchmark on port {port} (P={pipeline}) failed (exit {run.returncode}):\n"
                 f"{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
    return float(rows[0]["rps"]), float(rows[0]["p99_latency_ms"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--pipelines", default="1,16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keys", default="one", help="one, several, or both (one,several)")
    ap.add_argument("--baseline", help="also measure this shoal-router binary (an earlier build), same shape")
    ap.add_argument("--baseline-label", default="BASELINE/shoal-router",
                    help="how the baseline binary is named in the report's command line")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    pipelines = [int(p) for p in args.pipelines.split(",")]
    kinds = args.keys.split(",")
    if any(k not in SCRIPTS for k in kinds):
        sys.exit(f"[bench] --keys takes {','.join(SCRIPTS)}")
    targets = common.shoal_vs_redis()
    if args.baseline:
        base, base_port, _ = common.start_shoal(args.baseline, "baseline", extra=["--threads", "1"],
                                                cpus=common.SERVER_CPUS)
        targets["baseline"] = (base_port, [base.pid])
    shas = {}
    for kind in kinds:
        named = {name: load(port, SCRIPTS[kind][0]) for name, (port, _) in targets.items()}
        if len(set(named.values())) != 1:
            sys.exit(f"[bench] the targets name the script differently: {named}")
        shas[kind] = named["redis"]
    load_before = common.load_average()
    results = {}  # (target, kind, P) -> [(rps, p99, cpu-us per request)]
    names = list(targets)
    runs_per_round = sum(len(pipelines) * (len(names) - (kind != "one" and "baseline" in names)) for kind in kinds)
    progress = common.Progress(args.rounds * runs_per_round)
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for kind in kinds:
            for p in pipelines:
                n = args.requests * (4 if p > 1 else 1)
                for name in order:
                    if name == "baseline" and kind != "one":
                        continue  # builds before scripts over several nodes answer CROSSSLOT
                    port, pids = targets[name]
                    progress.step(f"round {r + 1}: {name}, {kind} key(s), P={p}")
                    cpu0 = common.cpu_total(pids)
                    rps, p99 = bench(port, shas[kind], SCRIPTS[kind][1], p, n)
                    cpu = common.cpu_total(pids) - cpu0
                    results.setdefault((name, kind, p), []).append((rps, p99, cpu / n * 1e6))
    load_after = common.load_average()
    med = {k: tuple(statistics.median(x[i] for x in v) for i in range(3)) for k, v in results.items()}
    baseline = f" --baseline {args.baseline_label}" if args.baseline else ""
    lines = [
        f"Machine: {common.machine()}; 1-minute load average {load_before:.1f} at the start, "
        f"{load_after:.1f} at the end. Command: `python3 loadtest/bench/scripts.py --requests {args.requests} "
        f"--pipelines {args.pipelines} --rounds {args.rounds} --keys {args.keys}{baseline}"
        f"{' --write-docs' if args.write_docs else ''}` "
        f"(`redis-benchmark -c {CLIENTS} -r {RANDOM_KEYS} -n N -P P --csv EVALSHA <sha> <numkeys> <keys>`, "
        f"N = {args.requests:,} at P=1 and 4x that when pipelined; median of {args.rounds} interleaved rounds; "
        f"servers pinned to CPU {common.SERVER_CPUS}, redis-benchmark to CPU {common.CLIENT_CPUS}). Shape: "
        f"Shoal is a router on one worker thread with 3 embedded nodes"
        f"{'; the baseline is ' + args.baseline_label + ' in the same shape' if args.baseline else ''}. Scripts: "
        + "; ".join(f"{k}: `{SCRIPTS[k][0].decode()}` on `{' '.join(SCRIPTS[k][1][1:])}`" for k in kinds) + ".",
        "",
        "| keys | P | Shoal req/s | redis req/s | Shoal/redis | Shoal p99 ms | redis p99 ms | Shoal CPU-us/req "
        "| redis CPU-us/req |" + (" baseline req/s | Shoal/baseline |" if args.baseline else ""),
        "|---|---|---|---|---|---|---|---|---|" + ("---|---|" if args.baseline else ""),
    ]
    for kind in kinds:
        for p in pipelines:
            (sr, sp, sc), (rr, rp, rc) = med[("shoal", kind, p)], med[("redis", kind, p)]
            row = f"| {kind} | {p} | {sr:,.0f} | {rr:,.0f} | {sr / rr:.2f}x | {sp:.3f} | {rp:.3f} | {sc:.1f} | {rc:.1f} |"
            if args.baseline and ("baseline", kind, p) in med:
                br = med[("baseline", kind, p)][0]
                row += f" {br:,.0f} | {sr / br:.2f}x |"
            elif args.baseline:
                row += " - | - |"
            lines.append(row)
    body = "\n".join(lines)
    print(body)
    if args.write_docs:
        common.write_docs("scripts", body)


if __name__ == "__main__":
    main()
