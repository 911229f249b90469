#!/usr/bin/env python3
"""Flamegraphs of the router's request paths: where a request's CPU goes (issue #17).

    python3 loadtest/bench/flamegraph.py [--paths fast-get,resp-uds-get,resp-p1-get,http-get]
        [--seconds 4] [--out docs/flamegraphs]

For each path: a router on one worker thread with 3 embedded nodes (one process, pinned to CPU
1, so the hop to the nodes and the nodes' own work are in the same graph), its keys loaded,
then one bounded load on CPU 0 while `perf record` samples the router (DWARF call graphs, 499 Hz)
for `--seconds`. The samples are folded and drawn with inferno into <out>/<path>.svg.

- fast-get: shoal-bench, the fast path over the Unix socket, 4 connections x 256 in flight.
- resp-uds-get: the same load in RESP over the same socket.
- resp-p1-get: redis-benchmark -c 50 -P 1 GET over TCP.
- http-get: wrk -t1 -c50 (keep-alive) GETs on the HTTP API.

Needs perf (Debian: linux-perf) and inferno (cargo install inferno; installed into
~/.cache/shoal/tools if missing). Every load is bounded by a request count or a duration.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import common
import sidecar

PATHS = ["fast-get", "resp-uds-get", "resp-p1-get", "http-get"]
# Where a sample's time is counted: the first of these its stack meets, from the leaf up.
CATEGORIES = [
    ("kernel (syscalls, network stack)", ("_[k]",)),
    ("allocator", ("malloc", "_int_free", "cfree", "realloc", "unlink_chunk", "tcache")),
    ("node: store and ops", ("shoal_node::",)),
    # Before gRPC's marks: the HTTP API's hyper is HTTP/1.1 (gRPC's is HTTP/2).
    ("HTTP/1.1 API: hyper", ("hyper::proto::h1", "hyper::server::conn::http1", "httparse::")),
    ("gRPC: HTTP/2 and protobuf", ("tonic::", "h2::", "hyper::", "prost::", "tonic_prost")),
    ("router", ("shoal_router::", "shoal_wire::")),
    ("tokio runtime", ("tokio::",)),
]
TOOLS = Path(os.environ.get("SHOAL_CACHE") or Path.home() / ".cache/shoal") / "tools"


def inferno():
    """The inferno binaries' directory (installed with cargo once if missing)."""
    found = shutil.which("inferno-flamegraph")
    if found:
        return Path(found).parent
    bin_dir = TOOLS / "bin"
    if not (bin_dir / "inferno-flamegraph").exists():
        common.say(f"installing inferno into {TOOLS} (cargo install, once)")
        subprocess.run(["cargo", "install", "inferno", "--locked", "--root", str(TOOLS)], check=True)
    return bin_dir


def load(path, bench_bin, sock, resp_port, http_port, seconds):
    """The load for `path`, running at least `seconds` (bounded either way)."""
    if path == "fast-get" or path == "resp-uds-get":
        transport = "fast" if path == "fast-get" else "resp-uds"
        argv = [str(bench_bin), "--transport", transport, "-s", str(sock), "-t", "get", "-c", "4", "-P", "256",
                "-n", str(600_000 * (seconds + 2)), "-r", str(sidecar.KEYS), "-d", str(sidecar.SIZE),
                "--threads", "1"]
    elif path == "resp-p1-get":
        argv = ["redis-benchmark", "-p", str(resp_port), "-t", "get", "-c", "50", "-r", str(sidecar.KEYS),
                "-n", str(60_000 * (seconds + 2)), "-d", str(sidecar.SIZE), "-q"]
    else:
        script = common.WORK / "get.lua"
        script.write_text(sidecar.WRK_SCRIPT.replace("{keys}", str(sidecar.KEYS)))
        argv = ["wrk", "-t1", "-c50", f"-d{seconds + 2}s", "-s", str(script), f"http://127.0.0.1:{http_port}"]
    return subprocess.Popen(common.pinned(argv, common.CLIENT_CPUS), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def breakdown(folded):
    """Shares of the samples by CATEGORIES, as text."""
    totals = {name: 0 for name, _ in CATEGORIES}
    totals["other"] = 0
    for line in folded.decode(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")[::-1]
        name = next((n for f in frames for n, marks in CATEGORIES if any(m in f for m in marks)), "other")
        totals[name] += int(count)
    all_samples = sum(totals.values()) or 1
    return ", ".join(f"{name} {100 * n / all_samples:.0f}%" for name, n in totals.items())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--seconds", type=int, default=4, help="sampling time per path")
    ap.add_argument("--out", default=str(common.REPO / "docs/flamegraphs"))
    args = ap.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    for p in paths:
        if p not in PATHS:
            sys.exit(f"unknown path {p!r} (known: {', '.join(PATHS)})")
    common.need("perf", "Debian: apt-get install linux-perf")
    common.need("redis-benchmark", "Debian: apt-get install redis-tools")
    common.need("wrk", "Debian: apt-get install wrk")
    tools = inferno()
    _, router_bin = common.binaries()
    bench_bin = router_bin.parent / "shoal-bench"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for i, path in enumerate(paths, 1):
        common.say(f"[{i}/{len(paths)}] {path}: starting a router, loading {sidecar.KEYS:,} keys")
        sock = common.WORK / f"flame-{path}.sock"
        router, resp_port, http_port = common.start_shoal(router_bin, f"flame-{path}", ["--threads", "1"],
                                                          unix_socket=sock, cpus=common.SERVER_CPUS)
        sidecar.load_keys(["-p", str(resp_port)])
        gen = load(path, bench_bin, sock, resp_port, http_port, args.seconds)
        time.sleep(1)  # past the connections' start
        data = common.WORK / f"{path}.perf"
        common.say(f"[{i}/{len(paths)}] {path}: sampling for {args.seconds} s")
        subprocess.run(["perf", "record", "-q", "-F", "499", "--call-graph", "dwarf,16384", "-p", str(router.pid),
                        "-o", str(data), "--", "sleep", str(args.seconds)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        gen.kill()
        gen.wait()
        common.stop_all()
        common.say(f"[{i}/{len(paths)}] {path}: folding and drawing")
        script = subprocess.run(["perf", "script", "-i", str(data)], capture_output=True, check=True)
        folded = subprocess.run([str(tools / "inferno-collapse-perf"), "--kernel"], input=script.stdout, capture_output=True,
                                check=True)
        title = f"shoal-router (3 embedded nodes, 1 worker thread): {path}"
        # Frames under 0.2% of the samples are left out: the graph stays readable and small.
        svg = subprocess.run([str(tools / "inferno-flamegraph"), "--title", title, "--width", "1600",
                              "--minwidth", "0.2"],
                             input=folded.stdout, capture_output=True, check=True)
        (out / f"{path}.svg").write_bytes(svg.stdout)
        common.say(f"[{i}/{len(paths)}] {path}: {out / (path + '.svg')} ({len(svg.stdout) // 1024} KiB)")
        print(f"{path}: {breakdown(folded.stdout)}", flush=True)


if __name__ == "__main__":
    main()
