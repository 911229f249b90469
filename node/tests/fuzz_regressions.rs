//! Replays every input saved in `fuzz/regressions/<target>/` (typed_decode, zrange_args,
//! dump_payload, stream_ids)
//! (crashes the fuzzers found once, and hand-picked tricky inputs) through the fuzzing properties,
//! so they stay fixed, and so the properties run in the normal test suite without nightly.

fn replay(target: &str, check: fn(&[u8])) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions").join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let result = std::panic::catch_unwind(|| check(&data));
        assert!(result.is_ok(), "regression input {} fails again", path.display());
        n += 1;
    }
    assert!(n > 0, "no saved inputs in {}", dir.display());
}

#[test]
fn saved_typed_decode_inputs_still_pass() {
    replay("typed_decode", shoal_node::store::object::fuzz_check_decode);
}

#[test]
fn saved_zrange_args_inputs_still_pass() {
    replay("zrange_args", shoal_node::commands::fuzz_check_zset_args);
}

#[test]
fn saved_dump_payload_inputs_still_pass() {
    replay("dump_payload", shoal_node::commands::fuzz_check_payload);
}

#[test]
fn saved_stream_ids_inputs_still_pass() {
    replay("stream_ids", shoal_node::commands::fuzz_check_stream_id);
}
