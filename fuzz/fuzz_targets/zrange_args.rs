//! Fuzzes the arguments of ZRANGE (and its older forms), ZADD and the other range commands on a
//! small pre-filled store: no panics, and the sorted sets stay consistent (see
//! `shoal_node::commands::fuzz_check_zset_args`).
//!
//!     cargo +nightly fuzz run zrange_args -- -max_total_time=300
//!
//! Crashing inputs go into `fuzz/regressions/zrange_args/`, which a normal test replays.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shoal_node::commands::fuzz_check_zset_args(data);
});
