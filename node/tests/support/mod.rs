//! Helpers for tests that run real `shoal-node` processes.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_wire::proto::node_client::NodeClient;
use shoal_wire::proto::{Batch, Get, Op, Set, op::Kind, reply};
use tonic::transport::Channel;

/// A child process killed when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    /// SIGTERM, then waits for the process to exit (a node writes its final snapshot first).
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.0.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success());
        let status = self.0.wait().unwrap();
        std::mem::forget(self);
        status
    }
}

pub fn node_bin() -> &'static str {
    env!("CARGO_BIN_EXE_shoal-node")
}

/// A free loopback TCP port (bound and released; fine for tests on one machine).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts `shoal-node` with `args`, its stderr (the log) going to `log`. Without a cluster
/// secret (`--no-auth`): these tests are about other things, and `tests/auth.rs` about that.
pub fn start_node(args: &[&str], log: &Path) -> Proc {
    let log = std::fs::File::create(log).unwrap();
    let mut c = Command::new(node_bin());
    c.args(args).arg("--no-auth").env_remove("SHOAL_CLUSTER_SECRET");
    Proc(c.stdout(Stdio::null()).stderr(log).spawn().unwrap())
}

/// Connects to the node at `addr`, retrying for up to 20 s while it starts.
pub async fn connect(addr: &str) -> NodeClient<Channel> {
    let started = Instant::now();
    loop {
        match NodeClient::connect(format!("http://{addr}")).await {
            Ok(c) => return c,
            Err(e) => {
                assert!(started.elapsed() < Duration::from_secs(20), "node at {addr} did not start: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Runs one op in its own batch at `version` and returns its reply (waiting past the empty
/// keep-alive messages a node sends while its gate is held).
pub async fn run(client: &mut NodeClient<Channel>, version: u64, op: Kind) -> reply::Kind {
    let batch =
        Batch { id: 1, ops: vec![Op { kind: Some(op), ..Default::default() }], topology_version: version };
    let mut replies = client.execute(tokio_stream::iter([batch])).await.unwrap().into_inner();
    loop {
        let message = replies.message().await.unwrap().expect("a reply before the stream ends");
        if let Some(r) = message.replies.into_iter().next() {
            return r.kind.unwrap();
        }
    }
}

pub async fn get(client: &mut NodeClient<Channel>, version: u64, key: &str) -> reply::Kind {
    run(client, version, Kind::Get(Get { key: Bytes::from(key.to_string()), ..Default::default() })).await
}

pub async fn set(client: &mut NodeClient<Channel>, version: u64, key: &str, value: &str) -> reply::Kind {
    let set = Set {
        key: Bytes::from(key.to_string()),
        value: Bytes::from(value.to_string()),
        ..Default::default()
    };
    run(client, version, Kind::Set(set)).await
}

/// `GET path` over plain HTTP/1.1, the body.
pub async fn http_get(addr: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    text.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or(text)
}

/// The value of an unlabelled metric in a Prometheus text page.
pub fn metric(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {name} in\n{page}"))
        .trim()
        .parse()
        .unwrap()
}
