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

/// The `fast_frames` target's saved inputs, through the codec's property and the fast-path
/// connection harness.
#[test]
fn saved_fast_path_fuzz_inputs_still_pass() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/fast_frames");
    let harness = shoal_router::fuzzing::FastHarness::new();
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            shoal_wire::fast::fuzz_check(&data);
            harness.run(&data)
        }));
        assert!(result.is_ok(), "regression input {} fails again", path.display());
        n += 1;
    }
    assert!(n >= 5, "the saved inputs are there");
    // The harness really reaches the fast path: after the preamble and HELLO, PING is answered.
    let mut ping = vec![0u8];
    let mut frame = bytes::BytesMut::new();
    shoal_wire::fast::put_request(&mut frame, shoal_wire::fast::Op::Ping, 0, 42, b"", b"", 0);
    ping.extend_from_slice(&frame);
    let got = harness.run(&ping);
    let mut buf = bytes::BytesMut::from(&got[shoal_wire::fast::PREAMBLE_LEN..]);
    let hello = shoal_wire::fast::decode_reply(&mut buf, 1 << 20).unwrap().unwrap();
    let pong = shoal_wire::fast::decode_reply(&mut buf, 1 << 20).unwrap().unwrap();
    assert_eq!(
        (hello.status, pong.id, pong.status),
        (shoal_wire::fast::Status::Ok, 42, shoal_wire::fast::Status::Ok)
    );
}
