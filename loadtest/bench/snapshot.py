"""Snapshot benchmarks, each side by side in one run:

1. Restart to first read, 1M and 5M keys (16-byte keys, 100-byte values): a shoal-node started on
   a snapshot of the data vs redis-server started on an RDB of the same data. Measured from
   spawning the server process to the first GET that returns the right value.
2. GET/SET throughput and p99 through a router while snapshots are written back to back (each paced to a
   tenth of a core, so one may span the whole measurement), vs idle; a failed snapshot fails the run.
3. Peak RSS of a node while it writes a snapshot vs its steady RSS.

    python3 loadtest/bench/snapshot.py [--sizes 1000000,5000000] [--write-docs]
"""
import argparse
import csv
import io
import socket
import statistics
import subprocess
import sys
import threading
import time

import common

VALUE_LEN = 100


def key(i):
    return b"key:%012d" % i


def value(i):
    v = b"value-%d-" % i
    return (v * (VALUE_LEN // len(v) + 1))[:VALUE_LEN]


def write_csv(path, n):
    with open(path, "wb") as f:
        for i in range(n):
            f.write(key(i) + b"," + value(i) + b"\n")


def redis_load(port, n):
    """Loads n SETs with redis-cli --pipe, generating the protocol on the fly."""
    p = subprocess.Popen(["redis-cli", "-p", str(port), "--pipe"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    chunk = []
    for i in range(n):
        k, v = key(i), value(i)
        chunk.append(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(v), v))
        if len(chunk) == 10000:
            p.stdin.write(b"".join(chunk))
            chunk = []
    # The last chunk, then end of input; wait (bounded) for redis-cli's summary.
    out = p.communicate(b"".join(chunk), timeout=common.CALL_LIMIT_S)[0].decode()
    if f"errors: 0, replies: {n}" not in out:
        sys.exit(f"[bench] redis load failed: {out}")


def resp_get(port, k, deadline):
    """Polls GET k until the server answers with a value (not LOADING, not refused)."""
    req = b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(k), k)
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                while time.time() < deadline:
                    s.sendall(req)
                    data = s.recv(4096)
                    if data.startswith(b"$"):
                        return data
                    time.sleep(0.001)
        except OSError:
            time.sleep(0.001)
    sys.exit("[bench] redis never answered")


def restart_times(node_bin, n, rounds):
    probe_key = key(n // 2)
    want = value(n // 2)
    # Shoal: bake the data, then time start -> first correct GET, straight from the node.
    csv_path = common.WORK / f"data-{n}.csv"
    write_csv(csv_path, n)
    data = common.WORK / f"shoal-{n}"
    t = time.time()
    subprocess.run([str(node_bin), "bake", str(csv_path), "-o", f"{data}/"], check=True, capture_output=True,
                   timeout=common.CALL_LIMIT_S)
    bake_s = time.time() - t
    csv_path.unlink()
    shoal = []
    for _ in range(rounds):
        port = common.free_port()
        t0 = time.time()
        node = subprocess.Popen([str(node_bin), "--listen", f"127.0.0.1:{port}", "--data-dir", str(data)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        got = subprocess.run([str(node_bin), "get", "--node", f"127.0.0.1:{port}", "--wait", "60", "--expect",
                              want.decode(), probe_key.decode()], capture_output=True, timeout=common.CALL_LIMIT_S)
        shoal.append(time.time() - t0)
        node.kill()  # SIGKILL: no shutdown snapshot, the data directory stays as baked
        node.wait()
        if got.returncode != 0:
            sys.exit(f"[bench] shoal-node get failed: {got.stderr.decode()}")
    # Redis: the same data in an RDB, then time start -> first correct GET.
    rdir = common.WORK / f"redis-{n}"
    rdir.mkdir()
    port = common.free_port()
    loader = common.redis_server(port, ["--dir", str(rdir), "--dbfilename", "dump.rdb"])
    redis_load(port, n)
    subprocess.run(["redis-cli", "-p", str(port), "SAVE"], check=True, capture_output=True, timeout=common.CALL_LIMIT_S)
    loader.terminate()
    loader.wait()
    redis = []
    for _ in range(rounds):
        port = common.free_port()
        t0 = time.time()
        p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(rdir),
                              "--dbfilename", "dump.rdb", "--save", "", "--appendonly", "no"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        got = resp_get(port, probe_key, time.time() + 120)
        redis.append(time.time() - t0)
        p.kill()
        p.wait()
        if want not in got:
            sys.exit(f"[bench] redis answered {got[:60]!r}")
    size = sum(f.stat().st_size for f in data.iterdir())
    return statistics.median(shoal), statistics.median(redis), bake_s, size


def bench(port, keys, requests, pipeline=1):
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-t", "set,get", "-c", "50", "-r", str(keys),
                          "-n", str(requests), "-P", str(pipeline), "--csv"],
                         capture_output=True, text=True, check=True, timeout=common.CALL_LIMIT_S).stdout
    return {r["test"]: (float(r["rps"]), float(r["p99_latency_ms"])) for r in csv.DictReader(io.StringIO(out))}


def under_snapshot(router_bin, keys, requests):
    data = common.WORK / "router-data"
    port = common.free_port()
    common.start("router-snap", [str(router_bin), "--embedded-nodes", "3", "--threads", "1", "--data-dir", str(data),
                                 "--resp", f"127.0.0.1:{port}", "--http", f"127.0.0.1:{common.free_port()}"])
    common.wait_port(port)
    common.say(f"loading {keys:,} keys through the router")
    redis_load(port, keys)
    idle = bench(port, keys, requests)
    done = threading.Event()
    count = [0]

    failures = []

    def snapshot_loop():
        while not done.is_set():
            r = subprocess.run(["redis-cli", "-p", str(port), "SHOAL", "SNAPSHOT"], capture_output=True, text=True,
                               timeout=common.CALL_LIMIT_S)
            if r.returncode or "ok=no" in r.stdout or r.stdout.startswith("ERR"):
                failures.append(r.stdout + r.stderr)
                return
            count[0] += 1

    t = threading.Thread(target=snapshot_loop)
    t.start()
    busy = bench(port, keys, requests)
    done.set()
    t.join(common.CALL_LIMIT_S)
    if failures:
        sys.exit(f"[bench] SHOAL SNAPSHOT failed: {failures[0]}")
    return idle, busy, count[0]


def rss_during_snapshot(node_bin, router_bin, keys):
    data = common.WORK / "rss-data"
    node_port, port = common.free_port(), common.free_port()
    node = common.start("rss-node", [str(node_bin), "--listen", f"127.0.0.1:{node_port}", "--data-dir", str(data)])
    common.start("rss-router", [str(router_bin), "--nodes", f"127.0.0.1:{node_port}", "--resp", f"127.0.0.1:{port}",
                                "--http", f"127.0.0.1:{common.free_port()}"])
    common.wait_port(port)
    redis_load(port, keys)
    time.sleep(1)
    steady = common.rss(node.pid)
    peak = steady
    snap = subprocess.Popen(["redis-cli", "-p", str(port), "SHOAL", "SNAPSHOT"], stdout=subprocess.PIPE)
    deadline = time.time() + common.CALL_LIMIT_S
    while snap.poll() is None:
        if time.time() > deadline:
            snap.kill()
            sys.exit(f"[bench] a snapshot took over {common.CALL_LIMIT_S} s")
        peak = max(peak, common.rss(node.pid))
        time.sleep(0.005)
    report = snap.stdout.read().decode()
    if "ok=yes" not in report:
        sys.exit(f"[bench] snapshot failed: {report}")
    return steady, peak


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000,5000000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--load-keys", type=int, default=1_000_000)
    ap.add_argument("--requests", type=int, default=300_000)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    common.need("redis-server", "run .ci/tools/install apt")
    node_bin, router_bin = common.binaries()

    rows = ["| keys | shoal-node: start to first read | redis-server: start to first read (RDB load) | ratio | bake time | snapshot size |",
            "|---|---|---|---|---|---|"]
    for n in [int(x) for x in args.sizes.split(",")]:
        common.say(f"restart to first read with {n:,} keys")
        s, r, bake_s, size = restart_times(node_bin, n, args.rounds)
        rows.append(f"| {n:,} | {s * 1000:.1f} ms | {r * 1000:.1f} ms | **{s / r:.3f}x** | {bake_s:.1f} s | {size / 1e6:.0f} MB |")
    restart = "\n".join(rows)

    common.say("GET/SET idle vs while snapshots are written back to back")
    idle, busy, snaps = under_snapshot(router_bin, args.load_keys, args.requests)
    load = "\n".join([
        "| | SET req/s | SET p99 ms | GET req/s | GET p99 ms |",
        "|---|---|---|---|---|",
        f"| idle | {idle['SET'][0]:,.0f} | {idle['SET'][1]:.3f} | {idle['GET'][0]:,.0f} | {idle['GET'][1]:.3f} |",
        f"| snapshots running ({snaps} written) | {busy['SET'][0]:,.0f} | {busy['SET'][1]:.3f} | {busy['GET'][0]:,.0f} | {busy['GET'][1]:.3f} |",
        f"| ratio | {busy['SET'][0] / idle['SET'][0]:.2f}x | **{busy['SET'][1] / idle['SET'][1]:.2f}x** | "
        f"{busy['GET'][0] / idle['GET'][0]:.2f}x | **{busy['GET'][1] / idle['GET'][1]:.2f}x** |",
    ])

    common.stop_all()
    common.say("RSS while a node writes a snapshot")
    steady, peak = rss_during_snapshot(node_bin, router_bin, args.load_keys)
    rss = f"Node with {args.load_keys:,} keys in memory: steady RSS {steady / 1e6:.0f} MB, peak while writing a snapshot {peak / 1e6:.0f} MB: **{peak / steady:.2f}x**."

    print(restart, load, rss, sep="\n\n")
    if args.write_docs:
        cmd = (f"python3 loadtest/bench/snapshot.py --sizes {args.sizes} --rounds {args.rounds} "
               f"--load-keys {args.load_keys} --requests {args.requests} --write-docs")
        body = (f"Machine: {common.machine()}. Command: `{cmd}` (median of {args.rounds} restarts; "
                f"redis-benchmark -c 50 -r {args.load_keys} -n {args.requests} through a router with 3 nodes).\n\n"
                f"Restart to first read:\n\n{restart}\n\nGET/SET while snapshots are written:\n\n{load}\n\n{rss}\n")
        common.write_docs("snapshots", body)


if __name__ == "__main__":
    sys.exit(main())
