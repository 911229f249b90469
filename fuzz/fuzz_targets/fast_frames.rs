//! Fuzzes the binary fast path (docs/fast-path.md): the codec's decoders over arbitrary bytes
//! (`shoal_wire::fast::fuzz_check`: never a panic, never a loop, frames consistent with their
//! headers), then the same bytes as a client's side of a router connection, through protocol
//! negotiation and the fast-path connection's state machine (`shoal_router::fuzzing::FastHarness`).
//!
//!     cargo +nightly fuzz run fast_frames -- -max_total_time=300
//!
//! Crashing inputs go into `fuzz/regressions/fast_frames/`, which a normal test replays.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use shoal_router::fuzzing::FastHarness;

fn harness() -> &'static FastHarness {
    static H: OnceLock<FastHarness> = OnceLock::new();
    H.get_or_init(FastHarness::new)
}

fuzz_target!(|data: &[u8]| {
    shoal_wire::fast::fuzz_check(data);
    let _ = harness().run(data);
});
