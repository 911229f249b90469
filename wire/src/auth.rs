//! Node-link authentication: the cluster secret.
//!
//! A node's gRPC port reads and writes keys, flushes, adopts topologies and hands shards over, so
//! it must not answer just anyone who can reach it. Every member of a cluster (nodes, routers, the
//! coordinator and failover writer, the operator) holds one secret; every call a member makes to
//! a node carries it in the metadata entry [`METADATA_KEY`], and a node that has a secret refuses
//! any call without the same one with `UNAUTHENTICATED` (compared in constant time) and counts it.
//!
//! Whoever opens a client names the secret it sends (`ClientOptions::secret`, carried by
//! [`Attach`]); there is no process-wide one, since a router with embedded nodes, a test process
//! running several clusters, or the operator each talk to clusters with secrets of their own. A
//! node checks calls with [`Check`], a tonic interceptor around its service, and sends its own
//! secret on the calls it makes (replication, slot pulls). Binaries take the secret from
//! `--cluster-secret-file` or `SHOAL_CLUSTER_SECRET` ([`from_flags`]); an embedded cluster (nodes
//! inside a router) generates one ([`ClusterSecret::generate`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use subtle::ConstantTimeEq;
use tonic::metadata::MetadataValue;
use tonic::{Request, Status};

/// The gRPC metadata entry that carries the secret.
pub const METADATA_KEY: &str = "x-shoal-cluster-secret";

/// Fewest characters a secret may have (a generated one has 64).
pub const MIN_LEN: usize = 16;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    #[error("the cluster secret must be at least {MIN_LEN} characters (it has {0})")]
    TooShort(usize),
    #[error("the cluster secret must be printable ASCII without spaces (it travels in gRPC metadata)")]
    NotPrintable,
    #[error("cannot read the cluster secret from {path}: {reason}")]
    File { path: String, reason: String },
}

/// A cluster's shared secret. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret(Arc<str>);

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

impl ClusterSecret {
    /// A secret as given (a flag, an environment variable); leading and trailing whitespace is
    /// dropped (files and Kubernetes Secrets often end in a newline).
    pub fn new(secret: &str) -> Result<ClusterSecret, SecretError> {
        let s = secret.trim();
        if !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(SecretError::NotPrintable);
        }
        if s.len() < MIN_LEN {
            return Err(SecretError::TooShort(s.len()));
        }
        Ok(ClusterSecret(s.into()))
    }

    /// The secret in file `path` (a mounted Kubernetes Secret, say).
    pub fn from_file(path: &std::path::Path) -> Result<ClusterSecret, SecretError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| SecretError::File { path: path.display().to_string(), reason: e.to_string() })?;
        ClusterSecret::new(&text)
    }

    /// 32 random bytes from the operating system, in hex.
    pub fn generate() -> ClusterSecret {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).expect("the operating system's random source");
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        ClusterSecret(hex.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `given` is this secret, in time that does not depend on where they differ.
    pub fn matches(&self, given: &[u8]) -> bool {
        constant_time_eq(self.0.as_bytes(), given)
    }
}

/// Whether `a` and `b` are equal, in time that does not depend on where they differ (passwords,
/// tokens and secrets are compared with it, so timing does not reveal how much of a guess was
/// right; only the length may show).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

/// The secret a binary was given: the file's content if a file is named, else the value, else
/// none.
pub fn from_flags(
    value: Option<&str>,
    file: Option<&std::path::Path>,
) -> Result<Option<ClusterSecret>, SecretError> {
    match (file, value) {
        (Some(path), _) => ClusterSecret::from_file(path).map(Some),
        (None, Some(v)) => ClusterSecret::new(v).map(Some),
        (None, None) => Ok(None),
    }
}

/// The flags every binary takes for the secret (`--cluster-secret`, `--cluster-secret-file`),
/// global so that subcommands (`shoal-node get`, `shoal-router reshard`) take them too.
#[cfg(feature = "cli")]
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SecretArgs {
    /// The cluster secret (16 or more printable characters): every gRPC call to a node must
    /// carry it, and this process's calls to nodes send it. Give every node, router and tool of a
    /// cluster the same one; prefer the environment variable or a file to the flag, which `ps`
    /// shows.
    #[arg(long, env = "SHOAL_CLUSTER_SECRET", hide_env_values = true, global = true)]
    pub cluster_secret: Option<String>,
    /// Read the cluster secret from this file (a mounted Kubernetes Secret); wins over
    /// --cluster-secret.
    #[arg(long, env = "SHOAL_CLUSTER_SECRET_FILE", global = true)]
    pub cluster_secret_file: Option<std::path::PathBuf>,
    /// Mutual TLS on node links: this process's certificate (PEM). A node serves its gRPC port
    /// over TLS and accepts only peers whose certificate chains to --link-tls-ca-file; routers,
    /// nodes and tools present it when they call a node. Re-read when the file changes.
    #[arg(long, env = "SHOAL_LINK_TLS_CERT_FILE", global = true)]
    pub link_tls_cert_file: Option<std::path::PathBuf>,
    /// The key of --link-tls-cert-file (PEM).
    #[arg(long, env = "SHOAL_LINK_TLS_KEY_FILE", global = true)]
    pub link_tls_key_file: Option<std::path::PathBuf>,
    /// The CA (PEM) every member's node-link certificate chains to.
    #[arg(long, env = "SHOAL_LINK_TLS_CA_FILE", global = true)]
    pub link_tls_ca_file: Option<std::path::PathBuf>,
}

#[cfg(feature = "cli")]
impl SecretArgs {
    /// The secret given, if any.
    pub fn secret(&self) -> Result<Option<ClusterSecret>, SecretError> {
        from_flags(self.cluster_secret.as_deref(), self.cluster_secret_file.as_deref())
    }

    /// The node-link certificate files, if given (all three or none).
    pub fn link_tls_files(&self) -> Result<Option<crate::tls::TlsFiles>, LinkError> {
        match (&self.link_tls_cert_file, &self.link_tls_key_file, &self.link_tls_ca_file) {
            (None, None, None) => Ok(None),
            (Some(cert), Some(key), Some(ca)) => {
                Ok(Some(crate::tls::TlsFiles { cert: cert.clone(), key: key.clone(), ca: Some(ca.clone()) }))
            }
            _ => Err(LinkError::Incomplete),
        }
    }

    /// What this process's calls to nodes carry: the secret and, with certificate files, mutual
    /// TLS (the files re-read when they change).
    pub fn credentials(&self) -> Result<Credentials, LinkError> {
        let tls = match self.link_tls_files()? {
            Some(files) => Some(crate::tls::reloading_client(&files, crate::tls::GRPC_ALPN)?),
            None => None,
        };
        Ok(Credentials { secret: self.secret()?, tls })
    }
}

/// Why the node-link flags cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("{0}")]
    Secret(#[from] SecretError),
    #[error("node-link TLS needs --link-tls-cert-file, --link-tls-key-file and --link-tls-ca-file together")]
    Incomplete,
    #[error("node-link TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
}

/// What a process's calls to nodes carry: the cluster secret (metadata on every call) and, when
/// node links use certificates, the mutual-TLS client config (re-read when its files change).
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    pub secret: Option<ClusterSecret>,
    pub tls: Option<Arc<crate::tls::Reloading<crate::tls::rustls::ClientConfig>>>,
}

impl Credentials {
    /// Only a secret (no TLS).
    pub fn secret(secret: Option<ClusterSecret>) -> Credentials {
        Credentials { secret, tls: None }
    }
}

/// The client side: adds the secret to every call.
#[derive(Clone, Debug)]
pub struct Attach(Option<MetadataValue<tonic::metadata::Ascii>>);

impl Attach {
    /// Sends `secret` (None: nothing).
    pub fn with(secret: Option<&ClusterSecret>) -> Attach {
        // A ClusterSecret is printable ASCII, so it is always a valid metadata value.
        Attach(secret.and_then(|s| MetadataValue::try_from(s.expose()).ok()))
    }
}

impl tonic::service::Interceptor for Attach {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = &self.0 {
            request.metadata_mut().insert(METADATA_KEY, v.clone());
        }
        Ok(request)
    }
}

/// The node side: refuses calls without the node's secret (none set: lets everything through).
#[derive(Clone, Debug, Default)]
pub struct Check {
    secret: Option<ClusterSecret>,
    refused: Arc<AtomicU64>,
}

impl Check {
    /// Checks against `secret`, counting refusals in `refused` (a node's metrics read it).
    pub fn new(secret: Option<ClusterSecret>, refused: Arc<AtomicU64>) -> Check {
        Check { secret, refused }
    }

    /// Calls refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

impl tonic::service::Interceptor for Check {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(secret) = &self.secret else { return Ok(request) };
        let given = request.metadata().get(METADATA_KEY).map(|v| v.as_bytes());
        if given.is_some_and(|g| secret.matches(g)) {
            return Ok(request);
        }
        self.refused.fetch_add(1, Ordering::Relaxed);
        Err(Status::unauthenticated(if given.is_some() {
            "wrong cluster secret: this node belongs to another cluster (check --cluster-secret)"
        } else {
            "this node requires the cluster secret (--cluster-secret / SHOAL_CLUSTER_SECRET on every member)"
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::service::Interceptor;

    #[test]
    fn secrets_are_checked_in_full_and_never_printed() {
        assert_eq!(ClusterSecret::new("short"), Err(SecretError::TooShort(5)));
        assert_eq!(ClusterSecret::new("has a space in it ok"), Err(SecretError::NotPrintable));
        let s = ClusterSecret::new("  0123456789abcdef\n").unwrap();
        assert_eq!(s.expose(), "0123456789abcdef", "trimmed");
        assert!(s.matches(b"0123456789abcdef"));
        assert!(!s.matches(b"0123456789abcdeF"));
        assert!(!s.matches(b"0123456789abcde"));
        assert!(!format!("{s:?}").contains("0123"));
        let g = ClusterSecret::generate();
        assert_eq!(g.expose().len(), 64);
        assert_ne!(g, ClusterSecret::generate());
    }

    #[test]
    fn a_check_lets_through_only_calls_that_attach_its_secret() {
        let secret = ClusterSecret::new("0123456789abcdef").unwrap();
        let mut check = Check::new(Some(secret.clone()), Arc::default());
        let sent = |attach: &mut Attach| attach.call(Request::new(())).unwrap();
        let ok = sent(&mut Attach::with(Some(&secret)));
        assert!(check.call(ok).is_ok());
        let none = check.call(sent(&mut Attach::with(None))).unwrap_err();
        assert_eq!(none.code(), tonic::Code::Unauthenticated);
        assert!(none.message().contains("requires the cluster secret"), "{}", none.message());
        let other = ClusterSecret::new("fedcba9876543210").unwrap();
        let wrong = check.call(sent(&mut Attach::with(Some(&other)))).unwrap_err();
        assert!(wrong.message().contains("wrong cluster secret"), "{}", wrong.message());
        assert_eq!(check.refused(), 2);
        // A node without a secret checks nothing.
        assert!(Check::new(None, Arc::default()).call(Request::new(())).is_ok());
    }
}
