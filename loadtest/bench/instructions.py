"""Instructions per request, counted by valgrind's callgrind: this build of Shoal beside a baseline
build, the same requests to each. Instruction counts do not depend on what else the machine is
doing, so an A/B of two builds holds on a busy machine where rates and CPU times do not (they are
no substitute for rates: cache misses, syscalls' kernel time and waiting are not counted).

    python3 loadtest/bench/instructions.py --baseline ROUTER_BIN [--requests 20000] [--write-docs]
    python3 loadtest/bench/instructions.py --baseline ROUTER_BIN --only "fast GET P=256" --keep
        (one part; the dumps stay, for `callgrind_annotate --inclusive=yes DUMP` side by side)

Each build runs as a router with 3 embedded nodes on one worker thread (`--threads 1`) under
`valgrind --tool=callgrind`, once plain and once with `--near-cache 64mb`; for each part the
counters are zeroed (`callgrind_control --zero`), the requests sent, and the counters dumped:
the part's instructions over its requests. The parts: RESP SET/GET at P=1 and P=16, LPUSH, LPOP
(of what LPUSH left), LRANGE_100 (redis-benchmark first fills its list with as many LPUSHes, which
count in the part), HSET, SADD, SPOP (of what SADD left) and ZADD at P=16 (redis-benchmark, one connection,
-r 1000 -d 32; `--keys 100000` for the large sets and hashes typed.py builds), and the binary fast path's
SET/GET at P=256 and near-cache hits (shoal-bench, 4 connections, keys written first). Keys and
values are the same for both builds.
"""
import argparse
import re
import subprocess
import sys
import time

import common

KEYS = 1000
# (label, router, how): RESP parts by redis-benchmark (test, pipeline), fast-path parts by
# shoal-bench (test, pipeline); "near" runs on the router with the near cache.
PARTS = [("SET P=1", "plain", ("resp", "set", 1)), ("GET P=1", "plain", ("resp", "get", 1)),
         ("SET P=16", "plain", ("resp", "set", 16)), ("GET P=16", "plain", ("resp", "get", 16)),
         ("LPUSH P=16", "plain", ("resp", "lpush", 16)), ("LPOP P=16", "plain", ("resp", "lpop", 16)),
         ("LRANGE_100 P=16 (with its LPUSH fill)", "plain", ("resp", "lrange_100", 16)),
         ("HSET P=16", "plain", ("resp", "hset", 16)), ("SADD P=16", "plain", ("resp", "sadd", 16)),
         ("SPOP P=16", "plain", ("resp", "spop", 16)), ("ZADD P=16", "plain", ("resp", "zadd", 16)),
         ("fast SET P=256", "plain", ("fast", "set", 256)), ("fast GET P=256", "plain", ("fast", "get", 256)),
         ("near-cache hits (fast GET P=256)", "near", ("fast", "get", 256))]


def start(router_bin, name, extra=(), cache_sim=False):
    """The router under callgrind, counting from the start (zeroed before each part)."""
    port, http = common.free_port(), common.free_port()
    sock = common.WORK / f"{name}.sock"
    out = common.WORK / f"callgrind.{name}.out"
    argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-instr=no",
            *(["--cache-sim=yes"] if cache_sim else []),
            str(router_bin), "--embedded-nodes", "3", "--threads", "1", "--unix-socket", str(sock),
            "--resp", f"127.0.0.1:{port}", "--http", f"127.0.0.1:{http}", *extra]
    p = common.start(name, argv)
    common.wait_port(port, timeout=300)
    return p, port, sock, out


def load(port, sock, how, requests, bench_bin, keys=KEYS, clients=1):
    """Sends one part's requests (-r `keys`: the key space, and the members/fields of SADD, HSET, ZADD)."""
    kind, test, pipeline = how
    if kind == "resp":
        argv = ["redis-benchmark", "-p", str(port), "-c", str(clients), "-n", str(requests), "-P", str(pipeline),
                "-r", str(keys), "-d", "32", "-t", test, "-q"]
    else:
        argv = [str(bench_bin), "--transport", "fast", "-s", str(sock), "-t", test, "-c", "4", "-P",
                str(pipeline), "-n", str(requests), "-r", str(keys), "-d", "32", "--threads", "1"]
    subprocess.run(argv, check=True, capture_output=True, timeout=common.CALL_LIMIT_S)


def control(pid, what):
    run = subprocess.run(["callgrind_control", what, str(pid)], capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        sys.exit(f"[bench] callgrind_control {what} {pid} failed: {run.stdout}{run.stderr}")


def newest(out):
    """The newest dump callgrind wrote for `out`."""
    return sorted(out.parent.glob(out.name + "*"), key=lambda p: p.stat().st_mtime)[-1]


def newest_dump(out):
    """The totals of the newest dump callgrind wrote for `out`, by event name (Ir: instructions;
    with --cache-sim also D1mr, D1mw: first-level data misses, DLmr, DLmw: last-level ones)."""
    dump = newest(out)
    text = dump.read_text(errors="replace")
    events = re.search(r"^events:\s+(.+)$", text, re.M)
    m = re.search(r"^(?:summary|totals):\s+([\d ]+)$", text, re.M)
    if not m or not events:
        sys.exit(f"[bench] no totals in {dump}")
    return dict(zip(events.group(1).split(), map(int, m.group(1).split())))


def part(pid, out, requests, send):
    """Events per request of one part on the counted router: {event: count / requests}."""
    control(pid, "--zero")
    send()
    control(pid, "--dump")
    time.sleep(0.5)
    return {e: n / requests for e, n in newest_dump(out).items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", required=True, help="the shoal-router binary to compare with")
    ap.add_argument("--baseline-label", default="BASELINE/shoal-router")
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--keys", type=int, default=KEYS, help="redis-benchmark's -r for the RESP parts "
                    f"(default {KEYS}; typed.py's 100000 makes SADD/HSET/ZADD build large tables)")
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--only", help="comma-separated part labels to count (default: all); with "
                    "--keep, where each part's callgrind dump is, for callgrind_annotate")
    ap.add_argument("--keep", action="store_true", help="keep the callgrind dumps and say where")
    ap.add_argument("--clients", type=int, default=1, help="redis-benchmark's -c for the RESP parts "
                    "(default 1; typed.py and throughput.py run 50, which batches more per node call)")
    ap.add_argument("--cache-sim", action="store_true", help="also simulate the caches (callgrind "
                    "--cache-sim=yes, about 2x slower): data misses per request, first and last level")
    args = ap.parse_args()
    parts = PARTS if not args.only else [p for p in PARTS if p[0] in args.only.split(",")]
    if not parts:
        sys.exit(f"[bench] --only names no part; the parts: {', '.join(p[0] for p in PARTS)}")
    for tool in ("valgrind", "callgrind_control", "redis-benchmark"):
        common.need(tool, "Debian: apt-get install valgrind redis-tools")
    _, router_bin = common.binaries()
    builds = {"this build": router_bin, "baseline": args.baseline}
    bench_bin = router_bin.parent / "shoal-bench"
    counts = {}
    progress = common.Progress(len(builds) * len(parts))
    for name, binary in builds.items():
        for router, extra in (("plain", []), ("near", ["--near-cache", "64mb"])):
            if not any(wanted == router for _, wanted, _ in parts):
                continue
            tag = f"{name.replace(' ', '-')}-{router}"
            p, port, sock, out = start(binary, tag, extra, args.cache_sim)
            # Warm-up (the first requests of a connection and of each node link are counted
            # nowhere), and every key written, then read once (the near cache holds them all).
            load(port, sock, ("fast", "set", 16), KEYS * 4, bench_bin)
            load(port, sock, ("fast", "get", 16), KEYS * 4, bench_bin)
            load(port, sock, ("resp", "set,get", 1), 2000, bench_bin)
            for label, wanted, how in parts:
                if wanted != router:
                    continue
                progress.step(f"{name}: {label}")
                counts[(name, label)] = part(p.pid, out, args.requests, lambda: load(port, sock, how, args.requests, bench_bin, args.keys, args.clients))
                if args.keep:
                    print(f"[bench] {name}: {label}: {newest(out)}", file=sys.stderr)
            common.stop_all()
    lines = ["| part | instructions per request, this build | baseline | this / baseline |", "|---|---|---|---|"]
    if args.cache_sim:
        lines = ["| part | instructions per request, this build | baseline | this / baseline | L1 data misses "
                 "per request, this build | baseline | last-level data misses, this build | baseline |",
                 "|---|---|---|---|---|---|---|---|"]
    for label, _, _ in parts:
        mine, base = counts[("this build", label)], counts[("baseline", label)]
        row = f"| {label} | {mine['Ir']:,.0f} | {base['Ir']:,.0f} | {mine['Ir'] / base['Ir']:.3f}x |"
        if args.cache_sim:
            misses = [c[a] + c[b] for a, b in (("D1mr", "D1mw"), ("DLmr", "DLmw")) for c in (mine, base)]
            row += "".join(f" {m:,.1f} |" for m in misses)
        lines.append(row)
    table = "\n".join(lines)
    print(table)
    if args.write_docs and (parts != PARTS or args.cache_sim or args.clients != 1):
        sys.exit("[bench] --write-docs records every part, instructions only: run without --only, --cache-sim and --clients")
    if args.write_docs:
        keys = f" --keys {args.keys}" if args.keys != KEYS else ""
        cmd = (f"python3 loadtest/bench/instructions.py --baseline {args.baseline_label} --requests {args.requests}"
               f"{keys} --write-docs")
        body = (f"Machine: {common.machine()}. Command: `{cmd}` (a router with 3 embedded nodes, `--threads 1`, "
                f"under `valgrind --tool=callgrind`; RESP parts by redis-benchmark -c 1 -r {args.keys} -d 32, fast-path "
                "parts by shoal-bench -c 4 -P 256 -r 1000 -d 32; router and nodes counted together; each part's "
                "counters zeroed before it and dumped after it).\n\n" + table + "\n")
        common.write_docs("instructions", body)


if __name__ == "__main__":
    sys.exit(main())
