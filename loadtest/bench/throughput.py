"""redis-benchmark SET/GET, side by side in one run: Shoal (router + 3 nodes), one redis-server,
and twemproxy in front of 3 redis-servers.

    python3 loadtest/bench/throughput.py [--rounds 3] [--requests 200000] [--write-docs]

Each (target, pipeline depth) pair is measured `rounds` times, interleaved across targets so
machine noise hits them alike; the median run is reported. Ratios compare targets within this
run only.
"""
import argparse
import csv
import io
import json
import statistics
import subprocess
import sys

import common

CLIENTS = 50
KEYSPACE = 100_000


def bench(port, pipeline, requests):
    out = subprocess.run(
        ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-t", "set,get", "-c", str(CLIENTS),
         "-r", str(KEYSPACE), "-n", str(requests), "-P", str(pipeline), "--csv"],
        capture_output=True, text=True, timeout=600, check=True).stdout
    rows = {}
    for row in csv.DictReader(io.StringIO(out)):
        rows[row["test"]] = {"rps": float(row["rps"]), "p50": float(row["p50_latency_ms"]),
                             "p99": float(row["p99_latency_ms"])}
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--pipelines", default="1,16")
    ap.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    ap.add_argument("--json", help="also write raw results here")
    args = ap.parse_args()
    common.need("redis-benchmark", "run .ci/tools/install apt")
    common.need("nutcracker", "run .ci/tools/install apt")
    node_bin, router_bin = common.binaries()

    targets = {}
    port = common.free_port()
    common.redis_server(port)
    targets["redis-server"] = port

    backends = [common.free_port() for _ in range(3)]
    for b in backends:
        common.redis_server(b)
    tw = common.free_port()
    conf = common.WORK / "nutcracker.yml"
    conf.write_text(
        "bench:\n  listen: 127.0.0.1:%d\n  hash: fnv1a_64\n  distribution: ketama\n  redis: true\n"
        "  auto_eject_hosts: false\n  servers:\n%s" % (tw, "".join(f"   - 127.0.0.1:{b}:1\n" for b in backends)))
    common.start("nutcracker", ["nutcracker", "-c", str(conf), "-s", str(common.free_port())])
    common.wait_port(tw)
    targets["twemproxy (3 redis)"] = tw

    # Shoal: the router with one worker thread (like redis-server's single thread, leaving the
    # other cores to redis-benchmark), and with its default thread count.
    for label, extra in [("shoal (3 nodes, 1 thread)", ["--threads", "1"]), ("shoal (3 nodes, default threads)", [])]:
        p = common.free_port()
        common.start(label.split()[0] + str(p), [str(router_bin), "--embedded-nodes", "3", "--resp", f"127.0.0.1:{p}",
                                                 "--http", f"127.0.0.1:{common.free_port()}", *extra])
        common.wait_port(p)
        targets[label] = p

    pipelines = [int(x) for x in args.pipelines.split(",")]
    runs = {(t, pl): [] for t in targets for pl in pipelines}
    total = len(runs) * args.rounds
    done = 0
    for r in range(args.rounds):
        for pl in pipelines:
            for name, p in targets.items():
                done += 1
                common.say(f"[{done}/{total}] round {r + 1}: {name} P={pl}")
                runs[(name, pl)].append(bench(p, pl, args.requests))

    def median(name, pl, test, field):
        return statistics.median(run[test][field] for run in runs[(name, pl)])

    lines = ["| target | P | SET req/s | SET p99 ms | GET req/s | GET p99 ms |", "|---|---|---|---|---|---|"]
    results = {}
    for pl in pipelines:
        for name in targets:
            row = {t: {f: median(name, pl, t, f) for f in ("rps", "p50", "p99")} for t in ("SET", "GET")}
            results[f"{name} P={pl}"] = row
            lines.append(f"| {name} | {pl} | {row['SET']['rps']:,.0f} | {row['SET']['p99']:.3f} | "
                         f"{row['GET']['rps']:,.0f} | {row['GET']['p99']:.3f} |")
    lines += ["", "| ratio (throughput, same run) | P | SET | GET |", "|---|---|---|---|"]
    ratios = {}
    for pl in pipelines:
        for shoal in [t for t in targets if t.startswith("shoal")]:
            for base in ("redis-server", "twemproxy (3 redis)"):
                s, g = (results[f"{shoal} P={pl}"][t]["rps"] / results[f"{base} P={pl}"][t]["rps"] for t in ("SET", "GET"))
                ratios[f"{shoal} / {base} P={pl}"] = (s, g)
                lines.append(f"| {shoal} / {base} | {pl} | {s:.2f}x | {g:.2f}x |")
    table = "\n".join(lines)
    print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "ratios": {k: list(v) for k, v in ratios.items()}}, f, indent=2)
    if args.write_docs:
        cmd = f"python3 loadtest/bench/throughput.py --rounds {args.rounds} --requests {args.requests} --write-docs"
        body = (f"Machine: {common.machine()}. Command: `{cmd}` (redis-benchmark -c {CLIENTS} -r {KEYSPACE} "
                f"-n {args.requests}, median of {args.rounds} interleaved rounds).\n\n{table}\n")
        common.replace_section(common.REPO / "docs/benchmarks.md", "throughput", body)
        common.say("updated docs/benchmarks.md")


if __name__ == "__main__":
    sys.exit(main())
