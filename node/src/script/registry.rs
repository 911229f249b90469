//! The node's function libraries as code and metadata ([`Registry`]): what FUNCTION LIST,
//! STATS and DUMP read and snapshots keep. A leaf: the script thread compiles the code
//! (`super::functions`), [`super::shared`] holds the registry.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::rdb;

/// Function flags in Redis's order (`scripts_flags_def`), as bits of [`FnMeta::flags`].
pub const FLAG_NAMES: [&str; 5] =
    ["no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys"];

/// A registered function: its description and flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FnMeta {
    pub desc: Option<Bytes>,
    pub flags: u8,
}

/// A library: its name and whole code (shebang included, as FUNCTION LIST WITHCODE shows it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Library {
    pub name: String,
    pub code: Bytes,
    pub functions: BTreeMap<String, FnMeta>,
}

/// The node's libraries; `generation` moves with every change.
#[derive(Debug, Default)]
pub struct Registry {
    pub libs: BTreeMap<String, Library>,
    pub generation: u64,
}

impl Registry {
    /// The library that registered `function` (function names are unique across libraries
    /// ignoring case, as Redis's function table compares them).
    pub fn owner(&self, function: &str) -> Option<&str> {
        let found = |l: &&Library| l.functions.keys().any(|f| f.eq_ignore_ascii_case(function));
        self.libs.values().find(found).map(|l| l.name.as_str())
    }

    pub fn function_count(&self) -> usize {
        self.libs.values().map(|l| l.functions.len()).sum()
    }

    /// FUNCTION DUMP's payload: each library's code after the FUNCTION2 opcode, then the trailer.
    pub fn dump(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for lib in self.libs.values() {
            out.push(rdb::OPCODE_FUNCTION2);
            rdb::put_string(&mut out, &lib.code);
        }
        rdb::seal(&mut out);
        out
    }
}
