//! Fuzzes the RESP request parser: no panics, and the same result however the input is split
//! into reads (see `shoal_router::resp::parse::fuzz_check`).
//!
//!     cargo +nightly fuzz run resp_parser -- -max_total_time=300
//!
//! Crashing inputs go into `fuzz/regressions/resp_parser/`, which a normal test replays.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shoal_router::resp::parse::fuzz_check(data);
});
