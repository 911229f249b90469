"""Process and measurement helpers shared by the benchmark scripts (standard library only).

Everything listens on 127.0.0.1 ports picked at run time; every process started here is stopped
when the script exits, even on Ctrl-C.
"""
import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORK = Path(tempfile.mkdtemp(prefix="shoal-bench-"))
# The report the scripts' --write-docs updates. loadtest/compare --quick points this at a scratch
# copy, so a quick run never puts its (meaningless) numbers into docs/benchmarks.md.
# Longest any single step (a load, a benchmark burst, a snapshot) may take before the run is
# abandoned: every wait in these scripts is bounded.
CALL_LIMIT_S = 600
DOCS = Path(os.environ.get("SHOAL_BENCH_DOCS") or REPO / "docs/benchmarks.md")
_procs = []
# Nodes require a cluster secret; every Shoal process these scripts start (all inherit this
# environment) shares this one, unless the caller set its own.
os.environ.setdefault("SHOAL_CLUSTER_SECRET", "shoal-bench-cluster-secret")


def resp_encode(*args):
    """A command as a RESP array of bulk strings (str arguments are UTF-8 encoded)."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def resp_read(f):
    """One reply from the file `f`; an error reply comes back as ("ERR", text)."""
    line = f.readline()
    if not line:
        raise ConnectionError("server closed the connection")
    kind, rest = line[:1], line[1:-2]
    if kind == b"-":
        return ("ERR", rest.decode(errors="replace"))
    if kind in (b"+", b":"):
        return rest.decode(errors="replace")
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2].decode(errors="replace")
    if kind in (b"*", b"%", b"~", b">"):
        n = int(rest)
        n = n * 2 if kind == b"%" else n
        return None if n < 0 else [resp_read(f) for _ in range(n)]
    raise ConnectionError(f"unexpected reply {line!r}")


def crc16(data):
    """Redis Cluster's key hash (CRC16/XMODEM)."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def node_of(key, nodes=3):
    """The node of `key` in an even split of the 16384 slots over `nodes` (no hashtags here)."""
    return (crc16(key) % 16384) * nodes // 16384


def key_pair(prefix, c, spread):
    """Two keys of client `c`: on one node (`{prefix:c}a`, `{prefix:c}b`: one hashtag) or, with
    `spread`, on two nodes of 3 (`prefix:c:a` and the first `prefix:c:b<k>` on another node)."""
    if not spread:
        return b"{%s:%d}a" % (prefix, c), b"{%s:%d}b" % (prefix, c)
    a = b"%s:%d:a" % (prefix, c)
    b = next(k for k in (b"%s:%d:b%d" % (prefix, c, i) for i in range(1000)) if node_of(k) != node_of(a))
    return a, b


def say(msg):
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def need(tool, hint):
    if shutil.which(tool) is None:
        sys.exit(f"[bench] {tool} not found: {hint}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=15.0, ping=True):
    """Waits until a RESP server on `port` answers PING (or just accepts, with ping=False)."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                if not ping:
                    return
                s.sendall(b"*1\r\n$4\r\nPING\r\n")  # multibulk: twemproxy has no inline commands
                if s.recv(64).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    sys.exit(f"[bench] nothing answered on 127.0.0.1:{port} within {timeout}s (logs in {WORK})")


# CPU pinning for side-by-side runs on a small machine: every server process under test on one core,
# the load generator on another, so each system gets the same one core and none competes with its
# own client (see the "Measuring side by side fairly" notes in the shared tooling doc). None when
# the machine has a single core (nothing to pin apart).
SERVER_CPUS = "1" if (os.cpu_count() or 1) >= 2 else None
CLIENT_CPUS = "0" if (os.cpu_count() or 1) >= 2 else None


def pinned(argv, cpus):
    """`argv` run under `taskset -c cpus` (taskset execs it, so the pid is the program's), or as is."""
    if cpus is None:
        return list(argv)
    need("taskset", "Debian: apt-get install util-linux")
    return ["taskset", "-c", str(cpus), *argv]


def start(name, argv, env=None, cpus=None):
    log = open(WORK / f"{name}.log", "wb")
    p = subprocess.Popen(pinned(argv, cpus), stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    _procs.append(p)
    return p


def start_shoal(router_bin, name, extra=(), unix_socket=None, cpus=None):
    """A router with 3 embedded nodes on free loopback ports; returns (process, resp_port, http_port)."""
    resp, http = free_port(), free_port()
    argv = [str(router_bin), "--embedded-nodes", "3", "--resp", f"127.0.0.1:{resp}", "--http", f"127.0.0.1:{http}"]
    if unix_socket:
        argv += ["--unix-socket", str(unix_socket)]
    p = start(name, argv + list(extra), cpus=cpus)
    wait_port(resp)
    return p, resp, http


def shoal_vs_redis():
    """Shoal (a router on one worker thread, its embedded nodes) and one redis-server, both pinned
    to the server CPUs: {name: (port, [pids])}."""
    _, router_bin = binaries()
    shoal, shoal_port, _ = start_shoal(router_bin, "shoal", extra=["--threads", "1"], cpus=SERVER_CPUS)
    redis_port = free_port()
    redis = redis_server(redis_port, cpus=SERVER_CPUS)
    return {"shoal": (shoal_port, [shoal.pid]), "redis": (redis_port, [redis.pid])}


def stop_all():
    for p in reversed(_procs):
        if p.poll() is None:
            p.terminate()
    for p in _procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
    _procs.clear()


atexit.register(stop_all)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))


def binaries():
    """Release builds of shoal-node and shoal-router (built here unless SHOAL_BIN_DIR is set), in the
    same target directory loadtest/compare and .ci use, so a script run on its own reuses their build."""
    if os.environ.get("SHOAL_BIN_DIR"):
        d = Path(os.environ["SHOAL_BIN_DIR"])
    else:
        cache = Path(os.environ.get("SHOAL_CACHE") or Path.home() / ".cache/shoal")
        target = Path(os.environ.get("CARGO_TARGET_DIR") or cache / "target")
        say(f"building release binaries (cargo build --release, in {target})")
        subprocess.run(["cargo", "build", "--release", "--bins", "-q"], cwd=REPO, check=True,
                       env={**os.environ, "CARGO_TARGET_DIR": str(target)})
        d = target / "release"
    return d / "shoal-node", d / "shoal-router"


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid):
    """User + system CPU seconds a process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick


def cpu_total(pids):
    """CPU seconds used so far by all of `pids` together."""
    return sum(cpu_seconds(pid) for pid in pids)


class Progress:
    """A progress line per step of a long run: `[7/96, 1m05s elapsed, ~14m left] label`."""

    def __init__(self, total):
        self.total, self.done, self.t0 = total, 0, time.time()

    def step(self, label):
        self.done += 1
        elapsed = time.time() - self.t0
        left = elapsed / (self.done - 1) * (self.total - self.done + 1) if self.done > 1 else None
        eta = f", ~{_mmss(left)} left" if left is not None else ""
        say(f"[{self.done}/{self.total}, {_mmss(elapsed)} elapsed{eta}] {label}")


def _mmss(secs):
    m, s = divmod(int(secs), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


def redis_server(port, extra=(), cpus=None, binary="redis-server"):
    need(binary, "run .ci/tools/install apt")
    p = start(f"redis-{port}", [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", *extra], cpus=cpus)
    wait_port(port)
    return p


def machine():
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({cpu}), Linux {os.uname().release}"


def load_average():
    """The 1-minute load average, for saying how busy the machine was during a run."""
    return os.getloadavg()[0]


def replace_section(path, name, body):
    """Replaces the text between `<!-- BEGIN name -->` and `<!-- END name -->` in `path`."""
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    text = path.read_text() if path.exists() else ""
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def write_docs(name, body):
    """Replaces section `name` of the report (DOCS) with `body` and says so."""
    replace_section(DOCS, name, body)
    say(f"updated {DOCS}")


def benchmark_rps(port, command, pipeline, requests, rand=1_000_000, clients=50):
    """redis-benchmark of one command (`__rand_int__` drawn below `rand`) on the load generator's
    core; its requests per second."""
    import csv
    import io
    out = subprocess.run(
        pinned(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(clients), "-r", str(rand),
                "-n", str(requests), "-P", str(pipeline), "--csv", *command], CLIENT_CPUS),
        capture_output=True, text=True, timeout=CALL_LIMIT_S, check=True).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    if not rows:
        sys.exit(f"[bench] redis-benchmark printed no row: {out!r}")
    return float(rows[0]["rps"])


def ratio_table(tests, pipelines, names, rates):
    """Markdown rows: per test and pipeline depth, each target's median rate, then each target's
    ratio to the first (redis-server). `rates[(test, p, name)]` lists the rounds' rates."""
    import statistics
    lines = [
        "| test | P | " + " | ".join(f"{n} req/s" for n in names) + " | "
        + " | ".join(f"{n} / redis" for n in names[1:]) + " |",
        "|---|---|" + "---|" * (2 * len(names) - 1),
    ]
    for test in tests:
        for p in pipelines:
            med = [statistics.median(rates[(test, p, n)]) for n in names]
            lines.append(f"| {test} | {p} | " + " | ".join(f"{m:,.0f}" for m in med) + " | "
                         + " | ".join(f"{m / med[0]:.2f}x" for m in med[1:]) + " |")
    return lines
