"""Bytes per key: 1M keys (16-byte keys, 32-byte values) in one shoal-node vs one redis-server.

    python3 loadtest/bench/memory.py [--keys 1000000] [--write-docs]

Both are loaded with the same pipelined SETs (redis-cli --pipe; Shoal through a router in its own
process) and measured by the growth of their resident set size, which counts everything the
allocator holds. The node's own accounting (what maxmemory compares against) and Redis's
used_memory are shown beside it.
"""
import argparse
import subprocess
import sys
import time

import common


def load(port, keys):
    proto = common.WORK / "load.proto"
    if not proto.exists():
        with open(proto, "wb") as f:
            for i in range(keys):
                k, v = b"key:%012d" % i, b"value:%026d" % i
                f.write(b"*3\r\n$3\r\nSET\r\n$16\r\n" + k + b"\r\n$32\r\n" + v + b"\r\n")
    with open(proto, "rb") as f:
        out = subprocess.run(["redis-cli", "-p", str(port), "--pipe"], stdin=f, capture_output=True, text=True,
                             timeout=common.CALL_LIMIT_S, check=True).stdout
    if f"errors: 0, replies: {keys}" not in out:
        sys.exit(f"[bench] load failed: {out}")


def info_field(port, section, field):
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", section], capture_output=True, text=True,
                         timeout=common.CALL_LIMIT_S).stdout
    for line in out.splitlines():
        if line.startswith(field + ":"):
            return int(line.split(":", 1)[1])
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    common.need("redis-cli", "run .ci/tools/install apt")
    node_bin, router_bin = common.binaries()
    n = args.keys

    node_port, resp = common.free_port(), common.free_port()
    node = common.start("node", [str(node_bin), "--listen", f"127.0.0.1:{node_port}"])
    common.start("router", [str(router_bin), "--nodes", f"127.0.0.1:{node_port}", "--resp", f"127.0.0.1:{resp}",
                            "--http", f"127.0.0.1:{common.free_port()}"])
    common.wait_port(resp)
    before = common.rss(node.pid)
    common.say(f"loading {n:,} keys into shoal-node")
    load(resp, n)
    time.sleep(0.5)
    node_rss = (common.rss(node.pid) - before) / n
    node_acct = info_field(resp, "memory", "used_memory") / n

    rport = common.free_port()
    redis = common.redis_server(rport)
    before, used_before = common.rss(redis.pid), info_field(rport, "memory", "used_memory")
    common.say(f"loading {n:,} keys into redis-server")
    load(rport, n)
    time.sleep(0.5)
    redis_rss = (common.rss(redis.pid) - before) / n
    redis_used = (info_field(rport, "memory", "used_memory") - used_before) / n

    table = "\n".join([
        "| server | bytes/key (RSS growth) | bytes/key (own accounting) |",
        "|---|---|---|",
        f"| shoal-node | {node_rss:.1f} | {node_acct:.1f} (accounted for maxmemory) |",
        f"| redis-server | {redis_rss:.1f} | {redis_used:.1f} (used_memory) |",
        "",
        f"Ratio shoal-node / redis-server (RSS): **{node_rss / redis_rss:.2f}x**",
    ])
    print(table)
    if args.write_docs:
        body = (f"Machine: {common.machine()}. Command: `python3 loadtest/bench/memory.py --keys {n} --write-docs` "
                f"({n:,} keys, 16-byte keys, 32-byte values).\n\n{table}\n")
        common.write_docs("memory", body)


if __name__ == "__main__":
    sys.exit(main())
