//! The router's own counters (the `/metrics` page that shows them is [`crate::scrape`]).

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
        }
    }
}
