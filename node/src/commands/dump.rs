//! DUMP and RESTORE: a key's value out as Redis's serialized payload and back
//! (`super::payload` is the encoding), with 7.0's options, checks, order of checks and texts.

use bytes::Bytes;

use super::args::int_arg;
use super::error::{CmdError, CmdResult, SYNTAX, make_room};
use super::frame::F;
use super::payload::{self, Value};
use crate::store::Store;
use crate::store::object::{Object, ValueType};

type Handler = fn(&Store, &[Bytes]) -> CmdResult;

pub static TABLE: &[(&str, Handler)] = &[("dump", dump), ("restore", restore)];

const BUSYKEY: CmdError = CmdError::Text("BUSYKEY Target key name already exists.");

/// `DUMP key`: the payload, or nil for a missing key. A read: the key's LRU clock is touched.
fn dump(store: &Store, args: &[Bytes]) -> CmdResult {
    if args.len() != 2 {
        return Err(super::error::wrong_arity(&args[0]));
    }
    let key = &args[1];
    store.with_keys(&[key], |l| {
        let Some(t) = l.value_type(key) else { return Ok(F::nil()) };
        let payload = if t == ValueType::String {
            l.read_string(key, |v| v.map(payload::dump_string))?
        } else {
            l.read_object(key, t, |o| o.map(payload::dump_object))?
        };
        Ok(payload.map_or_else(F::nil, F::bulk))
    })
}

/// RESTORE's options after the payload.
#[derive(Default)]
struct Options {
    replace: bool,
    absttl: bool,
    idle_secs: Option<u64>,
    freq: Option<u8>,
}

/// `RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f]`. Checked in Redis's order:
/// options, an existing key (BUSYKEY unless REPLACE), the TTL, the payload's version and
/// checksum, then its contents. A TTL already past stores nothing (and REPLACE deletes the old
/// value). FREQ sets the LFU counter under an LFU policy, IDLETIME the idle time under the others.
fn restore(store: &Store, args: &[Bytes]) -> CmdResult {
    if args.len() < 4 {
        return Err(super::error::wrong_arity(&args[0]));
    }
    let opts = options(&args[4..])?;
    let key = &args[1];
    make_room(store)?;
    let limits = store.limits();
    store.with_keys(&[key], |l| {
        if !opts.replace && l.value_type(key).is_some() {
            return Err(BUSYKEY);
        }
        let ttl = int_arg(&args[2])?;
        if ttl < 0 {
            return Err(CmdError::Text("ERR Invalid TTL value, must be >= 0"));
        }
        let value = match payload::undump(&args[3], &limits) {
            None => return Err(CmdError::Text("ERR DUMP payload version or checksum are wrong")),
            Some(Err(_)) => return Err(CmdError::Text("ERR Bad data format")),
            Some(Ok(v)) => v,
        };
        let expire_at = match ttl {
            0 => 0,
            t if opts.absttl => t as u64,
            t => l.now_ms().saturating_add(t as u64),
        };
        if opts.replace {
            l.delete(key);
        }
        if expire_at != 0 && expire_at <= l.now_ms() {
            return Ok(F::ok());
        }
        let (bytes, object) = match value {
            Value::String(s) => (s, None),
            Value::Object(o) => (Vec::new(), Some(Box::<Object>::new(o))),
        };
        l.restore_value(key, &bytes, object, expire_at)?;
        // As Redis's `objectSetLRUOrLFU`: FREQ counts under an LFU policy, IDLETIME under the others.
        match (store.policy().is_lfu(), opts.freq, opts.idle_secs) {
            (true, Some(f), _) => l.set_freq(key, f),
            (false, _, Some(secs)) => l.set_idle(key, secs),
            _ => {}
        }
        Ok(F::ok())
    })
}

fn options(args: &[Bytes]) -> Result<Options, CmdError> {
    let mut o = Options::default();
    let mut freq_given = false;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        let more = i + 1 < args.len();
        if a.eq_ignore_ascii_case(b"replace") {
            o.replace = true;
        } else if a.eq_ignore_ascii_case(b"absttl") {
            o.absttl = true;
        } else if a.eq_ignore_ascii_case(b"idletime") && more && !freq_given {
            let n = int_arg(&args[i + 1])?;
            if n < 0 {
                return Err(CmdError::Text("ERR Invalid IDLETIME value, must be >= 0"));
            }
            o.idle_secs = Some(n as u64);
            i += 1;
        } else if a.eq_ignore_ascii_case(b"freq") && more && o.idle_secs.is_none() {
            let n = int_arg(&args[i + 1])?;
            if !(0..=255).contains(&n) {
                return Err(CmdError::Text("ERR Invalid FREQ value, must be >= 0 and <= 255"));
            }
            freq_given = true;
            o.freq = Some(n as u8);
            i += 1;
        } else {
            return Err(SYNTAX);
        }
        i += 1;
    }
    Ok(o)
}
