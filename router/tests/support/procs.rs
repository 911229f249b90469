//! Router and node *processes* on loopback, for tests of behaviour that belongs to a whole process
//! (its listeners, its socket file, its memory budget, its exit): start, wait until serving,
//! signal, wait for exit, all bounded.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::{Raw, free_port};

/// A `shoal-router` process with RESP and HTTP on free loopback ports. Killed when dropped.
pub struct RouterProc {
    pub child: Child,
    pub resp: SocketAddr,
    pub http: SocketAddr,
    /// Its stderr (logs), for assertions and for failure messages.
    pub log: PathBuf,
}

impl RouterProc {
    /// Starts `shoal-router` with `args` (plus `--resp`/`--http` on free ports) and returns at
    /// once; see [`RouterProc::wait_serving`].
    pub fn spawn(dir: &Path, name: &str, args: &[&str]) -> RouterProc {
        let (resp, http) = (free_port(), free_port());
        let resp: SocketAddr = format!("127.0.0.1:{resp}").parse().unwrap();
        let http: SocketAddr = format!("127.0.0.1:{http}").parse().unwrap();
        RouterProc::spawn_at(dir, name, resp, http, args, false)
    }

    /// SIGKILLs it and starts it again on the same ports (its log goes on in the same file), as
    /// a restarted pod behind the same address; returns once it serves. A port another test
    /// took meanwhile is asked for again, 200 ms apart, three times at most.
    pub async fn restart(&mut self, dir: &Path, name: &str, args: &[&str]) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for attempt in 1..=3 {
            let mut again = RouterProc::spawn_at(dir, name, self.resp, self.http, args, true);
            match again.serving().await {
                Ok(()) => {
                    std::mem::swap(self, &mut again);
                    return;
                }
                Err(logs) if attempt < 3 && logs.contains("Address already in use") => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(logs) => panic!("{logs}"),
            }
        }
    }

    /// `append`: its log goes on after what the file holds (else the file starts empty).
    fn spawn_at(
        dir: &Path,
        name: &str,
        resp: SocketAddr,
        http: SocketAddr,
        args: &[&str],
        append: bool,
    ) -> RouterProc {
        let log = dir.join(format!("{name}.log"));
        let file =
            std::fs::OpenOptions::new().create(true).write(true).append(append).truncate(!append).open(&log);
        let child = super::shoal("shoal-router")
            .args(["--resp", &resp.to_string(), "--http", &http.to_string()])
            .args(args)
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::from(file.unwrap()))
            .spawn()
            .unwrap();
        RouterProc { child, resp, http, log }
    }

    /// Starts it and waits (at most 30 s) until its HTTP port answers `/healthz`. A free port
    /// taken by another test between `free_port` and the router's bind (CI met it) is drawn
    /// again, twice at most.
    pub async fn start(dir: &Path, name: &str, args: &[&str]) -> RouterProc {
        for _ in 0..2 {
            let mut r = RouterProc::spawn(dir, name, args);
            match r.serving().await {
                Ok(()) => return r,
                Err(logs) if logs.contains("cannot listen on") && logs.contains("Address already in use") => {
                }
                Err(logs) => panic!("{logs}"),
            }
        }
        let mut r = RouterProc::spawn(dir, name, args);
        r.wait_serving().await;
        r
    }

    pub async fn wait_serving(&mut self) {
        if let Err(logs) = self.serving().await {
            panic!("{logs}");
        }
    }

    /// Waits until serving; `Err` (why, with its logs) if it exited first.
    async fn serving(&mut self) -> Result<(), String> {
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("router exited early ({status}):\n{}", self.logs()));
            }
            // The HTTP listener may bind after the RESP one (CI once met its port still closed):
            // asked only once it accepts connections.
            if tokio::net::TcpStream::connect(self.resp).await.is_ok()
                && tokio::net::TcpStream::connect(self.http).await.is_ok()
                && super::http_get(self.http, "/healthz").await.contains("200 OK")
            {
                return Ok(());
            }
            assert!(start.elapsed() < Duration::from_secs(30), "router did not start:\n{}", self.logs());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn raw(&self) -> Raw {
        Raw::connect(self.resp).await
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill").args([sig, &self.child.id().to_string()]).status().unwrap().success();
        assert!(ok, "kill {sig}");
    }

    /// Waits at most `limit` for the process to exit.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        wait_exit(&mut self.child, limit).await
    }
}

impl Drop for RouterProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `shoal-node` process on a free loopback port. Killed when dropped.
pub struct NodeProc {
    pub child: Child,
    pub addr: String,
}

impl NodeProc {
    /// Starts `shoal-node --listen 127.0.0.1:<free port>` with `args`; returns once it serves
    /// there (at most 30 s; see [`NodeProc::start_at`]).
    /// A free port taken by another test between `free_port` and the node's bind is drawn
    /// again, twice at most (as for [`RouterProc::start`]).
    pub async fn start(dir: &Path, name: &str, args: &[&str]) -> NodeProc {
        for _ in 0..2 {
            match NodeProc::serving_at(dir, name, &format!("127.0.0.1:{}", free_port()), args).await {
                Ok(node) => return node,
                Err(logs) if logs.contains("cannot listen on") && logs.contains("Address already in use") => {
                }
                Err(logs) => panic!("{logs}"),
            }
        }
        NodeProc::start_at(dir, name, &format!("127.0.0.1:{}", free_port()), args).await
    }

    /// `n` plain nodes (`node0`, `node1`, ...) and their addresses as a `--nodes` list.
    pub async fn start_many(dir: &Path, n: usize) -> (Vec<NodeProc>, String) {
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            nodes.push(NodeProc::start(dir, &format!("node{i}"), &[]).await);
        }
        let list = nodes.iter().map(|n| n.addr.clone()).collect::<Vec<_>>().join(",");
        (nodes, list)
    }

    /// Like [`NodeProc::start`], on a given address (a node restarting where it was).
    pub async fn start_at(dir: &Path, name: &str, addr: &str, args: &[&str]) -> NodeProc {
        NodeProc::serving_at(dir, name, addr, args).await.unwrap_or_else(|logs| panic!("{logs}"))
    }

    /// Starts it and waits (at most 30 s) until it serves on `addr`; `Err` (why, with its logs)
    /// if it exited first. Serving means its own log says so: a port that accepts connections may
    /// be another process's (the race `start` redraws for), this node having failed to bind it.
    async fn serving_at(dir: &Path, name: &str, addr: &str, args: &[&str]) -> Result<NodeProc, String> {
        let addr = addr.to_string();
        let log = dir.join(format!("{name}.log"));
        let child = super::shoal("shoal-node")
            .args(["--listen", &addr])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .unwrap();
        let mut node = NodeProc { child, addr };
        // Without RUST_LOG the node logs at info and says when it serves; with it, that line may
        // be filtered out, and an accepting port is taken as the sign.
        let says_serving =
            |logs: &str| std::env::var_os("RUST_LOG").is_some() || logs.contains("node serving gRPC");
        let start = Instant::now();
        loop {
            let logs = || std::fs::read_to_string(&log).unwrap_or_default();
            if let Ok(Some(status)) = node.child.try_wait() {
                return Err(format!("node {name} exited early ({status}):\n{}", logs()));
            }
            if tokio::net::TcpStream::connect(&node.addr).await.is_ok() && says_serving(&logs()) {
                return Ok(node);
            }
            if start.elapsed() > Duration::from_secs(30) {
                node.kill();
                return Err(format!("node {name} did not start within 30 s:\n{}", logs()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL, and reap it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits at most `limit` for `child` to exit; its status, or `None` if it is still running.
pub async fn wait_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if start.elapsed() >= limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The body of an HTTP response (after the blank line).
pub fn body(response: &str) -> &str {
    response.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

/// The status code of an HTTP response.
pub fn status(response: &str) -> u16 {
    response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}
