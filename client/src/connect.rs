//! Opening one connection: dial, handshake, authenticate, then hand the stream to
//! [`Conn::start`].

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use bytes::BytesMut;
use shoal_wire::fast::{self, Preamble};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use crate::conn::{Conn, ConnOptions, Protocol, read_at_least};
use crate::error::{Error, Result};
use crate::resp;

/// Where the router listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `host:port`.
    Tcp(String),
    /// A Unix socket path (the sidecar transport).
    Unix(PathBuf),
}

impl FromStr for Endpoint {
    type Err = Error;

    /// `unix:/path`, `unix:///path`, `/path` (Unix socket), or `tcp://host:port`, `host:port`.
    fn from_str(s: &str) -> Result<Endpoint> {
        if let Some(p) = s.strip_prefix("unix://").or_else(|| s.strip_prefix("unix:")) {
            return Ok(Endpoint::Unix(p.into()));
        }
        if s.starts_with('/') || s.starts_with('.') {
            return Ok(Endpoint::Unix(s.into()));
        }
        let addr = s.strip_prefix("tcp://").unwrap_or(s);
        if !addr.contains(':') {
            return Err(Error::Protocol(format!("endpoint {s:?} is neither host:port nor a socket path")));
        }
        Ok(Endpoint::Tcp(addr.to_owned()))
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "tcp://{a}"),
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// How to reach and talk to the router.
#[derive(Clone)]
pub struct Config {
    pub endpoint: Endpoint,
    pub protocol: Protocol,
    /// ACL user (`None`: `default`).
    pub user: Option<String>,
    /// Password (`None`: no AUTH/HELLO credentials).
    pub password: Option<String>,
    /// Connections in the pool.
    pub connections: usize,
    /// Most requests in flight on one connection; more callers wait for a slot.
    pub max_in_flight: usize,
    /// Deadline of one request, including any wait for a connection to come back.
    pub timeout: Duration,
    /// Deadline of one dial + handshake + authentication.
    pub connect_timeout: Duration,
    /// Reconnect backoff: the first wait, doubled on each failure up to `backoff_max`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// Largest reply (bulk string or fast-path body) accepted.
    pub max_reply: usize,
}

impl fmt::Debug for Config {
    // By hand, so that a logged Config never shows the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("endpoint", &self.endpoint)
            .field("protocol", &self.protocol)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("connections", &self.connections)
            .field("max_in_flight", &self.max_in_flight)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// Defaults: 1 connection, 1024 requests in flight on it, 1 s per request, 1 s to connect,
    /// backoff 50 ms → 2 s, replies up to 512 MiB (Redis's proto-max-bulk-len).
    pub fn new(endpoint: Endpoint, protocol: Protocol) -> Config {
        Config {
            endpoint,
            protocol,
            user: None,
            password: None,
            connections: 1,
            max_in_flight: 1024,
            timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_secs(2),
            max_reply: 512 * 1024 * 1024,
        }
    }

    pub fn auth(mut self, user: Option<String>, password: Option<String>) -> Config {
        self.user = user;
        self.password = password;
        self
    }

    pub fn connections(mut self, n: usize) -> Config {
        self.connections = n.max(1);
        self
    }

    pub fn max_in_flight(mut self, n: usize) -> Config {
        self.max_in_flight = n.max(1);
        self
    }

    pub fn timeout(mut self, t: Duration) -> Config {
        self.timeout = t;
        self
    }

    pub fn connect_timeout(mut self, t: Duration) -> Config {
        self.connect_timeout = t;
        self
    }

    pub fn backoff(mut self, min: Duration, max: Duration) -> Config {
        self.backoff_min = min;
        self.backoff_max = max.max(min);
        self
    }
}

/// Dials, handshakes and authenticates one connection within `config.connect_timeout`.
pub(crate) async fn connect(config: &Config) -> Result<Conn> {
    let limit = config.connect_timeout;
    let opts = ConnOptions { max_in_flight: config.max_in_flight, max_reply: config.max_reply };
    // The dial has its own deadline; the handshake's reads each have theirs (so a router that
    // never answers the fast-path preamble gets the specific error, not a bare timeout).
    match &config.endpoint {
        Endpoint::Tcp(addr) => {
            let s =
                tokio::time::timeout(limit, TcpStream::connect(addr)).await.map_err(|_| Error::Timeout)??;
            // Requests are small and latency-bound; the writer already coalesces them.
            s.set_nodelay(true)?;
            let (r, w) = s.into_split();
            handshake(config, r, w, opts).await
        }
        Endpoint::Unix(path) => {
            let s = tokio::time::timeout(limit, UnixStream::connect(path))
                .await
                .map_err(|_| Error::Timeout)??;
            let (r, w) = s.into_split();
            handshake(config, r, w, opts).await
        }
    }
}

async fn handshake<R, W>(config: &Config, mut r: R, mut w: W, opts: ConnOptions) -> Result<Conn>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut buf = BytesMut::new();
    match config.protocol {
        Protocol::Resp => {
            if let Some(password) = &config.password {
                let mut args: Vec<&[u8]> = vec![b"AUTH"];
                if let Some(user) = &config.user {
                    args.push(user.as_bytes());
                }
                args.push(password.as_bytes());
                let mut out = BytesMut::new();
                resp::encode(&mut out, &args);
                w.write_all(&out).await?;
                let reply = loop {
                    if let Some(v) = resp::decode(&mut buf, config.max_reply)? {
                        break v;
                    }
                    let want = buf.len() + 1;
                    read_at_least(&mut r, &mut buf, want, config.connect_timeout).await?;
                };
                match reply {
                    resp::Value::Simple(_) => {}
                    resp::Value::Error(e) => return Err(Error::Server(e)),
                    other => return Err(Error::Protocol(format!("AUTH answered {other:?}"))),
                }
            }
        }
        Protocol::Fast => {
            w.write_all(&Preamble { version: fast::VERSION }.encode()).await?;
            // A router without the fast path says nothing: it reads the preamble as the start of
            // an inline RESP command and waits for its line end.
            read_at_least(&mut r, &mut buf, 1, config.connect_timeout).await.map_err(|e| match e {
                Error::Timeout => Error::Protocol(format!(
                    "no answer to the fast-path preamble within {:?}: does this router serve the fast path?",
                    config.connect_timeout
                )),
                e => e,
            })?;
            if buf[0] != fast::MAGIC[0] {
                // A router without the fast path parses the preamble as RESP and may answer
                // with an error line: show it, it says what is wrong.
                let text = String::from_utf8_lossy(&buf).trim_end().to_owned();
                return Err(Error::Protocol(format!(
                    "the router does not speak the fast path (it said {text:?})"
                )));
            }
            read_at_least(&mut r, &mut buf, fast::PREAMBLE_LEN, config.connect_timeout).await?;
            let Some(theirs) = Preamble::decode(&mut buf)? else { unreachable!("8 bytes are there") };
            if theirs.version != fast::VERSION {
                return Err(Error::Protocol(format!(
                    "the router speaks fast-path version {} (this client: {})",
                    theirs.version,
                    fast::VERSION
                )));
            }
            let mut hello = BytesMut::new();
            let user = config.user.as_deref().unwrap_or("").as_bytes();
            let password = config.password.as_deref().unwrap_or("").as_bytes();
            fast::put_request(&mut hello, fast::Op::Hello, 0, 0, user, password, 0);
            w.write_all(&hello).await?;
            let reply = loop {
                if let Some(r) = fast::decode_reply(&mut buf, config.max_reply)? {
                    break r;
                }
                let want = buf.len() + 1;
                read_at_least(&mut r, &mut buf, want, config.connect_timeout).await?;
            };
            match reply.status {
                fast::Status::Ok if reply.id == 0 => {}
                fast::Status::Err => return Err(Error::Server(crate::conn::lossy(&reply.body))),
                other => return Err(Error::Protocol(format!("HELLO answered {other:?} (id {})", reply.id))),
            }
        }
    }
    Ok(Conn::start(config.protocol, r, w, buf, opts))
}
