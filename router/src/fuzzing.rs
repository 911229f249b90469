//! The TLS-wrapped RESP path under fuzzing (`fuzz/fuzz_targets/tls_resp.rs`) and its saved
//! inputs' replay (`tests/fuzz_regressions.rs`): bytes from an untrusted peer reach the TLS
//! handshake, and after it the RESP parser and command dispatch, exactly as on `--tls-port`.
//! Likewise the binary fast path ([`FastHarness`], `fuzz/fuzz_targets/fast_frames.rs`): bytes
//! reach the connection's protocol negotiation and [`crate::front::fast`]'s state machine.
//!
//! Each input runs against a fresh router state whose one node is unreachable (commands that
//! need a node get its error after a 5 ms deadline), over an in-memory pipe:
//! - first byte even: the rest are raw bytes to the TLS acceptor (garbage handshakes, plaintext
//!   on the TLS port);
//! - first byte odd: a real TLS client handshakes, then sends the rest as application data, then
//!   closes.
//!
//! The property is that nothing panics. An exchange that has not ended after a short while is
//! abandoned (a fuzzed CLIENT PAUSE or blocking command may rightly wait); libFuzzer's own
//! timeout catches real hangs.

use std::sync::Arc;
use std::time::Duration;

use shoal_wire::Topology;
use shoal_wire::tls::{ClientAuth, TlsAcceptor, TlsConnector};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use crate::backend::{Backend, LinkOptions};
use crate::clients::ClientHandle;
use crate::session::Session;
use crate::state::{RouterState, Settings};

/// A router state whose one node is unreachable: commands that need a node get its error after
/// a 5 ms deadline.
fn unreachable_state() -> Arc<RouterState> {
    let settings = Settings { deadline: Duration::from_millis(5), ..Settings::default() };
    let topology = Topology::even(&["127.0.0.1:1".to_string()]);
    let backend =
        Backend::new(topology, LinkOptions { deadline: settings.deadline, ..Default::default() }, false);
    RouterState::new(settings, backend, None)
}

/// How long one exchange may take before it is abandoned.
const EXCHANGE_LIMIT: Duration = Duration::from_millis(500);

/// A TLS acceptor and a client that trusts it, and a runtime to run exchanges on.
pub struct TlsHarness {
    rt: tokio::runtime::Runtime,
    acceptor: TlsAcceptor,
    connector: TlsConnector,
}

impl std::fmt::Debug for TlsHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsHarness").finish_non_exhaustive()
    }
}

impl TlsHarness {
    /// From a server certificate and key for `localhost` and the CA that signed it (PEM).
    pub fn new(cert: &[u8], key: &[u8], ca: &[u8]) -> TlsHarness {
        let server =
            shoal_wire::tls::server_config(cert, key, None, ClientAuth::No, &[]).expect("server config");
        let client = shoal_wire::tls::client_config(ca, None, &[]).expect("client config");
        TlsHarness {
            rt: tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime"),
            acceptor: TlsAcceptor::from(Arc::new(server)),
            connector: TlsConnector::from(Arc::new(client)),
        }
    }

    /// One exchange (see the module docs); panics only if the router does. Returns what the
    /// client received (decrypted, in TLS mode).
    pub fn run(&self, data: &[u8]) -> Vec<u8> {
        let Some((&mode, rest)) = data.split_first() else { return Vec::new() };
        self.rt.block_on(async {
            let state = unreachable_state();
            let (client, server) = tokio::io::duplex(64 * 1024);
            let (_stop, stopped) = watch::channel(false);
            let serve = {
                let (state, acceptor) = (state.clone(), self.acceptor.clone());
                async move {
                    let Ok(tls) = acceptor.accept(server).await else { return };
                    let handle =
                        ClientHandle::new(state.next_client_id(), "fuzz:0".into(), "fuzz".into(), false);
                    let session = Session::new(Arc::new(handle), state.acl.default_open());
                    crate::front::resp::serve(tls, state, session, stopped).await;
                }
            };
            let mut sink = Vec::new();
            let talk = async {
                if mode & 1 == 0 {
                    let mut client = client;
                    let _ = client.write_all(rest).await;
                    let _ = client.shutdown().await;
                    let _ = client.read_to_end(&mut sink).await;
                } else {
                    let name = shoal_wire::tls::server_name("localhost").expect("a valid name");
                    if let Ok(mut tls) = self.connector.connect(name, client).await {
                        let _ = tls.write_all(rest).await;
                        let _ = tls.shutdown().await;
                        let _ = tls.read_to_end(&mut sink).await;
                    }
                }
            };
            let _ = tokio::time::timeout(EXCHANGE_LIMIT, async { tokio::join!(serve, talk) }).await;
            state.backend.close();
            sink
        })
    }
}

/// The binary fast path under fuzzing: each input is one connection to a fresh router state
/// (see [`unreachable_state`]) over an in-memory pipe, through [`crate::front::resp::serve`] as a
/// Unix-socket client would reach it.
/// - first byte even: the rest follows a valid preamble and a successful HELLO, so it reaches
///   the authenticated request loop;
/// - first byte odd: the rest is sent as is (negotiation, preambles, the pre-auth state).
///
/// The property is that nothing panics and every exchange ends (bounded like [`TlsHarness`]).
pub struct FastHarness {
    rt: tokio::runtime::Runtime,
}

impl std::fmt::Debug for FastHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastHarness").finish_non_exhaustive()
    }
}

impl Default for FastHarness {
    fn default() -> Self {
        FastHarness::new()
    }
}

impl FastHarness {
    pub fn new() -> FastHarness {
        FastHarness {
            rt: tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime"),
        }
    }

    /// One exchange; returns what the client received.
    pub fn run(&self, data: &[u8]) -> Vec<u8> {
        use shoal_wire::fast;
        let Some((&mode, rest)) = data.split_first() else { return Vec::new() };
        let mut sent = Vec::with_capacity(rest.len() + 64);
        if mode & 1 == 0 {
            sent.extend_from_slice(&fast::Preamble { version: fast::VERSION }.encode());
            let mut hello = bytes::BytesMut::new();
            fast::put_request(&mut hello, fast::Op::Hello, 0, 0, b"", b"", 0);
            sent.extend_from_slice(&hello);
        }
        sent.extend_from_slice(rest);
        self.rt.block_on(async {
            let state = unreachable_state();
            let (mut client, server) = tokio::io::duplex(64 * 1024);
            let (_stop, stopped) = watch::channel(false);
            let serve = {
                let state = state.clone();
                async move {
                    let handle =
                        ClientHandle::new(state.next_client_id(), "fuzz:0".into(), "fuzz".into(), true);
                    let session = Session::new(Arc::new(handle), state.acl.default_open());
                    crate::front::resp::serve(server, state, session, stopped).await;
                }
            };
            let mut sink = Vec::new();
            let talk = async {
                let _ = client.write_all(&sent).await;
                let _ = client.shutdown().await;
                let _ = client.read_to_end(&mut sink).await;
            };
            let _ = tokio::time::timeout(EXCHANGE_LIMIT, async { tokio::join!(serve, talk) }).await;
            state.backend.close();
            sink
        })
    }
}
