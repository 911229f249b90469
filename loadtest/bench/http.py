"""k6 against Shoal's HTTP API: PUT and GET throughput, p99 and router CPU per million requests,
at each value size, with the router on one worker thread and on its default thread count.

    python3 loadtest/bench/http.py [--rounds 3] [--requests 50000] [--sizes 32,4096] [--vus 50]
        [--json FILE] [--write-docs]

Runs loadtest/http.js's closed-model scenarios: `put` (VUS clients PUT BENCH_KEYS keys as fast as
they can), then `get` (random GETs of those keys, each answer's length checked). Only Shoal speaks
this API, so there is no peer to compare with here: set these beside the RESP numbers above. k6
needs about a core of its own, so on a small machine these numbers are bounded by the load
generator as much as by the router. Rounds are interleaved across the two routers.
"""
import argparse
import json
import statistics
import subprocess
import sys

import common

SCRIPT = common.REPO / "loadtest/http.js"


def k6(http_port, scenario, size, vus, requests, keys):
    """One k6 run; returns (req/s, p99 ms, requests) from its --summary-export."""
    summary = common.WORK / f"k6-{scenario}-{size}.json"
    env = {"SHOAL_HTTP": f"http://127.0.0.1:{http_port}", "SCENARIOS": scenario, "VALUE_SIZE": size, "VUS": vus,
           "ITERATIONS": requests, "BENCH_KEYS": keys}
    argv = ["k6", "run", "--quiet", "--no-usage-report", "--summary-export", str(summary)]
    for k, v in env.items():
        argv += ["-e", f"{k}={v}"]
    p = subprocess.run(argv + [str(SCRIPT)], capture_output=True, text=True, timeout=1200)
    m = json.loads(summary.read_text())["metrics"] if summary.exists() else {}
    failed = m.get("http_req_failed", {}).get("passes", 0)  # `passes` counts failed requests
    if p.returncode != 0 or failed:
        sys.exit(f"[bench] k6 {scenario} run failed (exit {p.returncode}, {failed} failed requests):\n"
                 f"{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return m["http_reqs"]["rate"], m["http_req_duration"]["p(99)"], m["http_reqs"]["count"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=50_000, help="requests per k6 run")
    ap.add_argument("--sizes", default="32,4096", help="value sizes in bytes")
    ap.add_argument("--vus", type=int, default=50, help="k6 virtual users (like redis-benchmark -c 50)")
    ap.add_argument("--write-docs", action="store_true", help=f"update {common.DOCS}")
    ap.add_argument("--json", help="also write raw results here")
    args = ap.parse_args()
    common.need("k6", "run .ci/tools/install k6 and source .ci/tools/env (loadtest/compare does both)")
    _, router_bin = common.binaries()
    sizes = [int(x) for x in args.sizes.split(",")]

    routers = {}
    for label, extra in [("shoal (3 nodes, 1 thread)", ["--threads", "1"]), ("shoal (3 nodes, default threads)", [])]:
        p, _, http_port = common.start_shoal(router_bin, f"http-{len(routers)}", extra)
        routers[label] = (p.pid, http_port)

    runs = {(name, size, sc): [] for name in routers for size in sizes for sc in ("put", "get")}
    progress = common.Progress(len(routers) * len(sizes) * args.rounds)
    for r in range(args.rounds):
        for size in sizes:
            for name, (pid, port) in routers.items():
                progress.step(f"round {r + 1}: k6 HTTP {name}, {size} B")
                keys = min(args.requests, 100_000 if size <= 1024 else 10_000)
                for sc in ("put", "get"):  # put first: get reads the keys put wrote
                    before = common.cpu_seconds(pid)
                    rps, p99, n = k6(port, sc, size, args.vus, args.requests, keys)
                    runs[(name, size, sc)].append({"rps": rps, "p99": p99, "cpu": (common.cpu_seconds(pid) - before) / n * 1e6})

    med = {k: {f: statistics.median(x[f] for x in v) for f in ("rps", "p99", "cpu")} for k, v in runs.items()}
    lines = ["| target | value | PUT req/s | PUT p99 ms | GET req/s | GET p99 ms | CPU-s per 1M PUT | CPU-s per 1M GET |",
             "|---|---|---|---|---|---|---|---|"]
    for size in sizes:
        for name in routers:
            p, g = med[(name, size, "put")], med[(name, size, "get")]
            lines.append(f"| {name} | {size:,} B | {p['rps']:,.0f} | {p['p99']:.2f} | {g['rps']:,.0f} | {g['p99']:.2f} | "
                         f"{p['cpu']:.2f} | {g['cpu']:.2f} |")
    table = "\n".join(lines)
    print(table)
    cmd = (f"python3 loadtest/bench/http.py --rounds {args.rounds} --requests {args.requests} --sizes {args.sizes} "
           f"--vus {args.vus} --write-docs")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": common.machine(), "command": cmd,
                       "results": [{"target": n, "size": s, "scenario": sc, **v} for (n, s, sc), v in med.items()]},
                      f, indent=2)
    if args.write_docs:
        body = (f"Machine: {common.machine()}. Command: `{cmd}` (k6 run -e SCENARIOS=put|get -e VUS={args.vus} "
                f"-e ITERATIONS={args.requests} -e VALUE_SIZE=SIZE loadtest/http.js; median of {args.rounds} "
                f"interleaved rounds; CPU-s per 1M: the router process, nodes included, per million requests).\n\n"
                f"{table}\n")
        common.write_docs("http", body)


if __name__ == "__main__":
    sys.exit(main())
