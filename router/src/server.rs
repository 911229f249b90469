//! Accept loops for the RESP listeners (TCP and Unix socket), with the admission rules Redis
//! applies before a client may send anything: protected mode and `maxclients`.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;

use crate::connection;
use crate::session::Session;
use crate::state::RouterState;

/// What a refused non-loopback client is told when no password is set (Redis's protected mode).
pub const PROTECTED_MODE_DENIED: &str = "-DENIED Shoal is running in protected mode because protected mode is \
enabled and no password is set for the default user. In this mode connections are only accepted from the \
loopback interface. To accept other clients, set a password with --requirepass (SHOAL_REQUIREPASS), or \
disable protected mode with --protected-mode no if the network is trusted.\r\n";

const MAX_CLIENTS_REACHED: &[u8] = b"-ERR max number of clients reached\r\n";

/// Whether protected mode lets `ip` in: only the loopback addresses Redis accepts (`127.0.0.1`
/// and `::1`, also as an IPv4-mapped IPv6 address).
pub fn protected_mode_allows(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4 == std::net::Ipv4Addr::LOCALHOST,
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped() == Some(std::net::Ipv4Addr::LOCALHOST),
    }
}

/// Serves RESP on `listener` until `shutdown` flips to true.
pub async fn serve_tcp(listener: TcpListener, state: Arc<RouterState>, mut shutdown: watch::Receiver<bool>) {
    let local = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    loop {
        let (mut stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "RESP accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        let open = state.settings.requirepass.is_none();
        if open && state.settings.protected_mode && !protected_mode_allows(peer.ip()) {
            tracing::warn!(%peer, "refused a non-loopback client in protected mode");
            state.metrics.rejected_connections.inc();
            tokio::spawn(async move {
                let _ = stream.write_all(PROTECTED_MODE_DENIED.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
            continue;
        }
        let Some(slot) = state.admit() else {
            tokio::spawn(async move {
                let _ = stream.write_all(MAX_CLIENTS_REACHED).await;
                let _ = stream.shutdown().await;
            });
            continue;
        };
        let session = Session::new(state.next_client_id(), peer.to_string(), local.clone(), open);
        let (state, shutdown) = (state.clone(), shutdown.clone());
        tokio::spawn(async move {
            connection::serve(stream, state, session, shutdown).await;
            drop(slot);
        });
    }
}

/// Serves RESP on a Unix socket (local clients: no protected-mode check).
pub async fn serve_unix(
    listener: UnixListener,
    state: Arc<RouterState>,
    mut shutdown: watch::Receiver<bool>,
) {
    let path = listener
        .local_addr()
        .ok()
        .and_then(|a| a.as_pathname().map(|p| p.display().to_string()))
        .unwrap_or_default();
    loop {
        let mut stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "unix socket accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let Some(slot) = state.admit() else {
            tokio::spawn(async move {
                let _ = stream.write_all(MAX_CLIENTS_REACHED).await;
            });
            continue;
        };
        let open = state.settings.requirepass.is_none();
        let session = Session::new(state.next_client_id(), format!("{path}:0"), path.clone(), open);
        let (state, shutdown) = (state.clone(), shutdown.clone());
        tokio::spawn(async move {
            connection::serve(stream, state, session, shutdown).await;
            drop(slot);
        });
    }
}

/// Binds a Unix socket with `mode` applied before it starts listening, so there is no moment
/// when other users could connect. A stale socket file from an earlier run is replaced.
pub fn bind_unix(path: &Path, mode: u32) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()) => {
            std::fs::remove_file(path)?
        }
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        Err(_) => {}
    }
    let socket = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    socket.bind(&socket2::SockAddr::unix(path)?)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    UnixListener::from_std(std::os::unix::net::UnixListener::from(std::os::fd::OwnedFd::from(socket)))
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
