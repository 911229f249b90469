#!/usr/bin/env python3
"""What TLS costs: client TLS against redis-server's, and node-link mutual TLS against plaintext
links, side by side in one run.

    python3 loadtest/bench/tls.py [--rounds 3] [--requests 100000] [--pipelines 1,16] [--write-docs]

Client TLS: redis-benchmark `--tls` SET/GET (-c 50, -r 100000, 32-byte values) against Shoal's
`--tls-port` (a router on one worker thread with 3 embedded nodes) and redis-server's `--tls-port`
(Debian's build, OpenSSL), both with `tls-auth-clients no`, servers pinned to one CPU and
redis-benchmark to the other; the plaintext ports of the same two processes are measured in the
same rounds for reference. The floor (0.8x of redis-server at P=1) is judged on the TLS rows.

Node links: the same plaintext load against a router and 3 `shoal-node` processes (all on the
server CPU) whose links are plain gRPC with the cluster secret, and against the same set-up with
`--link-tls-*` (mutual TLS on every router-node link): mTLS/plain is what encrypting the links
costs. Certificates are made fresh by wire/testdata/certs.sh (openssl). Medians of interleaved
rounds.
"""
import argparse
import csv
import io
import statistics
import subprocess
import sys
from pathlib import Path

import common
import replicas

CLIENTS = 50
KEYS = 100_000
ROOT = Path(__file__).resolve().parents[2]


def bench(port, test, pipeline, requests, tls):
    argv = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-t", test, "-c", str(CLIENTS), "-r", str(KEYS),
            "-n", str(requests), "-P", str(pipeline), "-d", "32", "--csv"]
    if tls:
        argv += ["--tls", "--cacert", str(tls / "ca.crt")]
    run = subprocess.run(common.pinned(argv, common.CLIENT_CPUS), capture_output=True, text=True,
                         timeout=common.CALL_LIMIT_S)
    for row in csv.DictReader(io.StringIO(run.stdout)):
        if row.get("test") == test.upper():
            return float(row["rps"])
    sys.exit(f"[bench] redis-benchmark on port {port} printed no {test} row (exit {run.returncode}):\n"
             f"{run.stdout[-1500:]}\n{run.stderr[-1500:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--pipelines", default="1,16")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    common.need("redis-benchmark", "run .ci/tools/install apt")
    common.need("openssl", "Debian: apt-get install openssl")
    certs = common.WORK / "certs"
    subprocess.run(["bash", str(ROOT / "wire/testdata/certs.sh"), str(certs)], check=True)
    pipelines = [int(p) for p in args.pipelines.split(",")]
    node_bin, router_bin = common.binaries()

    tls_flags = ["--tls-cert-file", str(certs / "server.crt"), "--tls-key-file", str(certs / "server.key"),
                 "--tls-ca-cert-file", str(certs / "ca.crt"), "--tls-auth-clients", "no"]
    shoal_tls = common.free_port()
    _, shoal_plain, _ = common.start_shoal(router_bin, "shoal", cpus=common.SERVER_CPUS,
                                           extra=["--threads", "1", "--tls-port", f"127.0.0.1:{shoal_tls}",
                                                  *tls_flags])
    redis_plain, redis_tls = common.free_port(), common.free_port()
    common.redis_server(redis_plain, extra=["--tls-port", str(redis_tls), *tls_flags], cpus=common.SERVER_CPUS)
    link = ["--link-tls-cert-file", str(certs / "node.crt"), "--link-tls-key-file", str(certs / "node.key"),
            "--link-tls-ca-file", str(certs / "ca.crt")]
    plain_links = replicas.node_cluster(node_bin, router_bin, False, name="links-plain")
    tls_links = replicas.node_cluster(node_bin, router_bin, False, extra=link, name="links-mtls")
    targets = {  # name -> (port, TLS certs dir or None)
        "shoal tls": (shoal_tls, certs), "redis tls": (redis_tls, certs),
        "shoal plain": (shoal_plain, None), "redis plain": (redis_plain, None),
        "links plain": (plain_links, None), "links mtls": (tls_links, None),
    }
    load_before = common.load_average()
    results = {}
    tests = ("set", "get")
    progress = common.Progress(args.rounds * len(pipelines) * len(tests) * len(targets))
    for r in range(args.rounds):
        for p in pipelines:
            n = args.requests * (4 if p > 1 else 1)
            for test in tests:
                for name, (port, tls) in targets.items():
                    progress.step(f"round {r + 1}: {name} {test.upper()} P={p}")
                    results.setdefault((name, test, p), []).append(bench(port, test, p, n, tls))
    load_after = common.load_average()
    med = {k: statistics.median(v) for k, v in results.items()}
    lines = [
        f"Machine: {common.machine()}; 1-minute load average {load_before:.1f} at the start, {load_after:.1f} at "
        f"the end. Command: `python3 loadtest/bench/tls.py --rounds {args.rounds} --requests {args.requests} "
        f"--pipelines {args.pipelines}{' --write-docs' if args.write_docs else ''}` (`redis-benchmark [--tls "
        f"--cacert ca.crt] -c {CLIENTS} -r {KEYS} -d 32 -n N -P P`, N = {args.requests:,} at P=1 and 4x that "
        f"when pipelined; median of {args.rounds} interleaved rounds; servers on CPU {common.SERVER_CPUS}, "
        f"redis-benchmark on CPU {common.CLIENT_CPUS}).",
        "",
        "Client TLS (Shoal: router `--threads 1` + 3 embedded nodes; redis-server 7.0.15 with OpenSSL; "
        "`tls-auth-clients no`):",
        "",
        "| test | P | Shoal TLS req/s | redis TLS req/s | Shoal/redis (TLS) | Shoal plain req/s | redis plain req/s "
        "| Shoal/redis (plain) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for test in tests:
        for p in pipelines:
            st, rt = med[("shoal tls", test, p)], med[("redis tls", test, p)]
            sp, rp = med[("shoal plain", test, p)], med[("redis plain", test, p)]
            lines.append(f"| {test.upper()} | {p} | {st:,.0f} | {rt:,.0f} | {st / rt:.2f}x | {sp:,.0f} | {rp:,.0f} "
                         f"| {sp / rp:.2f}x |")
    lines += [
        "",
        "Node links (router `--threads 1` + 3 `shoal-node` processes, all on the server CPU; plaintext clients):",
        "",
        "| test | P | plain links req/s | mTLS links req/s | mTLS/plain |",
        "|---|---|---|---|---|",
    ]
    for test in tests:
        for p in pipelines:
            a, b = med[("links plain", test, p)], med[("links mtls", test, p)]
            lines.append(f"| {test.upper()} | {p} | {a:,.0f} | {b:,.0f} | {b / a:.2f}x |")
    body = "\n".join(lines)
    print(body)
    if args.write_docs:
        common.write_docs("tls", body)


if __name__ == "__main__":
    main()
