//! TLS material read from PEM files, and re-read when the files change, so that a certificate
//! rotated on disk (cert-manager renewing a Secret, an operator replacing files) is served to new
//! connections within seconds while open connections keep the one they started with.
//!
//! Used by the router's client ports (RESP over TLS, HTTPS) and by node links (mutual TLS between
//! routers and nodes and between nodes). rustls with the `ring` provider only: no OpenSSL, and
//! TLS 1.2 and 1.3 only, as Redis allows by default.
//!
//! A [`Reloading`] config keeps the file contents it was built from; [`Reloading::reload`]
//! rebuilds only when some file's bytes differ (robust to Kubernetes' atomic symlink swaps and
//! to coarse mtimes), and keeps the old config if the new files do not make a valid one (a
//! half-written rotation is logged and retried, never served).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

pub use tokio_rustls::{Accept, TlsAcceptor, TlsConnector, client, server};
pub use {rustls, tokio_rustls};

/// The ALPN protocol of gRPC (HTTP/2) on node links.
pub const GRPC_ALPN: &[&[u8]] = &[b"h2"];

/// How often [`Reloading::watch`] looks at the files.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(1);

/// Why TLS material could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path} holds no PEM private key: {reason}")]
    NoKey { path: PathBuf, reason: String },
    #[error("{path}: {reason}")]
    BadCa { path: PathBuf, reason: String },
    #[error(
        "client certificates are checked (tls-auth-clients {0}) but no CA file is given (--tls-ca-cert-file)"
    )]
    CaRequired(&'static str),
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
}

/// Redis's `tls-auth-clients`: whether a client must present a certificate signed by the CA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    /// No client certificate is asked for.
    No,
    /// A client may present one; if it does, it must be valid.
    Optional,
    /// Every client must present a valid one (Redis's default).
    #[default]
    Yes,
}

impl ClientAuth {
    pub fn as_str(self) -> &'static str {
        match self {
            ClientAuth::No => "no",
            ClientAuth::Optional => "optional",
            ClientAuth::Yes => "yes",
        }
    }
}

impl std::str::FromStr for ClientAuth {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "no" => Ok(ClientAuth::No),
            "optional" => Ok(ClientAuth::Optional),
            "yes" => Ok(ClientAuth::Yes),
            _ => Err(format!("expected no, optional or yes, not {s:?}")),
        }
    }
}

/// The one crypto provider every TLS config uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

const VERSIONS: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13, &rustls::version::TLS12];

/// A file's contents, with the path in the error.
fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { path: path.to_path_buf(), source })
}

fn certificates(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem).filter_map(Result::ok).collect();
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: path.to_path_buf() });
    }
    Ok(certs)
}

fn private_key(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem)
        .map_err(|e| TlsError::NoKey { path: path.to_path_buf(), reason: e.to_string() })
}

fn roots(path: &Path, pem: &[u8]) -> Result<Arc<RootCertStore>, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in certificates(path, pem)? {
        store.add(cert).map_err(|e| TlsError::BadCa { path: path.to_path_buf(), reason: e.to_string() })?;
    }
    Ok(Arc::new(store))
}

/// The files of one TLS identity: a certificate chain, its key, and the CA that peers'
/// certificates must chain to (optional where peers are not checked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: Option<PathBuf>,
}

impl TlsFiles {
    fn paths(&self) -> Vec<PathBuf> {
        let mut paths = vec![self.cert.clone(), self.key.clone()];
        paths.extend(self.ca.clone());
        paths
    }

    /// A server config from these files' contents (`contents` in [`TlsFiles::paths`] order).
    fn server(
        &self,
        contents: &[Vec<u8>],
        auth: ClientAuth,
        alpn: &[&[u8]],
    ) -> Result<ServerConfig, TlsError> {
        let certs = certificates(&self.cert, &contents[0])?;
        let key = private_key(&self.key, &contents[1])?;
        let builder = ServerConfig::builder_with_provider(provider()).with_protocol_versions(VERSIONS)?;
        let builder = match (auth, &self.ca) {
            (ClientAuth::No, _) => builder.with_no_client_auth(),
            (_, None) => return Err(TlsError::CaRequired(auth.as_str())),
            (_, Some(ca)) => {
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(roots(ca, &contents[2])?, provider());
                let verifier =
                    if auth == ClientAuth::Optional { verifier.allow_unauthenticated() } else { verifier };
                builder.with_client_cert_verifier(
                    verifier
                        .build()
                        .map_err(|e| TlsError::BadCa { path: ca.clone(), reason: e.to_string() })?,
                )
            }
        };
        let mut config = builder.with_single_cert(certs, key)?;
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(config)
    }

    /// A client config from these files' contents: trusts only the CA (required) and presents
    /// the certificate (mutual TLS).
    fn client(&self, contents: &[Vec<u8>], alpn: &[&[u8]]) -> Result<ClientConfig, TlsError> {
        let ca = self.ca.as_ref().ok_or(TlsError::CaRequired("yes"))?;
        let identity = (certificates(&self.cert, &contents[0])?, private_key(&self.key, &contents[1])?);
        client_with(roots(ca, &contents[2])?, Some(identity), alpn)
    }
}

fn client_with(
    roots: Arc<RootCertStore>,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    alpn: &[&[u8]],
) -> Result<ClientConfig, TlsError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(VERSIONS)?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((certs, key)) => builder.with_client_auth_cert(certs, key)?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// A server config from PEM bytes (tests and fuzzing; servers use [`reloading_server`]).
pub fn server_config(
    cert: &[u8],
    key: &[u8],
    ca: Option<&[u8]>,
    auth: ClientAuth,
    alpn: &[&[u8]],
) -> Result<ServerConfig, TlsError> {
    let files = TlsFiles { cert: "cert.pem".into(), key: "key.pem".into(), ca: ca.map(|_| "ca.pem".into()) };
    let mut contents = vec![cert.to_vec(), key.to_vec()];
    contents.extend(ca.map(<[u8]>::to_vec));
    files.server(&contents, auth, alpn)
}

/// A client config from PEM bytes trusting `ca`, presenting `identity` (certificate, key) if
/// given (tests, tools, fuzzing).
pub fn client_config(
    ca: &[u8],
    identity: Option<(&[u8], &[u8])>,
    alpn: &[&[u8]],
) -> Result<ClientConfig, TlsError> {
    let identity = match identity {
        Some((cert, key)) => {
            Some((certificates(Path::new("cert.pem"), cert)?, private_key(Path::new("key.pem"), key)?))
        }
        None => None,
    };
    client_with(roots(Path::new("ca.pem"), ca)?, identity, alpn)
}

/// Builds a config from the files' contents.
type Build<C> = Box<dyn Fn(&[Vec<u8>]) -> Result<C, TlsError> + Send + Sync>;

/// A config built from files, rebuilt when their contents change.
pub struct Reloading<C> {
    paths: Vec<PathBuf>,
    build: Build<C>,
    /// The config in use and the file contents it was built from.
    current: RwLock<(Arc<C>, Vec<Vec<u8>>)>,
    /// When [`Reloading::fresh`] last looked at the files.
    checked: parking_lot::Mutex<std::time::Instant>,
}

impl<C> std::fmt::Debug for Reloading<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloading").field("paths", &self.paths).finish()
    }
}

impl<C: Send + Sync + 'static> Reloading<C> {
    fn new(
        paths: Vec<PathBuf>,
        build: impl Fn(&[Vec<u8>]) -> Result<C, TlsError> + Send + Sync + 'static,
    ) -> Result<Arc<Self>, TlsError> {
        let contents = paths.iter().map(|p| read(p)).collect::<Result<Vec<_>, _>>()?;
        let config = Arc::new(build(&contents)?);
        Ok(Arc::new(Reloading {
            paths,
            build: Box::new(build),
            current: RwLock::new((config, contents)),
            checked: parking_lot::Mutex::new(std::time::Instant::now()),
        }))
    }

    /// The current config, after re-reading the files if [`RELOAD_INTERVAL`] has passed since
    /// the last look (for users that make few connections and run no [`Reloading::watch`]:
    /// node-link clients).
    pub fn fresh(&self) -> Arc<C> {
        let due = {
            let mut checked = self.checked.lock();
            let due = checked.elapsed() >= RELOAD_INTERVAL;
            if due {
                *checked = std::time::Instant::now();
            }
            due
        };
        if due && let Err(e) = self.reload() {
            tracing::warn!(error = %e, files = ?self.paths, "TLS files changed but cannot be used; still using the previous ones");
        }
        self.current()
    }

    /// The config new connections use.
    pub fn current(&self) -> Arc<C> {
        self.current.read().0.clone()
    }

    /// Re-reads the files; rebuilds if any changed. `Ok(true)`: a new config is in use;
    /// `Err`: the files changed but do not make a valid config (the old one stays).
    pub fn reload(&self) -> Result<bool, TlsError> {
        let contents = self.paths.iter().map(|p| read(p)).collect::<Result<Vec<_>, _>>()?;
        if contents == self.current.read().1 {
            return Ok(false);
        }
        let config = Arc::new((self.build)(&contents)?);
        *self.current.write() = (config, contents);
        Ok(true)
    }

    /// Reloads every [`RELOAD_INTERVAL`] until `stop` resolves, logging what happened.
    pub async fn watch(self: Arc<Self>, what: &'static str, stop: impl std::future::Future<Output = ()>) {
        tokio::pin!(stop);
        let mut failing = false;
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(RELOAD_INTERVAL) => {}
            }
            match self.reload() {
                Ok(true) => {
                    failing = false;
                    tracing::info!(what, files = ?self.paths, "TLS certificates changed on disk; new connections use them");
                }
                Ok(false) => failing = false,
                // Logged once per failure streak: a rotation in progress may take a few polls.
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(what, error = %e, "TLS files changed but cannot be used; still serving the previous ones");
                }
                Err(_) => {}
            }
        }
    }
}

/// A server config from `files`, re-read on change; `alpn` names the protocols offered
/// (`h2` for gRPC, none for RESP).
pub fn reloading_server(
    files: &TlsFiles,
    auth: ClientAuth,
    alpn: &'static [&'static [u8]],
) -> Result<Arc<Reloading<ServerConfig>>, TlsError> {
    let f = files.clone();
    Reloading::new(files.paths(), move |contents| f.server(contents, auth, alpn))
}

/// A mutual-TLS client config from `files` (the CA is required), re-read on change.
pub fn reloading_client(
    files: &TlsFiles,
    alpn: &'static [&'static [u8]],
) -> Result<Arc<Reloading<ClientConfig>>, TlsError> {
    let f = files.clone();
    Reloading::new(files.paths(), move |contents| f.client(contents, alpn))
}

impl Reloading<ServerConfig> {
    /// An acceptor with the current config.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current())
    }
}

impl Reloading<ClientConfig> {
    /// A connector with the current config (re-read if due: see [`Reloading::fresh`]).
    pub fn connector(&self) -> TlsConnector {
        TlsConnector::from(self.fresh())
    }
}

/// Mutual TLS on node links, from one set of files: a node's gRPC port serves `server` (peers
/// must present a certificate from the CA) and its own calls to other nodes present `client`.
#[derive(Debug, Clone)]
pub struct LinkTls {
    pub server: Arc<Reloading<ServerConfig>>,
    pub client: Arc<Reloading<ClientConfig>>,
}

impl LinkTls {
    pub fn load(files: &TlsFiles) -> Result<LinkTls, TlsError> {
        Ok(LinkTls {
            server: reloading_server(files, ClientAuth::Yes, GRPC_ALPN)?,
            client: reloading_client(files, GRPC_ALPN)?,
        })
    }
}

/// The name a peer's certificate is checked against when connecting to `host` (a DNS name or
/// an IP address).
pub fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']').to_string())
        .map_err(|e| format!("{host:?} cannot be checked against a certificate: {e}"))
}
