//! A fault-injection harness for tests of real processes (issue 38): every process runs in a
//! network namespace of its own, on one bridge, at an address of its own, so faults can be put
//! between any two of them (a primary and its replica, a primary and the failover writer, a
//! router and a node) without touching the others and without any change to Shoal's code: the
//! addresses in the topology file are simply the namespaces' addresses.
//!
//! Why namespaces and not a TCP proxy (toxiproxy): a proxy per directed pair needs every client
//! to dial a different address for the same node, and the topology file gives all of them the
//! same one; namespaces cut the pair itself. Faults:
//!
//! - partitions, one-way ([`Net::cut`]: `from`'s packets to `to` are dropped, a blackhole route in
//!   `from`'s namespace, so TCP to and from `to` stalls as on a lossy link) and two-way
//!   ([`Net::partition`], [`Net::isolate`]), healed by [`Net::heal`] / [`Net::heal_all`];
//! - resets ([`Net::reset`]: every TCP connection between two hosts is destroyed, `ss -K`, so
//!   both ends see a reset at once);
//! - bandwidth limits ([`Net::throttle`]: a token bucket on the host's egress);
//! - packet loss ([`Net::loss`]: nftables drops a share of the host's egress at random; `tc
//!   netem` would do, but this kernel is built without `sch_netem`, so added latency is a process
//!   fault below, and loss brings retransmission delays of its own);
//! - silent closes ([`Net::silent_closes`]: the host's FIN and RST packets are dropped, so a
//!   process that dies or closes leaves its peers' connections open until they time out);
//! - process faults on [`Host`] processes: SIGKILL, SIGSTOP/SIGCONT, restart, lag ([`Host::lag`]:
//!   stopped and continued in 25 ms pulses, so everything it answers or sends is late by up to
//!   that, jittered), a clock jump ([`Clock`]: libfaketime, preloaded, reads the offset of the
//!   process's wall clock from a file; its monotonic clock runs on), and a full disk
//!   ([`DataDisk`]: the data directory is a small tmpfs, filled on demand).
//!
//! Needs root (CI runs as root), iproute2 (`ip`, `tc`, `ss`), nftables (`nft`) and, for clock
//! jumps, libfaketime (Debian's `faketime`; without it clock jumps are left out). Everything is created under a
//! tag made of the test process's id and torn down on drop, so two runs never meet.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The hosts of one test, each a namespace with one address on a private bridge; the test process
/// itself is host 0 (`"test"`), the bridge's own address, in the root namespace.
pub struct Net {
    tag: String,
    subnet: [u8; 3],
    bridge: String,
    hosts: Vec<String>,
}

fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0]).args(&args[1..]).output().map_err(|e| format!("{args:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("{args:?}: {}", String::from_utf8_lossy(&out.stderr)))
    }
}

fn must(args: &[&str]) -> String {
    run(args).unwrap_or_else(|e| panic!("fault harness: {e}"))
}

impl Net {
    /// Creates the bridge and one namespace per name (plus `"test"`, this process). Panics with
    /// the reason if it cannot (not root, no iproute2).
    pub fn new(names: &[&str]) -> Net {
        // A tag and a /24 per Net (several tests of one process may run side by side), away from
        // 10.0.x; a tag is short enough for interface names (15 bytes).
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let (pid, k) = (std::process::id(), NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let n = pid.wrapping_add(k.wrapping_mul(7919));
        let subnet = [10, (n / 256 % 200 + 50) as u8, (n % 256) as u8];
        let tag = format!("sf{pid:x}{}", k % 10);
        sweep();
        sweep_disks();
        let net = Net { bridge: format!("{tag}br"), tag, subnet, hosts: vec!["test".into()] };
        let mut net = net;
        must(&["ip", "link", "add", &net.bridge, "type", "bridge"]);
        must(&["ip", "addr", "add", &format!("{}/24", net.ip("test")), "dev", &net.bridge]);
        must(&["ip", "link", "set", &net.bridge, "up"]);
        for name in names {
            net.add(name);
        }
        net
    }

    fn add(&mut self, name: &str) {
        assert!(self.hosts.len() < 250, "at most 250 hosts");
        self.hosts.push(name.to_string());
        let i = self.hosts.len() - 1;
        let (ns, outer, inner) = (self.ns(name), format!("{}v{i}", self.tag), format!("{}p{i}", self.tag));
        must(&["ip", "netns", "add", &ns]);
        must(&["ip", "link", "add", &outer, "type", "veth", "peer", "name", &inner]);
        must(&["ip", "link", "set", &inner, "netns", &ns]);
        must(&["ip", "link", "set", &outer, "master", &self.bridge, "up"]);
        must(&["ip", "-n", &ns, "link", "set", &inner, "name", "eth0"]);
        must(&["ip", "-n", &ns, "addr", "add", &format!("{}/24", self.ip(name)), "dev", "eth0"]);
        must(&["ip", "-n", &ns, "link", "set", "eth0", "up"]);
        must(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
    }

    fn index(&self, name: &str) -> usize {
        self.hosts.iter().position(|h| h == name).unwrap_or_else(|| panic!("no host {name}"))
    }

    fn ns(&self, name: &str) -> String {
        format!("{}-{name}", self.tag)
    }

    /// The host's address.
    pub fn ip(&self, name: &str) -> Ipv4Addr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, 1 + self.index(name) as u8)
    }

    /// `ip netns exec <host's namespace> program`: run it on that host (iproute2 execs the program
    /// itself, so the child's pid is the program's, for signals).
    pub fn command(&self, name: &str, program: &Path) -> Command {
        assert_ne!(name, "test", "the test host is this process");
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(name)]).arg(program);
        c
    }

    /// `ip` in the host's namespace (the root one for `"test"`).
    fn ip_in(&self, name: &str, args: &[&str]) -> Result<String, String> {
        let mut all: Vec<&str> = vec!["ip"];
        let ns = self.ns(name);
        if name != "test" {
            all.extend(["-n", &ns]);
        }
        all.extend(args);
        run(&all)
    }

    /// One-way partition: packets `from` sends to `to` are dropped (TCP in both directions
    /// stalls, since `from`'s acks are dropped too, but `to`'s packets still arrive).
    pub fn cut(&self, from: &str, to: &str) {
        let dst = format!("{}/32", self.ip(to));
        // Already cut is fine (a schedule may cut a pair twice).
        if let Err(e) = self.ip_in(from, &["route", "add", "blackhole", &dst]) {
            assert!(e.contains("File exists"), "fault harness: {e}");
        }
    }

    /// Heals a one-way cut (nothing if there is none).
    pub fn heal(&self, from: &str, to: &str) {
        let _ = self.ip_in(from, &["route", "del", "blackhole", &format!("{}/32", self.ip(to))]);
    }

    /// Two-way partition between `a` and `b`.
    pub fn partition(&self, a: &str, b: &str) {
        self.cut(a, b);
        self.cut(b, a);
    }

    /// Two-way partitions between `a` and each of `others`.
    pub fn isolate(&self, a: &str, others: &[&str]) {
        others.iter().for_each(|b| self.partition(a, b));
    }

    /// Heals every cut between every pair.
    pub fn heal_all(&self) {
        for a in &self.hosts {
            for b in &self.hosts {
                if a != b {
                    self.heal(a, b);
                }
            }
        }
    }

    /// Destroys every TCP connection between `a` and `b` (both ends get a reset); they may
    /// reconnect at once.
    pub fn reset(&self, a: &str, b: &str) {
        for (x, y) in [(a, b), (b, a)] {
            let dst = self.ip(y).to_string();
            let mut args: Vec<String> = vec![];
            if x != "test" {
                args.extend(["ip".into(), "netns".into(), "exec".into(), self.ns(x)]);
            }
            args.extend(["ss".into(), "-K".into(), "-t".into(), "dst".into(), dst]);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            // `ss -K` reports "Invalid argument" for sockets it lists but cannot destroy (ones
            // in TIME_WAIT); the established ones are gone all the same.
            let _ = run(&args);
        }
    }

    /// Whether `from` opens a TCP connection to `to`'s `port` within a second (bash's
    /// `/dev/tcp`, so nothing beyond bash and coreutils runs in the namespace).
    pub fn connects(&self, from: &str, to: &str, port: u16) -> bool {
        let script = format!("exec 3<>/dev/tcp/{}/{port}", self.ip(to));
        let mut c = if from == "test" {
            Command::new("timeout")
        } else {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &self.ns(from), "timeout"]);
            c
        };
        c.args(["1", "bash", "-c", &script]).stderr(Stdio::null());
        c.status().is_ok_and(|s| s.success())
    }

    /// Drops `percent`% of the packets `name` sends, at random (nftables in its namespace); `None`
    /// lifts it.
    pub fn loss(&self, name: &str, percent: Option<u32>) {
        self.nft_rule(name, "chaosloss", percent.map(|p| format!("numgen random mod 100 < {p} drop")));
    }

    /// Drops every FIN and RST `name` sends (`on`), or lifts that: its closes go unseen.
    pub fn silent_closes(&self, name: &str, on: bool) {
        self.nft_rule(name, "chaosclose", on.then(|| "tcp flags & (fin | rst) != 0 drop".to_string()));
    }

    /// Puts `rule` on the egress of `name`'s namespace in its own table `table` (replacing what
    /// the table held), or removes the table.
    fn nft_rule(&self, name: &str, table: &str, rule: Option<String>) {
        let ns = self.ns(name);
        let _ = run(&["ip", "netns", "exec", &ns, "nft", "delete", "table", "inet", table]);
        if let Some(rule) = rule {
            let script = format!(
                "add table inet {table}\nadd chain inet {table} out {{ type filter hook output priority 0; }}\nadd rule inet {table} out {rule}\n"
            );
            let path = std::env::temp_dir().join(format!("{}-{name}-{table}.nft", self.tag));
            std::fs::write(&path, script).unwrap();
            must(&["ip", "netns", "exec", &ns, "nft", "-f", path.to_str().unwrap()]);
            let _ = std::fs::remove_file(path);
        }
    }

    /// Limits what `name` sends to `kbit` kbit/s (token bucket, 400 ms of queue); `None` lifts it.
    pub fn throttle(&self, name: &str, kbit: Option<u32>) {
        let ns = self.ns(name);
        let _ = run(&["ip", "netns", "exec", &ns, "tc", "qdisc", "del", "dev", "eth0", "root"]);
        if let Some(kbit) = kbit {
            let rate = format!("{kbit}kbit");
            must(
                &["ip", "netns", "exec", &ns, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf"]
                    .into_iter()
                    .chain(["rate", &rate, "burst", "32kbit", "latency", "400ms"])
                    .collect::<Vec<_>>(),
            );
        }
    }
}

/// Removes what test processes that died without dropping their `Net` (SIGKILL, a timeout) left:
/// namespaces and bridges whose tag names a process that no longer exists.
fn sweep() {
    // A tag is "sf", the pid in hex, and one digit; anything else was not made by `Net`.
    let dead = |tag: &str| {
        let hex = tag.strip_prefix("sf").unwrap_or("");
        hex.len() >= 2
            && hex.chars().all(|c| c.is_ascii_hexdigit())
            && u32::from_str_radix(&hex[..hex.len() - 1], 16)
                .is_ok_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
    };
    for line in run(&["ip", "netns", "list"]).unwrap_or_default().lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        if dead(name.split('-').next().unwrap_or("")) {
            let _ = run(&["ip", "netns", "del", name]);
        }
    }
    for line in run(&["ip", "-o", "link", "show", "type", "bridge"]).unwrap_or_default().lines() {
        let name = line.split(": ").nth(1).unwrap_or("");
        if name.strip_suffix("br").is_some_and(dead) {
            let _ = run(&["ip", "link", "del", name]);
        }
    }
}

/// Unmounts the data disks ([`DataDisk`]) a chaos test killed before its drops left mounted:
/// tmpfs mounts under `shoal-chaos-<seed>-<pid>/` whose test process no longer exists.
fn sweep_disks() {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    for point in mounts.lines().filter_map(|l| l.split_whitespace().nth(1)) {
        let Some(dir) = point.split('/').find(|p| p.starts_with("shoal-chaos-")) else { continue };
        let pid = dir.rsplit('-').next().and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = run(&["umount", "-l", point]);
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the veth, and with it the bridge's end.
        for name in self.hosts.iter().skip(1) {
            let _ = run(&["ip", "netns", "del", &self.ns(name)]);
        }
        let _ = run(&["ip", "link", "del", &self.bridge]);
    }
}

/// A process on a host, restartable, with process faults. Killed when dropped.
pub struct Host {
    pub name: String,
    pub child: Option<Child>,
    starts: usize,
}

impl Host {
    pub fn new(name: &str) -> Host {
        Host { name: name.to_string(), child: None, starts: 0 }
    }

    /// Starts `command` (from [`Net::command`]) with its stderr in `<dir>/<name>-<n>.log`.
    pub fn start(&mut self, dir: &Path, mut command: Command) {
        assert!(self.child.is_none(), "{} is running", self.name);
        let log = std::fs::File::create(dir.join(format!("{}-{}.log", self.name, self.starts))).unwrap();
        self.starts += 1;
        self.child = Some(command.stdout(Stdio::null()).stderr(Stdio::from(log)).spawn().unwrap());
    }

    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().unwrap_or_else(|| panic!("{} is not running", self.name)).id();
        assert!(Command::new("kill").args([sig, &pid.to_string()]).status().unwrap().success(), "kill {sig}");
    }

    /// SIGKILL, and reap it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP: frozen (a long GC pause, a stopped VM).
    pub fn stop(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`Host::stop`].
    pub fn cont(&self) {
        self.signal("-CONT");
    }

    /// Lag for `hold`: stopped and continued in 25 ms pulses (a process starved of CPU, a slow
    /// disk's stalls): every answer and packet it sends is late by up to 25 ms, jittered.
    pub async fn lag(&self, hold: std::time::Duration) {
        let start = std::time::Instant::now();
        while start.elapsed() < hold {
            self.stop();
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
            self.cont();
            tokio::time::sleep(std::time::Duration::from_millis(15)).await;
        }
    }
}

/// A process's wall clock, shifted on demand: libfaketime (Debian's `faketime`) preloaded into it
/// reads the offset from a file, at most a second old; the monotonic clock is left alone (timers
/// run on), as when NTP steps a machine's clock.
pub struct Clock {
    file: std::path::PathBuf,
}

/// Where Debian's libfaketime lives.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

impl Clock {
    /// A clock for the process `command` starts, its offset in `file` (0 to begin with); `None`
    /// when libfaketime is not installed.
    pub fn attach(command: &mut Command, file: &Path) -> Option<Clock> {
        if !Path::new(LIBFAKETIME).exists() {
            return None;
        }
        let clock = Clock { file: file.to_path_buf() };
        clock.shift(0);
        command
            .env("LD_PRELOAD", LIBFAKETIME)
            .env("FAKETIME_TIMESTAMP_FILE", file)
            .env("FAKETIME_CACHE_DURATION", "1")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        Some(clock)
    }

    /// Shifts the process's wall clock to `secs` seconds from the true time (negative: back).
    pub fn shift(&self, secs: i64) {
        std::fs::write(&self.file, format!("{secs:+}s\n")).unwrap();
    }
}

/// A data directory on a tmpfs of its own (`size`), so a test can fill the disk under a process.
pub struct DataDisk {
    pub path: std::path::PathBuf,
}

impl DataDisk {
    pub fn mount(path: &Path, size_mb: u32) -> DataDisk {
        std::fs::create_dir_all(path).unwrap();
        let size = format!("size={size_mb}m");
        must(&["mount", "-t", "tmpfs", "-o", &size, "tmpfs", path.to_str().unwrap()]);
        DataDisk { path: path.to_path_buf() }
    }

    /// Fills the disk (`true`: a file takes every free byte, so any write fails with ENOSPC) or
    /// frees it again.
    pub fn fill(&self, full: bool) {
        let filler = self.path.join(".chaos-filler");
        if full {
            let _ = Command::new("dd")
                .args(["if=/dev/zero", &format!("of={}", filler.display()), "bs=1M"])
                .stderr(Stdio::null())
                .status();
        } else {
            let _ = std::fs::remove_file(&filler);
        }
    }
}

impl Drop for DataDisk {
    fn drop(&mut self) {
        let _ = run(&["umount", "-l", self.path.to_str().unwrap()]);
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // A stopped process must run again to die of SIGKILL promptly on every kernel.
            let _ = Command::new("kill").args(["-CONT", &child.id().to_string()]).status();
        }
        self.kill();
    }
}
