//! Fuzzes the TLS-wrapped RESP path (`--tls-port`): raw bytes to the TLS handshake, or RESP sent
//! through an established TLS session to the router's connection handling. Nothing may panic.
//! (See `shoal_router::fuzzing`.)
//!
//!     cargo +nightly fuzz run tls_resp -- -max_total_time=300
//!
//! Crashing inputs go into `fuzz/regressions/tls_resp/`, which a normal test replays.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use shoal_router::fuzzing::TlsHarness;

fn harness() -> &'static TlsHarness {
    static H: OnceLock<TlsHarness> = OnceLock::new();
    H.get_or_init(|| {
        TlsHarness::new(
            include_bytes!("../tls/server.crt"),
            include_bytes!("../tls/server.key"),
            include_bytes!("../tls/ca.crt"),
        )
    })
}

fuzz_target!(|data: &[u8]| {
    let _ = harness().run(data);
});
