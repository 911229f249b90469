//! Redis commands on typed values (hashes, ...), run on the node from a wire `Command` op.
//!
//! The router has looked the command up, checked its arity and routed it by its key; the node
//! parses the remaining arguments with Redis's rules and texts and answers a [`Frame`], which the
//! router encodes for the client's protocol (RESP2 or RESP3).
//!
//! Layers, top down (each file imports only from those below it):
//! - `run.rs`: a client's command: notifications raised around it (`crate::notify`), the answer
//!   wrapped as a wire reply; `run_scratch` for commands over keys of several nodes.
//! - `dispatch.rs`: the index of every command by name, and the call that locks its keys.
//! - the families: `hash.rs`, `list.rs`, `set.rs`, `zset.rs`, `bits.rs`, `hll.rs`, `multi.rs`
//!   (commands over several keys), `geo.rs` (GEO commands on sorted sets; its arithmetic in
//!   `geohash.rs`), `stream.rs` (X* commands on streams), `sort.rs` (SORT, SORT_RO),
//!   `object.rs`, `dump.rs` (DUMP, RESTORE; the payload's encoding in `payload.rs`), `strings.rs`
//!   (DELIFEQ), `hash_ttl.rs` (hash field expiry: HEXPIRE and its kin, HGETDEL, HGETEX,
//!   HSETEX), `scan.rs`
//!   (HSCAN and its kin), `random.rs` (the random-member counts).
//! - what the families share: `error.rs` (a command's failure), `args.rs` (integers, counts,
//!   ranges), `double.rs` (scores and `%.17g`), `frame.rs` (building and encoding replies),
//!   `pqsort.rs` (Redis's partial quicksort: GEO with COUNT, SORT BY with LIMIT).
//!
//! This file only declares the modules and re-exports what the rest of the node names.
//!
//! Every handler runs inside one `Store::read_object`/`write_object` call, so a command is atomic
//! on its key, exactly as on a single-threaded Redis.
//!
//! [`Frame`]: shoal_wire::proto::Frame

mod args;
mod bits;
pub(crate) mod dispatch;
mod double;
mod dump;
pub(crate) mod error;
mod frame;
mod fuzz;
pub(crate) mod geo;
mod geohash;
mod hash;
mod hash_ttl;
mod hll;
mod list;
mod multi;
mod object;
mod payload;
mod pqsort;
mod random;
mod run;
mod scan;
mod set;
mod sort;
mod stream;
mod stream_group;
mod strings;
pub(crate) mod zset;

pub use args::{MAX_RANDOM_REPEATS, check_repeats, int_arg, non_negative};
pub use dispatch::{frame_of, multi_key_keys};
pub use double::{fmt_g, fmt_g17};
pub use error::{CmdError, CmdResult, NOT_INTEGER, SYNTAX, make_room, wrong_arity};
pub use frame::{F, for_the_wire, raw_frame};
pub use fuzz::{fuzz_check_payload, fuzz_check_stream_id, fuzz_check_zset_args};
pub use run::{run, run_resp, run_scratch};
pub use sort::store_key as sort_store_key;
pub use stream::read_group_names;
