//! Generates the gRPC code from `proto/shoal.proto`.
//!
//! The `.proto` is compiled to a descriptor set by `protox` (pure Rust) so that building Shoal never
//! needs a system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/shoal.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure()
        // Keys and values travel as `bytes::Bytes`: slices of the received buffer, no copies.
        .bytes(".")
        // The largest ops and replies, boxed: every `Op` and `Reply` is moved several times on
        // its way through a router and a node, and the rare large variants set their size. Ops
        // are 96 bytes instead of 144 (a script; a generic command's argument, key and scratch
        // lists), replies 48 instead of 88 (a slot transfer's entry; a script's ACL refusals).
        // SET ... IFEQ and the script admin ops (FUNCTION's payloads) are boxed too: a SET must
        // stay the largest op, alone (two variants of its size cost every op a tag word). `sizes`
        // in src/lib.rs's tests holds these sizes.
        .boxed(".shoal.v1.Op.kind.script")
        .boxed(".shoal.v1.Op.kind.command")
        .boxed(".shoal.v1.Op.kind.script_admin")
        .boxed(".shoal.v1.Reply.kind.entry")
        .boxed(".shoal.v1.Reply.kind.script")
        .boxed(".shoal.v1.Op.kind.set_if_equal")
        // prost's codec, reserving room for a batch's ops before decoding them (src/codec.rs).
        .codec_path("crate::codec::ShoalCodec")
        .compile_fds(descriptors)?;
    Ok(())
}
