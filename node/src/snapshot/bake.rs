//! `shoal-node bake`: builds a snapshot offline from CSV or JSONL, the Zero-KV workflow (bake a
//! dataset, start a node on it, serve at once).
//!
//! CSV: `key,value[,ttl_seconds]` per record, RFC 4180 quoting (`"a,b"`, `"say ""hi"""`, and
//! newlines inside quotes), `\n` or `\r\n` line ends; an optional header row `key,value` or
//! `key,value,ttl_seconds` is skipped; fields are raw bytes. JSONL: one object per line,
//! `{"key": "...", "value": "...", "ttl": seconds}` (`ttl` optional) for a string, or in place of
//! `value` exactly one of `"hash": {"field": "value", ...}`, `"list": ["a", ...]`,
//! `"set": ["a", ...]`, `"zset": {"member": score, ...}` for a typed value (a hash's fields are
//! stored in key order; an empty collection is refused, as Redis has none). Blank lines are
//! skipped; a key given twice keeps its last value, as a sequence of SETs would. Errors name the
//! line.
//!
//! Input is read as a stream and entries are packed into one arena (key and value bytes plus a
//! 40-byte record each) so they can be sorted by (slot, key) before writing.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use shoal_wire::key_slot;

use super::dir;
use super::writer::SnapshotWriter;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputFormat {
    Csv,
    Jsonl,
}

impl std::str::FromStr for InputFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "csv" => Ok(InputFormat::Csv),
            "jsonl" | "ndjson" => Ok(InputFormat::Jsonl),
            other => Err(format!("unknown input format '{other}' (csv or jsonl)")),
        }
    }
}

impl InputFormat {
    /// Guesses from the file extension: `.jsonl`/`.ndjson` are JSONL, anything else CSV.
    pub fn for_path(path: &Path) -> InputFormat {
        match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
            Some("jsonl" | "ndjson") => InputFormat::Jsonl,
            _ => InputFormat::Csv,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BakeError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}:{line}: {message}")]
    Parse { path: PathBuf, line: u64, message: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Baked {
    pub path: PathBuf,
    pub records: u64,
    pub entries: u64,
    pub bytes: u64,
    pub duration: Duration,
}

/// One record: where its key and value are in the arena.
struct Record {
    slot: u16,
    key: (usize, usize),
    value: (usize, usize),
    expire_at: u64,
    seq: u64,
    value_type: u16,
}

struct Arena {
    bytes: Vec<u8>,
    records: Vec<Record>,
}

impl Arena {
    fn push(&mut self, key: &[u8], value: &[u8], expire_at: u64, value_type: u16) {
        let k = self.bytes.len();
        self.bytes.extend_from_slice(key);
        let v = self.bytes.len();
        self.bytes.extend_from_slice(value);
        let seq = self.records.len() as u64;
        self.records.push(Record {
            slot: key_slot(key),
            key: (k, key.len()),
            value: (v, value.len()),
            expire_at,
            seq,
            value_type,
        });
    }

    fn key(&self, r: &Record) -> &[u8] {
        &self.bytes[r.key.0..r.key.0 + r.key.1]
    }

    fn value(&self, r: &Record) -> &[u8] {
        &self.bytes[r.value.0..r.value.0 + r.value.1]
    }
}

/// Bakes `input` into a snapshot. `output` is a directory (the file gets the next
/// `snapshot-<seq>.shoal` name there, ready for `--data-dir`) or a file path. `progress` is
/// called with the number of records read so far, about every 100k records.
pub fn bake(
    input: &Path,
    output: &Path,
    format: InputFormat,
    mut progress: impl FnMut(u64),
) -> Result<Baked, BakeError> {
    let started = Instant::now();
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BakeError::Io { path: path.clone(), source }
    };
    let file = File::open(input).map_err(io_err(input))?;
    let reader = BufReader::with_capacity(1 << 20, file);
    // Relative TTLs in the input count from when the bake runs.
    let now_ms = shoal_wire::clock::Clock::now_ms(&shoal_wire::clock::SystemClock);
    let mut arena = Arena { bytes: Vec::new(), records: Vec::new() };
    let parse_err =
        |line: u64, message: String| BakeError::Parse { path: input.to_path_buf(), line, message };
    let mut on_record =
        |line: u64, key: &[u8], value: &[u8], ttl: Option<&[u8]>, value_type: u16| -> Result<(), BakeError> {
            let expire_at = match ttl {
                None => 0,
                Some([]) => 0,
                Some(t) => match shoal_wire::num::parse_i64(t) {
                    Some(s) if s > 0 => now_ms.saturating_add((s as u64).saturating_mul(1000)),
                    _ => {
                        return Err(parse_err(
                            line,
                            format!(
                                "ttl must be a positive integer (seconds), got {:?}",
                                String::from_utf8_lossy(t)
                            ),
                        ));
                    }
                },
            };
            arena.push(key, value, expire_at, value_type);
            if arena.records.len().is_multiple_of(100_000) {
                progress(arena.records.len() as u64);
            }
            Ok(())
        };
    match format {
        InputFormat::Csv => read_csv(reader, &mut on_record, &parse_err, input)?,
        InputFormat::Jsonl => read_jsonl(reader, &mut on_record, &parse_err, input)?,
    }
    let records = arena.records.len() as u64;
    progress(records);

    // Sort by (slot, key), later records first among equal keys, then keep the first of each key.
    let mut order: Vec<usize> = (0..arena.records.len()).collect();
    order.sort_unstable_by(|&a, &b| {
        let (ra, rb) = (&arena.records[a], &arena.records[b]);
        (ra.slot, arena.key(ra)).cmp(&(rb.slot, arena.key(rb))).then(rb.seq.cmp(&ra.seq))
    });
    let target = if output.is_dir() || output.to_string_lossy().ends_with('/') {
        std::fs::create_dir_all(output).map_err(io_err(output))?;
        dir::next_path(output).map_err(io_err(output))?
    } else {
        output.to_path_buf()
    };
    let mut writer = SnapshotWriter::create(&target, now_ms).map_err(io_err(&target))?;
    let mut previous: Option<usize> = None;
    for &i in &order {
        let r = &arena.records[i];
        if previous.is_some_and(|p| {
            let q = &arena.records[p];
            q.slot == r.slot && arena.key(q) == arena.key(r)
        }) {
            continue; // an earlier record for the same key, superseded
        }
        writer
            .push_typed(r.slot, arena.key(r), arena.value(r), r.expire_at, r.value_type)
            .map_err(io_err(&target))?;
        previous = Some(i);
    }
    let written = writer.finish().map_err(io_err(&target))?;
    Ok(Baked {
        path: written.path,
        records,
        entries: written.entries,
        bytes: written.bytes,
        duration: started.elapsed(),
    })
}

/// `(line, key, value, ttl, value type)`; a typed value comes serialized.
type OnRecord<'a> = dyn FnMut(u64, &[u8], &[u8], Option<&[u8]>, u16) -> Result<(), BakeError> + 'a;
type ParseErr<'a> = dyn Fn(u64, String) -> BakeError + 'a;

/// RFC 4180 CSV, streamed byte by byte (quoted fields may span lines).
fn read_csv(
    input: impl Read,
    on_record: &mut OnRecord,
    err: &ParseErr,
    path: &Path,
) -> Result<(), BakeError> {
    let mut fields: Vec<Vec<u8>> = Vec::new();
    let mut field = Vec::new();
    let mut in_quotes = false;
    let mut after_quote = false; // just closed a quoted field
    let mut line: u64 = 1;
    let mut record_line: u64 = 1;
    let mut first_record = true;
    let mut bytes = BufReader::new(input).bytes().peekable();
    let mut finish = |fields: &mut Vec<Vec<u8>>, line: u64, first: &mut bool| -> Result<(), BakeError> {
        let is_header = *first
            && fields.len() >= 2
            && fields[0] == b"key"
            && fields[1] == b"value"
            && (fields.len() == 2 || fields[2] == b"ttl_seconds");
        *first = false;
        if is_header || (fields.len() == 1 && fields[0].is_empty()) {
            fields.clear();
            return Ok(());
        }
        match fields.len() {
            2 => on_record(line, &fields[0], &fields[1], None, 0)?,
            3 => on_record(line, &fields[0], &fields[1], Some(&fields[2]), 0)?,
            n => return Err(err(line, format!("expected key,value[,ttl_seconds] but found {n} fields"))),
        }
        fields.clear();
        Ok(())
    };
    while let Some(b) = bytes.next() {
        let b = b.map_err(|source| BakeError::Io { path: path.to_path_buf(), source })?;
        if in_quotes {
            match b {
                b'"' if bytes.peek().is_some_and(|n| n.as_ref().is_ok_and(|&n| n == b'"')) => {
                    bytes.next();
                    field.push(b'"');
                }
                b'"' => {
                    in_quotes = false;
                    after_quote = true;
                }
                b'\n' => {
                    line += 1;
                    field.push(b);
                }
                _ => field.push(b),
            }
            continue;
        }
        match b {
            b',' => {
                fields.push(std::mem::take(&mut field));
                after_quote = false;
            }
            b'\r' if bytes.peek().is_some_and(|n| n.as_ref().is_ok_and(|&n| n == b'\n')) => {}
            b'\n' => {
                fields.push(std::mem::take(&mut field));
                after_quote = false;
                finish(&mut fields, record_line, &mut first_record)?;
                line += 1;
                record_line = line;
            }
            b'"' if field.is_empty() && !after_quote => in_quotes = true,
            _ if after_quote => {
                return Err(err(
                    line,
                    "unexpected character after a closing quote (quote it as \"\")".into(),
                ));
            }
            b'"' => return Err(err(line, "a quote inside an unquoted field (quote the whole field)".into())),
            _ => field.push(b),
        }
    }
    if in_quotes {
        return Err(err(record_line, "unterminated quoted field".into()));
    }
    if !field.is_empty() || !fields.is_empty() || after_quote {
        fields.push(field);
        finish(&mut fields, record_line, &mut first_record)?;
    }
    Ok(())
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRecord {
    key: String,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    hash: Option<std::collections::BTreeMap<String, String>>,
    #[serde(default)]
    list: Option<Vec<String>>,
    #[serde(default)]
    set: Option<Vec<String>>,
    #[serde(default)]
    zset: Option<std::collections::BTreeMap<String, f64>>,
    #[serde(default)]
    ttl: Option<i64>,
}

impl JsonRecord {
    /// The record's value: its bytes (serialized for a typed value) and type number.
    fn value(&self) -> Result<(Vec<u8>, u16), String> {
        use crate::store::object::{Hash, Limits, List, Object, Set, ZSet};
        let limits = Limits::default();
        let given = [
            self.value.is_some(),
            self.hash.is_some(),
            self.list.is_some(),
            self.set.is_some(),
            self.zset.is_some(),
        ];
        if given.iter().filter(|&&g| g).count() != 1 {
            return Err("give exactly one of value, hash, list, set, zset".into());
        }
        if let Some(v) = &self.value {
            return Ok((v.as_bytes().to_vec(), 0));
        }
        let object = if let Some(h) = &self.hash {
            let mut o = Hash::default();
            for (f, v) in h {
                o.set(f.as_bytes(), v.as_bytes(), &limits);
            }
            Object::Hash(o)
        } else if let Some(l) = &self.list {
            Object::List(List::from_items(l.iter().map(|s| s.as_bytes()), limits.list_max_listpack_size))
        } else if let Some(m) = &self.set {
            Object::Set(Set::from_members(m.iter().map(|s| s.as_bytes()), &limits))
        } else {
            let mut z = ZSet::default();
            for (m, &score) in self.zset.iter().flatten() {
                if score.is_nan() {
                    return Err(format!("score of {m:?} is not a number"));
                }
                z.insert(m.as_bytes(), score, &limits);
            }
            Object::ZSet(z)
        };
        if object.is_empty() {
            return Err("an empty collection (Redis has no empty hashes, lists, sets or sorted sets)".into());
        }
        Ok((object.serialize(), object.value_type() as u16))
    }
}

fn read_jsonl(
    input: impl BufRead,
    on_record: &mut OnRecord,
    err: &ParseErr,
    path: &Path,
) -> Result<(), BakeError> {
    for (i, line) in input.lines().enumerate() {
        let line = line.map_err(|source| BakeError::Io { path: path.to_path_buf(), source })?;
        let n = i as u64 + 1;
        if line.trim().is_empty() {
            continue;
        }
        let rec: JsonRecord =
            serde_json::from_str(&line).map_err(|e| err(n, format!("invalid JSON record: {e}")))?;
        let ttl = rec.ttl.map(|t| t.to_string());
        let (value, value_type) = rec.value().map_err(|m| err(n, m))?;
        on_record(n, rec.key.as_bytes(), &value, ttl.as_deref().map(str::as_bytes), value_type)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Lookup, Snapshot};

    fn bake_text(text: &str, format: InputFormat) -> Result<(tempfile::TempDir, Snapshot), BakeError> {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("input");
        std::fs::write(&input, text).unwrap();
        let out = dir.path().join("data/");
        let baked = bake(&input, &out, format, |_| {})?;
        let snap = Snapshot::open(&baked.path).unwrap();
        Ok((dir, snap))
    }

    fn get(s: &Snapshot, key: &str) -> Option<Vec<u8>> {
        match s.get(key_slot(key.as_bytes()), key.as_bytes()) {
            Lookup::Found(e) => Some(e.value.to_vec()),
            _ => None,
        }
    }

    #[test]
    fn csv_with_quoting() {
        let text = "key,value\nplain,v1\n\"with,comma\",\"a,b\"\nquote,\"say \"\"hi\"\"\"\nnl,\"line1\nline2\"\r\nempty,\nttl,v,100\nplain,v2\n";
        let (_d, s) = bake_text(text, InputFormat::Csv).unwrap();
        assert_eq!(s.len(), 6, "header skipped, duplicate key kept once");
        assert_eq!(get(&s, "plain").unwrap(), b"v2", "last value wins");
        assert_eq!(get(&s, "with,comma").unwrap(), b"a,b");
        assert_eq!(get(&s, "quote").unwrap(), b"say \"hi\"");
        assert_eq!(get(&s, "nl").unwrap(), b"line1\nline2");
        assert_eq!(get(&s, "empty").unwrap(), b"");
        let Lookup::Found(e) = s.get(key_slot(b"ttl"), b"ttl") else { panic!() };
        assert!(e.expire_at > 0);
        assert_eq!(s.verify(), crate::snapshot::VerifyReport { entries: 6, ..Default::default() });
    }

    #[test]
    fn csv_errors_name_the_line() {
        let cases = [
            ("a,1\nb,2\nc\n", 3, "expected key,value[,ttl_seconds] but found 1 fields"),
            ("a,1\nb,\"open\n", 2, "unterminated quoted field"),
            ("a,1\nb,\"x\"y\n", 2, "unexpected character after a closing quote"),
            ("a,1\nb,x\"y\n", 2, "a quote inside an unquoted field"),
            ("a,1,0\n", 1, "ttl must be a positive integer"),
            ("a,1\n\"multi\nline\",v,x\n", 2, "ttl must be a positive integer"),
        ];
        for (text, line, msg) in cases {
            match bake_text(text, InputFormat::Csv) {
                Err(BakeError::Parse { line: l, message, .. }) => {
                    assert_eq!(l, line, "{text:?}: {message}");
                    assert!(message.starts_with(msg), "{text:?}: {message}");
                }
                other => panic!("{text:?}: expected a parse error, got {:?}", other.map(|_| ())),
            }
        }
    }

    #[test]
    fn jsonl_records() {
        let text = "{\"key\":\"a\",\"value\":\"1\"}\n\n{\"key\":\"b\",\"value\":\"x\\ny\",\"ttl\":60}\n";
        let (_d, s) = bake_text(text, InputFormat::Jsonl).unwrap();
        assert_eq!(get(&s, "b").unwrap(), b"x\ny");
        match bake_text("{\"key\":\"a\",\"value\":\"1\"}\n{\"key\":1}\n", InputFormat::Jsonl) {
            Err(BakeError::Parse { line: 2, .. }) => {}
            other => panic!("{:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn jsonl_typed_records_are_served_as_their_types() {
        use crate::commands;
        use crate::persistence::Persistence;
        use crate::store::{ManualClock, Store, StoreConfig};
        let text = r#"{"key":"h","hash":{"b":"2","a":"1"},"ttl":600}
{"key":"l","list":["x","y","x"]}
{"key":"s","set":["3","1","2"]}
{"key":"z","zset":{"low":-1.5,"high":10}}
{"key":"str","value":"plain"}
"#;
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.jsonl");
        std::fs::write(&input, text).unwrap();
        let data = dir.path().join("data/");
        let baked = bake(&input, &data, InputFormat::Jsonl, |_| {}).unwrap();
        assert_eq!(baked.entries, 5);
        let store = std::sync::Arc::new(Store::new(
            StoreConfig::default(),
            std::sync::Arc::new(ManualClock::new(1_000)),
        ));
        Persistence::open(store.clone(), Some(data), 2).unwrap();
        let run = |args: &[&str]| {
            let args: Vec<bytes::Bytes> =
                args.iter().map(|a| bytes::Bytes::copy_from_slice(a.as_bytes())).collect();
            format!("{:?}", commands::run(&store, &args))
        };
        assert!(run(&["HGET", "h", "a"]).contains("Bulk(b\"1\")"));
        assert!(
            run(&["LRANGE", "l", "0", "-1"]).contains("\\r\\nx\\r\\n")
                && run(&["LLEN", "l"]).contains("Int(3)")
        );
        assert!(run(&["SISMEMBER", "s", "2"]).contains("Int(1)"));
        assert!(run(&["ZSCORE", "z", "low"]).contains("-1.5"));
        assert_eq!(store.type_of(b"z"), "zset");
        assert_eq!(store.type_of(b"str"), "string");
        assert!(matches!(store.ttl(b"h"), crate::store::TtlState::ExpiresAt(_)));
        for bad in [r#"{"key":"a","hash":{},"value":"x"}"#, r#"{"key":"a","list":[]}"#, r#"{"key":"a"}"#] {
            match bake_text(bad, InputFormat::Jsonl) {
                Err(BakeError::Parse { line: 1, .. }) => {}
                other => panic!("{bad}: {:?}", other.map(|_| ())),
            }
        }
    }
}
