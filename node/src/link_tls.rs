//! The node's gRPC port over mutual TLS (`--link-tls-*`): accepted connections are handed to
//! tonic only once their handshake has completed, and a peer without a certificate from the
//! cluster's CA never reaches a service (it is refused in the handshake, before any RPC).
//!
//! Handshakes run in tasks of their own, bounded in time and in number, so a slow or hostile
//! peer holds up no one else.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use shoal_wire::tls::{Reloading, rustls::ServerConfig, server::TlsStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

/// A peer that has not finished its handshake by then is disconnected.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; further connections wait in the listen queue.
const MAX_HANDSHAKES: usize = 256;

/// An authenticated node-link connection, as tonic serves it.
#[derive(Debug)]
pub struct LinkStream(TlsStream<TcpStream>);

impl Connected for LinkStream {
    type ConnectInfo = ();
    fn connect_info(&self) {}
}

impl AsyncRead for LinkStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for LinkStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

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
) -> ReceiverStream<io::Result<LinkStream>> {
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
                        let _ = tx.send(Ok(LinkStream(stream))).await;
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
