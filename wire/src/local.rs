//! In-process node links. A node served in the same process as its clients (the router's
//! embedded cluster, `--embedded-nodes`; tests) registers its address here, and
//! [`crate::client::connect`] to that address opens an in-memory pipe to it instead of a loopback
//! TCP connection: the same gRPC over the same HTTP/2, the same cluster secret checked on every
//! call, but none of the kernel's socket work (on loopback each message costs a system call on
//! each side and a wake-up through the kernel, which at shallow pipelines was the router's
//! largest cost after its clients' own sockets).
//!
//! - A node registers with [`LocalListener::bind`] and serves what [`LocalListener`] yields
//!   next to its TCP listener ([`LinkIo`] is any node-link connection: TCP, mutual TLS over TCP,
//!   or a pipe); dropping the listener (the server stopped)
//!   unregisters it, so a later dial of that address goes over TCP again (and finds whatever
//!   listens there now, or nothing).
//! - Only plaintext links: a node with node-link TLS does not register, and a client with TLS
//!   credentials always dials TCP, since certificates are checked in a handshake a pipe has none
//!   of.
//! - Separate processes (a router and `shoal-node` pods) always use TCP.
//! - A node may also register its `Execute` stream ([`LocalExecute`]): a router of this process
//!   then opens that stream with [`open_execute`] as a pair of in-memory streams of the
//!   messages themselves (no protobuf encoding, no HTTP/2 framing), the data path's hot loop;
//!   the node's other calls still take a pipe. The cluster secret is checked when it opens, as
//!   the node's interceptor checks it on the wire.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};

use parking_lot::RwLock;
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tonic::codegen::BoxStream;
use tonic::service::Interceptor;

use crate::auth::{Attach, Check, Credentials};
use crate::proto::{Batch, BatchReply};

/// Bytes each direction of a pipe holds before its writer waits for the reader: several HTTP/2
/// frames (16 KiB each), so a large batch is not copied in many small steps.
const PIPE_BYTES: usize = 256 << 10;

/// Where to hand the server end of a new pipe, which registration that is (so that an old
/// listener dropped late cannot remove a newer one), and the node's in-process `Execute`.
type Registration = (u64, mpsc::UnboundedSender<DuplexStream>, Option<LocalExecute>);

/// A node's `Execute` stream, opened in-process: given the router's batches, the node's replies.
pub type ExecuteOpener = Arc<dyn Fn(BoxStream<Batch>) -> BoxStream<BatchReply> + Send + Sync>;

/// What a node registers for in-process `Execute` streams: how to open one, and the check its
/// gRPC calls pass (the cluster secret).
#[derive(Clone)]
pub struct LocalExecute {
    pub open: ExecuteOpener,
    pub check: Check,
}

impl std::fmt::Debug for LocalExecute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalExecute").finish_non_exhaustive()
    }
}

/// Registered nodes by address.
static LISTENERS: LazyLock<RwLock<HashMap<String, Registration>>> = LazyLock::new(Default::default);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A node's registration: while it lives, dials of its address open pipes it yields.
#[derive(Debug)]
pub struct LocalListener {
    addr: String,
    id: u64,
    incoming: mpsc::UnboundedReceiver<DuplexStream>,
}

impl LocalListener {
    /// Registers `addr` (the address the node's clients dial, as the topology names it), and
    /// its in-process `Execute` if given, replacing any earlier registration of it.
    pub fn bind(addr: &str, execute: Option<LocalExecute>) -> LocalListener {
        let (tx, incoming) = mpsc::unbounded_channel();
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        LISTENERS.write().insert(addr.to_string(), (id, tx, execute));
        LocalListener { addr: addr.to_string(), id, incoming }
    }

    /// The next pipe dialled; `None` once a newer registration of the address replaced this one
    /// (no dial reaches it any more).
    pub fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<Option<DuplexStream>> {
        self.incoming.poll_recv(cx)
    }
}

impl Drop for LocalListener {
    fn drop(&mut self) {
        let mut listeners = LISTENERS.write();
        if listeners.get(&self.addr).is_some_and(|(id, ..)| *id == self.id) {
            listeners.remove(&self.addr);
        }
    }
}

/// Whether a node of this process serves `addr`.
pub fn is_local(addr: &str) -> bool {
    LISTENERS.read().contains_key(addr)
}

/// A pipe to the node of this process at `addr`, if there is one.
pub fn dial(addr: &str) -> Option<DuplexStream> {
    let listeners = LISTENERS.read();
    let (_, tx, _) = listeners.get(addr)?;
    let (client, server) = tokio::io::duplex(PIPE_BYTES);
    tx.send(server).ok()?;
    Some(client)
}

/// How to open the `Execute` stream of the node of this process at `addr` in-process, if that
/// node registered one and `credentials` would dial it by pipe (no TLS); `Err` if the node
/// refuses `credentials`' cluster secret (as its interceptor would on the wire).
pub fn open_execute(addr: &str, credentials: &Credentials) -> Option<Result<ExecuteOpener, tonic::Status>> {
    if credentials.tls.is_some() {
        return None;
    }
    let execute = LISTENERS.read().get(addr)?.2.clone()?;
    let request = Attach::with(credentials.secret.as_ref()).call(tonic::Request::new(()));
    Some(request.and_then(|r| execute.check.clone().call(r)).map(|_| execute.open))
}

/// A node-link connection, as a node serves it (and as a client dials a pipe or TCP).
#[derive(Debug)]
pub enum LinkIo {
    Tcp(TcpStream),
    /// Mutual TLS over TCP, handshake done (`node/src/link_tls.rs`).
    Tls(Box<crate::tls::server::TlsStream<TcpStream>>),
    Pipe(DuplexStream),
}

impl LinkIo {
    /// Over TCP, the peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        match self {
            LinkIo::Tcp(t) => t.peer_addr().ok(),
            LinkIo::Tls(t) => t.get_ref().0.peer_addr().ok(),
            LinkIo::Pipe(_) => None,
        }
    }
}

/// Passes a call on to whichever connection `$io` is (every variant is `Unpin`, so a plain
/// `Pin::new` does).
macro_rules! each {
    ($io:expr, $c:ident => $call:expr) => {
        match $io {
            LinkIo::Tcp($c) => $call,
            LinkIo::Tls($c) => $call,
            LinkIo::Pipe($c) => $call,
        }
    };
}

impl AsyncRead for LinkIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        each!(self.get_mut(), c => Pin::new(c).poll_read(cx, buf))
    }
}

impl AsyncWrite for LinkIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        each!(self.get_mut(), c => Pin::new(c).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        each!(self.get_mut(), c => Pin::new(c).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        each!(self, c => c.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self.get_mut(), c => Pin::new(c).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self.get_mut(), c => Pin::new(c).poll_shutdown(cx))
    }
}

impl tonic::transport::server::Connected for LinkIo {
    type ConnectInfo = Option<SocketAddr>;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.peer_addr()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn a_dial_reaches_the_listener_while_it_lives_and_never_after() {
        let addr = "127.0.0.1:1";
        assert!(dial(addr).is_none(), "nothing registered");
        let mut listener = LocalListener::bind(addr, None);
        assert!(is_local(addr));
        let mut client = dial(addr).expect("registered");
        let mut server = std::future::poll_fn(|cx| listener.poll_accept(cx)).await.unwrap();
        client.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        // A newer registration of the address wins, and the older one's drop leaves it alone.
        let newer = LocalListener::bind(addr, None);
        drop(listener);
        assert!(is_local(addr), "the newer registration stays");
        drop(newer);
        assert!(!is_local(addr) && dial(addr).is_none(), "unregistered once the node's listener goes");
    }
}
