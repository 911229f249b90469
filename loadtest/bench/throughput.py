"""redis-benchmark SET/GET, side by side in one run: Shoal as users deploy it (a router and 3
`shoal-node` processes, the cluster secret on, as the chart runs them) and as one process (a router
with 3 embedded nodes), one redis-server, and twemproxy in front of 3 redis-servers; over TCP and a
Unix socket, at several pipeline depths and value sizes, with the CPU time each server's processes
spent per million operations.

    python3 loadtest/bench/throughput.py [--rounds 3] [--requests 200000] [--pipelines 1,16,64]
        [--sizes 32,4096] [--transports tcp,unix] [--baseline ROUTER_BIN [--baseline-node NODE_BIN]]
        [--pin] [--json FILE] [--write-docs]

`--baseline` adds another router build (an earlier commit's) in the embedded shape; with
`--baseline-node` too, that build also runs in the processes shape.

Each (target, transport, value size, pipeline depth, command) cell is measured `rounds` times,
interleaved across targets so machine noise hits them alike; the median run is reported. Deeper
pipelines get proportionally more requests (requests x ceil(sqrt(P))) so every run lasts long
enough for its CPU time to be measured (values over 1 KiB get a quarter). Ratios compare targets within this run only.
"""
import argparse
import csv
import io
import json
import math
import statistics
import subprocess
import sys

import common
import replicas

CLIENTS = 50
# Shoal's targets: the shape users deploy first.
PROCESSES = "shoal (router + 3 node processes, secret on)"
EMBEDDED = "shoal (3 nodes, 1 thread)"
EMBEDDED_THREADS = "shoal (3 nodes, default threads)"
BASE_EMBEDDED = "shoal baseline build (1 thread)"
BASE_PROCESSES = "shoal baseline build (router + 3 node processes)"
TESTS = ("SET", "GET")


def keyspace(size):
    """Random keys per run: 100k small values, 10k of 4 KiB (so the data set stays ~40 MB per target)."""
    return 100_000 if size <= 1024 else 10_000


def requests_at(base, pipeline, size):
    """Requests per run: deeper pipelines get more (ceil(sqrt(P)) x) so each run lasts long enough
    to measure its CPU time; 4 KiB values a quarter (they are byte-bound and slower per request)."""
    n = base * math.ceil(math.sqrt(pipeline))
    return n if size <= 1024 else n // 4


def bench(addr, test, pipeline, size, requests, cpus=None):
    """One redis-benchmark run of `test` against addr (("tcp", port) or ("unix", path)), on `cpus`."""
    where = ["-h", "127.0.0.1", "-p", str(addr[1])] if addr[0] == "tcp" else ["-s", str(addr[1])]
    out = subprocess.run(
        common.pinned(["redis-benchmark", *where, "-t", test.lower(), "-c", str(CLIENTS), "-r", str(keyspace(size)),
                       "-n", str(requests), "-P", str(pipeline), "-d", str(size), "--csv"], cpus),
        capture_output=True, text=True, timeout=600, check=True).stdout
    for row in csv.DictReader(io.StringIO(out)):
        if row["test"] == test:
            return {"rps": float(row["rps"]), "p50": float(row["p50_latency_ms"]),
                    "p99": float(row["p99_latency_ms"])}
    sys.exit(f"[bench] redis-benchmark printed no {test} row: {out!r}")


def start_processes(node_bin, router_bin, name):
    """Shoal as the chart runs it: 3 shoal-node processes and a router (`--threads 1`), the cluster
    secret on (common sets SHOAL_CLUSTER_SECRET), all on the server CPU."""
    sock = common.WORK / f"{name}.sock"
    roles = {}
    resp = replicas.node_cluster(node_bin, router_bin, False, name=name, roles=roles,
                                 router_extra=["--unix-socket", str(sock)])
    return {"tcp": resp, "unix": sock,
            "procs": {"shoal-router": roles["router"], "3 shoal-nodes": roles["primaries"]}}


def start_targets(node_bin, router_bin, baseline=None, baseline_node=None, cpus=None):
    """Starts every target (on `cpus`, when given; the processes shape always on the server CPU);
    returns {name: {"tcp": port, "unix": path, "procs": {group: [pid]}}}."""
    targets = {}
    port, sock = common.free_port(), common.WORK / "redis.sock"
    p = common.redis_server(port, ["--unixsocket", str(sock), "--unixsocketperm", "700"], cpus=cpus)
    targets["redis-server"] = {"tcp": port, "unix": sock, "procs": {"redis-server": [p.pid]}}

    backends = [common.free_port() for _ in range(3)]
    pids = [common.redis_server(b, cpus=cpus).pid for b in backends]
    tw, tw_sock = common.free_port(), common.WORK / "nutcracker.sock"
    servers = "".join(f"   - 127.0.0.1:{b}:1\n" for b in backends)
    pool = ("  hash: fnv1a_64\n  distribution: ketama\n  redis: true\n  auto_eject_hosts: false\n"
            f"  servers:\n{servers}")
    # Two pools over the same three backends: one listens on TCP, one on a Unix socket.
    conf = common.WORK / "nutcracker.yml"
    conf.write_text(f"bench_tcp:\n  listen: 127.0.0.1:{tw}\n{pool}bench_unix:\n  listen: {tw_sock} 0600\n{pool}")
    nc = common.start("nutcracker", ["nutcracker", "-c", str(conf), "-s", str(common.free_port())], cpus=cpus)
    common.wait_port(tw)
    targets["twemproxy (3 redis)"] = {"tcp": tw, "unix": tw_sock,
                                      "procs": {"nutcracker": [nc.pid], "3 redis-servers": pids}}

    # Shoal as users deploy it: router and nodes apart, talking gRPC with the cluster secret.
    targets[PROCESSES] = start_processes(node_bin, router_bin, "procs")
    # Shoal in one process: the router with one worker thread (like redis-server's single thread,
    # leaving the other cores to redis-benchmark), and with its default thread count. Nodes are
    # embedded, so the one process is the whole cluster.
    for label, extra in [(EMBEDDED, ["--threads", "1"]), (EMBEDDED_THREADS, [])]:
        sock = common.WORK / f"shoal-{len(targets)}.sock"
        p, resp, _ = common.start_shoal(router_bin, f"shoal-{len(targets)}", extra, unix_socket=sock, cpus=cpus)
        targets[label] = {"tcp": resp, "unix": sock, "procs": {"shoal-router (+3 embedded nodes)": [p.pid]}}
    if baseline:
        # Another build of the router (say, of an earlier commit), measured in the same run: the
        # fair way to tell a change's cost on a machine whose absolute speed drifts.
        sock = common.WORK / "shoal-baseline.sock"
        p, resp, _ = common.start_shoal(baseline, "shoal-baseline", ["--threads", "1"], unix_socket=sock,
                                        cpus=cpus)
        targets[BASE_EMBEDDED] = {"tcp": resp, "unix": sock, "procs": {"shoal-router (+3 embedded nodes)": [p.pid]}}
        if baseline_node:
            targets[BASE_PROCESSES] = start_processes(baseline_node, baseline, "base-procs")
    return targets


def fmt_cpu(cell):
    """CPU-seconds per 1M ops; for a proxy, the proxy's own share in parentheses."""
    text = f"{cell['cpu']:.2f}"
    if "nutcracker" in cell["cpu_groups"]:
        text += f" (proxy {cell['cpu_groups']['nutcracker']:.2f})"
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=200_000, help="requests per run at P=1")
    ap.add_argument("--pipelines", default="1,16,64")
    ap.add_argument("--sizes", default="32,4096", help="value sizes in bytes (redis-benchmark -d)")
    ap.add_argument("--transports", default="tcp,unix")
    ap.add_argument("--baseline", help="also measure this shoal-router binary (e.g. a build of an earlier "
                    "commit) as 'shoal baseline build (1 thread)'")
    ap.add_argument("--baseline-label", default="BASELINE/shoal-router",
                    help="how the baseline binary is named in the report's command line")
    ap.add_argument("--write-docs", action="store_true", help=f"update {common.DOCS}")
    ap.add_argument("--json", help="also write raw results here (loadtest/bench/charts.py reads them)")
    ap.add_argument("--baseline-node", help="with --baseline: that build's shoal-node, to run the baseline "
                    "in the processes shape too")
    ap.add_argument("--pin", action="store_true",
                    help=f"run every server on CPU {common.SERVER_CPUS} (redis-benchmark is on CPU {common.CLIENT_CPUS}), "
                    "so no target shares the load generator's core: the fair setting on 2 cores (default threads "
                    "then share that one CPU too)")
    args = ap.parse_args()
    common.need("redis-benchmark", "run .ci/tools/install apt")
    common.need("nutcracker", "run .ci/tools/install apt")
    node_bin, router_bin = common.binaries()
    pipelines = [int(x) for x in args.pipelines.split(",")]
    sizes = [int(x) for x in args.sizes.split(",")]
    transports = args.transports.split(",")
    if not set(transports) <= {"tcp", "unix"}:
        sys.exit("[bench] --transports: tcp and/or unix")

    if args.baseline_node and not args.baseline:
        sys.exit("[bench] --baseline-node needs --baseline (that build's router)")
    client_cpus = common.CLIENT_CPUS if args.pin else None
    targets = start_targets(node_bin, router_bin, args.baseline, args.baseline_node,
                            common.SERVER_CPUS if args.pin else None)
    cells = [(t, tr, sz, pl) for tr in transports for sz in sizes for pl in pipelines for t in targets]
    runs = {(c, test): [] for c in cells for test in TESTS}
    progress = common.Progress(len(cells) * args.rounds)
    for r in range(args.rounds):
        for cell in cells:
            name, tr, size, pl = cell
            progress.step(f"round {r + 1}: {name} {tr} {size} B P={pl}")
            target, n = targets[name], requests_at(args.requests, pl, size)
            for test in TESTS:  # SET first: GET then reads the values just written
                before = {g: common.cpu_total(ps) for g, ps in target["procs"].items()}
                result = bench((tr, target[tr]), test, pl, size, n, client_cpus)
                per_m = {g: (common.cpu_total(ps) - before[g]) / n * 1e6 for g, ps in target["procs"].items()}
                result["cpu_groups"] = per_m
                result["cpu"] = sum(per_m.values())
                runs[(cell, test)].append(result)

    # Medians per cell and command.
    results = []
    for cell in cells:
        for test in TESTS:
            rs = runs[(cell, test)]
            med = {f: statistics.median(x[f] for x in rs) for f in ("rps", "p50", "p99", "cpu")}
            med["cpu_groups"] = {g: statistics.median(x["cpu_groups"][g] for x in rs) for g in rs[0]["cpu_groups"]}
            name, tr, size, pl = cell
            results.append({"target": name, "transport": tr, "size": size, "pipeline": pl, "test": test, **med})
    at = {(x["target"], x["transport"], x["size"], x["pipeline"], x["test"]): x for x in results}
    cmd = (f"python3 loadtest/bench/throughput.py --rounds {args.rounds} --requests {args.requests} "
           f"--pipelines {args.pipelines} --sizes {args.sizes} --transports {args.transports}"
           + (f" --baseline {args.baseline_label}" if args.baseline else "")
           + (" --baseline-node NODE" if args.baseline_node else "") + (" --pin" if args.pin else "")
           + " --write-docs")
    machine = common.machine()
    if args.json:  # first, so the raw results survive whatever follows
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "command": cmd, "targets": list(targets), "results": results}, f, indent=2)

    blocks = []
    for tr in transports:
        for size in sizes:
            lines = [f"#### {'TCP' if tr == 'tcp' else 'Unix socket'}, {size:,}-byte values (-r {keyspace(size):,})", "",
                     "| target | P | SET req/s | SET p99 ms | GET req/s | GET p99 ms | CPU-s per 1M SET | CPU-s per 1M GET |",
                     "|---|---|---|---|---|---|---|---|"]
            for pl in pipelines:
                for name in targets:
                    s, g = at[(name, tr, size, pl, "SET")], at[(name, tr, size, pl, "GET")]
                    lines.append(f"| {name} | {pl} | {s['rps']:,.0f} | {s['p99']:.3f} | {g['rps']:,.0f} | {g['p99']:.3f} | "
                                 f"{fmt_cpu(s)} | {fmt_cpu(g)} |")
            blocks.append("\n".join(lines))

    shoals = [t for t in targets if t.startswith("shoal (")]
    pairs = [(s, b) for s in shoals for b in ("redis-server", "twemproxy (3 redis)")]
    if BASE_PROCESSES in targets:
        pairs.append((PROCESSES, BASE_PROCESSES))
    if BASE_EMBEDDED in targets:
        pairs.append((EMBEDDED, BASE_EMBEDDED))
    short = {"redis-server": "redis", "twemproxy (3 redis)": "twemproxy", PROCESSES: "processes",
             EMBEDDED: "embedded 1 thread", EMBEDDED_THREADS: "embedded default threads",
             BASE_EMBEDDED: "baseline embedded", BASE_PROCESSES: "baseline processes"}
    head = " | ".join(f"shoal {short[s]} / {short[b]}" for s, b in pairs)
    lines = ["#### Shoal's throughput relative to the others (SET / GET, same run)", "",
             f"| transport | value | P | {head} |", "|---|---|---|" + "---|" * len(pairs)]
    for tr in transports:
        for size in sizes:
            for pl in pipelines:
                row = [" / ".join(f"{at[(s, tr, size, pl, t)]['rps'] / at[(b, tr, size, pl, t)]['rps']:.2f}x"
                                  for t in TESTS) for s, b in pairs]
                lines.append(f"| {tr} | {size:,} B | {pl} | " + " | ".join(row) + " |")
    blocks.append("\n".join(lines))
    table = "\n\n".join(blocks)
    print(table)

    if args.write_docs:
        body = (f"Machine: {machine}. Command: `{cmd}` (redis-benchmark -c {CLIENTS} -t set|get -d SIZE -r KEYS "
                f"-n {args.requests} x ceil(sqrt(P)) (a quarter of that for 4 KiB) -P P, over -h/-p or -s; median of {args.rounds} interleaved "
                f"rounds). CPU-s per 1M: user + system CPU seconds of the target's server processes (all of "
                f"them: for twemproxy the proxy and its three redis-servers, proxy share in parentheses) per "
                f"million requests. Shoal's shapes: *processes* is a router and 3 shoal-node processes "
                f"talking gRPC over loopback with the cluster secret on, as the Helm chart runs them (the shape "
                f"users deploy); *embedded* is one router process with 3 nodes inside it.\n\n{table}\n")
        common.write_docs("throughput", body)


if __name__ == "__main__":
    sys.exit(main())
