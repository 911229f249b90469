//! The one way to open a gRPC client to a node, used by routers, nodes pulling migrations, the
//! coordinator and the command-line tools, so that all of them agree on message limits, timeouts
//! and keep-alives.

use std::time::Duration;

use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::auth::{Attach, ClusterSecret, Credentials};
use crate::proto::node_client::NodeClient;

/// A gRPC client of one node, as [`connect`] opens it: every call carries the cluster secret
/// its options name ([`crate::auth`]).
pub type Client = NodeClient<InterceptedService<Channel, Attach>>;

/// Largest gRPC message either way. Large items travel in pieces of [`crate::pieces::PIECE_BYTES`]
/// (a batch is at most a few MiB), so this is a safety net, not a working size.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;
/// HTTP/2 flow-control windows: large enough that a stream carrying batches of a few MiB does not
/// wait for window updates on every message.
pub const STREAM_WINDOW_BYTES: u32 = 8 << 20;
pub const CONNECTION_WINDOW_BYTES: u32 = 16 << 20;

/// How a client connects.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub connect_timeout: Duration,
    /// A deadline for each unary call (`None`: none, for long-lived streams).
    pub request_timeout: Option<Duration>,
    /// HTTP/2 pings on idle connections, so a dead peer is noticed within about 10 s.
    pub keep_alive: bool,
    /// What every call carries: the cluster secret, and mutual TLS when node links use
    /// certificates ([`crate::auth::Credentials`]).
    pub credentials: Credentials,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            connect_timeout: Duration::from_secs(2),
            request_timeout: None,
            keep_alive: true,
            credentials: Credentials::default(),
        }
    }
}

impl ClientOptions {
    /// The same options, sending `secret` (no TLS).
    pub fn with_secret(self, secret: Option<ClusterSecret>) -> ClientOptions {
        self.with_credentials(Credentials::secret(secret))
    }

    /// The same options, with `credentials`.
    pub fn with_credentials(self, credentials: Credentials) -> ClientOptions {
        ClientOptions { credentials, ..self }
    }

    /// For short administrative calls (topology offers, stats polls).
    pub fn admin() -> ClientOptions {
        ClientOptions {
            request_timeout: Some(Duration::from_secs(10)),
            keep_alive: false,
            ..Default::default()
        }
    }
}

/// Why a node could not be reached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    #[error("bad node address {addr:?}: {reason}")]
    BadAddress { addr: String, reason: String },
    /// The innermost cause ("connection refused" rather than "transport error").
    #[error("{0}")]
    Transport(String),
}

/// Connects to the node at `addr` (`host:port`); every call carries `options.credentials`: over
/// mutual TLS (the node's certificate checked for `host`) when they hold a TLS config.
pub async fn connect(addr: &str, options: &ClientOptions) -> Result<Client, ConnectError> {
    let mut endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| ConnectError::BadAddress { addr: addr.to_string(), reason: e.to_string() })?
        .connect_timeout(options.connect_timeout)
        .tcp_nodelay(true)
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES);
    if let Some(t) = options.request_timeout {
        endpoint = endpoint.timeout(t);
    }
    if options.keep_alive {
        endpoint = endpoint
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(Duration::from_secs(5))
            .keep_alive_while_idle(true);
    }
    let channel = match &options.credentials.tls {
        // A node of this process: an in-memory pipe ([`crate::local`]), dialled again at every
        // reconnection, over TCP once the node has stopped serving it.
        None if crate::local::is_local(addr) => {
            let addr = addr.to_string();
            let dial = tower::service_fn(move |_: tonic::transport::Uri| {
                let addr = addr.clone();
                async move {
                    let io = match crate::local::dial(&addr) {
                        Some(pipe) => crate::local::LinkIo::Pipe(pipe),
                        None => {
                            let tcp = tokio::net::TcpStream::connect(&addr).await?;
                            tcp.set_nodelay(true)?;
                            crate::local::LinkIo::Tcp(tcp)
                        }
                    };
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(io))
                }
            });
            endpoint.connect_with_connector(dial).await
        }
        None => endpoint.connect().await,
        Some(tls) => {
            let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
            let name = crate::tls::server_name(host)
                .map_err(|reason| ConnectError::BadAddress { addr: addr.to_string(), reason })?;
            let (tls, limit) = (tls.clone(), options.connect_timeout);
            // tonic dials through this for every (re)connection, so a rotated certificate is
            // picked up at the next reconnect.
            let dial = tower::service_fn(move |uri: tonic::transport::Uri| {
                let (tls, name) = (tls.clone(), name.clone());
                async move {
                    let authority = uri.authority().map(|a| a.to_string()).unwrap_or_default();
                    let handshake = async {
                        let tcp = tokio::net::TcpStream::connect(&authority).await?;
                        tcp.set_nodelay(true)?;
                        tls.connector().connect(name, tcp).await
                    };
                    let stream = tokio::time::timeout(limit, handshake).await.map_err(|_| {
                        std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS connect timed out")
                    })??;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                }
            });
            endpoint.connect_with_connector(dial).await
        }
    };
    let channel = channel.map_err(|e| ConnectError::Transport(innermost(&e)))?;
    Ok(NodeClient::with_interceptor(channel, Attach::with(options.credentials.secret.as_ref()))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES))
}

/// The innermost cause of an error chain.
pub fn innermost(e: &dyn std::error::Error) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}
