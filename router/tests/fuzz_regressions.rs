//! Replays every input saved in `fuzz/regressions/resp_parser/` (crashes the fuzzer found once,
//! and hand-picked tricky inputs) through the fuzzing property, so they stay fixed.

#[test]
fn saved_fuzz_inputs_still_pass() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/resp_parser");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let result = std::panic::catch_unwind(|| shoal_router::resp::parse::fuzz_check(&data));
        assert!(result.is_ok(), "regression input {} fails again", path.display());
        n += 1;
    }
    assert!(n > 0, "no saved inputs in {}", dir.display());
}
