#!/usr/bin/env python3
"""What replicas cost: redis-benchmark SET/GET against Shoal without replicas (R=0) and with one
replica per shard (R=1), side by side in one run, and how far the replicas lag under that load.

    python3 loadtest/bench/replicas.py [--rounds 3] [--requests 100000] [--pipelines 1,16]
                                       [--lag-probes 300] [--baseline-node NODE] [--write-docs]

Two pairs of targets, every one 3 shards behind one router on one worker thread, redis-benchmark
on the client CPU (-c 50, -r 100000, 32-byte values):
- processes: a router (`--threads 1`) and 3 `shoal-node` processes on the server CPU, for R=1 plus
  3 replica processes and the failover writer on the *client* CPU, as replicas on other machines
  would be: what a primary pays to feed a replica (the floor, 0.8x, is judged here; the replicas
  share the load generator's CPU, which if anything slows R=1);
- embedded: `--embedded-nodes 3 --threads 1` (plus `--replicas 1`: 6 nodes, all in the router's
  process) on the server CPU: replication's whole cost, primary and replica, on one core.
Rounds are interleaved and the median rate is reported, as R=1/R=0 within each pair.
`--baseline-node` adds a third pair, the processes pair with another `shoal-node` build (an A/B
of a change to what replication costs a primary), and reports each build's R=1/R=0 side by side.

Replication lag: during an extra SET run against R=1 (the same redis-benchmark load), this script
probes every 10 ms, on connections of its own, two ways:
- seen: it writes a probe key, then reads it on a READONLY connection (reads go to the key's
  replica) until the value shows: how far the replica trails its primary without WAIT (plus up
  to one GET round trip through the loaded router);
- WAIT: it writes another probe key and times `WAIT 1 1000` right after it: what a client that
  waits for its write to reach a replica pays (a WAIT makes the feeds send at once).
Reported: p50, p99 and max of each, and how many WAITs answered 0 or reads never saw the value
within a second.

CPU per write: during each SET run against a processes target, the CPU time of each role's
processes together (the 3 primaries, the 3 replicas, the failover writer, the router), from
/proc/<pid>/stat, divided by the run's SETs. The primaries' R=1 figure less their R=0 figure is
what feeding a replica costs a primary per write.
"""
import argparse
import collections
import csv
import io
import socket
import statistics
import subprocess
import sys
import threading
import time

import common

CLIENTS = 50
KEYS = 100_000
# The processes of a node cluster, by role (what each spends per write is reported apart).
ROLES = ("primaries", "replicas", "failover", "router")


def bench(port, test, pipeline, requests):
    out = subprocess.run(
        common.pinned(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-t", test, "-c", str(CLIENTS),
                       "-r", str(KEYS), "-n", str(requests), "-P", str(pipeline), "-d", "32", "--csv"],
                      common.CLIENT_CPUS),
        capture_output=True, text=True, timeout=common.CALL_LIMIT_S, check=True).stdout
    for row in csv.DictReader(io.StringIO(out)):
        if row["test"] == test.upper():
            return float(row["rps"])
    sys.exit(f"[bench] redis-benchmark printed no {test} row: {out!r}")


def node_cluster(node_bin, router_bin, replicas, extra=(), name=None, roles=None, router_extra=()):
    """A topology file, 3 shard primaries (+ a replica each, and the failover writer) and a router,
    as separate processes; returns the router's RESP port once every shard is served (and, with
    replicas, every replica has synced: WAIT 1 answers 1). `extra` flags go to every process (e.g.
    node-link TLS), `router_extra` to the router only (e.g. its Unix socket). `roles`, if given, is
    filled with each role's pids (ROLES)."""
    pids = {role: [] for role in ROLES}
    import json
    ports = [common.free_port() for _ in range(3)]
    rports = [common.free_port() for _ in range(3)] if replicas else []
    bounds = [(0, 5461), (5462, 10922), (10923, 16383)]
    nodes = [{"id": i, "addr": f"127.0.0.1:{p}"} for i, p in enumerate(ports)]
    for i, r in enumerate(rports):
        nodes[i]["replicas"] = [f"127.0.0.1:{r}"]
    topology = {"version": 1, "slots": [{"start": a, "end": b, "node": i} for i, (a, b) in enumerate(bounds)],
                "nodes": nodes}
    name = name or ("r1" if replicas else "r0")
    path = common.WORK / f"topology-{name}.json"
    path.write_text(json.dumps(topology))
    for i, p in enumerate(ports):
        pids["primaries"].append(common.start(
            f"{name}-p{i}", [str(node_bin), "--listen", f"127.0.0.1:{p}", "--topology-file", str(path), *extra],
            cpus=common.SERVER_CPUS).pid)
    for i, p in enumerate(rports):
        pids["replicas"].append(common.start(
            f"{name}-r{i}", [str(node_bin), "--listen", f"127.0.0.1:{p}", "--topology-file", str(path), *extra],
            cpus=common.CLIENT_CPUS).pid)
    if replicas:
        pids["failover"].append(common.start(
            f"{name}-failover", [str(router_bin), "failover", "--topology-file", str(path), *extra],
            cpus=common.CLIENT_CPUS).pid)
    resp, http = common.free_port(), common.free_port()
    pids["router"].append(common.start(
        f"{name}-router", [str(router_bin), "--topology-file", str(path), "--threads", "1",
                           "--resp", f"127.0.0.1:{resp}", "--http", f"127.0.0.1:{http}", *extra, *router_extra],
        cpus=common.SERVER_CPUS).pid)
    if roles is not None:
        roles.update(pids)
    common.wait_port(resp)
    deadline = time.time() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", resp)) as s:
                f = s.makefile("rb")
                ok = True
                for tag in (b"{a}", b"{b}", b"{c}"):
                    s.sendall(common.resp_encode(b"SET", tag + b"ready", b"1"))
                    ok &= common.resp_read(f) == "OK"
                if ok and replicas:
                    s.sendall(common.resp_encode(b"WAIT", b"1", b"200"))
                    ok = common.resp_read(f) == "1"
                if ok:
                    return resp
        except OSError:
            pass
        if time.time() > deadline:
            sys.exit(f"[bench] the {name} cluster did not come up")
        time.sleep(0.1)


def lag_probes(port, count, stop):
    """Every 10 ms until `count` probes or `stop`: a SET read back on a READONLY connection until it
    shows (timed), then a SET and a timed WAIT 1 1000. Returns (seen ms, WAIT ms, misses)."""
    def conn():
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s, s.makefile("rb")
    (w, wf), (r, rf) = conn(), conn()
    r.sendall(common.resp_encode(b"READONLY"))
    assert common.resp_read(rf) == "OK"
    seen, waits, misses = [], [], 0
    for i in range(count):
        if stop.is_set():
            break
        key, value = b"lag:seen:%d" % i, b"v%d" % i
        w.sendall(common.resp_encode(b"SET", key, value))
        common.resp_read(wf)
        t0 = time.perf_counter()
        while True:
            r.sendall(common.resp_encode(b"GET", key))
            if common.resp_read(rf) == value.decode():
                seen.append((time.perf_counter() - t0) * 1000)
                break
            if time.perf_counter() - t0 > 1:
                misses += 1
                break
        w.sendall(common.resp_encode(b"SET", b"lag:wait:%d" % i, b"x"))
        common.resp_read(wf)
        t0 = time.perf_counter()
        w.sendall(common.resp_encode(b"WAIT", b"1", b"1000"))
        reply = common.resp_read(wf)
        waits.append((time.perf_counter() - t0) * 1000)
        misses += reply == "0"
        time.sleep(0.01)
    w.close()
    r.close()
    return seen, waits, misses


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--pipelines", default="1,16")
    ap.add_argument("--lag-probes", type=int, default=300)
    ap.add_argument("--baseline-node", help="another shoal-node build to run as a third pair of process "
                    "targets (an A/B of a change)")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    common.need("redis-benchmark", "run .ci/tools/install apt")
    node_bin, router_bin = common.binaries()
    roles = {}  # target name -> {role: [pids]}, for the processes targets
    targets = {"processes R=0": node_cluster(node_bin, router_bin, False, roles=roles.setdefault("processes R=0", {})),
               "processes R=1": node_cluster(node_bin, router_bin, True, roles=roles.setdefault("processes R=1", {}))}
    pairs = ["processes", "embedded"]
    if args.baseline_node:
        pairs.append("baseline processes")
        for r in (0, 1):
            name = f"baseline processes R={r}"
            targets[name] = node_cluster(args.baseline_node, router_bin, bool(r), name=f"b{r}",
                                         roles=roles.setdefault(name, {}))
    for name, extra in (("embedded R=0", []), ("embedded R=1", ["--replicas", "1"])):
        _, port, _ = common.start_shoal(router_bin, name, extra=["--threads", "1", *extra], cpus=common.SERVER_CPUS)
        targets[name] = port
    pipelines = [int(p) for p in args.pipelines.split(",")]
    tests = ["set", "get"]
    rates = {(t, p, n): [] for t in tests for p in pipelines for n in targets}
    # CPU-µs per write of each role's processes together (the roles a target has), during the SET
    # runs of the processes targets.
    cpu = collections.defaultdict(list)
    progress = common.Progress(args.rounds * len(pipelines) * len(targets) + 2)
    for r in range(args.rounds):
        for p in pipelines:
            n_requests = args.requests * (4 if p > 1 else 1)
            for name, port in targets.items():
                progress.step(f"round {r + 1}: {name} P={p}")
                for t in tests:
                    measured = {role: pids for role, pids in roles.get(name, {}).items() if pids and t == "set"}
                    before = {role: common.cpu_total(pids) for role, pids in measured.items()}
                    rates[(t, p, name)].append(bench(port, t, p, n_requests))
                    for role, pids in measured.items():
                        cpu[(p, name, role)].append((common.cpu_total(pids) - before[role]) / n_requests * 1e6)

    lags = []
    for pair in ("processes", "embedded"):
        progress.step(f"replication lag under the SET load ({pair} R=1)")
        stop = threading.Event()
        result = {}
        prober = threading.Thread(target=lambda: result.update(zip(("seen", "waits", "misses"), lag_probes(
            targets[f"{pair} R=1"], args.lag_probes, stop))))
        prober.start()
        bench(targets[f"{pair} R=1"], "set", 16, args.requests * 8)
        stop.set()
        prober.join()
        seen, waits = result["seen"], result["waits"]
        lags.append(f"- {pair}: {len(waits)} probes; seen on the replica after p50 {pct(seen, 0.5):.2f} ms, "
                    f"p99 {pct(seen, 0.99):.2f} ms, max {max(seen, default=float('nan')):.2f} ms; WAIT p50 {pct(waits, 0.5):.2f} ms, "
                    f"p99 {pct(waits, 0.99):.2f} ms, max {max(waits, default=float('nan')):.2f} ms; {result['misses']} WAITs answered 0 "
                    "or reads did not see the value within a second.")

    rows = []
    ratios = {}
    for pair in pairs:
        for p in pipelines:
            for t in tests:
                r0 = statistics.median(rates[(t, p, f"{pair} R=0")])
                r1 = statistics.median(rates[(t, p, f"{pair} R=1")])
                ratio = ratios[(pair, t, p)] = r1 / r0
                verdict = ("meets" if ratio >= 0.8 else f"**misses** ({ratio:.3f}x)") if pair == "processes" else "-"
                rows.append(f"| {pair} | {t.upper()} | {p} | {r0:,.0f} | {r1:,.0f} | {ratio:.2f}x | {verdict} |")
    table = "\n".join(["| targets | test | P | R=0 req/s | R=1 req/s | R=1/R=0 | floor: >= 0.8x |",
                       "|---|---|---|---|---|---|---|", *rows])
    if args.baseline_node:
        table += "\n\nR=1/R=0 of this node build against the baseline build's (processes): " + "; ".join(
            f"{t.upper()} P={p} {ratios[('processes', t, p)]:.2f}x vs {ratios[('baseline processes', t, p)]:.2f}x"
            for p in pipelines for t in tests) + "."
    per_write = ["| targets | P | role | R=0 CPU-µs per write | R=1 CPU-µs per write |", "|---|---|---|---|---|"]
    for pair in (x for x in pairs if x != "embedded"):
        for p in pipelines:
            for role in ROLES:
                cells = [f"{statistics.median(v):.2f}" if (v := cpu[(p, f"{pair} R={r}", role)]) else "-"
                         for r in (0, 1)]
                per_write.append(f"| {pair} | {p} | {role} | {cells[0]} | {cells[1]} |")
    table += ("\n\nWhat each role spends per write during the SET runs (user + system CPU of all its processes, "
              "from /proc/<pid>/stat in 10 ms ticks, divided by the run's SETs; median of the rounds; R=1's "
              "replicas and failover writer run on the client CPU):\n\n" + "\n".join(per_write))
    lag = ("Replication lag under `redis-benchmark -t set -P 16 -c 50` against R=1, probed every 10 ms (a SET read "
           "back on a READONLY connection until it shows; a SET then `WAIT 1 1000`, timed):\n" + "\n".join(lags))
    cmd = (f"python3 loadtest/bench/replicas.py --rounds {args.rounds} --requests {args.requests} "
           f"--pipelines {args.pipelines} --lag-probes {args.lag_probes}"
           f"{' --baseline-node NODE' if args.baseline_node else ''}{' --write-docs' if args.write_docs else ''}")
    body = (f"Machine: {common.machine()}. Command: `{cmd}` (3 shards behind one router on one worker thread, "
            f"on the server CPU; processes: R=1's replicas and failover writer on the client CPU with "
            f"redis-benchmark; embedded: everything in the router's process on the server CPU; -c {CLIENTS} "
            f"-r {KEYS} -d 32; median of {args.rounds} interleaved rounds; load average at the end "
            f"{common.load_average():.2f}).\n\n{table}\n\n{lag}\n")
    print(body)
    if args.write_docs:
        common.write_docs("replicas", body)


if __name__ == "__main__":
    main()
