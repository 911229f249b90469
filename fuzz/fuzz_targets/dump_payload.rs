//! Fuzzes RESTORE's payload decoder: any payload decodes or is refused without a panic, and a
//! decoded value dumps and decodes to the same bytes (see
//! `shoal_node::commands::fuzz_check_payload`; the first byte chooses whether the rest is sealed
//! with a right checksum first, so the value decoder itself is reached).
//!
//!     cargo +nightly fuzz run dump_payload -- -max_total_time=300
//!
//! Crashing inputs go into `fuzz/regressions/dump_payload/`, which a normal test replays.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shoal_node::commands::fuzz_check_payload(data);
});
