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

/// The node's libraries; `generation` is the store's payload generation they reflect, moved on
/// by every change the script thread makes (which then writes them back to the store).
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
        payload_of(&self.libs.values().map(|l| l.code.clone()).collect::<Vec<_>>())
    }
}

/// Redis's text for a bad library name, and (sic) for a bad function name.
pub const BAD_NAME: &str = "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long";

/// A library or function name Redis takes: letters, digits and underscores, at least one.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// `functionExtractLibMetaData`: the library's name and the code after its first line (the
/// newline kept, so line numbers hold).
pub fn metadata(code: &[u8]) -> Result<(String, &[u8]), String> {
    if !code.starts_with(b"#!") {
        return Err("Missing library metadata".into());
    }
    let end = code.iter().position(|&b| b == b'\n').ok_or("Invalid library metadata")?;
    let line = String::from_utf8_lossy(&code[..end]);
    let parts = shoal_wire::splitargs::split_args(line.as_bytes()).ok_or("Invalid library metadata")?;
    let Some((engine, options)) = parts.split_first() else {
        return Err("Invalid library metadata".into());
    };
    let mut name = None;
    for part in options {
        let part = String::from_utf8_lossy(part);
        if part.len() >= 5 && part[..5].eq_ignore_ascii_case("name=") {
            if name.is_some() {
                return Err("Invalid metadata value, name argument was given multiple times".into());
            }
            name = Some(part[5..].to_string());
            continue;
        }
        return Err(format!("Invalid metadata value given: {part}"));
    }
    let name = name.ok_or("Library name was not given")?;
    if !valid_name(&name) {
        return Err(BAD_NAME.into());
    }
    let engine = String::from_utf8_lossy(&engine[2..]).into_owned();
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(format!("Engine '{engine}' not found"));
    }
    Ok((name, &code[end..]))
}

/// The library codes of a FUNCTION DUMP payload's body.
pub fn payload_codes(body: &[u8]) -> Result<Vec<Bytes>, String> {
    let mut r = rdb::Reader::new(body);
    let mut codes = Vec::new();
    while !r.at_end() {
        let code = match r.byte().map_err(|_| "can not read data type")? {
            rdb::OPCODE_FUNCTION2 => r.string().map_err(|_| "Failed loading library payload")?,
            rdb::OPCODE_FUNCTION => {
                let name = r.string().map_err(|_| "Failed loading library name")?;
                let engine = r.string().map_err(|_| "Failed loading engine name")?;
                if r.read_len().map_err(|_| "Failed loading library description indicator")? != 0 {
                    r.string().map_err(|_| "Failed loading library description")?;
                }
                let blob = r.string().map_err(|_| "Failed loading library blob")?;
                let mut code = b"#!".to_vec();
                code.extend_from_slice(&engine);
                code.extend_from_slice(b" name=");
                code.extend_from_slice(&name);
                code.push(b'\n');
                code.extend_from_slice(&blob);
                code
            }
            _ => return Err("given type is not a function".into()),
        };
        codes.push(Bytes::from(code));
    }
    Ok(codes)
}

/// A payload of `codes`, as FUNCTION DUMP writes one.
pub fn payload_of(codes: &[Bytes]) -> Vec<u8> {
    let mut out = Vec::new();
    for code in codes {
        out.push(rdb::OPCODE_FUNCTION2);
        rdb::put_string(&mut out, code);
    }
    rdb::seal(&mut out);
    out
}

/// The libraries of payload `into` with those of `from` added, a library of `from` taking the
/// place of one of the same name (what a node that receives slots or a replica's copy does with
/// the libraries that come with them). An empty or unreadable side counts as no libraries.
pub fn merge(into: &[u8], from: &[u8]) -> Vec<u8> {
    let codes = |p: &[u8]| rdb::verify(p).and_then(|(body, _)| payload_codes(body).ok()).unwrap_or_default();
    let mut libs: BTreeMap<String, Bytes> = BTreeMap::new();
    for code in codes(into).into_iter().chain(codes(from)) {
        if let Ok((name, _)) = metadata(&code) {
            libs.insert(name, code);
        }
    }
    payload_of(&libs.into_values().collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_texts_are_redis_s() {
        assert_eq!(metadata(b"return 1").unwrap_err(), "Missing library metadata");
        assert_eq!(metadata(b"#!lua name=x").unwrap_err(), "Invalid library metadata");
        assert_eq!(metadata(b"#!lua\n").unwrap_err(), "Library name was not given");
        assert_eq!(
            metadata(b"#!lua name=a name=b\n").unwrap_err(),
            "Invalid metadata value, name argument was given multiple times"
        );
        assert_eq!(metadata(b"#!lua foo=bar\n").unwrap_err(), "Invalid metadata value given: foo=bar");
        assert_eq!(metadata(b"#!lua name=a-b\n").unwrap_err(), BAD_NAME);
        assert_eq!(metadata(b"#!js name=a\n").unwrap_err(), "Engine 'js' not found");
        let (name, body) = metadata(b"#!LUA NAME=lib_1\nreturn 1").unwrap();
        assert_eq!((name.as_str(), body), ("lib_1", &b"\nreturn 1"[..]));
    }
}
