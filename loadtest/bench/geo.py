"""GEO commands side by side in one run (issue 39): redis-benchmark against one redis-server, Shoal
as users deploy it (a router and 3 shoal-node processes, cluster secret on) and Shoal's embedded
cluster (router + 3 in-process nodes), every server pinned to one core and redis-benchmark to the
other.

    python3 loadtest/bench/geo.py [--rounds 5] [--requests 100000] [--pipelines 1,16] [--write-docs]

Before measuring, each target gets the same 100,000 points spread over a 10 x 10 degree area
(key `geo:idx`, seeded). Tests: GEOADD of a new member (random names, one spot), GEOSEARCH by
radius (10 km around a fixed point, ASC COUNT 10: about 30 points in range, sorted), GEOSEARCH
by box (20 x 20 km, WITHDIST), GEODIST of two members, GEOPOS of one. Rounds are interleaved
across targets and the median rate is reported with the Shoal/redis ratio of this run.
"""
import argparse
import random
import socket
import subprocess
import sys

import common
import replicas

CLIENTS = 50
POINTS = 100_000
TESTS = {
    "GEOADD": ["GEOADD", "geo:add", "13.361389", "38.115556", "m:__rand_int__"],
    "GEOSEARCH radius, COUNT 10": ["GEOSEARCH", "geo:idx", "FROMLONLAT", "15", "40", "BYRADIUS", "10", "km",
                                    "ASC", "COUNT", "10"],
    "GEOSEARCH box, WITHDIST": ["GEOSEARCH", "geo:idx", "FROMLONLAT", "15", "40", "BYBOX", "20", "20", "km",
                                "WITHDIST"],
    "GEODIST": ["GEODIST", "geo:idx", "p:1", "p:2", "km"],
    "GEOPOS": ["GEOPOS", "geo:idx", "p:3"],
}


def load(port):
    """The same seeded points into `geo:idx`, in pipelined batches; checks the count."""
    rng = random.Random(39)
    with socket.create_connection(("127.0.0.1", port)) as s:
        f = s.makefile("rb")
        s.sendall(common.resp_encode("DEL", "geo:idx", "geo:add"))
        common.resp_read(f)
        batch = 500
        for start in range(0, POINTS, batch):
            args = ["GEOADD", "geo:idx"]
            for i in range(start, start + batch):
                args += [f"{10 + rng.random() * 10:.6f}", f"{35 + rng.random() * 10:.6f}", f"p:{i}"]
            s.sendall(common.resp_encode(*args))
            added = common.resp_read(f)
            if added != str(batch):
                sys.exit(f"[bench] GEOADD on port {port} answered {added!r}")
        s.sendall(common.resp_encode("ZCARD", "geo:idx"))
        if common.resp_read(f) != str(POINTS):
            sys.exit(f"[bench] port {port} does not hold {POINTS} points")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--pipelines", default="1,16")
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args()
    common.need("redis-benchmark", "run .ci/tools/install apt")
    node_bin, router_bin = common.binaries()
    targets = {}
    redis_port = common.free_port()
    common.redis_server(redis_port, cpus=common.SERVER_CPUS)
    targets["redis-server"] = redis_port
    targets["Shoal: router + 3 node processes, secret on"] = replicas.node_cluster(node_bin, router_bin, False)
    _, embedded, _ = common.start_shoal(router_bin, "shoal-embedded", ["--threads", "1"], cpus=common.SERVER_CPUS)
    targets["Shoal: router with 3 embedded nodes"] = embedded
    for name, port in targets.items():
        common.say(f"loading {POINTS} points into {name}")
        load(port)
    pipelines = [int(p) for p in a.pipelines.split(",")]
    rates = {}
    for r in range(a.rounds):
        for test, command in TESTS.items():
            for p in pipelines:
                for name, port in targets.items():
                    rate = common.benchmark_rps(port, command, p, a.requests * (4 if p > 1 else 1), clients=CLIENTS)
                    rates.setdefault((test, p, name), []).append(rate)
        common.say(f"round {r + 1}/{a.rounds} done")
    names = list(targets)
    lines = [
        f"Machine: {common.machine()}. Command: `python3 loadtest/bench/geo.py --rounds {a.rounds} "
        f"--requests {a.requests} --pipelines {a.pipelines}` (redis-benchmark -c {CLIENTS}; servers pinned to "
        f"one core, redis-benchmark to the other; {POINTS:,} points in `geo:idx`; median of {a.rounds} "
        "interleaved rounds; load average at the end "
        f"{common.load_average():.1f}).",
        "",
    ]
    lines += common.ratio_table(TESTS, pipelines, names, rates)
    table = "\n".join(lines)
    print(table)
    if a.write_docs:
        common.write_docs("geo", table)


if __name__ == "__main__":
    main()
