//! HyperLogLog commands: PFADD PFCOUNT PFMERGE, on Redis's own string representation
//! ([`crate::store::hll`]), so GET, DUMP and replication see the same bytes as on Redis.
//!
//! PFADD works on one key. PFCOUNT and PFMERGE run with their keys' shards locked (see
//! `multi`): PFCOUNT of one key writes the recomputed count back into the value's cache, as
//! Redis does; PFCOUNT of several keys counts their union without writing anything.

use bytes::Bytes;

use super::error::{CmdError, CmdResult, make_room};
use super::frame::F;
use crate::store::hll::{Corrupt, Hll, REGISTERS, count_raw, set_cached};
use crate::store::{Locked, Store};

const NOT_HLL: CmdError = CmdError::Text("WRONGTYPE Key is not a valid HyperLogLog string value.");
const INVALID: CmdError = CmdError::Text("INVALIDOBJ Corrupted HLL object detected");

impl From<Corrupt> for CmdError {
    fn from(_: Corrupt) -> Self {
        INVALID
    }
}

fn parse(b: &[u8]) -> Result<Hll, CmdError> {
    Hll::from_bytes(b).ok_or(NOT_HLL)
}

/// `PFADD key [element ...]`: 1 if the key was created or a register changed.
pub fn pfadd(store: &Store, args: &[Bytes]) -> CmdResult {
    make_room(store)?;
    store.write_string(&args[1], |slot| {
        let (mut h, mut updated) = match slot.get() {
            None => (Hll::new(), true),
            Some(b) => (parse(b)?, false),
        };
        let mut failed = None;
        for e in &args[2..] {
            match h.add(e) {
                Ok(changed) => updated |= changed,
                Err(c) => {
                    failed = Some(c);
                    break;
                }
            }
        }
        if let Some(c) = failed {
            // Redis edits in place, so what was added before the corruption showed stays (the
            // cache is left as it was).
            if slot.get() != Some(h.as_bytes()) {
                slot.set(h.as_bytes())?;
            }
            return Err(c.into());
        }
        if updated {
            h.invalidate();
            slot.set(h.as_bytes())?;
        }
        Ok(F::int(i64::from(updated)))
    })?
}

/// `PFCOUNT key [key ...]`.
pub fn pfcount(l: &mut Locked<'_>, args: &[Bytes]) -> CmdResult {
    if args.len() > 2 {
        let mut max = vec![0u8; REGISTERS];
        for k in &args[1..] {
            l.read_string(k, |v| match v {
                None => Ok::<(), CmdError>(()),
                Some(b) => Ok(parse(b)?.merge_into(&mut max)?),
            })??;
        }
        return Ok(F::int(count_raw(&max) as i64));
    }
    // Looked up as a read (a keyspace hit or miss, as in Redis); written only to store a
    // recomputed count in the cache.
    let found = l.read_string(&args[1], |v| match v {
        None => Ok::<_, CmdError>(None),
        Some(b) => {
            let h = parse(b)?;
            Ok(Some(match h.cached() {
                Some(card) => (card, false),
                None => (h.count()?, true),
            }))
        }
    })??;
    let Some((card, recomputed)) = found else { return Ok(F::int(0)) };
    if recomputed {
        l.write_string(&args[1], |slot| match slot.get().map(<[u8]>::len) {
            Some(len) => slot.edit(len, |v| set_cached(v, card)),
            None => Ok(()),
        })??;
    }
    Ok(F::int(card as i64))
}

/// `PFMERGE destkey [sourcekey ...]`: the destination (also an input) becomes the union; it turns
/// dense if any input is dense, as in Redis 7.0, else stays sparse while it fits.
pub fn pfmerge(l: &mut Locked<'_>, args: &[Bytes]) -> CmdResult {
    let mut max = vec![0u8; REGISTERS];
    let mut dense = false;
    for k in &args[1..] {
        l.read_string(k, |v| match v {
            None => Ok::<(), CmdError>(()),
            Some(b) => {
                let h = parse(b)?;
                dense |= h.is_dense();
                Ok(h.merge_into(&mut max)?)
            }
        })??;
    }
    l.write_string(&args[1], |slot| {
        let mut h = match slot.get() {
            None => Hll::new(),
            Some(b) => parse(b)?,
        };
        if dense {
            h.to_dense()?;
        }
        for (i, &m) in max.iter().enumerate() {
            if m != 0 {
                h.set(i, m)?;
            }
        }
        h.invalidate();
        slot.set(h.as_bytes())?;
        Ok(F::ok())
    })?
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::dispatch::dispatch;
    use super::*;
    use crate::store::{ManualClock, StoreConfig};

    fn cmd(store: &Store, args: &[&str]) -> CmdResult {
        let args: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a.as_bytes())).collect();
        dispatch(store, &args)
    }

    #[test]
    fn pfadd_pfcount_pfmerge() {
        let store = Store::new(StoreConfig::default(), Arc::new(ManualClock::new(1_000)));
        assert_eq!(cmd(&store, &["PFADD", "h"]), Ok(F::int(1)));
        assert_eq!(cmd(&store, &["PFADD", "h"]), Ok(F::int(0)));
        assert_eq!(cmd(&store, &["PFADD", "h", "a", "b"]), Ok(F::int(1)));
        assert_eq!(cmd(&store, &["PFADD", "h", "a"]), Ok(F::int(0)));
        // One key: the count is cached in the value.
        assert_eq!(store.get(b"h").map(|v| v[15]), Some(0x80));
        assert_eq!(cmd(&store, &["PFCOUNT", "h"]), Ok(F::int(2)));
        assert_eq!(store.get(b"h").map(|v| (v[8], v[15])), Some((2, 0)));
        // Batches of elements up to 100000 distinct: within a few standard errors (0.81%).
        let mut n = 0;
        while n < 100_000 {
            let mut args = vec!["PFADD".to_string(), "big".to_string()];
            args.extend((n..n + 1000).map(|i| format!("el:{i}")));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            assert_eq!(cmd(&store, &args), Ok(F::int(1)));
            n += 1000;
            let got = cmd(&store, &["PFCOUNT", "big"]).unwrap();
            let shoal_wire::proto::Frame { kind: Some(shoal_wire::proto::frame::Kind::Int(c)) } = got else {
                panic!("{got:?}")
            };
            assert!((c as f64 - n as f64).abs() / (n as f64) < 0.0325, "{n} counted as {c}");
        }
        assert_eq!(store.get(b"big").map(|v| v.len()), Some(crate::store::hll::DENSE_SIZE));
        // Several keys: the union, nothing written.
        let before = store.get(b"h");
        assert!(cmd(&store, &["PFCOUNT", "h", "big", "missing"]).is_ok());
        assert_eq!(store.get(b"h"), before);
        assert!(!store.exists(b"missing"));
        assert_eq!(cmd(&store, &["PFMERGE", "dst", "h", "big"]), Ok(F::ok()));
        assert_eq!(store.get(b"dst").map(|v| v.len()), Some(crate::store::hll::DENSE_SIZE));
        // Not HyperLogLogs.
        store.set(b"s", b"abc", Default::default()).unwrap();
        assert_eq!(cmd(&store, &["PFADD", "s", "x"]), Err(NOT_HLL));
        assert_eq!(cmd(&store, &["PFCOUNT", "h", "s"]), Err(NOT_HLL));
        assert_eq!(cmd(&store, &["PFMERGE", "s", "h"]), Err(NOT_HLL));
        assert_eq!(store.get(b"s").as_deref(), Some(&b"abc"[..]));
    }
}
