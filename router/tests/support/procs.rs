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
        let log = dir.join(format!("{name}.log"));
        let child = super::shoal("shoal-router")
            .args(["--resp", &resp.to_string(), "--http", &http.to_string()])
            .args(args)
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
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
    /// Starts `shoal-node --listen 127.0.0.1:<free port>` with `args`; returns once it accepts
    /// TCP connections (at most 30 s).
    pub async fn start(dir: &Path, name: &str, args: &[&str]) -> NodeProc {
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
        let addr = addr.to_string();
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        let child = super::shoal("shoal-node")
            .args(["--listen", &addr])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        let start = Instant::now();
        while tokio::net::TcpStream::connect(&addr).await.is_err() {
            assert!(start.elapsed() < Duration::from_secs(30), "node {name} did not start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        NodeProc { child, addr }
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
