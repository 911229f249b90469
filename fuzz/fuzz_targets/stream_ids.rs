//! Fuzzes the stream ID parser in each of its forms (see
//! `shoal_node::commands::fuzz_check_stream_id`).
//!
//!     cargo +nightly fuzz run stream_ids -- -max_total_time=300
//!
//! Crashing inputs go into `fuzz/regressions/stream_ids/`, which a normal test replays.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shoal_node::commands::fuzz_check_stream_id(data);
});
