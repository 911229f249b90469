//! The RESP accept loop, one for every kind of listener (TCP, Unix socket, TLS over TCP: each
//! implements [`Listener`]), with the admission rules Redis applies before a client may send
//! anything: `maxclients`, the TLS handshake (in the connection's task, bounded in time) and
//! protected mode.
//!
//! Also the Unix socket's file: [`bind_unix`] refuses a path another process serves and replaces
//! a stale one, and [`SocketFile::remove_if_ours`] removes it at exit only if it is still ours.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use shoal_wire::tls::{Accept, Reloading, rustls, server::TlsStream};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::watch;

use crate::clients::ClientHandle;
use crate::front::resp;
use crate::session::Session;
use crate::state::RouterState;

/// What a refused non-loopback client is told when no password is set (Redis's protected mode).
pub const PROTECTED_MODE_DENIED: &str = "-DENIED Shoal is running in protected mode because protected mode is \
enabled and no password is set for the default user. In this mode connections are only accepted from the \
loopback interface. To accept other clients, set a password with --requirepass (SHOAL_REQUIREPASS), or \
disable protected mode with --protected-mode no if the network is trusted.\r\n";

const MAX_CLIENTS_REACHED: &[u8] = b"-ERR max number of clients reached\r\n";
/// A refused client gets this long to take its one-line answer before the socket is closed.
const REFUSAL_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Whether protected mode lets `ip` in: only the loopback addresses Redis accepts (`127.0.0.1`
/// and `::1`, also as an IPv4-mapped IPv6 address).
pub fn protected_mode_allows(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4 == std::net::Ipv4Addr::LOCALHOST,
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped() == Some(std::net::Ipv4Addr::LOCALHOST),
    }
}

/// A connection a [`Listener`] accepted.
#[derive(Debug)]
pub struct Accepted<H> {
    /// Completes with the stream to speak RESP on (at once for plain sockets; after the
    /// handshake for TLS).
    pub stream: H,
    /// The peer as CLIENT INFO's `addr` shows it (`ip:port`, or `path:0` on a Unix socket).
    pub peer: String,
    /// This end as CLIENT INFO's `laddr` shows it (the address the connection reached, which for
    /// a listener on `0.0.0.0` is not the listener's), or `None` for the listener's.
    pub local: Option<String>,
    /// Whether protected mode admits this peer without a password: a loopback TCP client, or any
    /// client of a Unix socket (local by construction; its file mode is the access control).
    pub trusted: bool,
}

/// A bound RESP listener. [`serve`] runs the same accept loop and admission rules for every
/// implementation.
pub trait Listener: Send + Sync + 'static {
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// What [`Listener::accept`] hands over: the stream once ready.
    type Handshake: Future<Output = io::Result<Self::Stream>> + Send + 'static;

    /// For logs: `tcp`, `unix`, ...
    fn kind(&self) -> &'static str;

    /// The local address as CLIENT INFO's `laddr` shows it.
    fn local(&self) -> String;

    fn accept(&self) -> impl Future<Output = io::Result<Accepted<Self::Handshake>>> + Send;
}

impl Listener for TcpListener {
    type Stream = TcpStream;
    type Handshake = std::future::Ready<io::Result<TcpStream>>;

    fn kind(&self) -> &'static str {
        "tcp"
    }

    fn local(&self) -> String {
        self.local_addr().map(|a| a.to_string()).unwrap_or_default()
    }

    async fn accept(&self) -> io::Result<Accepted<Self::Handshake>> {
        let (stream, peer) = TcpListener::accept(self).await?;
        let _ = stream.set_nodelay(true);
        let local = stream.local_addr().ok().map(|a| a.to_string());
        Ok(Accepted {
            stream: std::future::ready(Ok(stream)),
            peer: peer.to_string(),
            local,
            trusted: protected_mode_allows(peer.ip()),
        })
    }
}

/// RESP over TLS: a TCP listener whose connections start with a handshake, with the
/// certificates of the moment (re-read from disk when they change).
pub struct TlsListener {
    pub tcp: TcpListener,
    pub config: Arc<Reloading<rustls::ServerConfig>>,
}

impl Listener for TlsListener {
    type Stream = TlsStream<TcpStream>;
    type Handshake = Accept<TcpStream>;

    fn kind(&self) -> &'static str {
        "tls"
    }

    fn local(&self) -> String {
        self.tcp.local()
    }

    async fn accept(&self) -> io::Result<Accepted<Self::Handshake>> {
        let Accepted { stream, peer, local, trusted } = Listener::accept(&self.tcp).await?;
        let stream = stream.await?;
        Ok(Accepted { stream: self.config.acceptor().accept(stream), peer, local, trusted })
    }
}

/// A Unix socket listener and its path (for CLIENT INFO).
#[derive(Debug)]
pub struct UnixSocket {
    listener: UnixListener,
    path: String,
}

impl Listener for UnixSocket {
    type Stream = UnixStream;
    type Handshake = std::future::Ready<io::Result<UnixStream>>;

    fn kind(&self) -> &'static str {
        "unix"
    }

    fn local(&self) -> String {
        self.path.clone()
    }

    async fn accept(&self) -> io::Result<Accepted<Self::Handshake>> {
        let (stream, _) = self.listener.accept().await?;
        Ok(Accepted {
            stream: std::future::ready(Ok(stream)),
            peer: format!("{}:0", self.path),
            local: None,
            trusted: true,
        })
    }
}

/// Serves RESP on `listener` until `shutdown` flips to true.
pub async fn serve<L: Listener>(listener: L, state: Arc<RouterState>, mut shutdown: watch::Receiver<bool>) {
    let local = listener.local();
    let kind = listener.kind();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, listener = kind, "RESP accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let Accepted { stream: handshake, peer, local: reached, trusted } = accepted;
        // A slot is taken before the handshake, so handshakes in progress count against
        // maxclients (a flood of slow TLS clients cannot pile up tasks).
        let Some(slot) = state.admit() else {
            refuse(handshake, MAX_CLIENTS_REACHED, state.settings.tls_handshake_timeout);
            continue;
        };
        let (state, shutdown, local) = (state.clone(), shutdown.clone(), local.clone());
        tokio::spawn(async move {
            let Some(stream) = handshake_within(handshake, &state, &peer, kind).await else { return };
            let open = state.acl.default_open();
            if open && state.settings.protected_mode && !trusted {
                tracing::warn!(%peer, listener = kind, "refused a non-loopback client in protected mode");
                state.metrics.rejected_connections.inc();
                refuse(std::future::ready(Ok(stream)), PROTECTED_MODE_DENIED.as_bytes(), Duration::ZERO);
                return;
            }
            let client = ClientHandle::new(
                state.next_client_id(),
                peer,
                reached.unwrap_or_else(|| local.clone()),
                kind == "unix",
            );
            let session = Session::new(Arc::new(client), open);
            resp::serve(stream, state, session, shutdown).await;
            drop(slot);
        });
    }
}

/// The stream once its handshake completes within the TLS handshake timeout; `None` (logged,
/// counted) if it fails or takes too long.
async fn handshake_within<S>(
    handshake: impl Future<Output = io::Result<S>>,
    state: &RouterState,
    peer: &str,
    kind: &'static str,
) -> Option<S> {
    match tokio::time::timeout(state.settings.tls_handshake_timeout, handshake).await {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(e)) => {
            // An untrusted or expired client certificate, a plaintext client on the TLS port...
            tracing::info!(%peer, listener = kind, error = %e, "TLS handshake failed");
            state.metrics.tls_handshake_failures.inc();
            None
        }
        Err(_) => {
            tracing::info!(%peer, listener = kind, "TLS handshake timed out");
            state.metrics.tls_handshake_failures.inc();
            None
        }
    }
}

/// Answers a refused client with one error line and closes the connection (in the background,
/// bounded: a client that does not read, or does not finish its TLS handshake within
/// `handshake` more, cannot hold the task).
fn refuse<S: AsyncWrite + Unpin + Send + 'static>(
    stream: impl Future<Output = io::Result<S>> + Send + 'static,
    message: &'static [u8],
    handshake: Duration,
) {
    tokio::spawn(async move {
        let _ = tokio::time::timeout(REFUSAL_WRITE_TIMEOUT + handshake, async {
            let Ok(mut stream) = stream.await else { return };
            let _ = stream.write_all(message).await;
            let _ = stream.shutdown().await;
        })
        .await;
    });
}

/// The Unix socket file this router created: its path, and the identity (device, inode) of the
/// file it bound, so that it only ever removes its own.
#[derive(Debug, Clone)]
pub struct SocketFile {
    pub path: PathBuf,
    dev: u64,
    ino: u64,
}

impl SocketFile {
    /// Removes the socket file if the path still names the file this router bound (another
    /// process may have replaced it since). Returns whether it removed it.
    pub fn remove_if_ours(&self) -> bool {
        match std::fs::symlink_metadata(&self.path) {
            Ok(meta) if meta.dev() == self.dev && meta.ino() == self.ino => {
                std::fs::remove_file(&self.path).is_ok()
            }
            Ok(_) => {
                tracing::info!(path = %self.path.display(), "the Unix socket file was replaced by another process; leaving it");
                false
            }
            Err(_) => false,
        }
    }
}

/// Binds a Unix socket with `mode` applied before it starts listening, so there is no moment
/// when other users could connect.
///
/// If the path exists: a socket that answers a connection belongs to a live process, and binding
/// fails (a second router must not steal the first one's clients); a socket that refuses the
/// connection is stale (left by a crashed run) and is replaced; anything else is an error.
pub fn bind_unix(path: &Path, mode: u32) -> io::Result<(UnixSocket, SocketFile)> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()) => {
            match std::os::unix::net::UnixStream::connect(path) {
                Ok(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!(
                            "{} is in use: another process accepts connections on it (stop it, or choose another --unix-socket)",
                            path.display()
                        ),
                    ));
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    tracing::info!(path = %path.display(), "replacing a stale Unix socket file");
                    std::fs::remove_file(path)?
                }
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("{} exists and cannot be checked for a live server: {e}", path.display()),
                    ));
                }
            }
        }
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        Err(_) => {}
    }
    let socket = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    socket.bind(&socket2::SockAddr::unix(path)?)?;
    let meta = std::fs::symlink_metadata(path)?;
    let file = SocketFile { path: path.to_path_buf(), dev: meta.dev(), ino: meta.ino() };
    let listening = (|| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
        socket.listen(1024)?;
        socket.set_nonblocking(true)?;
        UnixListener::from_std(std::os::unix::net::UnixListener::from(std::os::fd::OwnedFd::from(socket)))
    })();
    match listening {
        Ok(listener) => Ok((UnixSocket { listener, path: path.display().to_string() }, file)),
        Err(e) => {
            file.remove_if_ours();
            Err(e)
        }
    }
}

/// The address a TCP listener actually got (port 0 resolved).
pub fn bound(listener: &TcpListener) -> SocketAddr {
    listener.local_addr().expect("a bound listener has an address")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protected_mode_loopback_rule_is_redis_s() {
        let ok = |s: &str| protected_mode_allows(s.parse().unwrap());
        assert!(ok("127.0.0.1"));
        assert!(ok("::1"));
        assert!(ok("::ffff:127.0.0.1"));
        assert!(!ok("127.0.0.2"), "Redis only trusts 127.0.0.1 itself");
        assert!(!ok("10.1.2.3"));
        assert!(!ok("192.168.1.1"));
        assert!(!ok("8.8.8.8"));
        assert!(!ok("fe80::1"));
    }
}
