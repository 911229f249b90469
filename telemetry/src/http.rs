//! A small HTTP/1.1 server on hyper, with the limits an internet-facing port needs.
//!
//! Used for the ops endpoints of every binary and for the router's key/value API. Connections are
//! kept alive and may pipeline; request headers must arrive within [`HEADER_READ_TIMEOUT`] and fit
//! in [`MAX_HEADER_BYTES`] (slow or huge headers get the connection closed, other clients are
//! unaffected); on shutdown the listener closes and open connections finish their current request.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::metrics;

/// Full request headers must arrive within this long.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request head (request line + headers) accepted.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Concurrent connections per HTTP listener; further clients wait in the accept queue.
pub const MAX_CONNECTIONS: usize = 10_000;

pub type HttpResponse = Response<Full<Bytes>>;

/// Serves `handler` on `listener` until `shutdown` resolves, then waits (at most `drain`) for
/// open connections to finish their in-flight request.
pub async fn serve<H, F>(
    listener: TcpListener,
    handler: H,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = HttpResponse> + Send + 'static,
{
    let connect = move |peer| {
        let handler = handler.clone();
        move |req| handler(req, peer)
    };
    serve_on(listener, None, connect, shutdown, drain).await
}

/// HTTPS: how each connection's TLS handshake is made.
#[derive(Clone)]
pub struct Tls {
    /// The acceptor with the certificates of the moment (they may be rotated while serving).
    pub acceptor: Arc<dyn Fn() -> tokio_rustls::TlsAcceptor + Send + Sync>,
    /// A client that has not finished its handshake by then is disconnected.
    pub handshake_timeout: Duration,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("handshake_timeout", &self.handshake_timeout).finish()
    }
}

/// [`serve`], with TLS on every connection when `tls` is given (HTTPS), and a handler made for
/// each connection by `connect` (from the client's address): what a connection's requests share
/// (they come one after another) is made once, not per request.
pub async fn serve_on<C, H, F>(
    listener: TcpListener,
    tls: Option<Tls>,
    connect: C,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) where
    C: Fn(SocketAddr) -> H,
    H: Fn(Request<Incoming>) -> F + Send + 'static,
    F: Future<Output = HttpResponse> + Send + 'static,
{
    let graceful = GracefulShutdown::new();
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            p = permits.clone().acquire_owned() => p.expect("semaphore never closed"),
        };
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "http accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let handler = connect(peer);
        let service = service_fn(move |req| {
            let fut = handler(req);
            async move { Ok::<_, Infallible>(fut.await) }
        });
        let http = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            .max_buf_size(MAX_HEADER_BYTES.max(8192))
            .keep_alive(true)
            .clone();
        let watcher = graceful.watcher();
        let tls = tls.clone();
        tokio::spawn(async move {
            let ended = match tls {
                None => watcher.watch(http.serve_connection(TokioIo::new(stream), service)).await,
                // The handshake runs in the connection's task (a slow client holds no one up) and
                // is bounded in time, holding a connection permit meanwhile.
                Some(tls) => {
                    let stream =
                        match tokio::time::timeout(tls.handshake_timeout, (tls.acceptor)().accept(stream))
                            .await
                        {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                tracing::debug!(error = %e, %peer, "https handshake failed");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "https handshake timed out");
                                return;
                            }
                        };
                    watcher.watch(http.serve_connection(TokioIo::new(stream), service)).await
                }
            };
            if let Err(e) = ended {
                tracing::debug!(error = %e, %peer, "http connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown()).await.is_err() {
        tracing::warn!("http connections still open after {drain:?}; closing them");
    }
}

/// Serves only the ops endpoints ([`ops_endpoint`], GET only) until `shutdown`: the whole HTTP
/// surface of a process without an HTTP API of its own (nodes, the operator).
pub async fn serve_ops<R, M>(
    listener: TcpListener,
    ready: R,
    metrics_text: M,
    shutdown: impl Future<Output = ()>,
) where
    R: Fn() -> bool + Clone + Send + Sync + 'static,
    M: Fn() -> String + Clone + Send + Sync + 'static,
{
    let handler = move |req: Request<Incoming>, _peer: SocketAddr| {
        let (ready, metrics_text) = (ready.clone(), metrics_text.clone());
        async move {
            if req.method() != hyper::Method::GET {
                return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n");
            }
            ops_endpoint(req.uri().path(), ready, metrics_text)
                .unwrap_or_else(|| text(StatusCode::NOT_FOUND, "not found\n"))
        }
    };
    serve(listener, handler, shutdown, Duration::from_secs(2)).await
}

/// A response with a status, content type and body.
pub fn response(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> HttpResponse {
    Response::builder()
        .status(status)
        // from_static: no copy of the text (a &str header value is copied on every response).
        .header(hyper::header::CONTENT_TYPE, HeaderValue::from_static(content_type))
        .body(Full::new(body.into()))
        .expect("static response parts are valid")
}

/// A `text/plain` response.
pub fn text(status: StatusCode, body: impl Into<Bytes>) -> HttpResponse {
    response(status, "text/plain; charset=utf-8", body)
}

/// The standard ops endpoints: `/metrics` (from `metrics_text`), `/healthz` (the process is up)
/// and `/readyz` (200 when `ready`). `None` for any other path.
pub fn ops_endpoint(
    path: &str,
    ready: impl FnOnce() -> bool,
    metrics_text: impl FnOnce() -> String,
) -> Option<HttpResponse> {
    match path {
        "/metrics" => Some(response(StatusCode::OK, metrics::CONTENT_TYPE, metrics_text())),
        "/healthz" | "/livez" => Some(text(StatusCode::OK, "ok\n")),
        "/readyz" => Some(if ready() {
            text(StatusCode::OK, "ready\n")
        } else {
            text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
        }),
        _ => None,
    }
}
