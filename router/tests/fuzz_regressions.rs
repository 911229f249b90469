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

/// The `tls_resp` target's saved inputs, through the same harness and certificates.
#[test]
fn saved_tls_fuzz_inputs_still_pass() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let read = |p: &str| std::fs::read(root.join(p)).unwrap();
    let harness = shoal_router::fuzzing::TlsHarness::new(
        &read("tls/server.crt"),
        &read("tls/server.key"),
        &read("tls/ca.crt"),
    );
    let mut n = 0;
    for entry in std::fs::read_dir(root.join("regressions/tls_resp")).unwrap() {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| harness.run(&data)));
        assert!(result.is_ok(), "regression input {} fails again", path.display());
        n += 1;
    }
    assert!(n >= 4, "the saved inputs are there");
    // The harness really speaks TLS to the router: PING through it is answered.
    let replies = harness.run(b"\x01*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    assert!(replies.starts_with(b"+PONG\r\n-"), "{:?}", String::from_utf8_lossy(&replies));
    // Plaintext to the TLS port gets nothing back in plaintext.
    assert!(harness.run(b"\x00*1\r\n$4\r\nPING\r\n").windows(4).all(|w| w != b"PONG"));
}
