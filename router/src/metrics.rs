//! The router's own counters (the `/metrics` page that shows them is [`crate::scrape`]).

use std::sync::atomic::{AtomicU64, Ordering};

use shoal_telemetry::metrics::{Counter, Histogram, LATENCY_BUCKETS};

#[derive(Debug)]
pub struct RouterMetrics {
    pub connections: Counter,
    pub rejected_connections: Counter,
    /// TLS clients whose handshake failed (untrusted or expired certificate, plaintext on the
    /// TLS port) or timed out.
    pub tls_handshake_failures: Counter,
    pub commands: Counter,
    pub protocol_errors: Counter,
    pub auth_failures: Counter,
    pub http_requests: Counter,
    /// RESP clients disconnected for not authenticating in time.
    pub auth_timeouts: Counter,
    /// HTTP requests whose body did not arrive in time.
    pub http_body_timeouts: Counter,
    /// Clients refused because the request buffer budget could not cover them.
    pub buffer_refusals: Counter,
    /// Seconds from a command's dispatch to its reply being ready.
    pub command_seconds: Histogram,
    /// Fast-path (docs/fast-path.md) connections, requests, and error replies or refused frames.
    pub fast_connections: Counter,
    pub fast_requests: Counter,
    pub fast_errors: Counter,
    /// Where INFO's counters start from: their values at the last CONFIG RESETSTAT (Prometheus's
    /// counters above never go back, as a scraper expects).
    pub info_base: InfoBase,
}

/// INFO's `total_commands_processed`, `total_connections_received` and `rejected_connections`
/// count from the last CONFIG RESETSTAT, as Redis's do.
#[derive(Debug, Default)]
pub struct InfoBase {
    commands: AtomicU64,
    connections: AtomicU64,
    rejected: AtomicU64,
}

impl RouterMetrics {
    /// CONFIG RESETSTAT: INFO's counters start again from zero.
    pub fn reset_info(&self) {
        let b = &self.info_base;
        b.commands.store(self.commands.get(), Ordering::Relaxed);
        b.connections.store(self.connections.get(), Ordering::Relaxed);
        b.rejected.store(self.rejected_connections.get(), Ordering::Relaxed);
    }

    /// INFO's (commands processed, connections received, rejected connections).
    pub fn info_counts(&self) -> (u64, u64, u64) {
        let b = &self.info_base;
        let since = |c: &Counter, base: &AtomicU64| c.get().saturating_sub(base.load(Ordering::Relaxed));
        (
            since(&self.commands, &b.commands),
            since(&self.connections, &b.connections),
            since(&self.rejected_connections, &b.rejected),
        )
    }
}

impl Default for RouterMetrics {
    fn default() -> Self {
        RouterMetrics {
            connections: Counter::default(),
            rejected_connections: Counter::default(),
            tls_handshake_failures: Counter::default(),
            commands: Counter::default(),
            protocol_errors: Counter::default(),
            auth_failures: Counter::default(),
            http_requests: Counter::default(),
            auth_timeouts: Counter::default(),
            http_body_timeouts: Counter::default(),
            buffer_refusals: Counter::default(),
            command_seconds: Histogram::new(LATENCY_BUCKETS),
            fast_connections: Counter::default(),
            fast_requests: Counter::default(),
            fast_errors: Counter::default(),
            info_base: InfoBase::default(),
        }
    }
}
