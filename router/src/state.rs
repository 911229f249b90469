//! The state one router process shares across all its connections and front ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::backend::Cluster;
use crate::metrics::RouterMetrics;
use crate::resp::Limits;

/// Before AUTH, a client may buffer at most this much unparsed input.
pub const UNAUTH_QUERY_BUFFER_LIMIT: usize = 1024 * 1024;

/// The settings that shape request handling (the rest of the CLI only matters at startup).
#[derive(Debug, Clone)]
pub struct Settings {
    pub requirepass: Option<String>,
    pub protected_mode: bool,
    pub deadline: Duration,
    pub maxclients: usize,
    pub proto_max_bulk_len: usize,
    pub max_args: usize,
    pub query_buffer_limit: usize,
    pub output_buffer_limit: usize,
    pub http_max_body: usize,
    /// The RESP TCP port, for INFO.
    pub tcp_port: u16,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            requirepass: None,
            protected_mode: true,
            deadline: Duration::from_secs(1),
            maxclients: 10_000,
            proto_max_bulk_len: 512 * 1024 * 1024,
            max_args: 1 << 20,
            query_buffer_limit: 1 << 30,
            output_buffer_limit: 1 << 30,
            http_max_body: 64 * 1024 * 1024,
            tcp_port: 6379,
        }
    }
}

impl Settings {
    /// Parser limits for a connection in the given authentication state. (The parser applies
    /// the tighter pre-AUTH caps itself, so that it can answer with Redis's specific texts.)
    pub fn limits(&self, authenticated: bool) -> Limits {
        Limits { authenticated, max_bulk: self.proto_max_bulk_len, max_args: self.max_args }
    }

    pub fn query_buffer_limit(&self, authenticated: bool) -> usize {
        if authenticated { self.query_buffer_limit } else { UNAUTH_QUERY_BUFFER_LIMIT }
    }

    /// Checks a user/password pair. Only the `default` user exists; without a configured
    /// password it accepts anything, as Redis's `nopass` default user does.
    pub fn check_password(&self, user: &[u8], password: &[u8]) -> bool {
        if user != b"default" {
            return false;
        }
        match &self.requirepass {
            None => true,
            Some(p) => constant_time_eq(p.as_bytes(), password),
        }
    }
}

/// Compares without an early exit, so timing does not reveal how much of a guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for (i, &x) in a.iter().enumerate() {
        diff |= x ^ b.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

#[derive(Debug)]
pub struct RouterState {
    pub settings: Settings,
    pub cluster: Cluster,
    pub metrics: RouterMetrics,
    pub started: Instant,
    next_client_id: AtomicU64,
    connected: AtomicUsize,
    /// A BGSAVE is running (Redis refuses a second one).
    pub bgsave_running: std::sync::atomic::AtomicBool,
    /// The in-process nodes and coordinator, in embedded mode (SHOAL SCALE).
    pub embedded: Option<Arc<crate::embedded::EmbeddedCluster>>,
}

impl RouterState {
    pub fn new(
        settings: Settings,
        cluster: Cluster,
        embedded: Option<Arc<crate::embedded::EmbeddedCluster>>,
    ) -> Arc<RouterState> {
        Arc::new(RouterState {
            settings,
            cluster,
            metrics: RouterMetrics::default(),
            started: Instant::now(),
            next_client_id: AtomicU64::new(1),
            connected: AtomicUsize::new(0),
            bgsave_running: std::sync::atomic::AtomicBool::new(false),
            embedded,
        })
    }

    pub fn next_client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Takes a client slot; `None` when `maxclients` are already connected.
    pub fn admit(self: &Arc<Self>) -> Option<ClientSlot> {
        let prev = self.connected.fetch_add(1, Ordering::AcqRel);
        if prev >= self.settings.maxclients {
            self.connected.fetch_sub(1, Ordering::AcqRel);
            self.metrics.rejected_connections.inc();
            return None;
        }
        self.metrics.connections.inc();
        Some(ClientSlot(self.clone()))
    }

    pub fn connected_clients(&self) -> usize {
        self.connected.load(Ordering::Relaxed)
    }
}

/// A connected client; frees its slot when dropped.
#[derive(Debug)]
pub struct ClientSlot(Arc<RouterState>);

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.0.connected.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords() {
        let open = Settings::default();
        assert!(open.check_password(b"default", b"anything"));
        assert!(!open.check_password(b"bob", b"anything"));
        let locked = Settings { requirepass: Some("s3cret".into()), ..Settings::default() };
        assert!(locked.check_password(b"default", b"s3cret"));
        assert!(!locked.check_password(b"default", b"s3cre"));
        assert!(!locked.check_password(b"default", b"s3cret!"));
        assert!(!locked.check_password(b"default", b""));
    }

    #[test]
    fn limits_tighten_before_auth() {
        let s = Settings::default();
        assert!(!s.limits(false).authenticated, "the parser's pre-AUTH caps apply");
        assert_eq!(s.limits(true).max_bulk, 512 * 1024 * 1024);
        assert_eq!(s.query_buffer_limit(false), 1024 * 1024);
    }
}
