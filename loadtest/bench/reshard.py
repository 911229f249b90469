"""Resharding benchmark, side by side in one run:

1. Migration rate: a cluster of 3 shoal-node processes holding 4M keys (16-byte keys, 100-byte
   values) grows to 4 with `shoal-router reshard`, moving 1M keys; keys/s and MB/s moved, from
   the coordinator's own report, with client load running.
2. Client GET/SET throughput and p99 through a router during that migration vs steady state
   before it: redis-benchmark in short bursts (same size, same flags) back to back; the bursts
   that ran entirely inside the migration window are compared with the steady ones.
Each is run per pull rate limit (nodes' --migrate-rate), on a fresh cluster.

    python3 loadtest/bench/reshard.py [--keys 4000000] [--rates 0,32mb,8mb] [--write-docs]
"""
import argparse
import csv
import io
import json
import re
import statistics
import subprocess
import sys
import time

import common
from snapshot import bench, redis_load


# A move that takes longer than this has gone wrong (1M keys move in seconds to a minute).
MOVE_LIMIT_S = 900


def summarize(bursts):
    """Median req/s and median p99 per command over bursts."""
    return {cmd: (statistics.median(b[cmd][0] for b in bursts), statistics.median(b[cmd][1] for b in bursts))
            for cmd in ("SET", "GET")}


def scenario(node_bin, router_bin, keys, burst_n, steady_n, rate):
    """One run on a fresh cluster: load, steady bursts, then 3 -> 4 under bursts at pull `rate`."""
    topology = common.WORK / f"topology-{rate}.json"
    addrs = []
    for i in range(4):
        port = common.free_port()
        addrs.append(f"{i}=127.0.0.1:{port}")
        common.start(f"node{i}-{rate}", [str(node_bin), "--listen", f"127.0.0.1:{port}", "--node-id", str(i),
                                         "--topology-file", str(topology), "--migrate-rate", rate, "--threads", "1"])
        common.wait_port(port, ping=False)
    subprocess.run([str(router_bin), "reshard", "--topology-file", str(topology), "--nodes", ",".join(addrs[:3])],
                   check=True, capture_output=True, timeout=common.CALL_LIMIT_S)
    port = common.free_port()
    common.start(f"router-{rate}", [str(router_bin), "--topology-file", str(topology), "--threads", "1",
                                    "--resp", f"127.0.0.1:{port}", "--http", f"127.0.0.1:{common.free_port()}"])
    common.wait_port(port)
    common.say(f"[rate {rate}] loading {keys:,} keys into 3 nodes")
    redis_load(port, keys)
    common.say(f"[rate {rate}] steady state: {steady_n} bursts of {burst_n:,} requests")
    steady = [bench(port, keys, burst_n) for _ in range(steady_n)]

    common.say(f"[rate {rate}] growing 3 -> 4 nodes under the same load")
    log = open(common.WORK / f"reshard-{rate}.log", "w+")
    t0 = time.time()
    coordinator = subprocess.Popen([str(router_bin), "reshard", "--topology-file", str(topology),
                                    "--nodes", ",".join(addrs)], stderr=log, stdout=subprocess.DEVNULL)
    during, overlapping = [], []
    deadline = t0 + MOVE_LIMIT_S
    while coordinator.poll() is None:
        if time.time() > deadline:
            coordinator.kill()
            sys.exit(f"[bench] the move took over {MOVE_LIMIT_S} s; see {log.name}")
        result = bench(port, keys, burst_n)
        # Bursts that ran entirely inside the migration window count; if the migration is
        # shorter than a burst, the ones that overlapped it are reported instead (marked).
        (during if coordinator.poll() is None else overlapping).append(result)
    if coordinator.returncode != 0:
        sys.exit(f"[bench] reshard failed; see {log.name}")
    log.seek(0)
    lines = [l for l in log.read().splitlines() if "migrations done" in l]
    m = re.search(r"(\d+) of ~\d+ keys \(([\d.]+) MB\) moved in ([\d.]+)s", lines[-1] if lines else "")
    if not m:
        sys.exit(f"[bench] no progress report from the coordinator in {log.name}")
    t = json.loads(topology.read_text())
    if t.get("migrations") or len(t["nodes"]) != 4:
        sys.exit("[bench] the topology did not settle on 4 nodes")
    common.stop_all()
    return {"moved": int(m.group(1)), "mb": float(m.group(2)), "secs": float(m.group(3)),
            "steady": summarize(steady), "during": summarize(during or overlapping), "inside": bool(during)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=4_000_000, help="keys in the cluster (3->4 moves a quarter)")
    ap.add_argument("--burst", type=int, default=2_000, help="requests per redis-benchmark burst")
    ap.add_argument("--steady-bursts", type=int, default=9)
    ap.add_argument("--rates", default="0,32mb,8mb", help="nodes' --migrate-rate per run (0: unlimited; 8mb: default)")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    common.need("redis-benchmark", "run .ci/tools/install apt")
    node_bin, router_bin = common.binaries()

    rows = ["| pull rate | keys moved | time | keys/s | MB/s | SET req/s | SET p99 | GET req/s | GET p99 |",
            "|---|---|---|---|---|---|---|---|---|"]
    overlapped = False
    for rate in args.rates.split(","):
        r = scenario(node_bin, router_bin, args.keys, args.burst, args.steady_bursts, rate)
        s, d = r["steady"], r["during"]
        name = "unlimited" if rate == "0" else rate + "/s" + (" (default)" if rate == "8mb" else "")
        if not r["inside"]:
            name += " ¹"
            overlapped = True
        # The coordinator reports the time to 0.1 s; a tiny move (--quick) can report 0.0.
        if r["secs"] > 0:
            timing = f"{r['secs']:.1f} s | {r['moved'] / r['secs']:,.0f} | {r['mb'] / r['secs']:.1f}"
        else:
            timing = "< 0.1 s | n/a | n/a"
        rows.append(
            f"| {name} | {r['moved']:,} ({r['mb']:.0f} MB) | {timing} | {d['SET'][0]:,.0f} vs {s['SET'][0]:,.0f}: **{d['SET'][0] / s['SET'][0]:.2f}x** | "
            f"{d['SET'][1]:.2f} vs {s['SET'][1]:.2f} ms: **{d['SET'][1] / s['SET'][1]:.2f}x** | "
            f"{d['GET'][0]:,.0f} vs {s['GET'][0]:,.0f}: **{d['GET'][0] / s['GET'][0]:.2f}x** | "
            f"{d['GET'][1]:.2f} vs {s['GET'][1]:.2f} ms: **{d['GET'][1] / s['GET'][1]:.2f}x** |")
        common.say(rows[-1])
    notes = ["", "¹ The migration was shorter than one burst: the client columns are of the burst that "
             "overlapped it, partly after it ended."] if overlapped else []
    table = "\n".join(rows + notes)
    print(table)
    if args.write_docs:
        cmd = (f"python3 loadtest/bench/reshard.py --keys {args.keys} --rates {args.rates} --burst {args.burst} "
               f"--steady-bursts {args.steady_bursts} --write-docs")
        body = (f"Machine: {common.machine()}. Command: `{cmd}`. Per run: three shoal-node processes (1 thread "
                f"each) holding {args.keys:,} keys (16-byte keys, 100-byte values) grow to four with `shoal-router "
                f"reshard`, which moves a quarter of them; one router (1 thread); redis-benchmark -c 50 -r {args.keys} "
                f"-n {args.burst} in bursts, all on this machine's cores. Time and rates are the pull time as the "
                f"receiving node measured it. Client columns: median of the bursts run entirely during the migration "
                f"vs median of {args.steady_bursts} bursts before it (floor: >= 0.5x throughput, <= 3x p99).\n\n"
                f"{table}\n")
        common.write_docs("resharding", body)


if __name__ == "__main__":
    sys.exit(main())
