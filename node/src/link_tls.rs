//! The node's gRPC port over mutual TLS (`--link-tls-*`): accepted connections are handed to
//! tonic only once their handshake has completed, and a peer without a certificate from the
//! cluster's CA never reaches a service (it is refused in the handshake, before any RPC).
//!
//! Handshakes run in tasks of their own, bounded in time and in number, so a slow or hostile
//! peer holds up no one else.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use shoal_wire::local::LinkIo;
use shoal_wire::tls::{Reloading, rustls::ServerConfig};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

/// A peer that has not finished its handshake by then is disconnected.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; further connections wait in the listen queue.
const MAX_HANDSHAKES: usize = 256;

async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Accepts on `listener` until `stop` flips, yielding connections whose TLS handshake (with the
/// certificates of the moment) succeeded. Failed handshakes are logged and counted in `refused`.
pub fn incoming(
    listener: TcpListener,
    config: Arc<Reloading<ServerConfig>>,
    refused: Arc<AtomicU64>,
    mut stop: watch::Receiver<bool>,
) -> ReceiverStream<io::Result<LinkIo>> {
    let (tx, rx) = mpsc::channel(64);
    let permits = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    tokio::spawn(async move {
        loop {
            let permit = tokio::select! {
                p = permits.clone().acquire_owned() => p.expect("never closed"),
                _ = stopped(&mut stop) => return,
            };
            let (tcp, peer) = tokio::select! {
                a = listener.accept() => match a {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "node port accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                _ = stopped(&mut stop) => return,
            };
            let _ = tcp.set_nodelay(true);
            let (acceptor, tx, refused) = (config.acceptor(), tx.clone(), refused.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send(Ok(LinkIo::Tls(Box::new(stream)))).await;
                    }
                    Ok(Err(e)) => {
                        refused.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(%peer, error = %e, "node-link TLS handshake refused");
                    }
                    Err(_) => {
                        refused.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(%peer, "node-link TLS handshake timed out");
                    }
                }
                drop(permit);
            });
        }
    });
    ReceiverStream::new(rx)
}
