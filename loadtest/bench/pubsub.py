#!/usr/bin/env python3
"""PUBLISH fan-out: Shoal (3 node processes, 2 router processes) against one redis-server, each
with 100 subscribers to one channel, side by side in one run.

    python3 loadtest/bench/pubsub.py [--messages N] [--rounds R] [--latency-seconds S]
                                     [--latency-rate PER_SEC] [--write-docs]

Throughput: two redis-benchmark processes (one per Shoal router; both on redis-server's one
port) pipeline PUBLISHes of a 32-byte message (`-c 4 -P 32`) while this script's subscribers
(50 on each Shoal router; 100 on redis-server) read everything. Reported: publishes per second
(redis-benchmark's rate, summed) and deliveries per second (messages received by all subscribers
together, from the first publish until the last subscriber has every message), and each
system's server CPU-us per publish (and what one saturated core would serve at that cost: on a
2-core machine the load generator's core, reading 100 sockets, tends to set the pace for both
systems); median of R interleaved rounds. A subscriber that does not get every message fails the
run.

Latency: one publisher (this script, alternating between the routers for Shoal) publishes
messages carrying their send time at a fixed rate; 10 probe subscribers (5 per router) compute
publish-to-receive times, the others read and discard. Reported: p50, p99 and max over all probes.

Every server process is pinned to CPU 1, the load (redis-benchmark and this script) to CPU 0.
"""
import argparse
import multiprocessing
import os
import re
import selectors
import socket
import statistics
import subprocess
import sys
import threading
import time

import common

SUBSCRIBERS = 100
CHANNEL = b"bench"
PAYLOAD = b"m" * 32
PROBES_PER_ROUTER = 5


FRAME = common.resp_encode(b"message", CHANNEL, PAYLOAD)  # a message push in RESP2 is a 3-element array


def subscribe(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(common.resp_encode(b"SUBSCRIBE", CHANNEL))
    got = b""
    while not got.endswith(b":1\r\n"):
        chunk = s.recv(4096)
        if not chunk:
            sys.exit(f"[bench] subscriber on {port} closed before confirming")
        got += chunk
    if got != b"*3\r\n$9\r\nsubscribe\r\n$%d\r\n%s\r\n:1\r\n" % (len(CHANNEL), CHANNEL):
        sys.exit(f"[bench] unexpected confirmation {got!r}")
    s.setblocking(False)
    return s


def wait_subscribers(port, n):
    """Waits until PUBSUB NUMSUB says `n` (every router's subscribers registered on the nodes)."""
    want = b"*2\r\n$5\r\nbench\r\n:%d\r\n" % n
    end = time.time() + 30
    with socket.create_connection(("127.0.0.1", port)) as s:
        while time.time() < end:
            s.sendall(common.resp_encode(b"PUBSUB", b"NUMSUB", CHANNEL))
            if s.recv(256) == want:
                return
            time.sleep(0.05)
    sys.exit(f"[bench] {n} subscribers never showed on port {port}")


class Readers:
    """Reads every subscriber socket in a thread: counts bytes (all of them), and on probe
    sockets parses messages carrying a send time to record latencies.

    Throughput runs read everything every few milliseconds (fewer, larger reads: otherwise this
    reader, not the servers, would set the pace). Latency runs watch the probes closely and
    drain the other sockets every 10 ms."""

    def __init__(self, socks, probes):
        self.all = selectors.DefaultSelector()
        self.probes = selectors.DefaultSelector()
        self.others = selectors.DefaultSelector()
        self.bytes = {s: 0 for s in socks}
        self.buf = {s: b"" for s in probes}
        self.latencies = []
        self.stop = False
        self.error = None
        self.last = 0.0
        self.batching = True
        for s in socks:
            self.all.register(s, selectors.EVENT_READ)
            (self.probes if s in self.buf else self.others).register(s, selectors.EVENT_READ)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        drained = time.perf_counter()
        while not self.stop:
            if self.batching:
                time.sleep(0.005)
                self.read(self.all, 0.1)
                continue
            self.read(self.probes, 0.001)
            if time.perf_counter() - drained > 0.01:
                self.read(self.others, 0)
                drained = time.perf_counter()

    def read(self, sel, timeout):
        for key, _ in sel.select(timeout=timeout):
            s = key.fileobj
            try:
                data = s.recv(1 << 20)
            except BlockingIOError:
                continue
            if not data:
                self.error = "a server closed a subscriber (output buffer limit?)"
                for x in (self.all, self.probes, self.others):
                    try:
                        x.unregister(s)
                    except KeyError:
                        pass
                continue
            self.bytes[s] += len(data)
            self.last = time.perf_counter()
            if s in self.buf:
                self.parse(s, data)

    def parse(self, s, data):
        buf = self.buf[s] + data
        now = time.monotonic_ns()
        while True:
            # *3 $7 message $5 bench $len payload: the payload is the last line of the frame.
            m = re.match(rb"\*3\r\n\$7\r\nmessage\r\n\$5\r\nbench\r\n\$(\d+)\r\n", buf)
            if not m:
                break
            n = int(m.group(1))
            end = m.end() + n + 2
            if len(buf) < end:
                break
            payload = buf[m.end():m.end() + n]
            if payload.startswith(b"t:"):
                self.latencies.append((now - int(payload[2:])) / 1e6)
            buf = buf[end:]
        self.buf[s] = buf

    def total(self):
        return sum(self.bytes.values())

    def reset(self):
        for s in self.bytes:
            self.bytes[s] = 0
        self.latencies = []

    def close(self):
        self.stop = True
        self.thread.join(timeout=5)


CLIENTS, PIPELINE = 4, 32  # per redis-benchmark process (one per router)


def bench_publish(ports, total):
    """Runs one redis-benchmark per port (total PUBLISHes split between them); publishes/s."""
    procs = []
    for port in ports:
        argv = common.pinned(["redis-benchmark", "-p", str(port), "-c", str(CLIENTS), "-P", str(PIPELINE), "-n",
                              str(total // len(ports)), "--csv", "PUBLISH", CHANNEL.decode(), PAYLOAD.decode()],
                             common.CLIENT_CPUS)
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    rate = 0.0
    for p in procs:
        out, _ = p.communicate(timeout=common.CALL_LIMIT_S)
        rows = [line for line in out.splitlines() if line.startswith('"PUBLISH')]
        if p.returncode != 0 or not rows:
            sys.exit(f"[bench] redis-benchmark failed: {out[-500:]}")
        rate += float(rows[-1].split(",")[1].strip('"'))
    return rate


def throughput(readers, ports, pids, total):
    """One run of `total` PUBLISHes: (publishes/s, deliveries/s, server CPU-us per publish).
    redis-benchmark may send a pipeline's worth more than asked; every subscriber must still get
    exactly every message that was published."""
    readers.reset()
    per_sub = total * len(FRAME)
    cpu0 = common.cpu_total(pids)
    t0 = time.perf_counter()
    rate = bench_publish(ports, total)
    end = time.time() + 60
    while min(readers.bytes.values()) < per_sub:
        if readers.error:
            sys.exit(f"[bench] {readers.error}")
        if time.time() > end:
            sys.exit(f"[bench] subscribers got {readers.total()} of {per_sub * len(readers.bytes)} bytes")
        time.sleep(0.01)
    # The extra pipeline (if any) settles.
    time.sleep(0.2)
    delivered_in = readers.last - t0
    cpu = common.cpu_total(pids) - cpu0
    got = set(readers.bytes.values())
    if len(got) != 1 or next(iter(got)) % len(FRAME):
        sys.exit(f"[bench] subscribers got different amounts: {sorted(got)[:5]}")
    published = next(iter(got)) // len(FRAME)
    return rate, published * len(readers.bytes) / delivered_in, cpu / published * 1e6


def publish_timed(ports, n, rate):
    """Publishes `t:<send time>` messages at `rate` per second (a process of its own, so the
    readers' thread never holds it up)."""
    pubs = [socket.create_connection(("127.0.0.1", p)) for p in ports]
    for s in pubs:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    start = time.perf_counter()
    for i in range(n):
        due = start + i / rate
        while time.perf_counter() < due:
            time.sleep(0.0001)
        s = pubs[i % len(pubs)]
        s.sendall(common.resp_encode(b"PUBLISH", CHANNEL, b"t:%d" % time.monotonic_ns()))
        reply = s.recv(64)
        if not reply.startswith(b":"):
            sys.exit(f"[bench] PUBLISH answered {reply!r}")


def latency(readers, ports, seconds, rate):
    """Probe latencies of messages published at `rate` per second for `seconds`."""
    readers.reset()
    readers.batching = False
    n = int(seconds * rate)
    publisher = multiprocessing.Process(target=publish_timed, args=(ports, n, rate))
    publisher.start()
    publisher.join(timeout=seconds * 3 + 30)
    if publisher.exitcode != 0:
        sys.exit(f"[bench] the timed publisher failed ({publisher.exitcode})")
    end = time.time() + 10
    want = n * PROBES_PER_ROUTER * 2
    while len(readers.latencies) < want and time.time() < end:
        time.sleep(0.01)
    readers.batching = True
    lat = sorted(readers.latencies)
    if len(lat) < want:
        sys.exit(f"[bench] probes got {len(lat)} of {want} timed messages")
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
    return pick(0.5), pick(0.99), lat[-1]


def start_shoal(node_bin, router_bin):
    nodes = []
    for i in range(3):
        port = common.free_port()
        nodes.append(common.start(f"node{i}", [str(node_bin), "--listen", f"127.0.0.1:{port}", "--threads", "1"],
                                  cpus=common.SERVER_CPUS))
        common.wait_port(port, ping=False)
        nodes[-1].port = port
    addrs = ",".join(f"127.0.0.1:{n.port}" for n in nodes)
    routers = []
    for r in range(2):
        resp, http = common.free_port(), common.free_port()
        p = common.start(f"router{r}", [str(router_bin), "--nodes", addrs, "--threads", "1", "--resp",
                                        f"127.0.0.1:{resp}", "--http", f"127.0.0.1:{http}"], cpus=common.SERVER_CPUS)
        common.wait_port(resp)
        p.port = resp
        routers.append(p)
    return nodes, routers


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-seconds", type=float, default=10)
    ap.add_argument("--latency-rate", type=int, default=1000)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    common.need("redis-benchmark", "run .ci/tools/install apt")
    node_bin, router_bin = common.binaries()
    nodes, routers = start_shoal(node_bin, router_bin)
    redis_port = common.free_port()
    redis = common.redis_server(redis_port, cpus=common.SERVER_CPUS)
    if common.CLIENT_CPUS is not None:
        os.sched_setaffinity(0, {int(common.CLIENT_CPUS)})
    shoal_ports = [r.port for r in routers]
    targets = {
        "shoal": (shoal_ports, [p.pid for p in nodes + routers]),
        "redis": ([redis_port, redis_port], [redis.pid]),
    }
    readers = {}
    for name, (ports, _) in targets.items():
        socks, probes = [], []
        for i in range(SUBSCRIBERS):
            s = subscribe(ports[i % 2])
            socks.append(s)
            if i < 2 * PROBES_PER_ROUTER:
                probes.append(s)
        wait_subscribers(ports[0], SUBSCRIBERS)
        readers[name] = Readers(socks, probes)
    load_before = common.load_average()
    results = {}
    progress = common.Progress(args.rounds * len(targets) + len(targets))
    for r in range(args.rounds):
        for name, (ports, pids) in targets.items():
            progress.step(f"round {r + 1}: {name}, {args.messages} PUBLISHes to {SUBSCRIBERS} subscribers")
            throughput(readers[name], ports, pids, 2000)  # warm up
            results.setdefault(name, []).append(throughput(readers[name], ports, pids, args.messages))
    lat = {}
    for name, (ports, _) in targets.items():
        progress.step(f"latency: {name}, {args.latency_rate}/s for {args.latency_seconds} s")
        lat[name] = latency(readers[name], ports, args.latency_seconds, args.latency_rate)
    load_after = common.load_average()
    for r in readers.values():
        r.close()
    med = {k: tuple(statistics.median(x[i] for x in v) for i in range(3)) for k, v in results.items()}
    (sp, sd, sc), (rp, rd, rc) = med["shoal"], med["redis"]
    lines = [
        f"Machine: {common.machine()}; 1-minute load average {load_before:.1f} at the start, {load_after:.1f} at "
        f"the end. Command: `python3 loadtest/bench/pubsub.py --messages {args.messages} --rounds {args.rounds} "
        f"--latency-seconds {args.latency_seconds:g} --latency-rate {args.latency_rate}"
        f"{' --write-docs' if args.write_docs else ''}` (`loadtest/compare --only pubsub`). Shoal: 3 `shoal-node` "
        f"and 2 `shoal-router` processes (`--threads 1` each), 50 subscribers on each router; redis-server: 100 "
        f"subscribers. All servers pinned to CPU {common.SERVER_CPUS}, redis-benchmark and the subscribers "
        f"(this script) to CPU {common.CLIENT_CPUS}. One channel, 32-byte messages; throughput is the median of "
        f"{args.rounds} interleaved rounds of {args.messages:,} PUBLISHes (two `redis-benchmark -c {CLIENTS} -P "
        f"{PIPELINE}`, one per router), every message checked to reach every subscriber.",
        "",
        "| | Shoal | redis-server | Shoal/redis |",
        "|---|---|---|---|",
        f"| PUBLISH/s (each to 100 subscribers) | {sp:,.0f} | {rp:,.0f} | {sp / rp:.2f}x |",
        f"| messages delivered/s, first publish to last delivery | {sd:,.0f} | {rd:,.0f} | {sd / rd:.2f}x |",
        f"| server CPU-us per PUBLISH (all processes) | {sc:.1f} | {rc:.1f} | {sc / rc:.2f}x |",
        f"| PUBLISH/s one saturated core would serve (1 s / CPU per PUBLISH) | {1e6 / sc:,.0f} | {1e6 / rc:,.0f} | "
        f"{rc / sc:.2f}x |",
        f"| publish-to-receive p50 at {args.latency_rate}/s (ms) | {lat['shoal'][0]:.2f} | {lat['redis'][0]:.2f} | |",
        f"| publish-to-receive p99 (ms) | {lat['shoal'][1]:.2f} | {lat['redis'][1]:.2f} | |",
        f"| publish-to-receive max (ms) | {lat['shoal'][2]:.2f} | {lat['redis'][2]:.2f} | |",
    ]
    body = "\n".join(lines)
    print(body)
    if args.write_docs:
        common.write_docs("pubsub", body)


if __name__ == "__main__":
    main()
