//! Fuzzes the serialized form of typed values (snapshots, slot transfers, `Fetch`): any bytes, as
//! any type under any limits, decode or are refused without a panic, and a decoded value
//! round-trips (see `shoal_node::store::object::fuzz_check_decode`).
//!
//!     cargo +nightly fuzz run typed_decode -- -max_total_time=300
//!
//! Crashing inputs go into `fuzz/regressions/typed_decode/`, which a normal test replays.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shoal_node::store::object::fuzz_check_decode(data);
});
